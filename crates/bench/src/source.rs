//! Connections to a throwaway source on walshadow's own client, over the
//! cluster's Unix socket as its superuser, named (`application_name`) so
//! `pg_stat_activity` tells them apart.

use anyhow::Result;
use walshadow_testkit::{Cluster, ClusterOptions};
use walshadow_types::PgMajor;
use walshadow_wal_reader::replication::{ConnConfig, Host, ReplicationClient, SslMode};

/// A throwaway source of PostgreSQL `major` for a bench that runs
/// walshadow next to it: 256 MB of shared buffers, room for walshadow's
/// and the bench's sessions, and the settings in `conf`.
pub fn start_source(major: u32, conf: &[(&str, &str)]) -> Result<Cluster> {
    let mut opts = ClusterOptions::default()
        .conf("shared_buffers", "256MB")
        .conf("max_connections", "60");
    for (name, value) in conf {
        opts = opts.conf(*name, *value);
    }
    Cluster::start(PgMajor::from_number(major)?, opts)
}

/// A physical replication connection's settings (database `postgres`).
pub fn conn_config(c: &Cluster, app: &str) -> Result<ConnConfig> {
    let mut cfg =
        ConnConfig::from_url(&format!("postgres://{}@localhost/postgres", c.superuser()))?;
    cfg.host = Host::UnixDir(c.socket_dir());
    cfg.port = c.port();
    cfg.sslmode = SslMode::Disable;
    cfg.application_name = Some(app.into());
    Ok(cfg)
}

/// A plain SQL session (not a walsender).
pub async fn sql_session(c: &Cluster, app: &str) -> Result<ReplicationClient> {
    let mut cfg = conn_config(c, app)?;
    cfg.physical = false;
    Ok(ReplicationClient::connect(&cfg).await?)
}
