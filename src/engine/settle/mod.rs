//! Calls that present a lease: `jobs_heartbeat`, `jobs_complete` (one or many), `jobs_fail` and
//! `jobs_release` (Rules 4–7).
//!
//! Every call presents `(id, lease)`. It acts only when that lease is the job's current one
//! and the job is running, or queued by a reclaim that no newer claim has followed ("done
//! wins", Rule 5); otherwise it changes nothing and answers `cancelled` (the job was cancelled
//! under this lease) or `lost` (another claim, a settle, or a purge came first).

use std::collections::{HashMap, HashSet};

use pgrx::datum::{DatumWithOid, Interval};
use pgrx::pg_sys;
use pgrx::pg_sys::{
    BOOLOID, INT8ARRAYOID, INT8OID, INTERVALOID, JSONBOID, TEXTARRAYOID, TEXTOID, TIMESTAMPTZOID,
    UUIDARRAYOID, UUIDOID,
};
use pgrx::spi::SpiClient;

use crate::engine::dead_letter;
use crate::engine::groups::{self, GroupRef};
use crate::engine::model::{JobState, Outcome};
use crate::engine::tenants::TenantScope;
use crate::engine::transitions::{self, Settled};
use crate::engine::workflows::dependencies;
use crate::pg::clock::server_now;
use crate::pg::datum::Jsonb;
use crate::runtime::locks::{self, lock_job, try_lock_job};
use crate::storage::{statement, timestamptz_arg, with_client, Rows, Statement};

static COMPLETE: Statement = statement!(
    settle/complete(id: INT8OID, lease: UUIDOID, result: JSONBOID, now: TIMESTAMPTZOID,
        tenants: TEXTARRAYOID, state: TEXTOID) -> (queue, group_key, tenant, dependents)
);

static COMPLETE_BATCH: Statement = statement!(
    settle/complete_batch(ids: INT8ARRAYOID, leases: UUIDARRAYOID, now: TIMESTAMPTZOID,
        tenants: TEXTARRAYOID, state: TEXTOID) -> (id, lease, queue, group_key, tenant, dependents)
);

static HELD_STATE: Statement = statement!(
    settle/held_state(ids: INT8ARRAYOID, leases: UUIDARRAYOID, tenants: TEXTARRAYOID)
        -> (id, state, lease, queue, group_key, tenant)
);

static FAIL: Statement = statement!(
    settle/fail(id: INT8OID, lease: UUIDOID, error: TEXTOID, retry_in: INTERVALOID, retry: BOOLOID,
        now: TIMESTAMPTZOID, tenants: TEXTARRAYOID, state: TEXTOID)
        -> (state, queue, priority, run_at, id, group_key, tenant, dependents)
);

static RELEASE: Statement = statement!(
    settle/release(id: INT8OID, lease: UUIDOID, reason: TEXTOID, retry_in: INTERVALOID,
        now: TIMESTAMPTZOID, tenants: TEXTARRAYOID, state: TEXTOID)
        -> (queue, priority, run_at, id, group_key, tenant)
);

static ROW_LOCKER: Statement = statement!(settle/row_locker(id: INT8OID) -> (xmax));

static HEARTBEAT: Statement = statement!(
    settle/heartbeat(id: INT8OID, lease: UUIDOID, extend: INTERVALOID, progress: JSONBOID,
        now: TIMESTAMPTZOID, tenants: TEXTARRAYOID, state: TEXTOID) -> (renewed)
);

static LOST_JOBS: Statement = statement!(
    settle/lost_jobs(ids: INT8ARRAYOID, tenants: TEXTARRAYOID) -> (id, queue, tenant)
);

/// Counts the calls on `ids` that answered `lost` in the totals, under each job's queue and
/// tenant (a job that is gone, or outside the caller's scope, in the overflow line).
fn count_lost(client: &SpiClient<'_>, ids: &[i64], scope: &TenantScope) {
    if ids.is_empty() {
        return;
    }
    let rows = LOST_JOBS.run(client, &[ids.to_vec().into(), scope.param()]);
    let mut found = 0;
    for row in rows.iter() {
        let queue: String = row.expect("queue");
        let tenant: Option<String> = row.get("tenant");
        transitions::job_counted(&queue, tenant.as_deref(), Settled::Lost);
        found += 1;
    }
    for _ in found..ids.len() {
        transitions::job_counted("", None, Settled::Lost);
    }
}

/// `answer`, the outcome of a call on job `id` that changed nothing, counted when it is `lost`.
fn unchanged(client: &SpiClient<'_>, id: i64, answer: Outcome, scope: &TenantScope) -> Outcome {
    if answer == Outcome::Lost {
        count_lost(client, &[id], scope);
    }
    answer
}

/// A settle call's handle on a job: its id and the lease the caller presents.
pub type Held = (i64, pgrx::Uuid);

/// What a settle call that changed nothing learns of a job it presented the current lease of.
struct HeldJob {
    /// Its state.
    state: JobState,
    /// Its queue.
    queue: String,
}

/// Each job among `held` whose current lease is the one presented (within the caller's tenant
/// scope).
fn held_states(
    client: &SpiClient<'_>,
    held: &[Held],
    scope: &TenantScope,
) -> HashMap<Held, HeldJob> {
    let (ids, leases): (Vec<i64>, Vec<pgrx::Uuid>) = held.iter().copied().unzip();
    HELD_STATE
        .run(client, &[ids.into(), leases.into(), scope.param()])
        .iter()
        .filter_map(|row| {
            let state = JobState::parse(&row.get::<String>("state")?)?;
            Some((
                (row.get::<i64>("id")?, row.get::<pgrx::Uuid>("lease")?),
                HeldJob {
                    state,
                    queue: row.get::<String>("queue")?,
                },
            ))
        })
        .collect()
}

/// Takes the job lock of a job a reclaim put back in the queue, before acting on it, so claims
/// skip the job meanwhile instead of waiting for us.
///
/// Unless this transaction holds the job's row lock already: the first settle statement, meeting
/// the row while the reclaim changed it, waited for the reclaim and then locked the row's new
/// version when its recheck failed. A claim holding the job lock may then be waiting for that
/// row lock, and waiting for its job lock would deadlock; no claim can change the row before we
/// end, so the job is ours to settle without it ("done wins": no claim took it since, and one
/// waiting for the row takes nothing once we finished it). Whether that claim commits or rolls
/// back does not matter, so the settle never waits for it: a grouped job's group moves on
/// without the group's lock when the claim holding it waits for us (`engine::groups::move_on`),
/// and the claim, missing the job, moves the group on itself (`engine::claim`).
fn lock_reclaimed(client: &SpiClient<'_>, id: i64, job: &HeldJob) {
    if !try_lock_job(id) {
        if holds_row_lock(client, id) {
            locks::holding_a_row_claims_may_wait_for();
        } else {
            lock_job(id);
        }
    }
    transitions::job_locked(&job.queue);
}

/// Whether this transaction (or the subtransaction it is in) holds the lock of job `id`'s row.
fn holds_row_lock(client: &SpiClient<'_>, id: i64) -> bool {
    let Some(xmax) = ROW_LOCKER
        .first::<String>(client, &[id.into()], "xmax")
        .and_then(|xmax| xmax.parse::<u32>().ok())
    else {
        return false;
    };
    // SAFETY: reads this backend's transaction ids (invalid when none is assigned).
    let (top, current) = unsafe {
        (
            u32::from(pg_sys::GetTopTransactionIdIfAny()),
            u32::from(pg_sys::GetCurrentTransactionIdIfAny()),
        )
    };
    xmax != 0 && (xmax == top || xmax == current)
}

/// The grouped jobs in `rows` left `running` (they finished, or went back to the queue): their
/// groups move on, so the jobs waiting for them may run.
pub(crate) fn move_groups_on(client: &SpiClient<'_>, rows: &Rows) {
    groups::move_on(
        client,
        rows.iter()
            .filter_map(|row| GroupRef::of_row(&row))
            .collect(),
    );
}

/// Runs a settle statement (whose last argument is the state it acts on) for the job held
/// under (id, lease). First for a running job: the common case, which never meets a claim. If
/// a reclaim put the job back in the queue under this lease and no claim followed, again for
/// the queued job, under its job lock so no claim is taking it meanwhile ("done wins", Rule 5).
/// Returns the rows of the run that acted, or the answer to a call that changed nothing.
pub(crate) fn run_held(
    client: &SpiClient<'_>,
    statement: &'static Statement,
    (id, lease): Held,
    scope: &TenantScope,
    mut args: Vec<DatumWithOid<'_>>,
) -> Result<Rows, Outcome> {
    args.push(scope.param());
    args.push(JobState::Running.as_str().into());
    let rows = statement.run(client, &args);
    if !rows.is_empty() {
        return Ok(rows);
    }
    let held = held_states(client, &[(id, lease)], scope).remove(&(id, lease));
    match held {
        Some(job) if job.state == JobState::Queued => {
            lock_reclaimed(client, id, &job);
            *args.last_mut().expect("the state argument") = JobState::Queued.as_str().into();
            let rows = statement.run(client, &args);
            if !rows.is_empty() {
                return Ok(rows);
            }
            // A claim took it first: the lease is stale now, unless it was cancelled.
            match held_states(client, &[(id, lease)], scope).remove(&(id, lease)) {
                Some(job) if job.state == JobState::Cancelled => Err(Outcome::Cancelled),
                _ => Err(Outcome::Lost),
            }
        }
        Some(job) if job.state == JobState::Cancelled => Err(Outcome::Cancelled),
        _ => Err(Outcome::Lost),
    }
}

/// Extends the lease of a held job (by the claim's lease length unless `extend`) and stores
/// `progress`: `running`, `cancelled` or `lost`.
pub fn heartbeat(
    held: Held,
    extend: Option<Interval>,
    progress: Option<Jsonb>,
    scope: &TenantScope,
) -> Outcome {
    with_client(|client| {
        let args = vec![
            held.0.into(),
            held.1.into(),
            extend.into(),
            progress.into(),
            timestamptz_arg(server_now()),
        ];
        match run_held(client, &HEARTBEAT, held, scope, args) {
            Ok(_) => Outcome::Running,
            Err(answer) => unchanged(client, held.0, answer, scope),
        }
    })
}

/// Marks a held job succeeded, storing `result`: `succeeded`, `cancelled` or `lost`.
pub fn complete(held: Held, result: Option<Jsonb>, scope: &TenantScope) -> Outcome {
    with_client(|client| {
        let args = vec![
            held.0.into(),
            held.1.into(),
            result.into(),
            timestamptz_arg(server_now()),
        ];
        match run_held(client, &COMPLETE, held, scope, args) {
            Ok(rows) => {
                rows.iter()
                    .for_each(|row| transitions::job_settled(&row, Settled::Completed));
                // Its dependents first: their rows are deleted before this settle waits for
                // any group's lock (engine::workflows::dependencies, lock order).
                if rows.first().and_then(|row| row.get::<bool>("dependents")) == Some(true) {
                    dependencies::parents_succeeded(client, vec![held.0]);
                }
                move_groups_on(client, &rows);
                Outcome::Succeeded
            }
            Err(answer) => unchanged(client, held.0, answer, scope),
        }
    })
}

/// Marks many held jobs succeeded in one statement; one outcome per pair, in input order.
pub fn complete_batch(pairs: &[Held], scope: &TenantScope) -> Vec<(i64, Outcome)> {
    with_client(|client| {
        let now = server_now();
        let complete = |held: &[Held], state: JobState| -> HashSet<Held> {
            let (ids, leases): (Vec<i64>, Vec<pgrx::Uuid>) = held.iter().copied().unzip();
            let args: [DatumWithOid; 5] = [
                ids.into(),
                leases.into(),
                timestamptz_arg(now),
                scope.param(),
                state.as_str().into(),
            ];
            let rows = COMPLETE_BATCH.run(client, &args);
            let mut parents = Vec::new();
            let done = rows
                .iter()
                .filter_map(|row| {
                    transitions::job_settled(&row, Settled::Completed);
                    let id = row.get::<i64>("id")?;
                    if row.get::<bool>("dependents") == Some(true) {
                        parents.push(id);
                    }
                    Some((id, row.get::<pgrx::Uuid>("lease")?))
                })
                .collect();
            dependencies::parents_succeeded(client, parents);
            move_groups_on(client, &rows);
            done
        };
        let missed = |done: &HashSet<Held>| -> Vec<Held> {
            pairs
                .iter()
                .copied()
                .filter(|pair| !done.contains(pair))
                .collect()
        };
        let mut done = complete(pairs, JobState::Running);
        let mut states = held_states(client, &missed(&done), scope);
        // Jobs a reclaim put back in the queue under these leases: take their job locks (in id
        // order, against deadlocks) and settle them as queued, as the single form does.
        let mut reclaimed: Vec<(Held, &HeldJob)> = states
            .iter()
            .filter(|(_, job)| job.state == JobState::Queued)
            .map(|(pair, job)| (*pair, job))
            .collect();
        if !reclaimed.is_empty() {
            reclaimed.sort_unstable_by_key(|(pair, _)| *pair);
            for ((id, _), job) in &reclaimed {
                lock_reclaimed(client, *id, job);
            }
            let reclaimed: Vec<Held> = reclaimed.into_iter().map(|(pair, _)| pair).collect();
            done.extend(complete(&reclaimed, JobState::Queued));
            states = held_states(client, &missed(&done), scope);
        }
        let outcomes: Vec<(i64, Outcome)> = pairs
            .iter()
            .map(|pair| {
                let outcome = if done.contains(pair) {
                    Outcome::Succeeded
                } else if states
                    .get(pair)
                    .is_some_and(|job| job.state == JobState::Cancelled)
                {
                    Outcome::Cancelled
                } else {
                    Outcome::Lost
                };
                (pair.0, outcome)
            })
            .collect();
        let lost: Vec<i64> = outcomes
            .iter()
            .filter(|(_, outcome)| *outcome == Outcome::Lost)
            .map(|(id, _)| *id)
            .collect();
        count_lost(client, &lost, scope);
        outcomes
    })
}

/// Records a failed attempt (Rule 6): `queued` (a retry is scheduled after `retry_in` or the
/// queue's backoff), `failed` (and dead-lettered), `cancelled` or `lost`.
pub fn fail(
    held: Held,
    error: &str,
    retry_in: Option<Interval>,
    retry: bool,
    scope: &TenantScope,
) -> Outcome {
    with_client(|client| {
        let args = vec![
            held.0.into(),
            held.1.into(),
            error.into(),
            retry_in.into(),
            retry.into(),
            timestamptz_arg(server_now()),
        ];
        let rows = match run_held(client, &FAIL, held, scope, args) {
            Ok(rows) => rows,
            Err(answer) => return unchanged(client, held.0, answer, scope),
        };
        let row = rows.first().expect("settle/fail returned a row");
        let failed = row.expect::<String>("state") == JobState::Failed.as_str();
        if failed && row.get::<bool>("dependents") == Some(true) {
            dependencies::parents_ended(client, vec![(held.0, JobState::Failed)]);
        }
        move_groups_on(client, &rows);
        if failed {
            transitions::job_settled(&row, Settled::Failed);
            dead_letter::copy_failed(client, vec![held.0]);
            Outcome::Failed
        } else {
            transitions::job_settled(&row, Settled::Retried);
            transitions::queued_row(&row);
            Outcome::Queued
        }
    })
}

/// Hands a held job back without spending its attempt (Rule 3): `queued`, `cancelled` or
/// `lost`.
pub fn release(
    held: Held,
    reason: Option<&str>,
    retry_in: Interval,
    scope: &TenantScope,
) -> Outcome {
    with_client(|client| {
        let args = vec![
            held.0.into(),
            held.1.into(),
            reason.into(),
            retry_in.into(),
            timestamptz_arg(server_now()),
        ];
        match run_held(client, &RELEASE, held, scope, args) {
            Ok(rows) => {
                rows.iter()
                    .for_each(|row| transitions::job_settled(&row, Settled::Released));
                move_groups_on(client, &rows);
                transitions::queued_rows(&rows);
                Outcome::Queued
            }
            Err(answer) => unchanged(client, held.0, answer, scope),
        }
    })
}
