//! Reading a group's head without the executor: the first entry of the group in its index
//! (`job_group_idx`, keyed by one hash of the queue's name and the group key, then the job's
//! place: 0 for its running jobs, else its id), under the latest snapshot.
//!
//! It answers what a claim of a group of concurrency 1 asks before it takes a job (does a job
//! of the group run, or an unfinished one come before this one?) and what a settle asks before
//! it moves such a group on (is its head waiting?). The statements that asked it set up a plan
//! of several nodes on every call, which cost a settle of one grouped job more than a whole
//! claim and complete of a job without a group; one probe of the index answers it.
//!
//! Where a statement would do more (row-level security applies to the function's owner) or the
//! table and index are not as expected, or `pg_jobs.fast_paths` is off, [`group_heads`] reads
//! nothing and answers `None`, and the caller runs its statement.

use std::cell::Cell;
use std::ffi::CStr;

use pgrx::pg_sys::{self, Datum, Oid};

use super::job_writer::attribute;
use super::{
    btree_expressions, enum_value, key, read_job_index, relcache_invalidations, text_is, text_of,
    value, Compare, StatementScan,
};

/// The first unfinished job of a group: a running one if any runs, else its first queued one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupHead {
    /// Its id.
    pub id: i64,
    /// Whether it runs.
    pub running: bool,
    /// Whether it is queued and marked waiting for its group (`group_wait`).
    pub waiting: bool,
    /// Its priority.
    pub priority: i16,
    /// Its run_at, in microseconds since the PostgreSQL epoch.
    pub run_at: i64,
    /// Its kind.
    pub kind: String,
}

/// A group to read: its queue, key and tenant.
#[derive(Clone, Copy, Debug)]
pub struct GroupName<'a> {
    /// The queue.
    pub queue: &'a str,
    /// The group key.
    pub key: &'a str,
    /// The tenant of its jobs, if any.
    pub tenant: Option<&'a str>,
    /// Read only the entries whose place is below this (a claim's candidate): whether a job of
    /// the group runs or comes before it. A btree of PostgreSQL before 17 checks every entry
    /// of the group on the leaf page it reads; the bound stops it at the candidate.
    pub before: Option<i64>,
}

/// Where the columns the scan reads are (attribute numbers, 1-based), and the states it knows.
#[derive(Clone, Copy)]
struct Columns {
    queue: i16,
    queue_collation: Oid,
    group_key: i16,
    group_key_collation: Oid,
    tenant: i16,
    id: i16,
    state: i16,
    group_wait: i16,
    priority: i16,
    run_at: i16,
    kind: i16,
    queued: Oid,
    running: Oid,
}

/// The heads of `groups`, one answer per group in the order given (`None` for a group with no
/// unfinished job, or none placed before its `before`), as a statement of the caller's
/// transaction would see them under the latest snapshot; `None` when this path cannot stand in
/// for the statements.
///
/// # Safety
/// Inside a transaction.
pub unsafe fn group_heads(groups: &[GroupName<'_>]) -> Option<Vec<Option<GroupHead>>> {
    // SAFETY: inside a transaction, as the caller promises; the relations stay open for the
    // reads, and each scan's snapshot is registered for it and unregistered after it.
    unsafe {
        read_job_index(c"job_group_idx", |heap, index| {
            layout(heap, index).and_then(|columns| heads(heap, index, &columns, groups))
        })
    }
}

/// What the session found of `jobs.job` and its group index, while no relcache invalidation came
/// since.
#[derive(Clone, Copy)]
struct Layout {
    job: Oid,
    index: Oid,
    invalidations: u64,
    columns: Columns,
}

thread_local! {
    static LAYOUT: Cell<Option<Layout>> = const { Cell::new(None) };
}

/// The columns of the open `heap` the scan reads, if it and its open group `index` are as
/// expected; checked once per session and again after a relcache invalidation (the checks
/// copy the index's expressions, too costly for every call).
///
/// # Safety
/// `heap` and `index` must be open, `index` an index of `heap`, inside a transaction.
unsafe fn layout(heap: pg_sys::Relation, index: pg_sys::Relation) -> Option<Columns> {
    // SAFETY: open relations, as the checks require.
    unsafe {
        let (job, index_oid) = ((*heap).rd_id, (*index).rd_id);
        let invalidations = relcache_invalidations();
        let kept = LAYOUT.with(Cell::get).filter(|kept| {
            kept.job == job && kept.index == index_oid && kept.invalidations == invalidations
        });
        if let Some(kept) = kept {
            return Some(kept.columns);
        }
        let columns = columns(heap).filter(|columns| group_index_fits(heap, index, columns))?;
        LAYOUT.with(|cell| {
            cell.set(Some(Layout {
                job,
                index: index_oid,
                invalidations,
                columns,
            }))
        });
        Some(columns)
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
        let (group_key, group_key_collation) = attribute(heap, c"group_key", pg_sys::TEXTOID)?;
        let desc = pgrx::PgTupleDesc::from_pg_unchecked((*heap).rd_att);
        let state = desc
            .iter()
            .find(|a| !a.attisdropped && CStr::from_ptr(a.attname.data.as_ptr()) == c"state")?;
        Some(Columns {
            queue,
            queue_collation,
            group_key,
            group_key_collation,
            tenant: attribute(heap, c"tenant", pg_sys::TEXTOID)?.0,
            id: attribute(heap, c"id", pg_sys::INT8OID)?.0,
            state: state.attnum,
            group_wait: attribute(heap, c"group_wait", pg_sys::BOOLOID)?.0,
            priority: attribute(heap, c"priority", pg_sys::INT2OID)?.0,
            run_at: attribute(heap, c"run_at", pg_sys::TIMESTAMPTZOID)?.0,
            kind: attribute(heap, c"kind", pg_sys::TEXTOID)?.0,
            queued: enum_value(state.atttypid, c"queued")?,
            running: enum_value(state.atttypid, c"running")?,
        })
    }
}

/// The `index`-th element of the list `list`, if it has one.
///
/// # Safety
/// `list` must be NULL or a valid `List` of nodes.
unsafe fn nth(list: *mut pg_sys::List, index: i32) -> Option<*mut pg_sys::Node> {
    // SAFETY: a valid list or NULL.
    unsafe {
        (!list.is_null() && index < (*list).length)
            .then(|| (*(*list).elements.add(index as usize)).ptr_value.cast())
    }
}

/// Whether `node` is a call of function `function` (by oid); its arguments then.
///
/// # Safety
/// `node` must be NULL or a valid expression node.
unsafe fn call_of(node: *mut pg_sys::Node, function: u32) -> Option<*mut pg_sys::List> {
    // SAFETY: a valid expression node.
    unsafe {
        let is_call = !node.is_null()
            && (*node).type_ == pg_sys::NodeTag::T_FuncExpr
            && (*node.cast::<pg_sys::FuncExpr>()).funcid == Oid::from(function);
        is_call.then(|| (*node.cast::<pg_sys::FuncExpr>()).args)
    }
}

/// Whether `node` is column `attnum` of the indexed table.
///
/// # Safety
/// `node` must be NULL or a valid expression node.
unsafe fn is_column(node: *mut pg_sys::Node, attnum: i16) -> bool {
    // SAFETY: a valid expression node.
    unsafe {
        !node.is_null()
            && (*node).type_ == pg_sys::NodeTag::T_Var
            && (*node.cast::<pg_sys::Var>()).varattno == attnum
    }
}

/// The oid of `int8(integer)`, the cast of the queue name's hash to the seed's type (fmgroids.h
/// names it `F_INT48` before PostgreSQL 14, `F_INT8_INT4` since; the oid never changed).
const INT8_OF_INT4: u32 = 481;

/// Whether the open `index` is the group index the scan expects: a btree on
/// `(hashtextextended(group_key, hashtext(queue)), CASE WHEN state = 'running' THEN 0 ELSE id
/// END)`, whose second column orders a group's running jobs first, then its queued ones by id.
///
/// # Safety
/// `heap` and `index` must be open, `index` an index of `heap`, and `columns` read from `heap` by
/// [`columns`].
unsafe fn group_index_fits(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    columns: &Columns,
) -> bool {
    // SAFETY: an open index of the open table; its relcache entry and expressions are read.
    unsafe {
        let Some(expressions) = btree_expressions(heap, index, [0, 0], 2) else {
            return false;
        };
        // The hash: the group key's, seeded by the queue name's (cast to bigint).
        let Some(hash) = nth(expressions, 0).and_then(|e| call_of(e, pg_sys::F_HASHTEXTEXTENDED))
        else {
            return false;
        };
        let seed = nth(hash, 1)
            .and_then(|e| call_of(e, INT8_OF_INT4))
            .and_then(|args| nth(args, 0))
            .and_then(|e| call_of(e, pg_sys::F_HASHTEXT))
            .and_then(|args| nth(args, 0));
        if !nth(hash, 0).is_some_and(|e| is_column(e, columns.group_key))
            || !seed.is_some_and(|e| is_column(e, columns.queue))
        {
            return false;
        }
        // The place: a CASE of one WHEN whose ELSE is the id (running jobs' place comes first).
        let Some(place) = nth(expressions, 1) else {
            return false;
        };
        if (*place).type_ != pg_sys::NodeTag::T_CaseExpr {
            return false;
        }
        let case = place.cast::<pg_sys::CaseExpr>();
        let Some(when) = nth((*case).args, 0) else {
            return false;
        };
        let zero = (*when.cast::<pg_sys::CaseWhen>())
            .result
            .cast::<pg_sys::Node>();
        (*(*case).args).length == 1
            && is_column((*case).defresult.cast(), columns.id)
            && !zero.is_null()
            && (*zero).type_ == pg_sys::NodeTag::T_Const
            && (*zero.cast::<pg_sys::Const>()).consttype == pg_sys::INT8OID
            && (*zero.cast::<pg_sys::Const>()).constvalue.value() == 0
    }
}

/// The hash `job_group_idx` keys `group` by, computed by the functions its expression calls.
///
/// # Safety
/// `columns` must come from [`layout`] in this session, since the last invalidation of the
/// relations, inside a transaction (the hash functions run as the index's expression would).
unsafe fn group_hash(columns: &Columns, group: &GroupName<'_>) -> Datum {
    // SAFETY: calls of built-in hash functions on texts made here.
    unsafe {
        let queue =
            pg_sys::cstring_to_text_with_len(group.queue.as_ptr().cast(), group.queue.len() as i32);
        let key =
            pg_sys::cstring_to_text_with_len(group.key.as_ptr().cast(), group.key.len() as i32);
        let seed = pg_sys::OidFunctionCall1Coll(
            Oid::from(pg_sys::F_HASHTEXT),
            columns.queue_collation,
            Datum::from(queue),
        );
        let seed = i64::from(seed.value() as i32);
        pg_sys::OidFunctionCall2Coll(
            Oid::from(pg_sys::F_HASHTEXTEXTENDED),
            columns.group_key_collation,
            Datum::from(key),
            Datum::from(seed),
        )
    }
}

/// The scans, one per group in one index scan begun once: each group's first entry whose row,
/// under the latest snapshot, is a queued or running job of the group (entries of groups whose
/// keys hash alike are passed over).
///
/// # Safety
/// `heap` and `index` must be open and locked as a statement's scan would lock them, their layout
/// checked by [`layout`] into `columns`; inside a transaction.
unsafe fn heads(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    columns: &Columns,
    groups: &[GroupName<'_>],
) -> Option<Vec<Option<GroupHead>>> {
    // SAFETY: open relations; the scan key and its value live until the scan ends; the slot
    // and the scan are released before returning.
    unsafe {
        let Some(first) = groups.first() else {
            return Some(Vec::new());
        };
        let hash_key = key(
            index,
            1,
            pg_sys::INT8OID,
            pg_sys::BTEqualStrategyNumber,
            Compare::Condition,
            group_hash(columns, first),
        )?;
        // The bound only when asked: a key costs a check on every entry the scan reads.
        let bounded = groups.iter().any(|group| group.before.is_some());
        let place_key = key(
            index,
            2,
            pg_sys::INT8OID,
            pg_sys::BTLessStrategyNumber,
            Compare::Condition,
            Datum::from(first.before.unwrap_or(i64::MAX)),
        )?;
        let mut both = [hash_key, place_key];
        let keys = if bounded {
            &mut both[..]
        } else {
            &mut both[..1]
        };
        let statement_scan = StatementScan::begin_latest(heap, index, keys);
        let slot = pg_sys::table_slot_create(heap, std::ptr::null_mut());
        let mut found = Vec::with_capacity(groups.len());
        for (n, group) in groups.iter().enumerate() {
            if n > 0 {
                keys[0].sk_argument = group_hash(columns, group);
                if let Some(place) = keys.get_mut(1) {
                    place.sk_argument = Datum::from(group.before.unwrap_or(i64::MAX));
                }
                statement_scan.rescan(keys);
            }
            found.push(head(statement_scan.scan, slot, columns, group));
        }
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        statement_scan.end();
        Some(found)
    }
}

/// The head of `group`, read by `scan` (its key set to the group's hash) into `slot`.
///
/// # Safety
/// `scan` must be an index scan begun by [`heads`] on the group index, `slot` a slot of the heap's
/// tuple descriptor, both still open.
unsafe fn head(
    scan: pg_sys::IndexScanDesc,
    slot: *mut pg_sys::TupleTableSlot,
    columns: &Columns,
    group: &GroupName<'_>,
) -> Option<GroupHead> {
    let last_column = [
        columns.queue,
        columns.group_key,
        columns.tenant,
        columns.id,
        columns.state,
        columns.group_wait,
        columns.priority,
        columns.run_at,
        columns.kind,
    ]
    .into_iter()
    .max()
    .unwrap_or(1);
    // SAFETY: a scan begun on the group index with its key set, and a slot of its table.
    unsafe {
        while pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, slot) {
            pg_sys::slot_getsomeattrs_int(slot, i32::from(last_column));
            let (Some(state), Some(id), Some(group_wait)) = (
                value(slot, columns.state),
                value(slot, columns.id),
                value(slot, columns.group_wait),
            ) else {
                continue;
            };
            let state = Oid::from(state.value() as u32);
            if state != columns.queued && state != columns.running {
                continue;
            }
            let same_group = text_is(value(slot, columns.queue), Some(group.queue))
                && text_is(value(slot, columns.group_key), Some(group.key))
                && text_is(value(slot, columns.tenant), group.tenant);
            if !same_group {
                continue;
            }
            let running = state == columns.running;
            let (Some(priority), Some(run_at), Some(kind)) = (
                value(slot, columns.priority),
                value(slot, columns.run_at),
                value(slot, columns.kind).and_then(|kind| text_of(kind)),
            ) else {
                continue;
            };
            return Some(GroupHead {
                id: id.value() as i64,
                running,
                waiting: !running && group_wait.value() != 0,
                priority: priority.value() as i16,
                run_at: run_at.value() as i64,
                kind,
            });
        }
        None
    }
}
