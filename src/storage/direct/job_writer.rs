//! Inserting jobs into `jobs.job` without the executor: the session
//! keeps what the executor would rebuild for every statement (the column defaults and check
//! constraints compiled, every index's description with its predicate and expressions
//! compiled), and an enqueue forms the rows, inserts them into the heap (many rows at once
//! through the table's multi-insert, one WAL record per page) and into each index.
//!
//! It does what `INSERT INTO jobs.job ... SELECT ... FROM jobs.queue` did, no less: the queue
//! row is read under a fresh snapshot (so a drop that committed while the caller waited for the
//! queue lock is seen), or taken from the rows the session read before while no queue changed
//! since ([`QueueRowUse`]: the caller decides, from the shared generation of queue settings that
//! every such commit bumps before its queue lock goes), every column default is evaluated (the id from its identity sequence),
//! check constraints and NOT NULL are enforced, and partial indexes get only the rows their
//! predicate admits. A job with a unique key is checked by the unique index as it is inserted.
//! A single one goes in speculatively, as `INSERT ... ON CONFLICT` inserts a row: a held key
//! (or one another transaction is inserting) is noted, the row killed again, and the writer
//! answers [`Inserted::KeyHeld`]. In a batch a held key raises 23505 (a holder being inserted
//! is waited for), as a plain INSERT would; the caller, which wants `ON CONFLICT` behaviour,
//! runs the batch in a subtransaction. Either way it then takes the SQL path. Where the executor
//! would do more than that (the table has triggers, or
//! row-level security applies to the function's owner), or where `pg_jobs.fast_paths` is off,
//! [`JobWriter::insert`] answers `None` and the caller runs its SQL statement instead.
//!
//! What is kept is dropped when PostgreSQL invalidates the relcache entry of `jobs.job`,
//! `jobs.queue` or any of their indexes (an upgrade, a new index, `ALTER TABLE`), and rebuilt
//! on next use.

use std::cell::{Cell, RefCell};
use std::ffi::CStr;

use pgrx::pg_sys::{self, Datum, Oid};
use pgrx::{IntoDatum, PgTupleDesc};

use super::{jobs_relation, row_security_applies, Generational};
use crate::config::settings::fast_paths;
use crate::pg::version;

/// The columns of `jobs.job` an enqueue sets; the others take their defaults.
#[derive(Clone, Copy)]
enum Column {
    Queue,
    Kind,
    Payload,
    Headers,
    Priority,
    RunAt,
    MaxAttempts,
    Tenant,
    GroupKey,
    UniqueKey,
    UniqueHold,
    UniqueFor,
    GroupWait,
    KindIndexed,
}

/// How many columns an enqueue sets.
const SET_COLUMN_COUNT: usize = 14;

/// Each column an enqueue sets, with its name and the type it must have.
const SET_COLUMNS: [(Column, &CStr, Oid); SET_COLUMN_COUNT] = [
    (Column::Queue, c"queue", pg_sys::TEXTOID),
    (Column::Kind, c"kind", pg_sys::TEXTOID),
    (Column::Payload, c"payload", pg_sys::JSONBOID),
    (Column::Headers, c"headers", pg_sys::JSONBOID),
    (Column::Priority, c"priority", pg_sys::INT2OID),
    (Column::RunAt, c"run_at", pg_sys::TIMESTAMPTZOID),
    (Column::MaxAttempts, c"max_attempts", pg_sys::INT4OID),
    (Column::Tenant, c"tenant", pg_sys::TEXTOID),
    (Column::GroupKey, c"group_key", pg_sys::TEXTOID),
    (Column::UniqueKey, c"unique_key", pg_sys::TEXTOID),
    (Column::UniqueHold, c"unique_hold", pg_sys::BOOLOID),
    (Column::UniqueFor, c"unique_for", pg_sys::INTERVALOID),
    (Column::GroupWait, c"group_wait", pg_sys::BOOLOID),
    (Column::KindIndexed, c"kind_indexed", pg_sys::BOOLOID),
];

/// A column's value for the jobs of one insert: the same for every job, or one per job.
#[derive(Clone, Copy)]
pub enum PerJob<'a, T> {
    /// Every job has this value.
    All(T),
    /// Job `i` has element `i` (as many as there are payloads).
    Each(&'a [T]),
}

impl<T: Copy> PerJob<'_, T> {
    /// The value of job `index`.
    fn at(&self, index: usize) -> T {
        match self {
            PerJob::All(value) => *value,
            PerJob::Each(values) => values[index],
        }
    }

    /// Whether there is a value for each of `count` jobs.
    fn fits(&self, count: usize) -> bool {
        match self {
            PerJob::All(_) => true,
            PerJob::Each(values) => values.len() == count,
        }
    }
}

/// The jobs of one insert, all into one queue: one payload each, and the other columns shared
/// or one per job.
pub struct NewJobs<'a> {
    /// The queue.
    pub queue: &'a str,
    /// The kind of the jobs.
    pub kind: PerJob<'a, &'a str>,
    /// The payload of each job (jsonb datums, valid for the call).
    pub payloads: &'a [Datum],
    /// The headers of the jobs (jsonb datums), if any.
    pub headers: PerJob<'a, Option<Datum>>,
    /// The priority of the jobs.
    pub priority: PerJob<'a, i16>,
    /// When the jobs become due.
    pub run_at: PerJob<'a, pg_sys::TimestampTz>,
    /// Attempts of the jobs; `None` takes the queue's setting.
    pub max_attempts: PerJob<'a, Option<i32>>,
    /// The tenant of every job, if any.
    pub tenant: Option<&'a str>,
    /// The group of the jobs, if any.
    pub group_keys: PerJob<'a, Option<&'a str>>,
    /// Whether each job waits for its group (`group_wait`: see `engine::groups`).
    pub group_waits: PerJob<'a, bool>,
    /// The unique key of each job (one per payload; empty when no job has one). A job with a
    /// key holds it (`unique_hold`).
    pub unique_keys: &'a [Option<&'a str>],
    /// The `unique_for` window of every job (an interval datum), if any.
    pub unique_for: Option<Datum>,
    /// Whether the queue's row may come from what the session keeps.
    pub queue_row: QueueRowUse,
}

/// How an insert may use the queue rows the session keeps (the queue's existence and its
/// `max_attempts`), instead of reading `jobs.queue` (an index scan under a fresh snapshot in
/// every enqueue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueRowUse {
    /// Read the row, keep nothing.
    Read,
    /// Queue settings are at `generation` (read after the queue lock was taken, before any
    /// snapshot the insert takes): a row kept under it is current. A row read now is kept
    /// under it only if `keep` (the insert's snapshot is then newer than the generation).
    Kept {
        /// The shared generation of queue settings.
        generation: u64,
        /// Whether a row read now may be kept.
        keep: bool,
    },
}

/// What an insert found.
pub enum Inserted {
    /// The ids of the new jobs, in payload order.
    Ids(Vec<i64>),
    /// The queue does not exist (nothing was inserted).
    UnknownQueue,
    /// A single job's unique key is held by another job, or may be (another transaction is
    /// inserting one): its row was inserted speculatively and is dead now, and the caller
    /// resolves the duplicate with its `ON CONFLICT` statements.
    KeyHeld,
}

/// An index of `jobs.job`, as the session keeps it.
struct KeptIndex {
    oid: Oid,
    /// Its predicate, compiled (null: it has none).
    predicate: *mut pg_sys::ExprState,
    /// BuildIndexInfo's description, with the expressions compiled and without the predicate,
    /// which the writer checks before it opens the index (see [`insert_with`]).
    info: *mut pg_sys::IndexInfo,
}

/// What the session keeps to write `jobs.job`, in a memory context of its own.
struct Kept {
    context: pg_sys::MemoryContext,
    job: Oid,
    queue: Oid,
    queue_pkey: Oid,
    /// Attribute numbers (1-based) of jobs.queue's `name`, `max_attempts` and
    /// `claims_by_kind`, and the collation of `name` (its primary key's).
    queue_name: i16,
    queue_name_collation: Oid,
    queue_max_attempts: i16,
    queue_claims_by_kind: i16,
    /// Attribute number of each column an enqueue sets, in [`SET_COLUMNS`] order.
    set: [i16; SET_COLUMN_COUNT],
    /// Attribute number of `id`.
    id: i16,
    natts: usize,
    /// A copy of the table's row type, not reference counted: the slots of an insert use it
    /// without pinning the relcache's (a resource-owner entry per slot).
    row_type: pg_sys::TupleDesc,
    /// The other columns' defaults: (attribute number, compiled expression).
    defaults: Vec<(i16, *mut pg_sys::ExprState)>,
    /// Columns that must not be NULL (attribute numbers).
    not_null: Vec<i16>,
    /// The table's check constraints, compiled, with their names.
    checks: Vec<(String, *mut pg_sys::ExprState)>,
    indexes: Vec<KeptIndex>,
}

thread_local! {
    static KEPT: RefCell<Option<Kept>> = const { RefCell::new(None) };
    /// Set by the relcache callback: what is kept must be rebuilt before next use.
    static STALE: Cell<bool> = const { Cell::new(false) };
    static CALLBACK_REGISTERED: Cell<bool> = const { Cell::new(false) };
    /// What enqueues read of queues in this session, current while the generation of queue
    /// settings is the one they were read under. Dropped with what is kept, so an
    /// invalidation of `jobs.queue` (a TRUNCATE, the extension dropped and created again)
    /// drops them too.
    static QUEUE_ROWS: RefCell<Generational<QueueValues>> = RefCell::new(Generational::new());
}

/// Called by PostgreSQL when a relcache entry is invalidated (`relid` 0: all of them).
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn relcache_invalidated(_arg: Datum, relid: Oid) {
    let ours = KEPT.with(|kept| {
        kept.borrow().as_ref().is_none_or(|k| {
            relid == pg_sys::InvalidOid
                || relid == k.job
                || relid == k.queue
                || relid == k.queue_pkey
                || k.indexes.iter().any(|i| i.oid == relid)
        })
    });
    if ours {
        STALE.with(|s| s.set(true));
    }
}

/// What an enqueue reads of its queue's row.
#[derive(Clone, Copy)]
struct QueueValues {
    /// The attempts of jobs that name none.
    max_attempts: i32,
    /// Whether its jobs go into the kinds index.
    claims_by_kind: bool,
}

/// Inserts jobs into `jobs.job` the way the session keeps ready.
pub struct JobWriter;

impl JobWriter {
    /// Inserts `jobs`; `None` when this path cannot stand in for the SQL statement here, or
    /// `pg_jobs.fast_paths` is off (the caller then runs the statement).
    ///
    /// # Safety
    /// Inside a transaction, with the queue lock held (shared) as the enqueue statements
    /// require; the datums in `jobs` are valid for the call.
    pub unsafe fn insert(jobs: &NewJobs<'_>) -> Option<Inserted> {
        let count = jobs.payloads.len();
        debug_assert!(
            jobs.kind.fits(count)
                && jobs.headers.fits(count)
                && jobs.priority.fits(count)
                && jobs.run_at.fits(count)
                && jobs.max_attempts.fits(count)
                && jobs.group_keys.fits(count)
                && jobs.group_waits.fits(count)
        );
        debug_assert!(jobs.unique_keys.is_empty() || jobs.unique_keys.len() == jobs.payloads.len());
        if !fast_paths() {
            return None;
        }
        if !CALLBACK_REGISTERED.with(Cell::get) {
            // SAFETY: a plain function registered once per backend.
            unsafe { crate::pg::version::register_relcache_callback(relcache_invalidated) };
            CALLBACK_REGISTERED.with(|c| c.set(true));
        }
        if STALE.with(|s| s.replace(false)) {
            forget();
        }
        let built = KEPT.with(|kept| kept.borrow().is_some()) || {
            // SAFETY: inside a transaction, as build requires.
            let fresh = unsafe { build() };
            let ok = fresh.is_some();
            KEPT.with(|kept| *kept.borrow_mut() = fresh);
            ok
        };
        if !built {
            return None;
        }
        KEPT.with(|kept| {
            let kept = kept.borrow();
            let kept = kept.as_ref().expect("built above");
            // SAFETY: as this function requires; `kept` matches the current relcache.
            unsafe { insert_with(kept, jobs) }
        })
    }
}

/// The name of check constraint `check` and its expression `expr` (its `ccbin`, read)
/// compiled as the executor checks it on a new row version (NULL passes).
///
/// # Safety
/// `check` belongs to an open relation's descriptor; the state is allocated in the current
/// memory context.
pub(super) unsafe fn compile_check(
    check: *const pg_sys::ConstrCheck,
    expr: *mut pg_sys::Expr,
) -> (String, *mut pg_sys::ExprState) {
    // SAFETY: as the caller promises.
    unsafe {
        let qual = pg_sys::make_ands_implicit(expr);
        let planned = pg_sys::expression_planner(qual.cast());
        let state = pg_sys::ExecInitCheck(planned.cast(), std::ptr::null_mut());
        let name = CStr::from_ptr((*check).ccname)
            .to_string_lossy()
            .into_owned();
        (name, state)
    }
}

/// Drops what the session keeps.
fn forget() {
    QUEUE_ROWS.with(|rows| rows.borrow_mut().clear());
    if let Some(kept) = KEPT.with(|kept| kept.borrow_mut().take()) {
        // SAFETY: everything kept lives in this context, which nothing else references.
        unsafe { pg_sys::MemoryContextDelete(kept.context) };
    }
}

/// The attributes of the open relation `rel` (its tuple descriptor lives while it is open).
///
/// # Safety
/// `rel` must be an open relation, locked at least as a statement reading it would lock it, for as
/// long as the call runs. The descriptor returned must not outlive it.
unsafe fn attributes<'a>(rel: pg_sys::Relation) -> PgTupleDesc<'a> {
    // SAFETY: the relcache's descriptor, not reference counted by us.
    unsafe { PgTupleDesc::from_pg_unchecked((*rel).rd_att) }
}

/// Column `name` of `rel` if it has type `type_oid`: its attribute number and collation.
///
/// # Safety
/// `rel` must be an open relation, locked at least as a statement reading it would lock it, for as
/// long as the call runs.
pub(super) unsafe fn attribute(
    rel: pg_sys::Relation,
    name: &CStr,
    type_oid: Oid,
) -> Option<(i16, Oid)> {
    // SAFETY: an open relation, as attributes requires.
    let desc = unsafe { attributes(rel) };
    desc.iter()
        // SAFETY: attname is a NUL-terminated NameData.
        .find(|a| !a.attisdropped && unsafe { CStr::from_ptr(a.attname.data.as_ptr()) } == name)
        .filter(|a| a.atttypid == type_oid)
        .map(|a| (a.attnum, a.attcollation))
}

/// Compiles `expr` (planned first, as the executor does) in the current memory context.
///
/// # Safety
/// `expr` must be a valid expression tree; inside a transaction, in a memory context that outlives
/// the state's use.
unsafe fn compile(expr: *mut pg_sys::Expr) -> *mut pg_sys::ExprState {
    // SAFETY: a valid expression tree; the state needs no parent plan.
    unsafe { pg_sys::ExecInitExpr(pg_sys::expression_planner(expr), std::ptr::null_mut()) }
}

/// Builds what the session keeps, or `None` when the direct path does not apply (no such
/// tables, columns of other types, triggers, row-level security for the owner).
///
/// # Safety
/// Inside a transaction, outside any SPI connection's statement (it opens and closes the relations
/// itself).
unsafe fn build() -> Option<Kept> {
    // SAFETY: catalog lookups and relcache reads inside a transaction; every allocation is in
    // the new context, switched to for the duration.
    unsafe {
        let job = jobs_relation(c"job")?;
        let queue = jobs_relation(c"queue")?;
        let context = pg_sys::AllocSetContextCreateInternal(
            pg_sys::CacheMemoryContext,
            c"pg_jobs job writer".as_ptr(),
            pg_sys::ALLOCSET_SMALL_MINSIZE as usize,
            pg_sys::ALLOCSET_SMALL_INITSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
        );
        let previous = pg_sys::MemoryContextSwitchTo(context);
        let kept = build_in(context, job, queue);
        pg_sys::MemoryContextSwitchTo(previous);
        if kept.is_none() {
            pg_sys::MemoryContextDelete(context);
        }
        kept
    }
}

/// [`build`], in the kept context.
///
/// # Safety
/// As for [`build`]; `context` must be the session's kept context, and `job` and `queue` the oids
/// of `jobs.job` and `jobs.queue`.
unsafe fn build_in(context: pg_sys::MemoryContext, job: Oid, queue: Oid) -> Option<Kept> {
    // SAFETY: as build; relations are opened and closed here, keeping their locks until the
    // transaction ends.
    unsafe {
        let queue_rel = pg_sys::table_open(queue, pg_sys::AccessShareLock as i32);
        pg_sys::list_free(pg_sys::RelationGetIndexList(queue_rel));
        let queue_pkey = (*queue_rel).rd_pkindex;
        let queue_name = attribute(queue_rel, c"name", pg_sys::TEXTOID);
        let queue_max_attempts = attribute(queue_rel, c"max_attempts", pg_sys::INT4OID);
        let queue_claims_by_kind = attribute(queue_rel, c"claims_by_kind", pg_sys::BOOLOID);
        pg_sys::table_close(queue_rel, pg_sys::NoLock as i32);
        let (Some(queue_name), Some((queue_max_attempts, _)), Some((queue_claims_by_kind, _))) =
            (queue_name, queue_max_attempts, queue_claims_by_kind)
        else {
            return None;
        };
        if queue_pkey == pg_sys::InvalidOid {
            return None;
        }

        let rel = pg_sys::table_open(job, pg_sys::RowExclusiveLock as i32);
        let queue_columns = QueueColumns {
            name: queue_name,
            max_attempts: queue_max_attempts,
            claims_by_kind: queue_claims_by_kind,
        };
        let kept = build_for_table(context, rel, job, queue, queue_pkey, queue_columns);
        pg_sys::table_close(rel, pg_sys::NoLock as i32);
        kept
    }
}

/// Where jobs.queue keeps what an enqueue reads.
struct QueueColumns {
    /// `name`: attribute number and collation.
    name: (i16, Oid),
    /// `max_attempts`: attribute number.
    max_attempts: i16,
    /// `claims_by_kind`: attribute number.
    claims_by_kind: i16,
}

/// [`build_in`], for the open `jobs.job`.
///
/// # Safety
/// As for [`build_in`]; `rel` must be `jobs.job`, open and locked, `queue_pkey` the primary key of
/// `jobs.queue` and `queue_columns` read from it.
unsafe fn build_for_table(
    context: pg_sys::MemoryContext,
    rel: pg_sys::Relation,
    job: Oid,
    queue: Oid,
    queue_pkey: Oid,
    queue_columns: QueueColumns,
) -> Option<Kept> {
    // SAFETY: an open relation, as build_in passes.
    unsafe {
        if (*(*rel).rd_rel).relkind != pg_sys::RELKIND_RELATION as core::ffi::c_char
            || !(*rel).trigdesc.is_null()
        {
            return None;
        }
        let mut set = [0i16; SET_COLUMN_COUNT];
        for (slot, (_, name, type_oid)) in set.iter_mut().zip(SET_COLUMNS.iter()) {
            *slot = attribute(rel, name, *type_oid)?.0;
        }
        let id = attribute(rel, c"id", pg_sys::INT8OID)?.0;

        let desc = attributes(rel);
        let natts = desc.len();
        let mut defaults = Vec::new();
        let mut not_null = Vec::new();
        for attr in desc.iter().filter(|a| !a.attisdropped) {
            if attr.attgenerated != 0 {
                return None;
            }
            if attr.attnotnull {
                not_null.push(attr.attnum);
            }
            if set.contains(&attr.attnum) {
                continue;
            }
            let default = pg_sys::build_column_default(rel, attr.attnum as i32);
            if !default.is_null() {
                defaults.push((attr.attnum, compile(default.cast())));
            }
        }

        let mut checks = Vec::new();
        let constr = (*(*rel).rd_att).constr;
        if !constr.is_null() {
            for i in 0..(*constr).num_check as usize {
                let check = (*constr).check.add(i);
                let expr = pg_sys::stringToNode((*check).ccbin).cast::<pg_sys::Expr>();
                checks.push(compile_check(check, expr));
            }
        }

        let mut indexes = Vec::new();
        let list = pg_sys::RelationGetIndexList(rel);
        let count = if list.is_null() { 0 } else { (*list).length };
        for i in 0..count {
            let oid = (*(*list).elements.add(i as usize)).oid_value;
            let index = pg_sys::index_open(oid, pg_sys::RowExclusiveLock as i32);
            let info = pg_sys::BuildIndexInfo(index);
            pg_sys::index_close(index, pg_sys::NoLock as i32);
            if !(*info).ii_ExclusionOps.is_null() || !(*info).ii_ReadyForInserts {
                return None;
            }
            let mut predicate = std::ptr::null_mut();
            if !(*info).ii_Predicate.is_null() {
                let planned = pg_sys::expression_planner((*info).ii_Predicate.cast());
                predicate = pg_sys::ExecInitQual(planned.cast(), std::ptr::null_mut());
                (*info).ii_Predicate = std::ptr::null_mut();
            }
            if !(*info).ii_Expressions.is_null() {
                let mut states: *mut pg_sys::List = std::ptr::null_mut();
                let exprs = (*info).ii_Expressions;
                for e in 0..(*exprs).length {
                    let expr = (*(*exprs).elements.add(e as usize)).ptr_value;
                    states = pg_sys::lappend(states, compile(expr.cast()).cast());
                }
                (*info).ii_ExpressionsState = states;
            }
            indexes.push(KeptIndex {
                oid,
                predicate,
                info,
            });
        }
        let row_type = pg_sys::CreateTupleDescCopy((*rel).rd_att);
        Some(Kept {
            row_type,
            context,
            job,
            queue,
            queue_pkey,
            queue_name: queue_columns.name.0,
            queue_name_collation: queue_columns.name.1,
            queue_max_attempts: queue_columns.max_attempts,
            queue_claims_by_kind: queue_columns.claims_by_kind,
            set,
            id,
            natts,
            defaults,
            not_null,
            checks,
            indexes,
        })
    }
}

/// What an enqueue reads of the queue's row, under a fresh snapshot; `None` when it does not
/// exist.
///
/// # Safety
/// `kept` must be built in this session since the last invalidation of the relations it names;
/// inside a transaction.
unsafe fn read_queue_values(kept: &Kept, queue: &str) -> Option<QueueValues> {
    // SAFETY: an index scan of jobs.queue by its primary key under a registered snapshot; the
    // tuple is read before the scan ends.
    unsafe {
        let rel = pg_sys::table_open(kept.queue, pg_sys::AccessShareLock as i32);
        let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetTransactionSnapshot());
        let mut key: pg_sys::ScanKeyData = std::mem::zeroed();
        pg_sys::ScanKeyInit(
            &mut key,
            kept.queue_name,
            pg_sys::BTEqualStrategyNumber as u16,
            pg_sys::F_TEXTEQ.into(),
            queue.into_datum().expect("text"),
        );
        // The primary key orders names by the column's collation: so must the scan.
        key.sk_collation = kept.queue_name_collation;
        let scan = pg_sys::systable_beginscan(rel, kept.queue_pkey, true, snapshot, 1, &mut key);
        let tuple = pg_sys::systable_getnext(scan);
        let found = (!tuple.is_null()).then(|| {
            let desc = (*rel).rd_att;
            let natts = (*desc).natts as usize;
            let mut values = vec![Datum::from(0); natts];
            let mut nulls = vec![false; natts];
            pg_sys::heap_deform_tuple(tuple, desc, values.as_mut_ptr(), nulls.as_mut_ptr());
            let at = |attnum: i16| values[attnum as usize - 1].value();
            QueueValues {
                max_attempts: at(kept.queue_max_attempts) as i32,
                claims_by_kind: at(kept.queue_claims_by_kind) != 0,
            }
        });
        pg_sys::systable_endscan(scan);
        pg_sys::UnregisterSnapshot(snapshot);
        pg_sys::table_close(rel, pg_sys::NoLock as i32);
        found
    }
}

/// What an enqueue reads of the queue's row, as `how` allows: kept by the session or read
/// (and kept); `None` when the queue does not exist (which is never kept: a queue created
/// since is found at once).
///
/// # Safety
/// As for [`read_queue_values`].
unsafe fn queue_values(kept: &Kept, queue: &str, how: QueueRowUse) -> Option<QueueValues> {
    let QueueRowUse::Kept { generation, keep } = how else {
        // SAFETY: as the caller's.
        return unsafe { read_queue_values(kept, queue) };
    };
    let held = QUEUE_ROWS.with(|rows| rows.borrow().get(generation, queue));
    if held.is_some() {
        return held;
    }
    // SAFETY: as the caller's.
    let found = unsafe { read_queue_values(kept, queue) };
    if let (Some(values), true) = (found, keep) {
        QUEUE_ROWS.with(|rows| rows.borrow_mut().insert(generation, queue, values));
    }
    found
}

/// Evaluates `state` in `econtext`.
///
/// # Safety
/// `state` must be compiled by [`compile`] and `econtext` an expression context whose scan slot
/// holds the row the expression reads, both alive.
unsafe fn evaluate(
    state: *mut pg_sys::ExprState,
    econtext: *mut pg_sys::ExprContext,
) -> (Datum, bool) {
    let mut is_null = false;
    // SAFETY: a compiled expression and a live context.
    let value = unsafe {
        ((*state).evalfunc.expect("a compiled expression"))(state, econtext, &mut is_null)
    };
    (value, is_null)
}

/// Whether the compiled predicate `qual` holds for the row in `econtext`'s scan tuple.
///
/// # Safety
/// `qual` comes from `ExecInitQual`; `econtext` is live, its scan tuple set. The predicates of
/// `jobs.job`'s indexes compare columns with constants and raise nothing.
unsafe fn admits(qual: *mut pg_sys::ExprState, econtext: *mut pg_sys::ExprContext) -> bool {
    // Called straight, not through ExecQual's guarded wrapper, which only adds a memory
    // context switch and a reset per row to the executor's own check.
    // SAFETY: as the caller promises.
    let (value, is_null) = unsafe { evaluate(qual, econtext) };
    !is_null && value.value() != 0
}

/// The insert itself.
///
/// # Safety
/// `kept` must be built in this session since the last invalidation of the relations it names,
/// inside a transaction that may write, with SPI free to run (the checks it calls may run
/// statements).
unsafe fn insert_with(kept: &Kept, jobs: &NewJobs<'_>) -> Option<Inserted> {
    // SAFETY: as JobWriter::insert requires; every allocation is in the executor state's
    // memory, freed at the end (the ids are copied out first).
    unsafe {
        let rel = pg_sys::table_open(kept.job, pg_sys::RowExclusiveLock as i32);
        if row_security_applies(kept.job) {
            pg_sys::table_close(rel, pg_sys::NoLock as i32);
            return None;
        }
        let Some(queue_values) = queue_values(kept, jobs.queue, jobs.queue_row) else {
            pg_sys::table_close(rel, pg_sys::NoLock as i32);
            return Some(Inserted::UnknownQueue);
        };
        // The setting as read after the queue lock was taken, unless this transaction's
        // snapshot may be older than the lock (REPEATABLE READ): then the jobs go into the
        // kinds index whatever it says, since a change that turned it on since may have
        // marked the queue's jobs without seeing these (engine::queues::create_or_update).
        let read_committed = pg_sys::XactIsoLevel < pg_sys::XACT_REPEATABLE_READ as i32;
        let kind_indexed = queue_values.claims_by_kind || !read_committed;

        let estate = pg_sys::CreateExecutorState();
        let previous = pg_sys::MemoryContextSwitchTo((*estate).es_query_cxt);
        let econtext = pg_sys::MakePerTupleExprContext(estate);

        // Text datums shared by every job are made once.
        let text = |value: &str| value.into_datum().expect("text");
        let queue_datum = text(jobs.queue);
        let tenant_datum = jobs.tenant.map(text);
        let kind_datum = match jobs.kind {
            PerJob::All(kind) => Some(text(kind)),
            PerJob::Each(_) => None,
        };
        let value_of = |column: Column, index: usize, payload: Datum| -> (Datum, bool) {
            let present =
                |datum: Option<Datum>| datum.map_or((Datum::from(0), true), |d| (d, false));
            let unique_key = jobs.unique_keys.get(index).copied().flatten();
            match column {
                Column::Queue => (queue_datum, false),
                Column::Kind => (
                    kind_datum.unwrap_or_else(|| text(jobs.kind.at(index))),
                    false,
                ),
                Column::Payload => (payload, false),
                Column::Headers => present(jobs.headers.at(index)),
                Column::Priority => (Datum::from(jobs.priority.at(index)), false),
                Column::RunAt => (Datum::from(jobs.run_at.at(index)), false),
                Column::MaxAttempts => (
                    Datum::from(
                        jobs.max_attempts
                            .at(index)
                            .unwrap_or(queue_values.max_attempts),
                    ),
                    false,
                ),
                Column::Tenant => present(tenant_datum),
                Column::GroupKey => present(jobs.group_keys.at(index).map(text)),
                Column::UniqueKey => present(unique_key.map(text)),
                Column::UniqueHold => (Datum::from(unique_key.is_some()), false),
                Column::UniqueFor => present(jobs.unique_for),
                Column::GroupWait => (Datum::from(jobs.group_waits.at(index)), false),
                Column::KindIndexed => (Datum::from(kind_indexed), false),
            }
        };

        let mut slots: Vec<*mut pg_sys::TupleTableSlot> = Vec::with_capacity(jobs.payloads.len());
        let slot_ops = std::ptr::addr_of!(pg_sys::TTSOpsHeapTuple);
        let mut ids = Vec::with_capacity(jobs.payloads.len());
        for (index, payload) in jobs.payloads.iter().enumerate() {
            // A new slot is empty: fill its arrays, then store them as a virtual tuple. It
            // lives in the executor state's memory, freed with it.
            let slot = pg_sys::MakeTupleTableSlot(kept.row_type, slot_ops);
            let values = std::slice::from_raw_parts_mut((*slot).tts_values, kept.natts);
            let nulls = std::slice::from_raw_parts_mut((*slot).tts_isnull, kept.natts);
            nulls.fill(true);
            for ((column, _, _), attnum) in SET_COLUMNS.iter().zip(kept.set.iter()) {
                let at = *attnum as usize - 1;
                let (datum, is_null) = value_of(*column, index, *payload);
                values[at] = datum;
                nulls[at] = is_null;
            }
            for (attnum, state) in &kept.defaults {
                let (datum, is_null) = evaluate(*state, econtext);
                values[*attnum as usize - 1] = datum;
                nulls[*attnum as usize - 1] = is_null;
            }
            pg_sys::ExecStoreVirtualTuple(slot);
            check_row(kept, slot, econtext);
            ids.push(values[kept.id as usize - 1].value() as i64);
            slots.push(slot);
        }

        let command = pg_sys::GetCurrentCommandId(true);
        let table_am = (*rel).rd_tableam;
        // A single job with a unique key goes in as `INSERT ... ON CONFLICT` puts a row in:
        // speculatively, so that a held key is noted, not raised, and the row killed again.
        // Batches go in at once and a held key raises (the caller's subtransaction catches
        // it); for one job that subtransaction would cost nearly as much as the unique index's
        // own entry.
        let speculative = jobs.unique_keys.iter().any(Option::is_some) && slots.len() == 1;
        let mut speculation = None;
        if let ([slot], true) = (&slots[..], speculative) {
            let xid = pg_sys::GetCurrentTransactionId();
            let token = pg_sys::SpeculativeInsertionLockAcquire(xid);
            pg_sys::table_tuple_insert_speculative(
                rel,
                *slot,
                command,
                0,
                std::ptr::null_mut(),
                token,
            );
            speculation = Some((xid, token));
        } else if let [slot] = slots[..] {
            ((*table_am).tuple_insert.expect("a table access method"))(
                rel,
                slot,
                command,
                0,
                std::ptr::null_mut(),
            );
        } else if !slots.is_empty() {
            ((*table_am).multi_insert.expect("a table access method"))(
                rel,
                slots.as_mut_ptr(),
                slots.len() as i32,
                command,
                0,
                std::ptr::null_mut(),
            );
        }

        // Each row goes into the indexes whose predicates admit it, as the executor does; the
        // writer checks the predicates itself, so an index no row goes into is not opened (a
        // plain job goes into three of the seven, and opening and locking the others would be
        // a good part of a single enqueue's work). The descriptions
        // the session keeps have no predicates, so ExecInsertIndexTuples does not check again.
        let result = pg_sys::palloc0(std::mem::size_of::<pg_sys::ResultRelInfo>())
            .cast::<pg_sys::ResultRelInfo>();
        (*result).type_ = pg_sys::NodeTag::T_ResultRelInfo;
        (*result).ri_RelationDesc = rel;
        let count = kept.indexes.len();
        let descs = pg_sys::palloc(count.max(1) * std::mem::size_of::<pg_sys::Relation>())
            .cast::<pg_sys::Relation>();
        let infos = pg_sys::palloc(count.max(1) * std::mem::size_of::<*mut pg_sys::IndexInfo>())
            .cast::<*mut pg_sys::IndexInfo>();
        (*result).ri_IndexRelationDescs = descs;
        (*result).ri_IndexRelationInfo = infos;
        let mut opened: Vec<pg_sys::Relation> = vec![std::ptr::null_mut(); count];
        let mut key_held = false;
        for slot in &slots {
            (*econtext).ecxt_scantuple = *slot;
            let mut admitting = 0;
            for (i, index) in kept.indexes.iter().enumerate() {
                if !index.predicate.is_null() && !admits(index.predicate, econtext) {
                    continue;
                }
                if opened[i].is_null() {
                    opened[i] = pg_sys::index_open(index.oid, pg_sys::RowExclusiveLock as i32);
                }
                *descs.add(admitting) = opened[i];
                *infos.add(admitting) = index.info;
                admitting += 1;
            }
            (*result).ri_NumIndices = admitting as i32;
            if speculation.is_some() {
                key_held = version::insert_index_entries_speculatively(result, *slot, estate);
            } else {
                let recheck = version::insert_index_entries(result, *slot, estate);
                pg_sys::list_free(recheck);
            }
            pg_sys::MemoryContextReset((*econtext).ecxt_per_tuple_memory);
        }
        if let Some((xid, token)) = speculation {
            // Confirms the row, or kills it when its key is held; then lets go of the token
            // that transactions which met the row meanwhile wait on.
            pg_sys::table_tuple_complete_speculative(rel, slots[0], token, !key_held);
            pg_sys::SpeculativeInsertionLockRelease(xid);
        }
        for index in opened.into_iter().filter(|index| !index.is_null()) {
            pg_sys::index_close(index, pg_sys::NoLock as i32);
        }

        pg_sys::MemoryContextSwitchTo(previous);
        pg_sys::FreeExecutorState(estate);
        pg_sys::table_close(rel, pg_sys::NoLock as i32);
        Some(if key_held {
            Inserted::KeyHeld
        } else {
            Inserted::Ids(ids)
        })
    }
}

/// Raises the executor's errors for a row that breaks NOT NULL or a check constraint.
///
/// # Safety
/// `kept` as for [`insert_with`]; `slot` must hold the new row in `jobs.job`'s layout and
/// `econtext` have it as its scan tuple.
unsafe fn check_row(
    kept: &Kept,
    slot: *mut pg_sys::TupleTableSlot,
    econtext: *mut pg_sys::ExprContext,
) {
    // SAFETY: a virtual tuple of jobs.job in `slot`; the check states were compiled for it.
    unsafe {
        for attnum in &kept.not_null {
            if *(*slot).tts_isnull.add(*attnum as usize - 1) {
                crate::pg::errors::raise(
                    pgrx::PgSqlErrorCode::ERRCODE_NOT_NULL_VIOLATION,
                    format!("a job's column number {attnum} may not be NULL"),
                );
            }
        }
        (*econtext).ecxt_scantuple = slot;
        for (name, state) in &kept.checks {
            let (value, is_null) = evaluate(*state, econtext);
            if !is_null && value.value() == 0 {
                crate::pg::errors::raise(
                    pgrx::PgSqlErrorCode::ERRCODE_CHECK_VIOLATION,
                    format!("new row for relation \"job\" violates check constraint \"{name}\""),
                );
            }
        }
    }
}
