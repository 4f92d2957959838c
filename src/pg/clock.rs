//! The server's clock, the only clock pg_jobs uses for its decisions (Rule 10), and interval
//! arithmetic done exactly the way the server applies intervals to timestamps.

use pgrx::datum::Interval;
use pgrx::pg_sys;
use pgrx::{IntoDatum, PgTryBuilder};

/// The server's clock now, in microseconds since the PostgreSQL epoch: like
/// `clock_timestamp()`, not the transaction's `now()`.
pub fn server_now() -> pg_sys::TimestampTz {
    // SAFETY: reads the system clock.
    unsafe { pg_sys::GetCurrentTimestamp() }
}

/// Whether a timestamptz value is finite (not `infinity` or `-infinity`).
pub fn is_finite(value: pg_sys::TimestampTz) -> bool {
    value != i64::MAX && value != i64::MIN
}

/// `at + interval` as the server computes it (`timestamptz + interval`: months and days by the
/// calendar in the session's time zone, then the time part), or `None` when the result is out
/// of range or not finite.
pub fn add_interval(at: pg_sys::TimestampTz, interval: &Interval) -> Option<pg_sys::TimestampTz> {
    let interval = interval.into_datum();
    let sum = PgTryBuilder::new(|| {
        // SAFETY: timestamptz_pl_interval takes a timestamptz and an interval datum and
        // returns a timestamptz by value; out-of-range results raise 22008, caught below.
        unsafe {
            pgrx::direct_function_call::<i64>(
                pg_sys::timestamptz_pl_interval,
                &[Some(pg_sys::Datum::from(at)), interval],
            )
        }
    })
    // 22008 (datetime_field_overflow, also called datetime_value_out_of_range).
    .catch_when(
        pgrx::PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
        |_| None,
    )
    .execute();
    sum.filter(|value| is_finite(*value))
}

/// The length of `interval` as the server would apply it to the current time, in
/// microseconds (negative when it points back in time), or `None` when `now + interval` is out
/// of range. A month counts as many days as the calendar gives it from today, so
/// `'1 mon -29 days'` is judged by the timestamp it yields, never by a 30-day approximation.
pub fn applied_length(interval: &Interval) -> Option<i64> {
    length_at(server_now(), interval)
}

/// The length of `interval` applied at `now`, as [`applied_length`] describes it.
pub fn length_at(now: pg_sys::TimestampTz, interval: &Interval) -> Option<i64> {
    if interval.months() == 0 && interval.days() == 0 {
        // No calendar part: the server adds the time part as it is and refuses a result
        // outside the timestamp range, which is cheaper to say here than to ask (an error
        // trap per call) for the lengths nearly every call passes ('30 seconds', '24 hours').
        return now
            .checked_add(interval.micros())
            .filter(|then| (MIN_TIMESTAMP..END_TIMESTAMP).contains(then))
            .map(|then| then - now);
    }
    add_interval(now, interval).map(|then| then - now)
}

/// The first valid timestamp (4714-11-24 00:00:00 UTC BC), as PostgreSQL's `MIN_TIMESTAMP`.
pub const MIN_TIMESTAMP: i64 = -211_813_488_000_000_000;
/// The first timestamp past the valid range (294277-01-01 00:00:00 UTC), as PostgreSQL's
/// `END_TIMESTAMP`.
pub const END_TIMESTAMP: i64 = 9_223_371_331_200_000_000;

/// An interval of exactly `micros` microseconds (no months or days), so that applying it later
/// gives the length that was checked.
pub fn interval_of(micros: i64) -> Interval {
    // Interval::from_micros would go through seconds as a float and make_interval.
    Interval::new(0, 0, micros).expect("an interval of time alone has no signs to mismatch")
}
