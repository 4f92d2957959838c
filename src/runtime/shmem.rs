//! The extension's shared memory: one wake-up slot per queue hash (with the queue's claim floor),
//! the background workers' status, rate-limit buckets, the totals of settled jobs, the freed
//! heads of groups, and where `jobs_wait` calls sleep. It exists only
//! when pg_jobs is in `shared_preload_libraries`; without it, waiting claims fall back to
//! polling, claims start at the head of their queue, and there is no worker.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

use pgrx::pg_sys;

use super::floor::FloorCell;
use super::freed_heads::{self, FreedHeads};
use super::queued_changes::{self, QueuedChanges};
use super::rate::{self, RateTable};
use super::totals::{self, TotalsTable};
use super::waiting_claims::{self, WaitingClaims};
use super::worker_status::WorkerStatus;
use crate::pg::version;

pub use super::queue_id::SLOTS;
/// Most databases the background worker can serve.
pub const MAX_DATABASES: usize = 16;

/// Where claims on one set of queues sleep, what wakes them, and their queue's claim floor.
#[repr(C)]
pub struct Slot {
    cv: UnsafeCell<pg_sys::ConditionVariable>,
    waiters: AtomicU32,
    generation: AtomicU64,
    next_due: AtomicI64,
    floor: FloorCell,
}

impl Slot {
    /// The condition variable waiting claims sleep on.
    pub(super) fn condition_variable(&self) -> *mut pg_sys::ConditionVariable {
        self.cv.get()
    }

    /// How many claims are waiting on this slot.
    pub(super) fn waiters(&self) -> &AtomicU32 {
        &self.waiters
    }

    /// Bumped by every commit that makes jobs claimable here, so a claim between two attempts
    /// (not yet asleep) notices.
    pub(super) fn generation(&self) -> &AtomicU64 {
        &self.generation
    }

    /// The earliest `run_at` of a delayed job committed here that may not have come due yet,
    /// or `i64::MAX` when none is known.
    pub(super) fn next_due(&self) -> &AtomicI64 {
        &self.next_due
    }

    /// The claim floor and reach of the queue that owns this slot's floor cell.
    pub fn floor(&self) -> &FloorCell {
        &self.floor
    }
}

// SAFETY: every field is an atomic, a spin-locked cell, or a PostgreSQL condition variable,
// which is made for concurrent use from many processes.
unsafe impl Sync for Slot {}

/// Everything pg_jobs keeps in shared memory.
#[repr(C)]
pub struct Shared {
    slots: [Slot; SLOTS],
    workers: [WorkerStatus; MAX_DATABASES],
    tenant_grants: AtomicU64,
    queue_settings: AtomicU64,
    rate_table: RateTable,
    totals: TotalsTable,
    freed_heads: FreedHeads,
    queued_changes: QueuedChanges,
    /// Where `jobs_wait` calls sleep until a commit finishes jobs (its floor is unused).
    finished: Slot,
    waiting_claims: WaitingClaims,
}

impl Shared {
    /// Every wake-up slot.
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// Every slot's floor cell, in slot order.
    pub fn floor_cells(&self) -> impl Iterator<Item = &FloorCell> {
        self.slots.iter().map(Slot::floor)
    }

    /// The wake-up slot at `index` (see `queue_id::slot_index`).
    pub fn slot(&self, index: usize) -> &Slot {
        &self.slots[index]
    }

    /// The status entry of the worker with this index (its position in `pg_jobs.databases`).
    pub fn worker(&self, index: usize) -> &WorkerStatus {
        &self.workers[index % MAX_DATABASES]
    }

    /// Every worker's status entry.
    pub fn workers(&self) -> &[WorkerStatus] {
        &self.workers
    }

    /// Bumped by every commit that changes tenant grants, so sessions drop what they cached.
    pub fn tenant_grants(&self) -> &AtomicU64 {
        &self.tenant_grants
    }

    /// Bumped by every commit that changes queue settings, so sessions drop what they cached.
    pub fn queue_settings(&self) -> &AtomicU64 {
        &self.queue_settings
    }

    /// The slot `jobs_wait` calls sleep on, woken by commits that finish jobs.
    pub(super) fn finished(&self) -> &Slot {
        &self.finished
    }
}

// SAFETY: see Slot; WorkerStatus and QueuedChanges are atomics only; RateTable, WaitingClaims
// and FreedHeads are spin-locked; TotalsTable publishes its keys under its own lock (see its
// note).
unsafe impl Sync for Shared {}

static mut SHARED: *mut Shared = std::ptr::null_mut();

/// The shared area, or `None` when pg_jobs was not preloaded.
pub fn shared() -> Option<&'static Shared> {
    // SAFETY: set once in the postmaster's shmem startup hook, before any backend forks (and
    // again identically after a crash restart, while no backend runs); never freed.
    unsafe { SHARED.as_ref() }
}

/// Asks for the shared area; called from `_PG_init` while preloading.
pub fn request() {
    // SAFETY: called once, from _PG_init while shared_preload_libraries is processed.
    unsafe { version::request_shared_memory(std::mem::size_of::<Shared>(), initialise) };
}

/// Creates (or attaches to) the shared area.
unsafe extern "C-unwind" fn initialise() {
    // SAFETY: runs in the shmem startup hook, under AddinShmemInitLock as the protocol for
    // ShmemInitStruct requires; the area is written only when it was just created.
    unsafe {
        let init_lock = version::addin_shmem_init_lock();
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let shared = pg_sys::ShmemInitStruct(
            c"pg_jobs".as_ptr(),
            std::mem::size_of::<Shared>(),
            &mut found,
        )
        .cast::<Shared>();
        if !found {
            // All-zero is a valid state for every atomic and spin lock; the condition variables
            // need their own initialisation and next_due starts as "none known".
            std::ptr::write_bytes(shared.cast::<u8>(), 0, std::mem::size_of::<Shared>());
            for slot in (*shared).slots.iter_mut() {
                pg_sys::ConditionVariableInit(slot.cv.get());
                slot.next_due.store(i64::MAX, Ordering::Relaxed);
            }
            pg_sys::ConditionVariableInit((*shared).finished.cv.get());
            (*shared)
                .finished
                .next_due
                .store(i64::MAX, Ordering::Relaxed);
        }
        SHARED = shared;
        // The parts that their own modules keep (see runtime::attached).
        rate::TABLE.attach(&raw mut (*shared).rate_table);
        totals::TABLE.attach(&raw mut (*shared).totals);
        freed_heads::TABLE.attach(&raw mut (*shared).freed_heads);
        queued_changes::TABLE.attach(&raw mut (*shared).queued_changes);
        waiting_claims::TABLE.attach(&raw mut (*shared).waiting_claims);
        pg_sys::LWLockRelease(init_lock);
    }
}
