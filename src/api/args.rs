//! Argument checks and the limits behind them, in one place (README "Limits" lists the same
//! table). Every check names the argument and what it accepts in its error (Rule 11), and
//! intervals are judged by the timestamp they yield from the server's clock, then passed on as
//! exactly that length, so an accepted value never lands in the past or overflows.

use pgrx::datum::{Interval, TimestampWithTimeZone};

use crate::config::settings;
use crate::engine::errors::PAYLOAD_TOO_LARGE;
use crate::pg::clock::{applied_length, interval_of, is_finite};
use crate::pg::datum::Jsonb;
use crate::pg::errors::{quote, raise, raise_with_hint, required, BAD_ARGUMENT, NULL_ARGUMENT};

/// One second in microseconds.
pub const SECOND: i64 = 1_000_000;
/// One day in microseconds.
pub const DAY: i64 = 86_400 * SECOND;

/// The limits of the SQL API.
pub mod limits {
    use super::DAY;

    /// Longest queue name, in characters of `A–Z a–z 0–9 _ - . :`.
    pub const QUEUE_NAME: usize = 63;
    /// Longest kind, in bytes.
    pub const KIND_BYTES: usize = 255;
    /// Longest worker name, in bytes.
    pub const WORKER_BYTES: usize = 255;
    /// Longest error text kept per failed attempt, in bytes; longer ones are cut there.
    pub const ERROR_BYTES: usize = 8 * 1024;
    /// Longest release reason kept, in bytes; longer ones are cut there.
    pub const REASON_BYTES: usize = 1024;
    /// Most attempts a job may have.
    pub const MAX_ATTEMPTS: i64 = 10_000;
    /// Longest lease (of a queue, a claim or a heartbeat's `extend`), in microseconds.
    pub const LEASE: i64 = 7 * DAY;
    /// Longest delay (backoff, retention, `retry_in`), in microseconds: 100 years.
    ///
    /// A hundred calendar years hold 36,524 or 36,525 days (24 or 25 leap days), so the bound is
    /// the longer: `'100 years'` itself is accepted whenever it is applied.
    pub const DELAY: i64 = 36_525 * DAY;
    /// Lowest rate limit, in claims per second (one claim in about 32 years): the time of a
    /// bucket's next token stays far inside the timestamp range.
    pub const MIN_RATE_LIMIT: f64 = 1e-9;
    /// Most jobs one claim may take.
    pub const CLAIM: i64 = 1000;
    /// Most rows one `jobs_list` call returns.
    pub const LIST: i64 = 10_000;
    /// Most running jobs per group a queue may allow.
    pub const GROUP_CONCURRENCY: i64 = 10_000;
    /// Longest schedule name, in bytes.
    pub const SCHEDULE_NAME_BYTES: usize = 255;
    /// Longest schedule expression (`cron`), in bytes.
    pub const CRON_BYTES: usize = 1024;
    /// Longest unique key, in bytes (it is an index key).
    pub const UNIQUE_KEY_BYTES: usize = 512;
    /// Longest group key, in bytes.
    pub const GROUP_KEY_BYTES: usize = 255;
    /// Longest idempotency key, in bytes.
    pub const IDEMPOTENCY_KEY_BYTES: usize = 255;
    /// Longest idempotency scope, in bytes.
    pub const IDEMPOTENCY_SCOPE_BYTES: usize = 255;
    /// Longest request fingerprint of an idempotency record, in bytes.
    pub const FINGERPRINT_BYTES: usize = 1024;
}

/// Checks that an integer argument lies in `min..=max`.
#[track_caller]
pub fn check_range(value: i64, argument: &str, min: i64, max: i64) {
    if value < min || value > max {
        raise(
            BAD_ARGUMENT,
            format!("{argument} must be between {min} and {max}, got {value}"),
        );
    }
}

/// A job's `kind` (required; 1 to [`limits::KIND_BYTES`] bytes), checked.
#[track_caller]
#[inline]
pub fn kind_arg(kind: Option<&str>) -> &str {
    let kind = required(kind, "kind");
    check_text(kind, "kind", limits::KIND_BYTES);
    kind
}

/// A job's `priority` (required; a smallint, lower runs first), checked.
#[track_caller]
pub fn priority_arg(priority: Option<i32>) -> i32 {
    let priority = required(priority, "priority");
    check_range(
        priority.into(),
        "priority",
        i16::MIN.into(),
        i16::MAX.into(),
    );
    priority
}

/// Checks a job's `max_attempts`: 1 to [`limits::MAX_ATTEMPTS`], or NULL for the queue's.
#[track_caller]
pub fn check_max_attempts(max_attempts: Option<i32>) {
    if let Some(max_attempts) = max_attempts {
        check_range(max_attempts.into(), "max_attempts", 1, limits::MAX_ATTEMPTS);
    }
}

/// Checks a queue name: 1–63 characters of `A–Z a–z 0–9 _ - . :`.
#[track_caller]
pub fn check_queue_name(name: &str, argument: &str) {
    let valid_chars = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    if name.is_empty() || name.len() > limits::QUEUE_NAME || !valid_chars {
        raise(
            BAD_ARGUMENT,
            format!(
                "{argument} must be 1 to {} characters of A-Z a-z 0-9 _ - . :, got {}",
                limits::QUEUE_NAME,
                quote(name)
            ),
        );
    }
}

/// Unwraps and checks a queue-name argument.
#[track_caller]
pub fn queue_arg(queue: Option<&str>) -> &str {
    let queue = required(queue, "queue");
    check_queue_name(queue, "queue");
    queue
}

/// Checks a text argument's length in bytes: 1 to `max`.
#[track_caller]
pub fn check_text(value: &str, argument: &str, max: usize) {
    if value.is_empty() || value.len() > max {
        raise(
            BAD_ARGUMENT,
            format!(
                "{argument} must be 1 to {max} bytes long, got {} bytes",
                value.len()
            ),
        );
    }
}

/// `value` cut to at most `max` bytes on a character boundary, saying how much was cut: for
/// texts pg_jobs keeps but must never refuse (a worker's error message must always be
/// recordable).
pub fn cut_text(value: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if value.len() <= max {
        return value.into();
    }
    let marker_room = 48;
    let mut end = max.saturating_sub(marker_room);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}... [{} more bytes cut by pg_jobs]",
        &value[..end],
        value.len() - end
    )
    .into()
}

/// Checks a timestamp argument: finite (`infinity` and `-infinity` are refused).
#[track_caller]
pub fn check_finite(value: TimestampWithTimeZone, argument: &str) {
    if !is_finite(i64::from(value)) {
        raise_with_hint(
            BAD_ARGUMENT,
            format!("{argument} must be a finite time, got '{value}'"),
            "Pass a real point in time, such as now() or now() + interval '1 hour'.",
        );
    }
}

/// Checks an interval argument by the length it has when applied to the server's clock now,
/// and returns exactly that length (no months or days), so it is applied as checked.
/// `positive` refuses zero as well as negative lengths; `what` describes the range.
#[track_caller]
pub fn check_interval(
    interval: &Interval,
    argument: &str,
    positive: bool,
    max: i64,
    what: &str,
) -> Interval {
    let length = applied_length(interval);
    let fits = length.is_some_and(|length| {
        let above_min = if positive { length > 0 } else { length >= 0 };
        above_min && length <= max
    });
    if !fits {
        raise(
            BAD_ARGUMENT,
            format!("{argument} must be {what}, got '{interval}'"),
        );
    }
    interval_of(length.expect("checked above"))
}

/// Checks how long a call may wait (`wait`, `timeout`): required, at least 0 and at most
/// `pg_jobs.max_wait`; answers it in microseconds.
#[track_caller]
#[inline]
pub fn wait_arg(wait: Option<Interval>, argument: &str) -> i64 {
    let wait = required(wait, argument);
    let max_wait_ms = i64::from(settings::MAX_WAIT_MS.get());
    let wait = check_interval(
        &wait,
        argument,
        false,
        max_wait_ms * 1000,
        &format!("at least 0 and at most pg_jobs.max_wait ({max_wait_ms} ms)"),
    );
    wait.as_micros() as i64
}

/// Checks a lease length (`lease`, `extend`): greater than 0 and at most 7 days.
#[track_caller]
pub fn lease_arg(lease: &Interval, argument: &str) -> Interval {
    check_interval(
        lease,
        argument,
        true,
        limits::LEASE,
        "greater than 0 and at most 7 days",
    )
}

/// Checks a delay (`retry_in`, backoff settings, `retention`): at least 0, at most 100 years.
#[track_caller]
pub fn delay_arg(delay: &Interval, argument: &str) -> Interval {
    check_interval(
        delay,
        argument,
        false,
        limits::DELAY,
        "at least 0 and at most 100 years",
    )
}

/// Refuses a jsonb value above `pg_jobs.max_payload_bytes`; `argument` names it in the error.
#[track_caller]
pub fn check_payload_size(value: Jsonb, argument: impl Fn() -> String) {
    let limit = settings::MAX_PAYLOAD_BYTES.get();
    let size = value.size_bytes();
    if size > limit as usize {
        raise_with_hint(
            PAYLOAD_TOO_LARGE,
            format!(
                "{} is {size} bytes, above pg_jobs.max_payload_bytes ({limit} bytes)",
                argument()
            ),
            "Store large data elsewhere and enqueue a reference to it, or raise pg_jobs.max_payload_bytes.",
        );
    }
}

/// Checks an optional JSON object argument (`headers`): an object, within the payload limit.
#[track_caller]
pub fn check_object(value: Option<Jsonb>, argument: &str) {
    if let Some(value) = value {
        if !value.is_object() {
            raise(
                BAD_ARGUMENT,
                format!("{argument} must be a JSON object or NULL"),
            );
        }
        check_payload_size(value, || argument.to_owned());
    }
}

/// Checks the elements of an array argument: none NULL.
#[track_caller]
pub fn required_elements<T>(values: Vec<Option<T>>, argument: &str) -> Vec<T> {
    values
        .into_iter()
        .enumerate()
        .map(|(i, value)| match value {
            Some(value) => value,
            None => raise(
                NULL_ARGUMENT,
                format!("{argument}[{}] must not be NULL", i + 1),
            ),
        })
        .collect()
}
