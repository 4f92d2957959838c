//! Claims that wait for work: between attempts the claim sleeps on its queue's wake-up slot
//! until a commit makes a job claimable, a delayed job comes due, or the wait runs out.
//!
//! A sleeping claim holds no locks (each attempt runs in a subtransaction rolled back when it
//! claims nothing) and, when nothing reads with the statement's snapshot after it returns, no
//! snapshot either: it stops advertising its xmin for the sleep (see `pg::snapshot`), so an
//! idle worker pool does not hold VACUUM back. A wake-up this claim cannot use (a job of another
//! kind, or tenant) is passed on to another waiter rather than lost. A claim that slept checks
//! that its client is still connected before it claims and before it returns what it claimed
//! (`pg::client`): a client killed while its claim waited must not take a job it never gets.

use pgrx::pg_sys;
use pgrx::spi::SpiClient;

use super::{attempt, rate, ClaimRequest, Probe};
use crate::engine::access;
use crate::engine::errors::{VERSION_MISMATCH, WAIT_NEEDS_READ_COMMITTED};
use crate::engine::waiting::{SleepSnapshot, Waiting};
use crate::pg::client;
use crate::pg::clock::server_now;
use crate::pg::errors::raise_with_hint;
use crate::pg::extension;
use crate::pg::subtransaction::in_subtransaction;
use crate::pg::version;
use crate::runtime::queue_state::QueueState;
use crate::storage::rows::ClaimedRow;
use crate::storage::{statement, Statement};

static UNPAUSED_QUEUES: Statement = statement!(claim/unpaused_queues() -> (queue));

/// Claims with `request.wait_micros` of patience: returns as soon as one attempt claimed
/// something, or with nothing when the wait ran out.
pub(super) fn claim_waiting(request: &ClaimRequest<'_>) -> Vec<ClaimedRow> {
    // SAFETY: reads the session's isolation level.
    if unsafe { pg_sys::XactIsoLevel } >= pg_sys::XACT_REPEATABLE_READ as i32 {
        raise_with_hint(
            WAIT_NEEDS_READ_COMMITTED,
            "jobs_claim cannot wait under REPEATABLE READ or SERIALIZABLE isolation".into(),
            "Its snapshot would never see the jobs it waits for; claim in a READ COMMITTED transaction, or pass wait => '0'.",
        );
    }
    let deadline = server_now().saturating_add(request.wait_micros);
    let mut sleep_snapshot = SleepSnapshot::new(Waiting::Claim);
    // Whether this claim has slept: its client may have gone meanwhile.
    let mut slept = false;
    let state = QueueState::of(request.queue);
    let waiter = state.waiter();
    // Listed in jobs.workers from its first sleep until it returns.
    let mut listed = None;
    let mut list = || {
        if listed.is_none() {
            let tenants = request.filter.scope().as_array();
            listed = Some(state.register_waiting_claim(
                &request.worker,
                tenants.as_deref(),
                server_now(),
            ));
        }
    };
    let mut passed_on: Option<u64> = None;
    // A token of the queue's rate limit this claim reserved, and from when it may spend it.
    let mut reserved_at: Option<pg_sys::TimestampTz> = None;
    loop {
        let seen = waiter.generation();
        let now = server_now();
        if let Some(at) = reserved_at.filter(|at| *at > now) {
            if now >= deadline {
                // The wait ran out before the reserved token came.
                rate::give_back_reservation(request.queue);
                return Vec::new();
            }
            // Woken before the reserved token is paid for: spending it now would beat the
            // limit, so sleep on until then (or the end of the wait).
            list();
            waiter.sleep(at.min(deadline), waiter.generation());
            continue;
        }
        if slept {
            // A client that went away while we slept (killed, its connection dropped) would
            // never receive what this attempt claims: the job would sit running for a whole
            // lease with an attempt spent on nothing.
            client::end_if_gone();
            still_installed();
        }
        let prepaid = u32::from(reserved_at.take().is_some());
        // Each attempt runs in a subtransaction that is rolled back when it claims nothing,
        // so the locks its statements took are gone while we sleep. (The attempt gives back
        // the tokens it did not use, the prepaid one included.)
        let (rows, probe) = in_subtransaction(|| {
            let (rows, probe) = attempt(request, now, prepaid);
            let keep = !rows.is_empty();
            ((rows, probe), keep)
        });
        if let Some(Probe {
            reserved: true,
            throttled_until: Some(at),
            ..
        }) = probe
        {
            reserved_at = Some(at);
        }
        if !rows.is_empty() || now >= deadline {
            if reserved_at.is_some() {
                rate::give_back_reservation(request.queue);
            }
            return rows;
        }
        let mut wake_at = deadline;
        if let Some(Probe {
            throttled_until: Some(at),
            ..
        }) = probe
        {
            // The rate limit holds the queue's due jobs back until then (a reserved token, or
            // the next one): the claim sleeps until it, without polling.
            wake_at = wake_at.min(at);
        } else if let Some(Probe {
            paused: false,
            earliest_run_at: Some(run_at),
            capped,
            ..
        }) = probe
        {
            if run_at > now {
                // Only a future job times the sleep.
                wake_at = wake_at.min(run_at);
            } else if passed_on != Some(seen) && (capped || !request.filter.takes_every_job()) {
                // A due job we could not take because of our filter (another kind, another
                // tenant), or did not reach (the attempt examined as many as it may): the
                // wake-up that brought us here may be for a waiter that can take it. Otherwise
                // a claim that takes every job passes nothing on: a due job it could not take
                // is held by a claim in flight, which takes it or, rolled back, wakes a waiter;
                // passing on woke every waiter in turn for each such job.
                waiter.pass_on();
                passed_on = Some(seen);
            }
        }
        sleep_snapshot.before_sleep();
        list();
        waiter.sleep(wake_at, seen);
        slept = true;
    }
}

/// Raises a clear error when pg_jobs was dropped (or changed version) while the claim slept:
/// its next attempt would otherwise fail on tables that no longer exist.
fn still_installed() {
    // A DROP EXTENSION committed while this claim slept is seen only once its invalidations are read.
    version::accept_invalidation_messages();
    match extension::is_current() {
        Ok(()) => {}
        Err(None) => raise_with_hint(
            VERSION_MISMATCH,
            "jobs_claim stopped waiting: pg_jobs was dropped from this database".into(),
            "Nothing was claimed. Create the extension again (CREATE EXTENSION pg_jobs) before claiming.",
        ),
        Err(Some(_)) => access::require_current_definitions("go on claiming"),
    }
}

/// The worker's wake-up backstop: wakes the claims waiting on queues whose earliest queued job
/// is due. Waiting claims time their own sleep to the delayed jobs they know of; this catches
/// the rest (jobs made due by other means, waits that began before a job was enqueued in a
/// transaction that had not told them yet).
pub fn wake_due_waiters(client: &SpiClient<'_>) {
    let now = server_now();
    let queues: Vec<String> = UNPAUSED_QUEUES
        .run(client, &[])
        .iter()
        .filter_map(|row| row.get("queue"))
        .collect();
    for queue in queues.iter().map(|q| QueueState::of(q)) {
        if !queue.has_waiters() {
            continue;
        }
        // From the floor, as a waiting claim's own probe: below it lie only jobs that claims in
        // flight hold (or that the floors' check finds and wakes for), and, while an old
        // snapshot holds vacuum back, a dead entry for every job claimed since.
        let earliest = super::probe_known(client, queue.queue()).and_then(|p| p.earliest_run_at);
        if earliest.is_some_and(|run_at| run_at <= now) {
            queue.wake_waiters();
        }
    }
}
