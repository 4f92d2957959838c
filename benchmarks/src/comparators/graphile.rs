//! Graphile Worker (npm), run by Node 22 in its own process (benchmarks/node/worker.mjs) with
//! a no-op task. Jobs are added in SQL with graphile_worker.add_job / add_jobs, like the other
//! queues; the worker reports on stdout when it starts, when it has finished N jobs, and when a
//! timed job reaches the task. Its waiting mode is LISTEN/NOTIFY (plus its own 2 s poll).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use postgres::{Client, Statement};

use super::{load_in_chunks, Comparator, Producer, StatementProducer, Worker};
use crate::config::Config;
use crate::cpu;

/// The job_spec rows add_jobs takes, built in SQL from an array of jsonb payloads.
const SPECS: &str = "ARRAY(SELECT ROW('noop', p::json, NULL, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec
                            FROM unnest($1::jsonb[]) AS p)";

pub struct Graphile {
    node: std::path::PathBuf,
    script: std::path::PathBuf,
    database_url: String,
}

impl Graphile {
    pub fn new(cfg: &Config) -> Graphile {
        Graphile {
            node: cfg.node.clone(),
            script: cfg.graphile_script.clone(),
            database_url: cfg.database_url.clone(),
        }
    }

    /// Starts a worker process and waits until its runner is up.
    pub fn start(&self, opts: GwOptions) -> Result<GwProcess> {
        let mut child = Command::new(&self.node)
            .arg(&self.script)
            .env("DATABASE_URL", &self.database_url)
            .env("GW_CONCURRENCY", opts.concurrency.to_string())
            .env("GW_LOCAL_QUEUE", opts.local_queue.to_string())
            .env(
                "GW_COMPLETE_BATCH_DELAY",
                opts.complete_batch_delay.to_string(),
            )
            .env("GW_MARK_EVERY", opts.mark_every.to_string())
            .env("GW_STAMP", if opts.stamp { "1" } else { "0" })
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| {
                format!("starting {} {}", self.node.display(), self.script.display())
            })?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        let mut process = GwProcess {
            child,
            lines: rx,
            skipped: VecDeque::new(),
            picks: Vec::new(),
        };
        process.wait_for("READY", Duration::from_secs(60))?;
        Ok(process)
    }
}

/// How the Graphile worker runs.
#[derive(Clone, Copy, Debug)]
pub struct GwOptions {
    pub concurrency: usize,
    /// localQueue.size; -1 = off (each job fetched by its own query).
    pub local_queue: i32,
    /// completeJobBatchDelay in ms; -1 = off (each job completed by its own query).
    pub complete_batch_delay: i32,
    /// A MARK line every this many succeeded jobs (0 = never).
    pub mark_every: u64,
    /// A PICK line for every job as the task gets it (pickup latency).
    pub stamp: bool,
}

impl GwOptions {
    /// Graphile's defaults: one job per fetch, one completion per job.
    pub fn one_per_claim(concurrency: usize, mark_every: u64) -> GwOptions {
        GwOptions {
            concurrency,
            local_queue: -1,
            complete_batch_delay: -1,
            mark_every,
            stamp: false,
        }
    }

    /// Its batching: a local queue of `batch` jobs per fetch and batched completions.
    pub fn batched(concurrency: usize, batch: i32, mark_every: u64) -> GwOptions {
        GwOptions {
            concurrency,
            local_queue: batch,
            complete_batch_delay: 0,
            mark_every,
            stamp: false,
        }
    }

    pub fn describe(&self) -> String {
        if self.local_queue > 0 {
            format!(
                "concurrency {}, localQueue.size {}, completeJobBatchDelay {} ms",
                self.concurrency, self.local_queue, self.complete_batch_delay
            )
        } else {
            format!(
                "concurrency {}, defaults (no local queue, no batched completion)",
                self.concurrency
            )
        }
    }
}

/// A running Graphile worker process.
pub struct GwProcess {
    child: Child,
    lines: Receiver<(Instant, String)>,
    /// Lines [`GwProcess::wait_for`] passed over while looking for another word.
    skipped: VecDeque<(Instant, String, Vec<i64>)>,
    /// PICK lines seen so far: (job id, wall-clock microseconds).
    pub picks: Vec<(i64, i64)>,
}

impl GwProcess {
    /// Waits for the next line starting with `word`; returns when it was read and its fields.
    /// PICK lines met on the way are kept in `picks`.
    pub fn wait_for(&mut self, word: &str, timeout: Duration) -> Result<(Instant, Vec<i64>)> {
        if let Some(i) = self.skipped.iter().position(|(_, w, _)| w == word) {
            let (at, _, numbers) = self.skipped.remove(i).expect("index in range");
            return Ok((at, numbers));
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (at, line) = match self.lines.recv_timeout(left) {
                Ok(got) => got,
                Err(RecvTimeoutError::Timeout) => {
                    bail!("the Graphile worker did not print {word} within {timeout:?}")
                }
                Err(RecvTimeoutError::Disconnected) => {
                    bail!(
                        "the Graphile worker exited before printing {word} (see its stderr above)"
                    )
                }
            };
            let mut fields = line.split_whitespace();
            let head = fields.next().unwrap_or("");
            let numbers: Vec<i64> = fields.filter_map(|f| f.parse().ok()).collect();
            if head == "PICK" && numbers.len() == 2 {
                self.picks.push((numbers[0], numbers[1]));
            }
            if head == word {
                return Ok((at, numbers));
            }
            if head != "PICK" {
                self.skipped.push_back((at, head.to_owned(), numbers));
            }
        }
    }

    /// Waits for the MARK line that reports `count` succeeded jobs.
    pub fn wait_mark(&mut self, count: u64, timeout: Duration) -> Result<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (at, fields) = self
                .wait_for("MARK", left)
                .with_context(|| format!("waiting for {count} jobs to succeed"))?;
            if fields.first().copied().unwrap_or(0) as u64 >= count {
                return Ok(at);
            }
        }
    }

    /// Collects PICK lines until `count` are in, or `timeout` passes.
    pub fn collect_picks(&mut self, count: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.picks.len() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((_, line)) => {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    if let ["PICK", id, at] = fields[..] {
                        if let (Ok(id), Ok(at)) = (id.parse(), at.parse()) {
                            self.picks.push((id, at));
                        }
                    }
                }
                Err(_) => return,
            }
        }
    }

    /// CPU seconds the Node process has used so far.
    pub fn cpu_seconds(&self) -> f64 {
        cpu::process_seconds(self.child.id() as i32)
    }

    /// Stops the worker gracefully (SIGTERM), killing it if it takes more than 20 s.
    pub fn stop(mut self) -> Result<()> {
        // SAFETY: signals our own child process.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child.kill()?;
        self.child.wait()?;
        Err(anyhow!(
            "the Graphile worker did not stop within 20 s and was killed"
        ))
    }
}

impl Drop for GwProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits until Graphile's job table is empty: batched completions may land after the worker
/// reported the jobs as done.
pub fn wait_empty(admin: &mut Client, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let left: i64 = admin
            .query_one("SELECT count(*) FROM graphile_worker._private_jobs", &[])?
            .get(0);
        if left == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{left} Graphile jobs still in the table after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Prepares add_jobs for set-up loads and rounds: payloads made in SQL from a number range.
pub fn prepare_load(admin: &mut Client) -> Result<Statement> {
    Ok(admin.prepare(
        "SELECT count(*) FROM graphile_worker.add_jobs(
             ARRAY(SELECT ROW('noop', json_build_object('n', g), NULL, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec
                     FROM generate_series($1::bigint, $2::bigint) g))",
    )?)
}

impl Comparator for Graphile {
    fn name(&self) -> &str {
        "Graphile Worker"
    }

    fn waiting_mode(&self) -> String {
        "its worker process: LISTEN/NOTIFY on new jobs, plus its periodic poll (pollInterval 2 s)"
            .into()
    }

    fn table(&self) -> &'static str {
        "graphile_worker._private_jobs"
    }

    fn reset(&self, admin: &mut Client) -> Result<()> {
        admin.batch_execute("TRUNCATE graphile_worker._private_jobs")?;
        Ok(())
    }

    fn load_queued(&self, admin: &mut Client, n: u64) -> Result<()> {
        let load = prepare_load(admin)?;
        load_in_chunks(n, |first, last| {
            admin.query_one(&load, &[&first, &last])?;
            Ok(())
        })
    }

    fn load_finished(&self, _admin: &mut Client, _n: u64) -> Result<bool> {
        // Graphile Worker deletes a job when it succeeds: no finished jobs stay in its table.
        Ok(false)
    }

    fn pending(&self, admin: &mut Client) -> Result<i64> {
        Ok(admin
            .query_one("SELECT count(*) FROM graphile_worker._private_jobs", &[])?
            .get(0))
    }

    fn producer(&self, conn: Client) -> Result<Box<dyn Producer>> {
        StatementProducer::prepare(
            conn,
            "SELECT (graphile_worker.add_job('noop', $1::json)).id",
            &format!("SELECT count(*) FROM graphile_worker.add_jobs({SPECS})"),
        )
    }

    fn set_retention(&self, _admin: &mut Client, _keep: Duration) -> Result<Option<String>> {
        // Graphile Worker deletes a job when it succeeds: nothing finished stays.
        Ok(None)
    }

    fn worker(&self, _conn: Client) -> Result<Box<dyn Worker>> {
        bail!("Graphile Worker jobs are consumed by its own worker process")
    }

    fn external(&self) -> Option<&Graphile> {
        Some(self)
    }
}
