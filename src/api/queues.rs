//! Queues: `jobs_create_queue`, `jobs_drop_queue`, `jobs_pause`, `jobs_resume`.

use pgrx::prelude::*;

use super::args::{check_queue_name, check_range, delay_arg, lease_arg, limits, queue_arg};
use crate::engine::access::{self, Role};
use crate::engine::distribute;
use crate::engine::queues::{self, QueueSettings};
use crate::pg::errors::{raise, raise_with_hint, required, BAD_ARGUMENT};
use crate::storage::rows::QueueRow;

/// Creates a queue, or updates the settings given of an existing one. `NULL` leaves a setting
/// as it is (or at its default for a new queue); `rate_limit => 0`, `rate_burst => 0` and
/// `dead_letter => ''` clear those settings. `claims_by_kind => true` keeps the queue's jobs in
/// an index by kind, for claims with `kinds` behind many jobs of other kinds.
#[allow(clippy::too_many_arguments)]
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_create_queue(
    // 0.1.0 passed another argument list (README "Upgrading").
    _current: access::CurrentDefinitions,
    queue: Option<&str>,
    lease: default!(Option<Interval>, "NULL"),
    max_attempts: default!(Option<i32>, "NULL"),
    backoff_base: default!(Option<Interval>, "NULL"),
    backoff_max: default!(Option<Interval>, "NULL"),
    jitter: default!(Option<f64>, "NULL"),
    retention: default!(Option<Interval>, "NULL"),
    rate_limit: default!(Option<f64>, "NULL"),
    rate_burst: default!(Option<f64>, "NULL"),
    group_concurrency: default!(Option<i32>, "NULL"),
    dead_letter: default!(Option<&str>, "NULL"),
    claims_by_kind: default!(Option<bool>, "NULL"),
) -> QueueRow {
    access::require(Role::Admin, "create or change queues");
    let queue = queue_arg(queue);
    let lease = lease.map(|lease| lease_arg(&lease, "lease"));
    if let Some(max_attempts) = max_attempts {
        check_range(max_attempts.into(), "max_attempts", 1, limits::MAX_ATTEMPTS);
    }
    let backoff_base = backoff_base.map(|d| delay_arg(&d, "backoff_base"));
    let backoff_max = backoff_max.map(|d| delay_arg(&d, "backoff_max"));
    let retention = retention.map(|d| delay_arg(&d, "retention"));
    if let Some(jitter) = jitter {
        if !(0.0..=1.0).contains(&jitter) {
            raise(
                BAD_ARGUMENT,
                format!("jitter must be between 0 and 1, got {jitter}"),
            );
        }
    }
    if let Some(rate_limit) = rate_limit {
        if !(rate_limit == 0.0 || (rate_limit >= limits::MIN_RATE_LIMIT && rate_limit.is_finite()))
        {
            raise_with_hint(
                BAD_ARGUMENT,
                format!("rate_limit must be a number of claims per second of at least 0.000000001 (0 clears it), got {rate_limit}"),
                "0.000000001 is one claim in about 32 years; to hand out no jobs at all, pause the queue (SELECT jobs_pause(queue)).",
            );
        }
    }
    if let Some(rate_burst) = rate_burst {
        if !(rate_burst == 0.0 || (rate_burst >= 1.0 && rate_burst.is_finite())) {
            raise(
                BAD_ARGUMENT,
                format!("rate_burst must be a number of jobs of at least 1 (0 clears it), got {rate_burst}"),
            );
        }
    }
    if let Some(group_concurrency) = group_concurrency {
        check_range(
            group_concurrency.into(),
            "group_concurrency",
            1,
            limits::GROUP_CONCURRENCY,
        );
    }
    if let Some(dead_letter) = dead_letter.filter(|d| !d.is_empty()) {
        check_queue_name(dead_letter, "dead_letter");
    }
    let settings = QueueSettings {
        lease,
        max_attempts,
        backoff_base,
        backoff_max,
        jitter,
        retention,
        rate_limit,
        rate_burst,
        group_concurrency,
        dead_letter,
        claims_by_kind,
    };
    distribute::on_queue(queue, || queues::create_or_update(queue, &settings))
}

/// Drops a queue and its jobs; refuses while jobs are queued or running unless `force`, while
/// another queue uses it as its dead-letter queue, and for the default queue.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_drop_queue(queue: Option<&str>, force: default!(Option<bool>, "false")) {
    access::require(Role::Admin, "drop queues");
    let queue = queue_arg(queue);
    let force = required(force, "force");
    distribute::on_queue(queue, || queues::drop(queue, force));
}

/// Pauses a queue: it keeps accepting jobs but hands none out until resumed.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_pause(queue: Option<&str>) {
    access::require(Role::Admin, "pause queues");
    let queue = queue_arg(queue);
    distribute::on_queue(queue, || queues::set_paused(queue, true));
}

/// Resumes a paused queue and wakes the claims waiting on it.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_resume(queue: Option<&str>) {
    access::require(Role::Admin, "resume queues");
    let queue = queue_arg(queue);
    distribute::on_queue(queue, || queues::set_paused(queue, false));
}
