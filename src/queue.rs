//! Queues: creating, updating, dropping, pausing and resuming them, and the checks every
//! function applies to a queue name.

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::datum::QueueRow;
use crate::errors::{
    check_interval, check_range, raise, raise_with_hint, required, BAD_ARGUMENT, DAY, QUEUE_IN_USE,
    UNKNOWN_QUEUE,
};
use crate::locks::lock_queue;
use crate::spi::{with_client, Statement};
use crate::wakeup;

/// Longest lease a queue or a claim may set.
pub const MAX_LEASE_DAYS: i128 = 7;
/// Most attempts a job may have.
pub const MAX_ATTEMPTS: i64 = 10_000;

/// Checks a lease-length argument (`lease`, `extend`): greater than 0 and at most 7 days.
pub fn check_lease(lease: &Interval, argument: &str) {
    check_interval(
        lease,
        argument,
        true,
        MAX_LEASE_DAYS * DAY,
        "greater than 0 and at most 7 days",
    );
}

/// Checks a queue name: 1–63 characters of `A–Z a–z 0–9 _ - . :`.
pub fn check_queue_name(name: &str) {
    let valid_chars = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    if name.is_empty() || name.len() > 63 || !valid_chars {
        raise(
            BAD_ARGUMENT,
            format!(
                "queue must be 1 to 63 characters of A-Z a-z 0-9 _ - . :, got {}",
                quote(name)
            ),
        );
    }
}

/// Unwraps and checks a queue-name argument.
pub fn queue_arg(queue: Option<&str>) -> &str {
    let queue = required(queue, "queue");
    check_queue_name(queue);
    queue
}

/// Raises the error for a queue that does not exist.
pub fn unknown_queue(queue: &str) -> ! {
    raise_with_hint(
        UNKNOWN_QUEUE,
        format!("queue {} does not exist", quote(queue)),
        &format!("Create it with SELECT jobs_create_queue({});", quote(queue)),
    )
}

/// A stable 64-bit hash of a queue name (FNV-1a), shared by the queue lock and the wake-up
/// slots so both identify a queue the same way in every backend.
pub fn queue_hash(queue: &str) -> u64 {
    queue.bytes().fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Quotes a value for an error message the way SQL would.
pub fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

static ENSURE_QUEUE: Statement = Statement {
    sql: include_str!("../sql/queue_ensure.sql"),
    args: &[pg_sys::TEXTOID],
};

static UPDATE_QUEUE: Statement = Statement {
    sql: include_str!("../sql/queue_update.sql"),
    args: &[
        pg_sys::TEXTOID,
        pg_sys::INTERVALOID,
        pg_sys::INT4OID,
        pg_sys::INTERVALOID,
        pg_sys::INTERVALOID,
        pg_sys::FLOAT8OID,
        pg_sys::INTERVALOID,
        pg_sys::FLOAT8OID,
        pg_sys::INT4OID,
        pg_sys::TEXTOID,
    ],
};

static QUEUE_EXISTS: Statement = Statement {
    sql: "SELECT true FROM jobs.queue WHERE name = $1",
    args: &[pg_sys::TEXTOID],
};

/// Creates a queue, or updates the settings given of an existing one. `NULL` leaves a setting
/// as it is (or at its default for a new queue); `rate_limit => 0` and `dead_letter => ''`
/// clear those settings.
#[allow(clippy::too_many_arguments)]
#[pg_extern(volatile, parallel_unsafe)]
fn jobs_create_queue(
    queue: Option<&str>,
    lease: default!(Option<Interval>, "NULL"),
    max_attempts: default!(Option<i32>, "NULL"),
    backoff_base: default!(Option<Interval>, "NULL"),
    backoff_max: default!(Option<Interval>, "NULL"),
    jitter: default!(Option<f64>, "NULL"),
    retention: default!(Option<Interval>, "NULL"),
    rate_limit: default!(Option<f64>, "NULL"),
    group_concurrency: default!(Option<i32>, "NULL"),
    dead_letter: default!(Option<&str>, "NULL"),
) -> QueueRow {
    let queue = queue_arg(queue);
    if let Some(lease) = &lease {
        check_lease(lease, "lease");
    }
    if let Some(max_attempts) = max_attempts {
        check_range(max_attempts.into(), "max_attempts", 1, MAX_ATTEMPTS);
    }
    for (value, name) in [
        (&backoff_base, "backoff_base"),
        (&backoff_max, "backoff_max"),
        (&retention, "retention"),
    ] {
        if let Some(value) = value {
            check_interval(
                value,
                name,
                false,
                100 * 365 * DAY,
                "at least 0 and at most 100 years",
            );
        }
    }
    if let Some(jitter) = jitter {
        if !(0.0..=1.0).contains(&jitter) {
            raise(
                BAD_ARGUMENT,
                format!("jitter must be between 0 and 1, got {jitter}"),
            );
        }
    }
    if let Some(rate_limit) = rate_limit {
        if !(rate_limit >= 0.0 && rate_limit.is_finite()) {
            raise(
                BAD_ARGUMENT,
                format!("rate_limit must be a number of claims per second above 0 (0 clears it), got {rate_limit}"),
            );
        }
        // Rate limits have their own issue; refusing beats silently ignoring the setting.
        if rate_limit > 0.0 {
            crate::errors::raise(
                crate::errors::NOT_SUPPORTED,
                "rate_limit is reserved for per-queue rate limits, which this version of pg_jobs does not enforce yet".into(),
            );
        }
    }
    if let Some(group_concurrency) = group_concurrency {
        check_range(group_concurrency.into(), "group_concurrency", 1, 10_000);
    }
    if let Some(dead_letter) = dead_letter.filter(|d| !d.is_empty()) {
        check_queue_name(dead_letter);
        if dead_letter == queue {
            raise(
                BAD_ARGUMENT,
                format!("dead_letter must name another queue, got {}", quote(queue)),
            );
        }
    }

    with_client(|client| {
        ENSURE_QUEUE.run(client, &[queue.into()]);
        if let Some(dead_letter) = dead_letter.filter(|d| !d.is_empty()) {
            if QUEUE_EXISTS
                .first::<bool>(client, &[dead_letter.into()])
                .is_none()
            {
                unknown_queue(dead_letter);
            }
        }
        let args: [DatumWithOid; 10] = [
            queue.into(),
            lease.into(),
            max_attempts.into(),
            backoff_base.into(),
            backoff_max.into(),
            jitter.into(),
            retention.into(),
            rate_limit.into(),
            group_concurrency.into(),
            dead_letter.into(),
        ];
        match UPDATE_QUEUE.first::<QueueRow>(client, &args) {
            Some(row) => row,
            None => raise(
                BAD_ARGUMENT,
                "backoff_max must be at least backoff_base".into(),
            ),
        }
    })
}

static DROP_QUEUE: Statement = Statement {
    sql: include_str!("../sql/queue_drop.sql"),
    args: &[pg_sys::TEXTOID, pg_sys::BOOLOID],
};

/// Drops a queue and its jobs; refuses while jobs are queued or running unless `force`, and
/// while another queue uses it as its dead-letter queue.
#[pg_extern(volatile, parallel_unsafe)]
fn jobs_drop_queue(queue: Option<&str>, force: default!(Option<bool>, "false")) {
    let queue = queue_arg(queue);
    let force = required(force, "force");
    lock_queue(queue, true);
    with_client(|client| {
        let table = DROP_QUEUE.run(client, &[queue.into(), force.into()]);
        let row = table.first().expect("queue_drop.sql returns one row");
        let outcome: String = row.get(1).expect("queue_drop.sql returns an outcome");
        match outcome.as_str() {
            "dropped" => {}
            "unknown" => unknown_queue(queue),
            "busy" => {
                let active: i64 = row.get(2).unwrap_or(0);
                raise_with_hint(
                    QUEUE_IN_USE,
                    format!("queue {} has {active} queued or running jobs", quote(queue)),
                    "Wait for them to finish, cancel them, or pass force => true to drop them too.",
                )
            }
            _ => {
                let referrer: String = row.get(3).unwrap_or_default();
                raise_with_hint(
                    QUEUE_IN_USE,
                    format!(
                        "queue {} is the dead-letter queue of queue {}",
                        quote(queue),
                        quote(&referrer)
                    ),
                    &format!(
                        "Clear it first: SELECT jobs_create_queue({}, dead_letter => '');",
                        quote(&referrer)
                    ),
                )
            }
        }
    });
}

static SET_PAUSED: Statement = Statement {
    sql: "UPDATE jobs.queue SET paused = $2, updated_at = pg_catalog.now() WHERE name = $1 RETURNING true",
    args: &[pg_sys::TEXTOID, pg_sys::BOOLOID],
};

fn set_paused(queue: Option<&str>, paused: bool) {
    let queue = queue_arg(queue);
    let found =
        with_client(|client| SET_PAUSED.first::<bool>(client, &[queue.into(), paused.into()]));
    if found.is_none() {
        unknown_queue(queue);
    }
    if !paused {
        wakeup::queue_resumed(queue);
    }
}

/// Pauses a queue: it keeps accepting jobs but hands none out until resumed.
#[pg_extern(volatile, parallel_unsafe)]
fn jobs_pause(queue: Option<&str>) {
    set_paused(queue, true);
}

/// Resumes a paused queue and wakes the claims waiting on it.
#[pg_extern(volatile, parallel_unsafe)]
fn jobs_resume(queue: Option<&str>) {
    set_paused(queue, false);
}
