//! Jobs settled since the server started, per database, queue and tenant: the counters behind
//! `jobs_totals()` and the `_total` families of `jobs_metrics()`.
//!
//! A transaction adds its settles here when it commits (see `effects`), so a rolled-back
//! complete or fail counts nothing. Entries are keyed by the tenant too (by a hash of its
//! name), so a caller limited to some tenants can be shown exactly their part. An entry, once
//! made, is never removed or rekeyed: adding is a probe and an atomic add, without a lock; only
//! making an entry takes the table's lock. When the table is full, further keys of a database
//! are counted in that database's overflow entry, which only callers who see every tenant are
//! shown.
//!
//! The worker of each database also writes what its keys counted (enqueued, completed, failed,
//! retried) into the throughput history once a minute, and notes here what it wrote: the
//! difference is the current minute, which `jobs.throughput` reads from here.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::attached::Attached;
use super::queue_id::{current_database, queue_hash};

/// The counters in shared memory (`shmem` attaches it).
pub(super) static TABLE: Attached<TotalsTable> = Attached::new();

/// Entries in the table (distinct database, queue and tenant keys that ever settled a job).
pub const ENTRIES: usize = 8192;
/// Longest queue name.
const NAME_BYTES: usize = 64;

/// What a transaction's settles add to one key.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Counts {
    /// Jobs that succeeded.
    pub completed: u64,
    /// Jobs that failed for good (no attempts left, or failed without retry).
    pub failed: u64,
    /// Failed attempts that were scheduled to run again (a fail with retry, an expired lease
    /// with attempts left).
    pub retried: u64,
    /// Jobs handed back by their holder without spending the attempt (`jobs_release`).
    pub released: u64,
    /// Heartbeat and settle calls answered `lost`: their lease was no longer the job's.
    pub lost: u64,
    /// Queued or running jobs cancelled (`jobs_cancel`).
    pub cancelled: u64,
    /// Jobs inserted (enqueues, schedules' slots, dead-letter copies; not unique duplicates).
    pub enqueued: u64,
}

impl Counts {
    /// Whether nothing is counted.
    pub fn is_empty(&self) -> bool {
        *self == Counts::default()
    }

    /// Adds `other` to these counts.
    pub fn add(&mut self, other: Counts) {
        self.completed += other.completed;
        self.failed += other.failed;
        self.retried += other.retried;
        self.released += other.released;
        self.lost += other.lost;
        self.cancelled += other.cancelled;
        self.enqueued += other.enqueued;
    }
}

/// Which jobs a count is for: their queue and tenant.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    /// The queue (an empty name: the overflow entry).
    pub queue: String,
    /// The hash of the jobs' tenant ([`tenant_hash`]), `None` for jobs without one.
    pub tenant: Option<u64>,
}

impl Key {
    /// The key of jobs of `queue` with this tenant.
    pub fn new(queue: &str, tenant: Option<&str>) -> Key {
        Key {
            queue: queue.to_owned(),
            tenant: tenant.map(tenant_hash),
        }
    }
}

/// An entry's key, written once under the table lock before the entry is published.
#[repr(C)]
#[derive(Clone, Copy)]
struct EntryKey {
    database: u32,
    /// The overflow entry of its database (no queue, every tenant).
    overflow: bool,
    has_tenant: bool,
    tenant_hash: u64,
    name_len: u8,
    name: [u8; NAME_BYTES],
}

/// One key's counters.
#[repr(C)]
pub struct Entry {
    /// Set (with release ordering) once `key` is written; never cleared.
    used: AtomicBool,
    key: UnsafeCell<EntryKey>,
    completed: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
    released: AtomicU64,
    lost: AtomicU64,
    cancelled: AtomicU64,
    enqueued: AtomicU64,
    /// What the background worker last wrote into the throughput history for this key
    /// (`runtime::throughput`): the counters' values at its last flush.
    flushed: Flushed,
}

/// The counters' values at the last flush into the throughput history; only the worker of the
/// entry's database writes them.
#[repr(C)]
struct Flushed {
    enqueued: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
}

/// The counters of every key, in shared memory.
#[repr(C)]
pub struct TotalsTable {
    /// Serialises making entries; adding to an entry and reading take no lock.
    insert_lock: AtomicBool,
    entries: [Entry; ENTRIES],
}

// SAFETY: `key` is written only under `insert_lock` while `used` is false, and read only after
// `used` was seen true with acquire ordering; the counters are atomics.
unsafe impl Sync for TotalsTable {}

/// A stable hash of a tenant name, with a seed of its own so it differs from the queue's.
pub fn tenant_hash(tenant: &str) -> u64 {
    queue_hash(tenant) ^ 0x5bd1_e995_7f4a_7c15
}

impl EntryKey {
    fn new(database: u32, key: &Key) -> EntryKey {
        let mut name = [0u8; NAME_BYTES];
        name[..key.queue.len()].copy_from_slice(key.queue.as_bytes());
        EntryKey {
            database,
            overflow: false,
            has_tenant: key.tenant.is_some(),
            tenant_hash: key.tenant.unwrap_or(0),
            name_len: key.queue.len() as u8,
            name,
        }
    }

    fn overflow(database: u32) -> EntryKey {
        EntryKey {
            database,
            overflow: true,
            has_tenant: false,
            tenant_hash: 0,
            name_len: 0,
            name: [0; NAME_BYTES],
        }
    }

    fn same(&self, other: &EntryKey) -> bool {
        self.database == other.database
            && self.overflow == other.overflow
            && self.has_tenant == other.has_tenant
            && self.tenant_hash == other.tenant_hash
            && self.name[..self.name_len as usize] == other.name[..other.name_len as usize]
    }

    /// The queue's name (empty for the overflow entry).
    fn queue(&self) -> String {
        String::from_utf8_lossy(&self.name[..self.name_len as usize]).into_owned()
    }

    fn start(&self) -> usize {
        let name = &self.name[..self.name_len as usize];
        let hash = name.iter().fold(self.tenant_hash, |hash, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
        }) ^ u64::from(self.database).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (hash % ENTRIES as u64) as usize
    }
}

impl Entry {
    /// The entry's key, once it is published.
    fn key(&self) -> Option<EntryKey> {
        // SAFETY: see TotalsTable's Sync note: `used` was seen true with acquire ordering, so
        // the key was written before and is never written again.
        self.used
            .load(Ordering::Acquire)
            .then(|| unsafe { *self.key.get() })
    }

    fn add(&self, counts: Counts) {
        self.completed
            .fetch_add(counts.completed, Ordering::Relaxed);
        self.failed.fetch_add(counts.failed, Ordering::Relaxed);
        self.retried.fetch_add(counts.retried, Ordering::Relaxed);
        for (counter, value) in [
            (&self.released, counts.released),
            (&self.lost, counts.lost),
            (&self.cancelled, counts.cancelled),
            (&self.enqueued, counts.enqueued),
        ] {
            if value != 0 {
                counter.fetch_add(value, Ordering::Relaxed);
            }
        }
    }

    fn counts(&self) -> Counts {
        Counts {
            completed: self.completed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            released: self.released.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
            cancelled: self.cancelled.load(Ordering::Relaxed),
            enqueued: self.enqueued.load(Ordering::Relaxed),
        }
    }
}

impl TotalsTable {
    /// The published entry with `key`, probing from its start; `Err(first free index)` when
    /// there is none (`Err(None)`: the table is full).
    fn find(&self, key: &EntryKey) -> Result<&Entry, Option<usize>> {
        let start = key.start();
        for step in 0..ENTRIES {
            let index = (start + step) % ENTRIES;
            match self.entries[index].key() {
                Some(found) if found.same(key) => return Ok(&self.entries[index]),
                Some(_) => continue,
                None => return Err(Some(index)),
            }
        }
        Err(None)
    }

    /// The entry with `key`, made when there is none and room for it.
    fn entry(&self, key: &EntryKey) -> Option<&Entry> {
        if let Ok(entry) = self.find(key) {
            return Some(entry);
        }
        while self
            .insert_lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        // Another session may have made it meanwhile: probe again under the lock, where no
        // entry can be published behind our back.
        let made = match self.find(key) {
            Ok(entry) => Some(entry),
            Err(None) => None,
            Err(Some(free)) => {
                let entry = &self.entries[free];
                // SAFETY: under insert_lock and with `used` false, no one reads or writes the
                // key; it is published by the release store below.
                unsafe { *entry.key.get() = *key };
                entry.used.store(true, Ordering::Release);
                Some(entry)
            }
        };
        self.insert_lock.store(false, Ordering::Release);
        made
    }
}

/// Adds a committed transaction's settles of `key` (nothing without shared memory). A key
/// without a queue name, or with a longer one than a queue can have, is counted in the
/// overflow entry.
pub fn add(key: &Key, counts: Counts) {
    if counts.is_empty() {
        return;
    }
    let Some(table) = TABLE.get() else { return };
    let database = current_database();
    let entry = if !key.queue.is_empty() && key.queue.len() < NAME_BYTES {
        table.entry(&EntryKey::new(database, key))
    } else {
        None
    };
    if let Some(entry) = entry.or_else(|| table.entry(&EntryKey::overflow(database))) {
        entry.add(counts);
    }
}

/// Which keys of this database a caller is shown.
pub enum Visible<'a> {
    /// Every key, the overflow entry included.
    All,
    /// Keys of jobs without a tenant.
    Untenanted,
    /// Keys of these tenants' jobs.
    Tenants(&'a [String]),
}

/// The published entries of this database that `visible` covers (the overflow entry only
/// when it covers every key), with their keys; nothing without shared memory.
fn visible_entries(visible: Visible<'_>) -> impl Iterator<Item = (&'static Entry, EntryKey)> + '_ {
    let entries = TABLE.get().map_or(&[][..], |table| &table.entries[..]);
    let database = current_database();
    let tenant_hashes: Vec<u64> = match &visible {
        Visible::Tenants(tenants) => tenants.iter().map(|t| tenant_hash(t)).collect(),
        _ => Vec::new(),
    };
    let shown = move |key: &EntryKey| match visible {
        Visible::All => true,
        Visible::Untenanted => !key.overflow && !key.has_tenant,
        Visible::Tenants(_) => {
            !key.overflow && key.has_tenant && tenant_hashes.contains(&key.tenant_hash)
        }
    };
    entries.iter().filter_map(move |entry| {
        let key = entry.key()?;
        (key.database == database && shown(&key)).then_some((entry, key))
    })
}

/// This database's counters by queue (`None`: the overflow entry), summed over the tenants
/// `visible` covers, in no particular order. Empty without shared memory.
pub fn read(visible: Visible<'_>) -> Vec<(Option<String>, Counts)> {
    let mut by_queue: Vec<(Option<String>, Counts)> = Vec::new();
    for (entry, key) in visible_entries(visible) {
        let queue = (!key.overflow).then(|| key.queue());
        match by_queue.iter_mut().find(|(q, _)| *q == queue) {
            Some((_, counts)) => counts.add(entry.counts()),
            None => by_queue.push((queue, entry.counts())),
        }
    }
    by_queue
}

// ---- Throughput history (dashboard issue): the background worker writes, once a minute, what
// each key counted since its last write into jobs.throughput_minute; the part not written yet
// (the current minute) is read from here.

/// What one key counted since the last flush, as read for the next one.
#[derive(Clone, Debug)]
pub struct Unflushed {
    /// The entry's index, for [`mark_flushed`].
    index: usize,
    /// The queue.
    pub queue: String,
    /// The hash of the jobs' tenant ([`tenant_hash`]), `None` for jobs without one.
    pub tenant: Option<u64>,
    /// The counters as read (what [`mark_flushed`] records).
    read: [u64; 4],
    /// Enqueued, completed, failed and retried since the last flush.
    pub delta: [u64; 4],
}

impl Entry {
    fn history_counters(&self) -> [u64; 4] {
        [
            self.enqueued.load(Ordering::Relaxed),
            self.completed.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            self.retried.load(Ordering::Relaxed),
        ]
    }

    fn flushed_counters(&self) -> [u64; 4] {
        [
            self.flushed.enqueued.load(Ordering::Relaxed),
            self.flushed.completed.load(Ordering::Relaxed),
            self.flushed.failed.load(Ordering::Relaxed),
            self.flushed.retried.load(Ordering::Relaxed),
        ]
    }

    /// The history counters as read now, and how much each grew since the last flush.
    fn since_flush(&self) -> ([u64; 4], [u64; 4]) {
        let read = self.history_counters();
        let flushed = self.flushed_counters();
        (
            read,
            std::array::from_fn(|i| read[i].saturating_sub(flushed[i])),
        )
    }
}

/// The keys of this database (the overflow entry left out) that counted something since their
/// last flush, with what they counted. Empty without shared memory.
pub fn unflushed() -> Vec<Unflushed> {
    let Some(table) = TABLE.get() else {
        return Vec::new();
    };
    let database = current_database();
    let mut out = Vec::new();
    for (index, entry) in table.entries.iter().enumerate() {
        let Some(key) = entry.key() else { continue };
        if key.database != database || key.overflow {
            continue;
        }
        let (read, delta) = entry.since_flush();
        if delta.iter().all(|d| *d == 0) {
            continue;
        }
        out.push(Unflushed {
            index,
            queue: key.queue(),
            tenant: key.has_tenant.then_some(key.tenant_hash),
            read,
            delta,
        });
    }
    out
}

/// Records that `written` is in the history now (called once the transaction that wrote it
/// committed): later reads count from the values read then.
pub fn mark_flushed(written: &[Unflushed]) {
    let Some(table) = TABLE.get() else { return };
    for unflushed in written {
        let flushed = &table.entries[unflushed.index].flushed;
        for (counter, value) in [
            &flushed.enqueued,
            &flushed.completed,
            &flushed.failed,
            &flushed.retried,
        ]
        .into_iter()
        .zip(unflushed.read)
        {
            counter.store(value, Ordering::Relaxed);
        }
    }
}

/// Per queue of this database, what the keys `visible` covers counted since their last flush
/// (enqueued, completed, failed, retried): the current minute of the history. The overflow
/// entry is left out. Empty without shared memory.
pub fn pending(visible: Visible<'_>) -> Vec<(String, [u64; 4])> {
    let mut by_queue: Vec<(String, [u64; 4])> = Vec::new();
    for (entry, key) in visible_entries(visible) {
        if key.overflow {
            continue;
        }
        let (_, delta) = entry.since_flush();
        if delta.iter().all(|d| *d == 0) {
            continue;
        }
        let queue = key.queue();
        match by_queue.iter_mut().find(|(q, _)| *q == queue) {
            Some((_, sum)) => (0..4).for_each(|i| sum[i] += delta[i]),
            None => by_queue.push((queue, delta)),
        }
    }
    by_queue
}
