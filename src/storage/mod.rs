//! Running the extension's SQL statements: each statement is a file next to the engine code
//! that runs it, declared once with its parameters and result columns, prepared once per
//! session and kept, and run under settings that no user object can change.

pub mod direct;
pub mod index_walk;
pub mod rows;
pub mod shard;
mod statement;

pub(crate) use statement::statement;
pub use statement::{param, timestamptz_arg, with_client, Param, Row, Rows, Statement};
