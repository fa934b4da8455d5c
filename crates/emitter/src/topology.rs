//! Where walshadow's tables live: one server, or a cluster.
//!
//! ```text
//!  [clickhouse] cluster   database engine   DDL                         tables
//!  unset                  Atomic            on the server url names     as `engine` says
//!  "c"                    Atomic            ON CLUSTER `c`, every DDL   Replicated…('/clickhouse/tables/{uuid}/{shard}', '{replica}', …)
//!  any                    Replicated        on one replica; the         Replicated… with the database's own path
//!                                           database replicates it      (no arguments: explicit ones are refused there)
//!  any                    Shared (Cloud)    as Replicated               as `engine` says (Cloud makes them Shared)
//! ```
//!
//! `{uuid}` in the Keeper path is what keeps a load's staging copy
//! (`CREATE TABLE … AS`) and the swap (`EXCHANGE TABLES`) apart from the
//! table they copy: each table's path is its own, whatever its name. It is
//! expanded only in `ON CLUSTER` queries over an Atomic database (the
//! initiator picks the uuid for every host) or in a Replicated database,
//! so every statement that makes a table must be one of those.

use std::fmt;

use crate::ddl::quote_ident;

/// How the destination database takes DDL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Topology {
    /// One server.
    #[default]
    Server,
    /// `[clickhouse] cluster` over an Atomic database: every DDL runs
    /// `ON CLUSTER`.
    Cluster(String),
    /// A `Replicated` (or Cloud's `Shared`) database: it replicates DDL
    /// itself and refuses `ON CLUSTER`. `cluster` names the cluster a
    /// `Distributed` table reads (the database's own name when unset:
    /// a Replicated database is a cluster of that name).
    ReplicatedDatabase {
        cluster: Option<String>,
        shared: bool,
    },
}

impl Topology {
    /// The topology of `[clickhouse] cluster` over a database of `engine`
    /// (`None`: the database does not exist yet, and is made Atomic).
    pub fn of(cluster: Option<&str>, engine: Option<&str>) -> Topology {
        match (engine, cluster) {
            (Some("Replicated"), c) => Topology::ReplicatedDatabase {
                cluster: c.map(str::to_owned),
                shared: false,
            },
            (Some("Shared"), c) => Topology::ReplicatedDatabase {
                cluster: c.map(str::to_owned),
                shared: true,
            },
            (_, Some(c)) => Topology::Cluster(c.to_owned()),
            (_, None) => Topology::Server,
        }
    }

    /// The clause after an object's name in DDL.
    pub fn on_cluster(&self) -> OnCluster<'_> {
        OnCluster(match self {
            Topology::Cluster(c) => Some(c),
            _ => None,
        })
    }

    /// The cluster a `Distributed` table over `database` reads.
    pub fn distributed_cluster<'a>(&'a self, database: &'a str) -> Option<&'a str> {
        match self {
            Topology::Server => None,
            Topology::Cluster(c) => Some(c),
            Topology::ReplicatedDatabase { cluster, .. } => {
                Some(cluster.as_deref().unwrap_or(database))
            }
        }
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Topology::Server => f.write_str("one server"),
            Topology::Cluster(c) => write!(f, "cluster {c:?} (DDL ON CLUSTER)"),
            Topology::ReplicatedDatabase { shared: false, .. } => {
                f.write_str("a Replicated database (it replicates the DDL)")
            }
            Topology::ReplicatedDatabase { shared: true, .. } => {
                f.write_str("a Shared database (it replicates the DDL)")
            }
        }
    }
}

/// `` ON CLUSTER `c` `` after an object's name, or nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OnCluster<'a>(pub Option<&'a str>);

impl fmt::Display for OnCluster<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(c) => write!(f, " ON CLUSTER {}", quote_ident(c)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topology_of_the_database_engine() {
        assert_eq!(Topology::of(None, Some("Atomic")), Topology::Server);
        assert_eq!(Topology::of(None, None), Topology::Server);
        let c = Topology::of(Some("prod"), Some("Atomic"));
        assert_eq!(c.on_cluster().to_string(), " ON CLUSTER `prod`");
        assert_eq!(c.distributed_cluster("app"), Some("prod"));
        let r = Topology::of(Some("prod"), Some("Replicated"));
        assert_eq!(r.on_cluster().to_string(), "");
        assert_eq!(r.distributed_cluster("app"), Some("prod"));
        let r = Topology::of(None, Some("Replicated"));
        assert_eq!(r.distributed_cluster("app"), Some("app"));
        assert_eq!(Topology::Server.on_cluster().to_string(), "");
        assert_eq!(Topology::Server.distributed_cluster("app"), None);
        assert_eq!(
            Topology::of(Some("we`ird"), None).on_cluster().to_string(),
            " ON CLUSTER `we\\`ird`"
        );
    }
}
