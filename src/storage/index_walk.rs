//! Windows of an index that hold a bounded number of entries, for the worker's statements that
//! walk a range of an index (reclaim, the claim floors' check, the idempotency purge).
//!
//! An index scan visits every entry in its range, and checks the row of each against its
//! snapshot, whether or not the row is still live: only live rows count against a LIMIT.
//! Vacuum removes the dead ones, but not while a snapshot older than their deletion is held
//! (anyone's long transaction, a standby's feedback), and meanwhile every job claimed leaves
//! a dead entry in the claim index and in the lease index. A statement over "every expired
//! lease" or "every job below the floor" then walks all of them in one snapshot, for seconds.
//! Instead the worker cuts such a range into windows of at most [`WINDOW_ENTRIES`] entries,
//! found here by walking the index's entries alone (no row is read: the walk costs an index
//! page per few hundred entries), and runs its statement once per window, each in a
//! transaction of its own.

use pgrx::pg_sys::{self, Datum};

use super::direct::{self, jobs_relation, Compare, StatementScan};

/// Entries a window holds at most (besides those inserted since it was cut, and, in an index
/// whose keys repeat, those equal to its last key).
pub const WINDOW_ENTRIES: usize = 1_000;

/// The key columns of the `WINDOW_ENTRIES`-th entry of index `index_name` (of `jobs.job`)
/// that `keys` select, in index order: where the window that starts at the first such entry
/// ends. `Ok(None)`: fewer entries than that, and the window runs to the end of the range (and
/// always on a shard of a Citus cluster).
/// `Err(())`: the relations are not there (the extension is being dropped), or an index column
/// is not passed by value.
///
/// # Safety
/// Inside a transaction; `keys` are scan keys of the index (and whatever their arguments
/// point to lives until this returns).
pub unsafe fn window_end(
    table_name: &std::ffi::CStr,
    index_name: &std::ffi::CStr,
    keys: impl FnOnce(pg_sys::Relation) -> Option<Vec<pg_sys::ScanKeyData>>,
) -> Result<Option<Vec<Datum>>, ()> {
    // On a shard of a Citus cluster (`storage::shard`) the relations by these names are the
    // distributed tables' shells, not the shard's: there the window is the whole range.
    if super::shard::current_key() != 0 {
        return Ok(None);
    }
    // SAFETY: relations opened here and closed before returning (their locks kept until the
    // transaction ends, as a statement's are); the scan and its snapshot end here too.
    unsafe {
        let (Some(table), Some(index)) = (jobs_relation(table_name), jobs_relation(index_name))
        else {
            return Err(());
        };
        let heap = pg_sys::table_open(table, pg_sys::AccessShareLock as i32);
        let index = pg_sys::index_open(index, pg_sys::AccessShareLock as i32);
        let answer = walk(heap, index, keys);
        pg_sys::index_close(index, pg_sys::NoLock as i32);
        pg_sys::table_close(heap, pg_sys::NoLock as i32);
        answer
    }
}

unsafe fn walk(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    keys: impl FnOnce(pg_sys::Relation) -> Option<Vec<pg_sys::ScanKeyData>>,
) -> Result<Option<Vec<Datum>>, ()> {
    // SAFETY: open relations; the scan keys live until the scan ends; the index tuple returned
    // is read before the scan moves on.
    unsafe {
        let columns = (*(*index).rd_index).indnkeyatts as usize;
        // The relcache's descriptor, not reference counted by us; pgrx reads its attributes
        // the way each major lays them out.
        let desc = pgrx::PgTupleDesc::from_pg_unchecked((*index).rd_att);
        let by_value = (0..columns).all(|i| desc.get(i).is_some_and(|a| a.attbyval));
        if !by_value {
            return Err(());
        }
        let Some(mut keys) = keys(index) else {
            return Err(());
        };
        let statement_scan = StatementScan::begin(heap, index, &mut keys);
        let scan = statement_scan.scan;
        // The entries themselves, without their rows; asked before the scan (re)starts, where
        // the btree makes room to copy them out.
        (*scan).xs_want_itup = true;
        statement_scan.rescan(&mut keys);
        let mut seen = 0;
        let mut end = None;
        while !pg_sys::index_getnext_tid(scan, pg_sys::ScanDirection::ForwardScanDirection)
            .is_null()
        {
            seen += 1;
            if seen < WINDOW_ENTRIES {
                continue;
            }
            if (*scan).xs_itup.is_null() {
                break;
            }
            let mut values = vec![Datum::from(0); pg_sys::INDEX_MAX_KEYS as usize];
            let mut nulls = [false; pg_sys::INDEX_MAX_KEYS as usize];
            pg_sys::index_deform_tuple(
                (*scan).xs_itup,
                (*scan).xs_itupdesc,
                values.as_mut_ptr(),
                nulls.as_mut_ptr(),
            );
            if nulls[..columns].iter().any(|&null| null) {
                break;
            }
            values.truncate(columns);
            end = Some(values);
            break;
        }
        statement_scan.end();
        Ok(end)
    }
}

/// A stretch of timestamps, `[from, until)` (microseconds; `i64::MIN` and `i64::MAX` are
/// -infinity and infinity): a window of an index on one timestamptz column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeWindow {
    /// Its first value.
    pub from: i64,
    /// The value past its last.
    pub until: i64,
}

impl TimeWindow {
    /// Every value.
    pub const ALL: TimeWindow = TimeWindow {
        from: i64::MIN,
        until: i64::MAX,
    };

    /// The window of at most [`WINDOW_ENTRIES`] entries of index `index_name` (of table
    /// `table_name` in schema `jobs`, on one timestamptz column) that starts at `from`. `None`
    /// when the index is not there. Inside a transaction.
    pub fn starting_at(
        table_name: &std::ffi::CStr,
        index_name: &std::ffi::CStr,
        from: i64,
    ) -> Option<TimeWindow> {
        // SAFETY: the caller is inside a transaction; the scan key's argument is by value.
        let end = unsafe {
            window_end(table_name, index_name, |index| {
                if from == i64::MIN {
                    return Some(Vec::new());
                }
                direct::key(
                    index,
                    1,
                    pg_sys::TIMESTAMPTZOID,
                    pg_sys::BTGreaterEqualStrategyNumber,
                    Compare::Condition,
                    Datum::from(from),
                )
                .map(|key| vec![key])
            })
        }
        .ok()?;
        let until = match end {
            None => i64::MAX,
            // More entries than a window's share `from`'s value (a batch claim's jobs share
            // their lease_until): the window takes them all, and the next starts past them.
            Some(key) if key[0].value() as i64 <= from => from.saturating_add(1),
            Some(key) => key[0].value() as i64,
        };
        Some(TimeWindow { from, until })
    }
}
