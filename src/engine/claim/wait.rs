//! Claims that wait for work: between attempts the claim sleeps on its queue's wake-up slot
//! until a commit makes a job claimable, a delayed job comes due, or the wait runs out.
//!
//! A sleeping claim holds no locks (each attempt runs in a subtransaction rolled back when it
//! claims nothing) and, when the statement is nothing but the claim, no snapshot either: it
//! stops advertising its xmin for the sleep (see `pg::snapshot`), so an idle worker pool does
//! not hold VACUUM back. A wake-up this claim cannot use (a job of another kind, or tenant) is
//! passed on to another waiter rather than lost.

use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use super::{attempt, rate, ClaimRequest, Probe, PROBE};
use crate::pg::clock::server_now;
use crate::pg::datum::ClaimedRow;
use crate::pg::errors::{raise_with_hint, WAIT_NEEDS_READ_COMMITTED};
use crate::pg::snapshot;
use crate::pg::subtransaction::in_subtransaction;
use crate::runtime::waiting_claims;
use crate::runtime::wakeup::{self, Waiter};
use crate::storage::{with_client, Statement};

static OWN_FUNCTION: Statement = Statement {
    name: "claim/own_function",
    sql: include_str!("own_function.sql"),
    params: &[],
    columns: &["function"],
};

thread_local! {
    /// The oid of jobs_claim in this session's database, once looked up.
    static CLAIM_FUNCTION: std::cell::Cell<Option<pg_sys::Oid>> = const { std::cell::Cell::new(None) };
}

/// The oid of `jobs_claim` (looked up once per session).
fn claim_function() -> Option<pg_sys::Oid> {
    if let Some(oid) = CLAIM_FUNCTION.with(std::cell::Cell::get) {
        return Some(oid);
    }
    // In a subtransaction rolled back at once, so the catalog locks the lookup takes are not
    // held through the sleep that follows.
    let oid: Option<pg_sys::Oid> = in_subtransaction(|| {
        let oid = with_client(|client| OWN_FUNCTION.first(client, &[], "function"));
        (oid, false)
    });
    CLAIM_FUNCTION.with(|cell| cell.set(oid));
    oid
}

static UNPAUSED_QUEUES: Statement = Statement {
    name: "claim/unpaused_queues",
    sql: include_str!("unpaused_queues.sql"),
    params: &[],
    columns: &["queue"],
};

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
    // Whether nothing in the statement reads with its snapshot after this call returns, so the
    // sleep need not hold it.
    let release_snapshot = claim_function().is_some_and(snapshot::statement_is_lone_call);
    let waiter = Waiter::new(request.queue);
    // Listed in jobs.workers from its first sleep until it returns.
    let mut listed: Option<waiting_claims::Registration> = None;
    let mut list = || {
        if listed.is_none() {
            let tenants = request.filter.scope().as_array();
            listed = Some(waiting_claims::register(
                request.queue,
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
            ..
        }) = probe
        {
            if run_at > now {
                // Only a future job times the sleep.
                wake_at = wake_at.min(run_at);
            } else if passed_on != Some(seen) {
                // A due job we could not take (another kind, another tenant, or held by a
                // claim in flight): the wake-up that brought us here may be for a waiter that
                // can take it.
                waiter.pass_on();
                passed_on = Some(seen);
            }
        }
        if release_snapshot {
            snapshot::stop_advertising_xmin();
        }
        list();
        waiter.sleep(wake_at, seen);
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
    for queue in queues.iter().filter(|q| wakeup::has_waiters(q)) {
        let earliest = PROBE
            .run(client, &[queue.as_str().into()])
            .first()
            .and_then(|row| row.get::<TimestampWithTimeZone>("earliest_run_at"))
            .map(i64::from);
        if earliest.is_some_and(|run_at| run_at <= now) {
            wakeup::wake_queue(queue);
        }
    }
}
