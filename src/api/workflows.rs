//! Workflows: `jobs_results`, `jobs_wait`, `jobs_await` and `jobs_signal` (dependencies are
//! `after` on `jobs_enqueue` and `jobs_enqueue_batch`).

use pgrx::prelude::*;

use super::args::{
    check_interval, check_payload_size, check_text, delay_arg, limits, required_elements, wait_arg,
};
use crate::engine::access::{self, Role};
use crate::engine::settle::Held;
use crate::engine::tenants;
use crate::engine::workflows::results::{self, JobResult};
use crate::engine::workflows::signals;
use crate::pg::datum::Jsonb;
use crate::pg::errors::{raise, required, BAD_ARGUMENT};
use crate::pg::srf::TableIterator;

/// Longest signal name, in bytes.
const SIGNAL_BYTES: usize = 255;
/// Most jobs one `jobs_results` or `jobs_wait` call reads.
const RESULT_IDS: usize = 100_000;
/// Longest await: how long a job may wait for its signal (100 years, as the longest delay).
const AWAIT_TIMEOUT: i64 = limits::DELAY;

/// The checked `ids` of a results call.
fn ids_arg(ids: Option<Vec<Option<i64>>>) -> Vec<i64> {
    let ids = required(ids, "ids");
    if ids.len() > RESULT_IDS {
        raise(
            BAD_ARGUMENT,
            format!("ids may name at most {RESULT_IDS} jobs, got {}", ids.len()),
        );
    }
    required_elements(ids, "ids")
}

/// The outcomes as rows.
#[allow(clippy::type_complexity)]
fn rows(
    found: Vec<JobResult>,
) -> TableIterator<
    'static,
    (
        i64,
        String,
        Option<Jsonb>,
        Option<Jsonb>,
        Option<TimestampWithTimeZone>,
    ),
> {
    TableIterator::new(
        found
            .into_iter()
            .map(|r| (r.id, r.state, r.result, r.errors, r.finished_at)),
    )
}

/// The outcome of each listed job the caller may see, in the order given: its state, result,
/// error history and when it finished. Jobs that do not exist (or were purged) have no row.
// The columns are spelled out: pgrx reads the signature as written.
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_results(
    ids: Option<Vec<Option<i64>>>,
) -> TableIterator<
    'static,
    (
        name!(id, i64),
        name!(state, String),
        name!(result, Option<Jsonb>),
        name!(errors, Option<Jsonb>),
        name!(finished_at, Option<TimestampWithTimeZone>),
    ),
> {
    access::require_to_read(Role::Client, "read job results");
    let ids = ids_arg(ids);
    rows(results::results(&ids, &tenants::scope()))
}

/// Waits until every listed job the caller may see has finished (succeeded, failed or
/// cancelled), or `timeout` passed, then returns their outcomes as `jobs_results` does. Woken by
/// the commits that finish jobs, not by polling; cancellable; refuses REPEATABLE READ and
/// SERIALIZABLE (25000).
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_wait(
    ids: Option<Vec<Option<i64>>>,
    timeout: Option<Interval>,
) -> TableIterator<
    'static,
    (
        name!(id, i64),
        name!(state, String),
        name!(result, Option<Jsonb>),
        name!(errors, Option<Jsonb>),
        name!(finished_at, Option<TimestampWithTimeZone>),
    ),
> {
    access::require_to_read(Role::Client, "wait for jobs");
    let ids = ids_arg(ids);
    let timeout_micros = wait_arg(timeout, "timeout");
    rows(results::wait(&ids, timeout_micros, &tenants::scope()))
}

/// Hands a held job back to wait for `signal`, without spending its attempt: `waiting` (it
/// is queued again when the signal comes, or after `timeout` flagged as timed out), `queued`
/// (the signal is recorded already), `cancelled` or `lost`. The next claim of the job carries
/// the signal's name and payload.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_await(
    id: Option<i64>,
    lease: Option<pgrx::Uuid>,
    signal: Option<&str>,
    timeout: default!(Option<Interval>, "'1 day'"),
) -> &'static str {
    access::require(Role::Worker, "await signals");
    let held: Held = (required(id, "id"), required(lease, "lease"));
    let signal = required(signal, "signal");
    check_text(signal, "signal", SIGNAL_BYTES);
    let timeout = check_interval(
        &required(timeout, "timeout"),
        "timeout",
        true,
        AWAIT_TIMEOUT,
        "greater than 0 and at most 100 years",
    );
    signals::await_signal(held, signal, timeout, &tenants::scope()).as_str()
}

/// Signals `signal` for the session's tenant: when the caller's transaction commits, every job
/// of the tenant waiting for it is queued with `payload`, and the signal is recorded for `keep`
/// so that an await that comes later answers at once. A rolled-back signal wakes nothing.
/// Returns how many jobs it woke.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_signal(
    signal: Option<&str>,
    payload: default!(Option<Jsonb>, "NULL"),
    keep: default!(Option<Interval>, "'1 day'"),
) -> i32 {
    access::require(Role::Client, "send signals");
    let signal = required(signal, "signal");
    check_text(signal, "signal", SIGNAL_BYTES);
    if let Some(payload) = payload {
        check_payload_size(payload, || "payload".to_owned());
    }
    let keep = delay_arg(&required(keep, "keep"), "keep");
    let tenant = tenants::tenant_for_new_job(None, &tenants::scope());
    i32::try_from(signals::signal(signal, payload, keep, tenant.as_deref())).unwrap_or(i32::MAX)
}
