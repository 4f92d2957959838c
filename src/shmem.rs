//! The extension's shared memory: wake-up slots for waiting claims and the background workers'
//! status. It exists only when pg_jobs is in `shared_preload_libraries`; without it, waiting
//! claims fall back to polling and there is no worker.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};

use pgrx::pg_sys;
use pgrx::prelude::*;

/// Number of wake-up slots; queues hash onto them, and two queues sharing one only cost each
/// other a spurious wake-up.
pub const SLOTS: usize = 1024;
/// Most databases the background worker can serve.
pub const MAX_DATABASES: usize = 16;
/// Longest error message kept in a worker's status.
pub const ERROR_BYTES: usize = 512;
/// Longest database name (NAMEDATALEN).
pub const NAME_BYTES: usize = 64;

/// Where claims on one set of queues sleep, and what wakes them.
#[repr(C)]
pub struct Slot {
    /// Waiting claims sleep on this.
    pub cv: UnsafeCell<pg_sys::ConditionVariable>,
    /// How many claims are waiting on this slot.
    pub waiters: AtomicU32,
    /// Bumped by every commit that makes jobs claimable here.
    pub generation: AtomicU64,
    /// The earliest `run_at` of a delayed job committed here that may not have come due yet,
    /// or `i64::MAX` when none is known.
    pub next_due: AtomicI64,
    /// Where claims on this slot's queue may start scanning.
    pub floor: crate::floor::FloorCell,
}

/// One background worker's report, read by `jobs_worker_status()`.
#[repr(C)]
pub struct WorkerStatus {
    /// Database name, NUL-padded; empty when the entry is unused.
    pub database: [AtomicU8; NAME_BYTES],
    /// The worker's pid, 0 when it is not running.
    pub pid: AtomicI32,
    /// When the worker started.
    pub started_at: AtomicI64,
    /// When the last tick finished, successful or not (0 before the first).
    pub last_tick: AtomicI64,
    /// When the last failing tick finished (0 when none has failed).
    pub last_error_at: AtomicI64,
    /// 1 when the extension exists in the database at the last tick.
    pub serving: AtomicU32,
    /// Ticks run since start.
    pub ticks: AtomicU64,
    /// Jobs reclaimed since start.
    pub reclaimed: AtomicU64,
    /// Jobs purged since start.
    pub purged: AtomicU64,
    /// Sequence lock over `last_error`: odd while it is being written.
    pub error_seq: AtomicU64,
    /// The last tick error, NUL-padded.
    pub last_error: [AtomicU8; ERROR_BYTES],
}

/// Everything pg_jobs keeps in shared memory.
#[repr(C)]
pub struct Shared {
    /// Wake-up slots, indexed by queue hash.
    pub slots: [Slot; SLOTS],
    /// One entry per database in `pg_jobs.databases`.
    pub workers: [WorkerStatus; MAX_DATABASES],
}

static mut SHARED: *mut Shared = std::ptr::null_mut();
static mut PREV_SHMEM_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
static mut PREV_SHMEM_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;

/// The shared area, or `None` when pg_jobs was not preloaded.
pub fn shared() -> Option<&'static Shared> {
    // SAFETY: set once in the postmaster before any backend forks, never changed afterwards.
    unsafe { SHARED.as_ref() }
}

/// Asks for the shared area; called from `_PG_init` while preloading.
pub fn request() {
    // SAFETY: hooks are installed once, in the postmaster, before shared memory exists.
    unsafe {
        #[cfg(any(feature = "pg13", feature = "pg14"))]
        pg_sys::RequestAddinShmemSpace(std::mem::size_of::<Shared>());
        #[cfg(not(any(feature = "pg13", feature = "pg14")))]
        {
            PREV_SHMEM_REQUEST_HOOK = pg_sys::shmem_request_hook;
            pg_sys::shmem_request_hook = Some(shmem_request);
        }
        PREV_SHMEM_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(shmem_startup);
    }
}

#[cfg(not(any(feature = "pg13", feature = "pg14")))]
#[pg_guard]
unsafe extern "C-unwind" fn shmem_request() {
    unsafe {
        if let Some(previous) = PREV_SHMEM_REQUEST_HOOK {
            previous();
        }
        pg_sys::RequestAddinShmemSpace(std::mem::size_of::<Shared>());
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn shmem_startup() {
    unsafe {
        if let Some(previous) = PREV_SHMEM_STARTUP_HOOK {
            previous();
        }
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock; // AddinShmemInitLock
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let shared = pg_sys::ShmemInitStruct(
            c"pg_jobs".as_ptr(),
            std::mem::size_of::<Shared>(),
            &mut found,
        )
        .cast::<Shared>();
        if !found {
            // All-zero is a valid state for every atomic; the condition variables need their
            // own initialisation and next_due starts as "none known".
            std::ptr::write_bytes(shared.cast::<u8>(), 0, std::mem::size_of::<Shared>());
            for slot in (*shared).slots.iter_mut() {
                pg_sys::ConditionVariableInit(slot.cv.get());
                slot.next_due.store(i64::MAX, Ordering::Relaxed);
            }
        }
        SHARED = shared;
        pg_sys::LWLockRelease(init_lock);
    }
}

impl WorkerStatus {
    /// The database this entry reports on.
    pub fn database(&self) -> String {
        read_text(&self.database)
    }

    /// Claims the entry for `database`.
    pub fn set_database(&self, database: &str) {
        write_text(&self.database, database);
    }

    /// The last tick error, if any.
    pub fn last_error(&self) -> Option<String> {
        loop {
            let before = self.error_seq.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let text = read_text(&self.last_error);
            if self.error_seq.load(Ordering::Acquire) == before {
                return (!text.is_empty()).then_some(text);
            }
        }
    }

    /// Records the error of a failed tick.
    pub fn set_last_error(&self, error: &str) {
        self.error_seq.fetch_add(1, Ordering::AcqRel);
        write_text(&self.last_error, error);
        self.error_seq.fetch_add(1, Ordering::AcqRel);
    }
}

fn read_text(bytes: &[AtomicU8]) -> String {
    let raw: Vec<u8> = bytes
        .iter()
        .map(|b| b.load(Ordering::Relaxed))
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&raw).into_owned()
}

fn write_text(bytes: &[AtomicU8], text: &str) {
    // Cut on a character boundary so readers always see valid UTF-8.
    let mut end = text.len().min(bytes.len() - 1);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    for (i, slot) in bytes.iter().enumerate() {
        let byte = if i < end { text.as_bytes()[i] } else { 0 };
        slot.store(byte, Ordering::Relaxed);
    }
}
