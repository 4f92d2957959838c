//! Running the extension's SQL statements.
//!
//! The statements live in `sql/*.sql`. Each is prepared once per session and kept, so a call
//! costs one execution of a cached plan. They run under a search path pinned to `pg_catalog`
//! (plans are analysed and re-validated under the same path), so no object a user creates
//! (a table, function or operator in their own schema) can capture a name they use, and with
//! sequential scans off, so a plan made while `jobs.job` was small stays an index plan.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CString;

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::spi::SpiClient;
use pgrx::{FromDatum, PgMemoryContexts, Spi};

/// One SQL statement of the extension, with the types of its parameters.
pub struct Statement {
    /// The statement text, from a file in `sql/`.
    pub sql: &'static str,
    /// The type of each `$n` parameter, in order.
    pub args: &'static [pg_sys::Oid],
}

thread_local! {
    // Kept plans live for the whole session, keyed by the address of their Statement.
    static PLANS: RefCell<HashMap<usize, pg_sys::SPIPlanPtr>> = RefCell::new(HashMap::new());
}

impl Statement {
    /// The statement's kept plan, prepared on first use in this session.
    ///
    /// Plans are generic: the statements are written so one plan serves every argument, and a
    /// custom plan per call would cost more to plan (about a millisecond for the claim) than
    /// to run.
    fn plan(&'static self) -> pg_sys::SPIPlanPtr {
        let key = self as *const Statement as usize;
        PLANS.with(|plans| {
            *plans.borrow_mut().entry(key).or_insert_with(|| {
                let sql = CString::new(self.sql).expect("statement text has no NUL byte");
                let mut types = self.args.to_vec();
                // SAFETY: a valid statement and argument types; SPI is connected (with_client).
                unsafe {
                    let plan = pg_sys::SPI_prepare_cursor(
                        sql.as_ptr(),
                        types.len() as i32,
                        types.as_mut_ptr(),
                        pg_sys::CURSOR_OPT_GENERIC_PLAN as i32,
                    );
                    let status = pg_sys::SPI_result;
                    assert!(
                        !plan.is_null(),
                        "pg_jobs could not prepare a statement (SPI error {status})"
                    );
                    pg_sys::SPI_keepplan(plan);
                    plan
                }
            })
        })
    }

    /// Executes the statement with `args` and returns its rows.
    pub fn run(&'static self, _client: &SpiClient<'_>, args: &[DatumWithOid<'_>]) -> Rows {
        assert_eq!(
            args.len(),
            self.args.len(),
            "wrong number of arguments for a pg_jobs statement"
        );
        let mut values: Vec<pg_sys::Datum> = Vec::with_capacity(args.len());
        let mut nulls: Vec<std::ffi::c_char> = Vec::with_capacity(args.len());
        for arg in args {
            match arg.datum() {
                Some(datum) => {
                    values.push(datum.sans_lifetime());
                    nulls.push(b' ' as std::ffi::c_char);
                }
                None => {
                    values.push(pg_sys::Datum::from(0));
                    nulls.push(b'n' as std::ffi::c_char);
                }
            }
        }
        // SAFETY: a kept plan with as many arguments as we pass; SPI is connected.
        unsafe {
            let status = pg_sys::SPI_execute_plan(
                self.plan(),
                values.as_mut_ptr(),
                nulls.as_ptr(),
                false,
                0,
            );
            assert!(
                status >= 0,
                "pg_jobs statement failed with SPI status {status}"
            );
            Rows {
                table: pg_sys::SPI_tuptable,
                processed: pg_sys::SPI_processed as usize,
            }
        }
    }

    /// Executes the statement and returns the first column of its first row, if any.
    pub fn first<T: FromDatum>(
        &'static self,
        client: &SpiClient<'_>,
        args: &[DatumWithOid<'_>],
    ) -> Option<T> {
        self.run(client, args).first().and_then(|row| row.get(1))
    }

    /// Executes the statement and copies the first column of every row into `context`, so the
    /// values outlive the SPI connection (and any subtransaction it ran in).
    pub fn collect<T: FromDatum>(
        &'static self,
        client: &SpiClient<'_>,
        args: &[DatumWithOid<'_>],
        context: pg_sys::MemoryContext,
    ) -> Vec<T> {
        let rows = self.run(client, args);
        (0..rows.returned())
            .filter_map(|row| rows.value_in(row, 1, Some(context)))
            .collect()
    }
}

/// The rows a statement returned, valid until the next statement or the end of the SPI
/// connection.
pub struct Rows {
    /// The returned rows; null for a statement without RETURNING.
    table: *mut pg_sys::SPITupleTable,
    /// Rows the statement processed: returned, or changed when it returns none.
    processed: usize,
}

/// One row of [`Rows`].
#[derive(Clone, Copy)]
pub struct Row<'a> {
    rows: &'a Rows,
    index: usize,
}

impl Rows {
    /// How many rows the statement returned, or changed when it returns none.
    pub fn len(&self) -> usize {
        self.processed
    }

    /// How many rows there are to read.
    fn returned(&self) -> usize {
        if self.table.is_null() {
            0
        } else {
            self.processed
        }
    }

    /// The first row, if any.
    pub fn first(&self) -> Option<Row<'_>> {
        self.iter().next()
    }

    /// Every row in order.
    pub fn iter(&self) -> impl Iterator<Item = Row<'_>> {
        (0..self.returned()).map(move |index| Row { rows: self, index })
    }

    /// Column `column` (1-based) of row `row`, copied into `context` when given (for values
    /// that stay Postgres datums), else converted into a Rust value.
    fn value_in<T: FromDatum>(
        &self,
        row: usize,
        column: usize,
        context: Option<pg_sys::MemoryContext>,
    ) -> Option<T> {
        // SAFETY: row < count and the table is the one SPI left for this statement.
        unsafe {
            let tupdesc = (*self.table).tupdesc;
            let tuple = *(*self.table).vals.add(row);
            let mut is_null = false;
            let datum = pg_sys::SPI_getbinval(tuple, tupdesc, column as i32, &mut is_null);
            let type_oid = pg_sys::SPI_gettypeid(tupdesc, column as i32);
            match context {
                Some(context) => T::from_datum_in_memory_context(
                    PgMemoryContexts::For(context),
                    datum,
                    is_null,
                    type_oid,
                ),
                None => T::from_polymorphic_datum(datum, is_null, type_oid),
            }
        }
    }
}

impl Row<'_> {
    /// Column `column` (1-based), or `None` for NULL. Only for types that own their value
    /// (numbers, text, uuid, timestamps); row and jsonb datums need [`Row::get_in`].
    pub fn get<T: FromDatum>(&self, column: usize) -> Option<T> {
        self.rows.value_in(self.index, column, None)
    }

    /// Column `column` (1-based) copied into `context`, for values that stay Postgres datums
    /// and must outlive the SPI connection.
    pub fn get_in<T: FromDatum>(&self, column: usize, context: pg_sys::MemoryContext) -> Option<T> {
        self.rows.value_in(self.index, column, Some(context))
    }
}

/// Runs `body` connected to SPI, under the settings every statement of the extension runs
/// under (see [`StatementSettings`]).
pub fn with_client<R>(body: impl FnOnce(&SpiClient<'_>) -> R) -> R {
    let _settings = StatementSettings::push();
    Spi::connect(body)
}

/// The settings the extension's statements run (and are planned) under, until dropped: the
/// search path pinned to `pg_catalog`, sequential scans off, and no JIT.
///
/// Why no sequential scans: a kept plan is made once and then reused until something
/// invalidates it, and it is often made when `jobs.job` is nearly empty (a new install, a
/// session that started on an idle queue, a TRUNCATE), where reading the table's one page
/// costs less than an index. That plan then reads the whole table on every call as the table
/// grows (a complete reading 60 pages after 3,000 jobs). Every statement here reaches its rows
/// through an index, so planning as if the table were big is right at every size.
///
/// Why no JIT: where no index serves (the worker's look at the few rows of `jobs.queue`), the
/// sequential scan that remains carries the planner's penalty for disabled paths, which is far
/// above `jit_above_cost`: each call would spend tens of milliseconds compiling.
struct StatementSettings {
    nest_level: i32,
}

/// Sets `name` to `value` until the GUC nest level the caller opened is closed.
///
/// # Safety
/// A GUC nest level must be open (NewGUCNestLevel) and `name` a settable user setting.
unsafe fn set_for_statement(name: &std::ffi::CStr, value: &std::ffi::CStr) {
    pg_sys::set_config_option(
        name.as_ptr(),
        value.as_ptr(),
        pg_sys::GucContext::PGC_USERSET,
        pg_sys::GucSource::PGC_S_SESSION,
        pg_sys::GucAction::GUC_ACTION_SAVE,
        true,
        0,
        false,
    );
}

impl StatementSettings {
    fn push() -> Self {
        // SAFETY: a nest level closed in drop (or by transaction abort on an ERROR); all are
        // user settings.
        unsafe {
            let nest_level = pg_sys::NewGUCNestLevel();
            set_for_statement(c"enable_seqscan", c"off");
            set_for_statement(c"jit", c"off");
            #[cfg(any(feature = "pg17", feature = "pg18"))]
            // Postgres 17 removed override search paths; the nest level does the same job.
            set_for_statement(c"search_path", c"pg_catalog");
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
            }
            StatementSettings { nest_level }
        }
    }
}

impl Drop for StatementSettings {
    fn drop(&mut self) {
        // While an ERROR unwinds, leave both to (sub)transaction abort, which pops them.
        if std::thread::panicking() {
            return;
        }
        // SAFETY: undoes exactly what push did, innermost first.
        unsafe {
            #[cfg(not(any(feature = "pg17", feature = "pg18")))]
            pg_sys::PopOverrideSearchPath();
            pg_sys::AtEOXact_GUC(true, self.nest_level);
        }
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
