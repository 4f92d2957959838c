//! Producing the jobs of schedules' slots: one statement inserts the jobs of every due slot of
//! a run, built from the schedule rows themselves (queue, kind, payload, headers, priority,
//! attempts), so a run with a thousand due schedules costs one insert, and every job is
//! reported to `transitions` like any other enqueued job.

use std::collections::BTreeMap;

use pgrx::datum::TimestampWithTimeZone;
use pgrx::pg_sys::{TEXTARRAYOID, TIMESTAMPTZARRAYOID};
use pgrx::spi::SpiClient;

use crate::engine::model::Position;
use crate::engine::transitions;
use crate::runtime::locks;
use crate::storage::{param, Statement};

static INSERT_SLOTS: Statement = Statement {
    name: "enqueue/insert_slots",
    sql: include_str!("insert_slots.sql"),
    params: &[
        param("schedule row ctids", TEXTARRAYOID),
        param("slots", TIMESTAMPTZARRAYOID),
        param("slots as text", TEXTARRAYOID),
    ],
    columns: &["id", "queue", "priority", "run_at"],
};

/// A slot as the `pg_jobs.slot` header shows it: RFC 3339 in UTC, whole seconds
/// (`2026-12-01T10:00:00Z`; slots are whole seconds), written here rather than with `to_char`
/// per job in the statement.
fn rfc3339(micros: i64) -> String {
    const PG_EPOCH_UNIX_SECONDS: i64 = 946_684_800;
    let seconds = micros.div_euclid(1_000_000) + PG_EPOCH_UNIX_SECONDS;
    let (days, in_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (the proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        in_day / 3600,
        in_day / 60 % 60,
        in_day % 60
    )
}

/// Enqueues one job per pair of `schedule_rows` (ctids, as text, of schedule rows the caller
/// has locked) and `slots`, into the schedules' `queues` (each named once), and returns the
/// jobs' ids in order.
pub fn enqueue_slots(
    client: &SpiClient<'_>,
    queues: &[String],
    schedule_rows: Vec<String>,
    slots: Vec<TimestampWithTimeZone>,
) -> Vec<i64> {
    if slots.is_empty() {
        return Vec::new();
    }
    let expected = slots.len();
    // Taken before the statement that reads jobs.queue, as a single enqueue does.
    for queue in queues {
        locks::lock_queue(queue, false);
    }
    let slot_texts: Vec<String> = slots.iter().map(|slot| rfc3339(i64::from(*slot))).collect();
    let rows = INSERT_SLOTS.run(
        client,
        &[schedule_rows.into(), slots.into(), slot_texts.into()],
    );
    assert_eq!(
        rows.len(),
        expected,
        "pg_jobs enqueued {} of {expected} slots: a locked schedule row was not found",
        rows.len()
    );
    // One report per queue: how many jobs it got and the first of them in claim order.
    let mut per_queue: BTreeMap<String, (usize, Position)> = BTreeMap::new();
    let mut ids = Vec::with_capacity(expected);
    for row in rows.iter() {
        let position = Position::from_row(&row);
        ids.push(position.id);
        per_queue
            .entry(row.expect("queue"))
            .and_modify(|(count, lowest)| {
                *count += 1;
                *lowest = (*lowest).min(position);
            })
            .or_insert((1, position));
    }
    for (queue, (count, lowest)) in &per_queue {
        transitions::jobs_queued(queue, *count, *lowest);
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn slots_read_as_rfc3339_in_utc() {
        assert_eq!(rfc3339(0), "2000-01-01T00:00:00Z");
        // 2028-02-29 12:34:56 UTC, a leap day.
        assert_eq!(rfc3339(888_755_696_000_000), "2028-02-29T12:34:56Z");
        assert_eq!(rfc3339(-1_000_000), "1999-12-31T23:59:59Z");
    }
}
