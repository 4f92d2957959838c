//! Schedules: cron expressions (or `'N seconds'` intervals) in a time zone whose slots the
//! background worker enqueues as jobs, each slot exactly once (README "Schedules").
//!
//! A schedule row keeps its progress: the first slot not handled yet (`next_slot`). A run
//! locks the due schedules (`FOR UPDATE SKIP LOCKED`), works out which of their slots to
//! enqueue ([`plan`]), enqueues them through the one door for new jobs ([`enqueue_slots`]:
//! the direct job writer, one multi-insert per queue) and records the new progress, all in
//! the run's transaction: the jobs of a slot and the progress past it commit together or not
//! at all, so a crash, a killed worker, a failed tick or a second worker racing can neither
//! lose a slot nor enqueue it twice. The worker enqueues jobs only; it never runs SQL a user
//! wrote.
//!
//! Due schedules are found by an index on `due_floor`, a lower bound of `next_slot` that a
//! run leaves alone while it lags by less than [`DUE_FLOOR_LAG`]: the progress write of a
//! schedule that fires often then changes no indexed column and is a heap-only update on the
//! row's own page, with no new index entries. A schedule that fires less often gets its next
//! slot as its floor at each fire, so it is read only when due.
//!
//! A slot's job carries the schedule's headers plus `pg_jobs.schedule` (its name) and
//! `pg_jobs.slot` (the slot, RFC 3339 in UTC), and runs at the slot (`run_at`).
//!
//! Downtime: a worker remembers when it started, and finds in `jobs.schedule_clock` when a
//! worker last ran the schedules (and whether it stopped cleanly then). Slots between the two
//! came due while no worker was running: they are the missed slots that `catch_up` decides
//! about ([`Downtime`]).

pub mod plan;
pub mod slots;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use pgrx::datum::TimestampWithTimeZone;
use pgrx::pg_sys::{
    BOOLOID, INT2OID, INT4OID, INT8ARRAYOID, INT8OID, JSONBOID, TEXTARRAYOID, TEXTOID,
    TIMESTAMPTZARRAYOID, TIMESTAMPTZOID,
};
use pgrx::spi::SpiClient;

use crate::config::settings;
use crate::engine::enqueue::{enqueue_slots, DueSchedule, SlotJob};
use crate::engine::queues::{self, unknown_queue};
use crate::pg::clock::server_now;
use crate::pg::datum::Jsonb;
use crate::pg::errors::{quote, raise, BAD_ARGUMENT};
use crate::storage::direct::progress_writer::{self, Progress};
use crate::storage::rows::ScheduleRow;
use crate::storage::{statement, timestamptz_arg, with_client, Statement};
use plan::{CatchUp, Plan};
use slots::Slots;

/// Due schedules one statement locks and handles.
pub const BATCH: usize = 1_000;
/// Batches one run handles at most, so one tick stays bounded however many schedules are due.
pub const BATCHES_PER_RUN: usize = 10;

static UPSERT: Statement = statement!(
    schedules/upsert(name: TEXTOID, cron: TEXTOID, timezone: TEXTOID, queue: TEXTOID,
        payload: JSONBOID, kind: TEXTOID, headers: JSONBOID, priority: INT2OID,
        max_attempts: INT4OID, catch_up: TEXTOID, enabled: BOOLOID, next_slot: TIMESTAMPTZOID)
        -> (name)
);

static ROW: Statement = statement!(schedules/row(name: TEXTOID) -> (schedule_row));

static UNSCHEDULE: Statement = statement!(schedules/unschedule(name: TEXTOID) -> (name));

static DUE: Statement = statement!(
    schedules/due(now: TIMESTAMPTZOID, limit: INT8OID)
        -> (tid, name, cron, timezone, catch_up, next_slot, due_floor, queue, kind, payload,
            headers, priority, max_attempts)
);

static ADVANCE: Statement = statement!(
    schedules/advance(schedule_row_ctids: TEXTARRAYOID, next_slots: TIMESTAMPTZARRAYOID,
        due_floors: TIMESTAMPTZARRAYOID, last_slots: TIMESTAMPTZARRAYOID, last_jobs: INT8ARRAYOID)
        -> ()
);

static CLOCK: Statement = statement!(schedules/clock() -> (seen_at, stopped));

static CLOCK_WRITE: Statement = statement!(
    schedules/clock_write(at: TIMESTAMPTZOID, stopped: BOOLOID) -> ()
);

/// Slots strictly between these two instants came due while no worker was running.
pub type Downtime = (i64, i64);

/// What this worker found when it first ran the schedules.
#[derive(Clone, Copy)]
struct WorkerStart {
    /// The slots missed before this worker started, if any.
    missed: Option<Downtime>,
}

/// Parsed expressions kept per session (the worker reads the same few thousand every tick),
/// by time zone then expression, so a lookup allocates nothing; cleared when it grows past
/// this many.
const CACHE_LIMIT: usize = 20_000;

/// Parsed expressions by time zone, then by expression.
type SlotsCache = HashMap<String, HashMap<String, Result<Slots, String>>>;

thread_local! {
    static CACHE: RefCell<SlotsCache> = RefCell::new(HashMap::new());
    static CACHED: Cell<usize> = const { Cell::new(0) };
    /// The downtime this worker found when it first ran the schedules.
    static WORKER: Cell<Option<WorkerStart>> = const { Cell::new(None) };
}

/// Runs `body` with the slots of `cron` in `timezone`, or why they cannot be computed (naming
/// the argument), parsing them only the first time in this session.
fn with_slots<R>(cron: &str, timezone: &str, body: impl FnOnce(Result<&Slots, &String>) -> R) -> R {
    CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        let known = cache
            .get(timezone)
            .is_some_and(|by_cron| by_cron.contains_key(cron));
        if !known {
            if CACHED.get() >= CACHE_LIMIT {
                cache.clear();
                CACHED.set(0);
            }
            let made =
                slots::parse(cron).and_then(|spec| Ok(Slots::new(spec, slots::zone(timezone)?)));
            cache
                .entry(timezone.to_owned())
                .or_default()
                .insert(cron.to_owned(), made);
            CACHED.set(CACHED.get() + 1);
        }
        body(cache[timezone][cron].as_ref())
    })
}

/// The slots of `cron` in `timezone`, or why they cannot be computed (naming the argument).
pub fn slots_of(cron: &str, timezone: &str) -> Result<Slots, String> {
    with_slots(cron, timezone, |found| found.cloned().map_err(Clone::clone))
}

/// The slots of `cron` in `timezone`, or a 22023 error saying what is wrong (Rule 11).
#[track_caller]
pub fn checked_slots(cron: &str, timezone: &str) -> Slots {
    slots_of(cron, timezone).unwrap_or_else(|message| raise(BAD_ARGUMENT, message))
}

/// The first slot of `cron` in `timezone` strictly after `after` (`jobs_cron_next`).
pub fn cron_next(cron: &str, after: i64, timezone: &str) -> Option<TimestampWithTimeZone> {
    checked_slots(cron, timezone)
        .next_after(after)
        .and_then(|slot| TimestampWithTimeZone::try_from(slot).ok())
}

/// A schedule's definition, checked (`jobs_schedule`).
pub struct Definition<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its expression, already known to parse.
    pub cron: &'a str,
    /// Its IANA time zone, already known.
    pub timezone: &'a str,
    /// The queue its jobs go into.
    pub queue: &'a str,
    /// Each job's payload.
    pub payload: Jsonb,
    /// Each job's kind.
    pub kind: &'a str,
    /// Headers every job carries, besides the schedule's and the slot's.
    pub headers: Option<Jsonb>,
    /// Each job's priority.
    pub priority: i16,
    /// Each job's attempts (`None`: the queue's).
    pub max_attempts: Option<i32>,
    /// What to do with slots missed while no worker ran.
    pub catch_up: CatchUp,
    /// Whether the worker fires it.
    pub enabled: bool,
}

impl CatchUp {
    /// The name stored in `jobs.schedule.catch_up`.
    pub fn name(self) -> &'static str {
        match self {
            CatchUp::Latest => "latest",
            CatchUp::None => "none",
            CatchUp::All => "all",
        }
    }
}

/// Creates or replaces a schedule and returns it as `jobs.schedules` shows it.
pub fn define(definition: &Definition<'_>) -> ScheduleRow {
    let slots = checked_slots(definition.cron, definition.timezone);
    let next_slot = slots.next_after(server_now()).map(timestamptz_arg);
    with_client(|client| {
        if !queues::exists(client, definition.queue) {
            unknown_queue(definition.queue);
        }
        UPSERT.run(
            client,
            &[
                definition.name.into(),
                definition.cron.into(),
                definition.timezone.into(),
                definition.queue.into(),
                definition.payload.into(),
                definition.kind.into(),
                definition.headers.into(),
                definition.priority.into(),
                definition.max_attempts.into(),
                definition.catch_up.name().into(),
                definition.enabled.into(),
                next_slot.unwrap_or_else(|| pgrx::datum::DatumWithOid::null_oid(TIMESTAMPTZOID)),
            ],
        );
        ROW.first::<ScheduleRow>(client, &[definition.name.into()], "schedule_row")
            .expect("the schedule was just written")
    })
}

/// Deletes a schedule; answers whether it existed. Jobs it enqueued stay.
pub fn unschedule(name: &str) -> bool {
    with_client(|client| !UNSCHEDULE.run(client, &[name.into()]).is_empty())
}

/// How far a schedule's `due_floor` may lag behind its `next_slot` (microseconds): within
/// this, a run leaves it as it is, so the progress write changes no indexed column and stays a
/// heap-only update; past it, the floor moves up to the next slot. A schedule that fires more
/// often than this moves its floor once per this much time; one that fires less often, at each
/// slot (and is then found only when due).
pub const DUE_FLOOR_LAG: i64 = 3_600 * 1_000_000;

/// The `due_floor` a schedule gets with `next_slot` as its next slot, given its `floor` now.
pub fn due_floor(floor: Option<i64>, next_slot: Option<i64>) -> Option<i64> {
    let next = next_slot?;
    match floor {
        Some(floor) if floor <= next && next - floor < DUE_FLOOR_LAG => Some(floor),
        _ => Some(next),
    }
}

/// Enqueues the due slots of every due schedule at `now` (server clock) and returns how many
/// jobs it enqueued. Slots strictly inside `missed` came due while no worker ran and follow
/// each schedule's `catch_up`; every other due slot is enqueued.
pub fn run_due(client: &SpiClient<'_>, now: i64, missed: Option<Downtime>) -> usize {
    let mut enqueued = 0;
    // SAFETY: reading the current context pointer (SPI's, which outlives the run): the jsonb
    // values of the locked rows are copied there so they outlive the next statement.
    let context = unsafe { pgrx::pg_sys::CurrentMemoryContext };
    for _ in 0..BATCHES_PER_RUN {
        let rows = DUE.run(client, &[timestamptz_arg(now), (BATCH as i64).into()]);
        let locked = rows.len();
        if locked == 0 {
            break;
        }
        // Per schedule: what its jobs are made of, its slots and its new progress.
        let mut schedules: Vec<DueSchedule> = Vec::with_capacity(locked);
        let mut planned: Vec<Vec<i64>> = Vec::with_capacity(locked);
        let mut next_slots = Vec::with_capacity(locked);
        let mut floors = Vec::with_capacity(locked);
        let mut last_slots = Vec::with_capacity(locked);
        let mut plans: HashMap<(&str, &str, i64, CatchUp), Plan> = HashMap::new();
        for row in rows.iter() {
            let next: TimestampWithTimeZone = row.expect("next_slot");
            let floor = row.get::<TimestampWithTimeZone>("due_floor").map(i64::from);
            let catch_up =
                CatchUp::from_name(row.expect::<&str>("catch_up")).unwrap_or(CatchUp::Latest);
            let name: String = row.expect("name");
            let (cron, timezone) = (row.expect::<&str>("cron"), row.expect::<&str>("timezone"));
            // Schedules with the same expression, zone and next slot (common: many fire at the
            // top of the minute) have the same plan: it is worked out once per batch.
            let key = (cron, timezone, i64::from(next), catch_up);
            let Plan { slots, next_slot } = match plans.get(&key) {
                Some(known) => known.clone(),
                None => {
                    let made = with_slots(cron, timezone, |computed| match computed {
                        Ok(computed) => {
                            plan::plan(computed, i64::from(next), now, missed, catch_up)
                        }
                        // Checked when the schedule was defined; a time zone that has since left
                        // the system's database stops this schedule rather than every schedule.
                        Err(message) => {
                            pgrx::warning!("pg_jobs: schedule {} stopped: {message}", quote(&name));
                            Plan {
                                slots: Vec::new(),
                                next_slot: None,
                            }
                        }
                    });
                    plans.insert(key, made.clone());
                    made
                }
            };
            let to_time = |slot: i64| TimestampWithTimeZone::try_from(slot).ok();
            next_slots.push(next_slot.and_then(to_time));
            floors.push(due_floor(floor, next_slot).and_then(to_time));
            last_slots.push(slots.last().and_then(|&slot| to_time(slot)));
            schedules.push(DueSchedule {
                tid: row.expect("tid"),
                name,
                queue: row.expect("queue"),
                kind: row.expect("kind"),
                payload: row
                    .get_in::<Jsonb>("payload", context)
                    .expect("a schedule has a payload"),
                headers: row.get_in::<Jsonb>("headers", context),
                priority: row.expect("priority"),
                max_attempts: row.get("max_attempts"),
            });
            planned.push(slots);
        }
        let jobs: Vec<SlotJob<'_>> = schedules
            .iter()
            .zip(&planned)
            .flat_map(|(schedule, slots)| slots.iter().map(move |&slot| SlotJob { schedule, slot }))
            .collect();
        let ids = enqueue_slots(client, &jobs);
        // The last job of each schedule that got any: its slots' jobs are consecutive.
        let mut taken = 0;
        let last_jobs: Vec<Option<i64>> = planned
            .iter()
            .map(|slots| {
                taken += slots.len();
                (!slots.is_empty()).then(|| ids[taken - 1])
            })
            .collect();
        advance(
            client, &schedules, next_slots, floors, last_slots, last_jobs,
        );
        enqueued += ids.len();
        if locked < BATCH {
            break;
        }
    }
    enqueued
}

/// Records the new progress of the locked `schedules` (one element of each list per schedule):
/// through the direct progress writer, or by statement where it cannot stand in.
fn advance(
    client: &SpiClient<'_>,
    schedules: &[DueSchedule],
    next_slots: Vec<Option<TimestampWithTimeZone>>,
    floors: Vec<Option<TimestampWithTimeZone>>,
    last_slots: Vec<Option<TimestampWithTimeZone>>,
    last_jobs: Vec<Option<i64>>,
) {
    let micros = |time: &Option<TimestampWithTimeZone>| time.map(i64::from);
    let progress: Vec<Progress> = schedules
        .iter()
        .enumerate()
        .map(|(i, schedule)| Progress {
            row: progress_writer::parse_tid(&schedule.tid).expect("a ctid as tid prints it"),
            next_slot: micros(&next_slots[i]),
            due_floor: micros(&floors[i]),
            last_slot: micros(&last_slots[i]),
            last_job: last_jobs[i],
        })
        .collect();
    // SAFETY: this run's transaction holds every row's lock (due.sql).
    if unsafe { progress_writer::write(&progress) } {
        return;
    }
    let schedule_rows: Vec<String> = schedules.iter().map(|s| s.tid.clone()).collect();
    ADVANCE.run(
        client,
        &[
            schedule_rows.into(),
            next_slots.into(),
            floors.into(),
            last_slots.into(),
            last_jobs.into(),
        ],
    );
}

/// How long after the last run a worker recorded it may still have been up (it would have run
/// again within a tick; the rest is slack for a slow tick): slots in that time are not missed.
fn grace_micros() -> i64 {
    (2 * i64::from(settings::TICK_MS.get()) + 1_000) * 1_000
}

/// The worker's part of each tick: enqueue due slots, treating the slots between the last
/// recorded run and this worker's start (`started_at`) as missed, then record that a worker is
/// up now.
pub fn run_for_worker(client: &SpiClient<'_>, now: i64, started_at: i64) -> usize {
    let missed = match WORKER.get() {
        Some(start) => start.missed,
        None => {
            let rows = CLOCK.run(client, &[]);
            let (seen_at, stopped) = rows
                .first()
                .map(|row| {
                    (
                        row.get::<TimestampWithTimeZone>("seen_at").map(i64::from),
                        row.get::<bool>("stopped").unwrap_or(false),
                    )
                })
                .unwrap_or((None, false));
            let from = match seen_at {
                None => i64::MIN,
                Some(at) if stopped => at,
                Some(at) => at.saturating_add(grace_micros()),
            };
            let missed = (from < started_at).then_some((from, started_at));
            WORKER.set(Some(WorkerStart { missed }));
            missed
        }
    };
    let enqueued = run_due(client, now, missed);
    CLOCK_WRITE.run(client, &[timestamptz_arg(now), false.into()]);
    enqueued
}

/// Records that this worker stops now, cleanly, so the next one counts the slots from now on
/// as missed; nothing when it never ran the schedules.
pub fn worker_stopping(client: &SpiClient<'_>) {
    if WORKER.get().is_some() {
        CLOCK_WRITE.run(client, &[timestamptz_arg(server_now()), true.into()]);
    }
}

#[cfg(test)]
mod tests {
    use super::{due_floor, DUE_FLOOR_LAG};

    const MINUTE: i64 = 60 * 1_000_000;

    #[test]
    fn the_floor_stays_while_it_lags_less_than_an_hour_then_moves_to_the_next_slot() {
        // An every-minute schedule: 59 progress writes keep the floor (no index change), the
        // 60th moves it.
        assert_eq!(due_floor(Some(0), Some(MINUTE)), Some(0));
        assert_eq!(due_floor(Some(0), Some(59 * MINUTE)), Some(0));
        assert_eq!(due_floor(Some(0), Some(DUE_FLOOR_LAG)), Some(DUE_FLOOR_LAG));
        // A daily one is found only when due: its floor is its next slot.
        assert_eq!(
            due_floor(Some(0), Some(24 * 60 * MINUTE)),
            Some(24 * 60 * MINUTE)
        );
    }

    #[test]
    fn the_floor_is_never_after_the_next_slot_and_is_null_with_it() {
        assert_eq!(due_floor(Some(10 * MINUTE), Some(MINUTE)), Some(MINUTE));
        assert_eq!(due_floor(None, Some(MINUTE)), Some(MINUTE));
        assert_eq!(due_floor(Some(0), None), None);
    }
}
