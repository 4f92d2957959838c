//! The one door for every transition that makes a job claimable, for the other facts the claim
//! floor and the wake-ups depend on, and for the settles the totals count.
//!
//! The claim floor is sound only if every commit that makes a job `queued` lowers it to that
//! job's position (see `runtime::floor`), and a waiting claim hears of a job only if its commit
//! signals the queue. So every path that queues a job (enqueue, a failure retried, a release,
//! a reclaim, `jobs_retry`, a dead-letter copy, a resume, and any path added later: a replaced
//! unique job, a group's next job, a schedule's slot, a dependent whose last parent succeeded,
//! a job woken by its signal or its await's timeout) reports it here, in the transaction that
//! does it, and nowhere else.

use crate::runtime::totals::{Counts, Key};
use crate::runtime::{effects, Position};
use crate::storage::{Row, Rows};

/// `count` jobs of `queue` become queued when this transaction commits, the first of them in
/// claim order at `first`.
pub fn jobs_queued(queue: &str, count: usize, first: Position) {
    effects::jobs_queued(queue, u32::try_from(count).unwrap_or(u32::MAX), first);
}

/// One job of `queue` becomes queued at `position` when this transaction commits.
pub fn job_queued(queue: &str, position: Position) {
    jobs_queued(queue, 1, position);
}

/// Every job in `rows`, which a statement made queued: each row names its `queue` and its
/// position (`priority`, `run_at`, `id`), as every such statement returns them.
pub fn queued_rows(rows: &Rows) {
    for row in rows.iter() {
        queued_row(&row);
    }
}

/// The job in `row`, which a statement made queued (see [`queued_rows`]).
pub fn queued_row(row: &Row<'_>) {
    let queue: String = row.expect("queue");
    job_queued(&queue, Position::from_row(row));
}

/// A group of `queue` frees a slot when this transaction commits (a job of it finished or
/// went back to the queue): its next job may run, so a waiting claim should look. The floor
/// stays: a job let go for its group either lies above it (claims count it as skipped) or was
/// marked waiting, and clearing the mark reports it as queued (`engine::groups`).
pub fn group_freed(queue: &str) {
    effects::jobs_unblocked(queue, 1);
}

/// Every queued job of `queue` becomes claimable again when this transaction commits (a
/// resume).
pub fn queue_resumed(queue: &str) {
    effects::queue_resumed(queue);
}

/// This transaction claimed `count` jobs of `queue`; a rollback gives them back.
pub fn jobs_claimed(queue: &str, count: usize) {
    effects::jobs_claimed(queue, u32::try_from(count).unwrap_or(u32::MAX));
}

/// This transaction holds the job lock of a queued job of `queue` (claims skip it meanwhile),
/// so a rollback must reset the queue's floor.
pub fn job_locked(queue: &str) {
    effects::job_locked(queue);
}

/// How a settle left a job, as the totals count it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// It succeeded.
    Completed,
    /// It failed for good.
    Failed,
    /// Its attempt failed (or its lease expired) and it runs again.
    Retried,
    /// Its holder handed it back without spending the attempt.
    Released,
    /// A heartbeat or settle call presented a lease that was no longer the job's.
    Lost,
    /// It was cancelled while queued or running.
    Cancelled,
}

/// The job in `row` was settled this way by this transaction: the totals count it when the
/// transaction commits. The row names the job's `queue` and `tenant`.
pub fn job_settled(row: &Row<'_>, settled: Settled) {
    let queue: String = row.expect("queue");
    let tenant: Option<String> = row.get("tenant");
    job_counted(&queue, tenant.as_deref(), settled);
}

/// A job of `queue` and `tenant` was settled this way by this transaction (see
/// [`job_settled`]); an empty queue name counts in the totals' overflow line (a lost lease
/// whose job is gone).
pub fn job_counted(queue: &str, tenant: Option<&str>, settled: Settled) {
    let mut counts = Counts::default();
    match settled {
        Settled::Completed => counts.completed = 1,
        Settled::Failed => counts.failed = 1,
        Settled::Retried => counts.retried = 1,
        Settled::Released => counts.released = 1,
        Settled::Lost => counts.lost = 1,
        Settled::Cancelled => counts.cancelled = 1,
    }
    if matches!(
        settled,
        Settled::Completed | Settled::Failed | Settled::Cancelled
    ) {
        jobs_finished();
    }
    effects::jobs_settled(Key::new(queue, tenant), counts);
}

/// This transaction inserted `count` jobs of `queue` and `tenant`: the totals (and the
/// throughput history) count them when it commits.
pub fn jobs_enqueued(queue: &str, tenant: Option<&str>, count: usize) {
    let counts = Counts {
        enqueued: count as u64,
        ..Counts::default()
    };
    effects::jobs_settled(Key::new(queue, tenant), counts);
}

/// This transaction finished jobs (they succeeded, failed for good or were cancelled): the
/// `jobs_wait` calls asleep look again when it commits.
pub fn jobs_finished() {
    effects::jobs_finished();
}
