//! Running the extension's SQL statements.
//!
//! The statements live in `sql/*.sql`. Each is prepared once per session and kept, so a call
//! costs one execution of a cached plan. They run under a search path pinned to `pg_catalog`
//! (plans are analysed and re-validated under the same path), so no object a user creates
//! (a table, function or operator in their own schema) can capture a name they use.

use std::cell::RefCell;
use std::collections::HashMap;
use std::mem::ManuallyDrop;

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::{self, PgOid};
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiTupleTable};
use pgrx::{FromDatum, IntoDatum, PgMemoryContexts, Spi};

/// One SQL statement of the extension, with the types of its parameters.
pub struct Statement {
    /// The statement text, from a file in `sql/`.
    pub sql: &'static str,
    /// The type of each `$n` parameter, in order.
    pub args: &'static [pg_sys::Oid],
}

thread_local! {
    // Kept plans live for the whole session; ManuallyDrop keeps them from being freed from a
    // thread-exit destructor after Postgres has torn its memory down.
    static PLANS: RefCell<HashMap<usize, ManuallyDrop<OwnedPreparedStatement>>> =
        RefCell::new(HashMap::new());
}

impl Statement {
    /// Executes the statement with `args` and returns its rows.
    pub fn run<'conn>(
        &'static self,
        client: &SpiClient<'conn>,
        args: &[DatumWithOid<'_>],
    ) -> SpiTupleTable<'conn> {
        let key = self as *const Statement as usize;
        let plan = PLANS.with(|plans| {
            let mut plans = plans.borrow_mut();
            if !plans.contains_key(&key) {
                let oids: Vec<PgOid> = self.args.iter().map(|&oid| PgOid::from(oid)).collect();
                let prepared = client
                    .prepare_mut(self.sql, &oids)
                    .unwrap_or_else(|e| panic!("pg_jobs could not prepare a statement: {e}"))
                    .keep();
                plans.insert(key, ManuallyDrop::new(prepared));
            }
            // The plan is never removed from the map, so the pointer stays valid.
            &**plans.get(&key).expect("plan was just inserted") as *const OwnedPreparedStatement
        });
        // SAFETY: kept plans are never dropped or moved out of their box in the map.
        let plan: &OwnedPreparedStatement = unsafe { &*plan };
        client
            .select(plan, None, args)
            .unwrap_or_else(|e| panic!("pg_jobs statement failed: {e}"))
    }

    /// Executes the statement and returns the first column of its first row, if any.
    pub fn first<T: FromDatum + IntoDatum>(
        &'static self,
        client: &SpiClient<'_>,
        args: &[DatumWithOid<'_>],
    ) -> Option<T> {
        let table = self.run(client, args);
        if table.is_empty() {
            return None;
        }
        table
            .first()
            .get::<T>(1)
            .unwrap_or_else(|e| panic!("pg_jobs could not read a statement's result: {e}"))
    }
}

impl Statement {
    /// Executes the statement and copies the first column of every row into `context`, so the
    /// values outlive the SPI connection (and any subtransaction it ran in).
    pub fn collect<T: FromDatum>(
        &'static self,
        client: &SpiClient<'_>,
        args: &[DatumWithOid<'_>],
        context: pg_sys::MemoryContext,
    ) -> Vec<T> {
        let count = self.run(client, args).len();
        let mut values = Vec::with_capacity(count);
        // SAFETY: run() left its rows in SPI_tuptable; each value is copied out of it.
        unsafe {
            let table = pg_sys::SPI_tuptable;
            for i in 0..count {
                let mut is_null = false;
                let datum =
                    pg_sys::SPI_getbinval(*(*table).vals.add(i), (*table).tupdesc, 1, &mut is_null);
                let type_oid = pg_sys::SPI_gettypeid((*table).tupdesc, 1);
                values.extend(T::from_datum_in_memory_context(
                    PgMemoryContexts::For(context),
                    datum,
                    is_null,
                    type_oid,
                ));
            }
        }
        values
    }
}

/// Runs `body` connected to SPI, with the search path pinned to `pg_catalog`.
pub fn with_client<R>(body: impl FnOnce(&SpiClient<'_>) -> R) -> R {
    let _pin = PinnedSearchPath::push();
    Spi::connect(body)
}

/// Keeps the search path at `pg_catalog` until dropped.
struct PinnedSearchPath {
    #[cfg(any(feature = "pg17", feature = "pg18"))]
    nest_level: i32,
}

impl PinnedSearchPath {
    #[cfg(not(any(feature = "pg17", feature = "pg18")))]
    fn push() -> Self {
        let mut path = pg_sys::OverrideSearchPath {
            schemas: std::ptr::null_mut(),
            addCatalog: true,
            addTemp: false,
            generation: 0,
        };
        // SAFETY: PushOverrideSearchPath copies the struct into its own memory.
        unsafe { pg_sys::PushOverrideSearchPath(&mut path) };
        PinnedSearchPath {}
    }

    #[cfg(any(feature = "pg17", feature = "pg18"))]
    fn push() -> Self {
        // Postgres 17 removed override search paths; a GUC nest level does the same job.
        unsafe {
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
            PinnedSearchPath { nest_level }
        }
    }
}

impl Drop for PinnedSearchPath {
    fn drop(&mut self) {
        // While an ERROR unwinds, leave the entry to (sub)transaction abort, which pops it.
        if std::thread::panicking() {
            return;
        }
        #[cfg(not(any(feature = "pg17", feature = "pg18")))]
        unsafe {
            pg_sys::PopOverrideSearchPath()
        };
        #[cfg(any(feature = "pg17", feature = "pg18"))]
        unsafe {
            pg_sys::AtEOXact_GUC(true, self.nest_level)
        };
    }
}

/// A timestamptz parameter holding `micros` since the Postgres epoch.
pub fn timestamptz_arg(micros: pg_sys::TimestampTz) -> DatumWithOid<'static> {
    // SAFETY: timestamptz is an i64 passed by value.
    unsafe { DatumWithOid::new(micros, pg_sys::TIMESTAMPTZOID) }
}

/// The server's clock, the only clock pg_jobs uses for its decisions.
pub fn server_now() -> pg_sys::TimestampTz {
    // SAFETY: reads the system clock.
    unsafe { pg_sys::GetCurrentTimestamp() }
}
