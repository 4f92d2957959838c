//! Dead letters: a queue with `dead_letter` set copies each job that ends `failed` into that
//! queue, in the same transaction, with the origin (queue, job id) and the error history, so
//! failures can be inspected and redriven.

use pgrx::pg_sys::INT8ARRAYOID;
use pgrx::spi::SpiClient;

use crate::engine::transitions;
use crate::storage::{param, Statement};

static COPY: Statement = Statement {
    name: "dead_letter/copy",
    sql: include_str!("copy.sql"),
    params: &[param("ids", INT8ARRAYOID)],
    columns: &["queue", "id", "priority", "run_at", "tenant"],
};

/// Copies the jobs `failed` (which just ended failed) into their queues' dead-letter queues,
/// where they have one; the copies are claimable once the transaction commits.
pub fn copy_failed(client: &SpiClient<'_>, failed: Vec<i64>) {
    if failed.is_empty() {
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
