//! Reading a queue's due jobs of one priority in claim order without the executor: the claim
//! index (`job_claim_idx`, keyed by the hash of the queue's name, then priority, run_at and
//! id) is scanned from a position on, and each row version the statement's snapshot sees is
//! checked and read while its buffer is pinned. No SPI, no kept plan to check, no executor to
//! start and end: around the index scan itself, the candidate statement (its scan node and
//! quals set up, the tenant scope's ORs evaluated, its rows copied through SPI) was a large
//! part of what a claim of one job costs.
//!
//! It answers what the statement `engine/claim/candidates_in_priority.sql` answers, no less:
//! the jobs of the queue (its name compared, not only its hash) that are queued and not
//! waiting for their group (checked on the row, not left to the index's predicate), in the
//! priority, from the position on, due by `now`, within the tenant scope, at most `limit`, in
//! claim order. Where a statement would do more (row-level security applies to the function's
//! owner) or the table and index are not as expected (an upgrade in progress, say),
//! [`due_in_priority`] reads nothing and answers `None`, and the caller runs the statement; so
//! it does with `pg_jobs.fast_paths` off.

use std::ffi::CStr;

use pgrx::pg_sys::{self, Datum, Oid};

use super::job_writer::attribute;
use super::{
    btree_expressions, enum_value, key, read_job_index, row_header, text_of, value, Compare,
    StatementScan,
};

/// A due job the scan found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DueJob {
    /// Its priority.
    pub priority: i16,
    /// Its run_at (microseconds since the PostgreSQL epoch).
    pub run_at: i64,
    /// Its id.
    pub id: i64,
    /// Its group key, if any.
    pub group_key: Option<String>,
    /// Its tenant, if any.
    pub tenant: Option<String>,
}

/// What to read.
pub struct DueQuery<'a> {
    /// The queue.
    pub queue: &'a str,
    /// The priority to read in.
    pub priority: i16,
    /// The position in that priority to start at: (run_at, id) from this one on.
    pub from_run_at: i64,
    /// See `from_run_at`.
    pub from_id: i64,
    /// Only jobs due by then (run_at at most this).
    pub now: i64,
    /// Most jobs to return.
    pub limit: usize,
    /// Whose jobs: `None` every job's, `Some([])` only jobs without a tenant, else only these
    /// tenants' jobs.
    pub tenants: Option<&'a [String]>,
    /// Whether to note where the entries at the start of the scan that no row version of the
    /// snapshot backs end ([`DueScan::dead_to`]): a claim that starts at its queue's floor may
    /// raise the floor past them.
    pub note_dead: bool,
}

/// What a scan found.
pub struct DueScan {
    /// The due jobs, in claim order.
    pub jobs: Vec<DueJob>,
    /// With [`DueQuery::note_dead`]: the last of the entries the scan read before the first
    /// row version its snapshot sees (of any job: the first one ends them), when there were
    /// a few; its (run_at, id). While a snapshot older than their claims holds vacuum back,
    /// these are the claimed jobs' entries, which every scan from the same start reads again.
    pub dead_to: Option<(i64, i64)>,
}

/// Where the columns the scan reads are (attribute numbers, 1-based).
struct Columns {
    queue: i16,
    queue_collation: Oid,
    priority: i16,
    run_at: i16,
    id: i16,
    state: i16,
    queued: Oid,
    group_wait: i16,
    group_key: i16,
    tenant: i16,
}

/// The due jobs `query` asks for, as the candidate statement of the caller's transaction would
/// find them now; `None` when this path cannot stand in for the statement.
///
/// # Safety
/// Inside a transaction.
pub unsafe fn due_in_priority(query: &DueQuery<'_>) -> Option<DueScan> {
    // SAFETY: inside a transaction, as the caller promises; the relations stay open for the
    // reads, and the snapshot is registered for the scan and unregistered after it.
    unsafe {
        read_job_index(c"job_claim_idx", |heap, index| {
            columns(heap)
                .filter(|columns| claim_index_fits(heap, index, columns))
                .and_then(|columns| scan(heap, index, &columns, query))
        })
    }
}

/// Where the open `jobs.job` keeps what the scan reads, if it is as expected.
///
/// # Safety
/// `heap` must be an open relation, locked at least as a statement reading it would lock it, for as
/// long as the call runs.
unsafe fn columns(heap: pg_sys::Relation) -> Option<Columns> {
    // SAFETY: an open relation; catalog lookups.
    unsafe {
        let (queue, queue_collation) = attribute(heap, c"queue", pg_sys::TEXTOID)?;
        let desc = pgrx::PgTupleDesc::from_pg_unchecked((*heap).rd_att);
        let state = desc
            .iter()
            .find(|a| !a.attisdropped && CStr::from_ptr(a.attname.data.as_ptr()) == c"state")?;
        let queued = enum_value(state.atttypid, c"queued")?;
        Some(Columns {
            queue,
            queue_collation,
            priority: attribute(heap, c"priority", pg_sys::INT2OID)?.0,
            run_at: attribute(heap, c"run_at", pg_sys::TIMESTAMPTZOID)?.0,
            id: attribute(heap, c"id", pg_sys::INT8OID)?.0,
            state: state.attnum,
            queued,
            group_wait: attribute(heap, c"group_wait", pg_sys::BOOLOID)?.0,
            group_key: attribute(heap, c"group_key", pg_sys::TEXTOID)?.0,
            tenant: attribute(heap, c"tenant", pg_sys::TEXTOID)?.0,
        })
    }
}

/// Whether the open `index` is the claim index the scan expects: a btree on
/// `(hashtext(queue), priority, run_at, id)`.
///
/// # Safety
/// `heap` and `index` must be open, `index` an index of `heap`, and `columns` read from `heap` by
/// [`columns`].
unsafe fn claim_index_fits(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    columns: &Columns,
) -> bool {
    // SAFETY: an open index of the open table; its relcache entry and expressions are read.
    unsafe {
        let keys = [0, columns.priority, columns.run_at, columns.id];
        let Some(expressions) = btree_expressions(heap, index, keys, 1) else {
            return false;
        };
        let expression = (*(*expressions).elements).ptr_value.cast::<pg_sys::Node>();
        if (*expression).type_ != pg_sys::NodeTag::T_FuncExpr {
            return false;
        }
        let call = expression.cast::<pg_sys::FuncExpr>();
        if (*call).funcid != pg_sys::Oid::from(pg_sys::F_HASHTEXT)
            || (*call).args.is_null()
            || (*(*call).args).length != 1
        {
            return false;
        }
        let argument = (*(*(*call).args).elements).ptr_value.cast::<pg_sys::Node>();
        (*argument).type_ == pg_sys::NodeTag::T_Var
            && (*argument.cast::<pg_sys::Var>()).varattno == columns.queue
    }
}

/// The scan itself.
///
/// # Safety
/// `heap` and `index` must be open and locked as a statement's scan would lock them, `index`
/// checked by [`claim_index_fits`] and `columns` read by [`columns`] since their last invalidation;
/// inside a transaction, with SPI free to run.
unsafe fn scan(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    columns: &Columns,
    query: &DueQuery<'_>,
) -> Option<DueScan> {
    // SAFETY: open relations; the scan keys and their values live until the scan ends; the
    // slot and the scan are released before returning.
    unsafe {
        let queue_text =
            pg_sys::cstring_to_text_with_len(query.queue.as_ptr().cast(), query.queue.len() as i32);
        // The index's own function, so the key is the one the index holds.
        let hash = pg_sys::OidFunctionCall1Coll(
            pg_sys::Oid::from(pg_sys::F_HASHTEXT),
            columns.queue_collation,
            Datum::from(queue_text),
        );
        // `(run_at, id) >= (from_run_at, from_id)` as one row comparison, as the executor
        // builds it for the statement: the scan then starts at the position itself, not at the
        // first job of its run_at (a batch's jobs share one, and the claimed ones before the
        // position leave dead entries that a held snapshot keeps).
        let ge = pg_sys::BTGreaterEqualStrategyNumber;
        let (Some(from_run_at), Some(from_id)) = (
            key(
                index,
                3,
                pg_sys::TIMESTAMPTZOID,
                ge,
                Compare::RowMember { last: false },
                Datum::from(query.from_run_at),
            ),
            key(
                index,
                4,
                pg_sys::INT8OID,
                ge,
                Compare::RowMember { last: true },
                Datum::from(query.from_id),
            ),
        ) else {
            return None;
        };
        let mut from = [from_run_at, from_id];
        let from_header = row_header(3, ge, &mut from);
        let eq = pg_sys::BTEqualStrategyNumber;
        // No key bounds run_at by `now`: the scan stops at the first job not due yet instead
        // (claim order within a priority is run_at order), and a btree of PostgreSQL before 17
        // checks every key on every entry of each leaf page it reads (a claim of one job reads a
        // page): one key fewer there costs less than the entries read past the due ones.
        let (Some(queue_key), Some(priority_key)) = (
            key(index, 1, pg_sys::INT4OID, eq, Compare::Condition, hash),
            key(
                index,
                2,
                pg_sys::INT2OID,
                eq,
                Compare::Condition,
                Datum::from(query.priority),
            ),
        ) else {
            return None;
        };
        let mut keys = [queue_key, priority_key, from_header];
        let statement_scan = StatementScan::begin(heap, index, &mut keys);
        let scan = statement_scan.scan;
        let slot = pg_sys::table_slot_create(heap, std::ptr::null_mut());
        let last_column = [
            columns.queue,
            columns.priority,
            columns.run_at,
            columns.id,
            columns.state,
            columns.group_wait,
            columns.group_key,
            columns.tenant,
        ]
        .into_iter()
        .max()
        .unwrap_or(1);
        let queue_bytes = query.queue.as_bytes();
        let mut due = Vec::with_capacity(query.limit.min(1024));
        // The entries at the start that no row version of the snapshot backs: how many, and
        // the last one's row.
        let mut dead_run = query.note_dead;
        let mut dead = 0;
        let mut last_dead = pg_sys::ItemPointerData::default();

        // index_getnext_slot, with the entries whose rows the snapshot does not see in view.
        while due.len() < query.limit {
            // An MVCC snapshot sees at most one version of a chain: each entry is fetched once.
            if pg_sys::index_getnext_tid(scan, pg_sys::ScanDirection::ForwardScanDirection)
                .is_null()
            {
                break;
            }
            if !pg_sys::index_fetch_heap(scan, slot) {
                if dead_run {
                    dead += 1;
                    last_dead = (*scan).xs_heaptid;
                }
                continue;
            }
            dead_run = false;
            if i32::from((*slot).tts_nvalid) < i32::from(last_column) {
                pg_sys::slot_getsomeattrs_int(slot, i32::from(last_column));
            }
            let (Some(queue), Some(state), Some(group_wait), Some(run_at), Some(id)) = (
                value(slot, columns.queue),
                value(slot, columns.state),
                value(slot, columns.group_wait),
                value(slot, columns.run_at),
                value(slot, columns.id),
            ) else {
                continue;
            };
            let run_at = run_at.value() as i64;
            if run_at > query.now {
                break;
            }
            let id = id.value() as i64;
            let queue = pg_sys::pg_detoast_datum_packed(queue.cast_mut_ptr());
            let same_queue = std::slice::from_raw_parts(
                pgrx::varlena::vardata_any(queue).cast::<u8>(),
                pgrx::varlena::varsize_any_exhdr(queue),
            ) == queue_bytes;
            let tenant = value(slot, columns.tenant).and_then(|t| text_of(t));
            let in_scope = match query.tenants {
                None => true,
                Some([]) => tenant.is_none(),
                Some(tenants) => tenant.as_ref().is_some_and(|t| tenants.contains(t)),
            };
            if !same_queue
                || Oid::from(state.value() as u32) != columns.queued
                || group_wait.value() != 0
                || (run_at == query.from_run_at && id < query.from_id)
                || !in_scope
            {
                continue;
            }
            due.push(DueJob {
                priority: query.priority,
                run_at,
                id,
                group_key: value(slot, columns.group_key).and_then(|g| text_of(g)),
                tenant,
            });
        }
        // The entry's key is its row's: a claim changes the job's state, so it writes a new
        // version (and a new entry) and leaves the version the entry points to as it was.
        let dead_to = if dead >= DEAD_RUN_NOTED {
            position_of(heap, columns, last_dead, slot)
        } else {
            None
        };
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        statement_scan.end();
        Some(DueScan { jobs: due, dead_to })
    }
}

/// The shortest run of entries without a row at the start of a scan that [`DueScan::dead_to`]
/// reports: reading a few costs less than the row version that names where they end, and
/// vacuum (or the next scan, once no snapshot sees their rows) soon clears short runs.
const DEAD_RUN_NOTED: usize = 8;

/// The (run_at, id) of the row version at `row`, whether or not any snapshot sees it; `None`
/// when it is gone (pruned).
///
/// # Safety
/// `heap` is open, `columns` read from it, `slot` one of its slots.
unsafe fn position_of(
    heap: pg_sys::Relation,
    columns: &Columns,
    mut row: pg_sys::ItemPointerData,
    slot: *mut pg_sys::TupleTableSlot,
) -> Option<(i64, i64)> {
    // SAFETY: an open relation and its slot; the fetched version is read while the slot holds
    // its buffer pinned.
    unsafe {
        let fetch = (*(*heap).rd_tableam).tuple_fetch_row_version?;
        if !fetch(heap, &mut row, &raw mut pg_sys::SnapshotAnyData, slot) {
            return None;
        }
        pg_sys::slot_getsomeattrs_int(slot, i32::from(columns.run_at.max(columns.id)));
        let run_at = value(slot, columns.run_at)?.value() as i64;
        let id = value(slot, columns.id)?.value() as i64;
        Some((run_at, id))
    }
}
