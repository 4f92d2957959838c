//! Pass-through SQL values: `jsonb`, `jsonb[]` and the extension's row types.
//!
//! pgrx's own `JsonB` parses every value into a `serde_json::Value` and prints it back; a job
//! queue only stores and returns payloads, so these types keep the Postgres datum untouched and
//! hand it straight to SPI or back to the caller.

use pgrx::callconv::{Arg, ArgAbi, BoxRet, FcInfo};
use pgrx::datum::Datum;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::prelude::*;
use pgrx::{FromDatum, IntoDatum, PgMemoryContexts};

/// Declares a newtype over a raw datum of one SQL type.
macro_rules! raw_datum_type {
    ($(#[$meta:meta])* $name:ident, $sql:literal, $oid:expr) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name(pg_sys::Datum);

        impl FromDatum for $name {
            /// # Safety
            /// `datum` is a value of this SQL type, as `FromDatum` requires.
            unsafe fn from_polymorphic_datum(
                datum: pg_sys::Datum,
                is_null: bool,
                _typoid: pg_sys::Oid,
            ) -> Option<Self> {
                (!is_null).then_some(Self(datum))
            }

            /// # Safety
            /// `datum` is a value of this SQL type, as `FromDatum` requires.
            unsafe fn from_datum_in_memory_context(
                mut memory_context: PgMemoryContexts,
                datum: pg_sys::Datum,
                is_null: bool,
                _typoid: pg_sys::Oid,
            ) -> Option<Self> {
                if is_null {
                    return None;
                }
                // SAFETY: a varlena datum of our type; the flat copy lives in the target context.
                memory_context.switch_to(|_| unsafe {
                    let copy = pg_sys::pg_detoast_datum_copy(datum.cast_mut_ptr());
                    Some(Self(pg_sys::Datum::from(copy)))
                })
            }
        }

        impl IntoDatum for $name {
            fn into_datum(self) -> Option<pg_sys::Datum> {
                Some(self.0)
            }

            fn type_oid() -> pg_sys::Oid {
                $oid
            }

            fn is_compatible_with(other: pg_sys::Oid) -> bool {
                // Row types are named in SQL, so their oids are not known here.
                other == $oid || $oid == pg_sys::RECORDOID
            }
        }

        // SAFETY: arguments are unboxed through FromDatum above, which takes the datum as it is.
        unsafe impl<'fcx> ArgAbi<'fcx> for $name {
            unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
                let index = arg.index();
                // SAFETY: the argument is of this SQL type (the function's signature says so).
                unsafe { arg.unbox_arg_using_from_datum() }
                    .unwrap_or_else(|| panic!("argument {index} must not be null"))
            }
        }

        // SAFETY: the datum returned is a valid value of the function's declared result type.
        unsafe impl BoxRet for $name {
            unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
                // SAFETY: a datum of the declared result type, allocated in a memory context
                // that outlives the call (the caller's or the SRF's).
                unsafe { fcinfo.return_raw_datum(self.0) }
            }
        }

        // SAFETY: the SQL type named here is the type of the datums this wrapper carries.
        unsafe impl SqlTranslatable for $name {
            const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!($name);
            const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
            const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> =
                Ok(SqlMappingRef::literal($sql));
            const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
                Ok(ReturnsRef::One(SqlMappingRef::literal($sql)));
        }
    };
}

raw_datum_type!(
    /// A `jsonb` value passed through untouched.
    Jsonb,
    "jsonb",
    pg_sys::JSONBOID
);

raw_datum_type!(
    /// A `jsonb[]` value passed through untouched.
    JsonbArray,
    "jsonb[]",
    pg_sys::JSONBARRAYOID
);

raw_datum_type!(
    /// A row of `jobs.job`, as `jobs_get` and `jobs_list` return it.
    JobRow,
    "jobs.job",
    pg_sys::RECORDOID
);

raw_datum_type!(
    /// A row of `jobs.queue`, as `jobs_create_queue` returns it.
    QueueRow,
    "jobs.queue",
    pg_sys::RECORDOID
);

raw_datum_type!(
    /// A row of `jobs.schedules`, as `jobs_schedule` returns it.
    ScheduleRow,
    "jobs.schedules",
    pg_sys::RECORDOID
);

raw_datum_type!(
    /// A row of `jobs.claimed`, as `jobs_claim` returns it.
    ClaimedRow,
    "jobs.claimed",
    pg_sys::RECORDOID
);

raw_datum_type!(
    /// A row of `jobs.idempotency_saved`, as `jobs_idempotency_save` returns it.
    IdempotencySavedRow,
    "jobs.idempotency_saved",
    pg_sys::RECORDOID
);

raw_datum_type!(
    /// A row of `jobs.idempotency_record`, as `jobs_idempotency_get` returns it.
    IdempotencyRecordRow,
    "jobs.idempotency_record",
    pg_sys::RECORDOID
);

impl Jsonb {
    /// The jsonb datum of a value pgrx read as a `JsonB` (an element of a jsonb array, say);
    /// `None` for SQL NULL.
    pub fn from_value(value: pgrx::JsonB) -> Option<Jsonb> {
        value.into_datum().map(Jsonb)
    }

    /// The value's size in bytes before compression, as `pg_column_size` reports it for a value
    /// that is not stored yet.
    pub fn size_bytes(self) -> usize {
        // SAFETY: a valid varlena datum; toast_raw_datum_size reads only its header.
        unsafe { pg_sys::toast_raw_datum_size(self.0) }
    }

    /// Whether the value is a JSON object (as opposed to an array or a scalar).
    pub fn is_object(self) -> bool {
        // SAFETY: detoasts a valid jsonb datum; the container header says what the root is.
        unsafe {
            let detoasted = pg_sys::pg_detoast_datum(self.0.cast_mut_ptr());
            let jsonb = detoasted as *const pg_sys::Jsonb;
            let header = (*jsonb).root.header;
            (header & pg_sys::JB_FOBJECT) != 0
        }
    }
}

impl JsonbArray {
    /// The elements of the array, `None` for SQL NULL elements.
    pub fn elements(self) -> Vec<Option<Jsonb>> {
        // SAFETY: a valid jsonb[] datum; deconstruct_array pallocs the element arrays, which
        // point into the detoasted array and live as long as the current memory context.
        unsafe {
            let array = pg_sys::pg_detoast_datum(self.0.cast_mut_ptr()) as *mut pg_sys::ArrayType;
            let mut values: *mut pg_sys::Datum = std::ptr::null_mut();
            let mut nulls: *mut bool = std::ptr::null_mut();
            let mut count: i32 = 0;
            pg_sys::deconstruct_array(
                array,
                pg_sys::JSONBOID,
                -1,
                false,
                pg_sys::TYPALIGN_INT as core::ffi::c_char,
                &mut values,
                &mut nulls,
                &mut count,
            );
            (0..count as usize)
                .map(|i| (!*nulls.add(i)).then(|| Jsonb(*values.add(i))))
                .collect()
        }
    }
}

raw_datum_type!(
    /// A row of `jobs.enqueued`, as `jobs_enqueue_batch` returns it.
    EnqueuedRow,
    "jobs.enqueued",
    pg_sys::RECORDOID
);

thread_local! {
    /// Blessed tuple descriptors of the row types this session built rows of, by type name.
    static ROW_TYPES: std::cell::RefCell<std::collections::HashMap<&'static str, pg_sys::TupleDesc>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// The blessed tuple descriptor of the row type `name` (schema-qualified), looked up once per
/// session and kept in `TopMemoryContext`.
fn row_type(name: &'static std::ffi::CStr) -> pg_sys::TupleDesc {
    ROW_TYPES.with(|types| {
        *types
            .borrow_mut()
            .entry(name.to_str().expect("a type name is UTF-8"))
            .or_insert_with(|| {
                // SAFETY: regtypein parses a qualified type name (no search path needed); the
                // descriptor is copied into TopMemoryContext, so it lives as long as the session.
                unsafe {
                    let oid = pgrx::direct_function_call::<pg_sys::Oid>(
                        pg_sys::regtypein,
                        &[Some(pg_sys::Datum::from(name.as_ptr()))],
                    )
                    .expect("the row type exists");
                    PgMemoryContexts::TopMemoryContext.switch_to(|_| {
                        pg_sys::BlessTupleDesc(pg_sys::lookup_rowtype_tupdesc_copy(oid, -1))
                    })
                }
            })
    })
}

impl EnqueuedRow {
    /// A `jobs.enqueued` row: the job's id and whether it was inserted.
    pub fn new(id: i64, inserted: bool) -> EnqueuedRow {
        let tupdesc = row_type(c"jobs.enqueued");
        let mut values = [pg_sys::Datum::from(id), pg_sys::Datum::from(inserted)];
        let mut nulls = [false, false];
        // SAFETY: two values of the row type's two columns (bigint, boolean), formed into a
        // tuple in the current memory context, which the SRF's result outlives.
        unsafe {
            let tuple = pg_sys::heap_form_tuple(tupdesc, values.as_mut_ptr(), nulls.as_mut_ptr());
            EnqueuedRow(pg_sys::HeapTupleHeaderGetDatum((*tuple).t_data))
        }
    }
}
