//! `tsquery`, read into `tsqueryout`'s text (tsquery.c, ts_type.h).
//!
//! Stored: after the varlena header an int32 item count, that many 12-byte
//! `QueryItem`s in prefix order, then the operands' strings. An operand
//! (`QI_VAL` = 1) holds its weight bits (A = 8 … D = 1), a prefix flag and,
//! in its last uint32, the string's length (bits 0–11) and its offset in
//! the string area (bits 12–31). An operator (`QI_OPR` = 2) holds `!` (1),
//! `&` (2), `|` (3) or a phrase (4) with its int16 distance. A binary
//! operator's right operand follows it, its left operand follows the
//! right's subtree (the `left` offset says where; the order says it too).
//! `tsquerysend`: a uint32 count, then per item its type, and for an
//! operand its weight, prefix flag and NUL-terminated string, for an
//! operator its code and a phrase's int16 distance, big-endian.
//!
//! Text: operands quoted (`'` and `\` doubled) with `:`, `*` for a prefix
//! and the weight letters; `!x`, `x & y`, `x | y`, `x <-> y` or `x <N> y`,
//! a subtree in `( … )` when its operator binds less tightly than its
//! parent's, or is a phrase on a phrase's right. Built without recursion:
//! a query of many terms is a deep tree.

const QI_VAL: u8 = 1;
const QI_OPR: u8 = 2;
const OP_NOT: u8 = 1;
const OP_AND: u8 = 2;
const OP_OR: u8 = 3;
const OP_PHRASE: u8 = 4;
/// `sizeof(QueryItem)`.
const ITEM_SIZE: usize = 12;

enum Item<'a> {
    Operand {
        text: &'a [u8],
        weight: u8,
        prefix: bool,
    },
    Operator {
        oper: u8,
        distance: i16,
    },
}

/// `tsearch_op_priority`.
fn priority(oper: u8) -> i32 {
    match oper {
        OP_NOT => 4,
        OP_AND => 2,
        OP_OR => 1,
        _ => 3,
    }
}

fn count(b: &[u8], big_endian: bool, min_item: usize) -> Result<usize, String> {
    let a = b
        .first_chunk::<4>()
        .ok_or_else(|| "no item count".to_string())?;
    let n = if big_endian {
        u32::from_be_bytes(*a)
    } else {
        u32::from_le_bytes(*a)
    };
    let n = usize::try_from(n).map_err(|_| format!("{n} items"))?;
    // No huge allocation from a hostile count.
    if n.saturating_mul(min_item) > b.len() {
        return Err(format!("{n} items in {} bytes", b.len()));
    }
    Ok(n)
}

fn operator(oper: u8, distance: i16) -> Result<Item<'static>, String> {
    if !matches!(oper, OP_NOT | OP_AND | OP_OR | OP_PHRASE) {
        return Err(format!("operator {oper}"));
    }
    Ok(Item::Operator { oper, distance })
}

/// A stored `tsquery` (varlena body: header stripped, detoasted).
pub(crate) fn stored_text(b: &[u8]) -> Result<String, String> {
    let n = count(b, false, ITEM_SIZE)?;
    let strings_at = 4 + ITEM_SIZE * n;
    let strings = b
        .get(strings_at..)
        .ok_or_else(|| format!("{n} items do not fit in {} bytes", b.len()))?;
    let mut items = Vec::with_capacity(n);
    for i in 0..n {
        let at = 4 + ITEM_SIZE * i;
        let item = b
            .get(at..at + ITEM_SIZE)
            .and_then(|s| s.first_chunk::<ITEM_SIZE>())
            .ok_or_else(|| format!("item {i} truncated"))?;
        let [ty, a, c, d, _, _, _, _, w0, w1, w2, w3] = *item;
        items.push(match ty {
            QI_VAL => {
                let word = u32::from_le_bytes([w0, w1, w2, w3]);
                let (len, off) = ((word & 0xfff) as usize, (word >> 12) as usize);
                let text = strings
                    .get(off..off + len)
                    .ok_or_else(|| format!("operand {i} at {off}..{} is outside", off + len))?;
                Item::Operand {
                    text,
                    weight: a,
                    prefix: c != 0,
                }
            }
            QI_OPR => operator(a, i16::from_le_bytes([c, d]))?,
            other => return Err(format!("item {i} of type {other}")),
        });
    }
    render(&items)
}

/// A `tsquerysend` value.
pub(crate) fn sent_text(b: &[u8]) -> Result<String, String> {
    // Every item takes at least two bytes.
    let n = count(b, true, 2)?;
    let mut at = 4;
    let byte = |at: usize| {
        b.get(at)
            .copied()
            .ok_or_else(|| format!("truncated at byte {at}"))
    };
    let mut items = Vec::with_capacity(n);
    for i in 0..n {
        let ty = byte(at)?;
        items.push(match ty {
            QI_VAL => {
                let (weight, prefix) = (byte(at + 1)?, byte(at + 2)? != 0);
                let rest = b.get(at + 3..).unwrap_or_default();
                let len = rest
                    .iter()
                    .position(|c| *c == 0)
                    .ok_or_else(|| format!("operand {i} without its NUL"))?;
                at += 3 + len + 1;
                Item::Operand {
                    text: rest.get(..len).unwrap_or_default(),
                    weight,
                    prefix,
                }
            }
            QI_OPR => {
                let oper = byte(at + 1)?;
                at += 2;
                let mut distance = 0;
                if oper == OP_PHRASE {
                    distance = i16::from_be_bytes([byte(at)?, byte(at + 1)?]);
                    at += 2;
                }
                operator(oper, distance)?
            }
            other => return Err(format!("item {i} of type {other}")),
        });
    }
    if at != b.len() {
        return Err(format!(
            "{} bytes after the items",
            b.len().saturating_sub(at)
        ));
    }
    render(&items)
}

/// Children by item index (prefix order: an operator, its right operand's
/// subtree, its left operand's), found from the end with a stack.
fn tree(items: &[Item<'_>]) -> Result<Vec<(usize, usize)>, String> {
    let mut children = vec![(0, 0); items.len()];
    let mut done: Vec<usize> = Vec::new();
    for (i, item) in items.iter().enumerate().rev() {
        let missing = || format!("operator {i} lacks an operand");
        if let Item::Operator { oper, .. } = item {
            let right = done.pop().ok_or_else(missing)?;
            let left = if *oper == OP_NOT {
                right
            } else {
                done.pop().ok_or_else(missing)?
            };
            if let Some(c) = children.get_mut(i) {
                *c = (left, right);
            }
        }
        done.push(i);
    }
    if done.len() != 1 {
        return Err(format!("{} trees where one was due", done.len()));
    }
    Ok(children)
}

fn write_operand(out: &mut String, text: &[u8], weight: u8, prefix: bool) -> Result<(), String> {
    let text = std::str::from_utf8(text).map_err(|_| "an operand is not UTF-8".to_string())?;
    crate::tsvector::quote_lexeme(out, text);
    if weight != 0 || prefix {
        out.push(':');
        if prefix {
            out.push('*');
        }
        for (bit, letter) in [(8, 'A'), (4, 'B'), (2, 'C'), (1, 'D')] {
            if weight & bit != 0 {
                out.push(letter);
            }
        }
    }
    Ok(())
}

/// `infix`, with a stack of what is left to write instead of recursion.
fn render(items: &[Item<'_>]) -> Result<String, String> {
    if items.is_empty() {
        return Ok(String::new());
    }
    let children = tree(items)?;
    enum Step {
        /// Item `i` under a parent of this priority; on a phrase's right.
        Node(usize, i32, bool),
        Text(String),
    }
    let mut out = String::new();
    let mut todo = vec![Step::Node(0, -1, false)];
    while let Some(step) = todo.pop() {
        let (i, parent, right_of_phrase) = match step {
            Step::Text(t) => {
                out.push_str(&t);
                continue;
            }
            Step::Node(i, parent, right) => (i, parent, right),
        };
        let (item, &(left, right)) = items
            .get(i)
            .zip(children.get(i))
            .ok_or_else(|| format!("item {i} is missing"))?;
        match *item {
            Item::Operand {
                text,
                weight,
                prefix,
            } => write_operand(&mut out, text, weight, prefix)?,
            Item::Operator { oper, distance } => {
                let p = priority(oper);
                let parens = p < parent || (oper == OP_PHRASE && right_of_phrase);
                if parens {
                    out.push_str("( ");
                    todo.push(Step::Text(" )".into()));
                }
                if oper == OP_NOT {
                    out.push('!');
                    todo.push(Step::Node(right, p, false));
                } else {
                    let op = match oper {
                        OP_OR => " | ".to_string(),
                        OP_AND => " & ".to_string(),
                        _ if distance == 1 => " <-> ".to_string(),
                        _ => format!(" <{distance}> "),
                    };
                    todo.push(Step::Node(right, p, oper == OP_PHRASE));
                    todo.push(Step::Text(op));
                    todo.push(Step::Node(left, p, false));
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored query from items (type, a, b, distance/word) and strings.
    fn stored(items: &[[u8; ITEM_SIZE]], strings: &[u8]) -> Vec<u8> {
        let mut b = (items.len() as u32).to_le_bytes().to_vec();
        for i in items {
            b.extend_from_slice(i);
        }
        b.extend_from_slice(strings);
        b
    }

    fn operand(weight: u8, prefix: bool, len: u32, off: u32) -> [u8; ITEM_SIZE] {
        let mut i = [0u8; ITEM_SIZE];
        i[0] = QI_VAL;
        i[1] = weight;
        i[2] = u8::from(prefix);
        i[8..12].copy_from_slice(&(len | (off << 12)).to_le_bytes());
        i
    }

    fn op(oper: u8, distance: i16) -> [u8; ITEM_SIZE] {
        let mut i = [0u8; ITEM_SIZE];
        i[0] = QI_OPR;
        i[1] = oper;
        i[2..4].copy_from_slice(&distance.to_le_bytes());
        i
    }

    #[test]
    fn stored_renders_as_tsqueryout() {
        // 'a' & 'b''s':*A — prefix order: &, right ('b''s'), left ('a').
        let b = stored(
            &[
                op(OP_AND, 0),
                operand(8, true, 3, 2),
                operand(0, false, 1, 0),
            ],
            b"a\0b's\0",
        );
        assert_eq!(stored_text(&b).unwrap(), "'a' & 'b''s':*A");
        // ( 'a' | 'b' ) & !'c' — & with right !c, left (a | b).
        let b = stored(
            &[
                op(OP_AND, 0),
                op(OP_NOT, 0),
                operand(0, false, 1, 4),
                op(OP_OR, 0),
                operand(0, false, 1, 2),
                operand(0, false, 1, 0),
            ],
            b"a\0b\0c\0",
        );
        assert_eq!(stored_text(&b).unwrap(), "( 'a' | 'b' ) & !'c'");
        // 'a' <2> ( 'b' <-> 'c' ): a phrase on a phrase's right.
        let b = stored(
            &[
                op(OP_PHRASE, 2),
                op(OP_PHRASE, 1),
                operand(5, false, 1, 4),
                operand(0, false, 1, 2),
                operand(0, false, 1, 0),
            ],
            b"a\0b\0c\0",
        );
        assert_eq!(stored_text(&b).unwrap(), "'a' <2> ( 'b' <-> 'c':BD )");
        assert_eq!(stored_text(&0u32.to_le_bytes()).unwrap(), "");
    }

    #[test]
    fn sent_renders_the_same() {
        let mut s = 3u32.to_be_bytes().to_vec();
        s.extend([QI_OPR, OP_PHRASE]);
        s.extend(3i16.to_be_bytes());
        s.extend([QI_VAL, 1, 0]);
        s.extend(b"b\\\0");
        s.extend([QI_VAL, 0, 1]);
        s.extend(b"a\0");
        assert_eq!(sent_text(&s).unwrap(), "'a':* <3> 'b\\\\':D");
    }

    #[test]
    fn a_long_chain_renders_without_recursion() {
        // 'w' & 'w' & … 200,000 times: a left-deep tree.
        let n = 200_000;
        let mut items = Vec::with_capacity(2 * n);
        for _ in 1..n {
            items.push(op(OP_AND, 0));
            items.push(operand(0, false, 1, 0));
        }
        items.push(operand(0, false, 1, 0));
        let text = stored_text(&stored(&items, b"w\0")).unwrap();
        assert_eq!(text.len(), 3 * n + 3 * (n - 1));
    }

    #[test]
    fn hostile() {
        assert!(stored_text(&[]).is_err());
        assert!(stored_text(&u32::MAX.to_le_bytes()).is_err());
        // An operator without operands, a stray operand, an unknown type.
        assert!(stored_text(&stored(&[op(OP_AND, 0)], b"")).is_err());
        let two = stored(&[operand(0, false, 1, 0), operand(0, false, 1, 0)], b"a\0");
        assert!(stored_text(&two).is_err());
        assert!(stored_text(&stored(&[op(9, 0), operand(0, false, 1, 0)], b"a\0")).is_err());
        // An operand past the strings.
        assert!(stored_text(&stored(&[operand(0, false, 9, 0)], b"a\0")).is_err());
        assert!(
            sent_text(&[0, 0, 0, 1, QI_VAL, 0, 0, b'a']).is_err(),
            "no NUL"
        );
        assert!(sent_text(&[0, 0, 0, 1, QI_OPR]).is_err());
    }
}
