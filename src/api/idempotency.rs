//! Idempotency records: `jobs_idempotency_get`, `jobs_idempotency_save`,
//! `jobs_idempotency_update` and `jobs_idempotency_delete` (README "Idempotency records").
//! `jobs_client` powers; with a tenant set, a session's records are its tenant's own.

use pgrx::prelude::*;

use crate::pg::srf::SetOfIterator;

use super::args::{check_interval, check_payload_size, check_text, limits};
use crate::engine::access::{self, Role};
use crate::engine::idempotency::{self, NewRecord, RecordKey, STATUSES};
use crate::engine::tenants;
use crate::pg::datum::Jsonb;
use crate::pg::errors::{quote, raise, raise_with_hint, required, BAD_ARGUMENT};
use crate::storage::rows::{IdempotencyRecordRow, IdempotencySavedRow};

/// Checks the key and scope arguments and names the caller's record of them.
#[track_caller]
fn record_key<'a>(key: Option<&'a str>, scope: Option<&'a str>) -> RecordKey<'a> {
    let key = required(key, "key");
    check_text(key, "key", limits::IDEMPOTENCY_KEY_BYTES);
    if let Some(scope) = scope {
        // '' is the default scope, as NULL is.
        if scope.len() > limits::IDEMPOTENCY_SCOPE_BYTES {
            raise(
                BAD_ARGUMENT,
                format!(
                    "scope must be NULL or at most {} bytes long, got {} bytes",
                    limits::IDEMPOTENCY_SCOPE_BYTES,
                    scope.len()
                ),
            );
        }
    }
    RecordKey::new(&tenants::scope(), scope, key)
}

/// Checks a status argument: one of `pending`, `completed`, `failed`.
#[track_caller]
fn status_arg(status: Option<&str>) -> &str {
    let status = required(status, "status");
    if !STATUSES.contains(&status) {
        raise(
            BAD_ARGUMENT,
            format!(
                "status must be one of {}, got {}",
                STATUSES.join(", "),
                quote(status)
            ),
        );
    }
    status
}

/// Checks a lifetime argument (`ttl`, `pending_for`): greater than 0, at most 100 years.
#[track_caller]
fn lifetime_arg(interval: &Interval, argument: &str) -> Interval {
    check_interval(
        interval,
        argument,
        true,
        limits::DELAY,
        "greater than 0 and at most 100 years",
    )
}

/// Checks a stored response: within `pg_jobs.max_payload_bytes`.
#[track_caller]
fn response_arg(response: Option<Jsonb>) -> Option<Jsonb> {
    if let Some(response) = response {
        check_payload_size(response, || "response".to_owned());
    }
    response
}

/// The live record of `key` in `scope`: its status, stored response, fingerprint, when the key
/// was taken, last changed and when it expires; no row when there is none (an expired record is
/// absent, purged or not).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_idempotency_get(
    key: Option<&str>,
    scope: default!(Option<&str>, "NULL"),
) -> SetOfIterator<'static, IdempotencyRecordRow> {
    access::require_to_read(Role::Client, "read idempotency records");
    let key = record_key(key, scope);
    SetOfIterator::new(idempotency::get(&key))
}

/// Takes `key` in `scope` for a new record, in one statement: when there is no record, or it
/// has expired, is finished with the same fingerprint, or is pending and was not updated for
/// its `pending_for` (a request that died). Returns how it took the key (`created`, `replaced`,
/// `replaced_expired`, `taken_over`), the token that updates present, and the expiry. A live
/// pending record raises the idempotency conflict (55P03); a finished record with another
/// fingerprint the mismatch (23000).
#[allow(clippy::too_many_arguments)]
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_idempotency_save(
    key: Option<&str>,
    status: default!(Option<&str>, "'pending'"),
    response: default!(Option<Jsonb>, "NULL"),
    ttl: default!(Option<Interval>, "'24 hours'"),
    scope: default!(Option<&str>, "NULL"),
    fingerprint: default!(Option<&str>, "NULL"),
    pending_for: default!(Option<Interval>, "NULL"),
) -> IdempotencySavedRow {
    access::require(Role::Client, "save idempotency records");
    let record_key = record_key(key, scope);
    let status = status_arg(status);
    let response = response_arg(response);
    let ttl = lifetime_arg(&required(ttl, "ttl"), "ttl");
    if let Some(fingerprint) = fingerprint {
        check_text(fingerprint, "fingerprint", limits::FINGERPRINT_BYTES);
    }
    let pending_for = pending_for.map(|p| lifetime_arg(&p, "pending_for"));
    idempotency::save(
        &record_key,
        &NewRecord {
            status: status.to_owned(),
            response,
            ttl,
            fingerprint: fingerprint.map(str::to_owned),
            pending_for,
        },
    )
}

/// Sets the status and response of the record of `key` in `scope` that holds `token` (the one
/// `jobs_idempotency_save` returned), and its expiry to now + `ttl` when `ttl` is given.
/// Answers `updated`, or `lost` when nothing changed: another save took the key over, or the
/// record expired or was deleted. A `pending` update renews the pending window.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_idempotency_update(
    key: Option<&str>,
    status: Option<&str>,
    response: default!(Option<Jsonb>, "NULL"),
    ttl: default!(Option<Interval>, "NULL"),
    scope: default!(Option<&str>, "NULL"),
    token: default!(Option<pgrx::Uuid>, "NULL"),
) -> &'static str {
    access::require(Role::Client, "update idempotency records");
    let record_key = record_key(key, scope);
    let status = status_arg(status);
    let response = response_arg(response);
    let ttl = ttl.map(|ttl| lifetime_arg(&ttl, "ttl"));
    // A default only because it follows arguments that have one: the token is what tells the
    // holder's record from one that another save took over.
    let Some(token) = token else {
        raise_with_hint(
            crate::pg::errors::NULL_ARGUMENT,
            "token must not be NULL".to_owned(),
            "Pass the token that jobs_idempotency_save returned when it took the key.",
        );
    };
    if idempotency::update(&record_key, token, status, response, ttl) {
        "updated"
    } else {
        "lost"
    }
}

/// Deletes the record of `key` in `scope`, only if it holds `token` when one is given (so a
/// request that gives up cannot delete the record of one that took its key over). Answers
/// whether a live record was deleted.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_idempotency_delete(
    key: Option<&str>,
    scope: default!(Option<&str>, "NULL"),
    token: default!(Option<pgrx::Uuid>, "NULL"),
) -> bool {
    access::require(Role::Client, "delete idempotency records");
    let record_key = record_key(key, scope);
    idempotency::delete(&record_key, token)
}
