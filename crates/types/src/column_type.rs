//! A ClickHouse type a column asks for instead of the one walshadow maps
//! its PostgreSQL type to (`column_types`): the config file, the config
//! table and the destination layout read the same spelling.

/// A ClickHouse type a column asks for instead of its mapping's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TypeOverride {
    /// `String` of PostgreSQL's text, for a column of any type.
    String,
    /// `JSON`, for a `json` or `jsonb` column: ClickHouse's reading of
    /// the document (numbers as Int64/UInt64/Float64, dotted keys as
    /// paths). Documents that are not objects are out of its range.
    Json,
    /// `DateTime64(p, 'UTC')`, `p ≤ 6`, for a `timestamp` or
    /// `timestamptz` column: values floored to the precision.
    DateTime64(u8),
    /// One of ClickHouse's geo types, for a PostGIS `geometry` or
    /// `geography` column of that shape.
    Geo(GeoShape),
}

/// ClickHouse's geo types (2D): `Point` is `Tuple(Float64, Float64)`,
/// `Ring` and `LineString` arrays of points, `Polygon` an array of rings
/// (the outer first), `MultiLineString` and `MultiPolygon` arrays of those.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GeoShape {
    Point,
    Ring,
    LineString,
    MultiLineString,
    Polygon,
    MultiPolygon,
}

impl GeoShape {
    pub const ALL: [GeoShape; 6] = [
        GeoShape::Point,
        GeoShape::Ring,
        GeoShape::LineString,
        GeoShape::MultiLineString,
        GeoShape::Polygon,
        GeoShape::MultiPolygon,
    ];

    /// ClickHouse's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            GeoShape::Point => "Point",
            GeoShape::Ring => "Ring",
            GeoShape::LineString => "LineString",
            GeoShape::MultiLineString => "MultiLineString",
            GeoShape::Polygon => "Polygon",
            GeoShape::MultiPolygon => "MultiPolygon",
        }
    }
}

impl TypeOverride {
    /// The spelling in the config file and the config table: `String`,
    /// `JSON`, `DateTime64(p)` (`p` from 0 to 6), or a geo type's name,
    /// case aside.
    pub fn parse(s: &str) -> Option<TypeOverride> {
        let t: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        let t = t.to_ascii_lowercase();
        match t.as_str() {
            "string" => Some(TypeOverride::String),
            "json" => Some(TypeOverride::Json),
            geo if GeoShape::ALL
                .iter()
                .any(|g| g.name().eq_ignore_ascii_case(geo)) =>
            {
                GeoShape::ALL
                    .into_iter()
                    .find(|g| g.name().eq_ignore_ascii_case(geo))
                    .map(TypeOverride::Geo)
            }
            _ => {
                let p: u8 = t
                    .strip_prefix("datetime64(")?
                    .strip_suffix(')')?
                    .parse()
                    .ok()?;
                (p <= 6).then_some(TypeOverride::DateTime64(p))
            }
        }
    }

    /// The ClickHouse type it names.
    pub fn name(self) -> String {
        match self {
            TypeOverride::String => "String".into(),
            TypeOverride::Json => "JSON".into(),
            TypeOverride::DateTime64(p) => format!("DateTime64({p})"),
            TypeOverride::Geo(g) => g.name().into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_spellings_it_names() {
        for (text, want) in [
            ("String", Some(TypeOverride::String)),
            ("json", Some(TypeOverride::Json)),
            (" JSON ", Some(TypeOverride::Json)),
            ("DateTime64(3)", Some(TypeOverride::DateTime64(3))),
            ("datetime64( 0 )", Some(TypeOverride::DateTime64(0))),
            ("DateTime64(6)", Some(TypeOverride::DateTime64(6))),
            ("DateTime64(7)", None),
            ("DateTime64", None),
            ("DateTime64(3, 'UTC')", None),
            ("Int64", None),
            ("Point", Some(TypeOverride::Geo(GeoShape::Point))),
            (
                "multipolygon",
                Some(TypeOverride::Geo(GeoShape::MultiPolygon)),
            ),
            ("Ring", Some(TypeOverride::Geo(GeoShape::Ring))),
            ("", None),
        ] {
            assert_eq!(TypeOverride::parse(text), want, "{text:?}");
            if let Some(o) = want {
                assert_eq!(TypeOverride::parse(&o.name()), want);
            }
        }
    }
}
