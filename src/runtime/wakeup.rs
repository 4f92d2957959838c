//! Waking claims that wait for work: condition variables in the queues' shared slots, signalled
//! when a commit makes jobs claimable (see `effects`), and timed by the earliest delayed job
//! known to a slot.

use std::sync::atomic::Ordering;

use pgrx::pg_sys;

use super::queue_id::slot_index;
use super::shmem::{shared, Slot};
use crate::pg::clock::server_now;

/// Wake every waiter on the queue (a resume, for instance).
pub const WAKE_ALL: u32 = u32::MAX;

/// How often a waiting claim re-checks when pg_jobs is not preloaded and has no shared memory.
const POLL_WITHOUT_SHMEM_MS: i64 = 200;

/// The shared slot of `queue` in this database, when pg_jobs has shared memory.
pub fn slot(queue: &str) -> Option<&'static Slot> {
    shared().map(|s| s.slot(slot_index(queue)))
}

/// Lowers the slot's next known due time to `run_at`, waking its waiters to re-time their
/// sleep when it moved earlier.
pub(super) fn lower_next_due(slot: &Slot, run_at: pg_sys::TimestampTz) {
    let now = server_now();
    loop {
        let current = slot.next_due().load(Ordering::Acquire);
        // An earlier due time that has not passed yet is already known to the waiters.
        if current > now && current <= run_at {
            return;
        }
        if slot
            .next_due()
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
pub(super) fn wake(slot: &Slot, count: u32) {
    if count == 0 {
        return;
    }
    slot.generation().fetch_add(1, Ordering::AcqRel);
    let waiters = slot.waiters().load(Ordering::Acquire);
    if waiters == 0 {
        return;
    }
    // SAFETY: the condition variable lives in shared memory for the life of the server.
    unsafe {
        let cv = slot.condition_variable();
        if count >= waiters {
            pg_sys::ConditionVariableBroadcast(cv);
        } else {
            for _ in 0..count {
                pg_sys::ConditionVariableSignal(cv);
            }
        }
    }
}

/// Wakes every waiter of the queue's slot: the worker's backstop for due delayed jobs and for
/// commits no callback saw (direct table edits, a restore).
pub fn wake_queue(queue: &str) {
    if let Some(slot) = slot(queue) {
        wake(slot, WAKE_ALL);
    }
}

/// Wakes every waiter of every slot that has any (the end of a prepared transaction whose
/// queues could not all be recorded).
pub(super) fn wake_everyone() {
    if let Some(shared) = shared() {
        for slot in shared.slots() {
            if slot.waiters().load(Ordering::Acquire) > 0 {
                wake(slot, WAKE_ALL);
            }
        }
    }
}

/// Wakes every `jobs_wait` call asleep (a commit finished jobs); nothing when none is.
pub fn wake_finish_waiters() {
    if let Some(shared) = shared() {
        let slot = shared.finished();
        if slot.waiters().load(Ordering::SeqCst) > 0 {
            wake(slot, WAKE_ALL);
        }
    }
}

/// Whether any claim is waiting on the queue's slot.
pub fn has_waiters(queue: &str) -> bool {
    slot(queue).is_some_and(|s| s.waiters().load(Ordering::Acquire) > 0)
}

/// What diagnostics show of a queue's wake-up slot.
pub struct SlotView {
    /// Claims waiting on the slot (queues sharing the slot included).
    pub waiters: u32,
    /// The slot's wake-up generation.
    pub generation: u64,
    /// The earliest delayed job known to the slot, if any.
    pub next_due: Option<pg_sys::TimestampTz>,
}

/// The queue's wake-up slot, for `jobs.runtime_state`.
pub fn view(slot: &Slot) -> SlotView {
    let next_due = slot.next_due().load(Ordering::Acquire);
    SlotView {
        waiters: slot.waiters().load(Ordering::Acquire),
        generation: slot.generation().load(Ordering::Acquire),
        next_due: (next_due != i64::MAX).then_some(next_due),
    }
}

/// A claim waiting on one queue. While it exists it counts as a waiter of the queue's slot.
pub struct Waiter {
    slot: Option<&'static Slot>,
}

impl Waiter {
    /// Starts waiting on `queue`.
    pub fn new(queue: &str) -> Waiter {
        let slot = slot(queue);
        if let Some(slot) = slot {
            slot.waiters().fetch_add(1, Ordering::AcqRel);
        }
        Waiter { slot }
    }

    /// Starts waiting for commits that finish jobs (`jobs_wait`).
    pub fn on_finishes() -> Waiter {
        let slot = shared().map(|shared| shared.finished());
        if let Some(slot) = slot {
            slot.waiters().fetch_add(1, Ordering::SeqCst);
        }
        Waiter { slot }
    }

    /// The slot's generation; read it before checking for work and hand it to [`Waiter::sleep`].
    pub fn generation(&self) -> u64 {
        self.slot
            .map_or(0, |slot| slot.generation().load(Ordering::Acquire))
    }

    /// Passes a wake-up this claim could not use on to another waiting claim (one that may
    /// take jobs this one may not: other kinds, other tenants). Each waiter passes on at most
    /// once per generation, so a wake-up nobody can use dies out after visiting every waiter.
    pub fn pass_on(&self) {
        if let Some(slot) = self.slot {
            // SAFETY: signals a shared-memory condition variable; we are not on its wait list
            // (the attempt's subtransaction took us off), so another waiter gets it.
            unsafe { pg_sys::ConditionVariableSignal(slot.condition_variable()) };
        }
    }

    /// Sleeps until woken, until `until`, or until the slot's next delayed job comes due,
    /// whichever is first; returns at once if anything was signalled since `seen` was read.
    /// Raises the usual ERROR on `pg_cancel_backend` or `statement_timeout`.
    pub fn sleep(&self, until: pg_sys::TimestampTz, seen: u64) {
        let now = server_now();
        let mut wake_at = until;
        if let Some(slot) = self.slot {
            let next_due = slot.next_due().load(Ordering::Acquire);
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
                    pg_sys::ConditionVariablePrepareToSleep(slot.condition_variable());
                    if slot.generation().load(Ordering::Acquire) != seen {
                        return;
                    }
                    pg_sys::ConditionVariableTimedSleep(
                        slot.condition_variable(),
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
        slot.waiters().fetch_sub(1, Ordering::AcqRel);
        // SAFETY: leaves the wait list of a shared-memory condition variable.
        unsafe {
            pg_sys::ConditionVariableCancelSleep();
            // Leaving on an ERROR may swallow a signal meant for a job; pass it on.
            if std::thread::panicking() {
                pg_sys::ConditionVariableSignal(slot.condition_variable());
            }
        }
    }
}
