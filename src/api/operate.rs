//! Operating on jobs by id: `jobs_cancel`, `jobs_retry`, `jobs_run_now`, `jobs_reclaim`.

use pgrx::prelude::*;

use super::args::check_finite;
use crate::engine::access::{self, Role};
use crate::engine::{distribute, operate, reclaim, tenants};
use crate::pg::errors::required;

/// Cancels a queued, running or waiting job at once (and the jobs waiting for it, transitively)
/// and returns its state afterwards; a finished job is left as it is. A running holder learns
/// it at its next heartbeat or settle call.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_cancel(id: Option<i64>) -> &'static str {
    access::require(Role::Client, "cancel jobs");
    let id = required(id, "id");
    distribute::on_job(id, || operate::cancel(id, &tenants::scope())).as_str()
}

/// Brings a failed or cancelled job back to queued at `run_at`, with fresh attempts: `queued`,
/// or `waiting` for a job enqueued after jobs that have not all succeeded since.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_retry(
    id: Option<i64>,
    run_at: default!(Option<TimestampWithTimeZone>, "pg_catalog.now()"),
) -> &'static str {
    access::require(Role::Admin, "retry jobs");
    let id = required(id, "id");
    let run_at = required(run_at, "run_at");
    check_finite(run_at, "run_at");
    distribute::on_job(id, || operate::retry(id, run_at, &tenants::scope())).as_str()
}

/// Makes a queued job due now (a delayed one, or one waiting out a retry's backoff), keeping
/// its priority, and returns its state afterwards; a job that is not queued is left as it is.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_run_now(id: Option<i64>) -> &'static str {
    access::require(Role::Admin, "run jobs now");
    operate::run_now(required(id, "id"), &tenants::scope()).as_str()
}

/// Reclaims every expired lease now, and ends every await whose timeout passed; returns how
/// many jobs it took back.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_reclaim() -> i32 {
    access::require(Role::Admin, "reclaim expired leases");
    let scope = tenants::scope();
    // On a distributed cluster, this node's shards.
    let mut reclaimed = 0;
    if distribute::on_each_local_shard(|| reclaimed += reclaim::reclaim_all(&scope)).is_none() {
        reclaimed = reclaim::reclaim_all(&scope);
    }
    i32::try_from(reclaimed).unwrap_or(i32::MAX)
}
