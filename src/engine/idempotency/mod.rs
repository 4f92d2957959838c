//! Idempotency records: request-level idempotency for HTTP middleware (README "Idempotency
//! records"). Per key, a `pending` record while a request runs and its stored response once it
//! finished, so a retried request gets the first answer instead of running twice.
//!
//! A record is named by (tenant, scope, key), three columns of one primary key, so no scope and
//! key can name another pair's record. [`save`] takes a key in one statement (two concurrent
//! saves never both win) and mints a token; [`update`] and [`delete`] present it, so the holder
//! of a record that another save took over changes nothing. Every time decision uses the
//! server's clock at the call (Rule 10): an expired record is absent to every function before
//! the background worker's [`purge_batch`] deletes it.

use pgrx::datum::{DatumWithOid, Interval, TimestampWithTimeZone};
use pgrx::pg_sys::{self, INT4OID, INTERVALOID, JSONBOID, TEXTOID, TIMESTAMPTZOID, UUIDOID};
use pgrx::spi::SpiClient;
use pgrx::{FromDatum, Uuid};

// Tokens fence, as leases do, and are no secret (whoever may read the record sees it): the
// claim's fast generator, seeded from the strong random source, serves them too.
use crate::engine::claim::token::lease_token;
use crate::engine::errors::{IDEMPOTENCY_CONFLICT, IDEMPOTENCY_MISMATCH};
use crate::engine::tenants::TenantScope;
use crate::pg::clock::server_now;
use crate::pg::datum::Jsonb;
use crate::pg::errors::{quote, raise_with_hint, BAD_ARGUMENT};
use crate::storage::direct::key_reader;
use crate::storage::index_walk::TimeWindow;
use crate::storage::rows::{IdempotencyRecordRow, IdempotencySavedRow};
use crate::storage::{statement, timestamptz_arg, with_client, Statement};

static SAVE: Statement = statement!(
    idempotency/save(tenant: TEXTOID, scope: TEXTOID, key: TEXTOID, status: TEXTOID,
        response: JSONBOID, ttl: INTERVALOID, fingerprint: TEXTOID, pending_for: INTERVALOID,
        now: TIMESTAMPTZOID, token: UUIDOID) -> (saved)
);

static HELD: Statement = statement!(
    idempotency/held(tenant: TEXTOID, scope: TEXTOID, key: TEXTOID)
        -> (status, pending_until, expires_at)
);

static GET: Statement = statement!(
    idempotency/get(tenant: TEXTOID, scope: TEXTOID, key: TEXTOID, now: TIMESTAMPTZOID) -> (record)
);

static UPDATE: Statement = statement!(
    idempotency/update(tenant: TEXTOID, scope: TEXTOID, key: TEXTOID, token: UUIDOID,
        status: TEXTOID, response: JSONBOID, ttl: INTERVALOID, now: TIMESTAMPTZOID) -> ()
);

static DELETE: Statement = statement!(
    idempotency/delete(tenant: TEXTOID, scope: TEXTOID, key: TEXTOID, token: UUIDOID,
        now: TIMESTAMPTZOID) -> (live)
);

static PURGE: Statement = statement!(
    idempotency/purge(now: TIMESTAMPTZOID, batch_size: INT4OID, from: TIMESTAMPTZOID,
        until: TIMESTAMPTZOID) -> ()
);

/// Expired records one purge statement deletes at most.
pub const PURGE_BATCH: usize = 10_000;
/// Purge statements per tick at most, while each finds a full batch: at most 50,000 records a
/// tick, so a tick stays short however many records expired at once.
pub const PURGE_BATCHES_PER_TICK: usize = 5;

/// The statuses a record can have: `pending` while its request runs, then a finished one.
pub const STATUSES: [&str; 3] = ["pending", "completed", "failed"];

/// The status of a request that is still running.
pub const PENDING: &str = "pending";

/// The name of one record: the tenant it belongs to, the scope and the key.
pub struct RecordKey<'a> {
    /// The tenant (`""` for records without one).
    tenant: String,
    /// The scope (`""` for the default scope).
    scope: &'a str,
    /// The key.
    key: &'a str,
}

impl<'a> RecordKey<'a> {
    /// The record `key` in `scope` (NULL and `''` are the default scope) of the caller's
    /// tenant: the one tenant `scope` names, or none. Several tenants name no single record.
    pub fn new(tenants: &TenantScope, scope: Option<&'a str>, key: &'a str) -> RecordKey<'a> {
        let tenant = match tenants {
            TenantScope::Tenants(tenants) if tenants.len() == 1 => tenants[0].clone(),
            TenantScope::Tenants(tenants) => raise_with_hint(
                BAD_ARGUMENT,
                format!(
                    "an idempotency record belongs to one tenant, and pg_jobs.tenant names several ({})",
                    tenants.join(", ")
                ),
                "SET pg_jobs.tenant to the one tenant whose records this session reads and writes.",
            ),
            TenantScope::All | TenantScope::Untenanted => String::new(),
        };
        RecordKey {
            tenant,
            scope: scope.unwrap_or(""),
            key,
        }
    }

    /// The arguments of a statement on this record: the three that name it (tenant, scope,
    /// key), which every statement on one record takes first, then `rest`.
    fn args<'b>(
        &'b self,
        rest: impl IntoIterator<Item = DatumWithOid<'b>>,
    ) -> Vec<DatumWithOid<'b>> {
        [
            self.tenant.as_str().into(),
            self.scope.into(),
            self.key.into(),
        ]
        .into_iter()
        .chain(rest)
        .collect()
    }

    /// The key and its scope, for messages.
    fn describe(&self) -> String {
        if self.scope.is_empty() {
            format!("idempotency key {}", quote(self.key))
        } else {
            format!(
                "idempotency key {} in scope {}",
                quote(self.key),
                quote(self.scope)
            )
        }
    }
}

/// What a save asks for, checked.
pub struct NewRecord {
    /// One of [`STATUSES`].
    pub status: String,
    /// The stored response, if any.
    pub response: Option<Jsonb>,
    /// How long the record lives, exactly (no months or days).
    pub ttl: Interval,
    /// What identifies the request, if given.
    pub fingerprint: Option<String>,
    /// After how long without an update a pending record may be taken over, exactly.
    pub pending_for: Option<Interval>,
}

/// Takes `key` for `record` and returns how it took it (`created`, `replaced`,
/// `replaced_expired` or `taken_over`), the token that [`update`] and [`delete`] present, and
/// the expiry, as a row of `jobs.idempotency_saved`; or raises the idempotency conflict (a live
/// pending record) or mismatch (a finished record saved with another fingerprint) SQLSTATE.
pub fn save(key: &RecordKey<'_>, record: &NewRecord) -> IdempotencySavedRow {
    let now = server_now();
    // SAFETY: reading the current context pointer (the caller's, which outlives SPI).
    let context = unsafe { pg_sys::CurrentMemoryContext };
    with_client(|client| {
        let rows = SAVE.run(
            client,
            &key.args([
                record.status.as_str().into(),
                record.response.into(),
                record.ttl.into(),
                record.fingerprint.as_deref().into(),
                record.pending_for.into(),
                timestamptz_arg(now),
                lease_token().into(),
            ]),
        );
        if let Some(saved) = rows.first().and_then(|row| row.get_in("saved", context)) {
            return saved;
        }
        refuse(client, key)
    })
}

/// Raises the reason why the record of `key`, which a save just failed to take (and locked),
/// keeps its key.
fn refuse(client: &SpiClient<'_>, key: &RecordKey<'_>) -> ! {
    let rows = HELD.run(client, &key.args([]));
    let row = rows
        .first()
        .expect("a record a save found in its way stays locked until the transaction ends");
    let status: String = row.expect("status");
    if status == PENDING {
        let until: Option<TimestampWithTimeZone> = row.get("pending_until");
        let expires_at: TimestampWithTimeZone = row.expect("expires_at");
        let free_at = match until {
            Some(until) => format!("it can be taken over from {until} if no update comes first"),
            None => {
                format!("it holds the key until it is updated, deleted or expires at {expires_at}")
            }
        };
        raise_with_hint(
            IDEMPOTENCY_CONFLICT,
            format!(
                "{} is pending: a request with this key is still in flight ({free_at})",
                key.describe()
            ),
            "Answer 409 Conflict and let the client retry the request later.",
        );
    }
    raise_with_hint(
        IDEMPOTENCY_MISMATCH,
        format!(
            "{} was used for a different request: its {status} record was saved with a different fingerprint",
            key.describe()
        ),
        "Answer 422 Unprocessable Content: a new request needs a new idempotency key.",
    );
}

/// The live record of `key` as a row of `jobs.idempotency_record`, if any: an expired record
/// is absent.
pub fn get(key: &RecordKey<'_>) -> Option<IdempotencyRecordRow> {
    let now = server_now();
    // SAFETY: inside the caller's transaction; live_record copies what it keeps into a new
    // tuple in the current memory context.
    let direct = unsafe {
        key_reader::read(
            c"idempotency",
            &[c"tenant", c"scope", c"key"],
            &[key.tenant.as_str(), key.scope, key.key],
            |row| match row {
                None => Some(None),
                Some(row) => live_record(row, now),
            },
        )
    };
    if let Some(record) = direct.flatten() {
        return record;
    }
    // SAFETY: reading the current context pointer (the caller's, which outlives SPI).
    let context = unsafe { pg_sys::CurrentMemoryContext };
    with_client(|client| {
        let rows = GET.run(client, &key.args([timestamptz_arg(now)]));
        rows.first().and_then(|row| row.get_in("record", context))
    })
}

/// What get.sql makes of `row` at `now`, built from the row itself: `Some(None)` when it
/// expired, `None` when its columns or the record type are not what get.sql reads (the caller
/// then runs it).
///
/// # Safety
/// `row` is a view [`key_reader::read`] holds; the record is formed in the current memory
/// context, so it outlives the view.
unsafe fn live_record(
    row: &key_reader::RowView,
    now: pg_sys::TimestampTz,
) -> Option<Option<IdempotencyRecordRow>> {
    let (expires_type, expires_at) = row.column(c"expires_at")?;
    if expires_type != TIMESTAMPTZOID {
        return None;
    }
    let expires_at = expires_at?.value() as pg_sys::TimestampTz;
    if expires_at <= now {
        return Some(None);
    }
    // SAFETY: catalog lookups; the record's descriptor is reference counted while in use; the
    // values are copied into the new tuple, which HeapTupleHeaderGetDatum flattens (no toast
    // pointers into the table are left in it).
    unsafe {
        // The record type lives beside the table.
        let namespace = row.namespace();
        let record_type = pg_sys::GetSysCacheOid(
            pg_sys::SysCacheIdentifier::TYPENAMENSP as i32,
            pg_sys::Anum_pg_type_oid as pg_sys::AttrNumber,
            pg_sys::Datum::from(c"idempotency_record".as_ptr()),
            pg_sys::Datum::from(namespace),
            pg_sys::Datum::from(0),
            pg_sys::Datum::from(0),
        );
        if record_type == pg_sys::InvalidOid {
            return None;
        }
        let desc = pg_sys::lookup_rowtype_tupdesc(record_type, -1);
        let attributes = pgrx::PgTupleDesc::from_pg_unchecked(desc);
        let mut values = Vec::with_capacity(attributes.len());
        let mut nulls = Vec::with_capacity(attributes.len());
        let mut fits = true;
        for attribute in attributes.iter() {
            let name = std::ffi::CStr::from_ptr(attribute.attname.data.as_ptr());
            match row.column(name) {
                Some((column_type, value)) if column_type == attribute.atttypid => {
                    values.push(value.unwrap_or(pg_sys::Datum::from(0)));
                    nulls.push(value.is_none());
                }
                _ => fits = false,
            }
        }
        let record = fits.then(|| {
            let tuple = pg_sys::heap_form_tuple(desc, values.as_mut_ptr(), nulls.as_mut_ptr());
            pg_sys::HeapTupleHeaderGetDatum((*tuple).t_data)
        });
        pg_sys::DecrTupleDescRefCount(desc);
        let datum = record?;
        Some(IdempotencyRecordRow::from_polymorphic_datum(
            datum,
            false,
            record_type,
        ))
    }
}

/// Sets the status and response of the live record of `key` that holds `token`, and its expiry
/// to now + `ttl` when given. Answers whether there was such a record: false when another save
/// took the key over, or the record expired or was deleted.
pub fn update(
    key: &RecordKey<'_>,
    token: Uuid,
    status: &str,
    response: Option<Jsonb>,
    ttl: Option<Interval>,
) -> bool {
    with_client(|client| {
        !UPDATE
            .run(
                client,
                &key.args([
                    token.into(),
                    status.into(),
                    response.into(),
                    ttl.into(),
                    timestamptz_arg(server_now()),
                ]),
            )
            .is_empty()
    })
}

/// Deletes the record of `key` (only if it holds `token`, when given). Answers whether a live
/// record was deleted.
pub fn delete(key: &RecordKey<'_>, token: Option<Uuid>) -> bool {
    with_client(|client| {
        DELETE
            .first::<bool>(
                client,
                &key.args([token.into(), timestamptz_arg(server_now())]),
                "live",
            )
            .unwrap_or(false)
    })
}

/// The window of at most `storage::index_walk::WINDOW_ENTRIES` entries of
/// `idempotency_expires_idx` that starts at `from`: the worker's purge takes one at a time.
/// `None` when the index is not there.
pub fn expiry_window(from: i64) -> Option<TimeWindow> {
    TimeWindow::starting_at(c"idempotency", c"idempotency_expires_idx", from)
}

/// One batch of the worker's purge, in a transaction of its own: deletes up to `limit` (at
/// most [`PURGE_BATCH`]) records, every tenant's, that expired before `now`, with `expires_at`
/// in `window` (the worker deletes up to [`PURGE_BATCHES_PER_TICK`] batches' worth a tick).
/// Returns how many it deleted.
pub fn purge_batch(client: &SpiClient<'_>, now: i64, window: TimeWindow, limit: usize) -> usize {
    PURGE
        .run(
            client,
            &[
                timestamptz_arg(now),
                (limit.min(PURGE_BATCH) as i32).into(),
                timestamptz_arg(window.from),
                timestamptz_arg(window.until),
            ],
        )
        .len()
}
