//! The geometric types (`point`, `line`, `lseg`, `box`, `path`, `polygon`,
//! `circle`) and `pg_lsn`, read from their stored form (little-endian, as
//! in a tuple) or their binary-COPY form (`*_send`, big-endian) into
//! PostgreSQL's own text output, which is what walshadow writes for them.
//!
//! Layouts (`utils/geo_decls.h`): a point is two float8 (x, y); `lseg` and
//! `box` two points (a box's high corner first); `line` three float8
//! (A, B, C); `circle` a point and a radius. `path` is a varlena of int32
//! `npts`, int32 `closed`, int32 padding, then the points; `polygon` a
//! varlena of int32 `npts`, its bounding box, then the points. Their
//! `_send` forms (geo_ops.c) are the same float8 in network order, except
//! `path` (a `closed` byte, int32 `npts`, the points) and `polygon` (int32
//! `npts`, the points: no bounding box). Text forms are those of geo_ops.c
//! (`path_encode`, `line_out`, `circle_out`) with each float8 as `float8out`
//! writes it; `pg_lsn` is `%X/%X` (pg_lsn.c).

use crate::error::DatumError;
use crate::float::write_f64;

/// A geometric type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Geometric {
    Point,
    Line,
    Lseg,
    Box,
    Path,
    Polygon,
    Circle,
}

impl Geometric {
    pub fn type_name(self) -> &'static str {
        match self {
            Geometric::Point => "point",
            Geometric::Line => "line",
            Geometric::Lseg => "lseg",
            Geometric::Box => "box",
            Geometric::Path => "path",
            Geometric::Polygon => "polygon",
            Geometric::Circle => "circle",
        }
    }

    /// `typlen`: bytes of the fixed-length types, -1 for the varlenas.
    pub(crate) fn len(self) -> i16 {
        match self {
            Geometric::Point => 16,
            Geometric::Line | Geometric::Circle => 24,
            Geometric::Lseg | Geometric::Box => 32,
            Geometric::Path | Geometric::Polygon => -1,
        }
    }
}

/// Reads float8 and int32 in one byte order.
struct Reader<'a> {
    b: &'a [u8],
    off: usize,
    big_endian: bool,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.off.checked_add(n).ok_or("too long")?;
        let s = self
            .b
            .get(self.off..end)
            .ok_or_else(|| format!("truncated at byte {}", self.off))?;
        self.off = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn f64(&mut self) -> Result<f64, String> {
        let a = self.array()?;
        Ok(if self.big_endian {
            f64::from_be_bytes(a)
        } else {
            f64::from_le_bytes(a)
        })
    }

    fn i32(&mut self) -> Result<i32, String> {
        let a = self.array()?;
        Ok(if self.big_endian {
            i32::from_be_bytes(a)
        } else {
            i32::from_le_bytes(a)
        })
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?.first().copied().unwrap_or_default())
    }

    fn skip(&mut self, n: usize) -> Result<(), String> {
        self.take(n).map(|_| ())
    }

    /// Every byte was read.
    fn done(&self) -> Result<(), String> {
        if self.off == self.b.len() {
            Ok(())
        } else {
            Err(format!(
                "{} bytes where {} are expected",
                self.b.len(),
                self.off
            ))
        }
    }
}

/// A value of `g` stored in a tuple (a varlena's body without its header).
pub(crate) fn stored_text(g: Geometric, b: &[u8]) -> Result<String, DatumError> {
    text(g, b, false).map_err(|detail| DatumError::bad(g.type_name(), detail))
}

/// A value of `g` in binary COPY (`g`'s `_send` form), or what is wrong
/// with it.
pub(crate) fn sent_text(g: Geometric, b: &[u8]) -> Result<String, String> {
    text(g, b, true)
}

fn text(g: Geometric, b: &[u8], sent: bool) -> Result<String, String> {
    let mut r = Reader {
        b,
        off: 0,
        big_endian: sent,
    };
    let mut out = String::new();
    match g {
        Geometric::Point => point(&mut r, &mut out)?,
        Geometric::Line => {
            out.push('{');
            float(&mut r, &mut out)?;
            out.push(',');
            float(&mut r, &mut out)?;
            out.push(',');
            float(&mut r, &mut out)?;
            out.push('}');
        }
        Geometric::Lseg => {
            out.push('[');
            points(&mut r, &mut out, 2)?;
            out.push(']');
        }
        Geometric::Box => points(&mut r, &mut out, 2)?,
        Geometric::Circle => {
            out.push('<');
            point(&mut r, &mut out)?;
            out.push(',');
            float(&mut r, &mut out)?;
            out.push('>');
        }
        Geometric::Path => {
            let (closed, npts) = if sent {
                let closed = r.u8()? != 0;
                (closed, r.i32()?)
            } else {
                let npts = r.i32()?;
                let closed = r.i32()? != 0;
                r.skip(4)?;
                (closed, npts)
            };
            let n = count(npts, &r)?;
            out.push(if closed { '(' } else { '[' });
            points(&mut r, &mut out, n)?;
            out.push(if closed { ')' } else { ']' });
        }
        Geometric::Polygon => {
            let npts = r.i32()?;
            if !sent {
                // The bounding box, derived from the points.
                r.skip(32)?;
            }
            let n = count(npts, &r)?;
            out.push('(');
            points(&mut r, &mut out, n)?;
            out.push(')');
        }
    }
    r.done()?;
    Ok(out)
}

/// `npts`, checked against the bytes left (16 per point).
fn count(npts: i32, r: &Reader<'_>) -> Result<usize, String> {
    let left = r.b.len().saturating_sub(r.off);
    match usize::try_from(npts) {
        Ok(n) if n.checked_mul(16) == Some(left) => Ok(n),
        _ => Err(format!("{npts} points in {left} bytes")),
    }
}

fn float(r: &mut Reader<'_>, out: &mut String) -> Result<(), String> {
    write_f64(out, r.f64()?);
    Ok(())
}

fn point(r: &mut Reader<'_>, out: &mut String) -> Result<(), String> {
    out.push('(');
    float(r, out)?;
    out.push(',');
    float(r, out)?;
    out.push(')');
    Ok(())
}

fn points(r: &mut Reader<'_>, out: &mut String, n: usize) -> Result<(), String> {
    for i in 0..n {
        if i > 0 {
            out.push(',');
        }
        point(r, out)?;
    }
    Ok(())
}

/// `pg_lsn_out`.
pub(crate) fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le(v: &[f64]) -> Vec<u8> {
        v.iter().flat_map(|f| f.to_le_bytes()).collect()
    }

    fn be(v: &[f64]) -> Vec<u8> {
        v.iter().flat_map(|f| f.to_be_bytes()).collect()
    }

    #[test]
    fn fixed_types_read_both_ways() {
        let cases: [(Geometric, &[f64], &str); 5] = [
            (Geometric::Point, &[1.5, -2.0], "(1.5,-2)"),
            (Geometric::Line, &[1.0, -1.0, 0.0], "{1,-1,0}"),
            (Geometric::Lseg, &[0.0, 0.0, 1.0, 1.0], "[(0,0),(1,1)]"),
            (Geometric::Box, &[2.0, 2.0, 0.0, 0.0], "(2,2),(0,0)"),
            (Geometric::Circle, &[1.0, 2.0, 0.5], "<(1,2),0.5>"),
        ];
        for (g, v, text) in cases {
            assert_eq!(stored_text(g, &le(v)).unwrap(), text);
            assert_eq!(sent_text(g, &be(v)).unwrap(), text);
            assert_eq!(usize::try_from(g.len()).unwrap(), v.len() * 8);
        }
        assert_eq!(
            stored_text(Geometric::Point, &le(&[f64::NAN, f64::NEG_INFINITY])).unwrap(),
            "(NaN,-Infinity)"
        );
    }

    #[test]
    fn paths_and_polygons() {
        let mut path = 2i32.to_le_bytes().to_vec();
        path.extend(1i32.to_le_bytes());
        path.extend([0; 4]);
        path.extend(le(&[0.0, 0.0, 1.0, 2.0]));
        assert_eq!(
            stored_text(Geometric::Path, &path).unwrap(),
            "((0,0),(1,2))"
        );
        let mut sent = vec![0u8];
        sent.extend(2i32.to_be_bytes());
        sent.extend(be(&[0.0, 0.0, 1.0, 2.0]));
        assert_eq!(sent_text(Geometric::Path, &sent).unwrap(), "[(0,0),(1,2)]");

        let mut poly = 1i32.to_le_bytes().to_vec();
        poly.extend(le(&[3.0, 4.0, 3.0, 4.0]));
        poly.extend(le(&[3.0, 4.0]));
        assert_eq!(stored_text(Geometric::Polygon, &poly).unwrap(), "((3,4))");
        let mut sent = 1i32.to_be_bytes().to_vec();
        sent.extend(be(&[3.0, 4.0]));
        assert_eq!(sent_text(Geometric::Polygon, &sent).unwrap(), "((3,4))");
    }

    #[test]
    fn wrong_sizes_are_errors() {
        assert!(stored_text(Geometric::Point, &[0; 15]).is_err());
        assert!(stored_text(Geometric::Point, &[0; 17]).is_err());
        let mut path = 3i32.to_le_bytes().to_vec();
        path.extend([0; 8]);
        path.extend(le(&[0.0, 0.0]));
        assert!(
            stored_text(Geometric::Path, &path).is_err(),
            "3 points claimed, 1 there"
        );
        let mut neg = (-1i32).to_be_bytes().to_vec();
        neg.extend(be(&[0.0; 2]));
        assert!(sent_text(Geometric::Polygon, &neg).is_err());
    }

    #[test]
    fn lsns() {
        assert_eq!(lsn_text(0x016B_3748), "0/16B3748");
        assert_eq!(lsn_text(0xFFFF_FFFF_0000_0001), "FFFFFFFF/1");
    }
}
