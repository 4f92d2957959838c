//! pg_jobs itself: jobs_enqueue / jobs_enqueue_batch, jobs_claim (n => 1 or 100) and
//! jobs_complete(id, lease) or jobs_complete(ids[], leases[]); waiting workers block in
//! jobs_claim(wait => ...), woken by commits.

use std::time::Duration;

use anyhow::Result;
use postgres::{CancelToken, Client, Statement};
use uuid::Uuid;

use super::{load_in_chunks, Claimed, Comparator, Producer, StatementProducer, Worker};

pub const QUEUE: &str = "bench";

pub struct PgJobs {
    name: String,
    /// The wait of a waiting claim, as an interval literal.
    wait: &'static str,
}

impl PgJobs {
    /// pg_jobs whose waiting workers call jobs_claim(wait => `wait`) in a loop.
    pub fn new(name: &str, wait: &'static str) -> PgJobs {
        PgJobs {
            name: name.to_owned(),
            wait,
        }
    }
}

struct PgJobsWorker {
    conn: Client,
    claim: Statement,
    wait: Statement,
    complete_one: Statement,
    complete_many: Statement,
    fail: Statement,
}

fn claimed(rows: Vec<postgres::Row>) -> Vec<Claimed> {
    rows.iter()
        .map(|r| Claimed {
            id: r.get(0),
            lease: Some(r.get(1)),
        })
        .collect()
}

impl Worker for PgJobsWorker {
    fn claim(&mut self, n: i32) -> Result<Vec<Claimed>> {
        Ok(claimed(self.conn.query(&self.claim, &[&n])?))
    }

    fn complete(&mut self, jobs: &[Claimed]) -> Result<()> {
        if let [job] = jobs {
            self.conn
                .query_one(&self.complete_one, &[&job.id, &job.lease])?;
        } else if !jobs.is_empty() {
            let ids: Vec<i64> = jobs.iter().map(|j| j.id).collect();
            let leases: Vec<Uuid> = jobs.iter().filter_map(|j| j.lease).collect();
            self.conn.query_one(&self.complete_many, &[&ids, &leases])?;
        }
        Ok(())
    }

    fn fail(&mut self, job: &Claimed, retry_in: Duration) -> Result<()> {
        self.conn
            .query_one(&self.fail, &[&job.id, &job.lease, &retry_in.as_secs_f64()])?;
        Ok(())
    }

    fn wait_claim(&mut self, n: i32) -> Result<Vec<Claimed>> {
        Ok(claimed(self.conn.query(&self.wait, &[&n])?))
    }

    fn cancel_token(&self) -> CancelToken {
        self.conn.cancel_token()
    }
}

impl Comparator for PgJobs {
    fn name(&self) -> &str {
        &self.name
    }

    fn waiting_mode(&self) -> String {
        format!(
            "jobs_claim(wait => '{}') in a loop: sleeps in the server until a commit makes a job claimable",
            self.wait
        )
    }

    fn table(&self) -> &'static str {
        "jobs.job"
    }

    fn reset(&self, admin: &mut Client) -> Result<()> {
        admin.batch_execute(&format!(
            "TRUNCATE jobs.job; SELECT jobs_create_queue('{QUEUE}', retention => '7 days')"
        ))?;
        Ok(())
    }

    fn load_queued(&self, admin: &mut Client, n: u64) -> Result<()> {
        let load = admin.prepare(&format!(
            "SELECT count(*) FROM jobs_enqueue_batch('{QUEUE}',
                 ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series($1::bigint, $2::bigint) g))"
        ))?;
        load_in_chunks(n, |first, last| {
            admin.query_one(&load, &[&first, &last])?;
            Ok(())
        })
    }

    fn load_finished(&self, admin: &mut Client, n: u64) -> Result<bool> {
        // Rows as jobs_complete leaves them, written directly: set-up speed, not a measurement.
        let load = admin.prepare(&format!(
            "INSERT INTO jobs.job (queue, payload, state, attempt, max_attempts, lease,
                                   lease_duration, worker, started_at, finished_at)
             SELECT '{QUEUE}', jsonb_build_object('n', g), 'succeeded', 1, 5, gen_random_uuid(),
                    '30 seconds', 'loader', now(), now()
               FROM generate_series($1::bigint, $2::bigint) g"
        ))?;
        load_in_chunks(n, |first, last| {
            admin.execute(&load, &[&first, &last])?;
            Ok(())
        })?;
        Ok(true)
    }

    fn pending(&self, admin: &mut Client) -> Result<i64> {
        Ok(admin
            .query_one(
                "SELECT count(*) FROM jobs.job WHERE state IN ('queued', 'running')",
                &[],
            )?
            .get(0))
    }

    fn set_retention(&self, admin: &mut Client, keep: Duration) -> Result<Option<String>> {
        admin.execute(
            &format!(
                "SELECT jobs_create_queue('{QUEUE}', retention => make_interval(secs => $1::float8))"
            ),
            &[&keep.as_secs_f64()],
        )?;
        Ok(None)
    }

    fn producer(&self, conn: Client) -> Result<Box<dyn Producer>> {
        StatementProducer::prepare(
            conn,
            &format!("SELECT jobs_enqueue('{QUEUE}', $1::jsonb)"),
            &format!("SELECT count(*) FROM jobs_enqueue_batch('{QUEUE}', $1::jsonb[])"),
        )
    }

    fn worker(&self, mut conn: Client) -> Result<Box<dyn Worker>> {
        let claim = conn.prepare(&format!(
            "SELECT id, lease FROM jobs_claim('{QUEUE}', n => $1::int)"
        ))?;
        let wait = conn.prepare(&format!(
            "SELECT id, lease FROM jobs_claim('{QUEUE}', n => $1::int, wait => '{}')",
            self.wait
        ))?;
        let complete_one = conn.prepare("SELECT jobs_complete($1::bigint, $2::uuid)")?;
        let complete_many =
            conn.prepare("SELECT count(*) FROM jobs_complete_batch($1::bigint[], $2::uuid[])")?;
        let fail = conn.prepare(
            "SELECT jobs_fail($1::bigint, $2::uuid, 'planned failure',
                              retry_in => make_interval(secs => $3::float8))",
        )?;
        Ok(Box::new(PgJobsWorker {
            conn,
            claim,
            wait,
            complete_one,
            complete_many,
            fail,
        }))
    }
}
