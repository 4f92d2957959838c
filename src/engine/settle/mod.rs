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
use crate::storage::{param, timestamptz_arg, with_client, Rows, Statement};

static COMPLETE: Statement = Statement {
    name: "settle/complete",
    sql: include_str!("complete.sql"),
    params: &[
        param("id", INT8OID),
        param("lease", UUIDOID),
        param("result", JSONBOID),
        param("now", TIMESTAMPTZOID),
        param("tenants", TEXTARRAYOID),
        param("state", TEXTOID),
    ],
    columns: &["queue", "group_key", "tenant", "dependents"],
};

static COMPLETE_BATCH: Statement = Statement {
    name: "settle/complete_batch",
    sql: include_str!("complete_batch.sql"),
    params: &[
        param("ids", INT8ARRAYOID),
        param("leases", UUIDARRAYOID),
        param("now", TIMESTAMPTZOID),
        param("tenants", TEXTARRAYOID),
        param("state", TEXTOID),
    ],
    columns: &["id", "lease", "queue", "group_key", "tenant", "dependents"],
};

static HELD_STATE: Statement = Statement {
    name: "settle/held_state",
    sql: include_str!("held_state.sql"),
    params: &[
        param("ids", INT8ARRAYOID),
        param("leases", UUIDARRAYOID),
        param("tenants", TEXTARRAYOID),
    ],
    columns: &["id", "state", "lease", "queue", "group_key", "tenant"],
};

static FAIL: Statement = Statement {
    name: "settle/fail",
    sql: include_str!("fail.sql"),
    params: &[
        param("id", INT8OID),
        param("lease", UUIDOID),
        param("error", TEXTOID),
        param("retry_in", INTERVALOID),
        param("retry", BOOLOID),
        param("now", TIMESTAMPTZOID),
        param("tenants", TEXTARRAYOID),
        param("state", TEXTOID),
    ],
    columns: &[
        "state",
        "queue",
        "priority",
        "run_at",
        "id",
        "group_key",
        "tenant",
        "dependents",
    ],
};

static RELEASE: Statement = Statement {
    name: "settle/release",
    sql: include_str!("release.sql"),
    params: &[
        param("id", INT8OID),
        param("lease", UUIDOID),
        param("reason", TEXTOID),
        param("retry_in", INTERVALOID),
        param("now", TIMESTAMPTZOID),
        param("tenants", TEXTARRAYOID),
        param("state", TEXTOID),
    ],
    columns: &["queue", "priority", "run_at", "id", "group_key", "tenant"],
};

static ROW_LOCKER: Statement = Statement {
    name: "settle/row_locker",
    sql: include_str!("row_locker.sql"),
    params: &[param("id", INT8OID)],
    columns: &["xmax"],
};

static HEARTBEAT: Statement = Statement {
    name: "settle/heartbeat",
    sql: include_str!("heartbeat.sql"),
    params: &[
        param("id", INT8OID),
        param("lease", UUIDOID),
        param("extend", INTERVALOID),
        param("progress", JSONBOID),
        param("now", TIMESTAMPTZOID),
        param("tenants", TEXTARRAYOID),
        param("state", TEXTOID),
    ],
    columns: &["renewed"],
};

static LOST_JOBS: Statement = Statement {
    name: "settle/lost_jobs",
    sql: include_str!("lost_jobs.sql"),
    params: &[param("ids", INT8ARRAYOID), param("tenants", TEXTARRAYOID)],
    columns: &["id", "queue", "tenant"],
};

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
    /// Its group, if it has one.
    group: Option<GroupRef>,
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
                    group: GroupRef::of_row(&row),
                },
            ))
        })
        .collect()
}

/// Takes the job lock of a job a reclaim put back in the queue, before acting on it, so claims
/// skip the job meanwhile instead of waiting for us. Answers whether the call may act on the
/// job; `false` means a claim is taking it, so the lease is no longer the holder's.
///
/// Unless this transaction holds the job's row lock already: the first settle statement, meeting
/// the row while the reclaim changed it, waited for the reclaim and then locked the row's new
/// version when its recheck failed. A claim holding the job lock may then be waiting for that
/// row lock, and waiting for its job lock would deadlock; no claim can change the row before we
/// end, so an ungrouped job is ours to settle without it. A grouped one is not: settling it
/// means waiting for its group's lock afterwards, which the claim holds while it waits for our
/// row (a deadlock the history checker found). See [`claim_or_group_lock`].
fn lock_reclaimed(client: &SpiClient<'_>, id: i64, job: &HeldJob) -> bool {
    let may_act = try_lock_job(id)
        || match (holds_row_lock(client, id), &job.group) {
            (false, _) => {
                lock_job(id);
                true
            }
            (true, None) => true,
            (true, Some(group)) => claim_or_group_lock(id, group),
        };
    if may_act {
        transitions::job_locked(&job.queue);
    }
    may_act
}

/// How long a settle holding a reclaimed grouped job's row waits for the job's lock or its
/// group's before it decides a claim is taking the job: a claim deciding for the group, or one
/// that let the job go, holds them for well under a millisecond.
const CLAIM_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// For a settle that holds reclaimed grouped job `id`'s row while another transaction holds
/// its job lock: whether the settle may act. It may once it gets the job lock (whoever held it
/// let the job go) or the group's lock (no claim is deciding for the group, so the holder is
/// not a claim taking the job, which holds both until it ends: a `jobs_cancel` waiting for our
/// row, which settles nothing if we finish the job first). Neither for [`CLAIM_WAIT`]: a
/// claim holds both and waits for our row to take the job, so the newer claim wins and the
/// call answers `lost` (Rule 4). Polled, never waited for, since waiting is the deadlock.
fn claim_or_group_lock(id: i64, group: &GroupRef) -> bool {
    let until = std::time::Instant::now() + CLAIM_WAIT;
    loop {
        if try_lock_job(id) || locks::try_lock_group(group.lock_key()) {
            return true;
        }
        if std::time::Instant::now() >= until {
            return false;
        }
        // SAFETY: a plain sleep of this backend; interrupts are served right after it.
        unsafe { pg_sys::pg_usleep(1000) };
        pgrx::check_for_interrupts!();
    }
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
            if !lock_reclaimed(client, id, &job) {
                return Err(Outcome::Lost);
            }
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
            let reclaimed: Vec<Held> = reclaimed
                .into_iter()
                .filter(|((id, _), job)| lock_reclaimed(client, *id, job))
                .map(|(pair, _)| pair)
                .collect();
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
