//! Whether this database's `jobs.job` is a Citus distributed table (docs/src/internals/citus.md):
//! then the fast paths step aside and every call runs on its shard's own tables.
//!
//! Read from Citus's catalog (`pg_catalog.pg_dist_partition`) by an index probe, and kept while
//! no relcache invalidation arrives: Citus invalidates a table's relcache entry whenever its row
//! there changes, on every node its metadata reaches, so a session learns of `jobs_distribute()`
//! at its next transaction without asking the catalog on every call. A database without Citus
//! answers from one syscache lookup.

use std::cell::Cell;

use pgrx::pg_sys::{self, Oid};

use crate::pg::version;

thread_local! {
    /// Relcache invalidations this process has taken in since it first asked.
    static INVALIDATIONS: Cell<u64> = const { Cell::new(0) };
    static REGISTERED: Cell<bool> = const { Cell::new(false) };
    /// The last answer and the invalidation count it was read under.
    static KNOWN: Cell<Option<(u64, bool)>> = const { Cell::new(None) };
}

/// Called by PostgreSQL when a relcache entry is invalidated (`relid` 0: all of them).
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn count_invalidation(_arg: pg_sys::Datum, _relid: Oid) {
    INVALIDATIONS.with(|count| count.set(count.get().wrapping_add(1)));
}

/// Relcache invalidations this process has taken in: what a session read of Citus's placements
/// of `jobs.job` stays true while this stays the same (Citus invalidates the table's relcache
/// entry whenever one of its placements changes, on every node with metadata).
pub fn invalidations() -> u64 {
    register();
    INVALIDATIONS.with(Cell::get)
}

fn register() {
    if !REGISTERED.with(Cell::get) {
        // SAFETY: a plain function registered once per process.
        unsafe { version::register_relcache_callback(count_invalidation) };
        REGISTERED.with(|registered| registered.set(true));
    }
}

/// Whether `jobs.job` is distributed by Citus in this database. Outside a transaction (no
/// catalog access), false.
pub fn distributed() -> bool {
    // SAFETY: reads a backend global.
    if !unsafe { pg_sys::IsTransactionState() } {
        return false;
    }
    register();
    let generation = INVALIDATIONS.with(Cell::get);
    if let Some((seen, answer)) = KNOWN.with(Cell::get) {
        if seen == generation {
            return answer;
        }
    }
    // SAFETY: catalog lookups inside a transaction (checked above).
    let answer = unsafe { read_distributed() };
    // Invalidations the lookup itself took in (opening relations accepts them) are covered by
    // what it read.
    KNOWN.with(|known| known.set(Some((INVALIDATIONS.with(Cell::get), answer))));
    answer
}

/// Reads whether `pg_dist_partition` has a row for `jobs.job`.
///
/// # Safety
/// Inside a transaction.
unsafe fn read_distributed() -> bool {
    // SAFETY: syscache lookups and a catalog index scan, as any catalog reader makes them.
    unsafe {
        let catalog = pg_sys::Oid::from(pg_sys::PG_CATALOG_NAMESPACE);
        let partitions = pg_sys::get_relname_relid(c"pg_dist_partition".as_ptr(), catalog);
        if partitions == pg_sys::InvalidOid {
            return false;
        }
        let namespace = pg_sys::get_namespace_oid(c"jobs".as_ptr(), true);
        if namespace == pg_sys::InvalidOid {
            return false;
        }
        let job = pg_sys::get_relname_relid(c"job".as_ptr(), namespace);
        if job == pg_sys::InvalidOid {
            return false;
        }
        let index =
            pg_sys::get_relname_relid(c"pg_dist_partition_logical_relid_index".as_ptr(), catalog);
        let relation = pg_sys::table_open(partitions, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let mut key: pg_sys::ScanKeyData = std::mem::zeroed();
        // logicalrelid is the table's first column.
        pg_sys::ScanKeyInit(
            &mut key,
            1,
            pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
            pg_sys::Oid::from(pg_sys::F_OIDEQ),
            pg_sys::Datum::from(job),
        );
        let scan = pg_sys::systable_beginscan(
            relation,
            index,
            index != pg_sys::InvalidOid,
            std::ptr::null_mut(),
            1,
            &mut key,
        );
        let found = !pg_sys::systable_getnext(scan).is_null();
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(relation, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        found
    }
}
