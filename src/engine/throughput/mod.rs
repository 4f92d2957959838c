//! The throughput history behind `jobs.throughput`: per queue and minute, jobs enqueued,
//! completed, failed and retried over the last 24 hours, without a write per job.
//!
//! Every job is counted in shared memory when its transaction commits (`runtime::totals`).
//! Once a minute the background worker of each database writes what each queue (and tenant)
//! counted since its last write into `jobs.throughput_minute`, one row per active queue and
//! tenant, and drops the rows older than 24 hours; the current minute, not written yet, is
//! read from shared memory by the view. So:
//!
//! - a clean stop (the worker's SIGTERM) writes the current minute first, and a restart loses
//!   nothing;
//! - a crash loses what the current minute counted so far (shared memory is made anew; the
//!   minutes already written stay);
//! - a prepared transaction counts when `COMMIT PREPARED` runs, in that minute, as the totals
//!   do;
//! - a count lands in the minute the worker's tick after it ran in, so within a tick of the
//!   minute it happened in;
//! - a database no worker serves (not in `pg_jobs.databases`) keeps no history: its counts
//!   stay the current minute's.

use pgrx::pg_sys::{INT8ARRAYOID, TEXTARRAYOID, TIMESTAMPTZOID};
use pgrx::spi::SpiClient;

use crate::engine::tenants::TenantScope;
use crate::runtime::totals::{self, Unflushed, Visible};
use crate::storage::{statement, timestamptz_arg, Statement};

static WRITE: Statement = statement!(
    throughput/write(minute: TIMESTAMPTZOID, queues: TEXTARRAYOID, tenant_hashes: INT8ARRAYOID,
        enqueued: INT8ARRAYOID, completed: INT8ARRAYOID, failed: INT8ARRAYOID,
        retried: INT8ARRAYOID) -> ()
);

static PURGE: Statement = statement!(throughput/purge(before: TIMESTAMPTZOID) -> ());

/// A minute in microseconds.
const MINUTE: i64 = 60_000_000;
/// How long the history keeps a minute.
const KEEP: i64 = 24 * 60 * MINUTE;

/// The minute `micros` (server clock, PostgreSQL epoch) falls in.
pub fn minute_of(micros: i64) -> i64 {
    micros - micros.rem_euclid(MINUTE)
}

/// A tenant hash as the history stores it: 0 for jobs without a tenant.
fn stored_hash(tenant: Option<u64>) -> i64 {
    tenant.map_or(0, |hash| hash as i64)
}

/// Writes what this database's keys counted since the last write into `minute`, and drops the
/// minutes older than 24 hours before `now`. Returns what it wrote, for
/// [`totals::mark_flushed`] once the transaction committed.
pub fn write(client: &SpiClient<'_>, minute: i64, now: i64) -> Vec<Unflushed> {
    let unflushed = totals::unflushed();
    if !unflushed.is_empty() {
        let column = |i: usize| -> Vec<i64> {
            unflushed
                .iter()
                .map(|u| i64::try_from(u.delta[i]).unwrap_or(i64::MAX))
                .collect()
        };
        let queues: Vec<String> = unflushed.iter().map(|u| u.queue.clone()).collect();
        let hashes: Vec<i64> = unflushed.iter().map(|u| stored_hash(u.tenant)).collect();
        WRITE.run(
            client,
            &[
                timestamptz_arg(minute),
                queues.into(),
                hashes.into(),
                column(0).into(),
                column(1).into(),
                column(2).into(),
                column(3).into(),
            ],
        );
    }
    PURGE.run(client, &[timestamptz_arg(now - KEEP)]);
    unflushed
}

/// The current minute of the history as `scope` may see it: per queue, enqueued, completed,
/// failed and retried since the worker's last write.
pub fn pending(scope: &TenantScope) -> Vec<(String, [i64; 4])> {
    let visible = match scope {
        TenantScope::All => Visible::All,
        TenantScope::Untenanted => Visible::Untenanted,
        TenantScope::Tenants(tenants) => Visible::Tenants(tenants),
    };
    totals::pending(visible)
        .into_iter()
        .map(|(queue, counts)| {
            (
                queue,
                counts.map(|count| i64::try_from(count).unwrap_or(i64::MAX)),
            )
        })
        .collect()
}

/// The hash the history stores for `tenant` (0 for none), as `jobs.tenant_hash` answers it.
pub fn tenant_hash(tenant: Option<&str>) -> i64 {
    stored_hash(tenant.map(totals::tenant_hash))
}
