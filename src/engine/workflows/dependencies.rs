//! Dependencies: a job enqueued `after` other jobs (its parents) waits until every one of them
//! has succeeded, then is queued in the transaction that settled the last one; a parent that
//! ends failed or cancelled cancels it (and its own dependents, transitively) with the error
//! `dependency <id> <state>`.
//!
//! # What is stored
//! One row of `jobs.job_dependency` per (waiting child, parent not yet succeeded), all made at
//! once (by the enqueue, or by `jobs_retry` of the child) and each carrying how many were made
//! (`parents`). A parent's success deletes its rows; a child's cancellation deletes the child's.
//! A parent that had unfinished children enqueued after it has `dependents` set, so the settle
//! of any other job skips the look-up. The child keeps its parents in `after`, for `jobs_retry`
//! and for readers.
//!
//! # Why no cycle can be built
//! Parents must exist, visibly to the caller, when the child is enqueued, and the child's id is
//! drawn from the identity sequence after that: every parent's id is lower than its child's, so
//! following dependencies always goes down in id and never comes back. `jobs_retry` of a child
//! waits again for the child's own parents (`after`), which are lower still.
//!
//! # The last parent, without a count
//! A pending count on the child would make every parent's settle update the child's row, so
//! thousands of parents settled by many workers would queue behind each other on it. Rows per
//! (child, parent) let each settle delete its own; the hard part is telling who deleted the last
//! one. Two settles that delete the last two rows at once each still see the other's row (its
//! delete is not committed), so neither would queue the child; locking the child in every
//! settle serialises them all again; waiting for the other's transaction deadlocks when both
//! wait; and counting the remaining rows on every settle is O(n²) for n parents.
//!
//! A settle of parent `p` of child `c` (of `n` rows) does this after deleting its own rows:
//! 1. It deleted all `n`: it is the last, and queues `c`.
//! 2. Else it looks for a *witness*: a row of `c` that no transaction is deleting (`FOR KEY SHARE
//!    SKIP LOCKED`, the highest parent first), and locks it until it commits. Then it is not
//!    the last: that row's parent has not settled, and its settle's delete waits until this
//!    transaction has committed, so the later settle sees this one's delete.
//! 3. No witness (every row left is being deleted by a transaction in flight, or none is left):
//!    it locks `c`'s row (`FOR NO KEY UPDATE`, until it commits) and, under the latest
//!    snapshot, queues `c` if `c` has no row left.
//!
//! Why the child is queued (at least once): take the settle `T` whose delete commits last. It
//! found no witness (a witness' delete would commit after it), so it took step 3. Every other
//! delete committed before `T` looked: one that took step 3 held `c`'s row until it committed,
//! and `T` locked the row after it (else it would commit after `T`); one that found a witness
//! `w` committed before `w`'s delete, which either is `T`'s own (so before `T` looked) or was
//! made by another settle that committed before `T`: following witnesses ends at `T` or at a
//! step-3 settle, both covered. So `T` sees no row left and queues `c`. And exactly once: only
//! a statement that changes `c` from `waiting` to `queued` under `c`'s row lock queues it.
//!
//! Cost: a settle deletes its rows (through the parent index) and reads one or a few rows of
//! its child (the highest parent's, which is also the last to be claimed when jobs are claimed
//! in id order), so a fan-in of n parents costs O(n) in all; only the settles at the very end
//! take step 3. The witness's own settle waits for the commits of the few settles that hold it,
//! not for every settle of the child.
//!
//! Lock order, against deadlocks: a settle deletes all its rows before it locks anything else
//! for dependencies, takes witnesses without waiting, locks children in id order, and runs
//! before its groups are moved on (whose locks other settles wait for). An enqueue takes its
//! parents' locks in id order: exclusively those it flags, then shared for all, so two enqueues
//! after the same parent never both hold it shared and wait to flag it. A transaction that
//! settles several parents of one child in separate statements can still meet another doing
//! the same in a deadlock, which PostgreSQL detects (one of them rolls back and may retry).

use std::collections::BTreeMap;

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::{INT8ARRAYOID, INT8OID, TEXTARRAYOID, TIMESTAMPTZOID};
use pgrx::spi::SpiClient;

use crate::engine::errors::UNKNOWN_JOB;
use crate::engine::model::JobState;
use crate::engine::tenants::TenantScope;
use crate::engine::transitions;
use crate::pg::clock::server_now;
use crate::pg::errors::{quote, raise, BAD_ARGUMENT};
use crate::storage::{statement, timestamptz_arg, Statement};

static FLAG_PARENTS: Statement = statement!(workflows/flag_parents(ids: INT8ARRAYOID) -> ());

static LOCK_PARENTS: Statement = statement!(
    workflows/lock_parents(ids: INT8ARRAYOID, tenants: TEXTARRAYOID) -> (id, state, tenant)
);

static WAIT_FOR: Statement = statement!(
    workflows/wait_for(children: INT8ARRAYOID, parents: INT8ARRAYOID, after: INT8ARRAYOID) -> ()
);

static CANCEL_AT_ONCE: Statement = statement!(
    workflows/cancel_at_once(children: INT8ARRAYOID, error: pgrx::pg_sys::TEXTOID,
        now: TIMESTAMPTZOID, after: INT8ARRAYOID) -> (id)
);

static QUEUE_AT_ONCE: Statement = statement!(
    workflows/queue_at_once(children: INT8ARRAYOID, after: INT8ARRAYOID)
        -> (queue, priority, run_at, id)
);

static UNLINK_PARENTS: Statement = statement!(
    workflows/unlink_parents(parents: INT8ARRAYOID) -> (child, parents)
);

static WITNESS: Statement = statement!(workflows/witness(child: INT8OID) -> (parent));

static LOCK_CHILD: Statement = statement!(workflows/lock_child(child: INT8OID) -> (state));

static QUEUE_CHILD: Statement = statement!(
    workflows/queue_child(child: INT8OID) -> (queue, priority, run_at, id)
);

static CANCEL_CHILDREN: Statement = statement!(
    workflows/cancel_children(parents: INT8ARRAYOID, states: TEXTARRAYOID, now: TIMESTAMPTZOID)
        -> (id, queue, tenant, dependents)
);

static UNLINK_CHILD: Statement = statement!(workflows/unlink_child(child: INT8OID) -> ());

/// Most parents one job may be enqueued after.
pub const MAX_PARENTS: usize = 100_000;

/// What the parents of a job being enqueued (or retried) were found in, their rows locked.
pub struct Parents {
    /// Every parent found, in id order, without repeats (the child's `after`).
    pub all: Vec<i64>,
    /// Those that have not succeeded (unfinished, or ended failed or cancelled).
    pub pending: Vec<i64>,
    /// The first that ended failed or cancelled, with its state.
    pub ended: Option<(i64, JobState)>,
}

/// Locks the parents `after` (ids as the caller gave them) of jobs being enqueued for
/// `tenant`, and reads their states. Raises P0002 naming the first element that is no job the
/// caller may see (when `missing_ok`, for a retry whose parents retention purged, it leaves such
/// parents out instead), and 22023 for a parent of another tenant.
///
/// The parents that have not succeeded are flagged (`dependents`) and locked exclusively first,
/// in id order, then every parent is locked shared, in id order: a settle of a parent waits for
/// this transaction, and then finds the dependents it commits; one that settled first is seen
/// settled here.
pub fn lock_parents(
    client: &SpiClient<'_>,
    after: &[i64],
    tenant: Option<&str>,
    scope: &TenantScope,
    missing_ok: bool,
) -> Parents {
    let mut ids: Vec<i64> = after.to_vec();
    ids.sort_unstable();
    ids.dedup();
    FLAG_PARENTS.run(client, &[ids.clone().into()]);
    let rows = LOCK_PARENTS.run(client, &[ids.into(), scope.param()]);
    let mut found: BTreeMap<i64, (JobState, Option<String>)> = BTreeMap::new();
    for row in rows.iter() {
        let state = JobState::parse(&row.expect::<String>("state")).expect("a job state");
        found.insert(row.expect("id"), (state, row.get("tenant")));
    }
    for (index, id) in after.iter().enumerate() {
        match found.get(id) {
            None if missing_ok => {}
            None => raise(
                UNKNOWN_JOB,
                format!(
                    "after[{}] names job {id}, which does not exist or is not visible to this session",
                    index + 1
                ),
            ),
            Some((_, parent_tenant)) if parent_tenant.as_deref() != tenant => raise(
                BAD_ARGUMENT,
                format!(
                    "after[{}] names job {id} of {}, and a job of {} cannot wait for it",
                    index + 1,
                    tenant_phrase(parent_tenant.as_deref()),
                    tenant_phrase(tenant)
                ),
            ),
            Some(_) => {}
        }
    }
    let pending: Vec<i64> = found
        .iter()
        .filter(|(_, (state, _))| *state != JobState::Succeeded)
        .map(|(id, _)| *id)
        .collect();
    let ended = found
        .iter()
        .find(|(_, (state, _))| matches!(state, JobState::Failed | JobState::Cancelled))
        .map(|(id, (state, _))| (*id, *state));
    Parents {
        all: found.into_keys().collect(),
        pending,
        ended,
    }
}

/// How an error names a tenant, or no tenant.
fn tenant_phrase(tenant: Option<&str>) -> String {
    match tenant {
        Some(tenant) => format!("tenant {}", quote(tenant)),
        None => "no tenant".to_owned(),
    }
}

/// The message a job cancelled for its dependency carries.
fn dependency_error(parent: i64, state: JobState) -> String {
    format!("dependency {parent} {}", state.as_str())
}

/// Jobs `children`, just inserted as queued by this transaction (and not reported queued), wait
/// for `parents` (locked by [`lock_parents`]): cancelled at once when a parent ended failed or
/// cancelled; else waiting for the parents that have not succeeded; else queued (and reported
/// so). Returns how they were left.
pub fn enqueued_after(client: &SpiClient<'_>, children: Vec<i64>, parents: &Parents) -> JobState {
    if children.is_empty() {
        return JobState::Queued;
    }
    if let Some((parent, state)) = parents.ended {
        let args: [DatumWithOid; 4] = [
            children.into(),
            dependency_error(parent, state).as_str().into(),
            timestamptz_arg(server_now()),
            parents.all.clone().into(),
        ];
        CANCEL_AT_ONCE.run(client, &args);
        transitions::jobs_finished();
        return JobState::Cancelled;
    }
    wait_or_queue(client, children, parents)
}

/// Jobs `children` (queued by this transaction, not reported) wait for the pending parents, or,
/// when none is pending, are reported queued.
fn wait_or_queue(client: &SpiClient<'_>, children: Vec<i64>, parents: &Parents) -> JobState {
    if parents.pending.is_empty() {
        let rows = QUEUE_AT_ONCE.run(client, &[children.into(), parents.all.clone().into()]);
        transitions::queued_rows(&rows);
        return JobState::Queued;
    }
    let args: [DatumWithOid; 3] = [
        children.into(),
        parents.pending.clone().into(),
        parents.all.clone().into(),
    ];
    WAIT_FOR.run(client, &args);
    JobState::Waiting
}

/// `jobs_retry` of job `child`, just made queued by this transaction (not reported), whose
/// parents are `parents`: it waits again for those that have not succeeded (a failed or
/// cancelled one too, which may be retried in turn), or is reported queued.
pub fn retried_after(client: &SpiClient<'_>, child: i64, parents: &Parents) -> JobState {
    wait_or_queue(client, vec![child], parents)
}

/// Jobs `parents` (whose `dependents` flag is set) succeeded in this transaction: each child
/// whose last pending parent this was is queued now (see the module's notes).
pub fn parents_succeeded(client: &SpiClient<'_>, parents: Vec<i64>) {
    if parents.is_empty() {
        return;
    }
    // Per child: rows deleted here, and how many it had.
    let mut children: BTreeMap<i64, (i32, i32)> = BTreeMap::new();
    for row in UNLINK_PARENTS.run(client, &[parents.into()]).iter() {
        let entry = children
            .entry(row.expect("child"))
            .or_insert((0, row.expect("parents")));
        entry.0 += 1;
    }
    for (child, (deleted, of)) in children {
        if deleted < of {
            // Under the latest snapshot, also in REPEATABLE READ: a row another settle deleted
            // and committed since is simply gone, not a serialization failure.
            if WITNESS
                .run_latest(client, &[child.into()])
                .first()
                .is_some()
            {
                continue;
            }
            LOCK_CHILD.run_latest(client, &[child.into()]);
        }
        // With every row deleted here the child is ours alone; else its row lock and the
        // latest snapshot decide (the statement asks whether any row is left).
        let rows = QUEUE_CHILD.run_latest(client, &[child.into()]);
        transitions::queued_rows(&rows);
    }
}

/// Jobs `ended` (each with the state it ended in: failed or cancelled, and its `dependents`
/// flag set) ended in this transaction: their waiting dependents are cancelled, transitively,
/// each with the error `dependency <parent> <state>`.
pub fn parents_ended(client: &SpiClient<'_>, mut ended: Vec<(i64, JobState)>) {
    // One generation of dependents per statement: each statement reads the dependencies under
    // a snapshot taken after the previous one locked (and so waited for) the jobs it cancelled,
    // so a dependent enqueued after one of them by a transaction that held it is seen.
    while !ended.is_empty() {
        let (ids, states): (Vec<i64>, Vec<String>) = ended
            .iter()
            .map(|(id, state)| (*id, state.as_str().to_owned()))
            .unzip();
        let args: [DatumWithOid; 3] = [ids.into(), states.into(), timestamptz_arg(server_now())];
        let rows = CANCEL_CHILDREN.run_latest(client, &args);
        if !rows.is_empty() {
            transitions::jobs_finished();
        }
        ended = rows
            .iter()
            .filter(|row| row.get::<bool>("dependents").unwrap_or(false))
            .map(|row| (row.expect::<i64>("id"), JobState::Cancelled))
            .collect();
    }
}

/// Waiting job `child` was cancelled by this transaction: it waits for nothing any more (its
/// dependency rows and its await go).
pub fn child_cancelled(client: &SpiClient<'_>, child: i64) {
    UNLINK_CHILD.run(client, &[child.into()]);
}
