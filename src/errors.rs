//! The errors pg_jobs raises and the argument checks behind them.
//!
//! Every error names the argument and what it accepts, and carries a SQLSTATE that the README
//! documents, so a client can branch on the condition rather than on the text.

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::{PgLogLevel, PgSqlErrorCode};

/// A required argument was NULL (22004).
pub const NULL_ARGUMENT: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED;
/// An argument is outside the range it accepts (22023).
pub const BAD_ARGUMENT: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE;
/// The named queue does not exist (42704).
pub const UNKNOWN_QUEUE: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT;
/// A payload is larger than `pg_jobs.max_payload_bytes` (54000).
pub const PAYLOAD_TOO_LARGE: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED;
/// A waiting claim ran under REPEATABLE READ or SERIALIZABLE (25000).
pub const WAIT_NEEDS_READ_COMMITTED: PgSqlErrorCode =
    PgSqlErrorCode::ERRCODE_INVALID_TRANSACTION_STATE;
/// No job has the given id (P0002).
pub const UNKNOWN_JOB: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_NO_DATA_FOUND;
/// The job or queue is not in a state that allows the operation (55000).
pub const WRONG_STATE: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE;
/// The queue still has work, or another queue depends on it (55006).
pub const QUEUE_IN_USE: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_OBJECT_IN_USE;
/// An argument asks for a feature this version does not provide (0A000).
pub const NOT_SUPPORTED: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED;

/// Raises an ERROR with a hint; never returns.
pub fn raise_with_hint(code: PgSqlErrorCode, message: String, hint: &str) -> ! {
    ErrorReport::new(code, message, "pg_jobs")
        .set_hint(hint)
        .report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// Raises an ERROR; never returns.
pub fn raise(code: PgSqlErrorCode, message: String) -> ! {
    ErrorReport::new(code, message, "pg_jobs").report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// Unwraps a required argument or raises 22004 naming it.
pub fn required<T>(value: Option<T>, argument: &str) -> T {
    match value {
        Some(value) => value,
        None => raise(NULL_ARGUMENT, format!("{argument} must not be NULL")),
    }
}

/// Checks that an integer argument lies in `min..=max`.
pub fn check_range(value: i64, argument: &str, min: i64, max: i64) {
    if value < min || value > max {
        raise(
            BAD_ARGUMENT,
            format!("{argument} must be between {min} and {max}, got {value}"),
        );
    }
}

/// Microseconds in an interval, counting a day as 24 hours and a month as 30 days, as
/// `extract(epoch from ...)` does.
pub fn interval_micros(interval: &Interval) -> i128 {
    interval.as_micros()
}

/// Checks an interval argument against `min..=max` microseconds; `what` describes the range
/// for the message ("greater than 0 and at most 7 days").
pub fn check_interval(
    interval: &Interval,
    argument: &str,
    min_exclusive: bool,
    max: i128,
    what: &str,
) {
    let micros = interval_micros(interval);
    let too_small = if min_exclusive {
        micros <= 0
    } else {
        micros < 0
    };
    if too_small || micros > max {
        raise(
            BAD_ARGUMENT,
            format!("{argument} must be {what}, got '{interval}'"),
        );
    }
}

/// One second in microseconds.
pub const SECOND: i128 = 1_000_000;
/// One day in microseconds.
pub const DAY: i128 = 86_400 * SECOND;
