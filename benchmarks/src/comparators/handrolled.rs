//! The hand-rolled SKIP LOCKED queue most applications write (schema in
//! benchmarks/comparators/handrolled.sql): claim with UPDATE ... WHERE id IN (SELECT ... FOR
//! UPDATE SKIP LOCKED), complete with an UPDATE to 'done'; waiting workers poll every 50 ms.

use std::time::Duration;

use anyhow::Result;
use postgres::{CancelToken, Client, Statement};

use super::{ids_only, load_in_chunks, Claimed, Comparator, Producer, StatementProducer, Worker};

/// How often an idle hand-rolled worker polls, as applications typically do.
pub const POLL: Duration = Duration::from_millis(50);

pub struct Handrolled;

struct HandrolledWorker {
    conn: Client,
    claim: Statement,
    complete_one: Statement,
    complete_many: Statement,
    fail: Statement,
}

impl Worker for HandrolledWorker {
    fn claim(&mut self, n: i32) -> Result<Vec<Claimed>> {
        Ok(ids_only(self.conn.query(&self.claim, &[&n])?))
    }

    fn complete(&mut self, jobs: &[Claimed]) -> Result<()> {
        if let [job] = jobs {
            self.conn.execute(&self.complete_one, &[&job.id])?;
        } else if !jobs.is_empty() {
            let ids: Vec<i64> = jobs.iter().map(|j| j.id).collect();
            self.conn.execute(&self.complete_many, &[&ids])?;
        }
        Ok(())
    }

    fn fail(&mut self, job: &Claimed, retry_in: Duration) -> Result<()> {
        self.conn
            .execute(&self.fail, &[&job.id, &retry_in.as_secs_f64()])?;
        Ok(())
    }

    fn wait_claim(&mut self, n: i32) -> Result<Vec<Claimed>> {
        let jobs = self.claim(n)?;
        if jobs.is_empty() {
            std::thread::sleep(POLL);
        }
        Ok(jobs)
    }

    fn cancel_token(&self) -> CancelToken {
        self.conn.cancel_token()
    }

    fn session(&mut self) -> &mut Client {
        &mut self.conn
    }
}

impl Comparator for Handrolled {
    fn name(&self) -> &str {
        "hand-rolled"
    }

    fn waiting_mode(&self) -> String {
        format!(
            "polls the claim every {} ms while the queue is empty",
            POLL.as_millis()
        )
    }

    fn poll_interval(&self) -> Option<Duration> {
        Some(POLL)
    }

    fn table(&self) -> &'static str {
        "handrolled.jobs"
    }

    fn reset(&self, admin: &mut Client) -> Result<()> {
        admin.batch_execute("TRUNCATE handrolled.jobs")?;
        Ok(())
    }

    fn load_queued(&self, admin: &mut Client, n: u64) -> Result<()> {
        let load = admin.prepare(
            "INSERT INTO handrolled.jobs (payload)
             SELECT jsonb_build_object('n', g) FROM generate_series($1::bigint, $2::bigint) g",
        )?;
        load_in_chunks(n, |first, last| {
            admin.execute(&load, &[&first, &last])?;
            Ok(())
        })
    }

    fn load_finished(&self, admin: &mut Client, n: u64) -> Result<bool> {
        let load = admin.prepare(
            "INSERT INTO handrolled.jobs (payload, state, attempts, started_at, finished_at)
             SELECT jsonb_build_object('n', g), 'done', 1, now(), now()
               FROM generate_series($1::bigint, $2::bigint) g",
        )?;
        load_in_chunks(n, |first, last| {
            admin.execute(&load, &[&first, &last])?;
            Ok(())
        })?;
        Ok(true)
    }

    fn pending(&self, admin: &mut Client) -> Result<i64> {
        Ok(admin
            .query_one(
                "SELECT count(*) FROM handrolled.jobs WHERE state IN ('queued', 'running')",
                &[],
            )?
            .get(0))
    }

    fn set_retention(&self, _admin: &mut Client, _keep: Duration) -> Result<Option<String>> {
        // What an application's cron job does; finished_at has no index, as in most such queues.
        Ok(Some(
            "DELETE FROM handrolled.jobs
              WHERE state = 'done' AND finished_at < now() - make_interval(secs => $1::float8)"
                .into(),
        ))
    }

    fn producer(&self, conn: Client) -> Result<Box<dyn Producer>> {
        StatementProducer::prepare(
            conn,
            "INSERT INTO handrolled.jobs (payload) VALUES ($1::jsonb) RETURNING id",
            "INSERT INTO handrolled.jobs (payload) SELECT unnest($1::jsonb[])",
        )
    }

    fn worker(&self, mut conn: Client) -> Result<Box<dyn Worker>> {
        let claim = conn.prepare(
            "UPDATE handrolled.jobs
                SET state = 'running', attempts = attempts + 1, started_at = now()
              WHERE id IN (SELECT id FROM handrolled.jobs
                            WHERE state = 'queued' AND run_at <= now()
                            ORDER BY id
                            LIMIT $1::int
                              FOR UPDATE SKIP LOCKED)
             RETURNING id",
        )?;
        let complete_one = conn.prepare(
            "UPDATE handrolled.jobs SET state = 'done', finished_at = now() WHERE id = $1::bigint",
        )?;
        let complete_many = conn.prepare(
            "UPDATE handrolled.jobs SET state = 'done', finished_at = now() WHERE id = ANY($1::bigint[])",
        )?;
        let fail = conn.prepare(
            "UPDATE handrolled.jobs SET state = 'queued', run_at = now() + make_interval(secs => $2::float8)
              WHERE id = $1::bigint",
        )?;
        Ok(Box::new(HandrolledWorker {
            conn,
            claim,
            complete_one,
            complete_many,
            fail,
        }))
    }
}
