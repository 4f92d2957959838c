//! Producing jobs: one at a time or many in one statement. A job becomes claimable when the
//! caller's transaction commits, and never exists if it rolls back (Rule 9).
//!
//! Unique jobs: a job with a `unique_key` holds the key in its queue (per tenant) while it is
//! queued or running and, with `unique_for`, for that long after it succeeded. The database
//! enforces it: a partial unique index on the jobs that hold a key (`job_unique_idx`), and
//! inserts with `ON CONFLICT DO NOTHING`, which wait for a holder still being inserted by
//! another transaction, so when that transaction rolls back this one inserts. A duplicate is
//! then resolved by `on_conflict`: `skip` answers the holder, `replace` updates a still-queued
//! holder, `error` raises 23505 naming it. A succeeded holder whose window has passed gives the
//! key up on the spot. Retries, releases and reclaims keep the job's own hold, so a job never
//! conflicts with itself.
//!
//! Jobs whose keys nobody holds (the common case) go through the direct writer like plain
//! jobs: the unique index checks each key as it is inserted, and when a key turns out to be
//! held the call takes the `ON CONFLICT` statements above. A single job goes in speculatively
//! (the row is killed again when its key is held); a batch goes in inside a subtransaction,
//! rolled back when a key raises. A session whose keys keep turning out held skips the first
//! try for a while ([`UniqueFastPath`]), so deduplicating producers do not pay twice.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};

use pgrx::datum::{DatumWithOid, Interval};
use pgrx::pg_sys::{
    self, BOOLARRAYOID, INT2OID, INT4OID, INT8ARRAYOID, INT8OID, INTERVALOID, JSONBARRAYOID,
    JSONBOID, TEXTARRAYOID, TEXTOID, TIMESTAMPTZOID,
};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::config::settings;
use crate::engine::errors::UNIQUE_VIOLATION;
use crate::engine::groups::{self, GroupRef};
use crate::engine::model::Position;
use crate::engine::queues::{self, unknown_queue};
use crate::engine::tenants;
use crate::engine::transitions;
use crate::engine::workflows::dependencies;
use crate::pg::clock::server_now;
use crate::pg::datum::{Jsonb, JsonbArray};
use crate::pg::errors::{quote, raise, raise_with_hint};
use crate::pg::subtransaction::unless_it_raises;
use crate::runtime::locks;
use crate::storage::direct::job_writer::{Inserted, JobWriter, NewJobs, PerJob};
use crate::storage::{param, statement, timestamptz_arg, with_client, Statement};

/// The parameters every insert statement starts with.
const JOB_PARAMS: [crate::storage::Param; 9] = [
    param("queue", TEXTOID),
    param("payload", JSONBOID),
    param("kind", TEXTOID),
    param("run_at", TIMESTAMPTZOID),
    param("priority", INT2OID),
    param("max_attempts", INT4OID),
    param("headers", JSONBOID),
    param("tenant", TEXTOID),
    param("group_key", TEXTOID),
];

mod slots;
#[cfg(any(test, feature = "pg_test"))]
pub use slots::slot_headers;
pub use slots::{enqueue_slots, DueSchedule, SlotJob};

static INSERT: Statement = Statement {
    name: "enqueue/insert",
    sql: include_str!("insert.sql"),
    params: &JOB_PARAMS,
    columns: &["id"],
};

static INSERT_UNIQUE: Statement = statement!(
    enqueue/insert_unique(queue: TEXTOID, payload: JSONBOID, kind: TEXTOID, run_at: TIMESTAMPTZOID,
        priority: INT2OID, max_attempts: INT4OID, headers: JSONBOID, tenant: TEXTOID,
        group_key: TEXTOID, unique_key: TEXTOID, unique_for: INTERVALOID) -> (id)
);

static INSERT_BATCH: Statement = statement!(
    enqueue/insert_batch(queue: TEXTOID, payloads: JSONBARRAYOID, kind: TEXTOID,
        run_at: TIMESTAMPTZOID, priority: INT2OID, max_attempts: INT4OID, headers: JSONBOID,
        tenant: TEXTOID, group_key: TEXTOID, group_keys: TEXTARRAYOID, group_waits: BOOLARRAYOID)
        -> (id)
);

static INSERT_BATCH_UNIQUE: Statement = statement!(
    enqueue/insert_batch_unique(queue: TEXTOID, payloads: JSONBARRAYOID, kind: TEXTOID,
        run_at: TIMESTAMPTZOID, priority: INT2OID, max_attempts: INT4OID, headers: JSONBOID,
        tenant: TEXTOID, group_key: TEXTOID, group_keys: TEXTARRAYOID, unique_key: TEXTOID,
        unique_keys: TEXTARRAYOID, unique_for: INTERVALOID) -> (id, unique_key)
);

static UNIQUE_HOLDERS: Statement = statement!(
    enqueue/unique_holders(queue: TEXTOID, tenant: TEXTOID, unique_keys: TEXTARRAYOID,
        now: TIMESTAMPTZOID) -> (unique_key, id, state, expired)
);

static UNIQUE_RELEASE: Statement = statement!(
    enqueue/unique_release(ids: INT8ARRAYOID, now: TIMESTAMPTZOID) -> ()
);

static UNIQUE_REPLACE: Statement = statement!(
    enqueue/unique_replace(id: INT8OID, payload: JSONBOID, headers: JSONBOID,
        run_at: TIMESTAMPTZOID, priority: INT2OID)
        -> (queue, priority, run_at, id, group_key, tenant)
);

/// What an enqueue does when a job of the same queue already holds the unique key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnConflict {
    /// Answer the existing job's id.
    Skip,
    /// Update a still-queued existing job's payload, headers, run_at and priority.
    Replace,
    /// Raise 23505 naming the existing job.
    Error,
}

/// Uniqueness of the jobs of one enqueue call.
pub struct Uniqueness {
    /// The key of every job, unless `keys` gives one.
    pub key: Option<String>,
    /// One key per payload (batch only; NULL elements take `key`).
    pub keys: Option<Vec<Option<String>>>,
    /// How long a succeeded job keeps its key.
    pub unique_for: Option<Interval>,
    /// What a duplicate does.
    pub on_conflict: OnConflict,
}

/// The options every job of one enqueue call shares, checked.
pub struct JobOptions {
    /// The job's kind.
    pub kind: String,
    /// When it becomes due (finite).
    pub run_at: TimestampWithTimeZone,
    /// Lower runs first.
    pub priority: i16,
    /// Attempts; `None` takes the queue's setting.
    pub max_attempts: Option<i32>,
    /// Carried untouched to every attempt.
    pub headers: Option<Jsonb>,
    /// The tenant the jobs belong to (checked against the caller's grants).
    pub tenant: Option<String>,
    /// The group of every job, unless `group_keys` gives one.
    pub group_key: Option<String>,
    /// One group per payload (batch only; NULL elements take `group_key`).
    pub group_keys: Option<Vec<Option<String>>>,
    /// Unique keys, when any job has one.
    pub unique: Option<Uniqueness>,
    /// The jobs every job of the call waits for (`engine::workflows::dependencies`), if any.
    pub after: Option<Vec<i64>>,
}

/// A job an enqueue call asked for: the job's id, and whether it was inserted (false: a
/// unique duplicate was found, and this is its id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Enqueued {
    /// The job's id.
    pub id: i64,
    /// Whether this call inserted it.
    pub inserted: bool,
}

/// Rounds an insert that lost the key to a holder that then vanished (rolled back, expired,
/// cancelled) retries before giving up.
const UNIQUE_ROUNDS: usize = 8;

impl JobOptions {
    /// Whether the jobs inserted are reported queued as they go in: not when they wait for
    /// other jobs, which decides how they are left once they are in.
    fn announces(&self) -> bool {
        self.after.is_none()
    }

    /// The first nine arguments of every insert statement.
    fn job_args<'a>(&'a self, queue: &'a str, payload: DatumWithOid<'a>) -> Vec<DatumWithOid<'a>> {
        self.job_args_in_group(queue, payload, self.group_key.as_deref())
    }

    /// [`Self::job_args`] of one payload of a batch, whose group is `group_key` (its element of
    /// `group_keys`, or `group_key`).
    fn job_args_in_group<'a>(
        &'a self,
        queue: &'a str,
        payload: DatumWithOid<'a>,
        group_key: Option<&'a str>,
    ) -> Vec<DatumWithOid<'a>> {
        vec![
            queue.into(),
            payload,
            self.kind.as_str().into(),
            self.run_at.into(),
            self.priority.into(),
            self.max_attempts.into(),
            self.headers.into(),
            self.tenant.as_deref().into(),
            group_key.into(),
        ]
    }

    /// The claim position of the job with id `id` enqueued with these options.
    fn position(&self, id: i64) -> Position {
        Position {
            priority: self.priority,
            run_at: i64::from(self.run_at),
            id,
        }
    }

    /// The unique key of payload `index` (0-based), if it has one.
    fn unique_key_of(&self, index: usize) -> Option<&str> {
        let unique = self.unique.as_ref()?;
        unique
            .keys
            .as_ref()
            .and_then(|keys| keys.get(index))
            .and_then(|key| key.as_deref())
            .or(unique.key.as_deref())
    }

    /// The group key of payload `index` (0-based), if it has one.
    fn group_key_of(&self, index: usize) -> Option<&str> {
        self.group_keys
            .as_ref()
            .and_then(|keys| keys.get(index))
            .and_then(|key| key.as_deref())
            .or(self.group_key.as_deref())
    }
}

/// Enqueues one job into `queue`; for a unique duplicate, the existing job's id. With `after`,
/// the job waits for those jobs (or is cancelled at once, or queued when they all succeeded).
pub fn enqueue(queue: &str, payload: Jsonb, options: &JobOptions) -> Enqueued {
    // Taken before the statement that reads jobs.queue, so that statement's snapshot sees a
    // drop that committed while we waited.
    locks::lock_queue(queue, false);
    let Some(after) = &options.after else {
        return enqueue_one(queue, payload, options);
    };
    // The parents exist before the job does: its id comes after theirs, so no cycle can be
    // built (engine::workflows::dependencies).
    let parents = lock_parents(after, options);
    let enqueued = enqueue_one(queue, payload, options);
    if enqueued.inserted {
        with_client(|client| dependencies::enqueued_after(client, vec![enqueued.id], &parents));
    }
    enqueued
}

/// Locks and checks the parents of jobs enqueued with `options`.
fn lock_parents(after: &[i64], options: &JobOptions) -> dependencies::Parents {
    with_client(|client| {
        dependencies::lock_parents(
            client,
            after,
            options.tenant.as_deref(),
            &tenants::scope(),
            false,
        )
    })
}

/// [`enqueue`] of one job, the queue lock held (and its parents locked).
fn enqueue_one(queue: &str, payload: Jsonb, options: &JobOptions) -> Enqueued {
    let payloads = [payload.into_datum().expect("a payload")];
    let unique_keys = [options.unique_key_of(0)];
    let unique_keys: &[Option<&str>] = if options.unique.is_some() {
        &unique_keys
    } else {
        &[]
    };
    if let Some(ids) = write_direct(
        queue,
        &payloads,
        &[options.group_key.as_deref()],
        unique_keys,
        options,
    ) {
        let id = ids[0];
        if options.announces() {
            transitions::job_queued(queue, options.position(id));
        }
        transitions::jobs_enqueued(queue, options.tenant.as_deref(), 1);
        return Enqueued { id, inserted: true };
    }
    with_client(|client| match options.unique_key_of(0) {
        None => {
            let args = options.job_args(queue, payload.into());
            let Some(id) = INSERT.first::<i64>(client, &args, "id") else {
                unknown_queue(queue)
            };
            if options.announces() {
                transitions::job_queued(queue, options.position(id));
            }
            transitions::jobs_enqueued(queue, options.tenant.as_deref(), 1);
            Enqueued { id, inserted: true }
        }
        Some(key) => {
            let enqueued = enqueue_unique(
                client,
                queue,
                payload,
                key,
                options.group_key.as_deref(),
                options,
            );
            if enqueued.inserted {
                if options.announces() {
                    transitions::job_queued(queue, options.position(enqueued.id));
                }
                transitions::jobs_enqueued(queue, options.tenant.as_deref(), 1);
            }
            enqueued
        }
    })
}

thread_local! {
    /// This session's record of how the direct writer fares with unique keys.
    static UNIQUE_FAST_PATH: Cell<UniqueFastPath> = const { Cell::new(UniqueFastPath::new()) };
}

/// Whether a session tries the direct writer for jobs with unique keys. Each time a key turns
/// out to be held (the try is rolled back and the `ON CONFLICT` statement runs), the session
/// skips the try for the next calls, twice as many as the last time up to 64; a try that
/// inserts resets it.
#[derive(Clone, Copy)]
pub struct UniqueFastPath {
    skip: u32,
    penalty: u32,
}

impl UniqueFastPath {
    const MAX_PENALTY: u32 = 64;

    const fn new() -> Self {
        UniqueFastPath {
            skip: 0,
            penalty: 0,
        }
    }

    /// Whether this call tries (and counts a skipped one).
    fn tries(&mut self) -> bool {
        if self.skip == 0 {
            return true;
        }
        self.skip -= 1;
        false
    }

    fn inserted(&mut self) {
        self.penalty = 0;
    }

    fn found_a_holder(&mut self) {
        self.penalty = (self.penalty * 2).clamp(1, Self::MAX_PENALTY);
        self.skip = self.penalty;
    }
}

/// Inserts jobs through the session's [`JobWriter`]: their ids in payload order, or `None`
/// when the writer cannot stand in for the insert statement here, or (for jobs with unique
/// keys, `unique_keys` one per payload) when a key is held by another job or repeated in the
/// batch, or the session skips the try (see [`UniqueFastPath`]): the caller then runs its
/// statements, which resolve those. With `pg_jobs.fast_paths` off, always `None`, before a batch
/// with unique keys opens its subtransaction.
fn write_direct(
    queue: &str,
    payloads: &[pg_sys::Datum],
    group_keys: &[Option<&str>],
    unique_keys: &[Option<&str>],
    options: &JobOptions,
) -> Option<Vec<i64>> {
    if !settings::fast_paths() {
        return None;
    }
    if unique_keys.iter().all(Option::is_none) {
        return match write_jobs(queue, payloads, group_keys, &[], options)? {
            Written::Ids(ids) => Some(ids),
            Written::KeyHeld => None,
        };
    }
    let mut seen = HashSet::with_capacity(unique_keys.len());
    if !unique_keys.iter().flatten().all(|key| seen.insert(*key)) {
        return None;
    }
    if !UNIQUE_FAST_PATH.with(|state| {
        let mut fast = state.get();
        let tries = fast.tries();
        state.set(fast);
        tries
    }) {
        return None;
    }
    // None: a key is held. A single job tells so without raising (the writer inserts it
    // speculatively); a batch raises, caught by a subtransaction, whose cost one job would feel.
    let written = if payloads.len() == 1 {
        match write_jobs(queue, payloads, group_keys, unique_keys, options) {
            Some(Written::KeyHeld) => None,
            Some(Written::Ids(ids)) => Some(Some(ids)),
            None => Some(None),
        }
    } else {
        unless_it_raises(UNIQUE_VIOLATION, || {
            write_jobs(queue, payloads, group_keys, unique_keys, options)
        })
        .map(|written| match written {
            Some(Written::Ids(ids)) => Some(ids),
            // A batch's held key raises in the writer.
            Some(Written::KeyHeld) | None => None,
        })
    };
    UNIQUE_FAST_PATH.with(|state| {
        let mut fast = state.get();
        match written {
            Some(Some(_)) => fast.inserted(),
            None => fast.found_a_holder(),
            Some(None) => {}
        }
        state.set(fast);
    });
    written.flatten()
}

/// What [`write_jobs`] did.
enum Written {
    /// Inserted the jobs: their ids, in payload order.
    Ids(Vec<i64>),
    /// Inserted nothing: a single job's unique key is held, or may be (`Inserted::KeyHeld`).
    KeyHeld,
}

/// [`write_direct`]'s insert, unique keys checked by the index as the rows go in; `None` when
/// the writer cannot stand in for the insert statement here.
fn write_jobs(
    queue: &str,
    payloads: &[pg_sys::Datum],
    group_keys: &[Option<&str>],
    unique_keys: &[Option<&str>],
    options: &JobOptions,
) -> Option<Written> {
    let unique_for = options
        .unique
        .as_ref()
        .filter(|_| !unique_keys.is_empty())
        .and_then(|unique| unique.unique_for)
        .and_then(|interval| interval.into_datum());
    let group_waits = groups::waits_in_batch(group_keys, || {
        queues::flow_settings(queue).map_or(1, |flow| flow.group_concurrency)
    });
    let jobs = NewJobs {
        queue,
        kind: PerJob::All(&options.kind),
        payloads,
        headers: PerJob::All(options.headers.and_then(|h| h.into_datum())),
        priority: PerJob::All(options.priority),
        run_at: PerJob::All(i64::from(options.run_at)),
        max_attempts: PerJob::All(options.max_attempts),
        tenant: options.tenant.as_deref(),
        group_keys: PerJob::Each(group_keys),
        group_waits: group_waits
            .as_deref()
            .map_or(PerJob::All(false), PerJob::Each),
        unique_keys,
        unique_for,
        queue_row: queues::queue_row_use(),
    };
    // SAFETY: inside the enqueue's transaction, holding the queue lock; the datums are the
    // call's arguments.
    match unsafe { JobWriter::insert(&jobs) }? {
        Inserted::Ids(ids) => Some(Written::Ids(ids)),
        Inserted::KeyHeld => Some(Written::KeyHeld),
        Inserted::UnknownQueue => unknown_queue(queue),
    }
}

/// [`enqueue`] of a job with unique key `key` in group `group_key`, without announcing the job
/// (the caller does).
fn enqueue_unique(
    client: &SpiClient<'_>,
    queue: &str,
    payload: Jsonb,
    key: &str,
    group_key: Option<&str>,
    options: &JobOptions,
) -> Enqueued {
    let unique = options
        .unique
        .as_ref()
        .expect("a unique key comes with its options");
    for _ in 0..UNIQUE_ROUNDS {
        let mut args = options.job_args_in_group(queue, payload.into(), group_key);
        args.push(key.into());
        args.push(unique.unique_for.into());
        if let Some(id) = INSERT_UNIQUE.first::<i64>(client, &args, "id") {
            return Enqueued { id, inserted: true };
        }
        if !queues::exists(client, queue) {
            unknown_queue(queue);
        }
        let holders = holders_of(client, queue, options.tenant.as_deref(), &[key.to_owned()]);
        match holders.get(key) {
            // The holder went away (rolled back, finished, cancelled) since: try again.
            None => continue,
            Some(holder) if holder.expired => {
                release(client, &[holder.id]);
                continue;
            }
            Some(holder) => {
                resolve_duplicate(client, queue, key, holder, payload, options);
                return Enqueued {
                    id: holder.id,
                    inserted: false,
                };
            }
        }
    }
    key_kept_changing_hands(queue, key)
}

/// A job that holds a unique key.
pub struct Holder {
    /// The job.
    pub id: i64,
    /// Its state.
    pub state: String,
    /// Whether its hold has run out (a succeeded job past its unique_for window).
    pub expired: bool,
}

/// The holders of `keys` in `queue` for `tenant`, by key.
pub fn holders_of(
    client: &SpiClient<'_>,
    queue: &str,
    tenant: Option<&str>,
    keys: &[String],
) -> HashMap<String, Holder> {
    let args: [DatumWithOid; 4] = [
        queue.into(),
        tenant.into(),
        keys.to_vec().into(),
        timestamptz_arg(server_now()),
    ];
    UNIQUE_HOLDERS
        .run(client, &args)
        .iter()
        .map(|row| {
            (
                row.expect::<String>("unique_key"),
                Holder {
                    id: row.expect("id"),
                    state: row.expect("state"),
                    expired: row.expect("expired"),
                },
            )
        })
        .collect()
}

/// Ends the holds of succeeded jobs whose window has passed.
pub fn release(client: &SpiClient<'_>, ids: &[i64]) {
    UNIQUE_RELEASE.run(
        client,
        &[ids.to_vec().into(), timestamptz_arg(server_now())],
    );
}

/// Applies `on_conflict` to a duplicate of `holder`.
fn resolve_duplicate(
    client: &SpiClient<'_>,
    queue: &str,
    key: &str,
    holder: &Holder,
    payload: Jsonb,
    options: &JobOptions,
) {
    let unique = options
        .unique
        .as_ref()
        .expect("a unique key comes with its options");
    match unique.on_conflict {
        OnConflict::Skip => {}
        OnConflict::Replace => {
            let args: [DatumWithOid; 5] = [
                holder.id.into(),
                payload.into(),
                options.headers.into(),
                options.run_at.into(),
                options.priority.into(),
            ];
            // A running or finished holder is left alone (no row).
            let rows = UNIQUE_REPLACE.run(client, &args);
            transitions::queued_rows(&rows);
            // A job waiting for its group: a settle that freed a slot for it meanwhile skipped
            // it while this transaction held its row, so look again under the group's lock.
            groups::move_on(
                client,
                rows.iter().filter_map(|row| GroupRef::of_row(&row)).collect(),
            );
        }
        OnConflict::Error => raise_with_hint(
            UNIQUE_VIOLATION,
            format!(
                "job {} ({}) already holds unique key {} in queue {}",
                holder.id,
                holder.state,
                quote(key),
                quote(queue)
            ),
            "Pass on_conflict => 'skip' to get its id instead, or 'replace' to update it while it is queued.",
        ),
    }
}

/// Raises the error for a key whose holders kept vanishing under the insert.
fn key_kept_changing_hands(queue: &str, key: &str) -> ! {
    raise(
        pgrx::PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
        format!(
            "unique key {} of queue {} changed hands {UNIQUE_ROUNDS} times during this enqueue",
            quote(key),
            quote(queue)
        ),
    )
}

/// Enqueues one job per payload into `queue` in one statement; one answer per payload, in
/// payload order (for a unique duplicate, the existing job's id). With `after`, every job
/// inserted waits for those jobs, as [`enqueue`]'s.
pub fn enqueue_batch(queue: &str, payloads: JsonbArray, options: &JobOptions) -> Vec<Enqueued> {
    locks::lock_queue(queue, false);
    let Some(after) = &options.after else {
        return enqueue_many(queue, payloads, options);
    };
    let parents = lock_parents(after, options);
    let enqueued = enqueue_many(queue, payloads, options);
    let inserted: Vec<i64> = enqueued
        .iter()
        .filter(|e| e.inserted)
        .map(|e| e.id)
        .collect();
    with_client(|client| dependencies::enqueued_after(client, inserted, &parents));
    enqueued
}

/// [`enqueue_batch`], the queue lock held (and the parents locked).
fn enqueue_many(queue: &str, payloads: JsonbArray, options: &JobOptions) -> Vec<Enqueued> {
    let count = payloads.elements().len();
    // Each job's group.
    let group_keys: Vec<Option<&str>> = (0..count).map(|i| options.group_key_of(i)).collect();
    if count > 0 {
        let datums: Vec<pg_sys::Datum> = payloads
            .elements()
            .into_iter()
            .map(|p| {
                p.and_then(|p| p.into_datum())
                    .expect("payloads were checked for NULL")
            })
            .collect();
        let unique_keys: Vec<Option<&str>> = match options.unique {
            Some(_) => (0..datums.len())
                .map(|i| options.unique_key_of(i))
                .collect(),
            None => Vec::new(),
        };
        if let Some(ids) = write_direct(queue, &datums, &group_keys, &unique_keys, options) {
            if let Some(&first) = ids.iter().min().filter(|_| options.announces()) {
                transitions::jobs_queued(queue, ids.len(), options.position(first));
            }
            transitions::jobs_enqueued(queue, options.tenant.as_deref(), ids.len());
            return ids
                .into_iter()
                .map(|id| Enqueued { id, inserted: true })
                .collect();
        }
    }
    // The statements mark the jobs that wait for the batch's own jobs of their group, as the
    // direct writer does (`groups::waits_in_batch`).
    let concurrency = || queues::flow_settings(queue).map_or(1, |flow| flow.group_concurrency);
    let (group_waits, unique_concurrency) = match options.unique {
        None => (groups::waits_in_batch(&group_keys, concurrency), None),
        // Which wait is known once the statement has skipped the keys held; the setting is
        // read now, outside the statements' SPI connection, when two jobs have groups.
        Some(_) => (
            None,
            group_keys.iter().flatten().nth(1).map(|_| concurrency()),
        ),
    };
    with_client(|client| {
        let mut args = options.job_args(queue, payloads.into());
        args.push(options.group_keys.clone().into());
        let enqueued = match &options.unique {
            None => {
                args.push(group_waits.into());
                // SAFETY: reading the current context pointer (SPI's, which lives long enough:
                // the ids are plain numbers).
                let context = unsafe { pg_sys::CurrentMemoryContext };
                INSERT_BATCH
                    .collect::<i64>(client, &args, "id", context)
                    .into_iter()
                    .map(|id| Enqueued { id, inserted: true })
                    .collect::<Vec<_>>()
            }
            Some(unique) => {
                args.push(unique.key.as_deref().into());
                args.push(unique.keys.clone().into());
                args.push(unique.unique_for.into());
                let enqueued = batch_unique(client, queue, payloads, &group_keys, options, &args);
                mark_waiting_in_batch(client, &enqueued, &group_keys, || {
                    unique_concurrency.unwrap_or(1)
                });
                enqueued
            }
        };
        if enqueued.is_empty() && count > 0 && !queues::exists(client, queue) {
            unknown_queue(queue);
        }
        let inserted: Vec<i64> = enqueued
            .iter()
            .filter(|e| e.inserted)
            .map(|e| e.id)
            .collect();
        if let Some(&first) = inserted.iter().min().filter(|_| options.announces()) {
            transitions::jobs_queued(queue, inserted.len(), options.position(first));
        }
        transitions::jobs_enqueued(queue, options.tenant.as_deref(), inserted.len());
        enqueued
    })
}

/// Marks the jobs a batch inserted (those of `enqueued` with `inserted`, whose groups are
/// `group_keys`, one per payload) that wait for the batch's own jobs of their group, as the
/// direct writer marks them as they go in (`groups::waits_in_batch`, which says why that is
/// safe without the groups' locks), in the order of their ids: the order their groups run them
/// in (a payload whose key's holder had expired goes in after the batch's statement).
/// `concurrency` gives the queue's `group_concurrency`.
fn mark_waiting_in_batch(
    client: &SpiClient<'_>,
    enqueued: &[Enqueued],
    group_keys: &[Option<&str>],
    concurrency: impl FnOnce() -> i32,
) {
    let mut inserted: Vec<(i64, Option<&str>)> = enqueued
        .iter()
        .zip(group_keys)
        .filter(|(job, _)| job.inserted)
        .map(|(job, key)| (job.id, *key))
        .collect();
    inserted.sort_unstable_by_key(|(id, _)| *id);
    let keys: Vec<Option<&str>> = inserted.iter().map(|(_, key)| *key).collect();
    let Some(waits) = groups::waits_in_batch(&keys, concurrency) else {
        return;
    };
    let ids: Vec<i64> = inserted
        .iter()
        .zip(waits)
        .filter(|(_, waits)| *waits)
        .map(|((id, _), _)| *id)
        .collect();
    groups::mark_waiting(client, ids);
}

/// The unique half of [`enqueue_batch`]: inserts what holds no key yet, then answers each
/// payload that lost its key with the holder (another job, or an earlier payload of this
/// batch), resolving `on_conflict` for it.
fn batch_unique(
    client: &SpiClient<'_>,
    queue: &str,
    payloads: JsonbArray,
    group_keys: &[Option<&str>],
    options: &JobOptions,
    args: &[DatumWithOid<'_>],
) -> Vec<Enqueued> {
    let count = group_keys.len();
    let rows = INSERT_BATCH_UNIQUE.run(client, args);
    let returned: Vec<(i64, Option<String>)> = rows
        .iter()
        .map(|row| (row.expect::<i64>("id"), row.get::<String>("unique_key")))
        .collect();
    if returned.is_empty() && !queues::exists(client, queue) {
        unknown_queue(queue);
    }
    // Match the inserted rows (in payload order) to payloads: a payload without a key was
    // inserted; one with a key was inserted if the next row has that key and no earlier
    // payload of the batch took it.
    let mut answers: Vec<Option<Enqueued>> = vec![None; count];
    let mut taken_here: HashMap<String, i64> = HashMap::new();
    let mut next = returned.into_iter().peekable();
    for (index, answer) in answers.iter_mut().enumerate() {
        let key = options.unique_key_of(index);
        let inserted_here = match key {
            None => true,
            Some(key) => {
                !taken_here.contains_key(key)
                    && next.peek().is_some_and(|(_, k)| k.as_deref() == Some(key))
            }
        };
        if inserted_here {
            let (id, _) = next.next().expect("an inserted row for this payload");
            if let Some(key) = key {
                taken_here.insert(key.to_owned(), id);
            }
            *answer = Some(Enqueued { id, inserted: true });
        }
    }
    // The duplicates: of an earlier payload of this batch, or of another job.
    let missing: Vec<String> = answers
        .iter()
        .enumerate()
        .filter(|(_, a)| a.is_none())
        .filter_map(|(i, _)| options.unique_key_of(i))
        .filter(|key| !taken_here.contains_key(*key))
        .map(str::to_owned)
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let mut holders = if missing.is_empty() {
        HashMap::new()
    } else {
        holders_of(client, queue, options.tenant.as_deref(), &missing)
    };
    let elements = payloads.elements();
    for index in 0..count {
        if answers[index].is_some() {
            continue;
        }
        let key = options
            .unique_key_of(index)
            .expect("only payloads with a key can be duplicates");
        let payload = elements[index].expect("payloads were checked for NULL");
        if let Some(&id) = taken_here.get(key) {
            let holder = Holder {
                id,
                state: "queued".to_owned(),
                expired: false,
            };
            resolve_duplicate(client, queue, key, &holder, payload, options);
            answers[index] = Some(Enqueued {
                id,
                inserted: false,
            });
            continue;
        }
        match holders.remove(key) {
            Some(holder) if !holder.expired => {
                resolve_duplicate(client, queue, key, &holder, payload, options);
                answers[index] = Some(Enqueued {
                    id: holder.id,
                    inserted: false,
                });
                holders.insert(key.to_owned(), holder);
            }
            other => {
                // The holder's window has passed, or it went away: this payload goes in on its
                // own, through the single path that handles both.
                if let Some(holder) = other {
                    release(client, &[holder.id]);
                }
                // In its own group: the batch marks it behind the batch's jobs of that group.
                let single =
                    enqueue_unique(client, queue, payload, key, group_keys[index], options);
                if single.inserted {
                    taken_here.insert(key.to_owned(), single.id);
                }
                answers[index] = Some(single);
            }
        }
    }
    answers
        .into_iter()
        .map(|a| a.expect("every payload is answered"))
        .collect()
}
