//! Durable waits: a worker hands its running job back to wait for a signal (`jobs_await`),
//! without spending the attempt; `jobs_signal` in any transaction queues, when it commits,
//! every job of its tenant waiting for that signal, with its payload, and records the signal
//! for `keep`, so that an await that comes later answers at once. An await that is not
//! signalled before its timeout is queued again by the background worker (or `jobs_reclaim`),
//! flagged as timed out. The next claim of a woken job carries the signal's name, payload and
//! whether it timed out (`jobs.claimed`).
//!
//! # No lost wake-up, whichever commits first
//! Both take the signal's lock (per tenant and signal name, until they end): an await shared,
//! so awaits never wait for each other, and a signal exclusively. Each then decides under the
//! latest snapshot: the await looks for the recorded signal, the signal for the awaits
//! (`jobs.job_await`). Whichever takes the lock second sees what the first committed, since the
//! first held the lock until it committed: an await after a signal finds it recorded and
//! answers `queued`; a signal after an await finds its row and wakes it. A signal that rolls
//! back recorded and woke nothing. A prepared signal keeps its lock until `COMMIT PREPARED`,
//! also across a restart, so an await meanwhile waits for its outcome.
//!
//! A signal and a timeout racing for a job both delete its await row: the second waits for the
//! first and finds the row gone, so the job is woken once, by whichever came first.
//!
//! Signals are per tenant: a signal is its session's tenant's (as a new job would be), an
//! await is its job's tenant's, and neither sees another tenant's.

use pgrx::datum::{DatumWithOid, Interval};
use pgrx::pg_sys::{
    INT4OID, INT8OID, INTERVALOID, JSONBOID, TEXTARRAYOID, TEXTOID, TIMESTAMPTZOID, UUIDOID,
};
use pgrx::spi::SpiClient;

use crate::engine::model::Outcome;
use crate::engine::settle::{self, Held};
use crate::engine::tenants::TenantScope;
use crate::engine::transitions;
use crate::pg::clock::server_now;
use crate::pg::datum::Jsonb;
use crate::runtime::locks;
use crate::storage::{statement, timestamptz_arg, with_client, Statement};

static AWAIT: Statement = statement!(
    workflows/await(id: INT8OID, lease: UUIDOID, signal: TEXTOID, tenants: TEXTARRAYOID,
        state: TEXTOID) -> (queue, priority, run_at, id, group_key, tenant)
);

static RECORDED: Statement = statement!(
    workflows/recorded(tenant: TEXTOID, signal: TEXTOID, now: TIMESTAMPTZOID) -> (payload)
);

static WAKE_NOW: Statement = statement!(
    workflows/wake_now(id: INT8OID, payload: JSONBOID) -> (queue, priority, run_at, id)
);

static AWAIT_ROW: Statement = statement!(
    workflows/await_row(id: INT8OID, tenant: TEXTOID, signal: TEXTOID, now: TIMESTAMPTZOID,
        timeout: INTERVALOID) -> ()
);

static RECORD: Statement = statement!(
    workflows/record(tenant: TEXTOID, signal: TEXTOID, payload: JSONBOID, now: TIMESTAMPTZOID,
        keep: INTERVALOID) -> ()
);

static WAKE: Statement = statement!(
    workflows/wake(tenant: TEXTOID, signal: TEXTOID, payload: JSONBOID)
        -> (queue, priority, run_at, id)
);

static TIMEOUTS: Statement = statement!(
    workflows/timeouts(now: TIMESTAMPTZOID, batch_size: INT4OID, tenants: TEXTARRAYOID)
        -> (queue, priority, run_at, id)
);

static PURGE_SIGNALS: Statement = statement!(
    workflows/purge_signals(now: TIMESTAMPTZOID, batch_size: INT4OID) -> (purged)
);

/// Awaits or recorded signals one statement of the worker handles at most.
pub const BATCH: usize = 1000;

/// How the tables key a tenant: '' for none (no tenant is called that).
fn tenant_key(tenant: Option<&str>) -> &str {
    tenant.unwrap_or("")
}

/// Hands the held job back to wait for `signal` (at most `timeout`), without spending its
/// attempt: `waiting`, or `queued` when the signal is recorded already, `cancelled` or `lost`.
pub fn await_signal(held: Held, signal: &str, timeout: Interval, scope: &TenantScope) -> Outcome {
    with_client(|client| {
        let args = vec![held.0.into(), held.1.into(), signal.into()];
        let rows = match settle::run_held(client, &AWAIT, held, scope, args) {
            Ok(rows) => rows,
            Err(answer) => return answer,
        };
        // Its run ended: its group's slot is free.
        settle::move_groups_on(client, &rows);
        let row = rows.first().expect("workflows/await returned a row");
        let tenant: Option<String> = row.get("tenant");
        let tenant = tenant_key(tenant.as_deref());
        locks::lock_signal(locks::signal_key_hash(tenant, signal), false);
        let now = server_now();
        let recorded = RECORDED.run_latest(
            client,
            &[tenant.into(), signal.into(), timestamptz_arg(now)],
        );
        if let Some(record) = recorded.first() {
            let payload: Option<Jsonb> = record.get("payload");
            let woken = WAKE_NOW.run(client, &[held.0.into(), payload.into()]);
            transitions::queued_rows(&woken);
            return Outcome::Queued;
        }
        let args: [DatumWithOid; 5] = [
            held.0.into(),
            tenant.into(),
            signal.into(),
            timestamptz_arg(now),
            timeout.into(),
        ];
        AWAIT_ROW.run(client, &args);
        Outcome::Waiting
    })
}

/// Signals `signal` for `tenant`: when this transaction commits, every job of the tenant
/// waiting for it is queued with `payload`, and the signal is recorded for `keep` (not at all
/// when `keep` is zero: `keep` is checked, an exact length). Returns how many jobs it woke.
pub fn signal(signal: &str, payload: Option<Jsonb>, keep: Interval, tenant: Option<&str>) -> i64 {
    with_client(|client| {
        let tenant = tenant_key(tenant);
        locks::lock_signal(locks::signal_key_hash(tenant, signal), true);
        if keep.as_micros() != 0 {
            let args: [DatumWithOid; 5] = [
                tenant.into(),
                signal.into(),
                payload.into(),
                timestamptz_arg(server_now()),
                keep.into(),
            ];
            RECORD.run(client, &args);
        }
        let woken = WAKE.run_latest(client, &[tenant.into(), signal.into(), payload.into()]);
        transitions::queued_rows(&woken);
        woken.len() as i64
    })
}

/// Ends up to [`BATCH`] awaits (within `scope`) whose timeout passed: their jobs are queued
/// again, timed out. Returns how many.
pub fn fire_timeouts(client: &SpiClient<'_>, scope: &TenantScope) -> usize {
    let args: [DatumWithOid; 3] = [
        timestamptz_arg(server_now()),
        (BATCH as i32).into(),
        scope.param(),
    ];
    let woken = TIMEOUTS.run(client, &args);
    transitions::queued_rows(&woken);
    woken.len()
}

/// Ends every await (within `scope`) whose timeout passed; returns how many.
pub fn fire_all_timeouts(client: &SpiClient<'_>, scope: &TenantScope) -> usize {
    let mut total = 0;
    loop {
        let fired = fire_timeouts(client, scope);
        total += fired;
        if fired < BATCH {
            return total;
        }
    }
}

/// Deletes up to [`BATCH`] recorded signals that expired; returns how many.
pub fn purge_expired(client: &SpiClient<'_>) -> usize {
    let args: [DatumWithOid; 2] = [timestamptz_arg(server_now()), (BATCH as i32).into()];
    PURGE_SIGNALS
        .first::<i64>(client, &args, "purged")
        .unwrap_or(0) as usize
}
