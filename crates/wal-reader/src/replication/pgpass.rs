//! libpq's password file (`~/.pgpass`, or `PGPASSFILE`): where operators
//! keep a source password rather than in a URL or the environment.
//!
//! Each line is `hostname:port:database:username:password`; any of the
//! first four may be `*`; `\:` and `\\` stand for `:` and `\`; `#` starts
//! a comment line. The first matching line wins. As libpq does, a file
//! that its owner's group or others can read is ignored (with a warning).
//! A unix-socket connection matches `localhost` (libpq's rule for the
//! default socket directory) or the socket directory itself; a physical
//! replication connection matches the database `replication`.

use std::path::{Path, PathBuf};

use super::config::{ConnConfig, Host};

/// The password file to read: `PGPASSFILE`, else `$HOME/.pgpass`.
fn pgpass_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PGPASSFILE") {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("HOME").map(|h| Path::new(&h).join(".pgpass"))
}

/// The password for `cfg` from the password file, if a line matches.
pub fn lookup(cfg: &ConnConfig) -> Option<String> {
    let path = pgpass_path()?;
    let meta = std::fs::metadata(&path).ok()?;
    {
        use std::os::unix::fs::MetadataExt;
        if meta.mode() & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                "password file has group or world access; permissions should be u=rw (0600) or less: ignored"
            );
            return None;
        }
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let db = if cfg.physical {
        "replication".to_owned()
    } else {
        cfg.database()
    };
    find(&text, &cfg.host, cfg.port, &db, &cfg.user)
}

/// The first line of `text` that matches.
pub(crate) fn find(text: &str, host: &Host, port: u16, db: &str, user: &str) -> Option<String> {
    let hosts: Vec<String> = match host {
        Host::Tcp(h) => vec![h.clone()],
        Host::UnixDir(d) => vec!["localhost".into(), d.display().to_string()],
    };
    let port = port.to_string();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .find_map(|line| {
            let f = fields(line);
            let [h, p, d, u, pw] = f.as_slice() else {
                return None;
            };
            let matches = |field: &str, value: &str| field == "*" || field == value;
            (hosts.iter().any(|x| matches(h, x))
                && matches(p, &port)
                && matches(d, db)
                && matches(u, user))
            .then(|| pw.clone())
        })
}

/// Splits a line at unescaped `:` into (at most) five fields; the last one
/// (the password) takes the rest of the line.
fn fields(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        let last = out.len() - 1;
        match c {
            '\\' => {
                if let (Some(next), Some(f)) = (chars.next(), out.get_mut(last)) {
                    f.push(next);
                }
            }
            ':' if out.len() < 5 => out.push(String::new()),
            c => {
                if let Some(f) = out.get_mut(last) {
                    f.push(c);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "# comment\n\
        db.example:5432:replication:walshadow:repl\\:pass\n\
        db.example:5432:*:walshadow:sql\\\\pass\n\
        localhost:*:*:*:local\n";

    #[test]
    fn first_matching_line_wins() {
        let tcp = Host::Tcp("db.example".into());
        assert_eq!(
            find(FILE, &tcp, 5432, "replication", "walshadow").as_deref(),
            Some("repl:pass")
        );
        assert_eq!(
            find(FILE, &tcp, 5432, "postgres", "walshadow").as_deref(),
            Some("sql\\pass")
        );
        assert_eq!(find(FILE, &tcp, 5433, "postgres", "walshadow"), None);
        assert_eq!(find(FILE, &tcp, 5432, "postgres", "other"), None);
        let unix = Host::UnixDir("/run/postgresql".into());
        assert_eq!(
            find(FILE, &unix, 5432, "postgres", "anyone").as_deref(),
            Some("local")
        );
    }

    #[test]
    fn short_lines_match_nothing() {
        assert_eq!(find("a:b:c\n", &Host::Tcp("a".into()), 1, "c", "d"), None);
    }
}
