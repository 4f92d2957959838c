//! Idempotency records: request-level idempotency for HTTP middleware (README "Idempotency
//! records"). Per key, a `pending` record while a request runs and its stored response once it
//! finished, so a retried request gets the first answer instead of running twice.
//!
//! A record is named by (tenant, scope, key), three columns of one primary key, so no scope and
//! key can name another pair's record. [`save`] takes a key in one statement (two concurrent
//! saves never both win) and mints a token; [`update`] and [`delete`] present it, so the holder
//! of a record that another save took over changes nothing. Every time decision uses the
//! server's clock at the call (Rule 10): an expired record is absent to every function before
//! the background worker's [`purge_expired`] deletes it.

use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::pg_sys::{self, INT4OID, INTERVALOID, JSONBOID, TEXTOID, TIMESTAMPTZOID, UUIDOID};
use pgrx::spi::SpiClient;
use pgrx::Uuid;

use crate::engine::tenants::TenantScope;
use crate::pg::clock::server_now;
use crate::pg::datum::Jsonb;
use crate::pg::errors::{
    quote, raise_with_hint, BAD_ARGUMENT, IDEMPOTENCY_CONFLICT, IDEMPOTENCY_MISMATCH,
};
use crate::storage::{param, timestamptz_arg, with_client, Statement};

static SAVE: Statement = Statement {
    name: "idempotency/save",
    sql: include_str!("save.sql"),
    params: &[
        param("tenant", TEXTOID),
        param("scope", TEXTOID),
        param("key", TEXTOID),
        param("status", TEXTOID),
        param("response", JSONBOID),
        param("ttl", INTERVALOID),
        param("fingerprint", TEXTOID),
        param("pending_for", INTERVALOID),
        param("now", TIMESTAMPTZOID),
    ],
    columns: &["outcome", "token", "expires_at"],
};

static HELD: Statement = Statement {
    name: "idempotency/held",
    sql: include_str!("held.sql"),
    params: &[
        param("tenant", TEXTOID),
        param("scope", TEXTOID),
        param("key", TEXTOID),
    ],
    columns: &["status", "pending_until", "expires_at"],
};

static GET: Statement = Statement {
    name: "idempotency/get",
    sql: include_str!("get.sql"),
    params: &[
        param("tenant", TEXTOID),
        param("scope", TEXTOID),
        param("key", TEXTOID),
        param("now", TIMESTAMPTZOID),
    ],
    columns: &[
        "status",
        "response",
        "fingerprint",
        "created_at",
        "updated_at",
        "expires_at",
    ],
};

static UPDATE: Statement = Statement {
    name: "idempotency/update",
    sql: include_str!("update.sql"),
    params: &[
        param("tenant", TEXTOID),
        param("scope", TEXTOID),
        param("key", TEXTOID),
        param("token", UUIDOID),
        param("status", TEXTOID),
        param("response", JSONBOID),
        param("ttl", INTERVALOID),
        param("now", TIMESTAMPTZOID),
    ],
    columns: &["expires_at"],
};

static DELETE: Statement = Statement {
    name: "idempotency/delete",
    sql: include_str!("delete.sql"),
    params: &[
        param("tenant", TEXTOID),
        param("scope", TEXTOID),
        param("key", TEXTOID),
        param("token", UUIDOID),
        param("now", TIMESTAMPTZOID),
    ],
    columns: &["live"],
};

static PURGE: Statement = Statement {
    name: "idempotency/purge",
    sql: include_str!("purge.sql"),
    params: &[param("now", TIMESTAMPTZOID), param("batch size", INT4OID)],
    columns: &[],
};

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

/// How a save took its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaveOutcome {
    /// There was no record.
    Created,
    /// A finished record with the same fingerprint was replaced.
    Replaced,
    /// An expired record was replaced.
    ReplacedExpired,
    /// A pending record not updated for its `pending_for` was taken over.
    TakenOver,
}

impl SaveOutcome {
    /// The outcome as SQL sees it.
    pub fn as_str(self) -> &'static str {
        match self {
            SaveOutcome::Created => "created",
            SaveOutcome::Replaced => "replaced",
            SaveOutcome::ReplacedExpired => "replaced_expired",
            SaveOutcome::TakenOver => "taken_over",
        }
    }

    fn parse(outcome: &str) -> SaveOutcome {
        match outcome {
            "created" => SaveOutcome::Created,
            "replaced" => SaveOutcome::Replaced,
            "replaced_expired" => SaveOutcome::ReplacedExpired,
            "taken_over" => SaveOutcome::TakenOver,
            other => panic!("pg_jobs idempotency/save returned the unknown outcome {other:?}"),
        }
    }
}

/// What a successful save returns: how it took the key, the token that updates present, and
/// when the record expires.
pub struct Saved {
    /// How the key was taken.
    pub outcome: SaveOutcome,
    /// The record's token; [`update`] and [`delete`] present it.
    pub token: Uuid,
    /// When the record expires.
    pub expires_at: TimestampWithTimeZone,
}

/// Takes `key` for `record`, or raises the idempotency conflict (a live pending record) or
/// mismatch (a finished record saved with another fingerprint) SQLSTATE.
pub fn save(key: &RecordKey<'_>, record: &NewRecord) -> Saved {
    let now = server_now();
    with_client(|client| {
        let rows = SAVE.run(
            client,
            &[
                key.tenant.as_str().into(),
                key.scope.into(),
                key.key.into(),
                record.status.as_str().into(),
                record.response.into(),
                record.ttl.into(),
                record.fingerprint.as_deref().into(),
                record.pending_for.into(),
                timestamptz_arg(now),
            ],
        );
        if let Some(row) = rows.first() {
            return Saved {
                outcome: SaveOutcome::parse(&row.expect::<String>("outcome")),
                token: row.expect("token"),
                expires_at: row.expect("expires_at"),
            };
        }
        refuse(client, key)
    })
}

/// Raises the reason why the record of `key`, which a save just failed to take (and locked),
/// keeps its key.
fn refuse(client: &SpiClient<'_>, key: &RecordKey<'_>) -> ! {
    let rows = HELD.run(
        client,
        &[key.tenant.as_str().into(), key.scope.into(), key.key.into()],
    );
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

/// A live record, as `jobs_idempotency_get` returns it.
pub struct Record {
    /// Its status.
    pub status: String,
    /// Its stored response.
    pub response: Option<Jsonb>,
    /// The fingerprint it was saved with.
    pub fingerprint: Option<String>,
    /// When the save that took the key ran.
    pub created_at: TimestampWithTimeZone,
    /// When it was last saved or updated.
    pub updated_at: TimestampWithTimeZone,
    /// When it expires.
    pub expires_at: TimestampWithTimeZone,
}

/// The live record of `key`, if any: an expired record is absent.
pub fn get(key: &RecordKey<'_>) -> Option<Record> {
    // SAFETY: reading the current context pointer (the caller's, which outlives SPI).
    let context = unsafe { pg_sys::CurrentMemoryContext };
    with_client(|client| {
        let rows = GET.run(
            client,
            &[
                key.tenant.as_str().into(),
                key.scope.into(),
                key.key.into(),
                timestamptz_arg(server_now()),
            ],
        );
        rows.first().map(|row| Record {
            status: row.expect("status"),
            response: row.get_in("response", context),
            fingerprint: row.get("fingerprint"),
            created_at: row.expect("created_at"),
            updated_at: row.expect("updated_at"),
            expires_at: row.expect("expires_at"),
        })
    })
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
                &[
                    key.tenant.as_str().into(),
                    key.scope.into(),
                    key.key.into(),
                    token.into(),
                    status.into(),
                    response.into(),
                    ttl.into(),
                    timestamptz_arg(server_now()),
                ],
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
                &[
                    key.tenant.as_str().into(),
                    key.scope.into(),
                    key.key.into(),
                    token.into(),
                    timestamptz_arg(server_now()),
                ],
                "live",
            )
            .unwrap_or(false)
    })
}

/// One tick's purge: deletes expired records, every tenant's, up to [`PURGE_BATCH`] per
/// statement and [`PURGE_BATCHES_PER_TICK`] statements. Returns how many it deleted.
pub fn purge_expired(client: &SpiClient<'_>) -> usize {
    let now = server_now();
    let mut purged = 0;
    for _ in 0..PURGE_BATCHES_PER_TICK {
        let deleted = PURGE
            .run(client, &[timestamptz_arg(now), (PURGE_BATCH as i32).into()])
            .len();
        purged += deleted;
        if deleted < PURGE_BATCH {
            break;
        }
    }
    purged
}
