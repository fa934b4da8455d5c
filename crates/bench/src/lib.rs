//! What the benchmark programs share: the machine context every report
//! carries ([`machine`]), CPU and memory readings from `/proc`
//! ([`procfs`]), `walshadow init`/`run` as child processes ([`daemon`]),
//! the throwaway source and sessions on it ([`source`]) and the ClickHouse
//! engine's request log ([`engine_log`]).

pub mod daemon;
pub mod engine_log;
pub mod machine;
pub mod procfs;
pub mod source;
