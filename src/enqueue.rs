//! Producing jobs: `jobs_enqueue` and `jobs_enqueue_batch`.

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::datum::{Jsonb, JsonbArray};
use crate::errors::{
    check_range, raise, raise_with_hint, required, BAD_ARGUMENT, NOT_SUPPORTED, PAYLOAD_TOO_LARGE,
};
use crate::floor::Key;
use crate::guc;
use crate::locks::lock_queue;
use crate::queue::{queue_arg, unknown_queue, MAX_ATTEMPTS};
use crate::spi::{with_client, Statement};
use crate::wakeup;

static ENQUEUE: Statement = Statement {
    sql: include_str!("../sql/enqueue.sql"),
    args: &[
        pg_sys::TEXTOID,
        pg_sys::JSONBOID,
        pg_sys::TEXTOID,
        pg_sys::TIMESTAMPTZOID,
        pg_sys::INT2OID,
        pg_sys::INT4OID,
        pg_sys::JSONBOID,
    ],
};

static ENQUEUE_BATCH: Statement = Statement {
    sql: include_str!("../sql/enqueue_batch.sql"),
    args: &[
        pg_sys::TEXTOID,
        pg_sys::JSONBARRAYOID,
        pg_sys::TEXTOID,
        pg_sys::TIMESTAMPTZOID,
        pg_sys::INT2OID,
        pg_sys::INT4OID,
        pg_sys::JSONBOID,
    ],
};

static QUEUE_EXISTS: Statement = Statement {
    sql: "SELECT true FROM jobs.queue WHERE name = $1",
    args: &[pg_sys::TEXTOID],
};

/// The options every job of one enqueue call shares, checked.
struct JobOptions {
    kind: String,
    run_at: TimestampWithTimeZone,
    priority: i16,
    max_attempts: Option<i32>,
    headers: Option<Jsonb>,
}

impl JobOptions {
    #[allow(clippy::too_many_arguments)]
    fn check(
        kind: Option<&str>,
        run_at: Option<TimestampWithTimeZone>,
        priority: Option<i32>,
        max_attempts: Option<i32>,
        headers: Option<Jsonb>,
        unique_key: Option<&str>,
        unique_for: Option<Interval>,
        on_conflict: Option<&str>,
        tenant: Option<&str>,
        group_key: Option<&str>,
    ) -> JobOptions {
        let kind = required(kind, "kind");
        if kind.is_empty() || kind.len() > 255 {
            raise(
                BAD_ARGUMENT,
                format!("kind must be 1 to 255 bytes long, got {} bytes", kind.len()),
            );
        }
        let run_at = required(run_at, "run_at");
        let priority = required(priority, "priority");
        check_range(
            priority.into(),
            "priority",
            i16::MIN.into(),
            i16::MAX.into(),
        );
        let priority = priority as i16;
        if let Some(max_attempts) = max_attempts {
            check_range(max_attempts.into(), "max_attempts", 1, MAX_ATTEMPTS);
        }
        if let Some(headers) = headers {
            if !headers.is_object() {
                raise(BAD_ARGUMENT, "headers must be a JSON object or NULL".into());
            }
        }
        let on_conflict = required(on_conflict, "on_conflict");
        if !matches!(on_conflict, "skip" | "replace" | "error") {
            raise(
                BAD_ARGUMENT,
                format!("on_conflict must be 'skip', 'replace' or 'error', got '{on_conflict}'"),
            );
        }
        // These arguments belong to features with their own issues; until they are built,
        // refusing them is honest where ignoring them would silently break a caller's intent.
        for (given, argument, feature) in [
            (
                unique_key.is_some() || unique_for.is_some(),
                "unique_key",
                "unique jobs",
            ),
            (tenant.is_some(), "tenant", "tenants"),
            (group_key.is_some(), "group_key", "job groups"),
        ] {
            if given {
                raise(
                    NOT_SUPPORTED,
                    format!("{argument} is reserved for {feature}, which this version of pg_jobs does not provide yet"),
                );
            }
        }
        JobOptions {
            kind: kind.to_owned(),
            run_at,
            priority,
            max_attempts,
            headers,
        }
    }

    /// The arguments of enqueue.sql and enqueue_batch.sql: the queue, the payload (one jsonb or
    /// a jsonb[]) and these options.
    fn statement_args<'a>(
        &'a self,
        queue: &'a str,
        payload: DatumWithOid<'a>,
    ) -> [DatumWithOid<'a>; 7] {
        [
            queue.into(),
            payload,
            self.kind.as_str().into(),
            self.run_at.into(),
            self.priority.into(),
            self.max_attempts.into(),
            self.headers.into(),
        ]
    }

    /// Tells the wake-up machinery about `count` new jobs, the first with id `first_id`, once
    /// the transaction commits.
    fn announce(&self, queue: &str, count: usize, first_id: i64) {
        let first = Key {
            priority: self.priority,
            run_at: i64::from(self.run_at),
            id: first_id,
        };
        wakeup::jobs_queued(queue, u32::try_from(count).unwrap_or(u32::MAX), first);
    }
}

/// Refuses a payload above `pg_jobs.max_payload_bytes`; `argument` names it in the error.
fn check_payload_size(payload: Jsonb, argument: impl Fn() -> String) {
    let limit = guc::MAX_PAYLOAD_BYTES.get();
    let size = payload.size_bytes();
    if size > limit as usize {
        raise_with_hint(
            PAYLOAD_TOO_LARGE,
            format!(
                "{} is {size} bytes, above pg_jobs.max_payload_bytes ({limit} bytes)",
                argument()
            ),
            "Store large data elsewhere and enqueue a reference to it, or raise pg_jobs.max_payload_bytes.",
        );
    }
}

/// Enqueues one job and returns its id. It becomes visible to claims when the caller's
/// transaction commits, and never exists if it rolls back.
#[allow(clippy::too_many_arguments)]
#[pg_extern(volatile, parallel_unsafe)]
fn jobs_enqueue(
    queue: Option<&str>,
    payload: default!(Option<Jsonb>, "'{}'"),
    kind: default!(Option<&str>, "'default'"),
    run_at: default!(Option<TimestampWithTimeZone>, "now()"),
    priority: default!(Option<i32>, 0),
    max_attempts: default!(Option<i32>, "NULL"),
    headers: default!(Option<Jsonb>, "NULL"),
    unique_key: default!(Option<&str>, "NULL"),
    unique_for: default!(Option<Interval>, "NULL"),
    on_conflict: default!(Option<&str>, "'skip'"),
    tenant: default!(Option<&str>, "NULL"),
    group_key: default!(Option<&str>, "NULL"),
) -> i64 {
    let queue = queue_arg(queue);
    let payload = required(payload, "payload");
    check_payload_size(payload, || "payload".to_owned());
    let options = JobOptions::check(
        kind,
        run_at,
        priority,
        max_attempts,
        headers,
        unique_key,
        unique_for,
        on_conflict,
        tenant,
        group_key,
    );
    lock_queue(queue, false);
    let id = with_client(|client| {
        let args = options.statement_args(queue, payload.into());
        ENQUEUE.first::<i64>(client, &args)
    });
    let Some(id) = id else { unknown_queue(queue) };
    options.announce(queue, 1, id);
    id
}

/// Enqueues one job per payload in one statement and returns their ids in payload order.
#[allow(clippy::too_many_arguments)]
#[pg_extern(volatile, parallel_unsafe)]
fn jobs_enqueue_batch(
    queue: Option<&str>,
    payloads: Option<JsonbArray>,
    kind: default!(Option<&str>, "'default'"),
    run_at: default!(Option<TimestampWithTimeZone>, "now()"),
    priority: default!(Option<i32>, 0),
    max_attempts: default!(Option<i32>, "NULL"),
    headers: default!(Option<Jsonb>, "NULL"),
    unique_key: default!(Option<&str>, "NULL"),
    unique_for: default!(Option<Interval>, "NULL"),
    on_conflict: default!(Option<&str>, "'skip'"),
    tenant: default!(Option<&str>, "NULL"),
    group_key: default!(Option<&str>, "NULL"),
) -> SetOfIterator<'static, i64> {
    let queue = queue_arg(queue);
    let payloads = required(payloads, "payloads");
    let elements = payloads.elements();
    for (i, payload) in elements.iter().enumerate() {
        // Report positions the way SQL indexes arrays; named only when there is something to
        // report, as a batch holds thousands.
        let argument = || format!("payloads[{}]", i + 1);
        match payload {
            Some(payload) => check_payload_size(*payload, argument),
            None => raise(
                crate::errors::NULL_ARGUMENT,
                format!("{} must not be NULL", argument()),
            ),
        }
    }
    let options = JobOptions::check(
        kind,
        run_at,
        priority,
        max_attempts,
        headers,
        unique_key,
        unique_for,
        on_conflict,
        tenant,
        group_key,
    );
    lock_queue(queue, false);
    // SAFETY: reading the current context pointer.
    let result_context = unsafe { pg_sys::CurrentMemoryContext };
    let ids: Vec<i64> = with_client(|client| {
        let args = options.statement_args(queue, payloads.into());
        let ids: Vec<i64> = ENQUEUE_BATCH.collect(client, &args, result_context);
        if ids.is_empty()
            && QUEUE_EXISTS
                .first::<bool>(client, &[queue.into()])
                .is_none()
        {
            unknown_queue(queue);
        }
        ids
    });
    if let Some(&first) = ids.first() {
        options.announce(queue, ids.len(), first);
    }
    SetOfIterator::new(ids)
}
