//! Claim floors: for each queue, a position in claim order (priority, run_at, id) below which no
//! job is claimable, so a claim starts its index scan there instead of at the head of the
//! queue's part of the claim index.
//!
//! Why: a claimed job leaves a dead entry at the head of the claim index, and while any
//! snapshot older than the claim is open (a long report, a replica's feedback, a forgotten
//! `BEGIN`), vacuum cannot remove it and scans cannot mark it dead. Without a floor every claim
//! walks all of them, so claims get slower with every job claimed for as long as the snapshot
//! lives. With a floor a claim skips them.
//!
//! Soundness: a claim that takes jobs of every kind raises the floor to just past the last job
//! it took,
//! but only if nothing lowered it since the claim read it (a generation counter); every commit
//! that makes a job queued lowers it to that job's position; every rollback of a transaction
//! that held job locks (a claim, a cancel) resets it. Jobs a claim skipped because another
//! transaction held them are either taken by that transaction or come back through its
//! rollback. The floor lives in shared memory, so a restart simply forgets it.
//!
//! Next to the floor each queue has a reach: how far claims in flight have picked. Concurrent
//! claims start past it instead of all trying the same held jobs at the floor
//! ([`extend_reach`] says why that is sound, [`forget_reaches`] what bounds it).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

use pgrx::pg_sys;

use crate::shmem::Slot;

/// A position in claim order. A floor is inclusive: a claim scans from the floor itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    /// The job's priority (lower runs first).
    pub priority: i16,
    /// Its run_at, in microseconds since the Postgres epoch.
    pub run_at: i64,
    /// Its id.
    pub id: i64,
}

/// One queue's floor, guarded by a spin lock; its slot may serve another queue meanwhile.
#[repr(C)]
pub struct FloorCell {
    lock: AtomicBool,
    data: UnsafeCell<FloorData>,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct FloorData {
    /// Bumped by every change but a raise, so a claim can tell whether its reading still holds.
    generation: u64,
    database: u32,
    name_len: u8,
    name: [u8; 64],
    has_key: bool,
    key: Key,
    /// The reach: the furthest position that claims of every kind picked while `generation`
    /// was `reach_generation`. Valid only while the two are equal.
    has_reach: bool,
    reach_generation: u64,
    reach: Key,
}

impl Key {
    /// Reads a position from columns `priority`, `run_at` and `id` (1-based) of a row.
    pub fn from_row(row: &crate::spi::Row<'_>, priority: usize, run_at: usize, id: usize) -> Key {
        Key {
            priority: row.get(priority).expect("a job's priority is never NULL"),
            run_at: row
                .get::<pgrx::datum::TimestampWithTimeZone>(run_at)
                .map(i64::from)
                .expect("a job's run_at is never NULL"),
            id: row.get(id).expect("a job's id is never NULL"),
        }
    }

    /// The next position in claim order: ids are integers, so nothing lies strictly between.
    pub fn successor(self) -> Key {
        Key {
            id: self.id.saturating_add(1),
            ..self
        }
    }
}

impl FloorData {
    fn reach_valid(&self) -> bool {
        self.has_reach && self.reach_generation == self.generation
    }

    fn owned_by(&self, database: u32, queue: &str) -> bool {
        self.database == database && &self.name[..self.name_len as usize] == queue.as_bytes()
    }
}

/// What a claim read of its queue's floor before it started.
pub struct Seen {
    generation: u64,
    /// Where to start, if the floor is known.
    pub key: Option<Key>,
    /// The furthest position claims in flight picked, if known (see [`extend_reach`]).
    pub reach: Option<Key>,
}

fn database() -> u32 {
    // SAFETY: MyDatabaseId is fixed for the life of a connected backend.
    u32::from(unsafe { pg_sys::MyDatabaseId })
}

impl FloorCell {
    fn with<R>(&self, body: impl FnOnce(&mut FloorData) -> R) -> R {
        while self
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        // SAFETY: the spin lock gives us the only reference; the body only copies plain data
        // and cannot unwind.
        let result = body(unsafe { &mut *self.data.get() });
        self.lock.store(false, Ordering::Release);
        result
    }
}

/// Reads the queue's floor; `None` without shared memory.
pub fn read(slot: Option<&Slot>, queue: &str) -> Option<Seen> {
    let database = database();
    slot.map(|slot| {
        slot.floor.with(|data| {
            let owned = data.owned_by(database, queue);
            Seen {
                generation: data.generation,
                key: (owned && data.has_key).then_some(data.key),
                reach: (owned && data.has_key && data.reach_valid()).then_some(data.reach),
            }
        })
    })
}

/// Raises the queue's floor to `to` (the last job a claim of every kind took), unless it was
/// lowered or reset since `seen` was read.
pub fn raise(slot: &Slot, queue: &str, seen: &Seen, to: Key) {
    let database = database();
    slot.floor.with(|data| {
        if data.generation != seen.generation {
            return;
        }
        if data.owned_by(database, queue) {
            if !data.has_key || data.key < to {
                data.key = to;
                data.has_key = true;
            }
        } else if queue.len() < data.name.len() {
            // The slot served another queue (or none); it serves this one from now on.
            data.database = database;
            data.name_len = queue.len() as u8;
            data.name[..queue.len()].copy_from_slice(queue.as_bytes());
            data.key = to;
            data.has_key = true;
            data.generation += 1;
        }
    });
}

/// Lowers the queue's floor to `key`: a job became queued there.
pub fn lower(slot: &Slot, queue: &str, key: Key) {
    let database = database();
    slot.floor.with(|data| {
        // A reach before the new job still holds; claims that read the old generation may not
        // extend it, as they did not see the job.
        let reach_holds = data.reach_valid() && data.reach < key;
        data.generation += 1;
        if reach_holds {
            data.reach_generation = data.generation;
        }
        if data.owned_by(database, queue) && data.has_key && key < data.key {
            data.key = key;
        }
    });
}

/// Records that a claim of every kind, which read `seen`, picked (holds the job locks of) jobs
/// up to `to`, skipping only jobs other transactions held.
///
/// The reach is a hint that lets the next claims start past the jobs claims in flight hold,
/// instead of each trying the same held jobs' locks first. Between the floor and the reach,
/// every job is held by a claim in flight or already taken: a claim's jobs come back only
/// through its rollback (which resets the floor and with it the reach) and any other way a job
/// becomes queued lowers the floor (which forgets a reach past that job). So it only moves
/// when nothing changed since the claim read `seen`.
pub fn extend_reach(slot: &Slot, queue: &str, seen: &Seen, to: Key) {
    let database = database();
    slot.floor.with(|data| {
        if data.generation != seen.generation || !data.owned_by(database, queue) || !data.has_key {
            return;
        }
        if !data.reach_valid() || data.reach < to {
            data.reach = to;
            data.has_reach = true;
            data.reach_generation = data.generation;
        }
    });
}

/// Forgets the queue's floor: jobs may be claimable anywhere again.
pub fn reset(slot: &Slot, queue: &str) {
    let database = database();
    slot.floor.with(|data| {
        data.generation += 1;
        if data.owned_by(database, queue) {
            data.has_key = false;
        }
    });
}

/// Forgets every queue's reach; the worker does this each tick. A job the reach passed while
/// a transaction that was not a claim held it (a cancel or a late settle that then left the
/// job queued) would otherwise wait until claims run out of jobs past the reach; this way it
/// waits at most a tick.
pub fn forget_reaches(slots: &[Slot]) {
    for slot in slots {
        slot.floor.with(|data| data.has_reach = false);
    }
}
