//! Operating on jobs by id: `jobs_cancel`, `jobs_retry`, `jobs_reclaim`, `jobs_get` and
//! `jobs_list`.

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::datum::JobRow;
use crate::errors::{
    check_range, raise, raise_with_hint, required, BAD_ARGUMENT, UNKNOWN_JOB, WRONG_STATE,
};
use crate::floor::Key;
use crate::locks;
use crate::queue::check_queue_name;
use crate::settle::dead_letter;
use crate::spi::{server_now, timestamptz_arg, with_client, Statement};
use crate::wakeup;

static JOB_STATE_FOR_UPDATE: Statement = Statement {
    sql: include_str!("../sql/job_state_for_update.sql"),
    args: &[pg_sys::INT8OID],
};

static CANCEL: Statement = Statement {
    sql: include_str!("../sql/cancel.sql"),
    args: &[pg_sys::INT8OID, pg_sys::TIMESTAMPTZOID],
};

static RETRY: Statement = Statement {
    sql: include_str!("../sql/retry.sql"),
    args: &[pg_sys::INT8OID, pg_sys::TIMESTAMPTZOID],
};

static RECLAIM: Statement = Statement {
    sql: include_str!("../sql/reclaim.sql"),
    args: &[pg_sys::TIMESTAMPTZOID, pg_sys::INT4OID],
};

static GET: Statement = Statement {
    sql: "SELECT j FROM jobs.job j WHERE j.id = $1",
    args: &[pg_sys::INT8OID],
};

static LIST: Statement = Statement {
    sql: include_str!("../sql/list.sql"),
    args: &[
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::INT4OID,
        pg_sys::INT8OID,
    ],
};

/// The states a job can be in, as `jobs_list` accepts them.
pub const STATES: [&str; 5] = ["queued", "running", "succeeded", "failed", "cancelled"];

/// Most rows one `jobs_list` call returns.
pub const MAX_LIST: i64 = 10_000;

/// Locks job `id`'s row and returns its latest committed state and its queue, raising P0002
/// when there is none.
fn lock_job_row(client: &pgrx::spi::SpiClient<'_>, id: i64) -> (String, String) {
    let rows = JOB_STATE_FOR_UPDATE.run(client, &[id.into()]);
    match rows
        .first()
        .and_then(|row| Some((row.get::<String>(1)?, row.get::<String>(2)?)))
    {
        Some(found) => found,
        None => raise(UNKNOWN_JOB, format!("no job has id {id}")),
    }
}

/// Cancels a queued or running job at once and returns its state afterwards; a finished job
/// is left as it is. A running holder learns it at its next heartbeat or settle call.
#[pg_extern(volatile, parallel_unsafe)]
fn jobs_cancel(id: Option<i64>) -> String {
    let id = required(id, "id");
    // A queued job may be in the middle of being claimed: its job lock makes us wait for that
    // claim (and makes later claims skip the job) instead of a claim waiting on our row lock.
    locks::lock_job(id);
    with_client(|client| {
        let (state, queue) = lock_job_row(client, id);
        wakeup::job_locked(&queue);
        if state != "queued" && state != "running" {
            return state;
        }
        CANCEL.run(client, &[id.into(), timestamptz_arg(server_now())]);
        "cancelled".to_owned()
    })
}

/// Brings a failed or cancelled job back to queued at `run_at`, with fresh attempts.
#[pg_extern(volatile, parallel_unsafe)]
fn jobs_retry(
    id: Option<i64>,
    run_at: default!(Option<TimestampWithTimeZone>, "now()"),
) -> &'static str {
    let id = required(id, "id");
    let run_at = required(run_at, "run_at");
    with_client(|client| {
        let (state, _) = lock_job_row(client, id);
        if state != "failed" && state != "cancelled" {
            raise_with_hint(
                WRONG_STATE,
                format!("job {id} is {state}; only failed or cancelled jobs can be retried"),
                "Cancel it first if it must start over.",
            );
        }
        let rows = RETRY.run(client, &[id.into(), run_at.into()]);
        let row = rows.first().expect("retry.sql updates the locked job");
        let queue: String = row.get(1).expect("retry.sql returns the queue");
        let priority: i16 = row.get(2).expect("retry.sql returns the priority");
        wakeup::jobs_queued(
            &queue,
            1,
            Key {
                priority,
                run_at: i64::from(run_at),
                id,
            },
        );
        "queued"
    })
}

/// Takes back up to `batch` expired leases: queued again while attempts remain, else failed
/// (and dead-lettered). Returns how many it took back; used by `jobs_reclaim` and the worker.
pub fn reclaim_batch(client: &pgrx::spi::SpiClient<'_>, batch: i32) -> usize {
    let table = RECLAIM.run(client, &[timestamptz_arg(server_now()), batch.into()]);
    let mut failed = Vec::new();
    let mut requeued = 0;
    for row in table.iter() {
        let id: i64 = row.get(1).expect("reclaim.sql returns ids");
        let queue: String = row.get(2).expect("reclaim.sql returns queues");
        let state: String = row.get(3).expect("reclaim.sql returns states");
        if state == "failed" {
            failed.push(id);
        } else {
            wakeup::jobs_queued(&queue, 1, Key::from_row(&row, 4, 5, 1));
            requeued += 1;
        }
    }
    let total = failed.len() + requeued;
    dead_letter(client, failed);
    total
}

/// Reclaims every expired lease now and returns how many jobs it took back.
#[pg_extern(volatile, parallel_unsafe)]
fn jobs_reclaim() -> i32 {
    const BATCH: i32 = 1000;
    with_client(|client| {
        let mut total: i32 = 0;
        loop {
            let reclaimed = reclaim_batch(client, BATCH);
            total = total.saturating_add(reclaimed as i32);
            if reclaimed < BATCH as usize {
                return total;
            }
        }
    })
}

/// The job with this id, or NULL.
#[pg_extern(volatile, parallel_restricted)]
fn jobs_get(id: Option<i64>) -> Option<JobRow> {
    let id = required(id, "id");
    // SAFETY: reading the current context pointer.
    let context = unsafe { pg_sys::CurrentMemoryContext };
    with_client(|client| GET.collect::<JobRow>(client, &[id.into()], context).pop())
}

/// Jobs newest first, filtered by queue, state and kind; pass the last id of a page as
/// `before_id` to get the next one.
#[pg_extern(volatile, parallel_restricted)]
fn jobs_list(
    queue: default!(Option<&str>, "NULL"),
    state: default!(Option<&str>, "NULL"),
    kind: default!(Option<&str>, "NULL"),
    limit: default!(Option<i32>, 100),
    before_id: default!(Option<i64>, "NULL"),
) -> SetOfIterator<'static, JobRow> {
    if let Some(queue) = queue {
        check_queue_name(queue);
    }
    if let Some(state) = state {
        if !STATES.contains(&state) {
            raise(
                BAD_ARGUMENT,
                format!("state must be one of {}, got '{state}'", STATES.join(", ")),
            );
        }
    }
    let limit = required(limit, "limit");
    check_range(limit.into(), "limit", 1, MAX_LIST);
    // SAFETY: reading the current context pointer.
    let context = unsafe { pg_sys::CurrentMemoryContext };
    let rows = with_client(|client| {
        let args: [DatumWithOid; 5] = [
            queue.into(),
            state.into(),
            kind.into(),
            limit.into(),
            before_id.into(),
        ];
        LIST.collect::<JobRow>(client, &args, context)
    });
    SetOfIterator::new(rows)
}
