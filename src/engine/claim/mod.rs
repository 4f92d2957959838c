//! The claim pipeline: handing due jobs of one queue to a worker, each under a fresh lease
//! (Rules 1–4), optionally waiting for work.
//!
//! A claim reads its queue's floor, takes the freed heads of groups that settles handed over
//! ([`freed`]), then runs rounds ([`round`]): each picks due jobs in claim order under their
//! job locks ([`pick`]), merges them with the freed heads, lets their groups decide
//! ([`groups`]) and takes the ones still queued with one statement. It raises the floor past
//! what it took from the claim index when its filter allows ([`filter`]), and, with `wait`,
//! sleeps until a commit makes a job claimable ([`wait`]).

mod filter;
mod floor_check;
mod freed;
mod groups;
mod pick;
mod rate;
mod round;
pub mod token;
mod wait;

use std::cell::Cell;

use pgrx::datum::Interval;
use pgrx::pg_sys::{self, INT2OID, INT8OID, TEXTOID, TIMESTAMPTZOID};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

pub use filter::ClaimFilter;
pub use floor_check::{check_floor_window, owned_floors};
pub use wait::wake_due_waiters;

use crate::config::settings;
use crate::engine::groups::{sweep_stranded, unmark};
use crate::engine::model::Position;
use crate::engine::queues::{self, unknown_queue};
use crate::pg::client;
use crate::pg::clock::server_now;
use crate::runtime::queue_state::{QueueState, Seen};
use crate::storage::rows::ClaimedRow;
use crate::storage::{statement, timestamptz_arg, with_client, Statement};
use pick::{Picking, Resume};
use round::Rounds;

static LOWEST_PRIORITY: Statement = statement!(claim/lowest_priority(queue: TEXTOID) -> (priority));

static PROBE: Statement = statement!(claim/probe(queue: TEXTOID) -> (paused, earliest_run_at));

static PROBE_FROM: Statement = statement!(
    claim/probe_from(queue: TEXTOID, priority: INT2OID, run_at: TIMESTAMPTZOID, id: INT8OID)
        -> (paused, earliest_run_at)
);

/// A claim, its arguments checked.
pub struct ClaimRequest<'a> {
    /// The queue to claim from.
    pub queue: &'a str,
    /// Recorded as the jobs' worker.
    pub worker: String,
    /// Most jobs to take.
    pub n: usize,
    /// Lease length; `None` takes the queue's.
    pub lease: Option<Interval>,
    /// Which jobs it may take.
    pub filter: ClaimFilter,
    /// How long to wait for work when none is due, in microseconds (0: don't).
    pub wait_micros: i64,
}

/// What an attempt that got nothing learnt about the queue.
struct Probe {
    paused: bool,
    earliest_run_at: Option<pg_sys::TimestampTz>,
    /// The queue's rate limit let nothing through: a token comes (or a reserved one is this
    /// claim's) at this time.
    throttled_until: Option<pg_sys::TimestampTz>,
    /// Whether that time is a token this claim reserved (its next attempt may spend it).
    reserved: bool,
    /// Whether the attempt stopped at its limit of jobs examined (all held, or let go), so
    /// due jobs it never looked at may be claimable.
    capped: bool,
}

/// Claims up to `request.n` due jobs (waiting for work when it asks to) and returns them in
/// claim order.
pub fn claim(request: &ClaimRequest<'_>) -> Vec<ClaimedRow> {
    let claimed = if request.wait_micros == 0 {
        attempt(request, server_now(), 0).0
    } else {
        wait::claim_waiting(request)
    };
    if !claimed.is_empty() {
        // A client gone before the claim returns (killed right after sending it, or while it
        // waited) would never get the jobs: they would sit running for a whole lease, an
        // attempt spent on nothing. Ending the session rolls the claim back.
        client::end_if_gone();
    }
    claimed
}

/// One attempt at claiming: picks and takes up to `n` due jobs as of `now` (fewer when the
/// queue's rate limit says so; `prepaid` tokens were reserved by an earlier attempt). When it
/// got nothing it also says whether the queue is paused, when its earliest queued job is due,
/// and whether the rate limit held it back.
fn attempt(
    request: &ClaimRequest<'_>,
    now: pg_sys::TimestampTz,
    prepaid: u32,
) -> (Vec<ClaimedRow>, Option<Probe>) {
    let queue = request.queue;
    // The caller's memory context: results copied here outlive SPI and any subtransaction.
    // SAFETY: reading the current context pointer.
    let result_context = unsafe { pg_sys::CurrentMemoryContext };
    let state = QueueState::of(queue);
    let flow = queues::flow_settings(queue);
    with_client(|client| {
        // A paused queue hands out nothing, and one not found is reported by the probe. The
        // candidate statements do not read the queue row for it: the session keeps the
        // setting (a read of the queue row in every claim is not free).
        if flow.is_none_or(|f| f.paused) {
            return (Vec::new(), Some(probe(client, queue)));
        }
        let rate = flow.and_then(|f| f.rate);
        let budget = rate::Budget::open(client, &state, rate, request, now, prepaid);
        let allowed = budget.allowed();
        if allowed == 0 {
            return (
                Vec::new(),
                Some(budget.throttled(client, &state, request, now)),
            );
        }
        // The waiting heads settles handed over (groups of concurrency 1), merged with the
        // first pick in claim order; they are not in the claim indexes, so the floor and the
        // reach never move for them. Taken before the floor is read: a sweep or unmark here
        // makes jobs queued that this claim's pick must find.
        let concurrency = flow.map_or(1, |f| f.group_concurrency);
        let freed = take_freed(client, &state, concurrency, request, now, allowed);
        let seen = state.seen_floor(request.filter.reach_scope());
        let picking = Picking {
            queue,
            filter: &request.filter,
            kinds_indexed: flow.is_some_and(|f| f.claims_by_kind),
            now,
            state: &state,
            seen: seen.as_ref(),
            resume: Resume::default(),
            dead_past_floor: Cell::new(None),
        };
        let mut rounds = Rounds::new(request, flow, now, allowed, result_context);
        rounds.run(client, &picking, freed);
        rounds.extend_reach(&picking);
        budget.settle(client, &state, rounds.taken());
        if let Some(seen) = &seen {
            rounds.raise_floor(client, &state, seen);
            if let Some(dead) = picking.dead_past_floor() {
                state.raise_floor(seen, dead.successor());
            }
        }
        rounds.finish(client)
    })
}

/// The freed heads of `queue` an attempt may take first (`engine::claim::freed`), up to
/// `allowed`. A queue whose groups run more than one job at a time takes none: freed heads left
/// from when it ran one (its setting changed) have their marks cleared instead, as do those a
/// claim under REPEATABLE READ meets. The first claim
/// of a database after shared memory was made clears the marks freed heads lost with it
/// (`runtime::freed_heads`).
fn take_freed(
    client: &SpiClient<'_>,
    state: &QueueState<'_>,
    concurrency: i32,
    request: &ClaimRequest<'_>,
    now: pg_sys::TimestampTz,
    allowed: usize,
) -> Vec<pick::Candidate> {
    // SAFETY: reads a backend global.
    let read_committed = unsafe { pg_sys::XactIsoLevel } < pg_sys::XACT_REPEATABLE_READ as i32;
    if concurrency == 1 && read_committed && QueueState::freed_heads_need_sweep() {
        // No settle offers freed heads until a sweep committed; the worker's tick sweeps too.
        sweep_stranded(client);
        return Vec::new();
    }
    // Under REPEATABLE READ the take would fail on a job marked after the snapshot: the marks
    // are cleared (with the latest snapshot), and claims with newer snapshots find the jobs.
    // With the fast paths off, settles offer none and clear marks instead: any left from
    // before the setting changed have theirs cleared too.
    if concurrency != 1 || !read_committed || !settings::fast_paths() {
        unmark(client, state.take_all_freed_heads());
        return Vec::new();
    }
    freed::pick(client, state, &request.filter, now, allowed)
}

/// What the queue looks like to an attempt that got nothing.
fn probe(client: &SpiClient<'_>, queue: &str) -> Probe {
    probe_known(client, queue).unwrap_or_else(|| unknown_queue(queue))
}

/// What the queue looks like from its claim floor on (or its head): `None` when it does not
/// exist.
fn probe_known(client: &SpiClient<'_>, queue: &str) -> Option<Probe> {
    // From the queue's floor when it is known (see probe_from.sql).
    let floor = QueueState::of(queue)
        .seen_floor(None)
        .and_then(|seen| seen.key);
    let rows = match floor {
        Some(at) => PROBE_FROM.run(
            client,
            &[
                queue.into(),
                at.priority.into(),
                timestamptz_arg(at.run_at),
                at.id.into(),
            ],
        ),
        None => PROBE.run(client, &[queue.into()]),
    };
    let row = rows.first()?;
    Some(Probe {
        paused: row.get("paused").unwrap_or(false),
        earliest_run_at: row
            .get::<TimestampWithTimeZone>("earliest_run_at")
            .map(i64::from),
        throttled_until: None,
        reserved: false,
        capped: false,
    })
}

/// Where the claim floor may move after a claim of every kind took `taken`: just past the last
/// job taken in the lowest priority it took from, but not past a job it skipped because another
/// transaction held it, and not to a priority above one that still has queued jobs (delayed
/// ones come due later, in place).
fn new_floor(
    client: &SpiClient<'_>,
    queue: &str,
    seen: &Seen,
    taken: &[Position],
    skipped: Option<Position>,
) -> Option<Position> {
    let priority = taken.iter().map(|key| key.priority).min()?;
    let to = taken
        .iter()
        .copied()
        .filter(|key| key.priority == priority && skipped.is_none_or(|skipped| *key < skipped))
        .max()?;
    // Within the floor's own priority no lower priority can hold jobs; elsewhere, ask.
    if seen.key.is_none_or(|floor| floor.priority != priority) {
        let lowest: Option<i16> = LOWEST_PRIORITY.first(client, &[queue.into()], "priority");
        if lowest.is_some_and(|lowest| lowest < priority) {
            return None;
        }
    }
    Some(to.successor())
}

/// Jobs a session's filtered claims take between two advances of the floor ([`advance_floor`]).
const JOBS_PER_FLOOR_ADVANCE: usize = 16;

thread_local! {
    /// Jobs this session's filtered claims took since it last advanced a floor, plus one; it
    /// starts past the threshold, so a session's first such claim advances.
    static TAKEN_SINCE_FLOOR_ADVANCE: Cell<usize> = const { Cell::new(JOBS_PER_FLOOR_ADVANCE) };
}

/// After a claim that takes only some due jobs (of some kinds, or of its tenants), or one that
/// took only jobs past the reach: its picks cannot tell that what it passed over is not
/// claimable, so they never raise the floor. Left
/// at that, the floor of a queue served only by such claims would stay where it was, and each
/// claim would walk the dead index entries of every job claimed since (a tenant's worker: 111
/// buffers a job after 20,000 claims, against 6). Raises the floor to the first due queued job
/// of any kind and tenant instead, not past it, and not to a priority above one that still has
/// queued jobs (as [`new_floor`]). Only when row-level security does not apply to the
/// function's owner, so that the statement sees every tenant's jobs.
///
/// The advance costs a statement, so a session makes it once per [`JOBS_PER_FLOOR_ADVANCE`]
/// jobs its filtered claims took (a claim that took none counts as one), its first claim
/// included: the floor then lags behind such claims by a few jobs at most, and claims of one
/// job pay for the advance one time in sixteen instead of each time (a tenant's workers, whose
/// claims are all filtered, would otherwise pay a statement more per job than the owner's).
fn advance_floor(
    client: &SpiClient<'_>,
    state: &QueueState<'_>,
    seen: &Seen,
    now: pg_sys::TimestampTz,
    taken: usize,
) {
    let queue = state.queue();
    let due = TAKEN_SINCE_FLOOR_ADVANCE.with(|since| {
        let count = since.get().saturating_add(taken.max(1));
        let due = count > JOBS_PER_FLOOR_ADVANCE;
        since.set(if due { 1 } else { count });
        due
    });
    if !due {
        return;
    }
    // SAFETY: reads the current user's superuser flag from the catalog cache, inside a
    // transaction.
    if !unsafe { pg_sys::superuser() } {
        return;
    }
    let Some(first) = pick::first_due(client, queue, now, seen.key) else {
        return;
    };
    if seen.key.is_some_and(|floor| first <= floor) {
        return;
    }
    if seen
        .key
        .is_none_or(|floor| floor.priority != first.priority)
    {
        let lowest: Option<i16> = LOWEST_PRIORITY.first(client, &[queue.into()], "priority");
        if lowest.is_some_and(|lowest| lowest < first.priority) {
            return;
        }
    }
    state.raise_floor(seen, first);
}
