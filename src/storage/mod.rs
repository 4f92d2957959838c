//! Running the extension's SQL statements: each statement is a file next to the engine code
//! that runs it, declared once with its parameters and result columns, prepared once per
//! session and kept, and run under settings that no user object can change.

pub mod claim_reader;
pub mod direct;
pub mod group_reader;
pub mod index_walk;
pub mod job_writer;
pub mod key_reader;
pub mod progress_writer;
mod statement;

pub use statement::{param, timestamptz_arg, with_client, Param, Row, Rows, Statement};
