//! Groups: the state of a queue's groups (their running jobs and heads), the jobs that wait for
//! their group, and moving a group on when its jobs finish.
//!
//! A group runs at most `group_concurrency` jobs at once, and with 1 only its head (its first
//! unfinished job, so in enqueue order). The claim decides under the group's lock
//! (`engine::claim`), and a job it finds behind an unfinished job of its group or while a job
//! of it runs (concurrency 1), or in a full group (more), it marks waiting (`group_wait`): the
//! claim indexes leave it out, so no claim walks it again until its group moves on. Without
//! the mark, claims of many jobs from a queue with many busy groups walked every later job of
//! every busy group, claim after claim. An enqueue marks the jobs of a batch that wait for the
//! batch's own jobs of their group.
//!
//! Why no job waits forever:
//! * A claim marks a job only while it holds the group's lock (taken without waiting), after
//!   reading the group's state under the latest snapshot; it keeps the lock until it ends.
//! * Every path that ends a grouped job's run or finishes one that waits (complete, fail,
//!   release, cancel, reclaim) then takes the locks of the groups it touched, waiting, and
//!   clears the marks of the jobs that may run now ([`move_on`]: the head of a group of
//!   concurrency 1 with nothing running, the first waiting jobs of a larger group, one per free
//!   slot), under the latest snapshot. A mark made before it got the lock is committed and seen;
//!   a claim that locks the group after it sees its change, and so marks nothing it would have
//!   had to clear.
//! * At concurrency 1, under READ COMMITTED, with shared memory, it hands such a head to the
//!   next claims instead (`runtime::freed_heads`, which says why none is lost): the mark stays
//!   until the claim that takes the job clears it in its take, which saves the row update that
//!   clearing it cost nearly every grouped job. The claim checks the head under the group's
//!   lock first (`engine::claim`); a head not due yet, or with a name too long for shared
//!   memory, has its mark cleared as before.
//! * A mark is made only while an earlier job of the group is unfinished (concurrency 1) or
//!   `group_concurrency` of its jobs run; each of them ends or runs through one of those paths,
//!   and the earliest waiting jobs go first.
//! * [`move_on`] skips a waiting job whose row another transaction holds rather than wait for
//!   it: that transaction may be waiting for the group's lock (a late settle of a reclaimed
//!   job, or a cancel, updates the job and then moves its group on), and waiting for each other
//!   was a deadlock (found by the history checker at concurrency 2). Every transaction that can
//!   hold a waiting job's row moves the group on after it (complete, fail, release and cancel
//!   as above; a unique enqueue's `replace`); claims never lock waiting jobs (the claim
//!   indexes leave them out) and marks never touch them. Likewise a claim's mark passes over
//!   a job whose row another transaction holds (that transaction may wait for the group's lock
//!   the claim holds); an unmarked job is merely walked and decided again by the next claim.
//! * A late settle of a reclaimed job of a group that holds the job's row while a claim holds
//!   the job's lock settles the job ("done wins": no claim took it since) and does not wait
//!   for the group's lock when its holder waits for the settle (the claim, taking the job): it
//!   clears the marks it sees without the lock ([`move_on`]), and the claim, which then misses
//!   the job, moves the group on under its lock, seeing the marks it made itself
//!   (`engine::claim`).
//! * A reclaimed job of a group is not made running again by its old holder's heartbeat (which
//!   answers `lost`): the reclaim freed its slot, which a claim may have filled since.
//! * An enqueue marks a job only behind jobs of its own batch ([`waits_in_batch`]), which
//!   nobody else can settle before it commits.
//! * A change of `group_concurrency` clears every mark of the queue ([`release_all`]); the
//!   next claim of a queue whose groups run more than one job clears the marks of the freed
//!   heads left from before, as a claim under REPEATABLE READ does.
//! * After shared memory was made (a start, a crash restart), the background worker's first
//!   tick in a database, or a claim there before it, clears the marks of every waiting head
//!   with nothing before it ([`sweep_stranded`], one transaction at a time) before any settle
//!   there hands a head over.
//! * A job whose mark is cleared becomes claimable, and is reported as such
//!   (`engine::transitions`): the claim floor comes down to it, waiting claims wake.

use std::collections::{HashMap, HashSet};

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::{self, INT4OID, INT8ARRAYOID, INT8OID, TEXTARRAYOID, TEXTOID};
use pgrx::spi::SpiClient;

use crate::engine::model::Position;
use crate::engine::transitions;
use crate::pg::clock::server_now;
use crate::runtime::freed_heads::{self, FreedHead};
use crate::runtime::locks;
use crate::runtime::queued_changes::{self, Stamp};
use crate::storage::direct::group_reader::{self, GroupHead, GroupName};
use crate::storage::direct::key_reader;
use crate::storage::{statement, Row, Rows, Statement};

static BLOCKED: Statement = statement!(
    groups/blocked(queue: TEXTOID, ids: INT8ARRAYOID, group_keys: TEXTARRAYOID,
        tenants: TEXTARRAYOID) -> (id, blocked)
);

static RUNNING: Statement = statement!(
    groups/running(queue: TEXTOID, group_keys: TEXTARRAYOID, tenants: TEXTARRAYOID)
        -> (group_key, tenant, running)
);

static MARK: Statement = statement!(groups/mark(ids: INT8ARRAYOID) -> (id));

static MOVE_ON: Statement = statement!(
    groups/move_on(queues: TEXTARRAYOID, group_keys: TEXTARRAYOID, tenants: TEXTARRAYOID)
        -> (queue, priority, run_at, id)
);

static HOLDER_WAITS: Statement = statement!(
    groups/holder_waits(classid: INT8OID, objid: INT8OID, objsubid: INT4OID) -> (waits)
);

static UNMARK: Statement = statement!(
    groups/unmark(ids: INT8ARRAYOID) -> (queue, priority, run_at, id)
);

static SWEEP: Statement = statement!(groups/sweep() -> (queue, priority, run_at, id, passed_over));

static RELEASE_ALL: Statement = statement!(
    groups/release_all(queue: TEXTOID) -> (queue, priority, run_at, id, cleared)
);

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

/// Which of the jobs `ids` of `queue` (in groups of concurrency 1; `keys` and `tenants` name
/// each one's group, pairwise) must wait: a job of its group runs, or an unfinished one comes
/// before it. Under the latest snapshot (the caller holds the groups' locks).
pub fn blocked_jobs(
    client: &SpiClient<'_>,
    queue: &str,
    ids: Vec<i64>,
    keys: Vec<String>,
    tenants: Vec<Option<String>>,
) -> HashSet<i64> {
    let names: Vec<GroupName<'_>> = ids
        .iter()
        .zip(keys.iter().zip(&tenants))
        .map(|(id, (key, tenant))| GroupName {
            queue,
            key,
            tenant: tenant.as_deref(),
            before: Some(*id),
        })
        .collect();
    // A job waits when its group has an unfinished job placed before it (running ones first),
    // as the statement's probe below its place asks.
    // SAFETY: inside the claim's transaction.
    if let Some(heads) = unsafe { group_reader::group_heads(&names) } {
        return ids
            .iter()
            .zip(heads)
            .filter(|(_, head)| head.is_some())
            .map(|(id, _)| *id)
            .collect();
    }
    let args: [DatumWithOid; 4] = [queue.into(), ids.into(), keys.into(), tenants.into()];
    BLOCKED
        .run_latest(client, &args)
        .iter()
        .filter(|row| row.get("blocked").unwrap_or(true))
        .map(|row| row.expect("id"))
        .collect()
}

/// How many jobs of each of the groups (`keys` and `tenants`, pairwise) of `queue` run now,
/// under the latest snapshot (the caller holds the groups' locks); one entry per group.
pub fn running_jobs(
    client: &SpiClient<'_>,
    queue: &str,
    keys: Vec<String>,
    tenants: Vec<Option<String>>,
) -> Vec<((String, Option<String>), i64)> {
    let args: [DatumWithOid; 3] = [queue.into(), keys.into(), tenants.into()];
    RUNNING
        .run_latest(client, &args)
        .iter()
        .map(|row| {
            (
                (row.expect("group_key"), row.get("tenant")),
                row.get("running").unwrap_or(0),
            )
        })
        .collect()
}

/// Marks the queued jobs `ids` as waiting for their groups; the caller holds their groups'
/// locks and found each one behind its group's head or in a full group, or inserted them
/// behind jobs of their group in the same batch ([`waits_in_batch`]).
pub fn mark_waiting(client: &SpiClient<'_>, ids: Vec<i64>) {
    if ids.is_empty() {
        return;
    }
    MARK.run_latest(client, &[ids.into()]);
}

/// Jobs of `groups` finished or went back to the queue in this transaction: takes the groups'
/// locks (waiting for a claim deciding for one of them to end) and makes claimable again the
/// waiting jobs that may run now.
pub fn move_on(client: &SpiClient<'_>, groups: Vec<GroupRef>) {
    if groups.is_empty() {
        return;
    }
    // One lock order for every caller, against deadlocks between settles of several groups.
    // Each key is computed once: a sort that hashed and cloned both groups on every
    // comparison made a settle of many groups spend more on sorting than on settling.
    let mut keyed: Vec<(u64, GroupRef)> = groups.into_iter().map(|g| (g.lock_key(), g)).collect();
    keyed.sort_unstable();
    keyed.dedup();
    let mut unlocked: Vec<GroupRef> = Vec::new();
    let mut groups: Vec<GroupRef> = Vec::with_capacity(keyed.len());
    for (lock_key, group) in keyed {
        // A waiting claim should look: the group has room once this transaction commits.
        transitions::group_freed(&group.queue);
        if lock_group_unless_its_holder_waits(client, lock_key) {
            groups.push(group);
        } else {
            unlocked.push(group);
        }
    }
    if !unlocked.is_empty() {
        move_on_unlocked(client, unlocked);
    }
    if groups.is_empty() {
        return;
    }
    // Read before the groups are, for the claims that take the heads (`runtime::queued_changes`).
    let mut stamps: Vec<(&str, Stamp)> = Vec::with_capacity(1);
    for group in &groups {
        if !stamps.iter().any(|(queue, _)| *queue == group.queue) {
            stamps.push((&group.queue, queued_changes::stamp(&group.queue)));
        }
    }
    let stamp_of = |queue: &str| {
        stamps
            .iter()
            .find(|(stamped, _)| *stamped == queue)
            .map_or_else(Stamp::default, |(_, stamp)| *stamp)
    };
    let cleared: Rows = match waiting_heads(&groups) {
        Some(heads) => {
            // The heads go to the next claims in shared memory where they can (a claim takes
            // one and clears its mark in the same update); the others' marks are cleared now.
            // A head not due yet is left to the claim indexes, whose floor and wake-ups know
            // about delayed jobs.
            let now = server_now();
            let (due, later): (Vec<_>, Vec<_>) =
                heads.into_iter().partition(|(_, head)| head.run_at <= now);
            let freed: Vec<FreedHead> = due
                .iter()
                .map(|(group, head)| freed_head(group, head, stamp_of(&group.queue)))
                .collect();
            let offered = freed_heads::offer_all(&freed);
            let unoffered: Vec<i64> = later
                .iter()
                .map(|(_, head)| head.id)
                .chain(
                    freed
                        .iter()
                        .zip(&offered)
                        .filter(|(_, offered)| !**offered)
                        .map(|(head, _)| head.position.id),
                )
                .collect();
            if unoffered.is_empty() {
                return;
            }
            UNMARK.run_latest(client, &[unoffered.into()])
        }
        None => run_move_on(client, groups),
    };
    transitions::queued_rows(&cleared);
}

/// Takes the group's lock `key`, waiting for its holder, unless this transaction holds the row
/// of a queued job without the job's lock (a late settle of a reclaimed job) and the holder
/// waits for this transaction (directly or behind others): a claim that picked that job and
/// holds its group's lock waits for the row, and waiting for each other is a deadlock. Answers
/// whether it took the lock.
/// Polled then, never waited for: the holder may start waiting for us after we looked.
fn lock_group_unless_its_holder_waits(client: &SpiClient<'_>, key: u64) -> bool {
    if !locks::claims_may_wait_for_this_transaction() {
        locks::lock_group(key);
        return true;
    }
    let (classid, objid, objsubid) = locks::group_lock_fields(key);
    let mut pause = 1;
    loop {
        if locks::try_lock_group(key) {
            return true;
        }
        let args: [DatumWithOid; 3] = [classid.into(), objid.into(), objsubid.into()];
        if HOLDER_WAITS.first::<bool>(client, &args, "waits") == Some(true) {
            return false;
        }
        // SAFETY: a plain sleep of this backend; interrupts are served right after it.
        unsafe { pg_sys::pg_usleep(pause * 1000) };
        pgrx::check_for_interrupts!();
        pause = (pause * 2).min(16);
    }
}

/// Moves on `groups` whose locks this transaction could not take: their holders are claims
/// taking jobs whose rows this transaction holds ([`lock_group_unless_its_holder_waits`]). It
/// clears the marks the statement finds to clear under the latest snapshot, without the lock,
/// which is safe because a claim decides every job it takes under its group's lock and marks
/// again what must still wait. The marks it cannot see are those the waiting claims made in
/// their own transactions (uncommitted, their rows held, so passed over): each of those claims
/// misses the job this transaction finished and moves the group on itself, in the transaction
/// that made the marks (`engine::claim`). No other claim decides for the group before those
/// claims end, by then after this transaction, and so sees what it changed.
fn move_on_unlocked(client: &SpiClient<'_>, groups: Vec<GroupRef>) {
    let cleared = run_move_on(client, groups);
    transitions::queued_rows(&cleared);
}

/// Runs the statement that moves `groups` on, under the latest snapshot; its rows are the jobs
/// it made claimable.
fn run_move_on(client: &SpiClient<'_>, groups: Vec<GroupRef>) -> Rows {
    let mut queues: Vec<String> = Vec::with_capacity(groups.len());
    let mut keys: Vec<String> = Vec::with_capacity(groups.len());
    let mut tenants: Vec<Option<String>> = Vec::with_capacity(groups.len());
    for group in groups {
        queues.push(group.queue);
        keys.push(group.key);
        tenants.push(group.tenant);
    }
    let args: [DatumWithOid; 3] = [queues.into(), keys.into(), tenants.into()];
    MOVE_ON.run_latest(client, &args)
}

/// The waiting `head` of `group` (locked, of concurrency 1, nothing of it running) as a freed
/// head for the next claims of its queue (`runtime::freed_heads`). `stamp`: read before the
/// group was.
fn freed_head(group: &GroupRef, head: &GroupHead, stamp: Stamp) -> FreedHead {
    FreedHead {
        position: Position {
            priority: head.priority,
            run_at: head.run_at,
            id: head.id,
        },
        queue: group.queue.clone(),
        group_key: group.key.clone(),
        tenant: group.tenant.clone(),
        kind: head.kind.clone(),
        stamp,
    }
}

/// Clears the marks of the waiting jobs `ids`, which become claimable through the claim
/// indexes. Always safe: a claim decides every job it takes under its group's lock, and marks
/// again what must still wait.
pub fn unmark(client: &SpiClient<'_>, ids: Vec<i64>) {
    if ids.is_empty() {
        return;
    }
    let cleared = UNMARK.run_latest(client, &[ids.into()]);
    transitions::queued_rows(&cleared);
}

/// `queue` was dropped with its jobs in this transaction: its freed heads go when it commits
/// (a rollback gives them back), rather than take room until a queue of that name is claimed
/// from again or the server restarts.
pub fn forget_freed_heads(queue: &str) {
    while !freed_heads::take_all(queue).is_empty() {}
}

/// Clears the marks of every waiting job of this database with nothing of its group before it
/// (nothing running, no earlier unfinished job): what freed heads lost with shared memory
/// (`runtime::freed_heads`) would have handed to claims. Once this commits, settles may offer
/// freed heads here, unless it passed over heads whose rows other transactions held: then the
/// next claim or tick sweeps again. Answers how many it cleared, or `None` when another
/// transaction is sweeping the database (after a restart, every claim that starts before the
/// first sweep commits would otherwise read all the waiting jobs too).
pub fn sweep_stranded(client: &SpiClient<'_>) -> Option<usize> {
    if !locks::try_lock_sweep() {
        return None;
    }
    let rows = SWEEP.run_latest(client, &[]);
    let mut cleared = 0;
    let mut passed_over = 0;
    for row in rows.iter() {
        passed_over = row.expect::<i64>("passed_over");
        // The row that only counts (nothing cleared) names no job.
        if row.get::<i64>("id").is_some() {
            transitions::queued_row(&row);
            cleared += 1;
        }
    }
    if passed_over == 0 {
        freed_heads::swept_here();
    }
    Some(cleared)
}

/// For [`move_on`], when every one of `groups` (locked) is in a queue of `group_concurrency` 1
/// and the transaction reads committed data (as the statement's latest snapshot does): the
/// waiting heads of the groups that nothing of runs, which may run now, read without the
/// executor (`storage::direct::group_reader`), each with its group. `None`: the statement decides.
fn waiting_heads(groups: &[GroupRef]) -> Option<Vec<(&GroupRef, GroupHead)>> {
    // SAFETY: reads a backend global.
    let read_committed = unsafe { pg_sys::XactIsoLevel } < pg_sys::XACT_REPEATABLE_READ as i32;
    if !read_committed {
        return None;
    }
    let mut concurrency_one: HashMap<&str, bool> = HashMap::new();
    for group in groups {
        if !*concurrency_one
            .entry(&group.queue)
            .or_insert_with(|| group_concurrency(&group.queue) == Some(1))
        {
            return None;
        }
    }
    let names: Vec<GroupName<'_>> = groups
        .iter()
        .map(|group| GroupName {
            queue: &group.queue,
            key: &group.key,
            tenant: group.tenant.as_deref(),
            before: None,
        })
        .collect();
    // SAFETY: inside the settle's transaction.
    let heads = unsafe { group_reader::group_heads(&names) }?;
    Some(
        groups
            .iter()
            .zip(heads)
            .filter_map(|(group, head)| Some((group, head?)))
            .filter(|(_, head)| head.waiting)
            .collect(),
    )
}

/// `queue`'s `group_concurrency` as a statement of this transaction sees it now, read without
/// the executor; `None` when the queue is not found or the direct read does not apply.
fn group_concurrency(queue: &str) -> Option<i32> {
    // SAFETY: inside a transaction; the value is copied out while the row is held.
    unsafe {
        key_reader::read(c"queue", &[c"name"], &[queue], |row| {
            let (type_oid, value) = row?.column(c"group_concurrency")?;
            (type_oid == pg_sys::INT4OID).then_some(())?;
            value.map(|datum| datum.value() as i32)
        })
    }
    .flatten()
}

/// Which jobs of a batch being enqueued (`group_keys`, one per job) wait for their groups from
/// the start: those with `group_concurrency` (`concurrency()`, asked only when some job has a
/// group) jobs of their group ahead of them in the same batch. `None` when none waits.
///
/// Why this is safe without the group's lock: a job marked here waits only for jobs of its
/// own transaction, which no other transaction can see, claim or settle before it commits;
/// when they end, their settles see the mark (see the module's rules). Jobs of the group
/// enqueued before are not looked at (a claim marks what waits for them).
pub fn waits_in_batch(
    group_keys: &[Option<&str>],
    concurrency: impl FnOnce() -> i32,
) -> Option<Vec<bool>> {
    // Fewer than two grouped jobs: none waits for another.
    group_keys.iter().flatten().nth(1)?;
    let concurrency = usize::try_from(concurrency()).unwrap_or(1).max(1);
    let mut ahead: HashMap<&str, usize> = HashMap::new();
    let waits: Vec<bool> = group_keys
        .iter()
        .map(|key| {
            key.is_some_and(|key| {
                let count = ahead.entry(key).or_insert(0);
                *count += 1;
                *count > concurrency
            })
        })
        .collect();
    waits.contains(&true).then_some(waits)
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

#[cfg(test)]
mod tests {
    use super::waits_in_batch;

    #[test]
    fn a_batch_marks_each_job_with_concurrency_jobs_of_its_group_ahead_of_it() {
        let keys = [Some("g"), Some("g"), None, Some("h"), Some("g"), Some("h")];
        assert_eq!(
            waits_in_batch(&keys, || 1),
            Some(vec![false, true, false, false, true, true])
        );
        assert_eq!(
            waits_in_batch(&keys, || 2),
            Some(vec![false, false, false, false, true, false])
        );
        assert_eq!(waits_in_batch(&keys, || 3), None, "no group has 4 jobs");
    }

    #[test]
    fn a_batch_without_two_grouped_jobs_asks_nothing_and_marks_nothing() {
        let asked = std::cell::Cell::new(false);
        let ask = || {
            asked.set(true);
            1
        };
        assert_eq!(waits_in_batch(&[None, Some("g"), None], ask), None);
        assert!(!asked.get(), "the queue's setting is read only when needed");
        // A setting below 1 counts as 1 (the table's check allows 1 to 10,000).
        assert_eq!(
            waits_in_batch(&[Some("g"), Some("g")], || 0),
            Some(vec![false, true])
        );
    }
}
