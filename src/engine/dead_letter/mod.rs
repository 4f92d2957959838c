//! Dead letters: a queue with `dead_letter` set copies each job that ends `failed` into that
//! queue, in the same transaction, with the origin (queue, job id) and the error history, so
//! failures can be inspected and redriven.

use pgrx::pg_sys::{self, INT4OID, INT8ARRAYOID, JSONBOID, TEXTOID};
use pgrx::spi::SpiClient;

use crate::engine::transitions;
use crate::pg::datum::Jsonb;
use crate::storage::{shard, statement, Statement};

static COPY: Statement = statement!(
    dead_letter/copy(ids: INT8ARRAYOID) -> (queue, id, priority, run_at, tenant)
);

static COPIES: Statement = statement!(
    dead_letter/copies(ids: INT8ARRAYOID)
        -> (queue, kind, payload, headers, max_attempts, tenant, origin)
);

static INSERT_ROUTED: Statement = statement!(
    dead_letter/insert_routed(queue: TEXTOID, kind: TEXTOID, payload: JSONBOID, headers: JSONBOID,
        max_attempts: INT4OID, tenant: TEXTOID, origin: JSONBOID) -> (queue, id, priority, run_at)
);

/// Copies the jobs `failed` (which just ended failed) into their queues' dead-letter queues,
/// where they have one; the copies are claimable once the transaction commits.
pub fn copy_failed(client: &SpiClient<'_>, failed: Vec<i64>) {
    if failed.is_empty() {
        return;
    }
    if shard::current().is_some() {
        copy_through_citus(client, failed);
        return;
    }
    let copies = COPY.run(client, &[failed.into()]);
    transitions::queued_rows(&copies);
    for copy in copies.iter() {
        let queue: String = copy.expect("queue");
        let tenant: Option<String> = copy.get("tenant");
        transitions::jobs_enqueued(&queue, tenant.as_deref(), 1);
    }
}

/// One dead-letter copy, read from a shard.
struct Copy {
    queue: String,
    kind: String,
    payload: Option<Jsonb>,
    headers: Option<Jsonb>,
    max_attempts: Option<i32>,
    tenant: Option<String>,
    origin: Option<Jsonb>,
}

/// [`copy_failed`] on a Citus shard (docs/src/internals/citus.md): the dead-letter queue's
/// shard may be on another node, so each copy is inserted through Citus, which cannot run
/// copy.sql (an `INSERT ... SELECT` with parameters) as a kept plan.
fn copy_through_citus(client: &SpiClient<'_>, failed: Vec<i64>) {
    // SAFETY: reads the current context pointer (SPI's, which outlives these statements).
    let context = unsafe { pg_sys::CurrentMemoryContext };
    let copies: Vec<Copy> = COPIES
        .run(client, &[failed.into()])
        .iter()
        .map(|row| Copy {
            queue: row.expect("queue"),
            kind: row.expect("kind"),
            payload: row.get_in("payload", context),
            headers: row.get_in("headers", context),
            max_attempts: row.get("max_attempts"),
            tenant: row.get("tenant"),
            origin: row.get_in("origin", context),
        })
        .collect();
    for copy in copies {
        let rows = INSERT_ROUTED.run(
            client,
            &[
                copy.queue.as_str().into(),
                copy.kind.as_str().into(),
                copy.payload.into(),
                copy.headers.into(),
                copy.max_attempts.into(),
                copy.tenant.as_deref().into(),
                copy.origin.into(),
            ],
        );
        transitions::queued_rows(&rows);
        transitions::jobs_enqueued(&copy.queue, copy.tenant.as_deref(), 1);
    }
}
