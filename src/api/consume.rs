//! Consuming: `jobs_claim`, `jobs_heartbeat`, `jobs_complete`, `jobs_complete_batch`,
//! `jobs_complete_and_claim`, `jobs_fail` and `jobs_release`.

use pgrx::prelude::*;

use super::args::{
    check_payload_size, check_range, check_text, cut_text, delay_arg, lease_arg, limits, queue_arg,
    required_elements, wait_arg,
};
use crate::engine::access::{self, Role};
use crate::engine::claim::{self, ClaimFilter, ClaimRequest};
use crate::engine::distribute;
use crate::engine::settle::{self, Held};
use crate::engine::tenants;
use crate::pg::datum::Jsonb;
use crate::pg::errors::{raise, required, BAD_ARGUMENT};
use crate::pg::srf::{SetOfIterator, TableIterator};
use crate::storage::rows::ClaimedRow;

/// The worker name a claim records when none is given: `application_name`, else the pid.
fn default_worker_name() -> String {
    // SAFETY: application_name is a GUC string, valid for the session.
    let application_name = unsafe {
        let name = pg_sys::application_name;
        if name.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned()
        }
    };
    if application_name.is_empty() {
        // SAFETY: MyProcPid is set for the life of the backend.
        format!("pid:{}", unsafe { pg_sys::MyProcPid })
    } else {
        application_name
    }
}

/// Claims up to `n` due jobs of `queue` for `worker`, each under a fresh lease; with `wait`,
/// sleeps until a commit makes a job claimable, a delayed job comes due, or the wait ends.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_claim(
    queue: Option<&str>,
    worker: default!(Option<&str>, "NULL"),
    n: default!(Option<i32>, 1),
    lease: default!(Option<Interval>, "NULL"),
    kinds: default!(Option<Vec<Option<String>>>, "NULL"),
    wait: default!(Option<Interval>, "'0'"),
) -> SetOfIterator<'static, ClaimedRow> {
    access::require(Role::Worker, "claim jobs");
    let request = claim_request(queue, worker, n, lease, kinds, wait);
    SetOfIterator::new(distribute::on_queue(request.queue, || {
        claim::claim(&request)
    }))
}

/// Checks `jobs_claim`'s arguments (shared with `jobs_complete_and_claim`) and makes the
/// engine's request of them.
#[track_caller]
fn claim_request<'a>(
    queue: Option<&'a str>,
    worker: Option<&str>,
    n: Option<i32>,
    lease: Option<Interval>,
    kinds: Option<Vec<Option<String>>>,
    wait: Option<Interval>,
) -> ClaimRequest<'a> {
    let queue = queue_arg(queue);
    let worker = match worker {
        Some(worker) => {
            check_text(worker, "worker", limits::WORKER_BYTES);
            worker.to_owned()
        }
        None => default_worker_name(),
    };
    let n = required(n, "n");
    check_range(n.into(), "n", 1, limits::CLAIM);
    let lease = lease.map(|lease| lease_arg(&lease, "lease"));
    let kinds = kinds.map(|kinds| {
        for (i, kind) in kinds.iter().enumerate() {
            if let Some(kind) = kind {
                check_text(kind, &format!("kinds[{}]", i + 1), limits::KIND_BYTES);
            }
        }
        // A NULL element matches no job; only the named kinds count.
        let kinds: Vec<String> = kinds.into_iter().flatten().collect();
        if kinds.is_empty() {
            raise(
                BAD_ARGUMENT,
                "kinds must name at least one kind, or be NULL for every kind".into(),
            );
        }
        kinds
    });
    let wait_micros = wait_arg(wait, "wait");
    ClaimRequest {
        queue,
        worker,
        n: n as usize,
        lease,
        filter: ClaimFilter::new(kinds, tenants::scope()),
        wait_micros,
    }
}

/// One commit per job: completes the jobs a worker finished (`ids` with their `leases`, and
/// each one's `result` when `results` is given) and claims up to `n` due jobs of `queue`, in
/// one call and one transaction. One row per settled job, in input order (`settled`, its
/// `outcome`: `succeeded`, `cancelled` or `lost`), then one per claimed job (`claimed`, as
/// `jobs_claim` returns it; `SELECT settled, outcome, (claimed).* FROM ...` flattens it). It
/// never waits: a worker whose claim came back empty asks `jobs_claim(..., wait => ...)`
/// next, so that no settle stays uncommitted while it sleeps.
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_complete_and_claim(
    queue: Option<&str>,
    ids: Option<Vec<Option<i64>>>,
    leases: Option<Vec<Option<pgrx::Uuid>>>,
    results: default!(Option<Vec<Option<pgrx::JsonB>>>, "NULL"),
    worker: default!(Option<&str>, "NULL"),
    n: default!(Option<i32>, 1),
    lease: default!(Option<Interval>, "NULL"),
    kinds: default!(Option<Vec<Option<String>>>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(settled, Option<i64>),
        name!(outcome, Option<String>),
        name!(claimed, Option<ClaimedRow>),
    ),
> {
    access::require(Role::Worker, "complete and claim jobs");
    let pairs = held_pairs(ids, leases);
    if let Some(results) = &results {
        if results.len() != pairs.len() {
            raise(
                BAD_ARGUMENT,
                format!(
                    "results must have one element per id (or be NULL), got {} results for {} ids",
                    results.len(),
                    pairs.len()
                ),
            );
        }
    }
    let results: Option<Vec<Option<Jsonb>>> = results.map(|results| {
        results
            .into_iter()
            .enumerate()
            .map(|(i, result)| {
                let result = result.and_then(Jsonb::from_value);
                if let Some(result) = result {
                    check_payload_size(result, || format!("results[{}]", i + 1));
                }
                result
            })
            .collect()
    });
    let request = claim_request(queue, worker, n, lease, kinds, Some(Interval::from_days(0)));
    let scope = tenants::scope();
    // On a distributed cluster, on the queue's shard: jobs of other queues' shards are lost
    // to this call (docs/src/internals/citus.md).
    let (outcomes, claimed) = distribute::on_queue(request.queue, || {
        let outcomes: Vec<(i64, String)> = match results {
            Some(results) => pairs
                .iter()
                .zip(results)
                .map(|(held, result)| {
                    (
                        held.0,
                        settle::complete(*held, result, &scope).as_str().to_owned(),
                    )
                })
                .collect(),
            None => settle::complete_batch(&pairs, &scope)
                .into_iter()
                .map(|(id, outcome)| (id, outcome.as_str().to_owned()))
                .collect(),
        };
        let claimed = claim::claim(&request);
        (outcomes, claimed)
    });
    TableIterator::new(
        outcomes
            .into_iter()
            .map(|(id, outcome)| (Some(id), Some(outcome), None))
            .chain(claimed.into_iter().map(|row| (None, None, Some(row)))),
    )
}

/// The `(id, lease)` pairs of a batch settle, checked: both arrays given, of one length, with
/// no NULL element.
#[track_caller]
fn held_pairs(ids: Option<Vec<Option<i64>>>, leases: Option<Vec<Option<pgrx::Uuid>>>) -> Vec<Held> {
    let ids = required(ids, "ids");
    let leases = required(leases, "leases");
    if ids.len() != leases.len() {
        raise(
            BAD_ARGUMENT,
            format!(
                "ids and leases must have the same length, got {} ids and {} leases",
                ids.len(),
                leases.len()
            ),
        );
    }
    let ids = required_elements(ids, "ids");
    let leases = required_elements(leases, "leases");
    ids.into_iter().zip(leases).collect()
}

/// The `(id, lease)` a heartbeat or settle call presents.
fn held(id: Option<i64>, lease: Option<pgrx::Uuid>) -> Held {
    (required(id, "id"), required(lease, "lease"))
}

/// Extends the lease of a held job (by the claim's lease length unless `extend`) and stores
/// `progress`: `running`, `cancelled` or `lost`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_heartbeat(
    id: Option<i64>,
    lease: Option<pgrx::Uuid>,
    extend: default!(Option<Interval>, "NULL"),
    progress: default!(Option<Jsonb>, "NULL"),
) -> &'static str {
    access::require(Role::Worker, "heartbeat jobs");
    let held = held(id, lease);
    let extend = extend.map(|extend| lease_arg(&extend, "extend"));
    if let Some(progress) = progress {
        check_payload_size(progress, || "progress".to_owned());
    }
    distribute::on_job(held.0, || {
        settle::heartbeat(held, extend, progress, &tenants::scope())
    })
    .as_str()
}

/// Marks a job succeeded, storing `result`: `succeeded`, `cancelled` or `lost`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_complete(
    id: Option<i64>,
    lease: Option<pgrx::Uuid>,
    result: default!(Option<Jsonb>, "NULL"),
) -> &'static str {
    access::require(Role::Worker, "complete jobs");
    let held = held(id, lease);
    if let Some(result) = result {
        check_payload_size(result, || "result".to_owned());
    }
    distribute::on_job(held.0, || settle::complete(held, result, &tenants::scope())).as_str()
}

/// Marks many jobs succeeded in one call; one `(id, outcome)` row per pair, in input order.
/// A function of its own name, not an overload of `jobs_complete`: drivers that send untyped
/// parameters (node-postgres, psycopg with strings) must resolve every call without casts.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_complete_batch(
    ids: Option<Vec<Option<i64>>>,
    leases: Option<Vec<Option<pgrx::Uuid>>>,
) -> TableIterator<'static, (name!(id, i64), name!(outcome, String))> {
    access::require(Role::Worker, "complete jobs");
    let pairs = held_pairs(ids, leases);
    let ids: Vec<i64> = pairs.iter().map(|held| held.0).collect();
    TableIterator::new(
        distribute::on_jobs(&ids, || settle::complete_batch(&pairs, &tenants::scope()))
            .into_iter()
            .map(|(id, outcome)| (id, outcome.as_str().to_owned())),
    )
}

/// Records a failed attempt: `queued` (a retry is scheduled), `failed`, `cancelled` or `lost`.
/// An error text longer than the limit is kept cut to it.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_fail(
    id: Option<i64>,
    lease: Option<pgrx::Uuid>,
    error: Option<&str>,
    retry_in: default!(Option<Interval>, "NULL"),
    retry: default!(Option<bool>, "true"),
) -> &'static str {
    access::require(Role::Worker, "fail jobs");
    let held = held(id, lease);
    let error = required(error, "error");
    let retry = required(retry, "retry");
    let retry_in = retry_in.map(|retry_in| delay_arg(&retry_in, "retry_in"));
    let error = cut_text(error, limits::ERROR_BYTES);
    distribute::on_job(held.0, || {
        settle::fail(held, &error, retry_in, retry, &tenants::scope())
    })
    .as_str()
}

/// Hands a job back without spending its attempt: `queued`, `cancelled` or `lost`. A reason
/// longer than the limit is kept cut to it.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_release(
    id: Option<i64>,
    lease: Option<pgrx::Uuid>,
    reason: default!(Option<&str>, "NULL"),
    retry_in: default!(Option<Interval>, "'0'"),
) -> &'static str {
    access::require(Role::Worker, "release jobs");
    let held = held(id, lease);
    let retry_in = delay_arg(&required(retry_in, "retry_in"), "retry_in");
    let reason = reason.map(|reason| cut_text(reason, limits::REASON_BYTES));
    distribute::on_job(held.0, || {
        settle::release(held, reason.as_deref(), retry_in, &tenants::scope())
    })
    .as_str()
}
