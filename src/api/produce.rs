//! Producing: `jobs_enqueue` and `jobs_enqueue_batch`.

use pgrx::prelude::*;

use super::args::{
    check_finite, check_object, check_payload_size, check_range, check_text, limits, queue_arg,
};
use crate::engine::access::{self, Role};
use crate::engine::enqueue::{self, JobOptions};
use crate::engine::tenants;
use crate::pg::datum::{Jsonb, JsonbArray};
use crate::pg::errors::{raise, required, BAD_ARGUMENT, NOT_SUPPORTED, NULL_ARGUMENT};

/// Checks the options every job of one enqueue call shares, and decides the jobs' tenant.
#[allow(clippy::too_many_arguments)]
fn job_options(
    kind: Option<&str>,
    run_at: Option<TimestampWithTimeZone>,
    priority: Option<i32>,
    max_attempts: Option<i32>,
    headers: Option<Jsonb>,
    unique_key: Option<&str>,
    unique_for: Option<Interval>,
    on_conflict: Option<&str>,
    tenant: Option<&str>,
    group_key: Option<&str>,
) -> JobOptions {
    let kind = required(kind, "kind");
    check_text(kind, "kind", limits::KIND_BYTES);
    let run_at = required(run_at, "run_at");
    check_finite(run_at, "run_at");
    let priority = required(priority, "priority");
    check_range(
        priority.into(),
        "priority",
        i16::MIN.into(),
        i16::MAX.into(),
    );
    if let Some(max_attempts) = max_attempts {
        check_range(max_attempts.into(), "max_attempts", 1, limits::MAX_ATTEMPTS);
    }
    check_object(headers, "headers");
    let tenant = tenants::tenant_for_new_job(tenant, &tenants::scope());
    let on_conflict = required(on_conflict, "on_conflict");
    if !matches!(on_conflict, "skip" | "replace" | "error") {
        raise(
            BAD_ARGUMENT,
            format!("on_conflict must be 'skip', 'replace' or 'error', got '{on_conflict}'"),
        );
    }
    // These arguments belong to features with their own issues; until they are built,
    // refusing them is honest where ignoring them would silently break a caller's intent.
    for (given, argument, feature) in [
        (
            unique_key.is_some() || unique_for.is_some(),
            "unique_key",
            "unique jobs",
        ),
        (group_key.is_some(), "group_key", "job groups"),
    ] {
        if given {
            raise(
                NOT_SUPPORTED,
                format!("{argument} is reserved for {feature}, which this version of pg_jobs does not provide yet"),
            );
        }
    }
    JobOptions {
        kind: kind.to_owned(),
        run_at,
        priority: priority as i16,
        max_attempts,
        headers,
        tenant,
    }
}

/// Enqueues one job and returns its id. It becomes visible to claims when the caller's
/// transaction commits, and never exists if it rolls back.
#[allow(clippy::too_many_arguments)]
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_enqueue(
    queue: Option<&str>,
    payload: default!(Option<Jsonb>, "'{}'"),
    kind: default!(Option<&str>, "'default'"),
    run_at: default!(Option<TimestampWithTimeZone>, "pg_catalog.now()"),
    priority: default!(Option<i32>, 0),
    max_attempts: default!(Option<i32>, "NULL"),
    headers: default!(Option<Jsonb>, "NULL"),
    unique_key: default!(Option<&str>, "NULL"),
    unique_for: default!(Option<Interval>, "NULL"),
    on_conflict: default!(Option<&str>, "'skip'"),
    tenant: default!(Option<&str>, "NULL"),
    group_key: default!(Option<&str>, "NULL"),
) -> i64 {
    access::require(Role::Client, "enqueue jobs");
    let queue = queue_arg(queue);
    let payload = required(payload, "payload");
    check_payload_size(payload, || "payload".to_owned());
    let options = job_options(
        kind,
        run_at,
        priority,
        max_attempts,
        headers,
        unique_key,
        unique_for,
        on_conflict,
        tenant,
        group_key,
    );
    enqueue::enqueue(queue, payload, &options)
}

/// Enqueues one job per payload in one statement and returns their ids in payload order.
#[allow(clippy::too_many_arguments)]
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_enqueue_batch(
    queue: Option<&str>,
    payloads: Option<JsonbArray>,
    kind: default!(Option<&str>, "'default'"),
    run_at: default!(Option<TimestampWithTimeZone>, "pg_catalog.now()"),
    priority: default!(Option<i32>, 0),
    max_attempts: default!(Option<i32>, "NULL"),
    headers: default!(Option<Jsonb>, "NULL"),
    unique_key: default!(Option<&str>, "NULL"),
    unique_for: default!(Option<Interval>, "NULL"),
    on_conflict: default!(Option<&str>, "'skip'"),
    tenant: default!(Option<&str>, "NULL"),
    group_key: default!(Option<&str>, "NULL"),
) -> SetOfIterator<'static, i64> {
    access::require(Role::Client, "enqueue jobs");
    let queue = queue_arg(queue);
    let payloads = required(payloads, "payloads");
    for (i, payload) in payloads.elements().iter().enumerate() {
        // Report positions the way SQL indexes arrays; named only when there is something to
        // report, as a batch holds thousands.
        let argument = || format!("payloads[{}]", i + 1);
        match payload {
            Some(payload) => check_payload_size(*payload, argument),
            None => raise(NULL_ARGUMENT, format!("{} must not be NULL", argument())),
        }
    }
    let options = job_options(
        kind,
        run_at,
        priority,
        max_attempts,
        headers,
        unique_key,
        unique_for,
        on_conflict,
        tenant,
        group_key,
    );
    SetOfIterator::new(enqueue::enqueue_batch(queue, payloads, &options))
}
