//! What the benchmark programs share: the machine context every report
//! carries ([`machine`]), CPU and memory readings from `/proc`
//! ([`procfs`]), `walshadow init`/`run` as child processes ([`daemon`])
//! and their log ([`run_log`]), the throwaway source and sessions on it
//! ([`source`]), walshadow's backends on it ([`backends`]) and the
//! ClickHouse engine's request log ([`engine_log`]).

pub mod backends;
pub mod daemon;
pub mod engine_log;
pub mod machine;
pub mod procfs;
pub mod run_log;
pub mod source;
