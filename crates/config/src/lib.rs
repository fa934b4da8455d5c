//! Configuration: the TOML file (connection, state and spill directories,
//! pinned tables) and the config table in the source database, read from WAL.
//!
//! Empty until the shadow issue; the folder marks its place in the design.
