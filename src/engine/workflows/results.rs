//! Outcomes of jobs: read now (`jobs_results`), or waited for until every listed job has
//! finished (`jobs_wait`).
//!
//! A wait is driven by commits, as a waiting claim is (`engine::claim::wait`): every commit
//! that finishes jobs (a settle, a failure for good, a cancel, a prepared transaction's
//! `COMMIT PREPARED`) wakes the waits when any is asleep (`runtime::wakeup::wake_finish_waiters`).
//! Each look runs in a subtransaction rolled back at once, so the sleep holds no lock, and,
//! when the statement is nothing but the call, no snapshot (`pg::snapshot`): an idle waiter does
//! not hold VACUUM back. It refuses REPEATABLE READ and SERIALIZABLE, whose snapshot would
//! never see the jobs finish. A job that does not exist (never did, or was purged) cannot
//! finish and is not waited for; it has no row.

use pgrx::datum::TimestampWithTimeZone;
use pgrx::pg_sys::{self, INT8ARRAYOID, TEXTARRAYOID};
use pgrx::spi::SpiClient;

use crate::engine::errors::WAIT_NEEDS_READ_COMMITTED;
use crate::engine::model::JobState;
use crate::engine::tenants::TenantScope;
use crate::engine::waiting::{SleepSnapshot, Waiting};
use crate::pg::clock::server_now;
use crate::pg::datum::Jsonb;
use crate::pg::errors::raise_with_hint;
use crate::pg::subtransaction::in_subtransaction;
use crate::runtime::wakeup::Waiter;
use crate::storage::{statement, with_client, Statement};

static RESULTS: Statement = statement!(
    workflows/results(ids: INT8ARRAYOID, tenants: TEXTARRAYOID)
        -> (id, state, result, errors, finished_at)
);

/// One job's outcome.
pub struct JobResult {
    /// The job.
    pub id: i64,
    /// Its state.
    pub state: String,
    /// What it returned, if it succeeded with a result.
    pub result: Option<Jsonb>,
    /// Its error history.
    pub errors: Option<Jsonb>,
    /// When it finished, if it has.
    pub finished_at: Option<TimestampWithTimeZone>,
}

impl JobResult {
    /// Whether the job has finished.
    fn finished(&self) -> bool {
        JobState::parse(&self.state).is_some_and(JobState::is_finished)
    }
}

/// The outcomes of the jobs `ids` within `scope`, in the order given, copied into `context`.
fn read(
    client: &SpiClient<'_>,
    ids: &[i64],
    scope: &TenantScope,
    context: pg_sys::MemoryContext,
) -> Vec<JobResult> {
    RESULTS
        .run(client, &[ids.to_vec().into(), scope.param()])
        .iter()
        .map(|row| JobResult {
            id: row.expect("id"),
            state: row.expect("state"),
            result: row.get_in("result", context),
            errors: row.get_in("errors", context),
            finished_at: row.get("finished_at"),
        })
        .collect()
}

/// The outcomes of the jobs `ids` the caller may see, in the order given.
pub fn results(ids: &[i64], scope: &TenantScope) -> Vec<JobResult> {
    // SAFETY: reading the current context pointer (the caller's, which outlives SPI).
    let context = unsafe { pg_sys::CurrentMemoryContext };
    with_client(|client| read(client, ids, scope, context))
}

/// Waits until every one of the jobs `ids` the caller may see has finished, or `timeout_micros`
/// passed, and returns their outcomes as [`results`] does.
pub fn wait(ids: &[i64], timeout_micros: i64, scope: &TenantScope) -> Vec<JobResult> {
    // SAFETY: reads the session's isolation level.
    if unsafe { pg_sys::XactIsoLevel } >= pg_sys::XACT_REPEATABLE_READ as i32 {
        raise_with_hint(
            WAIT_NEEDS_READ_COMMITTED,
            "jobs_wait cannot wait under REPEATABLE READ or SERIALIZABLE isolation".into(),
            "Its snapshot would never see the jobs finish; wait in a READ COMMITTED transaction, or read them now with jobs_results.",
        );
    }
    // SAFETY: reading the current context pointer (the caller's, which outlives SPI and the
    // subtransactions below).
    let context = unsafe { pg_sys::CurrentMemoryContext };
    let deadline = server_now().saturating_add(timeout_micros);
    let mut sleep_snapshot = SleepSnapshot::new(Waiting::Wait);
    let waiter = Waiter::on_finishes();
    loop {
        let seen = waiter.generation();
        let found = in_subtransaction(|| {
            (
                with_client(|client| read(client, ids, scope, context)),
                false,
            )
        });
        if found.iter().all(JobResult::finished) || server_now() >= deadline {
            return found;
        }
        sleep_snapshot.before_sleep();
        waiter.sleep(deadline, seen);
    }
}
