//! pg_jobs itself: jobs_enqueue / jobs_enqueue_batch, jobs_claim (n => 1 or 100) and
//! jobs_complete(id, lease) or jobs_complete(ids[], leases[]), or both in one transaction with
//! jobs_complete_and_claim (one commit per job); waiting workers block in
//! jobs_claim(wait => ...), woken by commits. Its producers and workers log in as a role granted
//! `jobs_worker`, as an application's would; scenario r also runs them as the extension's owner,
//! and as the `jobs_worker` role acting for a tenant.

use std::time::Duration;

use anyhow::{ensure, Result};
use postgres::{CancelToken, Client, Statement};
use uuid::Uuid;

use super::{load_in_chunks, Claimed, Comparator, Producer, StatementProducer, Worker};
use crate::config::Config;
use crate::db;

pub const QUEUE: &str = "bench";

/// Who pg_jobs's producers and workers log in as, and what their sessions set at the start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Login {
    /// The role granted `jobs_worker` ([`crate::config::WORKER_ROLE`]), no tenant set: it sees
    /// every tenant's jobs, as a shared worker pool does. The suite's default.
    Worker,
    /// The same role with `SET pg_jobs.tenant = '<tenant>'` at session start (the role is
    /// granted the tenant): its jobs carry the tenant, its claims see only the tenant's jobs.
    WorkerForTenant(&'static str),
    /// The extension's owner ([`crate::config::LOAD_ROLE`], a superuser), no tenant set: every
    /// function's role check passes at once and no tenant filter applies.
    Owner,
}

pub struct PgJobs {
    name: String,
    /// The wait of a waiting claim, as an interval literal.
    wait: &'static str,
    login: Login,
}

impl PgJobs {
    /// pg_jobs whose waiting workers call jobs_claim(wait => `wait`) in a loop, logged in as
    /// the `jobs_worker` role without a tenant.
    pub fn new(name: &str, wait: &'static str) -> PgJobs {
        PgJobs::logged_in(name, wait, Login::Worker)
    }

    /// pg_jobs whose producers and workers log in as `login` says.
    pub fn logged_in(name: &str, wait: &'static str, login: Login) -> PgJobs {
        PgJobs {
            name: name.to_owned(),
            wait,
            login,
        }
    }

    /// The tenant its sessions act for, if any: the jobs it loads and enqueues carry it.
    pub fn tenant(&self) -> Option<&'static str> {
        match self.login {
            Login::WorkerForTenant(tenant) => Some(tenant),
            Login::Worker | Login::Owner => None,
        }
    }

    /// Checks that the table holds exactly `n` jobs and that each carries this comparator's
    /// tenant (or none): that the jobs went through the tenant's path, not around it.
    pub fn check_tenant(&self, admin: &mut Client, n: u64) -> Result<()> {
        let row = admin.query_one(
            "SELECT count(*), count(*) FILTER (WHERE tenant IS DISTINCT FROM $1::text)
               FROM jobs.job",
            &[&self.tenant()],
        )?;
        let (all, other): (i64, i64) = (row.get(0), row.get(1));
        let whose = self.tenant().map_or_else(
            || "without a tenant".to_owned(),
            |t| format!("of tenant '{t}'"),
        );
        ensure!(
            all == n as i64 && other == 0,
            "expected {n} jobs {whose}, found {all} jobs, {other} of them with another tenant              or none: the jobs did not go through this login's tenant"
        );
        Ok(())
    }
}

struct PgJobsWorker {
    conn: Client,
    claim: Statement,
    wait: Statement,
    complete_one: Statement,
    complete_many: Statement,
    complete_and_claim: Statement,
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

    fn complete_and_claim(&mut self, done: &[Claimed], n: i32) -> Result<Vec<Claimed>> {
        let ids: Vec<i64> = done.iter().map(|j| j.id).collect();
        let leases: Vec<Uuid> = done.iter().filter_map(|j| j.lease).collect();
        let rows = self
            .conn
            .query(&self.complete_and_claim, &[&ids, &leases, &n])?;
        let mut settled = 0;
        let mut claimed = Vec::new();
        for row in rows {
            match row.get::<_, Option<i64>>(0) {
                Some(id) => {
                    let outcome: String = row.get(1);
                    ensure!(
                        outcome == "succeeded",
                        "jobs_complete_and_claim answered {outcome:?} for job {id}: its lease was not current"
                    );
                    settled += 1;
                }
                None => claimed.push(Claimed {
                    id: row.get(2),
                    lease: Some(row.get(3)),
                }),
            }
        }
        ensure!(
            settled == done.len(),
            "jobs_complete_and_claim settled {settled} of {} jobs",
            done.len()
        );
        Ok(claimed)
    }

    fn cancel_token(&self) -> CancelToken {
        self.conn.cancel_token()
    }

    fn session(&mut self) -> &mut Client {
        &mut self.conn
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

    fn one_commit_per_job(&self) -> bool {
        true
    }

    fn table(&self) -> &'static str {
        "jobs.job"
    }

    fn reset(&self, admin: &mut Client) -> Result<()> {
        // The queue is dropped and made again, so that no setting an earlier scenario gave it
        // (groups, a rate limit, a pause) carries over: every measurement starts from the
        // queue a new user creates. What pg_jobs keeps of it in shared memory (its claim floor
        // and reach, its wake-up slot's due time, its totals) outlives this, as it outlives a
        // TRUNCATE; none of it can change a later measurement's work: the positions the caches
        // hold are those of jobs claimed before, and every later job sorts after them (the
        // suite's jobs all have priority 0, a later job's run_at is no earlier than any claim
        // before it, and ids only grow).
        admin.batch_execute(&format!(
            "TRUNCATE jobs.job;
             SELECT jobs_drop_queue(name) FROM jobs.queue WHERE name = '{QUEUE}';
             SELECT jobs_create_queue('{QUEUE}', retention => '7 days')"
        ))?;
        Ok(())
    }

    fn load_queued(&self, admin: &mut Client, n: u64) -> Result<()> {
        // tenant => NULL: the superuser's own scope, jobs without a tenant.
        let load = admin.prepare(&format!(
            "SELECT count(*) FROM jobs_enqueue_batch('{QUEUE}',
                 ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series($1::bigint, $2::bigint) g),
                 tenant => $3::text)"
        ))?;
        let tenant = self.tenant();
        load_in_chunks(n, |first, last| {
            admin.query_one(&load, &[&first, &last, &tenant])?;
            Ok(())
        })
    }

    fn load_finished(&self, admin: &mut Client, n: u64) -> Result<bool> {
        // Rows as jobs_complete leaves them, written directly: set-up speed, not a measurement.
        let load = admin.prepare(&format!(
            "INSERT INTO jobs.job (queue, payload, state, attempt, max_attempts, lease,
                                   lease_duration, worker, started_at, finished_at, tenant)
             SELECT '{QUEUE}', jsonb_build_object('n', g), 'succeeded', 1, 5, gen_random_uuid(),
                    '30 seconds', 'loader', now(), now(), $3::text
               FROM generate_series($1::bigint, $2::bigint) g"
        ))?;
        let tenant = self.tenant();
        load_in_chunks(n, |first, last| {
            admin.execute(&load, &[&first, &last, &tenant])?;
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

    fn connect(&self, cfg: &Config) -> Result<Client> {
        let dsn = match self.login {
            Login::Owner => &cfg.dsn,
            Login::Worker | Login::WorkerForTenant(_) => &cfg.worker_dsn,
        };
        let mut conn = db::connect(dsn)?;
        if let Some(tenant) = self.tenant() {
            conn.batch_execute(&format!(
                "SET pg_jobs.tenant = '{}'",
                tenant.replace('\'', "''")
            ))?;
        }
        Ok(conn)
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
        let complete_and_claim = conn.prepare(&format!(
            "SELECT settled, outcome, (claimed).id, (claimed).lease
               FROM jobs_complete_and_claim('{QUEUE}', $1::bigint[], $2::uuid[], n => $3::int)"
        ))?;
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
            complete_and_claim,
            fail,
        }))
    }
}
