//! The one place that knows how PostgreSQL versions differ for pg_jobs. Everything else calls
//! these functions and carries no `#[cfg(feature = "pgNN")]` of its own.

use pgrx::pg_sys;

/// How [`pin_search_path`] pinned the search path, for [`unpin_search_path`].
pub struct SearchPathPin {
    /// The GUC nest level opened for the pin (PostgreSQL 17 and later, when the search path
    /// was not pinned already).
    #[cfg(any(feature = "pg17", feature = "pg18"))]
    nest_level: Option<i32>,
}

/// Pins the search path to `pg_catalog` for what follows, until [`unpin_search_path`].
///
/// # Safety
/// Every call must be matched by one [`unpin_search_path`], innermost first (or by transaction
/// abort).
pub unsafe fn pin_search_path() -> SearchPathPin {
    #[cfg(any(feature = "pg17", feature = "pg18"))]
    {
        // PostgreSQL 17 removed override search paths; a setting at a nest level of its own
        // does the same job and is undone when it closes. Inside pg_jobs's functions the path
        // is already pinned by their own SET clause (pg_temp last, which only relation and
        // type names that pg_catalog lacks could reach, and every statement schema-qualifies
        // those): opening a nest level there would cost a walk over every setting per call.
        let current = if pg_sys::namespace_search_path.is_null() {
            None
        } else {
            std::ffi::CStr::from_ptr(pg_sys::namespace_search_path)
                .to_bytes()
                .into()
        };
        if matches!(current, Some(b"pg_catalog" | b"pg_catalog, pg_temp")) {
            return SearchPathPin { nest_level: None };
        }
        let nest_level = pg_sys::NewGUCNestLevel();
        pg_sys::set_config_option(
            c"search_path".as_ptr(),
            c"pg_catalog".as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_SAVE,
            true,
            0,
            false,
        );
        SearchPathPin {
            nest_level: Some(nest_level),
        }
    }
    #[cfg(not(any(feature = "pg17", feature = "pg18")))]
    {
        let mut path = pg_sys::OverrideSearchPath {
            schemas: std::ptr::null_mut(),
            addCatalog: true,
            addTemp: false,
            generation: 0,
        };
        // PushOverrideSearchPath copies the struct into its own memory.
        pg_sys::PushOverrideSearchPath(&mut path);
        SearchPathPin {}
    }
}

/// Undoes [`pin_search_path`].
///
/// # Safety
/// Must be given the pin of the innermost [`pin_search_path`] not yet undone.
pub unsafe fn unpin_search_path(pin: &SearchPathPin) {
    #[cfg(any(feature = "pg17", feature = "pg18"))]
    if let Some(nest_level) = pin.nest_level {
        pg_sys::AtEOXact_GUC(true, nest_level);
    }
    #[cfg(not(any(feature = "pg17", feature = "pg18")))]
    {
        let _ = pin;
        pg_sys::PopOverrideSearchPath();
    }
}

/// Asks PostgreSQL for `size` bytes of shared memory for this library and has `startup` run
/// when shared memory is set up (in the postmaster, and again after a crash restart).
///
/// # Safety
/// Only while `shared_preload_libraries` is being processed, once.
pub unsafe fn request_shared_memory(size: usize, startup: unsafe extern "C-unwind" fn()) {
    static mut SIZE: usize = 0;
    static mut PREVIOUS_STARTUP: pg_sys::shmem_startup_hook_type = None;
    static mut STARTUP: Option<unsafe extern "C-unwind" fn()> = None;

    #[pgrx::pg_guard]
    unsafe extern "C-unwind" fn run_startup() {
        // SAFETY: the statics are written once, in the postmaster, before this hook can run.
        unsafe {
            if let Some(previous) = PREVIOUS_STARTUP {
                previous();
            }
            if let Some(startup) = STARTUP {
                startup();
            }
        }
    }

    SIZE = size;
    STARTUP = Some(startup);
    PREVIOUS_STARTUP = pg_sys::shmem_startup_hook;
    pg_sys::shmem_startup_hook = Some(run_startup);

    #[cfg(any(feature = "pg13", feature = "pg14"))]
    pg_sys::RequestAddinShmemSpace(SIZE);
    #[cfg(not(any(feature = "pg13", feature = "pg14")))]
    {
        // From PostgreSQL 15 on, shared memory may only be requested from this hook.
        static mut PREVIOUS_REQUEST: pg_sys::shmem_request_hook_type = None;

        #[pgrx::pg_guard]
        unsafe extern "C-unwind" fn run_request() {
            // SAFETY: the statics are written once, in the postmaster, before this hook runs.
            unsafe {
                if let Some(previous) = PREVIOUS_REQUEST {
                    previous();
                }
                pg_sys::RequestAddinShmemSpace(SIZE);
            }
        }

        PREVIOUS_REQUEST = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(run_request);
    }
}

/// The lock that serialises shared-memory initialisation between libraries
/// (`AddinShmemInitLock`, entry 21 of the main LWLock array in every supported version).
///
/// # Safety
/// Only after shared memory exists (in a shmem startup hook or later).
pub unsafe fn addin_shmem_init_lock() -> *mut pg_sys::LWLock {
    &raw mut (*pg_sys::MainLWLockArray.add(21)).lock
}

/// The two-phase-commit statements pg_jobs follows (see `runtime::effects`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TwoPhaseStatement {
    /// `PREPARE TRANSACTION gid`: the transaction is prepared when the statement's command ends.
    Prepare,
    /// `COMMIT PREPARED gid` has just committed the prepared transaction.
    CommitPrepared,
    /// `ROLLBACK PREPARED gid` has just rolled the prepared transaction back.
    RollbackPrepared,
}

/// What [`follow_utility_statements`] calls: before and after a two-phase statement, and
/// before a `DROP EXTENSION` that names pg_jobs.
#[derive(Clone, Copy)]
pub struct UtilityCallbacks {
    /// Called before a two-phase statement runs (it may still fail).
    pub before: fn(TwoPhaseStatement, &str),
    /// Called once it succeeded.
    pub after: fn(TwoPhaseStatement, &str),
    /// Called before `DROP EXTENSION ... pg_jobs ...` runs (it may still fail, or be rolled
    /// back).
    pub dropping_extension: fn(),
}

static mut UTILITY_CALLBACKS: Option<UtilityCallbacks> = None;
static mut PREVIOUS_UTILITY: pg_sys::ProcessUtility_hook_type = None;

/// Calls `callbacks` around each `PREPARE TRANSACTION`, `COMMIT PREPARED` and
/// `ROLLBACK PREPARED` in this process, with the transaction's gid (`before` as the statement
/// starts, `after` when it succeeded), and before each `DROP EXTENSION` of pg_jobs.
///
/// # Safety
/// Once per process, from `_PG_init`.
pub unsafe fn follow_utility_statements(callbacks: UtilityCallbacks) {
    UTILITY_CALLBACKS = Some(callbacks);
    PREVIOUS_UTILITY = pg_sys::ProcessUtility_hook;
    pg_sys::ProcessUtility_hook = Some(process_utility);
}

/// The two-phase statement `statement` is, with its gid, if it is one.
///
/// # Safety
/// `statement` is a valid planned utility statement.
unsafe fn two_phase(statement: *mut pg_sys::PlannedStmt) -> Option<(TwoPhaseStatement, String)> {
    let node = (*statement).utilityStmt;
    if node.is_null() || (*node).type_ != pg_sys::NodeTag::T_TransactionStmt {
        return None;
    }
    let transaction = node.cast::<pg_sys::TransactionStmt>();
    let kind = match (*transaction).kind {
        pg_sys::TransactionStmtKind::TRANS_STMT_PREPARE => TwoPhaseStatement::Prepare,
        pg_sys::TransactionStmtKind::TRANS_STMT_COMMIT_PREPARED => {
            TwoPhaseStatement::CommitPrepared
        }
        pg_sys::TransactionStmtKind::TRANS_STMT_ROLLBACK_PREPARED => {
            TwoPhaseStatement::RollbackPrepared
        }
        _ => return None,
    };
    let gid = (*transaction).gid;
    if gid.is_null() {
        return None;
    }
    Some((
        kind,
        std::ffi::CStr::from_ptr(gid).to_string_lossy().into_owned(),
    ))
}

/// Whether `statement` is a `DROP EXTENSION` that names pg_jobs.
///
/// # Safety
/// `statement` is a valid planned utility statement.
unsafe fn drops_pg_jobs(statement: *mut pg_sys::PlannedStmt) -> bool {
    let node = (*statement).utilityStmt;
    if node.is_null() || (*node).type_ != pg_sys::NodeTag::T_DropStmt {
        return false;
    }
    let drop = node.cast::<pg_sys::DropStmt>();
    if (*drop).removeType != pg_sys::ObjectType::OBJECT_EXTENSION || (*drop).objects.is_null() {
        return false;
    }
    let objects = (*drop).objects;
    (0..(*objects).length).any(|i| {
        let name = pg_sys::list_nth(objects, i).cast::<pg_sys::Node>();
        let text = string_value(name);
        !text.is_null() && std::ffi::CStr::from_ptr(text).to_bytes() == b"pg_jobs"
    })
}

/// The text of a string node (`strVal`): a `String` node from 15 on, a `Value` before; NULL for
/// anything else.
///
/// # Safety
/// `node` is NULL or a valid node.
unsafe fn string_value(node: *mut pg_sys::Node) -> *const std::ffi::c_char {
    if node.is_null() || (*node).type_ != pg_sys::NodeTag::T_String {
        return std::ptr::null();
    }
    #[cfg(any(feature = "pg13", feature = "pg14"))]
    {
        (*node.cast::<pg_sys::Value>()).val.str_
    }
    #[cfg(not(any(feature = "pg13", feature = "pg14")))]
    {
        (*node.cast::<pg_sys::String>()).sval
    }
}

/// Runs the statement as PostgreSQL would, telling the callbacks about the statements they
/// follow.
///
/// # Safety
/// Called by PostgreSQL with the arguments of a utility statement.
unsafe fn run_utility(statement: *mut pg_sys::PlannedStmt, run: impl FnOnce()) {
    let two_phase = two_phase(statement);
    let callbacks = UTILITY_CALLBACKS;
    if let Some(callbacks) = callbacks.filter(|_| drops_pg_jobs(statement)) {
        (callbacks.dropping_extension)();
    }
    if let (Some((kind, gid)), Some(callbacks)) = (&two_phase, callbacks) {
        (callbacks.before)(*kind, gid);
    }
    run();
    if let (Some((kind, gid)), Some(callbacks)) = (two_phase, callbacks) {
        (callbacks.after)(kind, &gid);
    }
}

#[cfg(feature = "pg13")]
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn process_utility(
    pstmt: *mut pg_sys::PlannedStmt,
    query_string: *const std::ffi::c_char,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    query_env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    // SAFETY: passes PostgreSQL's own arguments on unchanged.
    unsafe {
        run_utility(pstmt, || match PREVIOUS_UTILITY {
            Some(previous) => previous(pstmt, query_string, context, params, query_env, dest, qc),
            None => pg_sys::standard_ProcessUtility(
                pstmt,
                query_string,
                context,
                params,
                query_env,
                dest,
                qc,
            ),
        })
    }
}

#[cfg(not(feature = "pg13"))]
#[pgrx::pg_guard]
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn process_utility(
    pstmt: *mut pg_sys::PlannedStmt,
    query_string: *const std::ffi::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    query_env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    // SAFETY: passes PostgreSQL's own arguments on unchanged.
    unsafe {
        run_utility(pstmt, || match PREVIOUS_UTILITY {
            Some(previous) => previous(
                pstmt,
                query_string,
                read_only_tree,
                context,
                params,
                query_env,
                dest,
                qc,
            ),
            None => pg_sys::standard_ProcessUtility(
                pstmt,
                query_string,
                read_only_tree,
                context,
                params,
                query_env,
                dest,
                qc,
            ),
        })
    }
}

/// Clears the xmin this backend advertises in the proc array.
///
/// # Safety
/// Only when nothing will read with the backend's current snapshots again (see
/// `pg::snapshot::stop_advertising_xmin`).
pub unsafe fn clear_advertised_xmin() {
    #[cfg(feature = "pg13")]
    {
        // PostgreSQL 13 keeps the xmin in PGXACT.
        (*pg_sys::MyPgXact).xmin = pg_sys::InvalidTransactionId;
    }
    #[cfg(not(feature = "pg13"))]
    {
        (*pg_sys::MyProc).xmin = pg_sys::InvalidTransactionId;
    }
}

/// What PostgreSQL calls when entries of a system catalog cache are invalidated: the `arg`
/// given at registration, the cache's id and the hash of the invalidated key (0 for all).
pub type SyscacheCallback = unsafe extern "C-unwind" fn(pg_sys::Datum, i32, u32);

/// Has `callback` run in this process whenever entries of the catalog cache `cache` are
/// invalidated (a committed change to the catalog, or a cache reset).
///
/// # Safety
/// Registrations are never undone and PostgreSQL has room for a fixed number per process:
/// register once per process (from `_PG_init`).
pub unsafe fn register_syscache_callback(
    cache: pg_sys::SysCacheIdentifier::Type,
    callback: SyscacheCallback,
) {
    #[cfg(feature = "pg13")]
    {
        // The bindings pgrx generates from 13.x headers before 13.5 leave out utils/inval.h
        // (later headers include it indirectly), so this declares the function as inval.h of
        // every 13.x does.
        unsafe extern "C-unwind" {
            fn CacheRegisterSyscacheCallback(
                cacheid: std::ffi::c_int,
                func: Option<SyscacheCallback>,
                arg: pg_sys::Datum,
            );
        }
        // Guarded as pgrx guards its own bindings: an ERROR inside becomes a Rust panic.
        pg_sys::ffi::pg_guard_ffi_boundary(|| {
            CacheRegisterSyscacheCallback(cache as i32, Some(callback), pg_sys::Datum::from(0))
        });
    }
    #[cfg(not(feature = "pg13"))]
    pg_sys::CacheRegisterSyscacheCallback(cache as i32, Some(callback), pg_sys::Datum::from(0));
}

/// What PostgreSQL calls when relation cache entries are invalidated: the `arg` given at
/// registration and the relation's oid (`InvalidOid` for all relations).
pub type RelcacheCallback = unsafe extern "C-unwind" fn(pg_sys::Datum, pg_sys::Oid);

/// Has `callback` run in this process whenever relation cache entries are invalidated (a
/// committed change to a relation's definition, its indexes or policies, or a cache reset).
///
/// # Safety
/// Registrations are never undone and PostgreSQL has room for a fixed number per process:
/// register once per process.
pub unsafe fn register_relcache_callback(callback: RelcacheCallback) {
    #[cfg(feature = "pg13")]
    {
        // As for register_syscache_callback: the 13.4 bindings lack utils/inval.h.
        unsafe extern "C-unwind" {
            fn CacheRegisterRelcacheCallback(func: Option<RelcacheCallback>, arg: pg_sys::Datum);
        }
        pg_sys::ffi::pg_guard_ffi_boundary(|| {
            CacheRegisterRelcacheCallback(Some(callback), pg_sys::Datum::from(0))
        });
    }
    #[cfg(not(feature = "pg13"))]
    pg_sys::CacheRegisterRelcacheCallback(Some(callback), pg_sys::Datum::from(0));
}

/// Reads the catalog invalidations other sessions sent since this one last looked, as any lock
/// acquisition does, so that the next catalog lookup sees what they committed.
pub fn accept_invalidation_messages() {
    #[cfg(feature = "pg13")]
    {
        // As for register_syscache_callback: the 13.4 bindings lack utils/inval.h.
        unsafe extern "C-unwind" {
            fn AcceptInvalidationMessages();
        }
        // SAFETY: takes no arguments and only reads the shared invalidation queue; guarded as
        // pgrx guards its own bindings, so an ERROR inside becomes a Rust panic.
        unsafe { pg_sys::ffi::pg_guard_ffi_boundary(|| AcceptInvalidationMessages()) };
    }
    #[cfg(not(feature = "pg13"))]
    // SAFETY: takes no arguments and only reads the shared invalidation queue.
    unsafe {
        pg_sys::AcceptInvalidationMessages()
    };
}

/// Inserts the index entries of the heap tuple in `slot` into every index of `result` (as an
/// INSERT does: partial indexes only when their predicate admits it, unique ones checked), and
/// returns the indexes whose entries need a recheck (none without deferred constraints).
///
/// # Safety
/// `result` names the open relation `slot` was inserted into and its open indexes; `estate` is
/// a live executor state.
pub unsafe fn insert_index_entries(
    result: *mut pg_sys::ResultRelInfo,
    slot: *mut pg_sys::TupleTableSlot,
    estate: *mut pg_sys::EState,
) -> *mut pg_sys::List {
    // SAFETY: as the caller promises.
    unsafe { exec_insert_index_tuples(result, slot, estate, std::ptr::null_mut()) }
}

/// [`insert_index_entries`] for a tuple inserted speculatively, as `INSERT ... ON CONFLICT`
/// inserts: a unique index that holds an equal key (committed, or being inserted by another
/// transaction) raises nothing and takes the entry; the answer is whether one did (the caller
/// then kills the tuple: `table_tuple_complete_speculative`).
///
/// # Safety
/// As [`insert_index_entries`]; the tuple in `slot` was inserted speculatively.
pub unsafe fn insert_index_entries_speculatively(
    result: *mut pg_sys::ResultRelInfo,
    slot: *mut pg_sys::TupleTableSlot,
    estate: *mut pg_sys::EState,
) -> bool {
    let mut conflict = false;
    // SAFETY: as the caller promises; `conflict` outlives the call.
    unsafe {
        let recheck = exec_insert_index_tuples(result, slot, estate, &mut conflict);
        pg_sys::list_free(recheck);
    }
    conflict
}

/// `ExecInsertIndexTuples` for every index (no arbiter list); with `conflict` non-null, unique
/// indexes only note a possible duplicate there (`noDupErr`).
///
/// # Safety
/// As [`insert_index_entries`]; `conflict` is null or points to a live `bool`.
unsafe fn exec_insert_index_tuples(
    result: *mut pg_sys::ResultRelInfo,
    slot: *mut pg_sys::TupleTableSlot,
    estate: *mut pg_sys::EState,
    conflict: *mut bool,
) -> *mut pg_sys::List {
    let no_dup_err = !conflict.is_null();
    #[cfg(feature = "pg13")]
    {
        (*estate).es_result_relation_info = result;
        pg_sys::ExecInsertIndexTuples(slot, estate, no_dup_err, conflict, std::ptr::null_mut())
    }
    #[cfg(any(feature = "pg14", feature = "pg15"))]
    {
        pg_sys::ExecInsertIndexTuples(
            result,
            slot,
            estate,
            false,
            no_dup_err,
            conflict,
            std::ptr::null_mut(),
        )
    }
    #[cfg(any(feature = "pg16", feature = "pg17", feature = "pg18"))]
    {
        pg_sys::ExecInsertIndexTuples(
            result,
            slot,
            estate,
            false,
            no_dup_err,
            conflict,
            std::ptr::null_mut(),
            false,
        )
    }
}

/// Replaces the row version at `otid` of the open relation `rel` with the tuple in `slot`, as
/// an UPDATE does (an error if another transaction changed the row: the caller holds its
/// lock), and answers whether the new version needs index entries (false: a heap-only update,
/// which only btree indexes can tell apart as PostgreSQL 15 does).
///
/// # Safety
/// Inside a transaction that holds the row's lock; `rel` is open with `RowExclusiveLock` and
/// `slot` holds a tuple of its row type; `snapshot` is registered.
pub unsafe fn update_row(
    rel: pg_sys::Relation,
    otid: *mut pg_sys::ItemPointerData,
    slot: *mut pg_sys::TupleTableSlot,
    snapshot: pg_sys::Snapshot,
) -> bool {
    #[cfg(any(feature = "pg13", feature = "pg14", feature = "pg15"))]
    {
        let mut update_indexes = false;
        pg_sys::simple_table_tuple_update(rel, otid, slot, snapshot, &mut update_indexes);
        update_indexes
    }
    #[cfg(any(feature = "pg16", feature = "pg17", feature = "pg18"))]
    {
        let mut update_indexes = pg_sys::TU_UpdateIndexes::TU_None;
        pg_sys::simple_table_tuple_update(rel, otid, slot, snapshot, &mut update_indexes);
        // Only summarizing (BRIN) indexes make TU_Summarizing; callers allow btree alone.
        update_indexes != pg_sys::TU_UpdateIndexes::TU_None
    }
}

/// Begins an index scan of `index` on `heap` with `keys` scan keys and no ordering keys.
///
/// # Safety
/// Open relations and a registered snapshot that outlive the scan; end it with
/// `index_endscan`.
pub unsafe fn index_begin_scan(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    keys: i32,
) -> pg_sys::IndexScanDesc {
    // PostgreSQL 18 added the scan's instrumentation, which nothing here reads.
    #[cfg(feature = "pg18")]
    return pg_sys::index_beginscan(heap, index, snapshot, std::ptr::null_mut(), keys, 0);
    #[cfg(not(feature = "pg18"))]
    return pg_sys::index_beginscan(heap, index, snapshot, keys, 0);
}

/// Whether this backend's client connection still looks alive: false once the peer has closed
/// it (a killed client's kernel closes its socket). Backends without a client (background
/// workers) answer true.
///
/// # Safety
/// In a backend process, outside a critical section.
pub unsafe fn client_connection_alive() -> bool {
    if pg_sys::MyProcPort.is_null() {
        return true;
    }
    // Not pq_check_connection (14 and later): it asks the backend's wait event set, which
    // reports a set latch and nothing else, so a claim whose latch another wake-up had set
    // again since it woke read a closed socket as open, took a job and spent its attempt.
    // Poll the socket for the peer's hang-up instead, as that function does. Port is opaque
    // in the bindings; its first member is the socket (libpq-be.h, `pgsocket sock`, first in
    // every release from 13 on).
    let socket = *(pg_sys::MyProcPort as *const std::ffi::c_int);
    if socket < 0 {
        return true;
    }
    let mut poll = libc_pollfd {
        fd: socket,
        events: POLLRDHUP | POLLHUP | POLLERR,
        revents: 0,
    };
    // SAFETY: one pollfd for a socket this backend owns, with no timeout.
    let ready = poll_socket(&mut poll, 1, 0);
    !(ready > 0 && poll.revents & (POLLRDHUP | POLLHUP | POLLERR) != 0)
}

/// `struct pollfd` of poll(2) (the bindings have none).
#[repr(C)]
struct libc_pollfd {
    fd: std::ffi::c_int,
    events: std::ffi::c_short,
    revents: std::ffi::c_short,
}

/// poll(2)'s event bits on Linux.
const POLLERR: std::ffi::c_short = 0x008;
const POLLHUP: std::ffi::c_short = 0x010;
const POLLRDHUP: std::ffi::c_short = 0x2000;

extern "C" {
    /// poll(2).
    #[link_name = "poll"]
    fn poll_socket(
        fds: *mut libc_pollfd,
        count: std::ffi::c_ulong,
        timeout: std::ffi::c_int,
    ) -> std::ffi::c_int;
}
