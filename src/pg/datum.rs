//! Pass-through SQL values: `jsonb` and `jsonb[]`, and the macro that declares such types.
//!
//! pgrx's own `JsonB` parses every value into a `serde_json::Value` and prints it back; a job
//! queue only stores and returns payloads, so these types keep the Postgres datum untouched and
//! hand it straight to SPI or back to the caller.

use pgrx::prelude::*;
use pgrx::IntoDatum;

/// Declares a newtype over a raw datum of one SQL type.
macro_rules! raw_datum_type {
    ($(#[$meta:meta])* $name:ident, $sql:literal, $oid:expr) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name(pgrx::pg_sys::Datum);

        impl pgrx::FromDatum for $name {
            /// # Safety
            /// `datum` is a value of this SQL type, as `FromDatum` requires.
            unsafe fn from_polymorphic_datum(
                datum: pgrx::pg_sys::Datum,
                is_null: bool,
                _typoid: pgrx::pg_sys::Oid,
            ) -> Option<Self> {
                (!is_null).then_some(Self(datum))
            }

            /// # Safety
            /// `datum` is a value of this SQL type, as `FromDatum` requires.
            unsafe fn from_datum_in_memory_context(
                mut memory_context: pgrx::PgMemoryContexts,
                datum: pgrx::pg_sys::Datum,
                is_null: bool,
                _typoid: pgrx::pg_sys::Oid,
            ) -> Option<Self> {
                if is_null {
                    return None;
                }
                // SAFETY: a varlena datum of our type; the flat copy lives in the target context.
                memory_context.switch_to(|_| unsafe {
                    let copy = pgrx::pg_sys::pg_detoast_datum_copy(datum.cast_mut_ptr());
                    Some(Self(pgrx::pg_sys::Datum::from(copy)))
                })
            }
        }

        impl pgrx::IntoDatum for $name {
            fn into_datum(self) -> Option<pgrx::pg_sys::Datum> {
                Some(self.0)
            }

            fn type_oid() -> pgrx::pg_sys::Oid {
                $oid
            }

            fn is_compatible_with(other: pgrx::pg_sys::Oid) -> bool {
                // Row types are named in SQL, so their oids are not known here.
                other == $oid || $oid == pgrx::pg_sys::RECORDOID
            }
        }

        // SAFETY: arguments are unboxed through FromDatum above, which takes the datum as it is.
        unsafe impl<'fcx> pgrx::callconv::ArgAbi<'fcx> for $name {
            unsafe fn unbox_arg_unchecked(arg: pgrx::callconv::Arg<'_, 'fcx>) -> Self {
                let index = arg.index();
                // SAFETY: the argument is of this SQL type (the function's signature says so).
                unsafe { arg.unbox_arg_using_from_datum() }
                    .unwrap_or_else(|| panic!("argument {index} must not be null"))
            }
        }

        // SAFETY: the datum returned is a valid value of the function's declared result type.
        unsafe impl pgrx::callconv::BoxRet for $name {
            unsafe fn box_into<'fcx>(self, fcinfo: &mut pgrx::callconv::FcInfo<'fcx>) -> pgrx::datum::Datum<'fcx> {
                // SAFETY: a datum of the declared result type, allocated in a memory context
                // that outlives the call (the caller's or the SRF's).
                unsafe { fcinfo.return_raw_datum(self.0) }
            }
        }

        // SAFETY: the SQL type named here is the type of the datums this wrapper carries.
        unsafe impl pgrx::pgrx_sql_entity_graph::metadata::SqlTranslatable for $name {
            const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!($name);
            const TYPE_ORIGIN: pgrx::pgrx_sql_entity_graph::metadata::TypeOrigin =
                pgrx::pgrx_sql_entity_graph::metadata::TypeOrigin::External;
            const ARGUMENT_SQL: Result<
                pgrx::pgrx_sql_entity_graph::metadata::SqlMappingRef,
                pgrx::pgrx_sql_entity_graph::metadata::ArgumentError,
            > = Ok(pgrx::pgrx_sql_entity_graph::metadata::SqlMappingRef::literal($sql));
            const RETURN_SQL: Result<
                pgrx::pgrx_sql_entity_graph::metadata::ReturnsRef,
                pgrx::pgrx_sql_entity_graph::metadata::ReturnsError,
            > = Ok(pgrx::pgrx_sql_entity_graph::metadata::ReturnsRef::One(
                pgrx::pgrx_sql_entity_graph::metadata::SqlMappingRef::literal($sql),
            ));
        }
    };
}
pub(crate) use raw_datum_type;

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
