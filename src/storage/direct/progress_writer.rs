//! Writing schedules' progress without the executor: a run has locked the due schedules' rows
//! (`FOR UPDATE`), and replaces each locked version by one with the new progress (`next_slot`,
//! `due_floor`, `last_slot`, `last_job`), as `UPDATE ... WHERE ctid = ...` would, without the
//! statement around it: no unnest of parameter arrays, no join, no plan. Each row is fetched by
//! its ctid, the check constraints that read a progress column are enforced on the new version
//! (the others read only columns it keeps), the heap update is
//! heap-only where no indexed column changed (most runs: see `engine::schedules`), and index
//! entries are made where it is not.
//!
//! Where the executor would do more than that (triggers other than the foreign key's checks,
//! which an update that keeps the key does not need; row-level security for the owner; an
//! index that is not a btree; generated columns), or `pg_jobs.fast_paths` is off, [`write`]
//! writes nothing and answers `false`, and the caller runs its SQL statement instead.

use std::ffi::CStr;

use pgrx::pg_sys::{self, Datum, Oid};

use super::{jobs_relation, row_security_applies};
use crate::config::settings::fast_paths;
use crate::pg::version;

/// The new progress of one schedule whose row the caller holds locked.
pub struct Progress {
    /// The locked row version.
    pub row: pg_sys::ItemPointerData,
    /// The first slot not handled yet (`None`: there is none).
    pub next_slot: Option<pg_sys::TimestampTz>,
    /// The lower bound of `next_slot` the due schedules are found by.
    pub due_floor: Option<pg_sys::TimestampTz>,
    /// The last slot enqueued (`None`: kept as it is).
    pub last_slot: Option<pg_sys::TimestampTz>,
    /// Its job (`None`: kept as it is).
    pub last_job: Option<i64>,
}

/// A ctid as `tid` prints it, `(block,offset)`.
pub fn parse_tid(text: &str) -> Option<pg_sys::ItemPointerData> {
    let inner = text.strip_prefix('(')?.strip_suffix(')')?;
    let (block, offset) = inner.split_once(',')?;
    let block: u32 = block.trim().parse().ok()?;
    let offset: u16 = offset.trim().parse().ok()?;
    Some(pg_sys::ItemPointerData {
        ip_blkid: pg_sys::BlockIdData {
            bi_hi: (block >> 16) as u16,
            bi_lo: (block & 0xffff) as u16,
        },
        ip_posid: offset,
    })
}

/// Where the progress columns are in the row (0-based).
struct Columns {
    next_slot: usize,
    due_floor: usize,
    last_slot: usize,
    last_job: usize,
}

/// Writes `progress`; `false` when this path cannot stand in for the SQL statement (nothing
/// was written then), as with `pg_jobs.fast_paths` off.
///
/// # Safety
/// Inside the transaction that locked every row named in `progress`.
pub unsafe fn write(progress: &[Progress]) -> bool {
    if !fast_paths() {
        return false;
    }
    // SAFETY: catalog lookups and a relation opened and closed here (its lock kept until the
    // transaction ends), as this function requires.
    unsafe {
        let Some(oid) = jobs_relation(c"schedule") else {
            return false;
        };
        let rel = pg_sys::table_open(oid, pg_sys::RowExclusiveLock as i32);
        let columns = columns(rel).filter(|_| plain(rel, oid));
        if let Some(columns) = &columns {
            write_in(rel, columns, progress);
        }
        pg_sys::table_close(rel, pg_sys::NoLock as i32);
        columns.is_some()
    }
}

/// The progress columns of the open `rel`, if it has them with the types they must have (and
/// nullable).
///
/// # Safety
/// `rel` must be an open relation, locked at least as a statement reading it would lock it, for as
/// long as the call runs.
unsafe fn columns(rel: pg_sys::Relation) -> Option<Columns> {
    // SAFETY: the relcache's descriptor of an open relation.
    let desc = unsafe { pgrx::PgTupleDesc::from_pg_unchecked((*rel).rd_att) };
    let find = |name: &CStr, type_oid: Oid| -> Option<usize> {
        desc.iter()
            .position(|a| {
                // SAFETY: attname is a NUL-terminated NameData.
                !a.attisdropped && unsafe { CStr::from_ptr(a.attname.data.as_ptr()) } == name
            })
            // NULL is a value the writes give them: a NOT NULL column would need its check.
            .filter(|&at| {
                desc.get(at)
                    .is_some_and(|a| a.atttypid == type_oid && !a.attnotnull)
            })
    };
    Some(Columns {
        next_slot: find(c"next_slot", pg_sys::TIMESTAMPTZOID)?,
        due_floor: find(c"due_floor", pg_sys::TIMESTAMPTZOID)?,
        last_slot: find(c"last_slot", pg_sys::TIMESTAMPTZOID)?,
        last_job: find(c"last_job", pg_sys::INT8OID)?,
    })
}

/// Whether an UPDATE of the open `rel` (with oid `oid`) would do nothing that [`write_in`]
/// does not.
///
/// # Safety
/// `rel` must be an open relation, locked at least as a statement reading it would lock it, for as
/// long as the call runs. `oid` must be its oid.
unsafe fn plain(rel: pg_sys::Relation, oid: Oid) -> bool {
    // SAFETY: an open relation; its indexes are opened and closed here.
    unsafe {
        if (*(*rel).rd_rel).relkind != pg_sys::RELKIND_RELATION as core::ffi::c_char {
            return false;
        }
        let triggers = (*rel).trigdesc;
        if !triggers.is_null() {
            for i in 0..(*triggers).numtriggers as usize {
                let trigger = (*triggers).triggers.add(i);
                if pg_sys::RI_FKey_trigger_type((*trigger).tgfoid) != pg_sys::RI_TRIGGER_FK as i32 {
                    return false;
                }
            }
        }
        if row_security_applies(oid) {
            return false;
        }
        // The relcache's descriptor, not reference counted by us; read through pgrx, as the
        // layout of its attribute array changed in PostgreSQL 18.
        let desc = pgrx::PgTupleDesc::from_pg_unchecked((*rel).rd_att);
        if desc.iter().any(|attribute| attribute.attgenerated != 0) {
            return false;
        }
        let list = pg_sys::RelationGetIndexList(rel);
        let count = if list.is_null() { 0 } else { (*list).length };
        let mut btrees_only = true;
        for i in 0..count {
            let index_oid = (*(*list).elements.add(i as usize)).oid_value;
            let index = pg_sys::index_open(index_oid, pg_sys::RowExclusiveLock as i32);
            btrees_only &= (*(*index).rd_rel).relam == pg_sys::BTREE_AM_OID;
            pg_sys::index_close(index, pg_sys::NoLock as i32);
        }
        pg_sys::list_free(list);
        btrees_only
    }
}

/// The check constraints of the open `rel` that read a progress column, compiled in the
/// current memory context, with their names. The others read only columns a progress write
/// leaves as they are, so they held for the old version and hold for the new one; the progress
/// columns may be NULL.
///
/// # Safety
/// `rel` must be an open relation, locked at least as a statement reading it would lock it, for as
/// long as the call runs. `columns` must be read from it by [`columns`].
unsafe fn checks_on(
    rel: pg_sys::Relation,
    columns: &Columns,
) -> Vec<(String, *mut pg_sys::ExprState)> {
    let mut checks = Vec::new();
    // SAFETY: the relcache's constraints of an open relation; the expressions are planned and
    // compiled in the current (executor state's) memory.
    unsafe {
        let constr = (*(*rel).rd_att).constr;
        if constr.is_null() {
            return checks;
        }
        let progress = [
            columns.next_slot,
            columns.due_floor,
            columns.last_slot,
            columns.last_job,
        ];
        for i in 0..(*constr).num_check as usize {
            let check = (*constr).check.add(i);
            let expr = pg_sys::stringToNode((*check).ccbin).cast::<pg_sys::Expr>();
            let mut read: *mut pg_sys::Bitmapset = std::ptr::null_mut();
            pg_sys::pull_varattnos(expr.cast(), 1, &mut read);
            let reads_progress = progress.iter().any(|&at| {
                let attnum = at as i32 + 1;
                pg_sys::bms_is_member(attnum - pg_sys::FirstLowInvalidHeapAttributeNumber, read)
            });
            if !reads_progress {
                continue;
            }
            checks.push(super::job_writer::compile_check(check, expr));
        }
    }
    checks
}

/// The writes themselves.
///
/// # Safety
/// `rel` must be open and locked ROW EXCLUSIVE, checked by [`plain`], `columns` read by
/// [`columns`]; each row named in `progress` locked by this transaction, inside it.
unsafe fn write_in(rel: pg_sys::Relation, columns: &Columns, progress: &[Progress]) {
    // SAFETY: as write requires; every allocation is in the executor state's memory, freed at
    // the end, and each row's expression memory is reset after it.
    unsafe {
        let estate = pg_sys::CreateExecutorState();
        let previous = pg_sys::MemoryContextSwitchTo((*estate).es_query_cxt);
        let econtext = pg_sys::MakePerTupleExprContext(estate);
        let result = pg_sys::palloc0(std::mem::size_of::<pg_sys::ResultRelInfo>())
            .cast::<pg_sys::ResultRelInfo>();
        pg_sys::InitResultRelInfo(result, rel, 0, std::ptr::null_mut(), 0);
        pg_sys::ExecOpenIndices(result, false);
        // The locked versions may be newer than the run's first snapshot (a version another
        // run committed, which the lock followed): read them as of now.
        let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
        let desc = (*rel).rd_att;
        let natts = (*desc).natts as usize;
        let old = pg_sys::table_slot_create(rel, std::ptr::null_mut());
        let new = pg_sys::MakeSingleTupleTableSlot(desc, &raw const pg_sys::TTSOpsVirtual);
        let checks = checks_on(rel, columns);
        let fetch = (*(*rel).rd_tableam)
            .tuple_fetch_row_version
            .expect("a table access method");
        for entry in progress {
            let mut row = entry.row;
            if !fetch(rel, &mut row, snapshot, old) {
                panic!("pg_jobs could not read a schedule row its run holds locked");
            }
            pg_sys::slot_getallattrs(old);
            pg_sys::ExecClearTuple(new);
            let values = std::slice::from_raw_parts_mut((*new).tts_values, natts);
            let nulls = std::slice::from_raw_parts_mut((*new).tts_isnull, natts);
            values.copy_from_slice(std::slice::from_raw_parts((*old).tts_values, natts));
            nulls.copy_from_slice(std::slice::from_raw_parts((*old).tts_isnull, natts));
            let mut set = |at: usize, value: Option<Datum>| {
                values[at] = value.unwrap_or(Datum::from(0));
                nulls[at] = value.is_none();
            };
            set(columns.next_slot, entry.next_slot.map(Datum::from));
            set(columns.due_floor, entry.due_floor.map(Datum::from));
            if let Some(last_slot) = entry.last_slot {
                set(columns.last_slot, Some(Datum::from(last_slot)));
            }
            if let Some(last_job) = entry.last_job {
                set(columns.last_job, Some(Datum::from(last_job)));
            }
            pg_sys::ExecStoreVirtualTuple(new);
            (*econtext).ecxt_scantuple = new;
            for (name, check) in &checks {
                if !pg_sys::ExecCheck(*check, econtext) {
                    crate::pg::errors::raise(
                        pgrx::PgSqlErrorCode::ERRCODE_CHECK_VIOLATION,
                        format!(
                            "new row for relation \"schedule\" violates check constraint \"{name}\""
                        ),
                    );
                }
            }
            if version::update_row(rel, &mut row, new, snapshot) {
                let recheck = version::insert_index_entries(result, new, estate);
                pg_sys::list_free(recheck);
            }
            pg_sys::ExecClearTuple(old);
            pg_sys::MemoryContextReset((*econtext).ecxt_per_tuple_memory);
        }
        pg_sys::ExecDropSingleTupleTableSlot(old);
        pg_sys::ExecDropSingleTupleTableSlot(new);
        pg_sys::UnregisterSnapshot(snapshot);
        pg_sys::ExecCloseIndices(result);
        pg_sys::MemoryContextSwitchTo(previous);
        pg_sys::FreeExecutorState(estate);
    }
}

#[cfg(test)]
mod tests {
    use super::parse_tid;

    #[test]
    fn ctids_read_as_tid_prints_them() {
        let tid = parse_tid("(70000,12)").expect("a ctid");
        assert_eq!(
            (u32::from(tid.ip_blkid.bi_hi) << 16) | u32::from(tid.ip_blkid.bi_lo),
            70_000
        );
        assert_eq!(tid.ip_posid, 12);
        assert!(parse_tid("70000,12").is_none());
        assert!(parse_tid("(a,1)").is_none());
    }
}
