//! Producing: `jobs_enqueue` and `jobs_enqueue_batch`.

use pgrx::prelude::*;

use super::args::{
    check_finite, check_max_attempts, check_object, check_payload_size, check_text, delay_arg,
    kind_arg, limits, priority_arg, queue_arg, required_elements,
};
use crate::engine::access::{self, Role};
use crate::engine::distribute;
use crate::engine::enqueue::{self, JobOptions, OnConflict, Uniqueness};
use crate::engine::tenants;
use crate::engine::workflows::dependencies;
use crate::pg::datum::{Jsonb, JsonbArray};
use crate::pg::errors::{raise, required, BAD_ARGUMENT, NULL_ARGUMENT};
use crate::pg::srf::SetOfIterator;
use crate::storage::rows::EnqueuedRow;

/// What a call asked of unique keys and groups, before checking.
struct FlowArguments<'a> {
    unique_key: Option<&'a str>,
    unique_keys: Option<Vec<Option<String>>>,
    unique_for: Option<Interval>,
    on_conflict: Option<&'a str>,
    group_key: Option<&'a str>,
    group_keys: Option<Vec<Option<String>>>,
    after: Option<Vec<Option<i64>>>,
}

/// Checks the per-payload keys of a batch: as many as payloads, each a valid key or NULL.
fn check_keys(keys: &Option<Vec<Option<String>>>, argument: &str, payloads: usize, max: usize) {
    let Some(keys) = keys else { return };
    if keys.len() != payloads {
        raise(
            BAD_ARGUMENT,
            format!(
                "{argument} must have one element per payload, got {} for {payloads} payloads",
                keys.len()
            ),
        );
    }
    for (i, key) in keys.iter().enumerate() {
        if let Some(key) = key {
            check_text(key, &format!("{argument}[{}]", i + 1), max);
        }
    }
}

/// Checks the options every job of one enqueue call shares, and decides the jobs' tenant.
#[allow(clippy::too_many_arguments)]
fn job_options(
    kind: Option<&str>,
    run_at: Option<TimestampWithTimeZone>,
    priority: Option<i32>,
    max_attempts: Option<i32>,
    headers: Option<Jsonb>,
    tenant: Option<&str>,
    flow: FlowArguments<'_>,
    payloads: usize,
) -> JobOptions {
    let kind = kind_arg(kind);
    let run_at = required(run_at, "run_at");
    check_finite(run_at, "run_at");
    let priority = priority_arg(priority);
    check_max_attempts(max_attempts);
    check_object(headers, "headers");
    let tenant = tenants::tenant_for_new_job(tenant, &tenants::scope());
    let on_conflict = match required(flow.on_conflict, "on_conflict") {
        "skip" => OnConflict::Skip,
        "replace" => OnConflict::Replace,
        "error" => OnConflict::Error,
        other => raise(
            BAD_ARGUMENT,
            format!("on_conflict must be 'skip', 'replace' or 'error', got '{other}'"),
        ),
    };
    if let Some(key) = flow.unique_key {
        check_text(key, "unique_key", limits::UNIQUE_KEY_BYTES);
    }
    check_keys(
        &flow.unique_keys,
        "unique_keys",
        payloads,
        limits::UNIQUE_KEY_BYTES,
    );
    let unique_for = flow
        .unique_for
        .map(|window| delay_arg(&window, "unique_for"));
    let keyed = flow.unique_key.is_some()
        || flow
            .unique_keys
            .as_ref()
            .is_some_and(|keys| keys.iter().any(Option::is_some));
    if unique_for.is_some() && !keyed {
        raise(
            BAD_ARGUMENT,
            "unique_for needs a unique_key: it is how long a succeeded job keeps its key".into(),
        );
    }
    if let Some(group) = flow.group_key {
        check_text(group, "group_key", limits::GROUP_KEY_BYTES);
    }
    check_keys(
        &flow.group_keys,
        "group_keys",
        payloads,
        limits::GROUP_KEY_BYTES,
    );
    let after = after_arg(flow.after);
    JobOptions {
        kind: kind.to_owned(),
        run_at,
        priority: priority as i16,
        max_attempts,
        headers,
        tenant,
        group_key: flow.group_key.map(str::to_owned),
        group_keys: flow.group_keys,
        unique: keyed.then(|| Uniqueness {
            key: flow.unique_key.map(str::to_owned),
            keys: flow.unique_keys,
            unique_for,
            on_conflict,
        }),
        after,
    }
}

/// Checks `after`: each element a job id (not NULL), at most
/// [`dependencies::MAX_PARENTS`]; an empty array waits for nothing.
fn after_arg(after: Option<Vec<Option<i64>>>) -> Option<Vec<i64>> {
    let after = after?;
    if after.len() > dependencies::MAX_PARENTS {
        raise(
            BAD_ARGUMENT,
            format!(
                "after may name at most {} jobs, got {}",
                dependencies::MAX_PARENTS,
                after.len()
            ),
        );
    }
    let after = required_elements(after, "after");
    (!after.is_empty()).then_some(after)
}

/// Enqueues one job and returns its id: with `unique_key`, the existing job's id when another
/// job of the queue holds the key (see `on_conflict`). It becomes visible to claims when the
/// caller's transaction commits, and never exists if it rolls back. With `after`, it waits
/// (`waiting`) until every one of those jobs has succeeded.
#[allow(clippy::too_many_arguments)]
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_enqueue(
    // 0.2.0 passed another argument list (README "Upgrading").
    _current: access::CurrentDefinitions,
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
    after: default!(Option<Vec<Option<i64>>>, "NULL"),
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
        tenant,
        FlowArguments {
            unique_key,
            unique_keys: None,
            unique_for,
            on_conflict,
            group_key,
            group_keys: None,
            after,
        },
        1,
    );
    distribute::on_queue(queue, || enqueue::enqueue(queue, payload, &options).id)
}

/// Enqueues one job per payload in one statement; one `(id, inserted)` row per payload, in
/// payload order (`inserted` false where a unique duplicate was found, whose id it is).
/// `unique_keys` and `group_keys` give each payload its own key (NULL elements: the shared
/// `unique_key` / `group_key`). With `after`, every job inserted waits for those jobs.
#[allow(clippy::too_many_arguments)]
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_enqueue_batch(
    // 0.1.0 passed another argument list (README "Upgrading").
    _current: access::CurrentDefinitions,
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
    unique_keys: default!(Option<Vec<Option<String>>>, "NULL"),
    group_keys: default!(Option<Vec<Option<String>>>, "NULL"),
    after: default!(Option<Vec<Option<i64>>>, "NULL"),
) -> SetOfIterator<'static, EnqueuedRow> {
    access::require(Role::Client, "enqueue jobs");
    let queue = queue_arg(queue);
    let payloads = required(payloads, "payloads");
    let elements = payloads.elements();
    for (i, payload) in elements.iter().enumerate() {
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
        tenant,
        FlowArguments {
            unique_key,
            unique_keys,
            unique_for,
            on_conflict,
            group_key,
            group_keys,
            after,
        },
        elements.len(),
    );
    SetOfIterator::new(
        distribute::on_queue(queue, || enqueue::enqueue_batch(queue, payloads, &options))
            .into_iter()
            .map(|e| EnqueuedRow::new(e.id, e.inserted)),
    )
}
