//! Schedules: `jobs_schedule`, `jobs_unschedule`, `jobs_cron_next` and `jobs_run_schedules`.

use pgrx::prelude::*;

use super::args::{
    check_finite, check_max_attempts, check_object, check_payload_size, check_text, kind_arg,
    limits, priority_arg, queue_arg,
};
use crate::engine::access::{self, Role};
use crate::engine::schedules::plan::CatchUp;
use crate::engine::schedules::{self, Definition};
use crate::pg::clock::server_now;
use crate::pg::datum::Jsonb;
use crate::pg::errors::{raise, required, BAD_ARGUMENT};
use crate::storage::rows::ScheduleRow;
use crate::storage::with_client;

/// Checks a schedule expression argument: not NULL, at most `limits::CRON_BYTES`, and one that
/// parses (checked again, with the time zone, by the engine).
#[track_caller]
fn cron_arg(cron: Option<&str>) -> &str {
    let cron = required(cron, "cron");
    check_text(cron, "cron", limits::CRON_BYTES);
    cron
}

/// Creates a schedule, or replaces the one of that name: the background worker enqueues one
/// job on `queue` for each slot of `cron` (five-field cron, six fields with seconds first, a
/// macro such as `@daily`, or `'N seconds'`) in `timezone`, each slot exactly once. Returns
/// the schedule as `jobs.schedules` shows it, with its next slot.
#[allow(clippy::too_many_arguments)]
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_schedule(
    name: Option<&str>,
    cron: Option<&str>,
    queue: Option<&str>,
    payload: default!(Option<Jsonb>, "'{}'"),
    kind: default!(Option<&str>, "'default'"),
    timezone: default!(Option<&str>, "'UTC'"),
    headers: default!(Option<Jsonb>, "NULL"),
    priority: default!(Option<i32>, 0),
    max_attempts: default!(Option<i32>, "NULL"),
    catch_up: default!(Option<&str>, "'latest'"),
    enabled: default!(Option<bool>, "true"),
) -> ScheduleRow {
    access::require(Role::Admin, "schedule jobs");
    let name = required(name, "name");
    check_text(name, "name", limits::SCHEDULE_NAME_BYTES);
    let cron = cron_arg(cron);
    let queue = queue_arg(queue);
    let payload = required(payload, "payload");
    check_payload_size(payload, || "payload".to_owned());
    let kind = kind_arg(kind);
    let timezone = required(timezone, "timezone");
    check_object(headers, "headers");
    let priority = priority_arg(priority);
    check_max_attempts(max_attempts);
    let catch_up_name = required(catch_up, "catch_up");
    let Some(catch_up) = CatchUp::from_name(catch_up_name) else {
        raise(
            BAD_ARGUMENT,
            format!("catch_up must be {}, got '{catch_up_name}'", CatchUp::NAMES),
        )
    };
    let enabled = required(enabled, "enabled");
    // A bad expression or time zone is refused here, never met by the worker.
    schedules::checked_slots(cron, timezone);
    schedules::define(&Definition {
        name,
        cron,
        timezone,
        queue,
        payload,
        kind,
        headers,
        priority: priority as i16,
        max_attempts,
        catch_up,
        enabled,
    })
}

/// Deletes a schedule; answers whether there was one of that name. Jobs it already enqueued
/// stay.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_unschedule(name: Option<&str>) -> bool {
    access::require(Role::Admin, "unschedule jobs");
    schedules::unschedule(required(name, "name"))
}

/// The first slot of `cron` in `timezone` strictly after `after`, computed exactly as the
/// background worker computes a schedule's slots; NULL when there is none before year 5000.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_cron_next(
    cron: Option<&str>,
    after: default!(Option<TimestampWithTimeZone>, "pg_catalog.now()"),
    timezone: default!(Option<&str>, "'UTC'"),
) -> Option<TimestampWithTimeZone> {
    access::require_to_read(Role::Client, "preview schedules");
    let cron = cron_arg(cron);
    let after = required(after, "after");
    check_finite(after, "after");
    if !schedules::slots::computable_from(i64::from(after)) {
        raise(
            BAD_ARGUMENT,
            format!("after must be a time from 0001-01-01 00:00:00+00 on, got '{after}'"),
        );
    }
    let timezone = required(timezone, "timezone");
    schedules::cron_next(cron, i64::from(after), timezone)
}

/// Enqueues every due slot of every schedule now, as the background worker's tick does, and
/// returns how many jobs it enqueued: for servers without the worker (call it from any
/// scheduler) and for tests. Slots are never enqueued twice, whoever runs them; this call
/// counts every due slot as on time (`catch_up` is about the worker's downtime).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_run_schedules() -> i64 {
    access::require(Role::Admin, "run schedules");
    with_client(|client| schedules::run_due(client, server_now(), None)) as i64
}
