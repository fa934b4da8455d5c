"""The ClickHouse engine for walshadow's tests and demo.

Serves chDB (the ClickHouse engine in-process, PyPI package `chdb-core`) behind the subset of
ClickHouse's HTTP interface walshadow uses, so the daemon talks to it exactly as it talks to a
real ClickHouse server. Run it through `scripts/clickhouse-engine`, which finds (or installs)
the virtualenv that holds chdb:

    scripts/clickhouse-engine --port PORT --data DIR [--host 127.0.0.1] [--user U --password P]
        [--tls-port PORT --tls-cert PEM --tls-key PEM [--tls-client-ca PEM]]

With --tls-port the same interface is also served over TLS (ClickHouse's https_port), the
handshake done in the connection's own thread; --tls-client-ca requires a client certificate
signed by that CA, as a server with `verificationMode = strict` does.

What it serves, following ClickHouse's HTTPHandler (src/Server/HTTPHandler.cpp):

    GET / (no query), GET /ping      "Ok.\\n"
    GET|POST /?query=...             query = `query` param + "\\n" + body; a body-only POST is the
                                     query itself. `INSERT ... FORMAT F` then data goes to chdb's
                                     streaming insert as bytes, so binary formats stay intact.
    database, default_format         params (or X-ClickHouse-Database / X-ClickHouse-Format)
    param_NAME                       query parameters {NAME:Type}
    any other non-reserved param     a setting, applied with SET for this request only
    credentials                      X-ClickHouse-User/-Key, Basic auth, or user/password params;
                                     wrong ones give 403 with code 516 (AUTHENTICATION_FAILED)
    errors                           "Code: N. DB::Exception: ..." with X-ClickHouse-Exception-Code
                                     and the HTTP status of exceptionCodeToHTTPStatus.cpp; an
                                     insert fails with what the engine raised while writing it
                                     (chdb's streaming insert alone may report it written)
    GET                              read-only (code 164 READONLY otherwise), as ClickHouse
                                     sets readonly=2 for GET
    Content-Encoding gzip/deflate    request bodies are decompressed; responses are compressed
                                     when enable_http_compression=1 and Accept-Encoding allows

chDB runs in this process with one connection (a session on --data, which survives restarts),
so queries are serialized by a lock; chdb releases the GIL while it works, and the server is
threaded, so /ping answers during a long query. Results are buffered whole before they are
sent, so an error always arrives with its own status code (ClickHouse itself may fail after a
200 when it streams; clients must still handle that).

Differences from a real server that callers may notice: a SET or USE sent as a query persists on
the shared chDB session (a real server forgets it at the end of the request unless session_id is
used); session_id, compress/decompress (ClickHouse's native compression) and multipart external
data are not supported.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import signal
import socket
import ssl
import sys
import threading
import time
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

import chdb

# ClickHouse error codes (src/Common/ErrorCodes.cpp) the engine raises itself.
SYNTAX_ERROR = 62
READONLY = 164
HTTP_LENGTH_REQUIRED = 381
AUTHENTICATION_FAILED = 516
UNSUPPORTED_METHOD = 1  # ClickHouse's code for an unsupported HTTP method/compression
STD_EXCEPTION = 1001

# Raised by the engine's background work (merges, part cleanup), which system.errors counts too.
BACKGROUND_CODES = {236, 394, 999}  # ABORTED, QUERY_WAS_CANCELLED, KEEPER_EXCEPTION

# exceptionCodeToHTTPStatus (src/Server/HTTP/exceptionCodeToHTTPStatus.cpp); every other code is 500.
HTTP_STATUS_BY_CODE = {
    **dict.fromkeys([192, 193, 497, 512, 516], 403),  # UNKNOWN_USER, WRONG_PASSWORD, ACCESS_DENIED, ...
    194: 401,  # REQUIRED_PASSWORD
    **dict.fromkeys(
        [6, 8, 15, 25, 26, 27, 36, 37, 38, 41, 44, 53, 62, 72, 117, 123, 167, 168, 223, 321, 376,
         427, 441, 675, 676],
        400,
    ),  # CANNOT_PARSE_*, BAD_ARGUMENTS, SYNTAX_ERROR, TYPE_MISMATCH, INCORRECT_DATA, ...
    **dict.fromkeys([46, 47, 50, 56, 60, 63, 73, 78, 81, 115, 152, 336, 511], 404),
    # UNKNOWN_FUNCTION, UNKNOWN_IDENTIFIER, UNKNOWN_TYPE, UNKNOWN_STORAGE, UNKNOWN_TABLE,
    # UNKNOWN_AGGREGATE_FUNCTION, UNKNOWN_FORMAT, UNKNOWN_TYPE_OF_QUERY, UNKNOWN_DATABASE,
    # UNKNOWN_SETTING, UNKNOWN_DIRECTION_OF_SORTING, UNKNOWN_DATABASE_ENGINE, UNKNOWN_ROLE
    229: 413,  # QUERY_IS_TOO_LARGE
    48: 501,  # NOT_IMPLEMENTED
    **dict.fromkeys([209, 76, 439], 503),  # SOCKET_TIMEOUT, CANNOT_OPEN_FILE, CANNOT_SCHEDULE_TASK
    381: 411,  # HTTP_LENGTH_REQUIRED
    159: 408,  # TIMEOUT_EXCEEDED
    779: 415,  # UNSUPPORTED_MEDIA_TYPE
}

# URL parameters that are neither settings nor query parameters (HTTPHandler's
# reserved_param_names, plus the ones it reads itself).
RESERVED_PARAMS = {
    "query", "database", "default_format", "compress", "decompress", "user", "password",
    "quota_key", "query_id", "stacktrace", "buffer_size", "wait_end_of_query", "session_id",
    "session_timeout", "session_check", "client_protocol_version", "close_session", "role",
}

# First keywords of statements a read-only (GET) request may run, when chdb cannot classify.
READ_ONLY_KEYWORDS = {"SELECT", "WITH", "SHOW", "DESCRIBE", "DESC", "EXISTS", "EXPLAIN", "SET", "USE"}

CONTENT_TYPES = [
    (re.compile(r"(TabSeparated|TSV)", re.I), "text/tab-separated-values; charset=UTF-8"),
    (re.compile(r"CSV", re.I), "text/csv; charset=UTF-8; header=absent"),
    (re.compile(r"JSON(Compact)?(Strings)?EachRow", re.I), "application/x-ndjson; charset=UTF-8"),
    (re.compile(r"JSON", re.I), "application/json; charset=UTF-8"),
    (re.compile(r"(RowBinary|Native|Parquet|Arrow|ORC|Avro|Protobuf|MsgPack)", re.I),
     "application/octet-stream"),
]

# `INSERT ... FORMAT Name` as the whole `query` parameter (the body is then the data).
INSERT_FORMAT_HEAD = re.compile(
    r"\A\s*(?P<stmt>INSERT\s.*)\s+FORMAT\s+(?P<fmt>[A-Za-z_][A-Za-z0-9_]*)\s*;?\s*\Z", re.I | re.S
)
# `INSERT ... FORMAT Name` at the start of a text that goes on with the data.
INSERT_FORMAT_PREFIX = re.compile(
    r"\A\s*(?P<stmt>INSERT\s.*?)\s+FORMAT\s+(?P<fmt>[A-Za-z_][A-Za-z0-9_]*)(?=\s|\Z)", re.I | re.S
)
TRAILING_FORMAT = re.compile(r"\sFORMAT\s+([A-Za-z_][A-Za-z0-9_]*)\s*;?\s*\Z", re.I)
CODE_IN_MESSAGE = re.compile(r"Code: (\d+)\. ")

DDL_KEYWORDS = {"CREATE", "ALTER", "DROP", "TRUNCATE", "EXCHANGE", "RENAME"}
REPLICATED_ENGINE = re.compile(
    r"\bReplicated(?P<family>[A-Za-z]*MergeTree)\(\s*(?:'(?:[^'\\]|\\.)*'\s*,\s*'(?:[^'\\]|\\.)*'\s*(?:,\s*)?)?"
)
DISTRIBUTED_ENGINE = re.compile(
    r"\bENGINE\s*=\s*Distributed\(\s*'(?:[^'\\]|\\.)*'\s*,\s*'(?P<db>(?:[^'\\]|\\.)*)'\s*,\s*'(?P<table>(?:[^'\\]|\\.)*)'\s*(?:,[^)]*)?\)"
)


EMPTY_DDL_QUEUE = "(SELECT '' AS cluster, 'Finished' AS status, '' AS query WHERE 0)"


class ClusterStandIn:
    """Stands in for a ClickHouse cluster the engine cannot run (no Keeper, no remote_servers):
    every DDL statement is recorded as sent (one JSON line in `log_path`), then run on the one
    engine as a single server would run it: `ON CLUSTER <name>` dropped, `Replicated*MergeTree`
    without its Keeper path and replica, a `Distributed` table as a `Merge` table over its one
    local table."""

    def __init__(self, name: str, log_path: str):
        self.on_cluster = re.compile(
            r"\s+ON\s+CLUSTER\s+(?:`" + re.escape(name.replace("`", "\\`")) + r"`|'"
            + re.escape(name) + r"'|" + re.escape(name) + r"\b)", re.I)
        self.log_path = log_path
        self.all_replicas = re.compile(
            r"\bclusterAllReplicas\(\s*'" + re.escape(name) + r"'\s*,\s*(?P<table>[A-Za-z_.]+)\s*\)")
        self.lock = threading.Lock()

    def rewrite(self, sql: str) -> str:
        if first_keyword(sql) not in DDL_KEYWORDS:
            # Reads of the cluster: its one host; its DDL queue: empty.
            sql = self.all_replicas.sub(lambda m: m.group("table"), sql)
            return sql.replace("system.distributed_ddl_queue", EMPTY_DDL_QUEUE)
        with self.lock, open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"sql": sql}) + "\n")
        out = self.on_cluster.sub("", sql)
        out = REPLICATED_ENGINE.sub(lambda m: m.group("family") + "(", out)
        out = DISTRIBUTED_ENGINE.sub(
            lambda m: "ENGINE = Merge('" + m.group("db") + "', '^" + re.escape(m.group("table"))
            + "$')", out)
        return out


INSERT_CHUNK = 4 << 20
# Headers are read from the data before the FORMAT clause is known; ClickHouse has no such
# limit, but 1 MiB of INSERT statement is more than walshadow ever sends.
MAX_INSERT_HEAD = 1 << 20
KEEP_ALIVE_TIMEOUT = 30


class ClickHouseError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message
        self.sql = ""  # the statement, for the log

    @classmethod
    def from_chdb(cls, exc: BaseException) -> "ClickHouseError":
        text = str(exc)
        m = CODE_IN_MESSAGE.search(text)
        if m is None:
            return cls(STD_EXCEPTION, f"Code: {STD_EXCEPTION}. DB::Exception: {text.strip()}")
        # chdb's streaming insert wraps the engine's message in a prefix of its own.
        return cls(int(m.group(1)), text[m.start():].strip())


def log(msg: str) -> None:
    now = time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"
    sys.stderr.write(f"{stamp} clickhouse-engine: {msg}\n")
    sys.stderr.flush()


def quote(value: str) -> str:
    """A ClickHouse string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class Body:
    """The request body as a stream: Content-Length or chunked, then Content-Encoding."""

    def __init__(self, rfile, headers):
        self.rfile = rfile
        self.chunked = "chunked" in headers.get("Transfer-Encoding", "").lower()
        length = headers.get("Content-Length")
        self.remaining = int(length) if length is not None and not self.chunked else 0
        self.has_length = length is not None or self.chunked
        self.chunk_left = 0
        self.done = not self.chunked and self.remaining == 0
        encoding = headers.get("Content-Encoding", "").strip().lower()
        if encoding in ("", "identity", "none"):
            self.decoder = None
        elif encoding in ("gzip", "x-gzip"):
            self.decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self.decoder = zlib.decompressobj()
        else:
            raise ClickHouseError(
                UNSUPPORTED_METHOD,
                f"Code: {UNSUPPORTED_METHOD}. DB::Exception: Unsupported Content-Encoding "
                f"'{encoding}' (this engine decodes gzip and deflate). (UNSUPPORTED_METHOD)",
            )

    def _read_raw(self, n: int) -> bytes:
        if self.done:
            return b""
        if not self.chunked:
            data = self.rfile.read(min(n, self.remaining))
            if not data:
                raise ConnectionError("client closed the connection in the middle of the body")
            self.remaining -= len(data)
            self.done = self.remaining == 0
            return data
        if self.chunk_left == 0:
            size_line = self.rfile.readline(65537)
            if not size_line:
                raise ConnectionError("client closed the connection in the middle of the body")
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                self.done = True
                return b""
            self.chunk_left = size
        data = self.rfile.read(min(n, self.chunk_left))
        if not data:
            raise ConnectionError("client closed the connection in the middle of the body")
        self.chunk_left -= len(data)
        if self.chunk_left == 0:
            self.rfile.readline(3)  # CRLF after the chunk
        return data

    def read(self, n: int = INSERT_CHUNK) -> bytes:
        """Up to n decoded bytes (maybe fewer), b"" at the end."""
        while True:
            raw = self._read_raw(n)
            if self.decoder is None:
                return raw
            if raw:
                out = self.decoder.decompress(raw)
            else:
                out = self.decoder.flush()
                self.decoder = None
            if out or self.done:
                return out

    def read_all(self) -> bytes:
        parts = []
        while True:
            data = self.read()
            if not data:
                return b"".join(parts)
            parts.append(data)

    def drain(self) -> None:
        while self.read():
            pass


class Reply:
    def __init__(self, body: bytes = b"", fmt: str | None = None, summary: dict | None = None):
        self.body = body
        self.fmt = fmt
        self.summary = summary or {}
        self.sql = ""  # the statement, for the log


class Engine:
    """The chDB session and what runs on it, one request at a time."""

    def __init__(self, data_dir: str, user: str, password: str,
                 standin: "ClusterStandIn | None" = None):
        self.standin = standin
        self.conn = chdb.connect(data_dir)
        self.lock = threading.Lock()
        self.closed = False
        self.user = user
        self.password = password
        self.version = getattr(chdb, "engine_version", chdb.__version__)
        classify = getattr(getattr(self.conn, "_conn", None), "classify_query", None)
        self.classify = classify if callable(classify) else None

    def close(self) -> None:
        with self.lock:
            if not self.closed:
                self.closed = True
                self.conn.close()

    def error(self, code: int, name: str, text: str) -> ClickHouseError:
        return ClickHouseError(code, f"Code: {code}. DB::Exception: {text}. ({name})")

    def check_credentials(self, user: str, password: str) -> None:
        if user != self.user or password != self.password:
            raise self.error(
                AUTHENTICATION_FAILED, "AUTHENTICATION_FAILED",
                f"{user}: Authentication failed: password is incorrect, or there is no user "
                "with such name",
            )

    def check_statement(self, sql: str, read_only: bool) -> None:
        """Empty, multi-statement and (for read-only requests) writing queries are refused as
        ClickHouse's HTTP interface refuses them."""
        if not sql.strip():
            raise self.error(SYNTAX_ERROR, "SYNTAX_ERROR", "Empty query")
        info = None
        if self.classify is not None:
            try:
                info = self.classify(sql)
            except Exception:
                info = None
        if info is not None and info.get("statement_count", 1) > 1:
            raise self.error(SYNTAX_ERROR, "SYNTAX_ERROR", "Multi-statements are not allowed")
        if not read_only:
            return
        if info is not None and info.get("statement_count", 0) >= 1:
            cls = str(info.get("query_class", ""))
            first = first_keyword(sql)
            ok = cls.endswith("READ_ONLY") or (cls.endswith("CONTROL") and first in ("SET", "USE"))
        else:
            ok = first_keyword(sql) in READ_ONLY_KEYWORDS
        if not ok:
            raise self.error(
                READONLY, "READONLY",
                "Cannot execute query in readonly mode. For queries over HTTP, method POST is required",
            )

    def run(self, *, head: str, body: Body, database: str, default_format: str,
            settings: list[tuple[str, str]], query_params: dict, read_only: bool) -> Reply:
        sql = [head]
        try:
            reply = self._run(head, body, database, default_format, settings, query_params,
                              read_only, sql)
        except ClickHouseError as e:
            e.sql = sql[-1]
            raise
        reply.sql = sql[-1]
        return reply

    def _run(self, head, body, database, default_format, settings, query_params, read_only, sql):
        insert = INSERT_FORMAT_HEAD.match(head) if head else None
        with self.lock:
            if self.closed:
                raise self.error(210, "NETWORK_ERROR", "The engine is shutting down")
            self.query(f"USE {backquote(database or 'default')}")
            applied = []
            try:
                for name, value in settings:
                    self.query(f"SET {backquote(name)} = {quote(value)}")
                    applied.append(name)
                if insert is not None:
                    if read_only:
                        self.check_statement(head, read_only)
                    return self.insert(insert.group("stmt"), insert.group("fmt"), b"", body)
                data = body.read_all()
                full = (head.encode() + b"\n" + data) if head else data
                sql.append(full[:300].decode("utf-8", "replace"))
                return self.run_full(full, default_format, query_params, read_only)
            finally:
                if applied:
                    try:
                        self.query("SET " + ", ".join(f"{backquote(n)} = DEFAULT" for n in applied))
                    except ClickHouseError as e:
                        log(f"could not reset settings {applied}: {e.message}")

    def run_full(self, full: bytes, default_format: str, query_params: dict, read_only: bool) -> Reply:
        head = full[:MAX_INSERT_HEAD].decode("latin-1")
        m = INSERT_FORMAT_PREFIX.match(head)
        if m is not None:
            # ParserInsertQuery: the data starts after the first newline if there is one,
            # otherwise after all the whitespace.
            pos = m.end()
            rest = head[pos:]
            nl = re.match(r"[ \t]*\r?\n", rest)
            pos += nl.end() if nl else len(rest) - len(rest.lstrip())
            if pos < len(full):
                stmt = m.group("stmt").encode("latin-1").decode("utf-8", "replace")
                self.check_statement(stmt, read_only)
                return self.insert(stmt, m.group("fmt"), full[pos:], None)
        sql = full.decode("utf-8", "replace")
        self.check_statement(sql, read_only)
        if self.standin is not None:
            sql = self.standin.rewrite(sql)
        start = time.monotonic()
        res = self.query(sql, default_format, query_params)
        out = res.bytes()
        fmt = TRAILING_FORMAT.search(sql)
        return Reply(out, fmt.group(1) if fmt else default_format, {
            "read_rows": res.rows_read(), "read_bytes": res.bytes_read(),
            "written_rows": res.rows_written(), "written_bytes": res.bytes_written(),
            "total_rows_to_read": 0, "result_bytes": len(out),
            "elapsed_ns": int((time.monotonic() - start) * 1e9),
        })

    def insert(self, stmt: str, fmt: str, first: bytes, body: Body | None) -> Reply:
        """Feeds FORMAT-encoded bytes to chdb's streaming insert, which parses them as ClickHouse's
        input formats do; nothing is decoded as text, so binary data stays intact."""
        start = time.monotonic()
        errors_before = self.error_counts()
        try:
            ins = self.conn.send_insert(stmt, fmt)
        except Exception as e:
            raise ClickHouseError.from_chdb(e) from None
        try:
            if first:
                ins.append(first)
            while body is not None:
                chunk = body.read()
                if not chunk:
                    break
                ins.append(chunk)
            res = ins.finish()
        except BaseException as e:
            try:
                ins.cancel()
            except Exception:
                pass
            if isinstance(e, (ConnectionError, OSError, KeyboardInterrupt, SystemExit)):
                raise
            raise ClickHouseError.from_chdb(e) from None
        self.raise_new_error(errors_before)
        return Reply(b"", None, {
            "read_rows": 0, "read_bytes": 0,
            "written_rows": res.rows_written, "written_bytes": res.bytes_written,
            "total_rows_to_read": 0, "result_bytes": 0,
            "elapsed_ns": int((time.monotonic() - start) * 1e9),
        })

    def error_counts(self) -> dict[int, int]:
        """How often the engine raised each error code so far (system.errors)."""
        res = self.query("SELECT code, value FROM system.errors WHERE value > 0")
        counts = {}
        for line in res.bytes().decode().splitlines():
            code, _, value = line.partition("\t")
            counts[int(code)] = int(value)
        return counts

    def raise_new_error(self, before: dict[int, int]) -> None:
        """chdb's streaming insert can finish without raising what the engine raised while it
        wrote the parts (INCORRECT_DATA for an `_is_deleted` of 5, say): a real server answers
        that insert with the error, so this engine does too. Queries are serialized, so an
        error counted since `before` is this insert's."""
        after = self.error_counts()
        # ABORTED and the like come from background merges and cleanup, not
        # from the insert.
        raised = [code for code, n in after.items()
                  if n > before.get(code, 0) and code not in BACKGROUND_CODES]
        if not raised:
            return
        codes = ", ".join(str(c) for c in raised)
        res = self.query(
            "SELECT code, name, last_error_message FROM system.errors "
            f"WHERE code IN ({codes}) ORDER BY last_error_time DESC LIMIT 1")
        code, name, message = (res.bytes().decode().rstrip("\n").split("\t", 2) + ["", ""])[:3]
        message = message.replace("\\n", "\n").rstrip(". ")
        raise ClickHouseError(int(code), f"Code: {code}. DB::Exception: {message}. ({name})")

    def query(self, sql: str, fmt: str = "TabSeparated", params: dict | None = None):
        try:
            return self.conn.query(sql, fmt, params=params or None)
        except Exception as e:
            raise ClickHouseError.from_chdb(e) from None


def backquote(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def first_keyword(sql: str) -> str:
    m = re.match(r"[\s(]*([A-Za-z]+)", sql)
    return m.group(1).upper() if m else ""


def content_type(fmt: str | None) -> str:
    for pattern, ctype in CONTENT_TYPES:
        if fmt and pattern.match(fmt):
            return ctype
    return "text/plain; charset=UTF-8"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "clickhouse-engine"
    timeout = KEEP_ALIVE_TIMEOUT
    engine: Engine  # set on the subclass made in main()

    def log_message(self, format, *args):  # noqa: A002 - BaseHTTPRequestHandler's signature
        log(format % args)

    def log_request(self, code="-", size="-"):
        pass  # handle_request() logs each query with its timing instead

    def log_error(self, format, *args):  # noqa: A002
        if not (args and isinstance(args[-1], TimeoutError)):  # idle keep-alive connections
            self.log_message(format, *args)

    def do_GET(self):
        self.handle_request(read_only=True)

    def do_HEAD(self):
        path = urlsplit(self.path).path
        if path in ("/", "/ping"):
            self.send(200, b"Ok.\n", {"Content-Type": "text/html; charset=UTF-8"}, head_only=True)
        else:
            self.send_error_reply(self.engine.error(
                UNSUPPORTED_METHOD, "UNSUPPORTED_METHOD", "HEAD is served for / and /ping only"))

    def do_POST(self):
        self.handle_request(read_only=False)

    def handle_request(self, read_only: bool) -> None:
        url = urlsplit(self.path)
        params = parse_qsl(url.query, keep_blank_values=True)
        names = {k for k, _ in params}
        if url.path == "/ping" or (url.path == "/" and read_only and not names):
            self.discard_body()
            self.send(200, b"Ok.\n", {"Content-Type": "text/html; charset=UTF-8"})
            return
        if url.path != "/":
            self.discard_body()
            self.send(404, f"There is no handle {url.path}\n\nUse / or /ping for health checks.\n"
                      .encode(), {"Content-Type": "text/plain; charset=UTF-8"})
            return
        start = time.monotonic()
        query_id = dict(params).get("query_id") or self.headers.get("X-ClickHouse-Query-Id") or str(uuid.uuid4())
        body = None
        head = ""
        try:
            if not read_only and self.headers.get("Content-Length") is None \
                    and "chunked" not in self.headers.get("Transfer-Encoding", "").lower():
                raise self.engine.error(
                    HTTP_LENGTH_REQUIRED, "HTTP_LENGTH_REQUIRED",
                    "The Transfer-Encoding is not chunked and there is no Content-Length header "
                    "for POST request")
            self.authenticate(params)
            database = self.headers.get("X-ClickHouse-Database", "")
            default_format = self.headers.get("X-ClickHouse-Format", "")
            settings, query_params = [], {}
            for key, value in params:
                if key == "query":
                    head = value
                elif key == "database":
                    database = database or value
                elif key == "default_format":
                    default_format = default_format or value
                elif key.startswith("param_"):
                    query_params[key[len("param_"):]] = value
                elif key == "readonly":
                    # Enforced here rather than SET: once readonly is on, the shared session
                    # could not turn it off again.
                    read_only = read_only or value not in ("", "0")
                elif key and key not in RESERVED_PARAMS:
                    settings.append((key, value))
            body = Body(self.rfile, self.headers)
            reply = self.engine.run(
                head=head, body=body, database=database,
                default_format=default_format or "TabSeparated", settings=settings,
                query_params=query_params, read_only=read_only)
        except ClickHouseError as e:
            self.finish_body(body)
            log(f"{self.command} {e.code} {1000 * (time.monotonic() - start):.1f}ms "
                f"{summarize(e.sql or head)}: {e.message[:300]}")
            self.send_error_reply(e, {"X-ClickHouse-Query-Id": query_id})
            return
        except (ConnectionError, socket.timeout) as e:
            log(f"{self.command} connection lost: {e}")
            self.close_connection = True
            return
        except Exception as e:  # a bug here, reported like ClickHouse reports std::exception
            self.finish_body(body)
            log(f"{self.command} internal error: {e!r}")
            self.send_error_reply(ClickHouseError(
                STD_EXCEPTION, f"Code: {STD_EXCEPTION}. DB::Exception: {e!r}. (STD_EXCEPTION)"),
                {"X-ClickHouse-Query-Id": query_id})
            return
        elapsed = time.monotonic() - start
        log(f"{self.command} 200 {1000 * elapsed:.1f}ms {summarize(reply.sql)}{written(reply)}")
        headers = {
            "Content-Type": content_type(reply.fmt),
            "X-ClickHouse-Query-Id": query_id,
            "X-ClickHouse-Summary": json.dumps(
                {k: str(v) for k, v in reply.summary.items()}, separators=(",", ":")),
        }
        if reply.fmt:
            headers["X-ClickHouse-Format"] = reply.fmt
        out = reply.body
        enc = self.response_encoding(params)
        if enc and out:
            comp = zlib.compressobj(6, zlib.DEFLATED, (16 if enc == "gzip" else 0) + zlib.MAX_WBITS)
            out = comp.compress(out) + comp.flush()
            headers["Content-Encoding"] = enc
        self.send(200, out, headers)

    def response_encoding(self, params) -> str | None:
        if dict(params).get("enable_http_compression") not in ("1", "true"):
            return None
        accepted = [a.split(";")[0].strip().lower() for a in self.headers.get("Accept-Encoding", "").split(",")]
        for enc in ("gzip", "deflate"):
            if enc in accepted:
                return enc
        return None

    def authenticate(self, params) -> None:
        """HTTPHandler::authenticateUser: one way of passing credentials at a time."""
        p = dict(params)
        h_user = self.headers.get("X-ClickHouse-User")
        h_key = self.headers.get("X-ClickHouse-Key")
        auth = self.headers.get("Authorization")
        has_param = "user" in p or "password" in p
        if h_user is not None or h_key is not None:
            if auth is not None or has_param:
                raise self.engine.error(
                    AUTHENTICATION_FAILED, "AUTHENTICATION_FAILED",
                    "Invalid authentication: it is not allowed to use X-ClickHouse HTTP headers "
                    "and other authentication methods simultaneously")
            user, password = h_user or "default", h_key or ""
        elif auth is not None:
            if has_param:
                raise self.engine.error(
                    AUTHENTICATION_FAILED, "AUTHENTICATION_FAILED",
                    "Invalid authentication: it is not allowed to use Authorization HTTP header "
                    "and authentication via parameters simultaneously")
            scheme, _, info = auth.partition(" ")
            if scheme.lower() != "basic":
                raise self.engine.error(
                    AUTHENTICATION_FAILED, "AUTHENTICATION_FAILED",
                    f"Invalid authentication: '{scheme}' HTTP Authorization scheme is not supported")
            try:
                decoded = base64.b64decode(info.strip(), validate=True).decode()
            except Exception:
                raise self.engine.error(
                    AUTHENTICATION_FAILED, "AUTHENTICATION_FAILED",
                    "Invalid authentication: malformed Basic credentials") from None
            user, _, password = decoded.partition(":")
        else:
            user, password = p.get("user", "default"), p.get("password", "")
        self.engine.check_credentials(user, password)

    def discard_body(self) -> None:
        try:
            Body(self.rfile, self.headers).drain()
        except (ClickHouseError, ConnectionError, ValueError, OSError):
            self.close_connection = True

    def finish_body(self, body: Body | None) -> None:
        """Reads what is left of the body so the connection can serve the next request; when
        that is not possible, the connection closes after the reply."""
        if body is None:
            if self.headers.get("Content-Length") not in (None, "0") or \
                    "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                self.discard_body()
            return
        try:
            body.drain()
        except Exception:
            self.close_connection = True

    def send_error_reply(self, e: ClickHouseError, extra: dict | None = None) -> None:
        text = e.message
        if "(version " not in text:
            text += f" (version {self.engine.version})"
        headers = {"Content-Type": "text/plain; charset=UTF-8",
                   "X-ClickHouse-Exception-Code": str(e.code), **(extra or {})}
        self.send(HTTP_STATUS_BY_CODE.get(e.code, 500), (text + "\n").encode(), headers)

    def send(self, status: int, body: bytes, headers: dict, head_only: bool = False) -> None:
        self.send_response(status)
        self.send_header("X-ClickHouse-Server-Display-Name", socket.gethostname())
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        else:
            self.send_header("Keep-Alive", f"timeout={KEEP_ALIVE_TIMEOUT}")
        self.end_headers()
        if not head_only:
            self.wfile.write(body)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the daemon may open a burst of connections


class TlsServer(Server):
    """The HTTPS port: accepts plain TCP, then handshakes in the connection's thread, so a
    client that stalls or fails its handshake holds up no one else."""

    tls: ssl.SSLContext

    def finish_request(self, request, client_address):
        try:
            request.settimeout(10)
            request = self.tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:
            log(f"TLS handshake with {client_address[0]}:{client_address[1]} failed: {e}")
            return
        super().finish_request(request, client_address)

    def shutdown_request(self, request):
        try:
            request.close()
        except OSError:
            pass


def summarize(sql: str) -> str:
    return " ".join(sql.split())[:200]


def written(reply: Reply) -> str:
    n = reply.summary.get("written_rows")
    return f" ({n} rows written)" if n else ""


def main() -> int:
    ap = argparse.ArgumentParser(description="chDB behind ClickHouse's HTTP interface")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--data", required=True, help="data directory (created if missing)")
    ap.add_argument("--user", default="default")
    ap.add_argument("--password", default="")
    ap.add_argument("--tls-port", type=int, help="also serve HTTPS on this port")
    ap.add_argument("--tls-cert", help="PEM certificate chain of the HTTPS port")
    ap.add_argument("--tls-key", help="PEM private key of the HTTPS port")
    ap.add_argument("--tls-client-ca", help="require client certificates signed by this CA")
    ap.add_argument("--cluster-standin", metavar="NAME",
                    help="stand in for cluster NAME: record each DDL statement in "
                    "DATA/../cluster-ddl.jsonl, run it as one server would")
    args = ap.parse_args()
    if args.tls_port is not None and not (args.tls_cert and args.tls_key):
        ap.error("--tls-port needs --tls-cert and --tls-key")

    data_dir = os.path.abspath(args.data)
    os.makedirs(data_dir, exist_ok=True)
    standin = None
    if args.cluster_standin:
        standin = ClusterStandIn(args.cluster_standin,
                                 os.path.join(os.path.dirname(data_dir), "cluster-ddl.jsonl"))
    engine = Engine(data_dir, args.user, args.password, standin)

    handler = type("EngineHandler", (Handler,), {"engine": engine})
    try:
        server = Server((args.host, args.port), handler)
    except OSError as e:
        log(f"cannot listen on {args.host}:{args.port}: {e}")
        engine.close()
        return 2

    tls_server = None
    if args.tls_port is not None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
        if args.tls_client_ca:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(args.tls_client_ca)
        try:
            tls_server = TlsServer((args.host, args.tls_port), handler)
        except OSError as e:
            log(f"cannot listen on {args.host}:{args.tls_port}: {e}")
            server.server_close()
            engine.close()
            return 2
        tls_server.tls = ctx
        threading.Thread(target=tls_server.serve_forever, kwargs={"poll_interval": 0.2},
                         daemon=True).start()

    def stop(signum, _frame):
        log(f"received {signal.Signals(signum).name}, shutting down")
        threading.Thread(target=server.shutdown, daemon=True).start()
        if tls_server is not None:
            threading.Thread(target=tls_server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if tls_server is not None:
        log(f"serving https on {args.host}:{args.tls_port}"
            + (" (client certificates required)" if args.tls_client_ca else ""))
    log(f"ready on http://{args.host}:{args.port} (ClickHouse {engine.version} via chdb "
        f"{chdb.__version__}, data {data_dir}, pid {os.getpid()})")
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        if tls_server is not None:
            tls_server.server_close()
        engine.close()  # waits for a running query; chdb flushes on close
        log("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
