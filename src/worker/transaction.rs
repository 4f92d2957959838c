//! The background workers' transactions: each piece of work in a short transaction of its own,
//! committed when it returns and rolled back on an ERROR, which is caught and handed back.

use pgrx::pg_sys;
use pgrx::PgTryBuilder;

/// Why a transaction of a worker was rolled back.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The ERROR's message.
    pub message: String,
    /// Whether it was a lock timeout (SQLSTATE 55P03): DDL holds a table the work needs.
    pub lock_timeout: bool,
    /// Whether it was not an ERROR: the Citus shard the work was for moved to another node
    /// (`worker::tick`), and the work was not done.
    pub shard_moved: bool,
}

/// Runs `work` in a transaction of its own, shown as `activity` in `pg_stat_activity`;
/// commits when it returns, and rolls back on an ERROR, which is returned.
///
/// The transaction's snapshot is taken when it starts and dropped when it ends, so the work
/// holds back vacuum for as long as it runs and no longer: keep it short.
pub fn run<R>(activity: &std::ffi::CStr, work: impl FnOnce() -> R) -> Result<R, Failure> {
    // SAFETY: the standard transaction bracket of a background worker.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        pg_sys::pgstat_report_activity(pg_sys::BackendState::STATE_RUNNING, activity.as_ptr());
    }
    let outcome = PgTryBuilder::new(std::panic::AssertUnwindSafe(|| Ok(work())))
        .catch_others(|error| Err(failure(error)))
        .execute();
    // SAFETY: closes the transaction opened above, committing or rolling back.
    unsafe {
        match outcome {
            Ok(_) => {
                pg_sys::PopActiveSnapshot();
                pg_sys::CommitTransactionCommand();
            }
            Err(_) => pg_sys::AbortCurrentTransaction(),
        }
        // A background worker must flush its own statistics: without them autovacuum would
        // never hear of the rows reclaim and purge leave dead.
        pg_sys::pgstat_report_stat(false);
        pg_sys::pgstat_report_activity(pg_sys::BackendState::STATE_IDLE, std::ptr::null());
    }
    outcome
}

/// The message and kind of an ERROR caught in a worker's transaction.
fn failure(error: pg_sys::panic::CaughtError) -> Failure {
    match error {
        pg_sys::panic::CaughtError::PostgresError(report)
        | pg_sys::panic::CaughtError::ErrorReport(report)
        | pg_sys::panic::CaughtError::RustPanic {
            ereport: report, ..
        } => Failure {
            message: report.message().to_owned(),
            lock_timeout: report.sql_error_code()
                == pg_sys::errcodes::PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
            shard_moved: false,
        },
    }
}
