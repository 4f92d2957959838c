//! One queue's state outside its tables, as a call on that queue sees it: the claim floor and
//! reach, the freed heads of its groups, the commits that queued its jobs, its rate bucket and
//! its waiting claims. A claim makes one [`QueueState`] and goes through it for every read and
//! change of those caches, so the queue's slot is found once and the claim's way into this
//! layer is one door.

use pgrx::pg_sys;

use super::effects;
use super::floor;
use super::freed_heads;
use super::queued_changes::{self, Stamp};
use super::rate;
use super::shmem::Slot;
use super::waiting_claims::{self, Registration};
use super::wakeup::{self, Waiter};
use super::Position;

pub use super::floor::{ReachScope, Seen};
pub use super::freed_heads::{FreedHead, Wanted};
pub use super::rate::{Admission, Limit};

/// One queue's caches. Without shared memory (no preload) the floor is unknown, there are no
/// freed heads or shared rate buckets, and waits fall back on polling.
#[derive(Clone, Copy)]
pub struct QueueState<'q> {
    queue: &'q str,
    slot: Option<&'static Slot>,
}

impl<'q> QueueState<'q> {
    /// The caches of `queue`.
    pub fn of(queue: &'q str) -> QueueState<'q> {
        QueueState {
            queue,
            slot: wakeup::slot(queue),
        }
    }

    /// The queue's name.
    pub fn queue(&self) -> &'q str {
        self.queue
    }

    /// The claim floor and reach as this transaction sees them (`scope`: whose reach), lowered
    /// to the jobs this transaction queued below them; `None` without shared memory.
    pub fn seen_floor(&self, scope: Option<ReachScope<'_>>) -> Option<Seen> {
        floor::read(self.slot.map(Slot::floor), self.queue, scope)
            .map(|seen| seen.lowered_to(effects::pending_lowest(self.queue)))
    }

    /// Raises the floor to `to`, when it still is what `seen` read.
    pub fn raise_floor(&self, seen: &Seen, to: Position) {
        if let Some(slot) = self.slot {
            floor::raise(slot.floor(), self.queue, seen, to);
        }
    }

    /// Extends `scope`'s reach to `to`, when the floor still is what `seen` read.
    pub fn extend_reach(&self, seen: &Seen, scope: ReachScope<'_>, to: Position) {
        if let Some(slot) = self.slot {
            floor::extend_reach(slot.floor(), self.queue, seen, scope, to);
        }
    }

    /// Takes up to `wanted` freed heads that `claim` wants (see [`freed_heads::take`]).
    pub fn take_freed_heads(&self, wanted: usize, claim: &impl Wanted) -> Vec<FreedHead> {
        freed_heads::take(self.queue, wanted, claim)
    }

    /// Gives back the freed head of job `id` this transaction took and will not claim.
    pub fn give_back_freed_head(&self, id: i64) {
        freed_heads::give_back(id);
    }

    /// Whether the freed heads' marks lost with shared memory (made anew since the database's
    /// last sweep) must be cleared before any claim takes freed heads: in every queue of the
    /// database, so not one queue's to answer, but a claim asks here all the same.
    pub fn freed_heads_need_sweep() -> bool {
        freed_heads::sweep_needed()
    }

    /// Takes every freed head of the queue, to clear their marks: the ids of their jobs.
    pub fn take_all_freed_heads(&self) -> Vec<i64> {
        freed_heads::take_all(self.queue)
    }

    /// Whether no commit queued jobs in the queue since `stamp`.
    pub fn unchanged_since(&self, stamp: Stamp) -> bool {
        queued_changes::unchanged_since(self.queue, stamp)
    }

    /// Takes `want` tokens of the queue's shared rate bucket, or (`reserve`) reserves the next
    /// one; `None` without a shared bucket for the queue.
    pub fn acquire_tokens(
        &self,
        limit: Limit,
        want: u32,
        reserve: bool,
        now: pg_sys::TimestampTz,
    ) -> Option<Admission> {
        rate::acquire(self.queue, limit, want, reserve, now)
    }

    /// Gives back `count` tokens taken and not spent.
    pub fn refund_tokens(&self, limit: Limit, count: u32, now: pg_sys::TimestampTz) {
        rate::refund(self.queue, limit, count, now);
    }

    /// Starts waiting for the queue's wake-ups.
    pub fn waiter(&self) -> Waiter {
        Waiter::new(self.queue)
    }

    /// Lists this backend's claim as waiting on the queue (see [`waiting_claims::register`]).
    pub fn register_waiting_claim(
        &self,
        worker: &str,
        tenants: Option<&[String]>,
        since: i64,
    ) -> Registration {
        waiting_claims::register(self.queue, worker, tenants, since)
    }

    /// Whether claims wait on the queue.
    pub fn has_waiters(&self) -> bool {
        wakeup::has_waiters(self.queue)
    }

    /// Wakes the claims waiting on the queue.
    pub fn wake_waiters(&self) {
        wakeup::wake_queue(self.queue);
    }
}
