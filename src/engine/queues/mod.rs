//! Queues: creating them, changing their settings, dropping, pausing and resuming them.

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::{BOOLOID, FLOAT8OID, INT4OID, INTERVALOID, TEXTOID};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::config::settings;
use crate::engine::errors::{
    KINDS_INDEX_NEEDS_READ_COMMITTED, QUEUE_IN_USE, UNKNOWN_QUEUE, WRONG_STATE,
};
use crate::engine::groups;
use crate::engine::model::JobState;
use crate::engine::tenants::{self, TenantScope};
use crate::engine::transitions;
use crate::engine::workflows::dependencies;
use crate::pg::errors::{quote, raise, raise_with_hint, BAD_ARGUMENT, INSUFFICIENT_PRIVILEGE};
use crate::storage::rows::QueueRow;
use std::cell::RefCell;
use std::sync::atomic::Ordering;

use crate::runtime::effects;
use crate::runtime::locks;
use crate::runtime::rate::{self, Limit};
use crate::runtime::shmem::shared;
use crate::storage::direct::job_writer::QueueRowUse;
use crate::storage::direct::Generational;
use crate::storage::{statement, with_client, Statement};

/// The queue `CREATE EXTENSION` makes, which the contract says always exists.
pub const DEFAULT_QUEUE: &str = "default";

static ENSURE: Statement = statement!(queues/ensure(queue: TEXTOID) -> (created));

static UPDATE: Statement = statement!(
    queues/update(queue: TEXTOID, lease: INTERVALOID, max_attempts: INT4OID,
        backoff_base: INTERVALOID, backoff_max: INTERVALOID, jitter: FLOAT8OID,
        retention: INTERVALOID, rate_limit: FLOAT8OID, group_concurrency: INT4OID,
        dead_letter: TEXTOID, rate_burst: FLOAT8OID, claims_by_kind: BOOLOID) -> (queue_row)
);

static INDEX_BY_KIND: Statement = statement!(queues/index_by_kind(queue: TEXTOID) -> ());

static BACKOFF: Statement = statement!(
    queues/backoff(queue: TEXTOID) -> (backoff_base, backoff_max)
);

static EXISTS: Statement = statement!(queues/exists(queue: TEXTOID) -> (found));

static DEAD_LETTER_CHAIN: Statement = statement!(
    queues/dead_letter_chain(queue: TEXTOID, dead_letter: TEXTOID) -> (chain, cycle)
);

static DROP: Statement = statement!(
    queues/drop(queue: TEXTOID, force: BOOLOID) -> (outcome, active, referrer, ended_parents)
);

static SCHEDULED_BY: Statement = statement!(queues/scheduled_by(queue: TEXTOID) -> (name));

static SET_PAUSED: Statement = statement!(
    queues/set_paused(queue: TEXTOID, paused: BOOLOID) -> (found)
);

/// The settings `jobs_create_queue` was given, checked; `None` keeps a setting as it is (or at
/// its default for a new queue).
pub struct QueueSettings<'a> {
    /// Lease length of a claim.
    pub lease: Option<Interval>,
    /// Attempts copied into each job at enqueue.
    pub max_attempts: Option<i32>,
    /// First retry delay.
    pub backoff_base: Option<Interval>,
    /// Cap on the retry delay before jitter.
    pub backoff_max: Option<Interval>,
    /// Fraction by which a delay is stretched at most.
    pub jitter: Option<f64>,
    /// How long finished jobs are kept.
    pub retention: Option<Interval>,
    /// Claims per second; 0 clears it.
    pub rate_limit: Option<f64>,
    /// Most claims at once above the rate (the bucket's size); 0 clears it.
    pub rate_burst: Option<f64>,
    /// Running jobs allowed at once per group.
    pub group_concurrency: Option<i32>,
    /// The dead-letter queue; `""` clears it.
    pub dead_letter: Option<&'a str>,
    /// Whether the queue's jobs go into the kinds index.
    pub claims_by_kind: Option<bool>,
}

/// Raises the error for a queue that does not exist.
#[track_caller]
pub fn unknown_queue(queue: &str) -> ! {
    raise_with_hint(
        UNKNOWN_QUEUE,
        format!("queue {} does not exist", quote(queue)),
        &format!("Create it with SELECT jobs_create_queue({});", quote(queue)),
    )
}

/// Whether queue `queue` exists, as this statement's snapshot sees it.
pub fn exists(client: &SpiClient<'_>, queue: &str) -> bool {
    EXISTS
        .first::<bool>(client, &[queue.into()], "found")
        .is_some()
}

/// Creates `queue`, or updates the settings given of an existing one, and returns its row.
///
/// Turning `claims_by_kind` on puts the queue's unfinished jobs into the kinds index, which
/// claims of some kinds then read alone. An enqueue holds the queue's lock (shared) from
/// before it reads the setting until it commits, so this takes it exclusively first: the
/// enqueues that read the setting off have committed when the jobs are marked, and the ones
/// after read it on. The marking must see them, so it needs a snapshot taken now (READ
/// COMMITTED).
pub fn create_or_update(queue: &str, settings: &QueueSettings<'_>) -> QueueRow {
    let dead_letter = settings.dead_letter.filter(|d| !d.is_empty());
    if dead_letter == Some(queue) {
        raise(
            BAD_ARGUMENT,
            format!("dead_letter must name another queue, got {}", quote(queue)),
        );
    }
    if settings.claims_by_kind.is_some() {
        locks::lock_queue(queue, true);
    }
    with_client(|client| {
        let created = !ENSURE.run(client, &[queue.into()]).is_empty();
        let kinds_before: Option<bool> = settings
            .claims_by_kind
            .and_then(|_| FLOW.first(client, &[queue.into()], "claims_by_kind"));
        let turns_on_kinds = settings.claims_by_kind == Some(true) && kinds_before == Some(false);
        if turns_on_kinds && !created {
            refuse_kinds_index_outside_read_committed(queue);
            refuse_kinds_index_for_some_tenants(queue);
        }
        if let Some(dead_letter) = dead_letter {
            check_dead_letter_chain(client, queue, dead_letter);
        }
        let args: [DatumWithOid; 12] = [
            queue.into(),
            settings.lease.into(),
            settings.max_attempts.into(),
            settings.backoff_base.into(),
            settings.backoff_max.into(),
            settings.jitter.into(),
            settings.retention.into(),
            settings.rate_limit.into(),
            settings.group_concurrency.into(),
            settings.dead_letter.into(),
            settings.rate_burst.into(),
            settings.claims_by_kind.into(),
        ];
        let concurrency_before: Option<i32> = settings
            .group_concurrency
            .and_then(|_| FLOW.first(client, &[queue.into()], "group_concurrency"));
        if let Some(row) = UPDATE.first::<QueueRow>(client, &args, "queue_row") {
            settings_changed(queue);
            if settings.group_concurrency != concurrency_before {
                // Jobs marked waiting under the old setting: claims decide again.
                groups::release_all(client, queue);
            }
            // A queue created here has no jobs yet, and reading the table to find none would
            // cost every new queue a scan.
            if turns_on_kinds && !created {
                INDEX_BY_KIND.run(client, &[queue.into()]);
            }
            return row;
        }
        let current = BACKOFF.run(client, &[queue.into()]);
        let current = current
            .first()
            .expect("the queue exists: it was just ensured");
        let base = settings
            .backoff_base
            .unwrap_or_else(|| current.expect("backoff_base"));
        let max = settings
            .backoff_max
            .unwrap_or_else(|| current.expect("backoff_max"));
        raise(
            BAD_ARGUMENT,
            format!(
                "backoff_max must be at least backoff_base, got backoff_base '{base}' and backoff_max '{max}'"
            ),
        )
    })
}

/// Refuses to turn `queue`'s claims_by_kind on under REPEATABLE READ or SERIALIZABLE: the
/// marking of its jobs would not see those enqueued since the transaction's snapshot, and
/// claims of some kinds would never find them.
fn refuse_kinds_index_outside_read_committed(queue: &str) {
    // SAFETY: reads the session's isolation level.
    if unsafe { pg_sys::XactIsoLevel } >= pg_sys::XACT_REPEATABLE_READ as i32 {
        raise_with_hint(
            KINDS_INDEX_NEEDS_READ_COMMITTED,
            format!(
                "claims_by_kind of queue {} cannot be turned on under REPEATABLE READ or \
                 SERIALIZABLE isolation",
                quote(queue)
            ),
            "Its jobs enqueued since this transaction's snapshot would be left out of the \
             kinds index; turn it on in a READ COMMITTED transaction.",
        );
    }
}

/// Refuses to turn `queue`'s claims_by_kind on in a session acting for some tenants
/// (`pg_jobs.tenant`): the marking must reach every tenant's jobs, and in such a session the
/// row-level security of `jobs.job` may show it only theirs (it does whenever the extension's
/// owner is subject to it).
fn refuse_kinds_index_for_some_tenants(queue: &str) {
    if !matches!(tenants::scope(), TenantScope::All) {
        raise_with_hint(
            INSUFFICIENT_PRIVILEGE,
            format!(
                "claims_by_kind of queue {} cannot be turned on by a session acting for some \
                 tenants (pg_jobs.tenant)",
                quote(queue)
            ),
            "Turning it on marks the queue's jobs of every tenant; RESET pg_jobs.tenant first.",
        );
    }
}

/// Refuses a dead-letter queue that does not exist, or whose own chain of dead-letter queues
/// leads back to `queue` (every failure would then be copied round the cycle forever).
fn check_dead_letter_chain(client: &SpiClient<'_>, queue: &str, dead_letter: &str) {
    // Serialise changes of dead-letter settings, so two sessions cannot each close half of a
    // cycle that neither of their snapshots shows whole.
    locks::lock_dead_letter_chains();
    if !exists(client, dead_letter) {
        unknown_queue(dead_letter);
    }
    let rows = DEAD_LETTER_CHAIN.run(client, &[queue.into(), dead_letter.into()]);
    let row = rows
        .first()
        .expect("queues/dead_letter_chain returns one row");
    if row.expect::<bool>("cycle") {
        let chain: String = row.expect("chain");
        raise_with_hint(
            BAD_ARGUMENT,
            format!(
                "dead_letter {} would make a cycle of dead-letter queues: {} -> {chain}",
                quote(dead_letter),
                queue
            ),
            "A chain of dead-letter queues must end in a queue without a dead_letter.",
        );
    }
}

/// Refuses to drop `queue` while a schedule enqueues into it (the worker would fail to enqueue
/// its next slot). The queues read the schedules' table here rather than ask the schedules,
/// which enqueue into queues: dependencies point one way.
fn refuse_drop_of_scheduled_queue(client: &SpiClient<'_>, queue: &str) {
    if let Some(schedule) = SCHEDULED_BY.first::<String>(client, &[queue.into()], "name") {
        raise_with_hint(
            QUEUE_IN_USE,
            format!(
                "queue {} is the queue of schedule {}",
                quote(queue),
                quote(&schedule)
            ),
            &format!(
                "Unschedule it first: SELECT jobs_unschedule({});",
                quote(&schedule)
            ),
        );
    }
}

/// Drops `queue` and its jobs; refuses while jobs are queued, running or waiting unless `force`, while
/// another queue uses it as its dead-letter queue, and for the default queue.
pub fn drop(queue: &str, force: bool) {
    if queue == DEFAULT_QUEUE {
        raise_with_hint(
            WRONG_STATE,
            "the default queue cannot be dropped".into(),
            "Pause it with SELECT jobs_pause('default') if it must hand out no jobs.",
        );
    }
    locks::lock_queue(queue, true);
    with_client(|client| {
        refuse_drop_of_scheduled_queue(client, queue);
        let rows = DROP.run(client, &[queue.into(), force.into()]);
        let row = rows.first().expect("queues/drop returns one row");
        let outcome: String = row.expect("outcome");
        match outcome.as_str() {
            "dropped" => {
                settings_changed(queue);
                groups::forget_freed_heads(queue);
                // Jobs of other queues that waited for dropped jobs wait for nothing that can
                // succeed: they are cancelled as after a cancelled dependency.
                let ended: Vec<i64> = row
                    .get::<Vec<Option<i64>>>("ended_parents")
                    .map(|ids| ids.into_iter().flatten().collect())
                    .unwrap_or_default();
                dependencies::parents_ended(
                    client,
                    ended
                        .into_iter()
                        .map(|id| (id, JobState::Cancelled))
                        .collect(),
                );
            }
            "unknown" => unknown_queue(queue),
            "busy" => {
                let active: i64 = row.get("active").unwrap_or(0);
                raise_with_hint(
                    QUEUE_IN_USE,
                    format!(
                        "queue {} has {active} queued, running or waiting jobs",
                        quote(queue)
                    ),
                    "Wait for them to finish, cancel them, or pass force => true to drop them too.",
                )
            }
            _ => {
                let referrer: String = row.get("referrer").unwrap_or_default();
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

/// The settings of a queue its claims apply.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlowSettings {
    /// The rate limit, if any.
    pub rate: Option<Limit>,
    /// Running jobs allowed at once per group.
    pub group_concurrency: i32,
    /// The lease length of claims that name none.
    pub lease: Interval,
    /// Whether the queue is paused (its claims get nothing).
    pub paused: bool,
    /// Whether the queue's jobs are in the kinds index (claims of some kinds read it).
    pub claims_by_kind: bool,
}

static FLOW: Statement = statement!(
    queues/flow(queue: TEXTOID) -> (rate_limit, rate_burst, group_concurrency, lease, paused,
        claims_by_kind)
);

thread_local! {
    /// Settings of existing queues read in this session, valid while the shared generation
    /// stays the same.
    static FLOW_CACHE: RefCell<Generational<FlowSettings>> = RefCell::new(Generational::new());
}

/// The generation of queue settings under which this transaction may use what the session
/// keeps of queues (their flow settings, the enqueue's queue rows), and whether it may keep
/// what it reads now; `None`: read afresh, keep nothing.
///
/// Every commit that changes a queue bumps the shared generation while it still holds its
/// locks (`runtime::effects`), after it became visible: a session that reads a generation and
/// then reads a queue under a newer snapshot (READ COMMITTED takes one per statement) sees
/// every change the generation counts, so what it keeps under it is current; an enqueue that
/// waited for a drop's lock reads the bumped generation. A transaction that changed a queue
/// itself neither uses nor keeps (its change bumps nothing until it commits, and a rollback
/// bumps nothing), and a snapshot older than the generation (REPEATABLE READ) keeps nothing.
/// Call it after the queue lock is taken and before the reads it covers. With
/// `pg_jobs.fast_paths` off, `None`: every call reads its queue row.
pub fn kept_settings() -> Option<KeptSettings> {
    if effects::queue_settings_changed_here() || !settings::fast_paths() {
        return None;
    }
    let generation = shared()?.queue_settings().load(Ordering::Acquire);
    // SAFETY: reads a backend global.
    let read_committed = unsafe { pg_sys::XactIsoLevel } < pg_sys::XACT_REPEATABLE_READ as i32;
    Some(KeptSettings {
        generation,
        keep: read_committed,
    })
}

/// What [`kept_settings`] allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeptSettings {
    /// The shared generation of queue settings, read now.
    pub generation: u64,
    /// Whether what is read now may be kept under it.
    pub keep: bool,
}

/// How the job writer may use the queue rows the session keeps, as [`kept_settings`] allows
/// now: called after the queue lock is taken, before the insert.
pub fn queue_row_use() -> QueueRowUse {
    kept_settings().map_or(QueueRowUse::Read, |kept| QueueRowUse::Kept {
        generation: kept.generation,
        keep: kept.keep,
    })
}

/// The settings of `queue` its claims apply (`None` when it does not exist), cached per
/// session until a commit changes any queue's settings ([`kept_settings`] says when the cache
/// is used and filled), and a queue not found is not cached (one created since is found at
/// once).
pub fn flow_settings(queue: &str) -> Option<FlowSettings> {
    let kept = kept_settings();
    if let Some(KeptSettings { generation, .. }) = kept {
        let cached = FLOW_CACHE.with(|cache| cache.borrow().get(generation, queue));
        if cached.is_some() {
            return cached;
        }
    }
    let settings = with_client(|client| {
        let rows = FLOW.run(client, &[queue.into()]);
        rows.first().map(|row| {
            let rate_limit: Option<f64> = row.get("rate_limit");
            FlowSettings {
                rate: rate_limit.map(|rate| Limit {
                    rate,
                    burst: row.get::<f64>("rate_burst").unwrap_or(rate).max(1.0),
                }),
                group_concurrency: row.expect("group_concurrency"),
                lease: row.expect("lease"),
                paused: row.expect("paused"),
                claims_by_kind: row.expect("claims_by_kind"),
            }
        })
    });
    if let (
        Some(KeptSettings {
            generation,
            keep: true,
        }),
        Some(found),
    ) = (kept, settings)
    {
        FLOW_CACHE.with(|cache| cache.borrow_mut().insert(generation, queue, found));
    }
    settings
}

/// A change of `queue`'s settings (or its drop): every session's cached settings go at commit,
/// and its rate bucket now.
fn settings_changed(queue: &str) {
    effects::queue_settings_changed();
    rate::forget(queue);
}

/// Pauses or resumes `queue`; a resume wakes the claims waiting on it. Claims read whether a
/// queue is paused from the settings their sessions keep ([`flow_settings`]), which the commit
/// of this change drops everywhere.
pub fn set_paused(queue: &str, paused: bool) {
    let found = with_client(|client| {
        SET_PAUSED.first::<bool>(client, &[queue.into(), paused.into()], "found")
    });
    if found.is_none() {
        unknown_queue(queue);
    }
    effects::queue_settings_changed();
    if !paused {
        transitions::queue_resumed(queue);
    }
}
