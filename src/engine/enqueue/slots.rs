//! Producing the jobs of schedules' slots. A run hands over the schedules it locked (as it
//! read them: queue, kind, payload, headers, priority, attempts) and their due slots; the jobs
//! go in through the session's direct job writer, as `jobs_enqueue_batch`'s do (one call per
//! queue, every job of it in one multi-insert), with each job's headers built here (the
//! schedule's headers plus `pg_jobs.schedule` and `pg_jobs.slot`) rather than by an SQL
//! expression per job. Where the writer cannot stand in for the executor (triggers, row-level
//! security for the owner) one `INSERT ... SELECT` joining the locked schedule rows does the
//! same. Either way every job is reported to `transitions` like any other enqueued job.

use std::collections::HashMap;

use pgrx::datum::TimestampWithTimeZone;
use pgrx::pg_sys::{
    self, INT2OID, INT4OID, JSONBOID, TEXTARRAYOID, TEXTOID, TIMESTAMPTZARRAYOID, TIMESTAMPTZOID,
};
use pgrx::spi::SpiClient;
use pgrx::IntoDatum;

use crate::engine::model::Position;
use crate::engine::queues::{self, unknown_queue};
use crate::engine::transitions;
use crate::pg::datum::Jsonb;
use crate::runtime::locks;
use crate::storage::direct::job_writer::{Inserted, JobWriter, NewJobs, PerJob};
use crate::storage::{statement, Statement};

static INSERT_SLOTS: Statement = statement!(
    enqueue/insert_slots(schedule_row_ctids: TEXTARRAYOID, slots: TIMESTAMPTZARRAYOID,
        slots_as_text: TEXTARRAYOID) -> (id, queue, priority, run_at)
);

static INSERT_SLOT_ROUTED: Statement = statement!(
    enqueue/insert_slot_routed(queue: TEXTOID, kind: TEXTOID, payload: JSONBOID, headers: JSONBOID,
        priority: INT2OID, slot: TIMESTAMPTZOID, max_attempts: INT4OID, schedule: TEXTOID,
        slot_as_text: TEXTOID) -> (id, queue, priority, run_at)
);

static QUEUE_ATTEMPTS: Statement = statement!(
    enqueue/queue_attempts(queue: TEXTOID) -> (max_attempts)
);

/// A schedule whose due slots a run enqueues, as the run read it from its locked row.
pub struct DueSchedule {
    /// The row's ctid, as text (stable while the run holds the row's lock).
    pub tid: String,
    /// Its name (the `pg_jobs.schedule` header).
    pub name: String,
    /// The queue its jobs go into.
    pub queue: String,
    /// Each job's kind.
    pub kind: String,
    /// Each job's payload (a datum that lives as long as the run).
    pub payload: Jsonb,
    /// Headers every job carries besides the schedule's and the slot's (a datum that lives as
    /// long as the run).
    pub headers: Option<Jsonb>,
    /// Each job's priority.
    pub priority: i16,
    /// Each job's attempts (`None`: the queue's).
    pub max_attempts: Option<i32>,
}

/// One job to enqueue: a slot of a due schedule.
#[derive(Clone, Copy)]
pub struct SlotJob<'a> {
    /// The schedule.
    pub schedule: &'a DueSchedule,
    /// The slot (microseconds since the Postgres epoch): the job's `run_at`.
    pub slot: i64,
}

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

/// Enqueues one job per element of `jobs` (slots of schedules whose rows the caller has
/// locked) and returns the jobs' ids in the same order.
pub fn enqueue_slots(client: &SpiClient<'_>, jobs: &[SlotJob<'_>]) -> Vec<i64> {
    if jobs.is_empty() {
        return Vec::new();
    }
    // The jobs of each queue, in order; queues in the order of their first job.
    let mut by_queue: Vec<(&str, Vec<usize>)> = Vec::new();
    let mut place: HashMap<&str, usize> = HashMap::new();
    for (index, job) in jobs.iter().enumerate() {
        let queue = job.schedule.queue.as_str();
        let at = *place.entry(queue).or_insert_with(|| {
            by_queue.push((queue, Vec::new()));
            by_queue.len() - 1
        });
        by_queue[at].1.push(index);
    }
    // Taken before anything reads jobs.queue, as a single enqueue does.
    for (queue, _) in &by_queue {
        locks::lock_queue(queue, false);
    }
    let mut ids = vec![0i64; jobs.len()];
    for (queue, indexes) in &by_queue {
        let group: Vec<SlotJob<'_>> = indexes.iter().map(|&i| jobs[i]).collect();
        let positions =
            write_direct(queue, &group).unwrap_or_else(|| write_by_statement(client, &group));
        for (&index, position) in indexes.iter().zip(&positions) {
            ids[index] = position.id;
        }
        // One report per queue: how many jobs it got and the first of them in claim order.
        if let Some(&lowest) = positions.iter().min() {
            transitions::jobs_queued(queue, positions.len(), lowest);
        }
        // Schedules' jobs have no tenant.
        transitions::jobs_enqueued(queue, None, positions.len());
    }
    ids
}

/// Inserts `jobs` (all of queue `queue`) through the session's job writer: their claim
/// positions in order, or `None` when the writer cannot stand in for the statement here.
fn write_direct(queue: &str, jobs: &[SlotJob<'_>]) -> Option<Vec<Position>> {
    let kinds: Vec<&str> = jobs.iter().map(|j| j.schedule.kind.as_str()).collect();
    let payloads: Vec<pg_sys::Datum> = jobs
        .iter()
        .map(|j| j.schedule.payload.into_datum().expect("a payload"))
        .collect();
    // Due schedules mostly share their slot: its text is made once per run of equal slots.
    let mut slot_text = (i64::MIN, String::new());
    let headers: Vec<Option<pg_sys::Datum>> = jobs
        .iter()
        .map(|j| {
            if slot_text.0 != j.slot {
                slot_text = (j.slot, rfc3339(j.slot));
            }
            Some(slot_headers(
                j.schedule.headers,
                &j.schedule.name,
                &slot_text.1,
            ))
        })
        .collect();
    let priorities: Vec<i16> = jobs.iter().map(|j| j.schedule.priority).collect();
    let run_at: Vec<i64> = jobs.iter().map(|j| j.slot).collect();
    let attempts: Vec<Option<i32>> = jobs.iter().map(|j| j.schedule.max_attempts).collect();
    let new_jobs = NewJobs {
        queue,
        kind: PerJob::Each(&kinds),
        payloads: &payloads,
        headers: PerJob::Each(&headers),
        priority: PerJob::Each(&priorities),
        run_at: PerJob::Each(&run_at),
        max_attempts: PerJob::Each(&attempts),
        // Scheduled jobs have no tenant.
        tenant: None,
        group_keys: PerJob::All(None),
        group_waits: PerJob::All(false),
        // Nor unique keys.
        unique_keys: &[],
        unique_for: None,
        queue_row: queues::queue_row_use(),
    };
    // SAFETY: inside the run's transaction, holding the queue's lock; the datums live as long
    // as the run.
    match unsafe { JobWriter::insert(&new_jobs) }? {
        Inserted::Ids(ids) => Some(
            ids.into_iter()
                .zip(jobs)
                .map(|(id, job)| Position {
                    priority: job.schedule.priority,
                    run_at: job.slot,
                    id,
                })
                .collect(),
        ),
        // The schedule's foreign key keeps its queue, and dropping the queue refuses while a
        // schedule names it.
        Inserted::UnknownQueue => unknown_queue(queue),
        // Slots' jobs carry no unique keys; were one held, the statement would resolve it.
        Inserted::KeyHeld => None,
    }
}

/// Inserts `jobs` with one statement that joins their schedules' locked rows: their claim
/// positions in order.
fn write_by_statement(client: &SpiClient<'_>, jobs: &[SlotJob<'_>]) -> Vec<Position> {
    if crate::pg::citus::distributed() {
        return write_routed(client, jobs);
    }
    let rows_of: Vec<String> = jobs.iter().map(|j| j.schedule.tid.clone()).collect();
    let slots: Vec<TimestampWithTimeZone> = jobs
        .iter()
        .map(|j| TimestampWithTimeZone::try_from(j.slot).expect("a slot is a finite time"))
        .collect();
    let slot_texts: Vec<String> = jobs.iter().map(|j| rfc3339(j.slot)).collect();
    let rows = INSERT_SLOTS.run(client, &[rows_of.into(), slots.into(), slot_texts.into()]);
    assert_eq!(
        rows.len(),
        jobs.len(),
        "pg_jobs enqueued {} of {} slots: a locked schedule row was not found",
        rows.len(),
        jobs.len()
    );
    rows.iter().map(|row| Position::from_row(&row)).collect()
}

/// [`write_by_statement`] on a Citus cluster: one insert per job into the distributed table,
/// which Citus routes to the job's queue's shard.
fn write_routed(client: &SpiClient<'_>, jobs: &[SlotJob<'_>]) -> Vec<Position> {
    let mut attempts: HashMap<&str, i32> = HashMap::new();
    jobs.iter()
        .map(|job| {
            let schedule = job.schedule;
            let max_attempts = match schedule.max_attempts {
                Some(max_attempts) => max_attempts,
                None => *attempts.entry(schedule.queue.as_str()).or_insert_with(|| {
                    QUEUE_ATTEMPTS
                        .first(client, &[schedule.queue.as_str().into()], "max_attempts")
                        .unwrap_or_else(|| unknown_queue(&schedule.queue))
                }),
            };
            let slot = TimestampWithTimeZone::try_from(job.slot).expect("a slot is a finite time");
            let rows = INSERT_SLOT_ROUTED.run(
                client,
                &[
                    schedule.queue.as_str().into(),
                    schedule.kind.as_str().into(),
                    schedule.payload.into(),
                    schedule.headers.into(),
                    schedule.priority.into(),
                    slot.into(),
                    max_attempts.into(),
                    schedule.name.as_str().into(),
                    rfc3339(job.slot).into(),
                ],
            );
            let row = rows.first().expect("an insert returns its row");
            Position::from_row(&row)
        })
        .collect()
}

/// The jsonb object `{"pg_jobs.schedule": name, "pg_jobs.slot": slot}`, written in jsonb's
/// binary form directly (what `jsonb_build_object` makes of it, byte for byte: a container
/// header, one entry per key and value, then the strings), as a datum in the current memory
/// context.
fn own_headers(name: &str, slot: &str) -> pg_sys::Datum {
    // Keys are stored shortest first, then bytewise; values follow in their keys' order.
    const KEYS: [&str; 2] = ["pg_jobs.slot", "pg_jobs.schedule"];
    let strings = [KEYS[0], KEYS[1], slot, name];
    // The first entry of each 32 holds its end offset (JENTRY_HAS_OFF), the others their length;
    // strings have type bits 0.
    let entry = |index: usize, text: &str, end: usize| -> u32 {
        if index.is_multiple_of(pg_sys::JB_OFFSET_STRIDE as usize) {
            end as u32 | pg_sys::JENTRY_HAS_OFF
        } else {
            text.len() as u32
        }
    };
    let data: usize = strings.iter().map(|s| s.len()).sum();
    assert!(
        data <= pg_sys::JENTRY_OFFLENMASK as usize,
        "pg_jobs: a schedule's name and slot fit in a jsonb value"
    );
    let size = pg_sys::VARHDRSZ + 4 + 4 * strings.len() + data;
    // SAFETY: a fresh allocation of `size` bytes, filled completely below.
    unsafe {
        let value = pg_sys::palloc(size).cast::<u8>();
        let bytes = std::slice::from_raw_parts_mut(value, size);
        let mut at = pg_sys::VARHDRSZ;
        let mut put = |word: u32, at: &mut usize| {
            bytes[*at..*at + 4].copy_from_slice(&word.to_ne_bytes());
            *at += 4;
        };
        put(2 | pg_sys::JB_FOBJECT, &mut at);
        let mut end = 0;
        for (index, text) in strings.iter().enumerate() {
            end += text.len();
            put(entry(index, text, end), &mut at);
        }
        for text in strings {
            bytes[at..at + text.len()].copy_from_slice(text.as_bytes());
            at += text.len();
        }
        debug_assert_eq!(at, size);
        pgrx::set_varsize_4b(value.cast(), size as i32);
        pg_sys::Datum::from(value)
    }
}

/// The headers of a slot's job: `base` (the schedule's headers, an object) with
/// `pg_jobs.schedule` set to `name` and `pg_jobs.slot` to `slot`, the value
/// `base || jsonb_build_object('pg_jobs.schedule', name, 'pg_jobs.slot', slot)` has, built
/// without an SQL expression: a jsonb datum in the current memory context.
pub fn slot_headers(base: Option<Jsonb>, name: &str, slot: &str) -> pg_sys::Datum {
    let own = own_headers(name, slot);
    match base.and_then(|b| b.into_datum()) {
        None => own,
        // SAFETY: the `||` operator's function on two jsonb datums (the later object's keys
        // win), by its built-in oid.
        Some(base) => unsafe {
            pg_sys::OidFunctionCall2Coll(
                pg_sys::Oid::from(pg_sys::F_JSONB_CONCAT),
                pg_sys::InvalidOid,
                base,
                own,
            )
        },
    }
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
