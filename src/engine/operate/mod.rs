//! Operating on jobs by id: cancelling them (Rule 7), retrying finished ones (Rule 8), and
//! making a queued job due now.

use pgrx::pg_sys::{INT8OID, TEXTARRAYOID, TIMESTAMPTZOID};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::engine::enqueue;
use crate::engine::errors::{UNIQUE_VIOLATION, UNKNOWN_JOB, WRONG_STATE};
use crate::engine::groups::{self, GroupRef};
use crate::engine::model::JobState;
use crate::engine::tenants::TenantScope;
use crate::engine::transitions::{self, Settled};
use crate::engine::workflows::dependencies;
use crate::pg::clock::server_now;
use crate::pg::errors::{quote, raise, raise_with_hint};
use crate::pg::subtransaction::unless_it_raises;
use crate::runtime::locks;
use crate::storage::{statement, timestamptz_arg, with_client, Statement};

static LOCK_STATE: Statement = statement!(
    operate/lock_state(id: INT8OID, tenants: TEXTARRAYOID)
        -> (state, queue, group_key, tenant, unique_key, dependents, after)
);

static CANCEL: Statement = statement!(operate/cancel(id: INT8OID, now: TIMESTAMPTZOID) -> ());

static RETRY: Statement = statement!(
    operate/retry(id: INT8OID, run_at: TIMESTAMPTZOID) -> (queue, priority, run_at, id)
);

static RUN_NOW: Statement = statement!(
    operate/run_now(id: INT8OID, now: TIMESTAMPTZOID) -> (queue, priority, run_at, id)
);

/// A job as an operation by id finds it.
struct Locked {
    state: JobState,
    queue: String,
    group_key: Option<String>,
    tenant: Option<String>,
    unique_key: Option<String>,
    /// Whether jobs were enqueued after it (`engine::workflows::dependencies`).
    dependents: bool,
    /// The jobs it was enqueued after, if any.
    after: Option<Vec<i64>>,
}

/// Locks job `id`'s row and returns its latest committed state, raising P0002 when there is
/// none (or it belongs to a tenant outside the caller's scope).
fn lock_job_row(client: &SpiClient<'_>, id: i64, scope: &TenantScope) -> Locked {
    let rows = LOCK_STATE.run(client, &[id.into(), scope.param()]);
    let found = rows.first().and_then(|row| {
        Some(Locked {
            state: JobState::parse(&row.get::<String>("state")?)?,
            queue: row.get::<String>("queue")?,
            group_key: row.get("group_key"),
            tenant: row.get("tenant"),
            unique_key: row.get("unique_key"),
            dependents: row.get("dependents").unwrap_or(false),
            after: row
                .get::<Vec<Option<i64>>>("after")
                .map(|ids| ids.into_iter().flatten().collect()),
        })
    });
    match found {
        Some(found) => found,
        None => raise(UNKNOWN_JOB, format!("no job has id {id}")),
    }
}

/// Cancels a queued, running or waiting job at once and returns its state afterwards; a
/// finished job is left as it is. A running holder learns it at its next heartbeat or settle
/// call. Its waiting dependents are cancelled too, transitively
/// (`engine::workflows::dependencies`).
pub fn cancel(id: i64, scope: &TenantScope) -> JobState {
    // A queued job may be in the middle of being claimed: its job lock makes us wait for that
    // claim (and makes later claims skip the job) instead of a claim waiting on our row lock.
    locks::lock_job(id);
    with_client(|client| {
        let job = lock_job_row(client, id, scope);
        transitions::job_locked(&job.queue);
        if job.state.is_finished() {
            return job.state;
        }
        CANCEL.run(client, &[id.into(), timestamptz_arg(server_now())]);
        transitions::job_counted(&job.queue, job.tenant.as_deref(), Settled::Cancelled);
        if job.state == JobState::Waiting {
            dependencies::child_cancelled(client, id);
        }
        if job.dependents {
            dependencies::parents_ended(client, vec![(id, JobState::Cancelled)]);
        }
        // A waiting job holds no slot of its group.
        if let Some(group) = job
            .group_key
            .as_ref()
            .filter(|_| job.state != JobState::Waiting)
        {
            // Its group's next job may run (a queued head blocked it too).
            groups::move_on(
                client,
                vec![GroupRef {
                    queue: job.queue.clone(),
                    key: group.clone(),
                    tenant: job.tenant.clone(),
                }],
            );
        }
        JobState::Cancelled
    })
}

/// Brings a failed or cancelled job back to queued at `run_at`, with fresh attempts; its error
/// history stays. A job enqueued after other jobs waits again for those that have not succeeded
/// since (`waiting`), else is queued; parents that retention purged are not waited for.
pub fn retry(id: i64, run_at: TimestampWithTimeZone, scope: &TenantScope) -> JobState {
    with_client(|client| {
        let job = lock_job_row(client, id, scope);
        match job.state {
            JobState::Failed | JobState::Cancelled => {}
            JobState::Succeeded => raise_with_hint(
                WRONG_STATE,
                format!("job {id} is succeeded; only failed or cancelled jobs can be retried"),
                "A succeeded job is finished for good: enqueue a new job to run the work again.",
            ),
            JobState::Queued | JobState::Running | JobState::Waiting => raise_with_hint(
                WRONG_STATE,
                format!(
                    "job {id} is {}; only failed or cancelled jobs can be retried",
                    job.state.as_str()
                ),
                "It has not finished yet. Cancel it first (SELECT jobs_cancel(id)) if it must start over.",
            ),
        }
        if let Some(group) = &job.group_key {
            // A retried job of a group may become its head again: no claim may be deciding
            // for the group meanwhile.
            locks::lock_group(locks::group_key_hash(
                &job.queue,
                job.tenant.as_deref(),
                group,
            ));
        }
        let retry = || RETRY.run(client, &[id.into(), run_at.into()]);
        let rows = match &job.unique_key {
            None => retry(),
            Some(key) => {
                check_key_free(client, id, &job, key);
                // A job enqueued with the key by a transaction that commits after the check
                // makes the update collide in the unique index: the holder is committed by
                // then, and the check names it.
                unless_it_raises(UNIQUE_VIOLATION, retry).unwrap_or_else(|| {
                    check_key_free(client, id, &job, key);
                    raise(
                        UNIQUE_VIOLATION,
                        format!(
                            "job {id} cannot be retried: another job took its unique key {} in queue {} meanwhile",
                            quote(key),
                            quote(&job.queue)
                        ),
                    )
                })
            }
        };
        let row = rows.first().expect("operate/retry updates the locked job");
        match job.after.as_deref().filter(|after| !after.is_empty()) {
            Some(after) => {
                let parents =
                    dependencies::lock_parents(client, after, job.tenant.as_deref(), scope, true);
                dependencies::retried_after(client, id, &parents)
            }
            None => {
                transitions::queued_row(&row);
                JobState::Queued
            }
        }
    })
}

/// Refuses to retry job `id` while another job holds its unique key (a job enqueued with the
/// key after this one ended); a holder whose window has passed gives the key up.
fn check_key_free(client: &SpiClient<'_>, id: i64, job: &Locked, key: &str) {
    let holders = enqueue::holders_of(client, &job.queue, job.tenant.as_deref(), &[key.to_owned()]);
    let Some(holder) = holders.get(key).filter(|holder| holder.id != id) else {
        return;
    };
    if holder.expired {
        enqueue::release(client, &[holder.id]);
        return;
    }
    raise_with_hint(
        UNIQUE_VIOLATION,
        format!(
            "job {id} cannot be retried: job {} ({}) holds its unique key {} in queue {}",
            holder.id,
            holder.state,
            quote(key),
            quote(&job.queue)
        ),
        "Cancel that job first, or enqueue the work anew.",
    );
}

/// Makes a queued job due now (a delayed one, or one waiting for a retry's backoff), keeping
/// its priority, and returns its state afterwards; a job in another state is left as it is.
pub fn run_now(id: i64, scope: &TenantScope) -> JobState {
    // As cancel: a claim in the middle of taking the job finishes first, later claims skip it
    // until we end.
    locks::lock_job(id);
    with_client(|client| {
        let job = lock_job_row(client, id, scope);
        transitions::job_locked(&job.queue);
        if job.state != JobState::Queued {
            return job.state;
        }
        // Its claim position moved: the floor must come down to it, and waiting claims look.
        let rows = RUN_NOW.run(client, &[id.into(), timestamptz_arg(server_now())]);
        transitions::queued_rows(&rows);
        JobState::Queued
    })
}
