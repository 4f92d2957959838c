//! PostgreSQL plumbing that knows nothing about jobs: errors, settings, pass-through datums,
//! the server clock, the server log, the current database, the installed extension's version, Citus distribution, recovery (standbys), set-returning functions,
//! subtransactions, and the shims that hide differences between PostgreSQL
//! versions. Every other layer may use it; it uses none of them.

pub mod citus;
pub mod client;
pub mod clock;
pub mod database;
pub mod datum;
pub mod errors;
pub mod extension;
pub mod log;
pub mod recovery;
pub mod roles;
pub mod snapshot;
pub mod srf;
pub mod subtransaction;
pub mod version;
