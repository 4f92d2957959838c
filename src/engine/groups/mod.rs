//! Groups: the state of a queue's groups (their running jobs and heads), the jobs that wait for
//! their group, and moving a group on when its jobs finish.
//!
//! A job of a group may run only among the group's first `group_concurrency` unfinished jobs
//! (with 1: only the head, in enqueue order). The claim decides that under the group's lock
//! (`engine::claim`), and a job it finds behind its group's first `group_concurrency` (or its
//! group full) it marks waiting (`group_wait`): the claim indexes leave it out, so no claim
//! walks it again until its group moves on. Without the mark, claims of many jobs from a queue
//! with many busy groups walked every later job of every busy group, claim after claim.
//!
//! Why no job waits forever:
//! * Only a claim marks a job, while it holds the group's lock (taken without waiting), after
//!   reading the group's state under the latest snapshot; it keeps the lock until it ends.
//! * Every path that ends a grouped job's run or finishes one that waits (complete, fail,
//!   release, cancel, reclaim) then takes the locks of the groups it touched, waiting, and
//!   clears the marks of the jobs that are now among their group's first `group_concurrency`
//!   unfinished ones ([`move_on`]), under the latest snapshot. A mark made before it got the
//!   lock is committed and seen; a claim that locks the group after it sees its change, and so
//!   marks nothing it would have had to clear.
//! * A mark is made only while `group_concurrency` jobs of the group are running or ahead of
//!   the marked one; each of them ends through one of those paths.
//! * A change of `group_concurrency` clears every mark of the queue ([`release_all`]).
//! * A job whose mark is cleared becomes claimable, and is reported as such
//!   (`engine::transitions`): the claim floor comes down to it, waiting claims wake.

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::{INT8ARRAYOID, TEXTARRAYOID, TEXTOID};
use pgrx::spi::SpiClient;

use crate::engine::model::Position;
use crate::engine::transitions;
use crate::runtime::locks;
use crate::storage::{param, Row, Rows, Statement};

static STATE: Statement = Statement {
    name: "groups/state",
    sql: include_str!("state.sql"),
    params: &[
        param("queue", TEXTOID),
        param("group keys", TEXTARRAYOID),
        param("tenants", TEXTARRAYOID),
    ],
    columns: &["group_key", "tenant", "running", "head"],
};

static MARK: Statement = Statement {
    name: "groups/mark",
    sql: include_str!("mark.sql"),
    params: &[param("ids", INT8ARRAYOID)],
    columns: &["id"],
};

static MOVE_ON: Statement = Statement {
    name: "groups/move_on",
    sql: include_str!("move_on.sql"),
    params: &[
        param("queues", TEXTARRAYOID),
        param("group keys", TEXTARRAYOID),
        param("tenants", TEXTARRAYOID),
    ],
    columns: &["queue", "priority", "run_at", "id"],
};

static RELEASE_ALL: Statement = Statement {
    name: "groups/release_all",
    sql: include_str!("release_all.sql"),
    params: &[param("queue", TEXTOID)],
    columns: &["queue", "priority", "run_at", "id", "cleared"],
};

/// A group of a queue: its queue, group key and tenant.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupRef {
    /// The queue.
    pub queue: String,
    /// The group key.
    pub key: String,
    /// The tenant of its jobs, if any.
    pub tenant: Option<String>,
}

impl GroupRef {
    /// The group of the job in `row`, if it has one; the row names the job's `queue`,
    /// `group_key` and `tenant`.
    pub fn of_row(row: &Row<'_>) -> Option<GroupRef> {
        Some(GroupRef {
            key: row.get("group_key")?,
            queue: row.expect("queue"),
            tenant: row.get("tenant"),
        })
    }

    /// The key of the group's lock.
    pub fn lock_key(&self) -> u64 {
        locks::group_key_hash(&self.queue, self.tenant.as_deref(), &self.key)
    }
}

/// What a claim knows of one group of its queue.
pub struct GroupState {
    /// Its jobs running now.
    pub running: i64,
    /// Its first unfinished job, if any.
    pub head: Option<i64>,
}

/// The running jobs and head of each of the groups (`keys` and `tenants`, pairwise) of `queue`,
/// under the latest snapshot (the caller holds the groups' locks); one row per group.
pub fn read_states(
    client: &SpiClient<'_>,
    queue: &str,
    keys: Vec<String>,
    tenants: Vec<Option<String>>,
) -> Vec<((String, Option<String>), GroupState)> {
    let args: [DatumWithOid; 3] = [queue.into(), keys.into(), tenants.into()];
    STATE
        .run_latest(client, &args)
        .iter()
        .map(|row| {
            (
                (row.expect("group_key"), row.get("tenant")),
                GroupState {
                    running: row.get("running").unwrap_or(0),
                    head: row.get("head"),
                },
            )
        })
        .collect()
}

/// Marks the queued jobs `ids` as waiting for their groups; the caller holds their groups'
/// locks and found each one behind its group's first `group_concurrency` unfinished jobs.
pub fn mark_waiting(client: &SpiClient<'_>, ids: Vec<i64>) {
    if ids.is_empty() {
        return;
    }
    MARK.run_latest(client, &[ids.into()]);
}

/// Jobs of `groups` finished or went back to the queue in this transaction: takes the groups'
/// locks (waiting for a claim deciding for one of them to end) and makes claimable again the
/// waiting jobs that are now among their group's first `group_concurrency` unfinished ones.
pub fn move_on(client: &SpiClient<'_>, mut groups: Vec<GroupRef>) {
    if groups.is_empty() {
        return;
    }
    // One lock order for every caller, against deadlocks between settles of several groups.
    groups.sort_unstable_by_key(|group| (group.lock_key(), group.clone()));
    groups.dedup();
    for group in &groups {
        locks::lock_group(group.lock_key());
        // A waiting claim should look: the group has room once this transaction commits.
        transitions::group_freed(&group.queue);
    }
    let queues: Vec<String> = groups.iter().map(|g| g.queue.clone()).collect();
    let keys: Vec<String> = groups.iter().map(|g| g.key.clone()).collect();
    let tenants: Vec<Option<String>> = groups.iter().map(|g| g.tenant.clone()).collect();
    let args: [DatumWithOid; 3] = [queues.into(), keys.into(), tenants.into()];
    let cleared: Rows = MOVE_ON.run_latest(client, &args);
    transitions::queued_rows(&cleared);
}

/// `queue`'s `group_concurrency` changed: clears the marks of all its waiting jobs, so claims
/// decide again under the new setting.
pub fn release_all(client: &SpiClient<'_>, queue: &str) {
    let rows = RELEASE_ALL.run(client, &[queue.into()]);
    if let Some(row) = rows.first() {
        let cleared: i64 = row.expect("cleared");
        transitions::jobs_queued(
            queue,
            usize::try_from(cleared).unwrap_or(usize::MAX),
            Position::from_row(&row),
        );
    }
}
