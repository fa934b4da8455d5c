#!/usr/bin/env bash
# Captures the golden WAL used by tests/golden.rs. Run as a user that may
# start PostgreSQL (not root):  capture.sh BIN_DIR OUT_DIR
# BIN_DIR holds initdb/pg_ctl/psql/pg_waldump of one major (15 to 18).
# It writes OUT_DIR/wal.tar.zst (the segments, 1 MiB each) and
# OUT_DIR/waldump.txt.zst (pg_waldump's view of the same range) and
# OUT_DIR/range (start and end LSN).
set -euo pipefail
BIN=$1; OUT=$2
TMP=$(mktemp -d)
trap '"$BIN/pg_ctl" -D "$TMP/d" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$TMP"' EXIT
"$BIN/initdb" -D "$TMP/d" -A trust --wal-segsize=1 >/dev/null
cat >> "$TMP/d/postgresql.conf" <<CONF
wal_level = logical
listen_addresses = ''
unix_socket_directories = '$TMP'
port = 5439
fsync = off
wal_compression = pglz
max_wal_size = 1GB
min_wal_size = 64MB
wal_keep_size = 1GB
CONF
"$BIN/pg_ctl" -D "$TMP/d" -l "$TMP/log" -w start >/dev/null
q() { "$BIN/psql" -X -q -A -t -h "$TMP" -p 5439 -d postgres -v ON_ERROR_STOP=1 -c "$1"; }
q "checkpoint"
START=$(q "select pg_current_wal_insert_lsn()")
q "create table t (id int primary key, v text, b bytea)"
q "insert into t select g, md5(g::text), null from generate_series(1, 3000) g"
q "checkpoint"
# FPIs (pglz-compressed), updates and deletes.
q "update t set v = v || 'u' where id % 7 = 0"
q "delete from t where id % 11 = 0"
# A TOASTed value and a record that spans several 1 MiB segments.
q "insert into t values (-1, repeat('toast', 50000), decode(repeat('ab', 20000), 'hex'))"
q "select pg_logical_emit_message(true, 'golden', repeat('x', 2500000))" >/dev/null
q "begin; savepoint a; insert into t values (-2, 'sub', null); rollback to a; insert into t values (-3, 'top', null); commit"
q "create index on t (md5(v))"
q "vacuum t"
q "truncate t"
q "select pg_switch_wal()" >/dev/null
q "insert into t values (1, 'after switch', null)"
END=$(q "select pg_current_wal_insert_lsn()")
q "checkpoint"
"$BIN/pg_ctl" -D "$TMP/d" -m fast -w stop >/dev/null
"$BIN/pg_waldump" -p "$TMP/d/pg_wal" -s "$START" -e "$END" > "$TMP/waldump.txt"
mkdir -p "$OUT"
echo "$START $END" > "$OUT/range"
# Only the segments from the one holding START on (1 MiB segments: the
# segment number is the LSN shifted right by 20).
FIRST=$(printf '00000001%08X%08X' $((16#${START%/*})) $((16#${START#*/} >> 20)))
(cd "$TMP/d/pg_wal" && tar -c --sort=name $(ls | grep -E '^[0-9A-F]{24}$' | awk -v f="$FIRST" '$0 >= f')) | zstd -19 -q -o "$OUT/wal.tar.zst" -f
zstd -19 -q -f "$TMP/waldump.txt" -o "$OUT/waldump.txt.zst"
"$BIN/postgres" --version > "$OUT/version"
