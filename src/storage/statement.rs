//! Kept SPI plans of declared statements, and the settings they run under.
//!
//! Each [`Statement`] declares its parameters (name and type, in `$n` order) and the names of
//! the columns it returns; it is prepared once per session as a generic plan and kept, so a call
//! costs one execution of a cached plan. Rows are read by column name, and the first execution
//! in a session checks that the statement returns exactly the columns it declares, so a
//! statement and the code reading it cannot drift apart. Statements run under a search path
//! pinned to `pg_catalog` (plans are analysed and re-validated under the same path), so no
//! object a user creates (a table, function or operator in their own schema) can capture a name
//! they use, and with sequential and bitmap scans and JIT off (see [`StatementSettings`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CString;

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::spi::SpiClient;
use pgrx::{FromDatum, PgMemoryContexts, Spi};

use crate::pg::version;

/// One `$n` parameter of a statement.
#[derive(Clone, Copy)]
pub struct Param {
    /// What the parameter is, for readers and for the argument-count check's message.
    pub name: &'static str,
    /// Its SQL type.
    pub type_oid: pg_sys::Oid,
}

/// Declares a parameter (for the `params` list of a [`Statement`]).
pub const fn param(name: &'static str, type_oid: pg_sys::Oid) -> Param {
    Param { name, type_oid }
}

/// Declares a [`Statement`] as a signature: `area/file`, its parameters as `name: TYPE_OID` in
/// `$n` order, and after `->` the columns it returns (`()` for none). Its SQL is `file.sql`
/// beside the declaring module, and its name (in error messages, and for `storage::shard`) is
/// `area/file`, so the two cannot name different statements.
///
/// ```ignore
/// static COMPLETE: Statement =
///     statement!(settle/complete(id: INT8OID, lease: UUIDOID) -> (queue, group_key));
/// ```
macro_rules! statement {
    (
        $area:ident / $file:ident
        ($($param:ident: $type_oid:path),* $(,)?) -> ($($column:ident),* $(,)?)
    ) => {
        $crate::storage::Statement {
            name: concat!(stringify!($area), "/", stringify!($file)),
            sql: include_str!(concat!(stringify!($file), ".sql")),
            params: &[$($crate::storage::param(stringify!($param), $type_oid)),*],
            columns: &[$(stringify!($column)),*],
        }
    };
}
pub(crate) use statement;

/// One SQL statement of the extension: its text, its parameters and the columns it returns.
pub struct Statement {
    /// What the statement is for, in error messages about it.
    pub name: &'static str,
    /// The statement text, from the `.sql` file next to the code that runs it.
    pub sql: &'static str,
    /// Its parameters, in `$n` order.
    pub params: &'static [Param],
    /// The names of the columns it returns, in order; empty for a statement without rows.
    pub columns: &'static [&'static str],
}

/// A statement's kept plan and whether its result shape was checked in this session.
struct KeptPlan {
    plan: pg_sys::SPIPlanPtr,
    shape_checked: bool,
}

thread_local! {
    // Kept plans live for the whole session, keyed by the address of their Statement and the
    // shard they run on (0: the plain tables).
    static PLANS: RefCell<HashMap<(usize, i64), KeptPlan>> = RefCell::new(HashMap::new());
}

impl Statement {
    /// The statement's kept plan, prepared on first use in this session, and whether its result
    /// shape still has to be checked.
    ///
    /// Plans are generic: the statements are written so one plan serves every argument, and a
    /// custom plan per call would cost more to plan (about a millisecond for the claim) than
    /// to run.
    fn plan(&'static self) -> (pg_sys::SPIPlanPtr, bool) {
        // On a shard (storage::shard), the statement names the shard's tables, under a plan
        // of its own for each shard.
        let key = (
            self as *const Statement as usize,
            super::shard::current_key(),
        );
        PLANS.with(|plans| {
            let mut plans = plans.borrow_mut();
            let kept = plans.entry(key).or_insert_with(|| {
                let text = match key.1 {
                    0 => None,
                    _ => super::shard::rewrite(self.name, self.sql),
                };
                let sql = CString::new(text.as_deref().unwrap_or(self.sql))
                    .expect("statement text has no NUL byte");
                let mut types: Vec<pg_sys::Oid> = self.params.iter().map(|p| p.type_oid).collect();
                // SAFETY: a valid statement and argument types; SPI is connected (with_client).
                let plan = unsafe {
                    let plan = pg_sys::SPI_prepare_cursor(
                        sql.as_ptr(),
                        types.len() as i32,
                        types.as_mut_ptr(),
                        pg_sys::CURSOR_OPT_GENERIC_PLAN as i32,
                    );
                    let status = pg_sys::SPI_result;
                    assert!(
                        !plan.is_null(),
                        "pg_jobs could not prepare its statement {} (SPI error {status})",
                        self.name
                    );
                    pg_sys::SPI_keepplan(plan);
                    plan
                };
                KeptPlan {
                    plan,
                    shape_checked: false,
                }
            });
            let check = !kept.shape_checked;
            kept.shape_checked = true;
            (kept.plan, check)
        })
    }

    /// Executes the statement with `args` (one per declared parameter) and returns its rows.
    pub fn run(&'static self, client: &SpiClient<'_>, args: &[DatumWithOid<'_>]) -> Rows {
        self.execute(client, args, false)
    }

    /// Executes the statement as [`Statement::run`] does, but under the latest snapshot, also
    /// under REPEATABLE READ or SERIALIZABLE: it sees every commit made before it started (for
    /// a decision taken under a lock whose holders commit before releasing it).
    pub fn run_latest(&'static self, client: &SpiClient<'_>, args: &[DatumWithOid<'_>]) -> Rows {
        self.execute(client, args, true)
    }

    fn execute(
        &'static self,
        _client: &SpiClient<'_>,
        args: &[DatumWithOid<'_>],
        latest: bool,
    ) -> Rows {
        assert_eq!(
            args.len(),
            self.params.len(),
            "pg_jobs statement {} takes {} arguments ({}), got {}",
            self.name,
            self.params.len(),
            self.params
                .iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
                .join(", "),
            args.len()
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
        let (plan, check_shape) = self.plan();
        // SAFETY: a kept plan with as many arguments as we pass; SPI is connected. The latest
        // snapshot is taken inside a transaction; SPI advances its command id before each
        // query, so this transaction's own changes are seen too.
        let rows = unsafe {
            let status = if latest {
                pg_sys::SPI_execute_snapshot(
                    plan,
                    values.as_mut_ptr(),
                    nulls.as_ptr(),
                    pg_sys::GetLatestSnapshot(),
                    std::ptr::null_mut(),
                    false,
                    true,
                    0,
                )
            } else {
                pg_sys::SPI_execute_plan(plan, values.as_mut_ptr(), nulls.as_ptr(), false, 0)
            };
            assert!(
                status >= 0,
                "pg_jobs statement {} failed with SPI status {status}",
                self.name
            );
            Rows {
                table: pg_sys::SPI_tuptable,
                processed: pg_sys::SPI_processed as usize,
                statement: self,
            }
        };
        if check_shape {
            rows.check_shape();
        }
        rows
    }

    /// Executes the statement and returns column `column` of its first row, if any.
    pub fn first<T: FromDatum>(
        &'static self,
        client: &SpiClient<'_>,
        args: &[DatumWithOid<'_>],
        column: &str,
    ) -> Option<T> {
        self.run(client, args)
            .first()
            .and_then(|row| row.get(column))
    }

    /// Executes the statement and copies column `column` of every row into `context`, so the
    /// values outlive the SPI connection (and any subtransaction it ran in).
    pub fn collect<T: FromDatum>(
        &'static self,
        client: &SpiClient<'_>,
        args: &[DatumWithOid<'_>],
        column: &str,
        context: pg_sys::MemoryContext,
    ) -> Vec<T> {
        let rows = self.run(client, args);
        rows.iter()
            .filter_map(|row| row.get_in(column, context))
            .collect()
    }

    /// The 1-based position of a declared column.
    fn column_number(&self, column: &str) -> usize {
        match self.columns.iter().position(|c| *c == column) {
            Some(index) => index + 1,
            None => panic!(
                "pg_jobs statement {} has no column {column} (it returns {})",
                self.name,
                self.columns.join(", ")
            ),
        }
    }
}

/// The rows a statement returned, valid until the next statement or the end of the SPI
/// connection.
pub struct Rows {
    /// The returned rows; null for a statement without RETURNING.
    table: *mut pg_sys::SPITupleTable,
    /// Rows the statement processed: returned, or changed when it returns none.
    processed: usize,
    statement: &'static Statement,
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

    /// Whether the statement returned (or changed) no rows.
    pub fn is_empty(&self) -> bool {
        self.processed == 0
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

    /// Checks that the statement returned the columns it declares: a mismatch is a bug in
    /// pg_jobs, found the first time the statement runs.
    fn check_shape(&self) {
        let statement = self.statement;
        let actual: Vec<String> = if self.table.is_null() {
            Vec::new()
        } else {
            // SAFETY: the tuple descriptor SPI left for this statement's rows.
            unsafe {
                let tupdesc = (*self.table).tupdesc;
                (1..=(*tupdesc).natts)
                    .map(|i| {
                        let name = pg_sys::SPI_fname(tupdesc, i);
                        std::ffi::CStr::from_ptr(name)
                            .to_string_lossy()
                            .into_owned()
                    })
                    .collect()
            }
        };
        assert!(
            actual
                .iter()
                .map(String::as_str)
                .eq(statement.columns.iter().copied()),
            "pg_jobs statement {} returned columns ({}) but declares ({})",
            statement.name,
            actual.join(", "),
            statement.columns.join(", ")
        );
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
    /// The value of the declared column `column`, or `None` for NULL. Only for types that own
    /// their value (numbers, text, uuid, timestamps); row and jsonb datums need
    /// [`Row::get_in`].
    pub fn get<T: FromDatum>(&self, column: &str) -> Option<T> {
        let number = self.rows.statement.column_number(column);
        self.rows.value_in(self.index, number, None)
    }

    /// The value of the declared column `column` copied into `context`, for values that stay
    /// Postgres datums and must outlive the SPI connection.
    pub fn get_in<T: FromDatum>(&self, column: &str, context: pg_sys::MemoryContext) -> Option<T> {
        let number = self.rows.statement.column_number(column);
        self.rows.value_in(self.index, number, Some(context))
    }

    /// A column the statement always fills, by name; a NULL there is a bug in pg_jobs.
    pub fn expect<T: FromDatum>(&self, column: &str) -> T {
        self.get(column).unwrap_or_else(|| {
            panic!(
                "pg_jobs statement {} returned NULL in column {column}",
                self.rows.statement.name
            )
        })
    }
}

/// Runs `body` connected to SPI, under the settings every statement of the extension runs
/// under (see [`StatementSettings`]).
pub fn with_client<R>(body: impl FnOnce(&SpiClient<'_>) -> R) -> R {
    let _settings = StatementSettings::push();
    Spi::connect(body)
}

/// The settings the extension's statements run (and are planned) under, until dropped: the
/// search path pinned to `pg_catalog`, sequential and bitmap scans off, and no JIT.
///
/// Why no sequential scans: a kept plan is made once and then reused until something
/// invalidates it, and it is often made when `jobs.job` is nearly empty (a new install, a
/// session that started on an idle queue, a TRUNCATE), where reading the table's one page
/// costs less than an index. That plan then reads the whole table on every call as the table
/// grows. Every statement here reaches its rows
/// through an index, so planning as if the table were big is right at every size.
///
/// Why no bitmap scans: a bitmap scan reads every row its index conditions match before the
/// first one comes out, in page order, so a statement that wants the first rows in index order
/// (a claim's next due jobs) must then sort them all. With the statistics of a backlog (every
/// row queued, one queue, one priority) on a table of about a thousand jobs, the planner costs
/// that below the ordered index scan that stops at the first job, and the claim's kept plan
/// read every queued job to take one. The statements here look rows
/// up by key or walk an index in order; none needs a bitmap to combine indexes.
///
/// Why no JIT: where no index serves (the worker's look at the few rows of `jobs.queue`), the
/// sequential scan that remains carries the planner's penalty for disabled paths, which is far
/// above `jit_above_cost`: each call would spend tens of milliseconds compiling.
///
/// Why the three planner settings are written to their variables rather than set through the
/// settings machinery (a nest level, `set_config_option`, and a walk over every setting to undo
/// it): they only steer planning, nothing in between reads them through that machinery, and
/// going through it was the largest part of what a call costs beside its statements. Drop
/// puts the caller's values back on every way out, an ERROR unwinding included.
struct StatementSettings {
    /// The caller's `enable_seqscan`.
    seqscan: bool,
    /// The caller's `enable_bitmapscan`.
    bitmapscan: bool,
    /// The caller's `jit`.
    jit: bool,
    /// How the search path was pinned, to undo it.
    search_path: version::SearchPathPin,
}

impl StatementSettings {
    fn push() -> Self {
        // SAFETY: all three are plain bool settings without hooks, read only by the planner and
        // executor of this backend; drop restores them. The pin is undone by drop (or by
        // transaction abort on an ERROR).
        unsafe {
            let settings = StatementSettings {
                seqscan: pg_sys::enable_seqscan,
                bitmapscan: pg_sys::enable_bitmapscan,
                jit: pg_sys::jit_enabled,
                search_path: version::pin_search_path(),
            };
            pg_sys::enable_seqscan = false;
            pg_sys::enable_bitmapscan = false;
            pg_sys::jit_enabled = false;
            settings
        }
    }
}

impl Drop for StatementSettings {
    fn drop(&mut self) {
        // SAFETY: restores what push found; the settings machinery never saw the change.
        unsafe {
            pg_sys::enable_seqscan = self.seqscan;
            pg_sys::enable_bitmapscan = self.bitmapscan;
            pg_sys::jit_enabled = self.jit;
        }
        // While an ERROR unwinds, leave the pin to (sub)transaction abort, which pops it.
        if std::thread::panicking() {
            return;
        }
        // SAFETY: undoes exactly what push pinned.
        unsafe { version::unpin_search_path(&self.search_path) };
    }
}

/// A timestamptz parameter holding `micros` since the Postgres epoch.
pub fn timestamptz_arg(micros: pg_sys::TimestampTz) -> DatumWithOid<'static> {
    // SAFETY: timestamptz is an i64 passed by value.
    unsafe { DatumWithOid::new(micros, pg_sys::TIMESTAMPTZOID) }
}
