//! Reading one row of a `jobs.` table by its primary key of text columns without the executor:
//! the primary key's btree is searched for the key, the row version the transaction's snapshot
//! sees is fetched, and the caller reads its columns while the buffer is pinned. No SPI
//! connection, no kept plan to check, no executor to start and end: for the lookups an HTTP
//! request makes several times (`jobs_idempotency_get`), those were most of what a call cost
//! beside the function call itself.
//!
//! Where a statement would do more than that (row-level security applies to the function's
//! owner, the primary key is not a btree over the expected text columns) or `pg_jobs.fast_paths`
//! is off, [`read`] reads nothing and answers `None`, and the caller runs its SQL statement
//! instead.

use std::ffi::CStr;

use pgrx::pg_sys::{self, Datum, Oid};

use super::{jobs_relation, row_security_applies, StatementScan};
use crate::config::settings::fast_paths;

/// The columns of one row version, by name, while [`read`] holds its buffer.
pub struct RowView {
    slot: *mut pg_sys::TupleTableSlot,
    heap: pg_sys::Relation,
}

impl RowView {
    /// Column `name`, if the row has it: its type and its value (`None` for NULL), valid until
    /// the view is gone: copy what must outlive it.
    pub fn column(&self, name: &CStr) -> Option<(Oid, Option<Datum>)> {
        // SAFETY: the open relation's descriptor, read through pgrx (its layout changed in 18);
        // the slot's attributes were all fetched, and `at` is within the descriptor.
        unsafe {
            let desc = pgrx::PgTupleDesc::from_pg_unchecked((*self.heap).rd_att);
            let at = desc.iter().position(|attribute| {
                !attribute.attisdropped && CStr::from_ptr(attribute.attname.data.as_ptr()) == name
            })?;
            let value =
                (!*(*self.slot).tts_isnull.add(at)).then(|| *(*self.slot).tts_values.add(at));
            Some((desc.get(at)?.atttypid, value))
        }
    }

    /// The schema of the row's table.
    pub fn namespace(&self) -> Oid {
        // SAFETY: an open relation's relcache entry.
        unsafe { (*(*self.heap).rd_rel).relnamespace }
    }
}

/// Reads the row of `jobs.<table>` whose primary key, of text columns named `columns` in that
/// order, equals `key`, as a statement of the caller's transaction would see it now, and
/// answers what `read` makes of it (`None` given to `read`: no such row). `None` when this path
/// cannot stand in for the SQL statement.
///
/// # Safety
/// Inside a transaction. `read` must copy out whatever it keeps: the row's values point into a
/// buffer released when it returns.
pub unsafe fn read<R>(
    table: &CStr,
    columns: &[&CStr],
    key: &[&str],
    read: impl FnOnce(Option<&RowView>) -> R,
) -> Option<R> {
    debug_assert_eq!(columns.len(), key.len());
    if !fast_paths() {
        return None;
    }
    // SAFETY: catalog lookups and relations opened here and closed before returning (their
    // locks kept until the transaction ends, as a statement's are); the snapshot is registered
    // for the scan and unregistered after it. On an ERROR, transaction abort releases them.
    unsafe {
        let oid = jobs_relation(table)?;
        let heap = pg_sys::table_open(oid, pg_sys::AccessShareLock as i32);
        let index = primary_key(heap, columns);
        let answer = index.map(|index| {
            let answer = scan(heap, index, key, read);
            pg_sys::index_close(index, pg_sys::NoLock as i32);
            answer
        });
        pg_sys::table_close(heap, pg_sys::NoLock as i32);
        answer
    }
}

/// The open primary key of the open `heap`, if a statement would find rows the way [`scan`]
/// does: no row-level security for the current role, and a btree over exactly `columns`, each
/// of type text in the text operator family.
///
/// # Safety
/// `heap` must be an open relation, locked at least as a statement reading it would lock it, for as
/// long as the call runs. The index returned is opened here; the caller closes it.
unsafe fn primary_key(heap: pg_sys::Relation, columns: &[&CStr]) -> Option<pg_sys::Relation> {
    // SAFETY: an open relation; the index is opened here and closed when it does not fit.
    unsafe {
        if row_security_applies((*heap).rd_id) {
            return None;
        }
        // Fills rd_pkindex.
        pg_sys::list_free(pg_sys::RelationGetIndexList(heap));
        let pk = (*heap).rd_pkindex;
        if pk == pg_sys::InvalidOid {
            return None;
        }
        let index = pg_sys::index_open(pk, pg_sys::AccessShareLock as i32);
        let fits = (*(*index).rd_rel).relam == pg_sys::BTREE_AM_OID
            && key_columns_are(heap, index, columns);
        if fits {
            Some(index)
        } else {
            pg_sys::index_close(index, pg_sys::NoLock as i32);
            None
        }
    }
}

/// Whether the open btree `index` of `heap` has exactly `columns` as its key columns, in
/// order, each text in the text operator family.
///
/// # Safety
/// `heap` and `index` must be open, `index` a btree index of `heap`.
unsafe fn key_columns_are(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    columns: &[&CStr],
) -> bool {
    // SAFETY: an open index and its table; their descriptors are the relcache's.
    unsafe {
        let form = (*index).rd_index;
        if (*form).indnkeyatts as usize != columns.len() || !(*index).rd_indexprs.is_null() {
            return false;
        }
        let desc = pgrx::PgTupleDesc::from_pg_unchecked((*heap).rd_att);
        let keys = (*form).indkey.values.as_slice(columns.len());
        columns.iter().enumerate().all(|(i, name)| {
            let attnum = keys[i] as usize;
            let named = attnum >= 1
                && desc.get(attnum - 1).is_some_and(|attribute| {
                    !attribute.attisdropped
                        && attribute.atttypid == pg_sys::TEXTOID
                        && CStr::from_ptr(attribute.attname.data.as_ptr()) == *name
                });
            named && *(*index).rd_opfamily.add(i) == pg_sys::TEXT_BTREE_FAM_OID
        })
    }
}

/// Searches `index` of `heap` for `key` and hands `read` the visible row version, if any.
///
/// # Safety
/// `heap` and `index` must be open and locked as a statement's scan would lock them, `index` the
/// index [`primary_key`] returned for `heap` with as many columns as `key` has.
unsafe fn scan<R>(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    key: &[&str],
    read: impl FnOnce(Option<&RowView>) -> R,
) -> R {
    // SAFETY: open relations; the scan keys and their text values live in the current memory
    // context until the scan ends; the slot and the scan are released before returning.
    unsafe {
        let mut keys: Vec<pg_sys::ScanKeyData> = Vec::with_capacity(key.len());
        for (i, part) in key.iter().enumerate() {
            let value = pg_sys::cstring_to_text_with_len(part.as_ptr().cast(), part.len() as i32);
            let mut entry = std::mem::zeroed::<pg_sys::ScanKeyData>();
            // The index column's collation, as the planner gives an index condition: the
            // btree's ordering comparisons use it to find the key's place.
            pg_sys::ScanKeyEntryInitialize(
                &mut entry,
                0,
                (i + 1) as pg_sys::AttrNumber,
                pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
                pg_sys::InvalidOid,
                *(*index).rd_indcollation.add(i),
                pg_sys::Oid::from(pg_sys::F_TEXTEQ),
                Datum::from(value),
            );
            keys.push(entry);
        }
        let statement_scan = StatementScan::begin(heap, index, &mut keys);
        let scan = statement_scan.scan;
        let slot = pg_sys::table_slot_create(heap, std::ptr::null_mut());
        let found =
            pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, slot);
        let answer = if found {
            pg_sys::slot_getallattrs(slot);
            read(Some(&RowView { slot, heap }))
        } else {
            read(None)
        };
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        statement_scan.end();
        answer
    }
}
