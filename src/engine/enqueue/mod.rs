//! Producing jobs: one at a time or many in one statement. A job becomes claimable when the
//! caller's transaction commits, and never exists if it rolls back (Rule 9).

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::{self, INT2OID, INT4OID, JSONBARRAYOID, JSONBOID, TEXTOID, TIMESTAMPTZOID};
use pgrx::prelude::*;

use crate::engine::model::Position;
use crate::engine::queues::{self, unknown_queue};
use crate::engine::transitions;
use crate::pg::datum::{Jsonb, JsonbArray};
use crate::runtime::locks;
use crate::storage::{param, with_client, Statement};

mod slots;
pub use slots::enqueue_slots;

static INSERT: Statement = Statement {
    name: "enqueue/insert",
    sql: include_str!("insert.sql"),
    params: &[
        param("queue", TEXTOID),
        param("payload", JSONBOID),
        param("kind", TEXTOID),
        param("run_at", TIMESTAMPTZOID),
        param("priority", INT2OID),
        param("max_attempts", INT4OID),
        param("headers", JSONBOID),
        param("tenant", TEXTOID),
    ],
    columns: &["id"],
};

static INSERT_BATCH: Statement = Statement {
    name: "enqueue/insert_batch",
    sql: include_str!("insert_batch.sql"),
    params: &[
        param("queue", TEXTOID),
        param("payloads", JSONBARRAYOID),
        param("kind", TEXTOID),
        param("run_at", TIMESTAMPTZOID),
        param("priority", INT2OID),
        param("max_attempts", INT4OID),
        param("headers", JSONBOID),
        param("tenant", TEXTOID),
    ],
    columns: &["id"],
};

/// The options every job of one enqueue call shares, checked.
pub struct JobOptions {
    /// The job's kind.
    pub kind: String,
    /// When it becomes due (finite).
    pub run_at: TimestampWithTimeZone,
    /// Lower runs first.
    pub priority: i16,
    /// Attempts; `None` takes the queue's setting.
    pub max_attempts: Option<i32>,
    /// Carried untouched to every attempt.
    pub headers: Option<Jsonb>,
    /// The tenant the jobs belong to (checked against the caller's grants).
    pub tenant: Option<String>,
}

impl JobOptions {
    /// The arguments of the insert statements: the queue, the payload (one jsonb or a jsonb[])
    /// and these options.
    fn statement_args<'a>(
        &'a self,
        queue: &'a str,
        payload: DatumWithOid<'a>,
    ) -> [DatumWithOid<'a>; 8] {
        [
            queue.into(),
            payload,
            self.kind.as_str().into(),
            self.run_at.into(),
            self.priority.into(),
            self.max_attempts.into(),
            self.headers.into(),
            self.tenant.as_deref().into(),
        ]
    }

    /// The claim position of the job with id `id` enqueued with these options.
    fn position(&self, id: i64) -> Position {
        Position {
            priority: self.priority,
            run_at: i64::from(self.run_at),
            id,
        }
    }
}

/// Enqueues one job into `queue` and returns its id.
pub fn enqueue(queue: &str, payload: Jsonb, options: &JobOptions) -> i64 {
    // Taken before the statement that reads jobs.queue, so that statement's snapshot sees a
    // drop that committed while we waited.
    locks::lock_queue(queue, false);
    let id = with_client(|client| {
        let args = options.statement_args(queue, payload.into());
        INSERT.first::<i64>(client, &args, "id")
    });
    let Some(id) = id else { unknown_queue(queue) };
    transitions::job_queued(queue, options.position(id));
    id
}

/// Enqueues one job per payload into `queue` in one statement and returns their ids in
/// payload order.
pub fn enqueue_batch(queue: &str, payloads: JsonbArray, options: &JobOptions) -> Vec<i64> {
    locks::lock_queue(queue, false);
    // SAFETY: reading the current context pointer (the caller's, which outlives SPI).
    let result_context = unsafe { pg_sys::CurrentMemoryContext };
    let ids: Vec<i64> = with_client(|client| {
        let args = options.statement_args(queue, payloads.into());
        let ids: Vec<i64> = INSERT_BATCH.collect(client, &args, "id", result_context);
        if ids.is_empty() && !queues::exists(client, queue) {
            unknown_queue(queue);
        }
        ids
    });
    if let Some(&first) = ids.first() {
        transitions::jobs_queued(queue, ids.len(), options.position(first));
    }
    ids
}
