//! Settling a claimed job: `jobs_complete` (one or many), `jobs_fail` and `jobs_release`.
//!
//! Every call presents `(id, lease)`. It acts only when that lease is the job's current one;
//! otherwise it changes nothing and answers `cancelled` (the job was cancelled under this
//! lease) or `lost` (another claim, a settle, or a purge came first).

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::datum::Jsonb;
use crate::errors::{check_interval, raise, required, BAD_ARGUMENT, DAY};
use crate::spi::{server_now, timestamptz_arg, with_client, Statement};
use crate::wakeup;

static COMPLETE: Statement = Statement {
    sql: include_str!("../sql/complete.sql"),
    args: &[
        pg_sys::INT8OID,
        pg_sys::UUIDOID,
        pg_sys::JSONBOID,
        pg_sys::TIMESTAMPTZOID,
    ],
};

static COMPLETE_MANY: Statement = Statement {
    sql: include_str!("../sql/complete_many.sql"),
    args: &[
        pg_sys::INT8ARRAYOID,
        pg_sys::UUIDARRAYOID,
        pg_sys::TIMESTAMPTZOID,
    ],
};

static LOST_OR_CANCELLED: Statement = Statement {
    sql: include_str!("../sql/lost_or_cancelled.sql"),
    args: &[pg_sys::INT8ARRAYOID, pg_sys::UUIDARRAYOID],
};

static FAIL: Statement = Statement {
    sql: include_str!("../sql/fail.sql"),
    args: &[
        pg_sys::INT8OID,
        pg_sys::UUIDOID,
        pg_sys::TEXTOID,
        pg_sys::INTERVALOID,
        pg_sys::BOOLOID,
        pg_sys::TIMESTAMPTZOID,
    ],
};

static RELEASE: Statement = Statement {
    sql: include_str!("../sql/release.sql"),
    args: &[
        pg_sys::INT8OID,
        pg_sys::UUIDOID,
        pg_sys::TEXTOID,
        pg_sys::INTERVALOID,
        pg_sys::TIMESTAMPTZOID,
    ],
};

static DEAD_LETTER: Statement = Statement {
    sql: include_str!("../sql/dead_letter.sql"),
    args: &[pg_sys::INT8ARRAYOID],
};

/// Longest `retry_in` accepted: far enough for any schedule, small enough to stay a timestamp.
const MAX_RETRY_IN_DAYS: i128 = 100 * 365;

/// The answer for a settle call that changed nothing.
pub fn lost_or_cancelled(
    client: &pgrx::spi::SpiClient<'_>,
    id: i64,
    lease: pgrx::Uuid,
) -> &'static str {
    let cancelled = LOST_OR_CANCELLED.first::<i64>(client, &[vec![id].into(), vec![lease].into()]);
    if cancelled.is_some() {
        "cancelled"
    } else {
        "lost"
    }
}

/// Copies jobs that just ended failed into their dead-letter queues and wakes those queues.
pub fn dead_letter(client: &pgrx::spi::SpiClient<'_>, failed: Vec<i64>) {
    if failed.is_empty() {
        return;
    }
    // SAFETY: reading the current context pointer.
    let context = unsafe { pg_sys::CurrentMemoryContext };
    let queues: Vec<String> = DEAD_LETTER.collect(client, &[failed.into()], context);
    for queue in &queues {
        wakeup::queue_changed(queue, 1);
    }
}

/// Checks a `retry_in` argument: at least 0.
pub fn check_retry_in(retry_in: &Interval) {
    check_interval(
        retry_in,
        "retry_in",
        false,
        MAX_RETRY_IN_DAYS * DAY,
        "at least 0 and at most 100 years",
    );
}

/// Marks a job succeeded, storing `result`: `succeeded`, `cancelled` or `lost`.
#[pg_extern(volatile, parallel_unsafe, name = "jobs_complete")]
fn jobs_complete(
    id: Option<i64>,
    lease: Option<pgrx::Uuid>,
    result: default!(Option<Jsonb>, "NULL"),
) -> &'static str {
    let id = required(id, "id");
    let lease = required(lease, "lease");
    with_client(|client| {
        let args: [DatumWithOid; 4] = [
            id.into(),
            lease.into(),
            result.into(),
            timestamptz_arg(server_now()),
        ];
        match COMPLETE.first::<bool>(client, &args) {
            Some(_) => "succeeded",
            None => lost_or_cancelled(client, id, lease),
        }
    })
}

/// Marks many jobs succeeded in one call; one `(id, outcome)` row per pair, in input order.
#[pg_extern(volatile, parallel_unsafe, name = "jobs_complete")]
fn jobs_complete_many(
    ids: Option<Vec<Option<i64>>>,
    leases: Option<Vec<Option<pgrx::Uuid>>>,
) -> TableIterator<'static, (name!(id, i64), name!(outcome, String))> {
    let ids = required(ids, "ids");
    let leases = required(leases, "leases");
    if ids.len() != leases.len() {
        raise(
            BAD_ARGUMENT,
            format!(
                "ids and leases must have the same length, got {} ids and {} leases",
                ids.len(),
                leases.len()
            ),
        );
    }
    let ids: Vec<i64> = ids
        .into_iter()
        .enumerate()
        .map(|(i, id)| required(id, &format!("ids[{}]", i + 1)))
        .collect();
    let leases: Vec<pgrx::Uuid> = leases
        .into_iter()
        .enumerate()
        .map(|(i, lease)| required(lease, &format!("leases[{}]", i + 1)))
        .collect();
    let outcomes = with_client(|client| {
        // SAFETY: reading the current context pointer.
        let context = unsafe { pg_sys::CurrentMemoryContext };
        let args: [DatumWithOid; 3] = [
            ids.clone().into(),
            leases.clone().into(),
            timestamptz_arg(server_now()),
        ];
        let done: std::collections::HashSet<i64> = COMPLETE_MANY
            .collect::<i64>(client, &args, context)
            .into_iter()
            .collect();
        let missed: Vec<usize> = (0..ids.len())
            .filter(|&i| !done.contains(&ids[i]))
            .collect();
        let cancelled: std::collections::HashSet<i64> = if missed.is_empty() {
            Default::default()
        } else {
            let missed_ids: Vec<i64> = missed.iter().map(|&i| ids[i]).collect();
            let missed_leases: Vec<pgrx::Uuid> = missed.iter().map(|&i| leases[i]).collect();
            LOST_OR_CANCELLED
                .collect::<i64>(client, &[missed_ids.into(), missed_leases.into()], context)
                .into_iter()
                .collect()
        };
        ids.iter()
            .map(|id| {
                let outcome = if done.contains(id) {
                    "succeeded"
                } else if cancelled.contains(id) {
                    "cancelled"
                } else {
                    "lost"
                };
                (*id, outcome.to_owned())
            })
            .collect::<Vec<_>>()
    });
    TableIterator::new(outcomes)
}

/// Records a failed attempt: `queued` (a retry is scheduled), `failed`, `cancelled` or `lost`.
#[pg_extern(volatile, parallel_unsafe)]
fn jobs_fail(
    id: Option<i64>,
    lease: Option<pgrx::Uuid>,
    error: Option<&str>,
    retry_in: default!(Option<Interval>, "NULL"),
    retry: default!(Option<bool>, "true"),
) -> String {
    let id = required(id, "id");
    let lease = required(lease, "lease");
    let error = required(error, "error");
    let retry = required(retry, "retry");
    if let Some(retry_in) = &retry_in {
        check_retry_in(retry_in);
    }
    with_client(|client| {
        let now = server_now();
        let args: [DatumWithOid; 6] = [
            id.into(),
            lease.into(),
            error.into(),
            retry_in.into(),
            retry.into(),
            timestamptz_arg(now),
        ];
        let table = FAIL.run(client, &args);
        if table.is_empty() {
            return lost_or_cancelled(client, id, lease).to_owned();
        }
        let row = table.first();
        let state: String = row
            .get(1)
            .ok()
            .flatten()
            .expect("fail.sql returns the state");
        let run_at: i64 = row
            .get::<TimestampWithTimeZone>(2)
            .ok()
            .flatten()
            .map(i64::from)
            .expect("fail.sql returns run_at");
        let queue: String = row
            .get(3)
            .ok()
            .flatten()
            .expect("fail.sql returns the queue");
        if state == "failed" {
            dead_letter(client, vec![id]);
        } else if run_at <= now {
            wakeup::queue_changed(&queue, 1);
        } else {
            wakeup::job_delayed(&queue, run_at);
        }
        state
    })
}

/// Hands a job back without spending its attempt: `queued`, `cancelled` or `lost`.
#[pg_extern(volatile, parallel_unsafe)]
fn jobs_release(
    id: Option<i64>,
    lease: Option<pgrx::Uuid>,
    reason: default!(Option<&str>, "NULL"),
    retry_in: default!(Option<Interval>, "'0'"),
) -> &'static str {
    let id = required(id, "id");
    let lease = required(lease, "lease");
    let retry_in = required(retry_in, "retry_in");
    check_retry_in(&retry_in);
    with_client(|client| {
        let now = server_now();
        let args: [DatumWithOid; 5] = [
            id.into(),
            lease.into(),
            reason.into(),
            retry_in.into(),
            timestamptz_arg(now),
        ];
        let table = RELEASE.run(client, &args);
        if table.is_empty() {
            return lost_or_cancelled(client, id, lease);
        }
        let row = table.first();
        let queue: String = row
            .get(1)
            .ok()
            .flatten()
            .expect("release.sql returns the queue");
        let run_at: i64 = row
            .get::<TimestampWithTimeZone>(2)
            .ok()
            .flatten()
            .map(i64::from)
            .expect("release.sql returns run_at");
        if run_at <= now {
            wakeup::queue_changed(&queue, 1);
        } else {
            wakeup::job_delayed(&queue, run_at);
        }
        "queued"
    })
}
