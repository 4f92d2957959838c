//! Commit-driven wake-ups for claims that wait for work.
//!
//! A transaction that makes jobs claimable (enqueue, retry, release, a failure retried at once,
//! reclaim, resume) notes the queue; when it commits, a callback signals as many waiting claims
//! on that queue's slot as jobs became claimable, so a commit of one job does not stampede a
//! hundred waiters. The signals go out after the transaction has released its locks: a waiter
//! woken while the job locks of a finishing claim were still held would skip those jobs. Nothing is signalled on rollback, except for claims: rolling back
//! a claim puts its jobs back, so that wakes waiters too. A delayed job lowers the slot's
//! `next_due`, which waiting claims use to time their sleep.

use std::cell::RefCell;
use std::sync::atomic::Ordering;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::queue::queue_hash;
use crate::shmem::{shared, Slot, SLOTS};
use crate::spi::server_now;

/// Wake every waiter on the queue (a resume, for instance).
pub const WAKE_ALL: u32 = u32::MAX;

/// How often a waiting claim re-checks when pg_jobs is not preloaded and has no shared memory.
const POLL_WITHOUT_SHMEM_MS: i64 = 200;

#[derive(Default)]
struct Pending {
    /// Per slot: how many waiters to wake when this transaction commits.
    on_commit: Vec<(usize, u32)>,
    /// Per slot: the earliest run_at of a delayed job this transaction enqueued.
    due: Vec<(usize, i64)>,
    /// Per slot: jobs this transaction claimed, which a rollback hands back.
    on_abort: Vec<(usize, u32)>,
}

thread_local! {
    static PENDING: RefCell<Pending> = RefCell::new(Pending::default());
}

fn slot_index(queue: &str) -> usize {
    // SAFETY: MyDatabaseId is fixed for the life of a connected backend.
    let database = u64::from(u32::from(unsafe { pg_sys::MyDatabaseId }));
    ((queue_hash(queue) ^ database.wrapping_mul(0x9e37_79b9_7f4a_7c15)) % SLOTS as u64) as usize
}

fn add(list: &mut Vec<(usize, u32)>, slot: usize, count: u32) {
    match list.iter_mut().find(|(s, _)| *s == slot) {
        Some((_, total)) => *total = total.saturating_add(count),
        None => list.push((slot, count)),
    }
}

/// Notes that `count` jobs of `queue` become claimable when this transaction commits.
pub fn queue_changed(queue: &str, count: u32) {
    if shared().is_none() || count == 0 {
        return;
    }
    let slot = slot_index(queue);
    PENDING.with(|p| add(&mut p.borrow_mut().on_commit, slot, count));
}

/// Notes a delayed job of `queue` that comes due at `run_at`.
pub fn job_delayed(queue: &str, run_at: pg_sys::TimestampTz) {
    if shared().is_none() {
        return;
    }
    let slot = slot_index(queue);
    PENDING.with(|p| {
        let due = &mut p.borrow_mut().due;
        match due.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, earliest)) => *earliest = (*earliest).min(run_at),
            None => due.push((slot, run_at)),
        }
    });
}

/// Notes that this transaction claimed `count` jobs of `queue`, which a rollback gives back.
pub fn jobs_claimed(queue: &str, count: u32) {
    if shared().is_none() || count == 0 {
        return;
    }
    let slot = slot_index(queue);
    PENDING.with(|p| add(&mut p.borrow_mut().on_abort, slot, count));
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
        PENDING.with(|p| *p.borrow_mut() = Pending::default());
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
    if phase != pg_sys::ResourceReleasePhase::RESOURCE_RELEASE_AFTER_LOCKS || !top_level {
        return;
    }
    let pending = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
    let Some(shared) = shared() else { return };
    if commit {
        for (slot, earliest) in pending.due {
            lower_next_due(&shared.slots[slot], earliest);
        }
        for (slot, count) in pending.on_commit {
            wake(&shared.slots[slot], count);
        }
    } else {
        for (slot, count) in pending.on_abort {
            wake(&shared.slots[slot], count);
        }
    }
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
