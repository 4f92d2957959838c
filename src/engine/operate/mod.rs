//! Operating on jobs by id: cancelling them (Rule 7) and retrying finished ones (Rule 8).

use pgrx::pg_sys::{INT8OID, TEXTARRAYOID, TIMESTAMPTZOID};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::engine::model::JobState;
use crate::engine::tenants::TenantScope;
use crate::engine::transitions;
use crate::pg::clock::server_now;
use crate::pg::errors::{raise, raise_with_hint, UNKNOWN_JOB, WRONG_STATE};
use crate::runtime::locks;
use crate::storage::{param, timestamptz_arg, with_client, Statement};

static LOCK_STATE: Statement = Statement {
    name: "operate/lock_state",
    sql: include_str!("lock_state.sql"),
    params: &[param("id", INT8OID), param("tenants", TEXTARRAYOID)],
    columns: &["state", "queue"],
};

static CANCEL: Statement = Statement {
    name: "operate/cancel",
    sql: include_str!("cancel.sql"),
    params: &[param("id", INT8OID), param("now", TIMESTAMPTZOID)],
    columns: &[],
};

static RETRY: Statement = Statement {
    name: "operate/retry",
    sql: include_str!("retry.sql"),
    params: &[param("id", INT8OID), param("run_at", TIMESTAMPTZOID)],
    columns: &["queue", "priority", "run_at", "id"],
};

/// Locks job `id`'s row and returns its latest committed state and its queue, raising P0002
/// when there is none (or it belongs to a tenant outside the caller's scope).
fn lock_job_row(client: &SpiClient<'_>, id: i64, scope: &TenantScope) -> (JobState, String) {
    let rows = LOCK_STATE.run(client, &[id.into(), scope.param()]);
    let found = rows.first().and_then(|row| {
        Some((
            JobState::parse(&row.get::<String>("state")?)?,
            row.get::<String>("queue")?,
        ))
    });
    match found {
        Some(found) => found,
        None => raise(UNKNOWN_JOB, format!("no job has id {id}")),
    }
}

/// Cancels a queued or running job at once and returns its state afterwards; a finished job
/// is left as it is. A running holder learns it at its next heartbeat or settle call.
pub fn cancel(id: i64, scope: &TenantScope) -> JobState {
    // A queued job may be in the middle of being claimed: its job lock makes us wait for that
    // claim (and makes later claims skip the job) instead of a claim waiting on our row lock.
    locks::lock_job(id);
    with_client(|client| {
        let (state, queue) = lock_job_row(client, id, scope);
        transitions::job_locked(&queue);
        if state.is_finished() {
            return state;
        }
        CANCEL.run(client, &[id.into(), timestamptz_arg(server_now())]);
        JobState::Cancelled
    })
}

/// Brings a failed or cancelled job back to queued at `run_at`, with fresh attempts; its error
/// history stays.
pub fn retry(id: i64, run_at: TimestampWithTimeZone, scope: &TenantScope) -> JobState {
    with_client(|client| {
        let (state, _) = lock_job_row(client, id, scope);
        match state {
            JobState::Failed | JobState::Cancelled => {}
            JobState::Succeeded => raise_with_hint(
                WRONG_STATE,
                format!("job {id} is succeeded; only failed or cancelled jobs can be retried"),
                "A succeeded job is finished for good: enqueue a new job to run the work again.",
            ),
            JobState::Queued | JobState::Running => raise_with_hint(
                WRONG_STATE,
                format!(
                    "job {id} is {}; only failed or cancelled jobs can be retried",
                    state.as_str()
                ),
                "It has not finished yet. Cancel it first (SELECT jobs_cancel(id)) if it must start over.",
            ),
        }
        let rows = RETRY.run(client, &[id.into(), run_at.into()]);
        let row = rows.first().expect("operate/retry updates the locked job");
        transitions::queued_row(&row);
        JobState::Queued
    })
}
