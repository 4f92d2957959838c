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
//! * A signal lock (per tenant and signal name): shared by `jobs_await`, exclusive by
//!   `jobs_signal`, so whichever comes second sees what the first committed
//!   (`engine::workflows::signals`).

use pgrx::pg_sys;

use super::queue_id::{current_database, queue_hash};

/// `locktag_field4` of the queue locks; users' advisory locks use 1 and 2.
const QUEUE_LOCK: u16 = 0x504a;
/// `locktag_field4` of the job locks.
const JOB_LOCK: u16 = 0x504b;
/// `locktag_field4` of the lock that serialises changes of dead-letter settings.
const DEAD_LETTER_LOCK: u16 = 0x504c;
/// `locktag_field4` of the group locks.
const GROUP_LOCK: u16 = 0x504d;
/// `locktag_field4` of the lock held by the transaction that clears a database's stranded marks.
const SWEEP_LOCK: u16 = 0x504e;
/// `locktag_field4` of the signal locks.
const SIGNAL_LOCK: u16 = 0x504f;

/// The lock tag of lock `key` of kind `kind` in this database.
fn tag(kind: u16, key: u64) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        locktag_field1: current_database(),
        locktag_field2: (key >> 32) as u32,
        locktag_field3: key as u32,
        locktag_field4: kind,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

/// Takes lock `key` of kind `kind` in `mode`; returns whether it was granted (always true when
/// waiting).
fn acquire(kind: u16, key: u64, mode: u32, wait: bool) -> bool {
    let locktag = tag(kind, key);
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

/// Gives up job `id`'s lock before the transaction ends: a claim that picked the job and then
/// found it may not take it (its group is at capacity) lets other claims have it at once.
pub fn unlock_job(id: i64) {
    let locktag = tag(JOB_LOCK, id as u64);
    // SAFETY: releases a transaction-level advisory lock this backend holds (LockRelease
    // answers false, harmlessly, for one it does not hold).
    unsafe { pg_sys::LockRelease(&locktag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, false) };
}

/// The key of a group's lock: its queue, tenant and group key.
pub fn group_key_hash(queue: &str, tenant: Option<&str>, group: &str) -> u64 {
    let mut hash = queue_hash(queue);
    for part in [tenant.unwrap_or(""), group] {
        hash = part
            .bytes()
            .chain(std::iter::once(0xff))
            .fold(hash, |hash, byte| {
                (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
            });
    }
    hash
}

/// Takes a group's lock if no other transaction holds it: one claim at a time decides which of
/// a group's jobs may run, so two claims never both fill its last slot. A claim that cannot
/// get it skips the group.
pub fn try_lock_group(key: u64) -> bool {
    acquire(GROUP_LOCK, key, pg_sys::ExclusiveLock, false)
}

/// Takes a group's lock, waiting for the claim that holds it (`jobs_retry` of a grouped job,
/// which may change the group's head).
pub fn lock_group(key: u64) {
    acquire(GROUP_LOCK, key, pg_sys::ExclusiveLock, true);
}

/// Takes this database's sweep lock until the transaction (or the subtransaction it is taken
/// in) ends, if no other transaction holds it: one transaction at a time clears the stranded
/// marks of freed heads (`engine::groups::sweep_stranded`).
pub fn try_lock_sweep() -> bool {
    acquire(SWEEP_LOCK, 0, pg_sys::ExclusiveLock, false)
}

/// Takes the lock that serialises changes of queues' dead-letter settings, so that a check for
/// cycles sees every change committed before it.
pub fn lock_dead_letter_chains() {
    acquire(DEAD_LETTER_LOCK, 0, pg_sys::ExclusiveLock, true);
}

/// The key of a signal's lock: its tenant ('' for none) and name.
pub fn signal_key_hash(tenant: &str, signal: &str) -> u64 {
    [tenant, signal]
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, part| {
            part.bytes()
                .chain(std::iter::once(0xff))
                .fold(hash, |hash, byte| {
                    (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
                })
        })
}

/// Takes a signal's lock until the transaction ends, waiting: shared by an await (awaits of a
/// signal never wait for each other), exclusive by a signal.
pub fn lock_signal(key: u64, exclusive: bool) {
    let mode = if exclusive {
        pg_sys::ExclusiveLock
    } else {
        pg_sys::ShareLock
    };
    acquire(SIGNAL_LOCK, key, mode, true);
}
