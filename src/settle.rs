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
use std::collections::{HashMap, HashSet};

use pgrx::spi::SpiClient;

use crate::floor::Key;
use crate::locks::lock_job;
use crate::spi::{server_now, timestamptz_arg, with_client, Rows, Statement};
use crate::wakeup;

static COMPLETE: Statement = Statement {
    sql: include_str!("../sql/complete.sql"),
    args: &[
        pg_sys::INT8OID,
        pg_sys::UUIDOID,
        pg_sys::JSONBOID,
        pg_sys::TIMESTAMPTZOID,
        pg_sys::TEXTOID,
    ],
};

static COMPLETE_MANY: Statement = Statement {
    sql: include_str!("../sql/complete_many.sql"),
    args: &[
        pg_sys::INT8ARRAYOID,
        pg_sys::UUIDARRAYOID,
        pg_sys::TIMESTAMPTZOID,
        pg_sys::TEXTOID,
    ],
};

static HELD_STATE: Statement = Statement {
    sql: include_str!("../sql/held_state.sql"),
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
        pg_sys::TEXTOID,
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
        pg_sys::TEXTOID,
    ],
};

static DEAD_LETTER: Statement = Statement {
    sql: include_str!("../sql/dead_letter.sql"),
    args: &[pg_sys::INT8ARRAYOID],
};

/// Longest `retry_in` accepted: far enough for any schedule, small enough to stay a timestamp.
const MAX_RETRY_IN_DAYS: i128 = 100 * 365;

/// A settle call's handle on a job: its id and the lease the caller presents.
type Held = (i64, pgrx::Uuid);

/// The state and queue of each job among `held` whose current lease is the one presented.
fn held_states(client: &SpiClient<'_>, held: &[Held]) -> HashMap<Held, (String, String)> {
    let (ids, leases): (Vec<i64>, Vec<pgrx::Uuid>) = held.iter().copied().unzip();
    HELD_STATE
        .run(client, &[ids.into(), leases.into()])
        .iter()
        .filter_map(|row| {
            Some((
                (row.get::<i64>(1)?, row.get::<pgrx::Uuid>(3)?),
                (row.get::<String>(2)?, row.get::<String>(4)?),
            ))
        })
        .collect()
}

/// Takes the job lock of a job a reclaim put back in the queue, before acting on it.
fn lock_reclaimed(id: i64, queue: &str) {
    lock_job(id);
    wakeup::job_locked(queue);
}

/// Runs a settle statement (whose last argument is the state it acts on) for the job held
/// under (id, lease). First for a running job: the common case, which never meets a claim. If
/// a reclaim put the job back in the queue under this lease and no claim followed, again for
/// the queued job, under its job lock so no claim is taking it meanwhile ("done wins").
/// Returns the rows of the run that acted, or the answer to a call that changed nothing.
pub fn run_held(
    client: &SpiClient<'_>,
    statement: &'static Statement,
    id: i64,
    lease: pgrx::Uuid,
    mut args: Vec<DatumWithOid<'_>>,
) -> Result<Rows, &'static str> {
    args.push("running".into());
    let rows = statement.run(client, &args);
    if rows.len() > 0 {
        return Ok(rows);
    }
    let held = held_states(client, &[(id, lease)]).remove(&(id, lease));
    match held.as_ref().map(|(state, queue)| (state.as_str(), queue)) {
        Some(("queued", queue)) => {
            lock_reclaimed(id, queue);
            *args.last_mut().expect("the state argument") = "queued".into();
            let rows = statement.run(client, &args);
            if rows.len() > 0 {
                return Ok(rows);
            }
            // A claim took it first: the lease is stale now, unless it was cancelled.
            match held_states(client, &[(id, lease)]).remove(&(id, lease)) {
                Some((state, _)) if state == "cancelled" => Err("cancelled"),
                _ => Err("lost"),
            }
        }
        Some(("cancelled", _)) => Err("cancelled"),
        _ => Err("lost"),
    }
}

/// Copies jobs that just ended failed into their dead-letter queues and wakes those queues.
pub fn dead_letter(client: &pgrx::spi::SpiClient<'_>, failed: Vec<i64>) {
    if failed.is_empty() {
        return;
    }
    for row in DEAD_LETTER.run(client, &[failed.into()]).iter() {
        let queue: String = row.get(1).expect("dead_letter.sql returns the queue");
        wakeup::jobs_queued(&queue, 1, Key::from_row(&row, 3, 4, 2));
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
#[pg_extern(volatile, parallel_unsafe)]
fn jobs_complete(
    id: Option<i64>,
    lease: Option<pgrx::Uuid>,
    result: default!(Option<Jsonb>, "NULL"),
) -> &'static str {
    let id = required(id, "id");
    let lease = required(lease, "lease");
    with_client(|client| {
        let args = vec![
            id.into(),
            lease.into(),
            result.into(),
            timestamptz_arg(server_now()),
        ];
        match run_held(client, &COMPLETE, id, lease, args) {
            Ok(_) => "succeeded",
            Err(answer) => answer,
        }
    })
}

/// Marks many jobs succeeded in one call; one `(id, outcome)` row per pair, in input order.
/// A function of its own name, not an overload of `jobs_complete`: drivers that send untyped
/// parameters (node-postgres, psycopg with strings) must resolve every call without casts.
#[pg_extern(volatile, parallel_unsafe)]
fn jobs_complete_batch(
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
    let pairs: Vec<Held> = ids.into_iter().zip(leases).collect();
    let outcomes = with_client(|client| {
        let now = server_now();
        let complete = |held: &[Held], state: &str| -> HashSet<Held> {
            let (ids, leases): (Vec<i64>, Vec<pgrx::Uuid>) = held.iter().copied().unzip();
            let args: [DatumWithOid; 4] = [
                ids.into(),
                leases.into(),
                timestamptz_arg(now),
                state.into(),
            ];
            COMPLETE_MANY
                .run(client, &args)
                .iter()
                .filter_map(|row| Some((row.get::<i64>(1)?, row.get::<pgrx::Uuid>(2)?)))
                .collect()
        };
        let missed = |done: &HashSet<Held>| -> Vec<Held> {
            pairs
                .iter()
                .copied()
                .filter(|pair| !done.contains(pair))
                .collect()
        };
        let mut done = complete(&pairs, "running");
        let mut states = held_states(client, &missed(&done));
        // Jobs a reclaim put back in the queue under these leases: take their job locks (in id
        // order, against deadlocks) and settle them as queued, as the single form does.
        let mut reclaimed: Vec<(Held, &str)> = states
            .iter()
            .filter(|(_, (state, _))| state.as_str() == "queued")
            .map(|(pair, (_, queue))| (*pair, queue.as_str()))
            .collect();
        if !reclaimed.is_empty() {
            reclaimed.sort_unstable();
            reclaimed
                .iter()
                .for_each(|((id, _), queue)| lock_reclaimed(*id, queue));
            let reclaimed: Vec<Held> = reclaimed.into_iter().map(|(pair, _)| pair).collect();
            done.extend(complete(&reclaimed, "queued"));
            states = held_states(client, &missed(&done));
        }
        pairs
            .iter()
            .map(|pair| {
                let outcome = if done.contains(pair) {
                    "succeeded"
                } else if states
                    .get(pair)
                    .is_some_and(|(state, _)| state == "cancelled")
                {
                    "cancelled"
                } else {
                    "lost"
                };
                (pair.0, outcome.to_owned())
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
        let args = vec![
            id.into(),
            lease.into(),
            error.into(),
            retry_in.into(),
            retry.into(),
            timestamptz_arg(now),
        ];
        let table = match run_held(client, &FAIL, id, lease, args) {
            Ok(rows) => rows,
            Err(answer) => return answer.to_owned(),
        };
        let row = table.first().expect("fail.sql returned a row");
        let state: String = row.get(1).expect("fail.sql returns the state");
        let queue: String = row.get(3).expect("fail.sql returns the queue");
        if state == "failed" {
            dead_letter(client, vec![id]);
        } else {
            wakeup::jobs_queued(&queue, 1, Key::from_row(&row, 4, 2, 5));
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
        let args = vec![
            id.into(),
            lease.into(),
            reason.into(),
            retry_in.into(),
            timestamptz_arg(now),
        ];
        let table = match run_held(client, &RELEASE, id, lease, args) {
            Ok(rows) => rows,
            Err(answer) => return answer,
        };
        let row = table.first().expect("release.sql returned a row");
        let queue: String = row.get(1).expect("release.sql returns the queue");
        wakeup::jobs_queued(&queue, 1, Key::from_row(&row, 3, 2, 4));
        "queued"
    })
}
