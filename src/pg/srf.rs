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

/// Defines a set-returning type of rows `$row`, named as pgrx's type of that shape is (so
/// `#[pg_extern]` generates the same SQL for it), whose call hands PostgreSQL every row at once:
/// its constructor, its SQL (pgrx's own for that shape) and its return, which stores each row
/// with `$store`. A macro because the two types differ only in names and bounds.
macro_rules! materialized_set {
    (
        $(#[$doc:meta])*
        $name:ident<$row:ident: $bound:path>, $argument_error:ident, $store:ident
    ) => {
        $(#[$doc])*
        pub struct $name<'a, $row> {
            rows: Box<dyn Iterator<Item = $row> + 'a>,
        }

        impl<'a, $row> $name<'a, $row> {
            /// The function's rows.
            pub fn new(rows: impl IntoIterator<Item = $row> + 'a) -> Self {
                $name {
                    rows: Box::new(rows.into_iter()),
                }
            }
        }

        // SAFETY: the SQL is pgrx's own for the same shape of return.
        unsafe impl<'a, $row> SqlTranslatable for $name<'a, $row>
        where
            pgrx::iter::$name<'a, $row>: SqlTranslatable,
        {
            const TYPE_IDENT: &'static str =
                <pgrx::iter::$name<'a, $row> as SqlTranslatable>::TYPE_IDENT;
            const TYPE_ORIGIN: TypeOrigin =
                <pgrx::iter::$name<'a, $row> as SqlTranslatable>::TYPE_ORIGIN;
            const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> =
                Err(ArgumentError::$argument_error);
            const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
                <pgrx::iter::$name<'a, $row> as SqlTranslatable>::RETURN_SQL;
        }

        // SAFETY: the whole result is written to the call's tuplestore before the function
        // returns, in the memory PostgreSQL reads it from; nothing is kept across calls.
        unsafe impl<$row> RetAbi for $name<'_, $row>
        where
            $row: $bound,
        {
            type Item = $row;
            type Ret = Self;

            fn to_ret(self) -> Self::Ret {
                self
            }

            unsafe fn box_ret_in_fcinfo(
                fcinfo: pg_sys::FunctionCallInfo,
                ret: Self::Ret,
            ) -> pg_sys::Datum {
                // SAFETY: a set-returning call; each row goes into the store set up for it.
                unsafe {
                    let out = materialize(fcinfo);
                    for row in ret.rows {
                        $store(&out, row);
                    }
                    done(fcinfo)
                }
            }

            unsafe fn move_into_fcinfo_fcx(self, _fcinfo: pg_sys::FunctionCallInfo) {}

            unsafe fn fill_fcinfo_fcx(&self, _fcinfo: pg_sys::FunctionCallInfo) {}
        }
    };
}

materialized_set!(
    /// The rows of a `RETURNS TABLE (...)` function, each a tuple of its columns.
    TableIterator<Row: IntoHeapTuple>, Table, store_tuple
);

materialized_set!(
    /// The rows of a `RETURNS SETOF type` function.
    SetOfIterator<T: IntoDatum>, SetOf, store_value
);

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

/// Stores a row of a `RETURNS TABLE` function: its tuple, formed with the store's descriptor
/// and copied into the store.
///
/// # Safety
/// `out` is the current call's, from [`materialize`].
#[inline]
unsafe fn store_tuple<Row: IntoHeapTuple>(out: &Materialized, row: Row) {
    // SAFETY: the store and the descriptor it was set up with.
    unsafe {
        let tuple = row.into_heap_tuple(out.desc);
        pg_sys::tuplestore_puttuple(out.store, tuple);
        pg_sys::heap_freetuple(tuple);
    }
}

/// Stores a value of a `RETURNS SETOF` function: a composite value as its tuple (a NULL one is
/// left out), a scalar as a row of one column.
///
/// # Safety
/// `out` is the current call's, from [`materialize`].
#[inline]
unsafe fn store_value<T: IntoDatum>(out: &Materialized, value: T) {
    // SAFETY: the store and its descriptor; a composite datum is a HeapTupleHeader of the
    // function's row type.
    unsafe {
        let datum = value.into_datum();
        if out.composite {
            let Some(datum) = datum else { return };
            let header = pg_sys::pg_detoast_datum(datum.cast_mut_ptr())
                .cast::<pg_sys::HeapTupleHeaderData>();
            let mut tuple: pg_sys::HeapTupleData = std::mem::zeroed();
            tuple.t_len = pgrx::varsize(header.cast()) as u32;
            tuple.t_data = header;
            pg_sys::tuplestore_puttuple(out.store, &mut tuple);
        } else {
            let mut value = datum.unwrap_or(pg_sys::Datum::from(0));
            let mut is_null = datum.is_none();
            pg_sys::tuplestore_putvalues(out.store, out.desc, &raw mut value, &raw mut is_null);
        }
    }
}
