//! The extension's own heavyweight locks, kept apart from users' `pg_advisory_lock` keys by a
//! tag of their own, and released at transaction end.
//!
//! * A queue lock: shared by producers, exclusive by `jobs_drop_queue`, so a job is never
//!   inserted into a queue that is being dropped.
//! * A job lock: a claim takes it (without waiting) on each candidate before updating the job,
//!   so claims never touch a row another claim is taking and never lock rows they do not hand
//!   out. Calls that change a queued job by other paths (cancel, a late holder's settle
//!   after a reclaim) take it too, waiting, so a claim skips the job instead of waiting on them.

use pgrx::pg_sys;

use crate::queue::queue_hash;

/// `locktag_field4` of our locks; users' advisory locks use 1 and 2.
const QUEUE_LOCK: u16 = 0x504a;
const JOB_LOCK: u16 = 0x504b;

/// Takes lock `key` of kind `tag` in `mode`; returns whether it was granted (always true when
/// waiting).
fn acquire(tag: u16, key: u64, mode: u32, wait: bool) -> bool {
    let locktag = pg_sys::LOCKTAG {
        // SAFETY: MyDatabaseId is set for the life of a connected backend.
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.into(),
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
