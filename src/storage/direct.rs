//! What the direct paths (the writers and readers beside the declared statements) share:
//! finding the extension's relations, scanning an index as a statement would, and keeping
//! what a session read under the generation of the settings it came from.

use std::collections::HashMap;
use std::ffi::CStr;

use pgrx::pg_sys::{self, Oid};

use crate::pg::version;

/// The oid of relation `name` of schema `jobs`, if both exist.
///
/// # Safety
/// Inside a transaction (catalog lookups).
pub unsafe fn jobs_relation(name: &CStr) -> Option<Oid> {
    // SAFETY: syscache lookups, as the caller allows.
    unsafe {
        let namespace = pg_sys::get_namespace_oid(c"jobs".as_ptr(), true);
        if namespace == pg_sys::InvalidOid {
            return None;
        }
        let oid = pg_sys::get_relname_relid(name.as_ptr(), namespace);
        (oid != pg_sys::InvalidOid).then_some(oid)
    }
}

/// An index scan begun as a statement of a volatile function would begin it; ended with
/// [`StatementScan::end`].
pub struct StatementScan {
    /// The scan, its keys set.
    pub scan: pg_sys::IndexScanDesc,
    snapshot: pg_sys::Snapshot,
}

impl StatementScan {
    /// Begins a scan of `index` of `heap` with `keys`: what this transaction did so far is
    /// visible, and under READ COMMITTED the snapshot is taken now.
    ///
    /// # Safety
    /// Open relations; `keys` (and whatever their arguments point to) live until the scan ends.
    pub unsafe fn begin(
        heap: pg_sys::Relation,
        index: pg_sys::Relation,
        keys: &mut [pg_sys::ScanKeyData],
    ) -> StatementScan {
        // SAFETY: as the caller promises; the snapshot is registered for the scan.
        unsafe {
            pg_sys::CommandCounterIncrement();
            let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetTransactionSnapshot());
            let scan = version::index_begin_scan(heap, index, snapshot, keys.len() as i32);
            pg_sys::index_rescan(
                scan,
                keys.as_mut_ptr(),
                keys.len() as i32,
                std::ptr::null_mut(),
                0,
            );
            StatementScan { scan, snapshot }
        }
    }

    /// Ends the scan and lets go of its snapshot.
    ///
    /// # Safety
    /// Once, inside the transaction that began it.
    pub unsafe fn end(self) {
        // SAFETY: the scan and the snapshot `begin` made.
        unsafe {
            pg_sys::index_endscan(self.scan);
            pg_sys::UnregisterSnapshot(self.snapshot);
        }
    }
}

/// Values a session read, by name, valid while a shared generation stays the one they were read
/// under (a newer generation empties it).
pub struct Generational<V> {
    generation: u64,
    entries: HashMap<String, V>,
}

impl<V: Copy> Generational<V> {
    /// An empty one.
    pub fn new() -> Generational<V> {
        Generational {
            generation: u64::MAX,
            entries: HashMap::new(),
        }
    }

    /// The value of `name` read under `generation`, if any.
    pub fn get(&self, generation: u64, name: &str) -> Option<V> {
        (self.generation == generation)
            .then(|| self.entries.get(name).copied())
            .flatten()
    }

    /// Keeps `value` for `name`, read under `generation`.
    pub fn insert(&mut self, generation: u64, name: &str, value: V) {
        if self.generation != generation {
            self.generation = generation;
            self.entries.clear();
        }
        self.entries.insert(name.to_owned(), value);
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

impl<V: Copy> Default for Generational<V> {
    fn default() -> Self {
        Generational::new()
    }
}
