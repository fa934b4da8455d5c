//! Types, partitions, late tables and per-table stops, streamed through the
//! `walshadow` binary on PostgreSQL 15 and 18.
//!
//! - `every_type`: one table with a column of every supported type, edge
//!   values, NULLs and out-of-line (TOAST) values, inserted row by row and
//!   by COPY, updated and deleted while `walshadow run` streams; then the
//!   oracle column by column (so a difference names its type) and row by
//!   row, and the ClickHouse column types against the mapping documented in
//!   `crates/emitter/src/types.rs`; then the same rows in two more tables,
//!   loaded by `copy` and by `base_backup`, equal row by row.
//! - `partitions`: a pinned partitioned table (partitions made before and
//!   after `init`, attached ones with another column order, a DEFAULT one,
//!   rows moving between partitions) equals its one ClickHouse table.
//! - `pinned_later`: pinned tables created mid-stream, rows in the creating
//!   transaction and after.
//! - `stops_alone`: an unsupported column type and a column type change
//!   each stop their own table, with a reason and a remedy in `walshadow
//!   status` and `progress.json`; the other tables keep streaming and stay
//!   equal, among them one whose UPDATE leaves a TOASTed value unchanged
//!   (an unresolvable TOAST pointer is in `stream_toast.rs`).
//! - `truncate_partition`: a TRUNCATE of one partition does not empty the
//!   root's whole ClickHouse table (the table is loaded again).
//!
//! Canonical text per type, chosen so that both sides print the same thing
//! for the same value: String-mapped columns hold the type's output
//! function (`format('%s', c)`, which keeps `bpchar` padding where `::text`
//! drops it); floats compare by bit pattern (so `-0`, NaN and ±Infinity
//! count); `numeric(p,s)` and `money` by `trim_scale` against `Decimal`'s
//! text; times through `to_char`/`formatDateTime`; arrays flattened with
//! their element count, plus the dimensions of the 2-D one. Text is escaped
//! on both sides so that newlines and tabs stay inside one oracle line.

mod common;

use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, bail, ensure};
use common::loads::wait_loaded;
use common::{BIN, OracleColumn, StreamHarness, col, same};
use walshadow_testkit::{Lsn, PgMajor, wait_until};

const CATCH_UP: Duration = Duration::from_secs(180);

/// Backslash, newline, CR and tab escaped (PostgreSQL side).
fn esc_pg(e: &str) -> String {
    format!(
        r"replace(replace(replace(replace({e}, E'\\', E'\\\\'), E'\n', E'\\n'), E'\r', E'\\r'), E'\t', E'\\t')"
    )
}

/// The same escaping on the ClickHouse side.
fn esc_ch(e: &str) -> String {
    format!(
        r"replaceAll(replaceAll(replaceAll(replaceAll({e}, '\\', '\\\\'), '\n', '\\n'), '\r', '\\r'), '\t', '\\t')"
    )
}

/// A column ClickHouse holds as PostgreSQL's text (the output function).
fn output_text(c: &str) -> OracleColumn {
    col(
        &esc_pg(&format!(
            "case when {c} is null then null else format('%s', {c}) end"
        )),
        &esc_ch(c),
    )
}

/// A float column by its IEEE bits, big-endian hex.
fn float_bits(c: &str, bytes: usize) -> OracleColumn {
    let (send, reinterpret) = if bytes == 4 {
        ("float4send", "reinterpretAsUInt32")
    } else {
        ("float8send", "reinterpretAsUInt64")
    };
    col(
        &format!("encode({send}({c}), 'hex')"),
        &format!(
            "if({c} IS NULL, NULL, leftPad(lower(hex({reinterpret}(assumeNotNull({c})))), {}, '0'))",
            bytes * 2
        ),
    )
}

/// An array column: element count and elements, flattened. A NULL array
/// is `[]` in ClickHouse (documented), so the source side reads it as
/// `'{}'`.
fn array_flat(c: &str) -> OracleColumn {
    col(
        &format!(
            "cardinality(coalesce({c}, '{{}}')) || ':' || array_to_string(coalesce({c}, '{{}}'), ',', '<null>')"
        ),
        &format!(
            "concat(toString(length(arrayFlatten({c}))), ':', arrayStringConcat(arrayMap(el -> ifNull(toString(el), '<null>'), arrayFlatten({c})), ','))"
        ),
    )
}

fn timestamp_text(pg: &str, ch: &str) -> OracleColumn {
    col(
        &format!("to_char({pg}, 'YYYY-MM-DD HH24:MI:SS.US')"),
        &format!("formatDateTime({ch}, '%Y-%m-%d %H:%i:%S.%f')"),
    )
}

/// One column of `all_types`: its declaration, the ClickHouse type the
/// documented mapping gives it, and its oracle expressions.
struct TypeColumn {
    name: &'static str,
    decl: &'static str,
    ch_type: &'static str,
    oracle: OracleColumn,
}

fn type_columns(with_xml: bool) -> Vec<TypeColumn> {
    let c = |name, decl, ch_type, oracle| TypeColumn {
        name,
        decl,
        ch_type,
        oracle,
    };
    let mut cols = vec![
        c("id", "int primary key", "Int32", same("id")),
        c(
            "b",
            "bool",
            "Nullable(Bool)",
            col("case when b then 'true' when not b then 'false' end", "b"),
        ),
        c("i2", "int2", "Nullable(Int16)", same("i2")),
        c("i4", "int4", "Nullable(Int32)", same("i4")),
        c("i8", "int8", "Nullable(Int64)", same("i8")),
        c("o", "oid", "Nullable(UInt32)", same("o")),
        c("f4", "float4", "Nullable(Float32)", float_bits("f4", 4)),
        c("f8", "float8", "Nullable(Float64)", float_bits("f8", 8)),
        c(
            "n12",
            "numeric(12,3)",
            "Nullable(Decimal(12, 3))",
            col("trim_scale(n12)", "n12"),
        ),
        c("n", "numeric", "Nullable(String)", output_text("n")),
        c(
            "m",
            "money",
            "Nullable(Decimal(19, 2))",
            col("trim_scale(m::numeric)", "m"),
        ),
        c("ch", "\"char\"", "Nullable(String)", output_text("ch")),
        c("bp", "char(5)", "Nullable(String)", output_text("bp")),
        c("vc", "varchar(10)", "Nullable(String)", output_text("vc")),
        c("t", "text", "Nullable(String)", output_text("t")),
        c("nm", "name", "Nullable(String)", output_text("nm")),
        c(
            "nn",
            "text not null default ''",
            "String",
            output_text("nn"),
        ),
        c(
            "bin",
            "bytea",
            "Nullable(String)",
            col("encode(bin, 'hex')", "lower(hex(bin))"),
        ),
        c(
            "d",
            "date",
            "Nullable(Date32)",
            col("to_char(d, 'YYYY-MM-DD')", "toString(d)"),
        ),
        c(
            "tm",
            "time",
            "Nullable(Time64(6))",
            // Via interval so that 24:00:00 prints as itself.
            col("to_char(tm::interval, 'HH24:MI:SS.US')", "toString(tm)"),
        ),
        c("ttz", "timetz", "Nullable(String)", output_text("ttz")),
        c(
            "ts",
            "timestamp",
            "Nullable(DateTime64(6, 'UTC'))",
            timestamp_text("ts", "ts"),
        ),
        c(
            "tstz",
            "timestamptz",
            "Nullable(DateTime64(6, 'UTC'))",
            timestamp_text("tstz at time zone 'UTC'", "tstz"),
        ),
        c("iv", "interval", "Nullable(String)", output_text("iv")),
        c("u", "uuid", "Nullable(UUID)", col("u::text", "toString(u)")),
        c("j", "json", "Nullable(String)", output_text("j")),
        c("jb", "jsonb", "Nullable(String)", output_text("jb")),
        c("ip", "inet", "Nullable(String)", output_text("ip")),
        c("cid", "cidr", "Nullable(String)", output_text("cid")),
        c("mac", "macaddr", "Nullable(String)", output_text("mac")),
        c("mac8", "macaddr8", "Nullable(String)", output_text("mac8")),
        c("bt", "bit(8)", "Nullable(String)", output_text("bt")),
        c("vb", "varbit", "Nullable(String)", output_text("vb")),
        c("pt", "point", "Nullable(String)", output_text("pt")),
        c("ln", "line", "Nullable(String)", output_text("ln")),
        c("ls", "lseg", "Nullable(String)", output_text("ls")),
        c("bx", "box", "Nullable(String)", output_text("bx")),
        c("pa", "path", "Nullable(String)", output_text("pa")),
        c("pg", "polygon", "Nullable(String)", output_text("pg")),
        c("ci", "circle", "Nullable(String)", output_text("ci")),
        c("lsn", "pg_lsn", "Nullable(String)", output_text("lsn")),
        c("r4", "int4range", "Nullable(String)", output_text("r4")),
        c("rn", "numrange", "Nullable(String)", output_text("rn")),
        c("rtz", "tstzrange", "Nullable(String)", output_text("rtz")),
        c("tsv", "tsvector", "Nullable(String)", output_text("tsv")),
        c("tsq", "tsquery", "Nullable(String)", output_text("tsq")),
        c(
            "snap",
            "pg_snapshot",
            "Nullable(String)",
            output_text("snap"),
        ),
        c("i2v", "int2vector", "Nullable(String)", output_text("i2v")),
        c(
            "mr4",
            "int4multirange",
            "Nullable(String)",
            output_text("mr4"),
        ),
        c(
            "mrtz",
            "tstzmultirange",
            "Nullable(String)",
            output_text("mrtz"),
        ),
        c("rec", "rec_t", "Nullable(String)", output_text("rec")),
        // `rce IS NULL` holds for a row without fields: compare the text.
        c(
            "rce",
            "empty_t",
            "Nullable(String)",
            col(&esc_pg("rce::text"), &esc_ch("rce")),
        ),
        c(
            "apt",
            "point[]",
            "Array(Nullable(String))",
            array_flat("apt"),
        ),
        c(
            "e",
            "mood",
            "LowCardinality(Nullable(String))",
            output_text("e"),
        ),
        c("dpos", "posint", "Nullable(Int32)", same("dpos")),
        c(
            "dtext",
            "shorttext",
            "Nullable(String)",
            output_text("dtext"),
        ),
        c("ai", "int4[]", "Array(Nullable(Int32))", array_flat("ai")),
        c(
            "atext",
            "text[]",
            "Array(Nullable(String))",
            array_flat("atext"),
        ),
        c(
            "a2",
            "int[][]",
            "Array(Array(Nullable(Int32)))",
            array_flat("a2"),
        ),
        c(
            "anum",
            "numeric[]",
            "Array(Nullable(String))",
            array_flat("anum"),
        ),
        c(
            "adom",
            "posint[]",
            "Array(Nullable(Int32))",
            array_flat("adom"),
        ),
        c(
            "alist",
            "intlist",
            "Array(Nullable(Int32))",
            array_flat("alist"),
        ),
        c(
            "dprice",
            "price",
            "Nullable(Decimal(10, 2))",
            col("trim_scale(dprice)", "dprice"),
        ),
        c(
            "amood",
            "mood[]",
            "Array(LowCardinality(Nullable(String)))",
            array_flat("amood"),
        ),
        // NOT NULL columns have non-Nullable ClickHouse types.
        c(
            "enn",
            "mood not null default 'ok'",
            "LowCardinality(String)",
            output_text("enn"),
        ),
        c(
            "dnn",
            "date not null default '2000-01-01'",
            "Date32",
            col("to_char(dnn, 'YYYY-MM-DD')", "toString(dnn)"),
        ),
        c(
            "f8nn",
            "float8 not null default 'NaN'",
            "Float64",
            float_bits("f8nn", 8),
        ),
        c(
            "tsnn",
            "timestamptz not null default '2000-01-01 00:00:00+00'",
            "DateTime64(6, 'UTC')",
            timestamp_text("tsnn at time zone 'UTC'", "tsnn"),
        ),
    ];
    if with_xml {
        cols.push(c("x", "xml", "Nullable(String)", output_text("x")));
    }
    cols
}

fn type_schema(cols: &[TypeColumn]) -> String {
    let decls: Vec<String> = cols
        .iter()
        .map(|c| format!("    {} {}", c.name, c.decl))
        .collect();
    format!(
        "create type mood as enum ('sad', 'ok', 'happy', 'très \"content\"');
         create domain posint as int check (value > 0);
         create domain shorttext as text check (length(value) < 100);
         create domain intlist as int[];
         create domain price as numeric(10,2);
         create type rec_in as (i int, t timestamptz);
         create type rec_t as (n int, s text, a numeric[], r rec_in);
         create type empty_t as ();
         create table public.all_types (\n{}\n);
         -- Large values of nn go out of line uncompressed.
         alter table public.all_types alter column nn set storage external;",
        decls.join(",\n")
    )
}

/// The rows inserted, as `(column, SQL literal)`; `x` is left out where
/// the server has no libxml.
fn type_rows() -> Vec<Vec<(&'static str, &'static str)>> {
    vec![
        // Typical values.
        vec![
            ("id", "1"),
            ("b", "true"),
            ("i2", "12"),
            ("i4", "1234"),
            ("i8", "123456789012"),
            ("o", "12345"),
            ("f4", "1.5"),
            ("f8", "3.141592653589793"),
            ("n12", "123456789.123"),
            ("n", "3.14159265358979323846264338327950288"),
            ("m", "1234.56"),
            ("ch", "'a'"),
            ("bp", "'ab'"),
            ("vc", "'hello'"),
            ("t", "'plain text'"),
            ("nm", "'a_name'"),
            ("nn", "'x'"),
            ("bin", r"'\x00ff10'"),
            ("d", "'2024-02-29'"),
            ("tm", "'12:34:56.5'"),
            ("ttz", "'12:34:56.789-05:30'"),
            ("ts", "'2024-02-29 12:34:56.123456'"),
            ("tstz", "'2024-02-29 12:34:56.123456+02'"),
            ("iv", "'1 year 2 mons 3 days 04:05:06.789'"),
            ("u", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'"),
            ("j", r#"'{"a": [1, 2.50, "x"], "b": null}'"#),
            ("jb", r#"'{"a": {"b": [1, 2, {"c": "d"}]}, "n": 1.50}'"#),
            ("ip", "'192.168.0.1/24'"),
            ("cid", "'10.0.0.0/8'"),
            ("mac", "'08:00:2b:01:02:03'"),
            ("mac8", "'08:00:2b:01:02:03:04:05'"),
            ("bt", "'10101010'"),
            ("vb", "'101'"),
            ("pt", "'(1.5,-2)'"),
            ("ln", "'{1,-1,0}'"),
            ("ls", "'[(0,0),(1,1)]'"),
            ("bx", "'(2,2),(0,0)'"),
            ("pa", "'[(0,0),(1,1),(2,0)]'"),
            ("pg", "'((0,0),(1,1),(1,0))'"),
            ("ci", "'<(1,2),3>'"),
            ("lsn", "'16/B374D848'"),
            ("r4", "'[1,10]'"),
            ("rn", "'[1.5,2.25)'"),
            ("rtz", "'[2024-01-01 00:00:00+02,)'"),
            (
                "tsv",
                "setweight(to_tsvector('simple', 'the quick fox'), 'B') || 'it''s:3A plain'::tsvector",
            ),
            ("snap", "'10:20:12,15'"),
            (
                "tsq",
                r"$q$'fat':*AB & !( 'rat' | 'c''at' ) <2> 'back\\slash' <-> x:D$q$",
            ),
            ("mr4", "'{[1,3),[5,8),[10,)}'"),
            (
                "rec",
                r#"row(1, 'a "b"', '{1.5,NaN}', row(2, null)::rec_in)::rec_t"#,
            ),
            ("rce", "'()'"),
            (
                "mrtz",
                "'{[2024-01-01 00:00:00+02,2024-01-02 00:00:00+00),[2030-01-01 00:00:00+00,)}'",
            ),
            ("i2v", "'1 -2 32767'"),
            ("apt", r#"'{"(1,2)",NULL,"(3.25,-4)"}'"#),
            ("x", r#"'<a b="1">t</a>'"#),
            ("e", "'ok'"),
            ("dpos", "7"),
            ("dtext", "'dom'"),
            ("ai", "'{1,NULL,3}'"),
            ("atext", r#"'{a,"b c",NULL}'"#),
            ("a2", "'{{1,2,3},{4,NULL,6}}'"),
            ("anum", "'{1.5,NULL,-2}'"),
            ("adom", "'{1,2}'"),
            ("alist", "'{7,NULL}'"),
            ("dprice", "12345678.91"),
            ("amood", r#"'{sad,NULL,"très \"content\""}'"#),
            ("enn", "'happy'"),
            ("dnn", "'2299-12-31'"),
            ("f8nn", "'-0'"),
            ("tsnn", "'2024-06-30 23:59:59.999999-12'"),
        ],
        // Lower ends and empty values.
        vec![
            ("id", "2"),
            ("b", "false"),
            ("i2", "-32768"),
            ("i4", "-2147483648"),
            ("i8", "-9223372036854775808"),
            ("o", "0"),
            ("f4", "-3.4028235e38"),
            ("f8", "-1.7976931348623157e308"),
            ("n12", "-999999999.999"),
            ("n", "-0.000000000000000000000000000001"),
            ("m", "-92233720368547758.08"),
            ("ch", "''"),
            ("bp", "''"),
            ("vc", "''"),
            ("t", "''"),
            ("nm", "''"),
            ("nn", "''"),
            ("bin", r"'\x'"),
            ("d", "'1900-01-01'"),
            ("tm", "'00:00:00'"),
            ("ttz", "'00:00:00+15:59'"),
            ("ts", "'1900-01-01 00:00:00'"),
            ("tstz", "'1900-01-01 00:00:00+00'"),
            (
                "iv",
                "'-177999999 years -11 mons -2147483648 days -2562047788:00:54.775807'",
            ),
            ("u", "'00000000-0000-0000-0000-000000000000'"),
            ("j", "'{}'"),
            ("jb", "'[]'"),
            ("ip", "'0.0.0.0'"),
            ("cid", "'0.0.0.0/0'"),
            ("mac", "'00:00:00:00:00:00'"),
            ("mac8", "'00:00:00:00:00:00:00:00'"),
            ("bt", "'00000000'"),
            ("vb", "''"),
            ("pt", "'(NaN,-Infinity)'"),
            ("ln", "'{1e300,-1e-300,0}'"),
            ("ls", "'[(-0,0),(Infinity,-Infinity)]'"),
            ("bx", "'(0,0),(1e300,-1e300)'"),
            ("pa", "'((0,0),(0.1,0.2),(-0,5e-324))'"),
            ("pg", "'((1,1))'"),
            ("ci", "'<(0,0),0>'"),
            ("lsn", "'0/0'"),
            ("r4", "'empty'"),
            ("rn", "'(,NaN]'"),
            ("rtz", "'[-infinity,infinity]'"),
            ("tsv", "''"),
            (
                "tsq",
                "$q$!!a & ( b | c ) & ( d <-> ( e <-> f ) ) | g <0> h$q$",
            ),
            ("snap", "'1:1:'"),
            ("mr4", "'{}'"),
            ("rec", "row(null, '', '{}', null)::rec_t"),
            ("mrtz", "'{(,)}'"),
            ("i2v", "''"),
            ("apt", "'{}'"),
            ("x", "''"),
            ("e", "'sad'"),
            ("dpos", "1"),
            ("dtext", "''"),
            ("ai", "'{}'"),
            ("atext", "'{}'"),
            ("a2", "'{}'"),
            ("anum", "'{}'"),
            ("adom", "'{}'"),
            ("alist", "'{}'"),
            ("dprice", "-0.01"),
            ("amood", "'{}'"),
            ("enn", "'sad'"),
            ("dnn", "'1900-01-01'"),
            ("f8nn", "'-Infinity'"),
            ("tsnn", "'1900-01-01 00:00:00+00'"),
        ],
        // Upper ends.
        vec![
            ("id", "3"),
            ("b", "true"),
            ("i2", "32767"),
            ("i4", "2147483647"),
            ("i8", "9223372036854775807"),
            ("o", "4294967295"),
            ("f4", "3.4028235e38"),
            ("f8", "1.7976931348623157e308"),
            ("n12", "999999999.999"),
            ("n", "1e300"),
            ("m", "92233720368547758.07"),
            ("ch", "'z'"),
            ("bp", "'abcde'"),
            ("vc", "'日本語日本語日本語日'"),
            ("t", "repeat('long ', 400)"),
            ("nm", "repeat('n', 63)"),
            ("nn", "'max'"),
            (
                "bin",
                "(select decode(string_agg(lpad(to_hex(g), 2, '0'), ''), 'hex') from generate_series(0, 255) g)",
            ),
            ("d", "'2299-12-31'"),
            ("tm", "'24:00:00'"),
            ("ttz", "'24:00:00-15:59'"),
            ("ts", "'2299-12-31 23:59:59.999999'"),
            ("tstz", "'2299-12-31 23:59:59.999999+00'"),
            (
                "pa",
                "(select ('[' || string_agg(format('(%s,%s)', g, g * 0.5), ',') || ']')::path from generate_series(1, 500) g)",
            ),
            (
                "pg",
                "(select ('(' || string_agg(format('(%s,%s)', g * 1.5, -g), ',') || ')')::polygon from generate_series(1, 500) g)",
            ),
            ("lsn", "'FFFFFFFF/FFFFFFFF'"),
            (
                "iv",
                "'177999999 years 11 mons 2147483647 days 2562047788:00:54.775807'",
            ),
            ("u", "'ffffffff-ffff-ffff-ffff-ffffffffffff'"),
            ("j", r#"'{"d": {"e": {"f": [[[]]]}}, "dup": 1, "dup": 2}'"#),
            (
                "jb",
                r#"'{"big": 123456789012345678901234567890.123456789, "neg": -0.0001, "exp": 1e-10, "arr": [true, false, null], "": ""}'"#,
            ),
            ("ip", "'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff'"),
            ("cid", "'2001:db8::/32'"),
            ("mac", "'ff:ff:ff:ff:ff:ff'"),
            ("mac8", "'ff:ff:ff:ff:ff:ff:ff:ff'"),
            ("bt", "'11111111'"),
            ("vb", "repeat('10', 40)::varbit"),
            ("x", "'<r><![CDATA[x]]></r>'"),
            ("e", "'happy'"),
            ("dpos", "2147483647"),
            ("dtext", "'ü'"),
            ("ai", "'{-2147483648,2147483647}'"),
            ("atext", r#"'{"","NULL","a,b","q\"uote","back\\slash"}'"#),
            ("a2", "'{{1},{2}}'"),
            (
                "anum",
                "'{NaN,Infinity,-Infinity,1e-20,123456789012345678901234567890}'",
            ),
            ("adom", "'{2147483647}'"),
            ("alist", "'{1,2,3}'"),
            ("dprice", "99999999.99"),
            ("amood", "'{happy,ok}'"),
            ("f8nn", "1e-300"),
        ],
        // NaN, unicode, escapes, a high-bit "char", a line break in a NOT
        // NULL column; the rest NULL.
        vec![
            ("id", "4"),
            ("f4", "'NaN'"),
            ("f8", "'NaN'"),
            ("n", "'NaN'"),
            ("ch", r"'\351'"),
            ("bp", "'äöü'"),
            ("vc", "'ü'"),
            (
                "t",
                r#"E'tab\there\nnewline\\back "quote" \'single\' ünïcödé 日本語 🎉 \u0001 \r cr'"#,
            ),
            ("nm", "'ünï'"),
            ("nn", r"E'line\nbreak'"),
            ("d", "'1970-01-01'"),
            ("ts", "'1969-12-31 23:59:59.999999'"),
            ("tstz", "'1999-12-31 23:59:59.999999-08'"),
            ("tm", "'00:00:00.000001'"),
            ("ttz", "'23:59:59.999999+00'"),
            ("iv", "'1 mon -1 day -00:00:00.000001'"),
            (
                "j",
                r#"E'{\n  "k": "line\\nbreak \\u00e9 \\"q\\"",\n  "n": 1.0e400\n}'"#,
            ),
            (
                "jb",
                r#"E'{"ü": "日本", "esc": "tab\\there\\n \\u00e9 \\u0001 \\"q\\" \\\\", "num": [0, -0, 1.5e3, 1E-7, 100000000000000000000000], "deep": [[[{"a": [{}]}]]]}'"#,
            ),
            ("ip", "'::1'"),
            ("cid", "'2001:db8:1234::/48'"),
            ("vb", "'1'"),
            ("x", "'<a>ü &amp; &lt;</a>'"),
            ("e", r#"'très "content"'"#),
            ("dtext", r"E'esc\\ape'"),
            ("ai", "'{NULL}'"),
            ("atext", r#"'{"ü,\"x\"",NULL,""}'"#),
            ("a2", "'{{NULL,NULL}}'"),
            ("anum", "'{NULL}'"),
        ],
        // Everything NULL.
        vec![("id", "5")],
        vec![
            ("id", "6"),
            ("f4", "'Infinity'"),
            ("f8", "'-Infinity'"),
            ("n", "'Infinity'"),
            ("vb", "''"),
            ("atext", r#"'{""}'"#),
            ("ai", "'{NULL,NULL}'"),
            ("anum", "'{NULL,NULL}'"),
            ("ip", "'2001:db8::ff00:42:8329/64'"),
            ("iv", "'0'"),
            ("d", "'1999-12-31'"),
            ("ts", "'2000-01-01 00:00:00'"),
        ],
        vec![
            ("id", "11"),
            ("f4", "'-Infinity'"),
            ("f8", "'Infinity'"),
            ("n", "'-Infinity'"),
        ],
        vec![
            ("id", "12"),
            ("f4", "'-0'"),
            ("f8", "'-0'"),
            ("n", "repeat('9', 1000)::numeric"),
            ("n12", "-0.0005"),
        ],
        vec![
            ("id", "13"),
            ("f4", "1.4e-45"),
            ("f8", "5e-324"),
            ("n", "('0.' || repeat('0', 500) || '1')::numeric"),
            ("n12", "0.0004"),
        ],
        vec![("id", "14"), ("f4", "0.1"), ("f8", "0.1"), ("n", "-0.0")],
        // Out-of-line values (TOAST), compressed and not.
        vec![
            ("id", "7"),
            (
                "t",
                "(select string_agg(md5(g::text), '') from generate_series(1, 10000) g)",
            ),
            (
                "jb",
                "(select jsonb_agg(jsonb_build_object('k', g, 'v', md5(g::text))) from generate_series(1, 3000) g)",
            ),
            (
                "bin",
                "(select decode(string_agg(md5(g::text), ''), 'hex') from generate_series(1, 10000) g)",
            ),
            (
                "atext",
                "(select array_agg(md5(g::text)) from generate_series(1, 3000) g)",
            ),
            ("j", "(select json_agg(g) from generate_series(1, 20000) g)"),
            (
                "n",
                "(select string_agg((g % 10)::text, '') from generate_series(1, 5000) g)::numeric",
            ),
        ],
        vec![
            ("id", "10"),
            (
                "nn",
                "(select string_agg(md5((g * 7)::text), '') from generate_series(1, 3000) g)",
            ),
            (
                "jb",
                "(select jsonb_agg(md5(g::text)) from generate_series(1, 4000) g)",
            ),
        ],
    ]
}

fn insert_sql(row: &[(&str, &str)], with_xml: bool) -> String {
    let row: Vec<&(&str, &str)> = row.iter().filter(|(c, _)| with_xml || *c != "x").collect();
    let names: Vec<&str> = row.iter().map(|(c, _)| *c).collect();
    let values: Vec<&str> = row.iter().map(|(_, v)| *v).collect();
    format!(
        "insert into public.all_types ({}) values ({})",
        names.join(", "),
        values.join(", ")
    )
}

/// Updates and deletes, one transaction per statement unless grouped.
const TYPE_CHANGES: &[&str] = &[
    r#"update all_types set t = 'changed ü', f8 = '-0', jb = '{"new": [true, {"k": "v"}]}', ai = '{9,NULL}', ts = '2000-01-01 00:00:00.000001', tstz = '2000-01-01 00:00:00.000001+00' where id = 1"#,
    "update all_types set b = null, i2 = null, f4 = null, t = null, tm = null, u = null, ai = null, atext = null, jb = null, e = null where id = 4",
    "update all_types set b = true, i8 = 42, n = 1e-300, d = '2299-12-31', e = 'happy', a2 = '{{7,8},{9,10}}', ip = '10.1.2.3/16', mac = 'aa:bb:cc:dd:ee:ff', tm = '23:59:59.999999' where id = 5",
    "update all_types set id = 30 where id = 3",
    "delete from all_types where id = 2",
    "begin; insert into all_types (id, t) values (8, 'gone'); delete from all_types where id = 8; commit",
    "insert into all_types (id, t) values (9, 'later gone')",
    // Every out-of-line column is rewritten, so its new chunks are in this
    // transaction.
    r#"update all_types set t = t || 'tail', jb = jb || '{"tail": true}', bin = bin || '\xff'::bytea, atext = atext || 'tail'::text, j = (select json_agg(g) from generate_series(1, 20001) g), n = n + 1, i4 = 7 where id = 7"#,
    "delete from all_types where id in (9, 10)",
    "begin; update all_types set i4 = coalesce(i4, 0) + 1 where id in (1, 6); update all_types set i4 = 0, vc = 'twice' where id = 1; commit",
    "begin; update all_types set t = 'rolled back' where id = 1; rollback",
];

fn clip(s: &str) -> String {
    if s.len() <= 300 {
        return s.to_owned();
    }
    let mut end = 300;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &s[..end], s.len())
}

/// The oracle one column at a time (beside the key), so that a difference
/// names the column; every difference is collected before failing.
fn assert_columns(
    h: &StreamHarness,
    pg_table: &str,
    ch_table: &str,
    key: &OracleColumn,
    cols: &[(&str, OracleColumn)],
) -> Result<()> {
    let mut failures = Vec::new();
    for (name, c) in cols {
        let pair = [key.clone(), c.clone()];
        let src = h
            .source_rows(pg_table, &pair)
            .with_context(|| format!("source column {name}"))?;
        let dst = h
            .clickhouse_rows(ch_table, &pair)
            .with_context(|| format!("ClickHouse column {name}"))?;
        if src != dst {
            let only_src: Vec<String> = src
                .iter()
                .filter(|r| !dst.contains(r))
                .take(5)
                .map(|r| clip(r))
                .collect();
            let only_dst: Vec<String> = dst
                .iter()
                .filter(|r| !src.contains(r))
                .take(5)
                .map(|r| clip(r))
                .collect();
            failures.push(format!(
                "column {name}: source {} rows, ClickHouse {}\n  only in source:     {only_src:?}\n  only in ClickHouse: {only_dst:?}",
                src.len(),
                dst.len()
            ));
        }
    }
    if !failures.is_empty() {
        bail!(
            "{pg_table} differs from ClickHouse {ch_table} in {} column(s):\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
    Ok(())
}

/// ClickHouse column types of `app.table`, `name → type`.
fn clickhouse_types(h: &StreamHarness, table: &str) -> Result<Vec<(String, String)>> {
    let out = h.ch.query(&format!(
        "SELECT name, type FROM system.columns WHERE database = 'app' AND table = '{table}' ORDER BY position FORMAT TSVRaw"
    ))?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(n, t)| (n.to_owned(), t.to_owned()))
        .collect())
}

fn status_text(h: &StreamHarness) -> Result<String> {
    h.cli_ok(&["status", "--config", h.config()])
}

fn ensure_none_stopped(h: &StreamHarness) -> Result<()> {
    let status = status_text(h)?;
    ensure!(!status.contains("STOPPED"), "a table stopped:\n{status}");
    Ok(())
}

fn every_type(major: PgMajor) -> Result<()> {
    // The PostgreSQL 18 build here has no libxml, so xml only on 15.
    let with_xml = major == PgMajor::V15;
    let cols = type_columns(with_xml);
    let mut h = StreamHarness::new(
        BIN,
        major,
        "types",
        &["public.all_types"],
        "[backfill]\nbackup_checkpoint = \"fast\"\n",
    )?;
    h.source.psql(&type_schema(&cols))?;
    h.init()?;
    h.start_run()?;
    for row in type_rows() {
        h.source.psql(&insert_sql(&row, with_xml))?;
    }
    h.wait_caught_up(CATCH_UP)?;
    let oracle: Vec<(&str, OracleColumn)> = cols
        .iter()
        .filter(|c| c.name != "id")
        .map(|c| (c.name, c.oracle.clone()))
        .chain([(
            "a2 dimensions",
            col(
                "coalesce(array_dims(a2), '')",
                "if(empty(a2), '', concat('[1:', toString(length(a2)), '][1:', toString(length(a2[1])), ']'))",
            ),
        )])
        .collect();
    let key = same("id");
    ensure_none_stopped(&h)?;
    assert_columns(&h, "public.all_types", "all_types", &key, &oracle)
        .context("after the inserts")?;

    for sql in TYPE_CHANGES {
        h.source.psql(sql)?;
    }
    // COPY writes multi-insert records (out-of-line values too): every row
    // again under id + 100, through a file the server writes and reads.
    let names: Vec<&str> = cols.iter().map(|c| c.name).collect();
    let file = format!(
        "/tmp/walshadow-types-{}-{}.copy",
        std::process::id(),
        major.number()
    );
    h.source.psql(&format!(
        "copy (select id + 100, {} from all_types) to '{file}'; copy all_types ({}) from '{file}'",
        names[1..].join(", "),
        names.join(", ")
    ))?;
    let _ = std::fs::remove_file(&file);
    h.wait_caught_up(CATCH_UP)?;
    ensure_none_stopped(&h)?;
    assert_columns(&h, "public.all_types", "all_types", &key, &oracle)
        .context("after the updates, deletes and COPY")?;
    let all: Vec<OracleColumn> = std::iter::once(key.clone())
        .chain(oracle.iter().map(|(_, c)| c.clone()))
        .collect();
    let n = h.assert_equal("public.all_types", "all_types", &all)?;
    ensure!(n == 20, "expected 20 rows, the source has {n}");

    // The same rows through both loads: a copy of the table opted in with
    // `copy` (binary COPY), another with `base_backup` (the page walk).
    // (Made with the same declarations: LIKE drops array dimensions.)
    let decls: Vec<String> = cols
        .iter()
        .map(|c| format!("{} {}", c.name, c.decl))
        .collect();
    let mut sql = String::new();
    for t in ["all_types_c", "all_types_b"] {
        sql.push_str(&format!(
            "create table public.{t} ({});
             alter table public.{t} alter column nn set storage external;
             insert into public.{t} select * from public.all_types;",
            decls.join(", ")
        ));
    }
    sql.push_str(
        "insert into walshadow.tables (schema_name, table_name, initial_load) values
           ('public', 'all_types_c', 'copy'), ('public', 'all_types_b', 'base_backup');",
    );
    h.source.psql(&sql)?;
    wait_loaded(&mut h, "public.all_types_c")?;
    wait_loaded(&mut h, "public.all_types_b")?;
    for t in ["all_types_c", "all_types_b"] {
        let n = h.assert_equal(&format!("public.{t}"), t, &all)?;
        ensure!(n == 20, "{t}: expected 20 rows, the source has {n}");
    }

    // The ClickHouse types are the documented mapping.
    let types = clickhouse_types(&h, "all_types")?;
    for c in &cols {
        let got = types
            .iter()
            .find(|(n, _)| n == c.name)
            .map(|(_, t)| t.as_str());
        ensure!(
            got == Some(c.ch_type),
            "column {} ({}): ClickHouse type {got:?}, the mapping says {}",
            c.name,
            c.decl,
            c.ch_type
        );
    }
    h.stop_run()?;
    Ok(())
}

per_major!(every_type => every_type_streams_exactly: pg15, pg16, pg17, pg18);

const PARTITIONED: &str = "
create table public.measure (
    id int not null,
    day date not null,
    v text,
    n numeric(10,2),
    primary key (id, day)
) partition by range (day);
create table public.measure_2023 partition of public.measure
    for values from ('2023-01-01') to ('2024-01-01');
create table public.measure_2024 partition of public.measure
    for values from ('2024-01-01') to ('2025-01-01');
-- Another column order and a dropped column, attached.
create table public.measure_2022_src (n numeric(10,2), gone int, v text, day date not null, id int not null);
alter table public.measure_2022_src drop column gone;
alter table public.measure attach partition public.measure_2022_src
    for values from ('2022-01-01') to ('2023-01-01');
";

fn measure_columns() -> Vec<OracleColumn> {
    vec![
        same("id"),
        col("to_char(day, 'YYYY-MM-DD')", "toString(day)"),
        col(
            "left(v, 20) || ':' || md5(v)",
            "concat(left(v, 20), ':', lower(hex(MD5(v))))",
        ),
        col("trim_scale(n)", "n"),
    ]
}

fn partitions(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "parts", &["public.measure"], "")?;
    h.source.psql(PARTITIONED)?;
    h.init()?;
    h.start_run()?;
    // 2022-01-08 .. 2024-11-16: the attached 2022 partition, 2023, 2024.
    h.source.psql(
        "insert into measure (id, day, v, n) select g, date '2022-01-01' + g * 7, 'v' || g, g * 1.25 from generate_series(1, 150) g",
    )?;
    // Partitions after init: a new one, an attached one with its own
    // column order (attached and filled in one transaction), a DEFAULT.
    h.source.psql(
        "create table measure_2025 partition of measure for values from ('2025-01-01') to ('2026-01-01');
         create table measure_2026_src (v text, id int not null, n numeric(10,2), day date not null);
         begin;
         alter table measure attach partition measure_2026_src for values from ('2026-01-01') to ('2027-01-01');
         insert into measure values (1000, '2026-03-01', 'in 2026', 1);
         commit;
         create table measure_default partition of measure default;
         insert into measure (id, day, v, n) values
             (2000, '2030-01-01', 'default', 2), (2001, '2010-05-05', 'default old', 3),
             (2002, '2025-07-01', '2025', 4), (2003, '2026-12-31', '2026 b', 5);",
    )?;
    h.source.psql(
        "update measure set v = v || ' upd', n = n + 1 where id % 10 = 0;
         -- Moves between partitions: delete from one, insert into another.
         update measure set day = '2025-06-01' where id = 3;
         update measure set day = '2030-06-01' where id = 50;
         update measure set day = '2022-06-15', v = 'moved back' where id = 1000;
         update measure set day = '2026-02-02', v = 'to 2026' where id = 2002;
         begin; update measure set day = '2024-02-02' where id = 2000; update measure set v = 'moved and changed' where id = 2000; commit;
         -- Within a partition, key changed.
         update measure set day = day + 1 where id = 60;
         delete from measure where id % 13 = 0;
         delete from measure where id = 2001;
         insert into measure_2024 (id, day, v) values (3000, '2024-05-05', 'into the partition');
         update measure_2023 set v = 'through the partition' where id = 60;
         delete from measure_2022_src where id = 5;
         -- Out of line, in an attached partition and in a new one whose
         -- first write it is (after a write to another partition).
         insert into measure (id, day, v) values (4000, '2026-06-06', (select string_agg(md5(g::text), '') from generate_series(1, 3000) g));
         create table measure_2027 partition of measure for values from ('2027-01-01') to ('2028-01-01');
         begin;
         insert into measure values (4001, '2023-03-03', 'before', 1);
         insert into measure (id, day, v) values (4002, '2027-06-06', (select string_agg(md5((g * 3)::text), '') from generate_series(1, 3000) g));
         commit;",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    // The partition attached with whatever its file held reloads the
    // table (a resync): readers see the old rows until its swap.
    wait_until(CATCH_UP, "public.measure streaming, no reload left", || {
        h.check_running()?;
        Ok(h.table_state("public.measure")?["state"] == "streaming")
    })?;
    h.wait_caught_up(CATCH_UP)?;
    ensure_none_stopped(&h)?;
    let n = h.assert_equal("public.measure", "measure", &measure_columns())?;
    ensure!(n > 130, "only {n} rows in measure");
    // Rows of each partition are there (a partition streaming nothing
    // would not show in the count alone).
    let per_partition = h.source.psql(
        "select tableoid::regclass::text || '=' || count(*) from measure group by tableoid order by 1",
    )?;
    eprintln!("rows per partition:\n{per_partition}");
    ensure!(
        per_partition.lines().count() == 7,
        "rows expected in all 7 partitions:\n{per_partition}"
    );
    let tables = h.ch.query(
        "SELECT name FROM system.tables WHERE database = 'app' ORDER BY name FORMAT TSVRaw",
    )?;
    ensure!(
        tables.trim() == "measure",
        "ClickHouse tables other than the root's: {tables:?}"
    );
    h.stop_run()?;
    Ok(())
}

per_major!(partitions => partitioned_table_streams_into_its_root: pg15, pg18);

fn pinned_later(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(
        BIN,
        major,
        "later",
        &["public.later", "extra.later_too"],
        "",
    )?;
    h.source
        .psql("create table public.present (k int primary key)")?;
    h.init()?;
    h.start_run()?;
    h.source.psql(
        "begin; create table public.later (id int primary key, v text); insert into public.later values (-1, 'rolled back'); rollback;
         insert into present values (1);",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    for table in ["later", "extra__later_too"] {
        let exists = h.ch.query(&format!("EXISTS TABLE app.{table}"))?;
        ensure!(
            exists.trim() == "0",
            "{table} is in ClickHouse before the source has it"
        );
    }
    ensure_none_stopped(&h)?;
    h.source.psql(
        "begin;
         create table public.later (id int primary key, v text, big text, ts timestamptz default '2024-01-01 00:00:00+00');
         insert into public.later (id, v) select g, 'first ' || g from generate_series(1, 50) g;
         -- Out of line, written in the creating transaction.
         insert into public.later (id, v, big) values (101, 'toast', (select string_agg(md5(g::text), '') from generate_series(1, 3000) g));
         update public.later set v = 'same txn' where id = 1;
         commit;
         insert into public.later (id, v) values (51, 'after');
         update public.later set v = 'upd' where id % 5 = 0;
         delete from public.later where id % 7 = 0;
         create schema extra;
         begin;
         create table extra.later_too (k text primary key, n int);
         insert into extra.later_too values ('a', 1), ('b', 2);
         update extra.later_too set n = 3 where k = 'a';
         commit;
         insert into extra.later_too values ('c', 4);
         delete from extra.later_too where k = 'b';",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    ensure_none_stopped(&h)?;
    let later_cols = [
        same("id"),
        same("v"),
        col("md5(big)", "if(big IS NULL, NULL, lower(hex(MD5(big))))"),
        timestamp_text("ts at time zone 'UTC'", "ts"),
    ];
    let n = h.assert_equal("public.later", "later", &later_cols)?;
    ensure!(n == 45, "expected 45 rows in later, the source has {n}");
    let n = h.assert_equal(
        "extra.later_too",
        "extra__later_too",
        &[same("k"), same("n")],
    )?;
    ensure!(
        n == 2,
        "expected 2 rows in extra.later_too, the source has {n}"
    );
    let status = status_text(&h)?;
    ensure!(
        status.contains("extra.later_too -> extra__later_too"),
        "status:\n{status}"
    );
    h.stop_run()?;
    Ok(())
}

per_major!(pinned_later => table_created_mid_stream_is_streamed: pg15, pg18);

const STOPS_SCHEMA: &str = "
create table public.good (id int primary key, v text);
create table public.geo (id int primary key, p jsonpath, v text);
create table public.retype (id int primary key, n int, v text);
create table public.toasty (id int primary key, big text, small int);
-- Uncompressed out of line, so the value is surely in TOAST chunks.
alter table public.toasty alter column big set storage external;
";

/// The table's entry in `status --json`'s `tables`, stopped.
fn stopped_json<'a>(status: &'a serde_json::Value, key: &str) -> Result<&'a serde_json::Value> {
    let stopped = &status["tables"][key]["stopped"];
    ensure!(
        stopped.is_object(),
        "{key} is not stopped in status --json: {status:#}"
    );
    Ok(stopped)
}

fn stops_alone(major: PgMajor) -> Result<()> {
    let tables = [
        "public.good",
        "public.geo",
        "public.retype",
        "public.toasty",
    ];
    let mut h = StreamHarness::new(BIN, major, "stops", &tables, "")?;
    h.source.psql(STOPS_SCHEMA)?;
    h.init()?;
    h.start_run()?;
    h.source.psql(
        "insert into good select g, 'g' || g from generate_series(1, 20) g;
         insert into geo values (1, '$.a', 'x');
         insert into retype select g, g, 'r' || g from generate_series(1, 10) g;
         insert into toasty values (1, (select string_agg(md5(g::text), '') from generate_series(1, 2000) g), 1);",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    let good = [same("id"), same("v")];
    let retype = [same("id"), same("n"), same("v")];
    let toasty = [
        same("id"),
        col("md5(big)", "if(big IS NULL, NULL, lower(hex(MD5(big))))"),
        same("small"),
    ];
    h.assert_equal("public.good", "good", &good)?;
    h.assert_equal("public.retype", "retype", &retype)?;
    h.assert_equal("public.toasty", "toasty", &toasty)?;

    // (a) jsonpath: refused from the start, naming the column and its type.
    let status = h.status_json()?;
    let geo = stopped_json(&status, "public.geo")?;
    let reason = geo["reason"].as_str().unwrap_or_default();
    ensure!(
        reason.contains("column p") && reason.contains("jsonpath"),
        "geo's reason names neither the column nor the type: {reason}"
    );
    ensure!(
        !geo["remedy"].as_str().unwrap_or_default().is_empty(),
        "geo stopped without a remedy: {geo}"
    );
    for key in ["public.good", "public.retype", "public.toasty"] {
        ensure!(
            status["tables"][key]["stopped"].is_null(),
            "{key} stopped: {status:#}"
        );
    }

    // (b) a column type change, with rows of another table in the same
    // transaction.
    let retype_before = h.source_rows("public.retype", &retype)?;
    let before_alter = h.source.current_lsn()?;
    h.source.psql(
        "begin; alter table retype alter column n type numeric(20, 0); insert into good values (100, 'same txn as the alter'); commit;
         insert into retype values (11, 11, 'after the alter');
         update retype set v = 'after' where id = 1;
         insert into good values (101, 'after the alter');",
    )?;

    // (c) an UPDATE of another column: the new tuple points at chunks an
    // earlier transaction wrote (resolved from the chunk mirror).
    let before_update = h.source.current_lsn()?;
    h.source.psql(
        "begin; update toasty set small = 2 where id = 1; insert into good values (102, 'same txn as the update'); commit;",
    )?;
    h.source.psql(
        "insert into good values (103, 'after the update');
         insert into toasty values (2, 'short', 1);
         update good set v = 'still streaming' where id < 5;
         delete from good where id = 20;",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.good", "good", &good)?;
    // The stopped tables hold what they had before their stop, no
    // placeholder.
    let retype_after = h.clickhouse_rows("retype", &retype)?;
    ensure!(
        retype_after == retype_before,
        "retype in ClickHouse after its stop: {retype_after:?}, expected {retype_before:?}"
    );
    h.assert_equal("public.toasty", "toasty", &toasty)?;

    let status = h.status_json()?;
    let rt = stopped_json(&status, "public.retype")?;
    let reason = rt["reason"].as_str().unwrap_or_default();
    ensure!(
        reason.contains("\"n\"")
            && reason.contains("changed type")
            && reason.contains("Decimal(20, 0)"),
        "retype's reason does not name the change: {reason}"
    );
    ensure!(
        !rt["remedy"].as_str().unwrap_or_default().is_empty(),
        "retype stopped without a remedy: {rt}"
    );
    let rt_lsn: Lsn = rt["lsn"]
        .as_str()
        .unwrap_or_default()
        .parse()
        .with_context(|| format!("retype's stop LSN: {rt}"))?;
    ensure!(
        rt_lsn > before_alter && rt_lsn < before_update,
        "retype stopped at {rt_lsn}, not at the ALTER (between {before_alter} and {before_update})"
    );
    ensure!(
        status["tables"]["public.good"]["stopped"].is_null(),
        "good stopped: {status:#}"
    );

    // The text form shows the same.
    let text = status_text(&h)?;
    eprintln!("{text}");
    for (key, words) in [
        ("public.geo", ["column p", "jsonpath"]),
        ("public.retype", ["\"n\"", "changed type"]),
    ] {
        let line = text
            .lines()
            .position(|l| l.trim_start().starts_with(&format!("{key} ->")))
            .with_context(|| format!("{key} missing from status:\n{text}"))?;
        let lines: Vec<&str> = text.lines().collect();
        let entry = lines[line];
        let remedy = lines.get(line + 1).copied().unwrap_or_default();
        ensure!(
            entry.contains("STOPPED at ") && words.iter().all(|w| entry.contains(w)),
            "status line for {key}: {entry}"
        );
        ensure!(
            remedy.trim_start().starts_with("remedy: ") && remedy.trim().len() > "remedy:".len(),
            "no remedy line for {key}: {remedy:?}"
        );
    }
    ensure!(
        text.lines()
            .any(|l| l.trim_start().starts_with("public.good -> good:") && !l.contains("STOPPED")),
        "good in status:\n{text}"
    );

    // Durable: progress.json has the stops, and a restart keeps them while
    // the good table goes on.
    let progress: serde_json::Value =
        serde_json::from_slice(&std::fs::read(h.state_dir.join("progress.json"))?)?;
    for key in ["public.geo", "public.retype"] {
        ensure!(
            progress["progress"]["tables"][key]["stopped"]["reason"].is_string(),
            "{key} not stopped in progress.json: {progress:#}"
        );
    }
    h.stop_run()?;
    h.start_run()?;
    h.source
        .psql("insert into good values (200, 'after the restart'); insert into retype values (200, 1, 'ignored')")?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.good", "good", &good)?;
    h.assert_equal("public.toasty", "toasty", &toasty)?;
    let status = h.status_json()?;
    for key in ["public.geo", "public.retype"] {
        stopped_json(&status, key)?;
    }
    for key in ["public.good", "public.toasty"] {
        ensure!(
            status["tables"][key]["stopped"].is_null(),
            "{key} stopped after the restart: {status:#}"
        );
    }
    h.stop_run()?;
    Ok(())
}

per_major!(stops_alone => a_table_stops_alone: pg15, pg18);

/// A TRUNCATE of one partition empties that partition only: the root's
/// ClickHouse table keeps the other partitions' rows (or, if walshadow
/// cannot apply it, the table stops with a reason; rows are never dropped
/// silently).
fn truncate_partition(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "trunc", &["public.measure"], "")?;
    h.source.psql(PARTITIONED)?;
    h.init()?;
    h.start_run()?;
    h.source.psql(
        "insert into measure (id, day, v, n) select g, date '2022-01-01' + g * 7, 'v' || g, g * 1.25 from generate_series(1, 150) g",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.measure", "measure", &measure_columns())?;
    h.source.psql(
        "truncate measure_2023;
         insert into measure values (5000, '2023-05-05', 'after the truncate', 1), (5001, '2024-05-05', 'other partition', 2);",
    )?;
    // walshadow loads the table again by itself (see stream_chaos.rs).
    wait_until(CATCH_UP, "the reload after the TRUNCATE", || {
        h.check_running()?;
        Ok(h.run_log().contains("resync done"))
    })?;
    h.wait_caught_up(CATCH_UP)?;
    ensure_none_stopped(&h)?;
    let n = h
        .assert_equal("public.measure", "measure", &measure_columns())
        .context("after a TRUNCATE of one partition")?;
    ensure!(
        n == 100,
        "{n} rows left in measure, expected the other partitions' 98 and 2 new"
    );
    h.stop_run()?;
    Ok(())
}

per_major!(truncate_partition => truncate_of_one_partition_keeps_the_others: pg15, pg18);

/// Type changes on the source are followed, exactly:
///
/// - without a rewrite of the table, a change that keeps every value's
///   text (a wider `numeric`, a longer `varchar`) is followed with
///   `MODIFY COLUMN` in place;
/// - with a rewrite (`int2` to `int8`, `real` to `float8`, `int` to `text`,
///   `USING`, which computes new values, `ADD COLUMN … DEFAULT random()`)
///   every row is inserted again into the new file and streamed: the rows
///   already in ClickHouse take the rewritten values, in the same table;
/// - without a rewrite but with another text (`cidr` to `inet`) the table
///   is loaded again and swapped in;
/// - a key column's type change stops its table, naming the resync.
fn widening(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "widen", &["public.w", "public.kw"], "")?;
    h.source.psql(
        "create table w (id int primary key, a int2, b int4 not null, c numeric(10,2), d real,
           e int4[], f int4, v varchar(10), ip cidr);
         create table kw (id int primary key, v text);",
    )?;
    h.init()?;
    h.start_run()?;
    h.source.psql(
        "insert into w select g, g, g * 1000, g * 1.25, g / 3.0, array[g, -g], g, 'v' || g, '10.1.2.3/32'
           from generate_series(1, 200) g;
         insert into kw select g, 'k' || g from generate_series(1, 20) g;",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    let cols = |d_bytes| {
        vec![
            same("id"),
            same("a"),
            same("b"),
            col("trim_scale(c)", "c"),
            float_bits("d", d_bytes),
            array_flat("e"),
            same("f"),
            same("v"),
            output_text("ip"),
        ]
    };
    h.assert_equal("public.w", "w", &cols(4))?;
    let uuid = |h: &StreamHarness| {
        h.ch.query("SELECT uuid FROM system.tables WHERE database = 'app' AND name = 'w'")
    };
    let ch_type = |h: &StreamHarness, c: &str| -> Result<String> {
        Ok(clickhouse_types(h, "w")?
            .into_iter()
            .find(|(n, _)| n == c)
            .map(|(_, t)| t)
            .unwrap_or_default())
    };

    // No rewrite, the same text: followed in place.
    let first = uuid(&h)?;
    h.source.psql(
        "alter table w alter column c type numeric(14,2), alter column v type varchar(40);
         update w set c = 123456789012.25, v = repeat('x', 40) where id = 1;",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.w", "w", &cols(4))?;
    ensure!(
        uuid(&h)? == first && ch_type(&h, "c")? == "Nullable(Decimal(14, 2))",
        "c not widened in place: {}",
        ch_type(&h, "c")?
    );

    // A rewrite, USING among it: the rewritten rows stream in.
    h.source.psql(
        "alter table w alter column a type int4;
         begin;
         alter table w alter column a type int8 using a * 100, alter column b type int8,
           alter column b drop not null, alter column d type float8, alter column e type int8[],
           alter column f type text using 'x' || f, alter column v type varchar(40) using upper(v);
         update w set b = b + 5000000000 where id % 3 = 0;
         commit;
         alter table w add column r float8 default random();
         insert into w values (1000, 9000000000000000000, null, 1234567890.12, 1e300, '{9000000000000}', 'text now', 'new', '10.0.0.0/8');
         update w set f = f || '!' where id % 5 = 0;
         delete from w where id % 7 = 0;
         alter table kw alter column id type bigint;
         insert into kw values (5000000000, 'big');",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    let mut with_r = cols(8);
    with_r.push(float_bits("r", 8));
    let n = h.assert_equal("public.w", "w", &with_r)?;
    ensure!(n > 170, "{n} rows of w");
    let old =
        h.ch.query("SELECT a, f, v FROM app.w FINAL WHERE id = 2 FORMAT TSVRaw")?;
    ensure!(
        old == "200\tx2\tV2\n",
        "a row from before the rewrite: {old:?}"
    );
    ensure!(uuid(&h)? == first, "w was loaded again for a rewrite");
    for (name, ty) in [
        ("a", "Nullable(Int64)"),
        ("b", "Nullable(Int64)"),
        ("c", "Nullable(Decimal(14, 2))"),
        ("d", "Nullable(Float64)"),
        ("e", "Array(Nullable(Int64))"),
        ("f", "Nullable(String)"),
    ] {
        ensure!(ch_type(&h, name)? == ty, "w.{name} is not {ty}");
    }

    // No rewrite, another text: loaded again.
    h.source.psql("alter table w alter column ip type inet;")?;
    wait_until(CATCH_UP, "w loaded again and swapped in", || {
        h.check_running()?;
        Ok(uuid(&h)? != first && h.table_state("public.w")?["state"] == "streaming")
    })
    .with_context(|| common::tail(&h.run_log(), 30))?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.w", "w", &with_r)?;
    ensure!(
        h.run_log().contains("changed type without a rewrite"),
        "the reload's reason is not in the log"
    );

    let status = h.status_json()?;
    ensure!(
        status["tables"]["public.w"]["stopped"].is_null(),
        "w stopped: {}",
        status["tables"]["public.w"]
    );
    let kw = stopped_json(&status, "public.kw")?;
    let reason = kw["reason"].as_str().unwrap_or_default();
    ensure!(
        kw["code"] == "schema_change"
            && reason.contains("\"id\"")
            && kw["remedy"]
                .as_str()
                .is_some_and(|r| r.contains("walshadow table resync public.kw")),
        "kw: {kw}"
    );
    h.stop_run()?;
    Ok(())
}

per_major!(widening => type_changes_are_followed_exactly: pg15, pg18);
