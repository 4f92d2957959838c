//! Claims that wait for work: between attempts the claim sleeps on its queue's wake-up slot
//! until a commit makes a job claimable, a delayed job comes due, or the wait runs out.

use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use super::{attempt, ClaimRequest, Probe, PROBE};
use crate::pg::clock::server_now;
use crate::pg::datum::ClaimedRow;
use crate::pg::errors::{raise_with_hint, WAIT_NEEDS_READ_COMMITTED};
use crate::pg::subtransaction::in_subtransaction;
use crate::runtime::wakeup::{self, Waiter};
use crate::storage::Statement;

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
    let waiter = Waiter::new(request.queue);
    loop {
        let seen = waiter.generation();
        let now = server_now();
        // Each attempt runs in a subtransaction that is rolled back when it claims nothing,
        // so the locks its statements took are gone while we sleep.
        let (rows, probe) = in_subtransaction(|| {
            let (rows, probe) = attempt(request, now);
            let keep = !rows.is_empty();
            ((rows, probe), keep)
        });
        if !rows.is_empty() || now >= deadline {
            return rows;
        }
        let mut wake_at = deadline;
        if let Some(Probe {
            paused: false,
            earliest_run_at: Some(run_at),
        }) = probe
        {
            // A due job we could not take (held by another claimer, another kind) must not
            // make us spin; only a future one times the sleep.
            if run_at > now {
                wake_at = wake_at.min(run_at);
            }
        }
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
