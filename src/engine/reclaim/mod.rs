//! Reclaim (Rule 5): a running job whose lease has expired goes back to `queued`, or ends
//! `failed` with `lease expired on the final attempt` when no attempt is left. The lease token
//! stays, so a late holder can still finish ("done wins") until the job is claimed again.

use pgrx::pg_sys::{INT4OID, TEXTARRAYOID, TIMESTAMPTZOID};
use pgrx::spi::SpiClient;

use crate::engine::dead_letter;
use crate::engine::groups::{self, GroupRef};
use crate::engine::model::{JobState, Position};
use crate::engine::tenants::TenantScope;
use crate::engine::transitions::{self, Settled};
use crate::engine::workflows::{dependencies, signals};
use crate::pg::clock::server_now;
use crate::storage::index_walk::TimeWindow;
use crate::storage::{statement, timestamptz_arg, with_client, Statement};

/// Jobs one reclaim statement takes at most.
pub const BATCH: usize = 1000;

static RECLAIM: Statement = statement!(
    reclaim/reclaim(now: TIMESTAMPTZOID, batch_size: INT4OID, tenants: TEXTARRAYOID,
        from: TIMESTAMPTZOID, until: TIMESTAMPTZOID)
        -> (id, queue, state, priority, run_at, group_key, tenant, dependents)
);

/// The window of at most `storage::index_walk::WINDOW_ENTRIES` entries of `job_lease_idx` that
/// starts at `from`: the worker's reclaim takes one at a time. `None` when the index is not
/// there.
pub fn lease_window(from: i64) -> Option<TimeWindow> {
    TimeWindow::starting_at(c"job", c"job_lease_idx", from)
}

/// Takes back up to `limit` (at most [`BATCH`]) expired leases within `scope` whose
/// `lease_until` lies in `window`: queued again while attempts remain, else failed (and
/// dead-lettered). Returns how many it took back.
pub fn reclaim_batch(
    client: &SpiClient<'_>,
    scope: &TenantScope,
    window: TimeWindow,
    limit: usize,
) -> usize {
    let rows = RECLAIM.run(
        client,
        &[
            timestamptz_arg(server_now()),
            (limit.min(BATCH) as i32).into(),
            scope.param(),
            timestamptz_arg(window.from),
            timestamptz_arg(window.until),
        ],
    );
    let mut failed = Vec::new();
    // Dependents of jobs that failed for good are cancelled before any group's lock is waited
    // for (engine::workflows::dependencies, lock order).
    dependencies::parents_ended(
        client,
        rows.iter()
            .filter(|row| {
                row.expect::<String>("state") == JobState::Failed.as_str()
                    && row.get::<bool>("dependents") == Some(true)
            })
            .map(|row| (row.expect::<i64>("id"), JobState::Failed))
            .collect(),
    );
    // The groups' slots are free: their next jobs may run.
    groups::move_on(
        client,
        rows.iter()
            .filter_map(|row| GroupRef::of_row(&row))
            .collect(),
    );
    for row in rows.iter() {
        if row.expect::<String>("state") == JobState::Failed.as_str() {
            transitions::job_settled(&row, Settled::Failed);
            failed.push(row.expect::<i64>("id"));
        } else {
            transitions::job_settled(&row, Settled::Retried);
            let queue: String = row.expect("queue");
            transitions::job_queued(&queue, Position::from_row(&row));
        }
    }
    let total = rows.len();
    dead_letter::copy_failed(client, failed);
    total
}

/// Reclaims every expired lease within `scope` now, and ends every await whose timeout passed
/// (`engine::workflows::signals`); returns how many jobs it took back.
pub fn reclaim_all(scope: &TenantScope) -> usize {
    with_client(|client| {
        let mut total = signals::fire_all_timeouts(client, scope);
        loop {
            let reclaimed = reclaim_batch(client, scope, TimeWindow::ALL, BATCH);
            total += reclaimed;
            if reclaimed < BATCH {
                return total;
            }
        }
    })
}
