//! Set-returning functions that hand PostgreSQL all their rows at once (materialize mode),
//! instead of one row per call as pgrx's own iterators do.
//!
//! Why: every `jobs_*` function is `SECURITY DEFINER` with a pinned `search_path`, and
//! PostgreSQL wraps each *call* of such a function in a change of user and a new GUC nest level
//! (set, then undo, the search path). A claim of 100 jobs returned one row per call paid that
//! 100 times; here it is paid once. The types keep pgrx's names (`TableIterator`,
//! `SetOfIterator`) so that `#[pg_extern]` reads their columns (`name!`) as it reads pgrx's, and
//! generates the same SQL (`RETURNS TABLE (...)`, `RETURNS SETOF ...`).

use pgrx::callconv::RetAbi;
use pgrx::pg_sys;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::{IntoDatum, IntoHeapTuple};

use crate::pg::errors::raise;

/// The rows of a `RETURNS TABLE (...)` function, each a tuple of its columns.
pub struct TableIterator<'a, Row> {
    rows: Box<dyn Iterator<Item = Row> + 'a>,
}

impl<'a, Row> TableIterator<'a, Row> {
    /// The function's rows.
    pub fn new(rows: impl IntoIterator<Item = Row> + 'a) -> Self {
        TableIterator {
            rows: Box::new(rows.into_iter()),
        }
    }
}

/// The rows of a `RETURNS SETOF type` function.
pub struct SetOfIterator<'a, T> {
    rows: Box<dyn Iterator<Item = T> + 'a>,
}

impl<'a, T> SetOfIterator<'a, T> {
    /// The function's rows.
    pub fn new(rows: impl IntoIterator<Item = T> + 'a) -> Self {
        SetOfIterator {
            rows: Box::new(rows.into_iter()),
        }
    }
}

// SAFETY: the SQL is pgrx's own for the same shapes of return.
unsafe impl<'a, Row> SqlTranslatable for TableIterator<'a, Row>
where
    pgrx::iter::TableIterator<'a, Row>: SqlTranslatable,
{
    const TYPE_IDENT: &'static str =
        <pgrx::iter::TableIterator<'a, Row> as SqlTranslatable>::TYPE_IDENT;
    const TYPE_ORIGIN: TypeOrigin =
        <pgrx::iter::TableIterator<'a, Row> as SqlTranslatable>::TYPE_ORIGIN;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Err(ArgumentError::Table);
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
        <pgrx::iter::TableIterator<'a, Row> as SqlTranslatable>::RETURN_SQL;
}

// SAFETY: as above.
unsafe impl<'a, T> SqlTranslatable for SetOfIterator<'a, T>
where
    pgrx::iter::SetOfIterator<'a, T>: SqlTranslatable,
{
    const TYPE_IDENT: &'static str =
        <pgrx::iter::SetOfIterator<'a, T> as SqlTranslatable>::TYPE_IDENT;
    const TYPE_ORIGIN: TypeOrigin =
        <pgrx::iter::SetOfIterator<'a, T> as SqlTranslatable>::TYPE_ORIGIN;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Err(ArgumentError::SetOf);
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
        <pgrx::iter::SetOfIterator<'a, T> as SqlTranslatable>::RETURN_SQL;
}

/// Where the rows go: the tuplestore of the call, and the row type it was set up with.
struct Materialized {
    store: *mut pg_sys::Tuplestorestate,
    desc: pg_sys::TupleDesc,
    composite: bool,
}

/// Sets the call up to return a tuplestore (SFRM_Materialize), in the query's memory.
///
/// # Safety
/// `fcinfo` is the call of a set-returning function.
unsafe fn materialize(fcinfo: pg_sys::FunctionCallInfo) -> Materialized {
    // SAFETY: the executor passes a ReturnSetInfo to set-returning functions; everything the
    // tuplestore needs lives in the per-query context, as PostgreSQL's own SRFs do it.
    unsafe {
        let rsinfo = (*fcinfo).resultinfo.cast::<pg_sys::ReturnSetInfo>();
        if rsinfo.is_null()
            || (*rsinfo).type_ != pg_sys::NodeTag::T_ReturnSetInfo
            || ((*rsinfo).allowedModes & pg_sys::SetFunctionReturnMode::SFRM_Materialize as i32)
                == 0
        {
            raise(
                pgrx::PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                "this pg_jobs function returns a set: call it in FROM (SELECT * FROM ...)"
                    .to_owned(),
            );
        }
        let mut desc: pg_sys::TupleDesc = std::ptr::null_mut();
        let kind = pg_sys::get_call_result_type(fcinfo, std::ptr::null_mut(), &mut desc);
        let composite = kind == pg_sys::TypeFuncClass::TYPEFUNC_COMPOSITE;
        let per_query = (*(*rsinfo).econtext).ecxt_per_query_memory;
        let previous = pg_sys::MemoryContextSwitchTo(per_query);
        let desc = if composite {
            pg_sys::BlessTupleDesc(pg_sys::CreateTupleDescCopy(desc))
        } else {
            // A set of one scalar: a one-column row of the function's result type.
            let scalar = pg_sys::CreateTemplateTupleDesc(1);
            pg_sys::TupleDescInitEntry(
                scalar,
                1,
                c"value".as_ptr(),
                pg_sys::get_fn_expr_rettype((*fcinfo).flinfo),
                -1,
                0,
            );
            scalar
        };
        let random_access = ((*rsinfo).allowedModes
            & pg_sys::SetFunctionReturnMode::SFRM_Materialize_Random as i32)
            != 0;
        let store = pg_sys::tuplestore_begin_heap(random_access, false, pg_sys::work_mem);
        (*rsinfo).returnMode = pg_sys::SetFunctionReturnMode::SFRM_Materialize;
        (*rsinfo).setResult = store;
        (*rsinfo).setDesc = desc;
        pg_sys::MemoryContextSwitchTo(previous);
        Materialized {
            store,
            desc,
            composite,
        }
    }
}

/// The value PostgreSQL expects from a materializing call (it reads the tuplestore instead).
///
/// # Safety
/// `fcinfo` is the current call.
unsafe fn done(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: the call's own fcinfo.
    unsafe { (*fcinfo).isnull = true };
    pg_sys::Datum::from(0)
}

// SAFETY: the whole result is written to the call's tuplestore before the function returns, in
// the memory PostgreSQL reads it from; nothing is kept across calls.
unsafe impl<Row> RetAbi for TableIterator<'_, Row>
where
    Row: IntoHeapTuple,
{
    type Item = Row;
    type Ret = Self;

    fn to_ret(self) -> Self::Ret {
        self
    }

    unsafe fn box_ret_in_fcinfo(fcinfo: pg_sys::FunctionCallInfo, ret: Self::Ret) -> pg_sys::Datum {
        // SAFETY: a set-returning call; each tuple is formed with the descriptor the store was
        // set up with and copied into the store.
        unsafe {
            let out = materialize(fcinfo);
            for row in ret.rows {
                let tuple = row.into_heap_tuple(out.desc);
                pg_sys::tuplestore_puttuple(out.store, tuple);
                pg_sys::heap_freetuple(tuple);
            }
            done(fcinfo)
        }
    }

    unsafe fn move_into_fcinfo_fcx(self, _fcinfo: pg_sys::FunctionCallInfo) {}

    unsafe fn fill_fcinfo_fcx(&self, _fcinfo: pg_sys::FunctionCallInfo) {}
}

// SAFETY: as for TableIterator. A composite value is stored as its tuple, a scalar as a row of
// one column.
unsafe impl<T> RetAbi for SetOfIterator<'_, T>
where
    T: IntoDatum,
{
    type Item = T;
    type Ret = Self;

    fn to_ret(self) -> Self::Ret {
        self
    }

    unsafe fn box_ret_in_fcinfo(fcinfo: pg_sys::FunctionCallInfo, ret: Self::Ret) -> pg_sys::Datum {
        // SAFETY: as for TableIterator; a composite datum is a HeapTupleHeader of the
        // function's row type.
        unsafe {
            let out = materialize(fcinfo);
            for value in ret.rows {
                let datum = value.into_datum();
                if out.composite {
                    let Some(datum) = datum else { continue };
                    let header = pg_sys::pg_detoast_datum(datum.cast_mut_ptr())
                        .cast::<pg_sys::HeapTupleHeaderData>();
                    let mut tuple: pg_sys::HeapTupleData = std::mem::zeroed();
                    tuple.t_len = pgrx::varsize(header.cast()) as u32;
                    tuple.t_data = header;
                    pg_sys::tuplestore_puttuple(out.store, &mut tuple);
                } else {
                    let mut value = datum.unwrap_or(pg_sys::Datum::from(0));
                    let mut is_null = datum.is_none();
                    pg_sys::tuplestore_putvalues(
                        out.store,
                        out.desc,
                        &raw mut value,
                        &raw mut is_null,
                    );
                }
            }
            done(fcinfo)
        }
    }

    unsafe fn move_into_fcinfo_fcx(self, _fcinfo: pg_sys::FunctionCallInfo) {}

    unsafe fn fill_fcinfo_fcx(&self, _fcinfo: pg_sys::FunctionCallInfo) {}
}
