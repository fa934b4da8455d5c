//! The replication commands a physical standby sends, parsed from a simple Query string
//! (a subset of repl_gram.y / repl_scanner.l: keywords are case-insensitive, slot names
//! are plain or double-quoted identifiers, positions are `X/X`, an optional `;` ends it).

use walshadow_types::Lsn;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplCommand {
    IdentifySystem,
    TimelineHistory(u32),
    StartReplication {
        slot: Option<String>,
        start: Lsn,
        /// 0 when not given: the current timeline.
        timeline: u32,
    },
    Show(String),
    /// An empty query string.
    Empty,
    /// Anything else: its first word, for the error message.
    Unsupported(String),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("syntax error in replication command {query:?}: {reason}")]
pub struct CommandSyntaxError {
    pub query: String,
    pub reason: String,
}

fn tokens(q: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut chars = q.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '"' {
            chars.next();
            let mut ident = String::from("\"");
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        ident.push('"');
                    }
                    Some('"') => break,
                    Some(ch) => ident.push(ch),
                    None => return Err("unterminated quoted identifier".into()),
                }
            }
            out.push(ident);
        } else if c == ';' {
            chars.next();
            if chars.any(|ch| !ch.is_whitespace()) {
                return Err("text after ';'".into());
            }
        } else {
            let mut word = String::new();
            while let Some(&ch) = chars.peek() {
                if ch.is_whitespace() || ch == ';' || ch == '"' {
                    break;
                }
                word.push(ch);
                chars.next();
            }
            out.push(word);
        }
    }
    Ok(out)
}

/// An identifier: quoted ones keep their case, plain ones are folded to lower case.
fn ident(tok: &str) -> String {
    match tok.strip_prefix('"') {
        Some(q) => q.to_owned(),
        None => tok.to_ascii_lowercase(),
    }
}

pub fn parse(query: &str) -> Result<ReplCommand, CommandSyntaxError> {
    let err = |reason: &str| CommandSyntaxError {
        query: query.to_owned(),
        reason: reason.to_owned(),
    };
    let toks = tokens(query).map_err(|r| err(&r))?;
    let upper: Vec<String> = toks.iter().map(|t| t.to_ascii_uppercase()).collect();
    let words: Vec<&str> = upper.iter().map(String::as_str).collect();
    let Some(first) = words.first() else {
        return Ok(ReplCommand::Empty);
    };
    match *first {
        "IDENTIFY_SYSTEM" => match words.len() {
            1 => Ok(ReplCommand::IdentifySystem),
            _ => Err(err("IDENTIFY_SYSTEM takes no arguments")),
        },
        "TIMELINE_HISTORY" => match words.as_slice() {
            [_, n] => n
                .parse::<u32>()
                .ok()
                .filter(|&t| t > 0)
                .map(ReplCommand::TimelineHistory)
                .ok_or_else(|| err("invalid timeline")),
            _ => Err(err("expected TIMELINE_HISTORY <tli>")),
        },
        "SHOW" => match toks.as_slice() {
            [_, name] => Ok(ReplCommand::Show(ident(name))),
            _ => Err(err("expected SHOW <name>")),
        },
        "START_REPLICATION" => {
            let mut i = 1;
            let mut slot = None;
            if words.get(i) == Some(&"SLOT") {
                let name = toks.get(i + 1).ok_or_else(|| err("slot name missing"))?;
                slot = Some(ident(name));
                i += 2;
            }
            match words.get(i) {
                Some(&"PHYSICAL") => i += 1,
                Some(&"LOGICAL") => {
                    return Err(err("logical replication is not served by the feeder"));
                }
                _ => {}
            }
            let start: Lsn = words
                .get(i)
                .and_then(|w| w.parse().ok())
                .ok_or_else(|| err("expected a start position X/X"))?;
            i += 1;
            let mut timeline = 0;
            if words.get(i) == Some(&"TIMELINE") {
                timeline = words
                    .get(i + 1)
                    .and_then(|w| w.parse::<u32>().ok())
                    .filter(|&t| t > 0)
                    .ok_or_else(|| err("invalid timeline"))?;
                i += 2;
            }
            if i != words.len() {
                return Err(err("unexpected words after the start position"));
            }
            Ok(ReplCommand::StartReplication {
                slot,
                start,
                timeline,
            })
        }
        other => Ok(ReplCommand::Unsupported(other.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walreceiver_commands() {
        assert_eq!(
            parse("IDENTIFY_SYSTEM").unwrap(),
            ReplCommand::IdentifySystem
        );
        assert_eq!(
            parse("identify_system;").unwrap(),
            ReplCommand::IdentifySystem
        );
        assert_eq!(
            parse("TIMELINE_HISTORY 2").unwrap(),
            ReplCommand::TimelineHistory(2)
        );
        // libpqrcv_startstreaming: START_REPLICATION [SLOT "s"] X/X TIMELINE n
        assert_eq!(
            parse("START_REPLICATION SLOT \"My\"\"slot\" 0/3000000 TIMELINE 1").unwrap(),
            ReplCommand::StartReplication {
                slot: Some("My\"slot".into()),
                start: Lsn(0x300_0000),
                timeline: 1
            }
        );
        assert_eq!(
            parse("START_REPLICATION PHYSICAL 1/0").unwrap(),
            ReplCommand::StartReplication {
                slot: None,
                start: Lsn(1 << 32),
                timeline: 0
            }
        );
        assert_eq!(
            parse("SHOW wal_segment_size").unwrap(),
            ReplCommand::Show("wal_segment_size".into())
        );
        assert_eq!(parse("  ").unwrap(), ReplCommand::Empty);
        assert_eq!(
            parse("BASE_BACKUP (LABEL 'x')").unwrap(),
            ReplCommand::Unsupported("BASE_BACKUP".into())
        );
        assert!(parse("START_REPLICATION 0/1 TIMELINE").is_err());
        assert!(parse("START_REPLICATION SLOT \"x").is_err());
        assert!(parse("START_REPLICATION LOGICAL 0/1").is_err());
        assert!(parse("TIMELINE_HISTORY 0").is_err());
    }
}
