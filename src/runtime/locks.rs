//! The extension's own heavyweight locks, kept apart from users' `pg_advisory_lock` keys by a
//! tag of their own, and released at transaction end.
//!
//! * A queue lock: shared by producers, exclusive by `jobs_drop_queue`, so a job is never
//!   inserted into a queue that is being dropped.
//! * A job lock: a claim takes it (without waiting) on each candidate before updating the job,
//!   so claims never touch a row another claim is taking and never lock rows they do not hand
//!   out. Calls that change a queued job by other paths (cancel, a late holder's settle
//!   after a reclaim) take it too, waiting, so a claim skips the job instead of waiting on them
//!   (Rule 1).
//! * The dead-letter lock: one change of dead-letter settings at a time, so cycles are seen.

use pgrx::pg_sys;

use super::queue_id::{current_database, queue_hash};

/// `locktag_field4` of the queue locks; users' advisory locks use 1 and 2.
const QUEUE_LOCK: u16 = 0x504a;
/// `locktag_field4` of the job locks.
const JOB_LOCK: u16 = 0x504b;
/// `locktag_field4` of the lock that serialises changes of dead-letter settings.
const DEAD_LETTER_LOCK: u16 = 0x504c;

/// Takes lock `key` of kind `tag` in `mode`; returns whether it was granted (always true when
/// waiting).
fn acquire(tag: u16, key: u64, mode: u32, wait: bool) -> bool {
    let locktag = pg_sys::LOCKTAG {
        locktag_field1: current_database(),
        locktag_field2: (key >> 32) as u32,
        locktag_field3: key as u32,
        locktag_field4: tag,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    };
    // SAFETY: a fully initialised advisory lock tag; held until transaction end.
    let result = unsafe { pg_sys::LockAcquire(&locktag, mode as pg_sys::LOCKMODE, false, !wait) };
    result != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
}

/// Takes the queue's lock: shared to enqueue, exclusive to drop.
///
/// It is taken before the statement that reads `jobs.queue`, so that statement's snapshot sees
/// a drop that committed while we waited.
pub fn lock_queue(queue: &str, exclusive: bool) {
    let mode = if exclusive {
        pg_sys::ExclusiveLock
    } else {
        pg_sys::ShareLock
    };
    acquire(QUEUE_LOCK, queue_hash(queue), mode, true);
}

/// Takes job `id`'s lock, waiting for a claim that holds it to finish.
pub fn lock_job(id: i64) {
    acquire(JOB_LOCK, id as u64, pg_sys::ExclusiveLock, true);
}

/// Takes job `id`'s lock if no other transaction holds it; a claim calls it on each candidate
/// in claim order and skips the ones it cannot get.
pub fn try_lock_job(id: i64) -> bool {
    acquire(JOB_LOCK, id as u64, pg_sys::ExclusiveLock, false)
}

/// Takes the lock that serialises changes of queues' dead-letter settings, so that a check for
/// cycles sees every change committed before it.
pub fn lock_dead_letter_chains() {
    acquire(DEAD_LETTER_LOCK, 0, pg_sys::ExclusiveLock, true);
}
