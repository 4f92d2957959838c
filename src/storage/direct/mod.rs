//! What the direct paths (the writers and readers beside the declared statements) share:
//! finding the extension's relations, scanning an index as a statement would, and keeping
//! what a session read under the generation of the settings it came from.

pub mod claim_reader;
pub mod group_reader;
pub mod job_writer;
pub mod key_reader;
pub mod progress_writer;

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::CStr;

use pgrx::pg_sys::{self, Datum, Oid};

use crate::config::settings::fast_paths;
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

/// Whether row-level security applies to relation `oid` for the current role: a direct path
/// then reads or writes nothing, as it cannot apply the policies a statement would.
///
/// # Safety
/// Inside a transaction (catalog lookups).
#[inline]
pub unsafe fn row_security_applies(oid: Oid) -> bool {
    // SAFETY: catalog lookups, as the caller allows.
    unsafe {
        pg_sys::check_enable_rls(oid, pg_sys::InvalidOid, true)
            == pg_sys::CheckEnableRlsResult::RLS_ENABLED as i32
    }
}

/// What `read` answers of `jobs.job` and its index `index`, both opened here for reading as a
/// statement would open them and closed before returning (their locks kept until the
/// transaction ends, as a statement's are); `None`, read without, when `pg_jobs.fast_paths` is
/// off, either relation is missing or row-level security applies to `jobs.job`.
///
/// # Safety
/// Inside a transaction; `read` leaves both relations open. On an ERROR, transaction abort
/// releases them.
#[inline]
pub unsafe fn read_job_index<T>(
    index: &CStr,
    read: impl FnOnce(pg_sys::Relation, pg_sys::Relation) -> Option<T>,
) -> Option<T> {
    if !fast_paths() {
        return None;
    }
    // SAFETY: catalog lookups, and relations opened and closed here, as the caller allows.
    unsafe {
        let job = jobs_relation(c"job")?;
        let index = jobs_relation(index)?;
        if row_security_applies(job) {
            return None;
        }
        let heap = pg_sys::table_open(job, pg_sys::AccessShareLock as i32);
        let index = pg_sys::index_open(index, pg_sys::AccessShareLock as i32);
        let answer = read(heap, index);
        pg_sys::index_close(index, pg_sys::NoLock as i32);
        pg_sys::table_close(heap, pg_sys::NoLock as i32);
        answer
    }
}

/// The expressions of the open `index` if it is a btree of the open `heap` whose key columns are
/// exactly `keys` (attribute numbers, 0 for an expression) and it has `expressions` of them;
/// `None` otherwise. What each expression computes is the caller's to check.
///
/// # Safety
/// `heap` and `index` must be open, `index` an index of `heap`.
#[inline]
pub unsafe fn btree_expressions<const KEYS: usize>(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    keys: [i16; KEYS],
    expressions: i32,
) -> Option<*mut pg_sys::List> {
    // SAFETY: an open index of the open table; its relcache entry and expressions are read.
    unsafe {
        let form = (*index).rd_index;
        if (*(*index).rd_rel).relam != pg_sys::BTREE_AM_OID
            || (*form).indrelid != (*heap).rd_id
            || (*form).indnkeyatts != KEYS as i16
            || (*form).indkey.values.as_slice(KEYS) != keys
        {
            return None;
        }
        let list = pg_sys::RelationGetIndexExpressions(index);
        (!list.is_null() && (*list).length == expressions).then_some(list)
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
        // SAFETY: as the caller promises.
        unsafe { Self::begin_under(heap, index, keys, false) }
    }

    /// Begins a scan as [`StatementScan::begin`] does, under the latest snapshot whatever the
    /// isolation level (as the statements a claim or settle runs under its groups' locks).
    ///
    /// # Safety
    /// As for [`StatementScan::begin`].
    pub unsafe fn begin_latest(
        heap: pg_sys::Relation,
        index: pg_sys::Relation,
        keys: &mut [pg_sys::ScanKeyData],
    ) -> StatementScan {
        // SAFETY: as the caller promises.
        unsafe { Self::begin_under(heap, index, keys, true) }
    }

    /// Begins the scan under the statement's snapshot, or the latest one when `latest`.
    ///
    /// # Safety
    /// As for [`StatementScan::begin`].
    unsafe fn begin_under(
        heap: pg_sys::Relation,
        index: pg_sys::Relation,
        keys: &mut [pg_sys::ScanKeyData],
        latest: bool,
    ) -> StatementScan {
        // SAFETY: as the caller promises; the snapshot is registered (copied) for the scan.
        unsafe {
            pg_sys::CommandCounterIncrement();
            let snapshot = pg_sys::RegisterSnapshot(if latest {
                pg_sys::GetLatestSnapshot()
            } else {
                pg_sys::GetTransactionSnapshot()
            });
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

    /// Starts the scan again with `keys` (as many as it began with), under the same snapshot.
    ///
    /// # Safety
    /// As for [`StatementScan::begin`].
    pub unsafe fn rescan(&self, keys: &mut [pg_sys::ScanKeyData]) {
        // SAFETY: the scan `begin` made, and keys the caller keeps alive.
        unsafe {
            pg_sys::index_rescan(
                self.scan,
                keys.as_mut_ptr(),
                keys.len() as i32,
                std::ptr::null_mut(),
                0,
            )
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

thread_local! {
    /// Relcache invalidations this process has taken in since it first asked.
    static RELCACHE_INVALIDATIONS: Cell<u64> = const { Cell::new(0) };
    static COUNTING_INVALIDATIONS: Cell<bool> = const { Cell::new(false) };
}

/// Called by PostgreSQL when a relcache entry is invalidated (`relid` 0: all of them).
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn count_invalidation(_arg: Datum, _relid: Oid) {
    RELCACHE_INVALIDATIONS.with(|count| count.set(count.get().wrapping_add(1)));
}

/// How many relcache invalidations this process has taken in (of any relation): what a session
/// keeps of a relation's layout (attribute numbers, an index's shape) is current while this
/// stays the same. Read it after opening the relations, which takes in pending invalidations.
pub fn relcache_invalidations() -> u64 {
    if !COUNTING_INVALIDATIONS.with(Cell::get) {
        // SAFETY: a plain function registered once per process.
        unsafe { version::register_relcache_callback(count_invalidation) };
        COUNTING_INVALIDATIONS.with(|counting| counting.set(true));
    }
    RELCACHE_INVALIDATIONS.with(Cell::get)
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

/// The oid of value `label` of the enum type `type_oid`, if it has one.
///
/// # Safety
/// Inside a transaction (a syscache lookup).
pub unsafe fn enum_value(type_oid: Oid, label: &CStr) -> Option<Oid> {
    // SAFETY: a syscache lookup, as the caller allows.
    let oid = unsafe {
        pg_sys::GetSysCacheOid(
            pg_sys::SysCacheIdentifier::ENUMTYPOIDNAME as i32,
            pg_sys::Anum_pg_enum_oid as pg_sys::AttrNumber,
            Datum::from(type_oid),
            Datum::from(label.as_ptr()),
            Datum::from(0),
            Datum::from(0),
        )
    };
    (oid != pg_sys::InvalidOid).then_some(oid)
}

/// The btree support function that compares two keys (nbtree.h's `BTORDER_PROC`), which
/// members of a row comparison call.
const BTORDER_PROC: i16 = 1;

/// How a scan key compares an index column with its value.
#[derive(Clone, Copy)]
pub enum Compare {
    /// A condition of the scan (`sk_func` is the operator's function).
    Condition,
    /// A member of a row comparison (`sk_func` is the btree's comparison support function).
    RowMember {
        /// Whether it is the row's last member.
        last: bool,
    },
}

/// A scan key on column `column` (1-based) of the open btree `index`, of type `type_oid`,
/// comparing it with `value` by the operator of `strategy` in the column's operator family, as
/// the executor builds one for an index condition; `None` when the family has no such
/// operator.
///
/// # Safety
/// `index` is open; inside a transaction (catalog lookups).
pub unsafe fn key(
    index: pg_sys::Relation,
    column: i16,
    type_oid: Oid,
    strategy: u32,
    compare: Compare,
    value: Datum,
) -> Option<pg_sys::ScanKeyData> {
    // SAFETY: an open index's relcache entry; catalog lookups; fills a blank entry.
    unsafe {
        let family = *(*index).rd_opfamily.add(column as usize - 1);
        let operator = pg_sys::get_opfamily_member(family, type_oid, type_oid, strategy as i16);
        if operator == pg_sys::InvalidOid {
            return None;
        }
        let (flags, function) = match compare {
            Compare::Condition => (0, pg_sys::get_opcode(operator)),
            Compare::RowMember { last } => (
                pg_sys::SK_ROW_MEMBER | if last { pg_sys::SK_ROW_END } else { 0 },
                pg_sys::get_opfamily_proc(family, type_oid, type_oid, BTORDER_PROC),
            ),
        };
        if function == pg_sys::InvalidOid {
            return None;
        }
        let mut entry = std::mem::zeroed::<pg_sys::ScanKeyData>();
        pg_sys::ScanKeyEntryInitialize(
            &mut entry,
            flags as i32,
            column,
            strategy as pg_sys::StrategyNumber,
            type_oid,
            pg_sys::InvalidOid,
            function,
            value,
        );
        Some(entry)
    }
}

/// The members of the row comparison of the columns of the open btree `index` from
/// `first_column` on with `values` (each with its type) by the operator of `strategy`, as the
/// executor builds them for the statement; `None` when an operator family has no such operator.
/// [`row_header`] makes the key that stands for them.
///
/// # Safety
/// `index` is open; inside a transaction (catalog lookups).
pub unsafe fn row_members<const N: usize>(
    index: pg_sys::Relation,
    first_column: i16,
    strategy: u32,
    values: [(Oid, Datum); N],
) -> Option<[pg_sys::ScanKeyData; N]> {
    // SAFETY: as the caller promises; every entry is filled before it is read.
    unsafe {
        let mut members = [std::mem::zeroed::<pg_sys::ScanKeyData>(); N];
        for (i, (type_oid, value)) in values.into_iter().enumerate() {
            let compare = Compare::RowMember { last: i == N - 1 };
            let column = first_column + i as i16;
            members[i] = key(index, column, type_oid, strategy, compare, value)?;
        }
        Some(members)
    }
}

/// The scan key of a row comparison by the operator of `strategy` whose members (made with
/// [`Compare::RowMember`], the last one marked) start at column `first_column`.
///
/// # Safety
/// `members` must stay where they are, alive, until the scan ends: the key points to them.
#[inline]
pub unsafe fn row_header(
    first_column: i16,
    strategy: u32,
    members: &mut [pg_sys::ScanKeyData],
) -> pg_sys::ScanKeyData {
    // SAFETY: a blank entry, filled as the executor fills a row comparison's header.
    unsafe {
        let mut header = std::mem::zeroed::<pg_sys::ScanKeyData>();
        header.sk_flags = pg_sys::SK_ROW_HEADER as i32;
        header.sk_attno = first_column;
        header.sk_strategy = strategy as pg_sys::StrategyNumber;
        header.sk_argument = Datum::from(members.as_mut_ptr());
        header
    }
}

/// The text of a non-NULL text datum, converted as a statement's result row is.
///
/// # Safety
/// `datum` is a text value the caller's row holds.
pub unsafe fn text_of(datum: Datum) -> Option<String> {
    // SAFETY: a text datum of the row the caller holds.
    unsafe { <String as pgrx::FromDatum>::from_datum(datum, false) }
}

/// Whether the text datum `datum` (NULL: `None`) is `text`, compared byte for byte (as the
/// statements' `=` compares texts of a deterministic collation), without copying it.
///
/// # Safety
/// `datum`, if any, is a text value the caller's row holds.
pub unsafe fn text_is(datum: Option<Datum>, text: Option<&str>) -> bool {
    match (datum, text) {
        (None, None) => true,
        (Some(datum), Some(text)) => {
            // SAFETY: a text value the caller holds; a detoasted copy lives in the current
            // memory context.
            unsafe {
                let value = pg_sys::pg_detoast_datum_packed(datum.cast_mut_ptr());
                std::slice::from_raw_parts(
                    pgrx::varlena::vardata_any(value).cast::<u8>(),
                    pgrx::varlena::varsize_any_exhdr(value),
                ) == text.as_bytes()
            }
        }
        _ => false,
    }
}

/// Column `attnum` of the stored row in `slot`: its value, `None` for NULL.
///
/// # Safety
/// The slot's attributes up to `attnum` were fetched.
pub unsafe fn value(slot: *mut pg_sys::TupleTableSlot, attnum: i16) -> Option<Datum> {
    let at = attnum as usize - 1;
    // SAFETY: the slot's attributes up to `attnum` were fetched.
    unsafe { (!*(*slot).tts_isnull.add(at)).then(|| *(*slot).tts_values.add(at)) }
}
