//! Producing many jobs with options of their own (each its queue, kind, headers, ...) in one
//! statement: the door the schedules' run goes through, so that the jobs of a thousand due
//! schedules cost one insert, and every one of them is reported to `transitions` like any
//! other enqueued job.

use std::collections::BTreeMap;

use pgrx::pg_sys::{INT2ARRAYOID, INT4ARRAYOID, JSONBARRAYOID, TEXTARRAYOID, TIMESTAMPTZARRAYOID};
use pgrx::spi::SpiClient;

use crate::engine::model::Position;
use crate::engine::queues::unknown_queue;
use crate::engine::transitions;
use crate::pg::datum::Jsonb;
use crate::runtime::locks;
use crate::storage::{param, Statement};

static INSERT_MANY: Statement = Statement {
    name: "enqueue/insert_many",
    sql: include_str!("insert_many.sql"),
    params: &[
        param("queues", TEXTARRAYOID),
        param("payloads", JSONBARRAYOID),
        param("kinds", TEXTARRAYOID),
        param("run_ats", TIMESTAMPTZARRAYOID),
        param("priorities", INT2ARRAYOID),
        param("max_attempts", INT4ARRAYOID),
        param("headers", JSONBARRAYOID),
        param("tenants", TEXTARRAYOID),
    ],
    columns: &["id", "queue", "priority", "run_at"],
};

/// One job of [`enqueue_many`], its options checked by the caller.
pub struct NewJob {
    /// The queue it goes into.
    pub queue: String,
    /// Its payload.
    pub payload: Jsonb,
    /// Its kind.
    pub kind: String,
    /// When it becomes due, in microseconds since the PostgreSQL epoch (finite).
    pub run_at: i64,
    /// Lower runs first.
    pub priority: i16,
    /// Attempts; `None` takes the queue's setting.
    pub max_attempts: Option<i32>,
    /// Carried untouched to every attempt.
    pub headers: Option<Jsonb>,
    /// The tenant it belongs to, already checked.
    pub tenant: Option<String>,
}

/// Enqueues `jobs` in one statement and returns their ids in order. An unknown queue raises
/// 42704 like a single enqueue, and nothing is inserted.
pub fn enqueue_many(client: &SpiClient<'_>, jobs: &[NewJob]) -> Vec<i64> {
    if jobs.is_empty() {
        return Vec::new();
    }
    let mut queues: Vec<&str> = jobs.iter().map(|job| job.queue.as_str()).collect();
    queues.sort_unstable();
    queues.dedup();
    // Taken before the statement that reads jobs.queue, as a single enqueue does.
    for queue in &queues {
        locks::lock_queue(queue, false);
    }
    let run_ats: Vec<pgrx::datum::TimestampWithTimeZone> = jobs
        .iter()
        .map(|job| {
            pgrx::datum::TimestampWithTimeZone::try_from(job.run_at)
                .expect("run_at is a finite time")
        })
        .collect();
    let rows = INSERT_MANY.run(
        client,
        &[
            jobs.iter()
                .map(|job| job.queue.clone())
                .collect::<Vec<_>>()
                .into(),
            jobs.iter()
                .map(|job| job.payload)
                .collect::<Vec<_>>()
                .into(),
            jobs.iter()
                .map(|job| job.kind.clone())
                .collect::<Vec<_>>()
                .into(),
            run_ats.into(),
            jobs.iter()
                .map(|job| job.priority)
                .collect::<Vec<_>>()
                .into(),
            jobs.iter()
                .map(|job| job.max_attempts)
                .collect::<Vec<_>>()
                .into(),
            jobs.iter()
                .map(|job| job.headers)
                .collect::<Vec<_>>()
                .into(),
            jobs.iter()
                .map(|job| job.tenant.clone())
                .collect::<Vec<_>>()
                .into(),
        ],
    );
    if rows.len() != jobs.len() {
        // Some job's queue is gone; name it. The statement's rows roll back with the ERROR.
        let inserted: std::collections::HashSet<String> = rows
            .iter()
            .map(|row| row.expect::<String>("queue"))
            .collect();
        let missing = queues
            .iter()
            .find(|queue| !inserted.contains(**queue))
            .copied()
            .unwrap_or(queues[0]);
        unknown_queue(missing);
    }
    // One report per queue: how many jobs it got and the first of them in claim order.
    let mut per_queue: BTreeMap<String, (usize, Position)> = BTreeMap::new();
    let mut ids = Vec::with_capacity(jobs.len());
    for row in rows.iter() {
        let position = Position::from_row(&row);
        ids.push(position.id);
        per_queue
            .entry(row.expect("queue"))
            .and_modify(|(count, lowest)| {
                *count += 1;
                *lowest = (*lowest).min(position);
            })
            .or_insert((1, position));
    }
    for (queue, (count, lowest)) in &per_queue {
        transitions::jobs_queued(queue, *count, *lowest);
    }
    ids
}
