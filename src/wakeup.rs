//! Commit-driven wake-ups for claims that wait for work, and the other effects a transaction
//! has on shared memory when it ends.
//!
//! A transaction that makes jobs claimable (enqueue, retry, release, a failure retried at once,
//! reclaim, resume) notes the queue; when it commits, a callback signals as many waiting claims
//! on that queue's slot as jobs became claimable, so a commit of one job does not stampede a
//! hundred waiters, and lowers the queue's claim floor (see `floor`) to those jobs. The
//! signals go out after the transaction has released its locks: a waiter woken while the job
//! locks of a finishing claim were still held would skip those jobs. Nothing is signalled on
//! rollback, except for transactions that held job locks: a rolled-back claim puts its jobs
//! back, so it wakes waiters and resets the floor. A delayed job lowers the slot's `next_due`,
//! which waiting claims use to time their sleep.

use std::cell::RefCell;
use std::sync::atomic::Ordering;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::floor::{self, Key};
use crate::queue::queue_hash;
use crate::shmem::{shared, Slot, SLOTS};
use crate::spi::server_now;

/// Wake every waiter on the queue (a resume, for instance).
pub const WAKE_ALL: u32 = u32::MAX;

/// How often a waiting claim re-checks when pg_jobs is not preloaded and has no shared memory.
const POLL_WITHOUT_SHMEM_MS: i64 = 200;

/// What this transaction does to one queue's shared state when it ends.
struct QueueEffects {
    queue: String,
    slot: usize,
    /// Waiters to wake on commit: one per job that became claimable.
    wake_on_commit: u32,
    /// The earliest run_at of a delayed job that became queued (i64::MAX: none).
    earliest_due: i64,
    /// The lowest position of a job that became queued, for the floor.
    lowest: Option<Key>,
    /// Jobs this transaction claimed, which a rollback hands back.
    wake_on_abort: u32,
    /// Whether this transaction held job locks here, so a rollback must reset the floor.
    reset_on_abort: bool,
}

thread_local! {
    static PENDING: RefCell<Vec<QueueEffects>> = const { RefCell::new(Vec::new()) };
}

/// The slot of `queue` in this database.
pub fn slot_index(queue: &str) -> usize {
    // SAFETY: MyDatabaseId is fixed for the life of a connected backend.
    let database = u64::from(u32::from(unsafe { pg_sys::MyDatabaseId }));
    ((queue_hash(queue) ^ database.wrapping_mul(0x9e37_79b9_7f4a_7c15)) % SLOTS as u64) as usize
}

/// The shared slot of `queue`, when pg_jobs has shared memory.
pub fn slot(queue: &str) -> Option<&'static Slot> {
    shared().map(|s| &s.slots[slot_index(queue)])
}

/// Runs `change` on this transaction's pending effects for `queue` (nothing without shared
/// memory).
fn note(queue: &str, change: impl FnOnce(&mut QueueEffects)) {
    if shared().is_none() {
        return;
    }
    PENDING.with(|pending| {
        let mut pending = pending.borrow_mut();
        let index = match pending.iter().position(|e| e.queue == queue) {
            Some(index) => index,
            None => {
                pending.push(QueueEffects {
                    queue: queue.to_owned(),
                    slot: slot_index(queue),
                    wake_on_commit: 0,
                    earliest_due: i64::MAX,
                    lowest: None,
                    wake_on_abort: 0,
                    reset_on_abort: false,
                });
                pending.len() - 1
            }
        };
        change(&mut pending[index]);
    });
}

/// Notes that `count` jobs of `queue` become queued when this transaction commits, the first
/// of them (in claim order) at `first`.
pub fn jobs_queued(queue: &str, count: u32, first: Key) {
    if count == 0 {
        return;
    }
    let now = server_now();
    note(queue, |e| {
        e.lowest = Some(e.lowest.map_or(first, |lowest| lowest.min(first)));
        if first.run_at <= now {
            e.wake_on_commit = e.wake_on_commit.saturating_add(count);
        } else {
            e.earliest_due = e.earliest_due.min(first.run_at);
        }
    });
}

/// Notes that a resume makes every queued job of `queue` claimable again.
pub fn queue_resumed(queue: &str) {
    note(queue, |e| e.wake_on_commit = WAKE_ALL);
}

/// Notes that this transaction claimed `count` jobs of `queue`, which a rollback gives back.
pub fn jobs_claimed(queue: &str, count: u32) {
    note(queue, |e| {
        e.wake_on_abort = e.wake_on_abort.saturating_add(count);
        e.reset_on_abort = true;
    });
}

/// Notes that this transaction holds the job lock of a queued job of `queue` (a cancel, a late
/// holder's settle): claims skip that job meanwhile, so a rollback must reset the floor.
pub fn job_locked(queue: &str) {
    note(queue, |e| e.reset_on_abort = true);
}

/// Installs the callbacks; called from `_PG_init` in every process that loads us.
pub fn register_callback() {
    // SAFETY: the callbacks are plain functions that live as long as the library.
    unsafe {
        pg_sys::RegisterXactCallback(Some(on_xact_event), std::ptr::null_mut());
        pg_sys::RegisterResourceReleaseCallback(Some(on_resource_release), std::ptr::null_mut());
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_xact_event(
    event: pg_sys::XactEvent::Type,
    _arg: *mut std::ffi::c_void,
) {
    // A prepared transaction commits later, maybe in another session; the worker's tick covers
    // its jobs. Forget them here, before its resources are released as if it had committed.
    if event == pg_sys::XactEvent::XACT_EVENT_PREPARE {
        PENDING.with(|p| p.borrow_mut().clear());
    }
}

/// Fires the transaction's wake-ups once its locks are gone; it is visible to everyone by then.
#[pg_guard]
unsafe extern "C-unwind" fn on_resource_release(
    phase: pg_sys::ResourceReleasePhase::Type,
    commit: bool,
    top_level: bool,
    _arg: *mut std::ffi::c_void,
) {
    if phase != pg_sys::ResourceReleasePhase::RESOURCE_RELEASE_AFTER_LOCKS {
        return;
    }
    if !top_level {
        if !commit {
            subtransaction_aborted();
        }
        return;
    }
    let pending = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
    let Some(shared) = shared() else { return };
    for effects in pending {
        let slot = &shared.slots[effects.slot];
        if commit {
            if let Some(lowest) = effects.lowest {
                floor::lower(slot, &effects.queue, lowest);
            }
            if effects.earliest_due != i64::MAX {
                lower_next_due(slot, effects.earliest_due);
            }
            wake(slot, effects.wake_on_commit);
        } else {
            if effects.reset_on_abort {
                floor::reset(slot, &effects.queue);
            }
            wake(slot, effects.wake_on_abort);
        }
    }
}

/// A subtransaction (a savepoint rolled back to, a PL/pgSQL exception block) was rolled back:
/// jobs a claim or cancel in it held are queued again, below where that claim may have raised
/// the floor, so the floors of the queues this transaction touched are forgotten. The
/// transaction's own outcome is still to come, so its effects stay pending. Which queue the
/// rolled-back part touched is not tracked; resetting a floor it did not move costs the next
/// claim only a scan from the head of its queue.
///
/// Waiters are not woken here: a waiting claim's own empty attempts end this way, and waking
/// would wake the claim itself into a loop. The worker's tick wakes them for the jobs that came
/// back.
fn subtransaction_aborted() {
    let Some(shared) = shared() else { return };
    PENDING.with(|pending| {
        for effects in pending.borrow().iter().filter(|e| e.reset_on_abort) {
            floor::reset(&shared.slots[effects.slot], &effects.queue);
        }
    });
}

/// Lowers the slot's next known due time to `run_at`, waking its waiters to re-time their
/// sleep when it moved earlier.
fn lower_next_due(slot: &Slot, run_at: pg_sys::TimestampTz) {
    let now = server_now();
    loop {
        let current = slot.next_due.load(Ordering::Acquire);
        // An earlier due time that has not passed yet is already known to the waiters.
        if current > now && current <= run_at {
            return;
        }
        if slot
            .next_due
            .compare_exchange(current, run_at, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            wake(slot, WAKE_ALL);
            return;
        }
    }
}

/// Wakes up to `count` waiters of the slot: one condition-variable signal per job. The
/// generation bump tells a claim that is between attempts (not yet on the wait list) to look
/// again instead of sleeping.
fn wake(slot: &Slot, count: u32) {
    if count == 0 {
        return;
    }
    slot.generation.fetch_add(1, Ordering::AcqRel);
    let waiters = slot.waiters.load(Ordering::Acquire);
    if waiters == 0 {
        return;
    }
    // SAFETY: the condition variable lives in shared memory for the life of the server.
    unsafe {
        let cv = cv_ptr(slot);
        if count >= waiters {
            pg_sys::ConditionVariableBroadcast(cv);
        } else {
            for _ in 0..count {
                pg_sys::ConditionVariableSignal(cv);
            }
        }
    }
}

/// Wakes every waiter on each slot that has any: the worker's backstop for due delayed jobs
/// and for commits no callback saw (prepared transactions, direct table edits).
pub fn wake_queue(queue: &str) {
    if let Some(shared) = shared() {
        wake(&shared.slots[slot_index(queue)], WAKE_ALL);
    }
}

/// Whether any claim is waiting on the queue's slot.
pub fn has_waiters(queue: &str) -> bool {
    shared().is_some_and(|s| s.slots[slot_index(queue)].waiters.load(Ordering::Acquire) > 0)
}

/// A claim waiting on one queue. While it exists it counts as a waiter of the queue's slot.
pub struct Waiter {
    slot: Option<&'static Slot>,
}

impl Waiter {
    /// Starts waiting on `queue`.
    pub fn new(queue: &str) -> Waiter {
        let slot = shared().map(|s| &s.slots[slot_index(queue)]);
        if let Some(slot) = slot {
            slot.waiters.fetch_add(1, Ordering::AcqRel);
        }
        Waiter { slot }
    }

    /// The slot's generation; read it before checking for work and hand it to [`Waiter::sleep`].
    pub fn generation(&self) -> u64 {
        self.slot
            .map_or(0, |slot| slot.generation.load(Ordering::Acquire))
    }

    /// Sleeps until woken, until `until`, or until the slot's next delayed job comes due,
    /// whichever is first; returns at once if anything was signalled since `seen` was read.
    /// Raises the usual ERROR on `pg_cancel_backend` or `statement_timeout`.
    pub fn sleep(&self, until: pg_sys::TimestampTz, seen: u64) {
        let now = server_now();
        let mut wake_at = until;
        if let Some(slot) = self.slot {
            let next_due = slot.next_due.load(Ordering::Acquire);
            if next_due > now {
                wake_at = wake_at.min(next_due);
            }
        }
        // Round up so we never wake just before the moment we wait for.
        let timeout_ms = ((wake_at - now).max(0) + 999) / 1000;
        match self.slot {
            Some(slot) => {
                // SAFETY: a shared-memory condition variable. Joining its wait list before the
                // generation check means a signal after the check still wakes us; one before
                // it shows up as a new generation. (Rolling back the attempt's subtransaction
                // took us off the list, hence joining on every sleep.)
                unsafe {
                    pg_sys::ConditionVariablePrepareToSleep(cv_ptr(slot));
                    if slot.generation.load(Ordering::Acquire) != seen {
                        return;
                    }
                    pg_sys::ConditionVariableTimedSleep(
                        cv_ptr(slot),
                        timeout_ms as std::ffi::c_long,
                        pg_sys::PG_WAIT_EXTENSION,
                    );
                }
            }
            None => {
                // SAFETY: waits on our own latch, as any backend may.
                unsafe {
                    pg_sys::WaitLatch(
                        pg_sys::MyLatch,
                        (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH)
                            as i32,
                        timeout_ms.min(POLL_WITHOUT_SHMEM_MS) as std::ffi::c_long,
                        pg_sys::PG_WAIT_EXTENSION,
                    );
                    pg_sys::ResetLatch(pg_sys::MyLatch);
                }
                pgrx::check_for_interrupts!();
            }
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let Some(slot) = self.slot else { return };
        slot.waiters.fetch_sub(1, Ordering::AcqRel);
        // SAFETY: leaves the wait list of a shared-memory condition variable.
        unsafe {
            pg_sys::ConditionVariableCancelSleep();
            // Leaving on an ERROR may swallow a signal meant for a job; pass it on.
            if std::thread::panicking() {
                pg_sys::ConditionVariableSignal(cv_ptr(slot));
            }
        }
    }
}

fn cv_ptr(slot: &Slot) -> *mut pg_sys::ConditionVariable {
    slot.cv.get()
}
