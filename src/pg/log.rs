//! The server log at level LOG, for messages an operator reads there (a background worker
//! starting, waiting, or finding a standby).

use pgrx::pg_sys::errcodes::PgSqlErrorCode;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::PgLogLevel;

/// Writes `message` to the server log at level LOG, as `ereport(LOG, ...)` does.
///
/// `pgrx::log!` first asks whether the level is of interest. PostgreSQL 13 lacks
/// `message_level_is_interesting`, and pgrx answers there by comparing the levels as numbers:
/// LOG, below WARNING as a number but above it for the server log, was dropped under the
/// default `log_min_messages = warning`. Here the server's own `errstart` decides.
#[track_caller]
pub fn write_server_log(message: String) {
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
        message,
        "pg_jobs",
    )
    .report(PgLogLevel::LOG);
}

/// `server_log!("...", args)`: [`write_server_log`] of the formatted message.
macro_rules! server_log {
    ($($arg:tt)*) => {
        $crate::pg::log::write_server_log(format!($($arg)*))
    };
}
pub(crate) use server_log;
