//! PostGIS `geometry` and `geography`, read into the EWKB `geometry_send`
//! sends (whose upper-case hex is `geometry_out`'s text), and written as
//! the ISO WKB `ST_AsBinary` gives.
//!
//! Stored (`GSERIALIZED`, liblwgeom/liblwgeom.h.in, gserialized1.c,
//! gserialized2.c of PostGIS 3): after the varlena header a 21-bit SRID in
//! three big-endian bytes (sign-extended; 0 is unknown), a flags byte (Z
//! 0x01, M 0x02, a bounding box 0x04, geodetic 0x08; 0x40 marks version 2,
//! where 0x10 says 8 bytes of extended flags follow), then the box if
//! flagged (float4 min/max per dimension; 6 floats for a geodetic one) and
//! the geometry: a uint32 type and a uint32 count, native (little-endian)
//! order. A point or line holds its points' doubles (x, y, then z, then
//! m), a polygon its ring sizes (padded to 8 bytes) then their points, a
//! collection its members one after another, each with its own type and
//! count. Stored type numbers 13–15 are polyhedral surface, triangle and
//! TIN; WKB calls them 15, 17 and 16.
//!
//! WKB (lwout_wkb.c): every geometry, nested ones too, is a byte-order
//! byte, a uint32 type and its body; a point has no count (an empty one is
//! NaN per dimension), a polygon writes each ring's size beside its
//! points, a triangle is one ring. EWKB flags Z (0x8000_0000), M
//! (0x4000_0000) and, at the top only, an SRID that follows the type
//! (0x2000_0000); ISO adds 1000 for Z and 2000 for M, has no SRID, and
//! writes a geometry empty all the way down as its type and a zero count.

/// Collections nest no deeper than this (a hostile value could nest until
/// the stack ends).
const MAX_DEPTH: usize = 32;

const POINT: u32 = 1;
const LINESTRING: u32 = 2;
const POLYGON: u32 = 3;
const CIRCULARSTRING: u32 = 8;
/// Stored numbers of the types WKB numbers otherwise.
const STORED_POLYHEDRALSURFACE: u32 = 13;
const STORED_TRIANGLE: u32 = 14;
const STORED_TIN: u32 = 15;
const WKB_POLYHEDRALSURFACE: u32 = 15;
const WKB_TIN: u32 = 16;
const WKB_TRIANGLE: u32 = 17;

const EWKB_Z: u32 = 0x8000_0000;
const EWKB_M: u32 = 0x4000_0000;
const EWKB_SRID: u32 = 0x2000_0000;

/// One geometry, its type by WKB's numbers.
#[derive(Debug, Clone, PartialEq)]
enum Geom {
    /// Point, line string, circular string, triangle: their points' doubles.
    Points {
        ty: u32,
        coords: Vec<f64>,
    },
    Polygon {
        rings: Vec<Vec<f64>>,
    },
    /// Every other type: members.
    Collection {
        ty: u32,
        members: Vec<Geom>,
    },
}

impl Geom {
    fn is_empty(&self) -> bool {
        match self {
            Geom::Points { coords, .. } => coords.is_empty(),
            Geom::Polygon { rings } => rings.first().is_none_or(Vec::is_empty),
            Geom::Collection { members, .. } => members.iter().all(Geom::is_empty),
        }
    }
}

/// A whole value: SRID (0 unknown), dimensions, the geometry.
#[derive(Debug, Clone, PartialEq)]
struct Parsed {
    srid: i32,
    z: bool,
    m: bool,
    geom: Geom,
}

impl Parsed {
    fn dims(&self) -> usize {
        2 + usize::from(self.z) + usize::from(self.m)
    }
}

fn is_collection(ty: u32) -> bool {
    matches!(ty, 4..=7 | 9..=12) || ty == WKB_POLYHEDRALSURFACE || ty == WKB_TIN
}

/// A little cursor: reads fail past the end rather than panic.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
    big_endian: bool,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let s = self
            .at
            .checked_add(n)
            .and_then(|end| self.b.get(self.at..end))
            .ok_or_else(|| format!("truncated at byte {} (wanted {n})", self.at))?;
        self.at += n;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?.first().copied().unwrap_or(0))
    }

    fn u32(&mut self) -> Result<u32, String> {
        let a = self.take(4)?.first_chunk::<4>().copied().unwrap_or([0; 4]);
        Ok(if self.big_endian {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        })
    }

    /// A count of items of at least `min` bytes each: never more than the
    /// bytes left could hold.
    fn count(&mut self, min: usize) -> Result<usize, String> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min) > self.b.len().saturating_sub(self.at) {
            return Err(format!(
                "a count of {n} at byte {} overruns the value",
                self.at
            ));
        }
        Ok(n)
    }

    fn doubles(&mut self, n: usize) -> Result<Vec<f64>, String> {
        let raw = self.take(n.checked_mul(8).ok_or("too many coordinates")?)?;
        Ok(raw
            .chunks_exact(8)
            .map(|c| {
                let a = c.first_chunk::<8>().copied().unwrap_or([0; 8]);
                if self.big_endian {
                    f64::from_be_bytes(a)
                } else {
                    f64::from_le_bytes(a)
                }
            })
            .collect())
    }
}

/// A stored value (varlena body: header stripped, detoasted) as EWKB.
pub(crate) fn stored_ewkb(b: &[u8]) -> Result<Vec<u8>, String> {
    let v = parse_stored(b)?;
    let mut out = Vec::with_capacity(b.len() + 16);
    write(&mut out, &v, &v.geom, Variant::Extended, true);
    Ok(out)
}

/// A `geometry_send` value (EWKB), checked and kept.
pub(crate) fn sent_ewkb(b: &[u8]) -> Result<Vec<u8>, String> {
    parse_ewkb(b)?;
    Ok(b.to_vec())
}

/// EWKB (as [`stored_ewkb`] or the server gives it) as ISO WKB, in the
/// byte order `ST_AsBinary` writes on this machine (little-endian).
pub fn ewkb_to_iso_wkb(b: &[u8]) -> Result<Vec<u8>, String> {
    let v = parse_ewkb(b)?;
    let mut out = Vec::with_capacity(b.len());
    write(&mut out, &v, &v.geom, Variant::Iso, true);
    Ok(out)
}

/// A 2D value of one of the shapes ClickHouse's geo types hold.
#[derive(Debug, Clone, PartialEq)]
pub enum Planar {
    /// `None` for POINT EMPTY.
    Point(Option<[f64; 2]>),
    LineString(Vec<[f64; 2]>),
    Polygon(Vec<Vec<[f64; 2]>>),
    MultiLineString(Vec<Vec<[f64; 2]>>),
    MultiPolygon(Vec<Vec<Vec<[f64; 2]>>>),
}

/// What a value is, for messages: `POINT`, `POLYGON Z`, … (its WKB type).
fn kind_name(g: &Geom, z: bool, m: bool) -> String {
    let base = match g {
        Geom::Polygon { .. } => POLYGON,
        Geom::Points { ty, .. } | Geom::Collection { ty, .. } => *ty,
    };
    let name = match base {
        POINT => "POINT",
        LINESTRING => "LINESTRING",
        POLYGON => "POLYGON",
        4 => "MULTIPOINT",
        5 => "MULTILINESTRING",
        6 => "MULTIPOLYGON",
        7 => "GEOMETRYCOLLECTION",
        CIRCULARSTRING => "CIRCULARSTRING",
        9 => "COMPOUNDCURVE",
        10 => "CURVEPOLYGON",
        11 => "MULTICURVE",
        12 => "MULTISURFACE",
        WKB_POLYHEDRALSURFACE => "POLYHEDRALSURFACE",
        WKB_TIN => "TIN",
        WKB_TRIANGLE => "TRIANGLE",
        _ => "GEOMETRY",
    };
    match (z, m) {
        (true, true) => format!("{name} ZM"),
        (true, false) => format!("{name} Z"),
        (false, true) => format!("{name} M"),
        (false, false) => name.to_owned(),
    }
}

fn pairs(coords: &[f64]) -> Vec<[f64; 2]> {
    coords
        .chunks_exact(2)
        .filter_map(|c| match c {
            [x, y] => Some([*x, *y]),
            _ => None,
        })
        .collect()
}

/// EWKB as a 2D point, line string, polygon, multi line string or multi
/// polygon; any other value (another type, Z or M coordinates) is an error
/// naming what it is.
pub fn planar(ewkb: &[u8]) -> Result<Planar, String> {
    let v = parse_ewkb(ewkb)?;
    let what = || kind_name(&v.geom, v.z, v.m);
    if v.z || v.m {
        return Err(what());
    }
    let polygon = |g: &Geom| match g {
        Geom::Polygon { rings } => Some(rings.iter().map(|r| pairs(r)).collect::<Vec<_>>()),
        _ => None,
    };
    let line = |g: &Geom| match g {
        Geom::Points {
            ty: LINESTRING,
            coords,
        } => Some(pairs(coords)),
        _ => None,
    };
    Ok(match &v.geom {
        Geom::Points { ty: POINT, coords } => Planar::Point(match coords.as_slice() {
            [x, y] => Some([*x, *y]),
            _ => None,
        }),
        g @ Geom::Points { ty: LINESTRING, .. } => Planar::LineString(line(g).unwrap_or_default()),
        g @ Geom::Polygon { .. } => Planar::Polygon(polygon(g).unwrap_or_default()),
        Geom::Collection { ty: 5, members } => Planar::MultiLineString(
            members
                .iter()
                .map(line)
                .collect::<Option<_>>()
                .ok_or_else(what)?,
        ),
        Geom::Collection { ty: 6, members } => Planar::MultiPolygon(
            members
                .iter()
                .map(polygon)
                .collect::<Option<_>>()
                .ok_or_else(what)?,
        ),
        _ => return Err(what()),
    })
}

fn parse_stored(b: &[u8]) -> Result<Parsed, String> {
    let mut r = Reader {
        b,
        at: 0,
        big_endian: false,
    };
    let s = r.take(3)?;
    let (s0, s1, s2) = (
        s.first().copied().unwrap_or(0),
        s.get(1).copied().unwrap_or(0),
        s.get(2).copied().unwrap_or(0),
    );
    let raw = (u32::from(s0 & 0x1f) << 16) | (u32::from(s1) << 8) | u32::from(s2);
    // 21 bits, sign-extended.
    let srid = ((raw << 11) as i32) >> 11;
    let flags = r.u8()?;
    let (z, m, bbox, geodetic) = (
        flags & 0x01 != 0,
        flags & 0x02 != 0,
        flags & 0x04 != 0,
        flags & 0x08 != 0,
    );
    let v2 = flags & 0x40 != 0;
    if v2 && flags & 0x10 != 0 {
        r.take(8)?;
    }
    if bbox {
        let floats = if geodetic {
            6
        } else {
            2 * (2 + usize::from(z) + usize::from(m))
        };
        r.take(4 * floats)?;
    }
    let dims = 2 + usize::from(z) + usize::from(m);
    let geom = stored_geom(&mut r, dims, 0)?;
    if r.at != b.len() {
        return Err(format!("{} bytes after the geometry", b.len() - r.at));
    }
    Ok(Parsed { srid, z, m, geom })
}

fn stored_geom(r: &mut Reader<'_>, dims: usize, depth: usize) -> Result<Geom, String> {
    if depth > MAX_DEPTH {
        return Err(format!("collections nested deeper than {MAX_DEPTH}"));
    }
    let stored = r.u32()?;
    let ty = match stored {
        STORED_POLYHEDRALSURFACE => WKB_POLYHEDRALSURFACE,
        STORED_TRIANGLE => WKB_TRIANGLE,
        STORED_TIN => WKB_TIN,
        1..=12 => stored,
        other => return Err(format!("geometry type {other}")),
    };
    let point = 8 * dims;
    Ok(match ty {
        POINT | LINESTRING | CIRCULARSTRING | WKB_TRIANGLE => {
            let n = r.count(point)?;
            if ty == POINT && n > 1 {
                return Err(format!("a point of {n} points"));
            }
            Geom::Points {
                ty,
                coords: r.doubles(n * dims)?,
            }
        }
        POLYGON => {
            let n = r.count(4)?;
            let mut sizes = Vec::with_capacity(n);
            for _ in 0..n {
                sizes.push(r.count(point)?);
            }
            if n % 2 == 1 {
                r.take(4)?;
            }
            let mut rings = Vec::with_capacity(n);
            for size in sizes {
                rings.push(r.doubles(size * dims)?);
            }
            Geom::Polygon { rings }
        }
        _ => {
            // Every member is at least its type and count.
            let n = r.count(8)?;
            let mut members = Vec::with_capacity(n);
            for _ in 0..n {
                members.push(stored_geom(r, dims, depth + 1)?);
            }
            Geom::Collection { ty, members }
        }
    })
}

fn parse_ewkb(b: &[u8]) -> Result<Parsed, String> {
    let mut r = Reader {
        b,
        at: 0,
        big_endian: false,
    };
    let (geom, srid, z, m) = ewkb_geom(&mut r, None, 0)?;
    if r.at != b.len() {
        return Err(format!("{} bytes after the geometry", b.len() - r.at));
    }
    Ok(Parsed { srid, z, m, geom })
}

/// One EWKB geometry; `outer` is the enclosing one's (Z, M), which a
/// member must repeat.
fn ewkb_geom(
    r: &mut Reader<'_>,
    outer: Option<(bool, bool)>,
    depth: usize,
) -> Result<(Geom, i32, bool, bool), String> {
    if depth > MAX_DEPTH {
        return Err(format!("collections nested deeper than {MAX_DEPTH}"));
    }
    r.big_endian = match r.u8()? {
        0 => true,
        1 => false,
        other => return Err(format!("byte order {other}")),
    };
    let word = r.u32()?;
    let (z, m) = (word & EWKB_Z != 0, word & EWKB_M != 0);
    let mut srid = 0;
    if word & EWKB_SRID != 0 {
        if outer.is_some() {
            return Err("an SRID on a member".into());
        }
        srid = r.u32()? as i32;
    }
    if outer.is_some_and(|o| o != (z, m)) {
        return Err("a member's dimensions differ from its collection's".into());
    }
    let ty = word & 0x0fff_ffff;
    let dims = 2 + usize::from(z) + usize::from(m);
    let point = 8 * dims;
    let geom = match ty {
        POINT => Geom::Points {
            ty,
            // An empty point is NaN in every dimension.
            coords: Some(r.doubles(dims)?)
                .filter(|c| !c.iter().all(|f| f.is_nan()))
                .unwrap_or_default(),
        },
        LINESTRING | CIRCULARSTRING => {
            let n = r.count(point)?;
            Geom::Points {
                ty,
                coords: r.doubles(n * dims)?,
            }
        }
        POLYGON | WKB_TRIANGLE => {
            let n = r.count(4)?;
            let mut rings = Vec::with_capacity(n);
            for _ in 0..n {
                let size = r.count(point)?;
                rings.push(r.doubles(size * dims)?);
            }
            if ty == WKB_TRIANGLE {
                if rings.len() > 1 {
                    return Err(format!("a triangle of {} rings", rings.len()));
                }
                Geom::Points {
                    ty,
                    coords: rings.pop().unwrap_or_default(),
                }
            } else {
                Geom::Polygon { rings }
            }
        }
        ty if is_collection(ty) => {
            // A member is at least its byte order, type and a point.
            let n = r.count(9)?;
            let mut members = Vec::with_capacity(n);
            for _ in 0..n {
                let (g, _, _, _) = ewkb_geom(r, Some((z, m)), depth + 1)?;
                members.push(g);
            }
            Geom::Collection { ty, members }
        }
        other => return Err(format!("WKB type {other}")),
    };
    Ok((geom, srid, z, m))
}

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Extended,
    Iso,
}

fn put_u32(out: &mut Vec<u8>, n: u32) {
    out.extend_from_slice(&n.to_le_bytes());
}

fn put_doubles(out: &mut Vec<u8>, d: &[f64]) {
    for f in d {
        out.extend_from_slice(&f.to_le_bytes());
    }
}

/// Writes `g` (of value `v`) little-endian; `top` carries the SRID.
fn write(out: &mut Vec<u8>, v: &Parsed, g: &Geom, variant: Variant, top: bool) {
    let base = match g {
        Geom::Points { ty, .. } | Geom::Collection { ty, .. } => *ty,
        Geom::Polygon { .. } => POLYGON,
    };
    out.push(1);
    match variant {
        Variant::Extended => {
            let mut word = base;
            if v.z {
                word |= EWKB_Z;
            }
            if v.m {
                word |= EWKB_M;
            }
            if top && v.srid != 0 {
                word |= EWKB_SRID;
            }
            put_u32(out, word);
            if top && v.srid != 0 {
                put_u32(out, v.srid as u32);
            }
        }
        Variant::Iso => {
            put_u32(
                out,
                base + if v.z { 1000 } else { 0 } + if v.m { 2000 } else { 0 },
            );
            // A geometry empty all the way down is its type and no members.
            if base != POINT && g.is_empty() {
                put_u32(out, 0);
                return;
            }
        }
    }
    let dims = v.dims();
    match g {
        Geom::Points { ty: POINT, coords } if coords.is_empty() => {
            put_doubles(out, &vec![f64::NAN; dims]);
        }
        Geom::Points { ty: POINT, coords } => put_doubles(out, coords),
        Geom::Points {
            ty: WKB_TRIANGLE,
            coords,
        } => {
            if coords.is_empty() {
                put_u32(out, 0);
            } else {
                put_u32(out, 1);
                put_u32(out, (coords.len() / dims) as u32);
                put_doubles(out, coords);
            }
        }
        Geom::Points { coords, .. } => {
            put_u32(out, (coords.len() / dims) as u32);
            put_doubles(out, coords);
        }
        Geom::Polygon { rings } => {
            if g.is_empty() {
                put_u32(out, 0);
                return;
            }
            put_u32(out, rings.len() as u32);
            for ring in rings {
                put_u32(out, (ring.len() / dims) as u32);
                put_doubles(out, ring);
            }
        }
        Geom::Collection { members, .. } => {
            put_u32(out, members.len() as u32);
            for m in members {
                write(out, v, m, variant, false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// A stored body: SRID, flags, optional box floats, payload words and
    /// doubles in order.
    fn stored(srid: u32, flags: u8, box_floats: usize, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![
            (srid >> 16) as u8 & 0x1f,
            (srid >> 8) as u8,
            srid as u8,
            flags,
        ];
        b.extend(std::iter::repeat_n(0u8, 4 * box_floats));
        b.extend_from_slice(payload);
        b
    }

    fn words(ws: &[u32], ds: &[f64]) -> Vec<u8> {
        let mut b = Vec::new();
        for w in ws {
            b.extend_from_slice(&w.to_le_bytes());
        }
        for d in ds {
            b.extend_from_slice(&d.to_le_bytes());
        }
        b
    }

    #[test]
    fn points_read_as_postgis_writes_them() {
        // SRID=4326;POINT(1 2), version 2: EWKB and ISO as the server's.
        let b = stored(4326, 0x40, 0, &words(&[POINT, 1], &[1.0, 2.0]));
        let e = stored_ewkb(&b).unwrap();
        assert_eq!(
            hex(&e),
            "0101000020e6100000000000000000f03f0000000000000040"
        );
        assert_eq!(
            hex(&ewkb_to_iso_wkb(&e).unwrap()),
            "0101000000000000000000f03f0000000000000040"
        );
        // POINT EMPTY: NaN per dimension in both.
        let b = stored(0, 0x40, 0, &words(&[POINT, 0], &[]));
        let e = stored_ewkb(&b).unwrap();
        assert_eq!(hex(&e), "0101000000000000000000f87f000000000000f87f");
        assert_eq!(ewkb_to_iso_wkb(&e).unwrap(), e);
        // POINT Z (1 2 3), version 1 (no version bit).
        let b = stored(0, 0x01, 0, &words(&[POINT, 1], &[1.0, 2.0, 3.0]));
        let e = stored_ewkb(&b).unwrap();
        assert_eq!(
            hex(&e),
            "0101000080000000000000f03f00000000000000400000000000000840"
        );
        assert_eq!(
            hex(&ewkb_to_iso_wkb(&e).unwrap()),
            "01e9030000000000000000f03f00000000000000400000000000000840"
        );
    }

    #[test]
    fn polygons_and_collections_match_the_server() {
        // POLYGON((0 0,4 0,4 4,0 4,0 0),(1 1,2 1,2 2,1 1)) with a box: two
        // rings (even, no padding).
        let ring1 = [0.0, 0.0, 4.0, 0.0, 4.0, 4.0, 0.0, 4.0, 0.0, 0.0];
        let ring2 = [1.0, 1.0, 2.0, 1.0, 2.0, 2.0, 1.0, 1.0];
        let mut pts = ring1.to_vec();
        pts.extend(ring2);
        let b = stored(0, 0x44, 4, &words(&[POLYGON, 2, 5, 4], &pts));
        let want = "01030000000200000005000000000000000000000000000000000000000000000000001040000000000000000000000000000010400000000000001040000000000000000000000000000010400000000000000000000000000000000004000000000000000000f03f000000000000f03f0000000000000040000000000000f03f00000000000000400000000000000040000000000000f03f000000000000f03f";
        assert_eq!(hex(&stored_ewkb(&b).unwrap()), want);
        // One ring: 4 bytes of padding after its size.
        let b = stored(0, 0x40, 0, &words(&[POLYGON, 1, 5, 0], &ring1));
        assert!(hex(&stored_ewkb(&b).unwrap()).starts_with("010300000001000000050000000000"));
        // GEOMETRYCOLLECTION(POINT(1 1), LINESTRING(0 0, 1 1)).
        let b = stored(
            0,
            0x44,
            4,
            &[
                words(&[7, 2, POINT, 1], &[1.0, 1.0]),
                words(&[LINESTRING, 2], &[0.0, 0.0, 1.0, 1.0]),
            ]
            .concat(),
        );
        assert_eq!(
            hex(&stored_ewkb(&b).unwrap()),
            "0107000000020000000101000000000000000000f03f000000000000f03f01020000000200000000000000000000000000000000000000000000000000f03f000000000000f03f"
        );
        // ISO writes a collection empty all the way down as empty.
        let b = stored(0, 0x40, 0, &words(&[7, 1, POINT, 0], &[]));
        let e = stored_ewkb(&b).unwrap();
        assert_eq!(
            hex(&e),
            "0107000000010000000101000000000000000000f87f000000000000f87f"
        );
        assert_eq!(hex(&ewkb_to_iso_wkb(&e).unwrap()), "010700000000000000");
        // A triangle is one ring in WKB; TIN and polyhedral surfaces are
        // renumbered.
        let tri = [0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0];
        let b = stored(
            0,
            0x40,
            0,
            &words(&[STORED_TIN, 1, STORED_TRIANGLE, 4], &tri),
        );
        let e = stored_ewkb(&b).unwrap();
        assert!(
            hex(&e).starts_with("011000000001000000011100000001000000040000"),
            "{}",
            hex(&e)
        );
        assert_eq!(parse_ewkb(&e).unwrap(), parse_stored(&b).unwrap());
    }

    #[test]
    fn sent_ewkb_round_trips_big_endian_too() {
        let le = unhex("0101000020e6100000000000000000f03f0000000000000040");
        assert_eq!(sent_ewkb(&le).unwrap(), le);
        // The same point big-endian: ISO WKB comes out little-endian.
        let be = unhex("0020000001000010e63ff00000000000004000000000000000");
        assert_eq!(
            hex(&ewkb_to_iso_wkb(&be).unwrap()),
            "0101000000000000000000f03f0000000000000040"
        );
    }

    #[test]
    fn planar_shapes_and_what_is_not_one() {
        let e = |b: Vec<u8>| stored_ewkb(&b).unwrap();
        let pt = e(stored(4326, 0x40, 0, &words(&[POINT, 1], &[1.0, 2.0])));
        assert_eq!(planar(&pt).unwrap(), Planar::Point(Some([1.0, 2.0])));
        let empty = e(stored(0, 0x40, 0, &words(&[POINT, 0], &[])));
        assert_eq!(planar(&empty).unwrap(), Planar::Point(None));
        let mp = e(stored(
            0,
            0x44,
            4,
            &words(
                &[6, 1, POLYGON, 1, 4, 0],
                &[0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0],
            ),
        ));
        assert_eq!(
            planar(&mp).unwrap(),
            Planar::MultiPolygon(vec![vec![vec![
                [0.0, 0.0],
                [1.0, 0.0],
                [1.0, 1.0],
                [0.0, 0.0]
            ]]])
        );
        let z = e(stored(0, 0x41, 0, &words(&[POINT, 1], &[1.0, 2.0, 3.0])));
        assert_eq!(planar(&z).unwrap_err(), "POINT Z");
        let gc = e(stored(0, 0x40, 0, &words(&[7, 1, POINT, 0], &[])));
        assert_eq!(planar(&gc).unwrap_err(), "GEOMETRYCOLLECTION");
    }

    #[test]
    fn hostile_values_are_errors() {
        assert!(stored_ewkb(&[]).is_err());
        assert!(stored_ewkb(&stored(0, 0x40, 0, &words(&[POINT, 9], &[]))).is_err());
        assert!(stored_ewkb(&stored(0, 0x40, 0, &words(&[99, 0], &[]))).is_err());
        assert!(stored_ewkb(&stored(0, 0x40, 0, &words(&[7, u32::MAX], &[]))).is_err());
        assert!(stored_ewkb(&stored(0, 0x44, 9, &words(&[POINT, 0], &[]))).is_err());
        // Nesting past the bound.
        let mut deep = Vec::new();
        for _ in 0..100 {
            deep.extend(words(&[7, 1], &[]));
        }
        deep.extend(words(&[POINT, 0], &[]));
        assert!(stored_ewkb(&stored(0, 0x40, 0, &deep)).is_err());
        assert!(sent_ewkb(&[1, 1, 0, 0, 0]).is_err());
        assert!(sent_ewkb(&[7]).is_err());
        // Random bytes never panic.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..20_000 {
            let len = (x % 80) as usize;
            let mut b = Vec::with_capacity(len);
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b.push(x as u8);
            }
            let _ = stored_ewkb(&b);
            let _ = sent_ewkb(&b);
            let _ = ewkb_to_iso_wkb(&b);
        }
    }
}
