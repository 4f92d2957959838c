//! The extension's row types (`jobs.job`, `jobs.claimed`, ...) as pass-through datums: the
//! functions return the rows their statements read, untouched (see `pg::datum`).

use pgrx::prelude::*;
use pgrx::PgMemoryContexts;

use crate::pg::datum::raw_datum_type;

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
