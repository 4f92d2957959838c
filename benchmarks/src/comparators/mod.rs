//! The queues under test, behind one interface so every scenario runs the same work on each.
//!
//! A [`Comparator`] owns its schema (reset, bulk loads for set-up), opens the load generator's
//! sessions as its users would log in, and hands out producers and workers over them.
//! SQL-driven queues (pg_jobs, the hand-rolled SKIP LOCKED queue, pgmq) consume through
//! [`Worker`]s on threads of this process; Graphile Worker consumes in its own Node process
//! ([`graphile::Graphile`]).

pub mod graphile;
pub mod handrolled;
pub mod pg_jobs;
pub mod pgmq;

use anyhow::Result;
use postgres::{CancelToken, Client, Statement};
use serde_json::Value;
use uuid::Uuid;

use crate::config::Config;
use crate::db;

/// A claimed job: its id and, for queues with fencing tokens, the lease.
#[derive(Clone, Copy, Debug)]
pub struct Claimed {
    pub id: i64,
    pub lease: Option<Uuid>,
}

/// Enqueues jobs, each call in its own transaction (autocommit).
pub trait Producer: Send {
    /// Enqueues one job and returns its id.
    fn enqueue(&mut self, payload: &Value) -> Result<i64>;
    /// Enqueues one job per payload in one call.
    fn enqueue_batch(&mut self, payloads: &[Value]) -> Result<()>;
    /// The session it enqueues over (the counts mode marks the measured stretch in it).
    fn session(&mut self) -> &mut Client;
}

/// The producer of every SQL-driven queue: one prepared statement that enqueues a job and
/// returns its id, one that enqueues an array of payloads.
pub struct StatementProducer {
    conn: Client,
    one: Statement,
    many: Statement,
}

impl StatementProducer {
    /// Prepares `one` (payload `$1`, returns the id) and `many` (payloads `$1`) on `conn`.
    pub fn prepare(mut conn: Client, one: &str, many: &str) -> Result<Box<dyn Producer>> {
        let one = conn.prepare(one)?;
        let many = conn.prepare(many)?;
        Ok(Box::new(StatementProducer { conn, one, many }))
    }
}

impl Producer for StatementProducer {
    fn enqueue(&mut self, payload: &Value) -> Result<i64> {
        Ok(self.conn.query_one(&self.one, &[payload])?.get(0))
    }

    fn enqueue_batch(&mut self, payloads: &[Value]) -> Result<()> {
        self.conn.execute(&self.many, &[&payloads])?;
        Ok(())
    }

    fn session(&mut self) -> &mut Client {
        &mut self.conn
    }
}

/// Claimed jobs from rows whose first column is the job id (queues without fencing tokens).
pub fn ids_only(rows: Vec<postgres::Row>) -> Vec<Claimed> {
    rows.iter()
        .map(|r| Claimed {
            id: r.get(0),
            lease: None,
        })
        .collect()
}

/// Claims and completes jobs, each call in its own transaction (autocommit).
pub trait Worker: Send {
    /// Claims up to `n` due jobs without waiting.
    fn claim(&mut self, n: i32) -> Result<Vec<Claimed>>;
    /// Completes jobs: one call for one job, one batched call for several.
    fn complete(&mut self, jobs: &[Claimed]) -> Result<()>;
    /// Fails one job so that it runs again after `retry_in` (whole seconds for pgmq, whose
    /// visibility timeout counts in seconds).
    fn fail(&mut self, job: &Claimed, retry_in: std::time::Duration) -> Result<()>;
    /// One step of the queue's natural way of waiting for work; may return nothing.
    fn wait_claim(&mut self, n: i32) -> Result<Vec<Claimed>>;
    /// Completes `done` and claims up to `n` due jobs without waiting, in one call and one
    /// transaction (issue 39's one commit per job), for queues that can
    /// ([`Comparator::one_commit_per_job`]); fails when one of `done` was not completed.
    fn complete_and_claim(&mut self, done: &[Claimed], n: i32) -> Result<Vec<Claimed>> {
        let _ = (done, n);
        anyhow::bail!("this queue cannot complete and claim in one transaction")
    }
    /// Cancels a statement this worker is running (stops a waiting claim).
    fn cancel_token(&self) -> CancelToken;
    /// The session it claims and settles over (the counts mode marks the measured stretch
    /// in it).
    fn session(&mut self) -> &mut Client;
}

pub trait Comparator: Sync {
    /// Short name used in the report.
    fn name(&self) -> &str;
    /// How its workers wait for work (for the report).
    fn waiting_mode(&self) -> String;
    /// For queues whose idle workers poll: how often. Waiting workers start spread over one
    /// interval, so their polls are evenly spaced rather than in lockstep (their best case).
    fn poll_interval(&self) -> Option<std::time::Duration> {
        None
    }
    /// Whether its workers can complete what they finished and claim their next jobs in one
    /// transaction ([`Worker::complete_and_claim`]).
    fn one_commit_per_job(&self) -> bool {
        false
    }
    /// The table its jobs live in (VACUUM target, read by the held snapshot).
    fn table(&self) -> &'static str;
    /// Empties the queue: no jobs of any state.
    fn reset(&self, admin: &mut Client) -> Result<()>;
    /// Set-up, not measured: adds `n` queued jobs as fast as the queue allows.
    fn load_queued(&self, admin: &mut Client, n: u64) -> Result<()>;
    /// Set-up, not measured: adds `n` finished jobs that stay in the table; `false` when the
    /// queue keeps no finished jobs.
    fn load_finished(&self, admin: &mut Client, n: u64) -> Result<bool>;
    /// Jobs still waiting to be done (queued or running).
    fn pending(&self, admin: &mut Client) -> Result<i64>;
    /// Makes finished jobs go after `keep`, as a long-running deployment must: pg_jobs by its
    /// queue's retention (its background worker purges), the hand-rolled queue by the janitor
    /// statement returned here, which the caller runs once a second with `keep` in seconds as
    /// `$1`. `None` when nothing is left to run (the queue purges itself, or deletes jobs as
    /// they finish).
    fn set_retention(
        &self,
        admin: &mut Client,
        keep: std::time::Duration,
    ) -> Result<Option<String>>;
    /// Opens one session for its producers and workers (the set-up and measuring statements
    /// run in the `postgres` session instead). By default as the load generator's superuser
    /// role; pg_jobs connects as a `jobs_worker` role, or as the extension's owner, and may set
    /// a tenant first.
    fn connect(&self, cfg: &Config) -> Result<Client> {
        db::connect(&cfg.dsn)
    }
    fn producer(&self, conn: Client) -> Result<Box<dyn Producer>>;
    /// A worker over `conn`, for the queues consumed from this process.
    fn worker(&self, conn: Client) -> Result<Box<dyn Worker>>;
    /// The external worker process, for Graphile Worker.
    fn external(&self) -> Option<&graphile::Graphile> {
        None
    }
}

/// Chunk size of the set-up loads.
pub const LOAD_CHUNK: u64 = 10_000;

/// Calls `load(first, last)` for consecutive ranges of at most [`LOAD_CHUNK`] numbers, each
/// in its own transaction.
pub fn load_in_chunks(n: u64, mut load: impl FnMut(i64, i64) -> Result<()>) -> Result<()> {
    let mut first = 1;
    while first <= n {
        let last = (first + LOAD_CHUNK - 1).min(n);
        load(first as i64, last as i64)?;
        first = last + 1;
    }
    Ok(())
}

/// The payload of job number `n`: the same small document for every queue.
pub fn payload(n: u64) -> Value {
    serde_json::json!({ "n": n })
}
