//! Settings of one run, read from environment variables that `benchmarks/run` sets, and the
//! sizes of each scenario at the chosen scale (`BENCH_SCALE=full`, the default, or `small`).

use std::env;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// Sizes of the scenarios. `full` is what issue 4 asks for; `small` is for iterating.
#[derive(Clone, Debug)]
pub struct Scale {
    pub name: &'static str,
    /// a: seconds each enqueue variant runs.
    pub enqueue_secs: u64,
    /// b and e: jobs burnt down.
    pub burn_jobs: u64,
    /// c: seconds of one-job-every-10-ms traffic.
    pub latency_secs: u64,
    /// d: rounds of 1,000 queued jobs burnt down for the small-backlog rate.
    pub backlog_rounds: u64,
    /// d: jobs queued (or finished) in the table for the large-backlog rates.
    pub backlog_large: u64,
    /// d: jobs burnt down out of the large backlog.
    pub backlog_burn: u64,
    /// f: jobs whose whole lifecycle is measured.
    pub wal_jobs: u64,
    /// g: seconds the waiting workers are watched.
    pub idle_secs: u64,
    /// pgbench -T.
    pub pgbench_secs: u64,
    /// h: jobs of the long burn-down at 100 per claim.
    pub long_jobs: u64,
    /// k: jobs of other kinds queued ahead of the wanted kind.
    pub kinds_backlog: u64,
    /// k: claims timed, filtered and unfiltered each.
    pub kinds_claims: u64,
    /// v: rows of the busy table, and seconds its rows are updated while the workers wait.
    pub vacuum_rows: u64,
    pub vacuum_secs: u64,
    /// w: jobs burnt down at each point of the scaling curve, 1 and 100 per claim.
    pub scaling_jobs_1: u64,
    pub scaling_jobs_100: u64,
    /// s: seconds of the capacity measurement, of the soak, and of one sample; how long
    /// finished jobs are kept before they are purged.
    pub capacity_secs: u64,
    pub soak_secs: u64,
    pub soak_sample_secs: u64,
    pub soak_retention_secs: u64,
    /// u: seconds of the steady window of the rate-limited queue (its quiet window lasts
    /// `idle_secs`).
    pub flow_rate_secs: u64,
    /// o: seconds a transaction is held open, seconds measured before it, and jobs per second
    /// offered throughout (BENCH_HOLD_SECS, BENCH_HOLD_BEFORE_SECS, BENCH_HOLD_RATE override
    /// them).
    pub hold_secs: u64,
    pub hold_before_secs: u64,
    pub hold_rate: f64,
    /// y: jobs run through the queue at a steady rate, the live jobs whose size is the
    /// baseline, and jobs per second offered (BENCH_STORAGE_JOBS, BENCH_STORAGE_LIVE,
    /// BENCH_STORAGE_RATE override them).
    pub storage_jobs: u64,
    pub storage_live: u64,
    pub storage_rate: f64,
    /// j: parents of the fan-in, and rounds of it (each burns the parents down without and
    /// with their child); steps of the chain; signals sent (BENCH_FANIN_PARENTS,
    /// BENCH_FANIN_ROUNDS, BENCH_CHAIN_STEPS, BENCH_SIGNALS override them).
    pub fanin_parents: u64,
    pub fanin_rounds: u64,
    pub chain_steps: u64,
    pub signals: u64,
}

impl Scale {
    pub fn full() -> Scale {
        Scale {
            name: "full",
            enqueue_secs: 15,
            burn_jobs: 100_000,
            latency_secs: 30,
            backlog_rounds: 50,
            backlog_large: 1_000_000,
            backlog_burn: 50_000,
            wal_jobs: 10_000,
            idle_secs: 30,
            pgbench_secs: 20,
            long_jobs: 3_000_000,
            kinds_backlog: 200_000,
            kinds_claims: 200,
            vacuum_rows: 10_000,
            vacuum_secs: 5,
            scaling_jobs_1: 20_000,
            scaling_jobs_100: 100_000,
            capacity_secs: 30,
            soak_secs: 600,
            soak_sample_secs: 10,
            soak_retention_secs: 60,
            flow_rate_secs: 20,
            hold_secs: 180,
            hold_before_secs: 60,
            hold_rate: 400.0,
            storage_jobs: 2_000_000,
            storage_live: 100_000,
            storage_rate: 5_000.0,
            fanin_parents: 10_000,
            fanin_rounds: 10,
            chain_steps: 1_000,
            signals: 200,
        }
    }

    pub fn small() -> Scale {
        Scale {
            name: "small",
            enqueue_secs: 3,
            burn_jobs: 10_000,
            latency_secs: 5,
            backlog_rounds: 5,
            backlog_large: 100_000,
            backlog_burn: 5_000,
            wal_jobs: 1_000,
            idle_secs: 5,
            pgbench_secs: 5,
            long_jobs: 300_000,
            kinds_backlog: 20_000,
            kinds_claims: 50,
            vacuum_rows: 2_000,
            vacuum_secs: 3,
            scaling_jobs_1: 2_000,
            scaling_jobs_100: 10_000,
            capacity_secs: 5,
            soak_secs: 60,
            soak_sample_secs: 5,
            soak_retention_secs: 10,
            flow_rate_secs: 5,
            hold_secs: 20,
            hold_before_secs: 10,
            hold_rate: 400.0,
            storage_jobs: 200_000,
            storage_live: 10_000,
            storage_rate: 5_000.0,
            fanin_parents: 2_000,
            fanin_rounds: 3,
            chain_steps: 200,
            signals: 50,
        }
    }
}

/// A positive number from the environment variable `name`, if it is set.
fn positive(name: &str) -> Result<Option<f64>> {
    match env::var(name) {
        Err(_) => Ok(None),
        Ok(text) => match text.trim().parse::<f64>() {
            Ok(v) if v > 0.0 && v.is_finite() => Ok(Some(v)),
            _ => bail!("{name} must be a positive number, not {text:?}"),
        },
    }
}

impl Scale {
    /// Applies the environment's overrides of the sizes of o, y and j, so that a run of one of
    /// them can be cut shorter (or made longer) than its scale says.
    fn overridden(&mut self) -> Result<()> {
        let whole = |v: f64| v.round().max(1.0) as u64;
        if let Some(v) = positive("BENCH_HOLD_SECS")? {
            self.hold_secs = whole(v);
        }
        if let Some(v) = positive("BENCH_HOLD_BEFORE_SECS")? {
            self.hold_before_secs = whole(v);
        }
        if let Some(v) = positive("BENCH_HOLD_RATE")? {
            self.hold_rate = v;
        }
        if let Some(v) = positive("BENCH_STORAGE_JOBS")? {
            self.storage_jobs = whole(v);
        }
        if let Some(v) = positive("BENCH_STORAGE_LIVE")? {
            self.storage_live = whole(v);
        }
        if let Some(v) = positive("BENCH_STORAGE_RATE")? {
            self.storage_rate = v;
        }
        if let Some(v) = positive("BENCH_FANIN_PARENTS")? {
            self.fanin_parents = whole(v);
        }
        if let Some(v) = positive("BENCH_FANIN_ROUNDS")? {
            self.fanin_rounds = whole(v);
        }
        if let Some(v) = positive("BENCH_CHAIN_STEPS")? {
            self.chain_steps = whole(v).max(2);
        }
        if let Some(v) = positive("BENCH_SIGNALS")? {
            self.signals = whole(v);
        }
        Ok(())
    }
}

/// Concurrency fixed by issue 4.
pub const WORKERS: usize = 8;
pub const PRODUCERS: usize = 8;
pub const IDLE_WORKERS: usize = 16;
/// c: one job every this many milliseconds.
pub const LATENCY_INTERVAL_MS: u64 = 10;
/// Small backlog of d.
pub const SMALL_BACKLOG: u64 = 1_000;

/// The load generator's superuser role (benchmarks/run creates it, and makes it the owner of
/// the pg_jobs extension): the comparators other than pg_jobs connect as it.
pub const LOAD_ROLE: &str = "bench";
/// The login role granted `jobs_worker` (benchmarks/run creates it after CREATE EXTENSION):
/// pg_jobs's producers and workers connect as it, as an application's would.
pub const WORKER_ROLE: &str = "bench_worker";
/// Every role the load generator's sessions act as: pg_stat_statements rows of these are the
/// load generator's statements (the measuring session is `postgres`).
pub const LOAD_ROLES: [&str; 2] = [LOAD_ROLE, WORKER_ROLE];

#[derive(Clone, Debug)]
pub struct Config {
    /// Connection of the load generator's sessions (role `bench`, so pg_stat_statements can
    /// tell its statements from the measuring session's and the background worker's).
    pub dsn: String,
    /// Connection of pg_jobs's producers and workers: the role granted `jobs_worker`.
    pub worker_dsn: String,
    /// Connection of the measuring session (role `postgres`).
    pub admin_dsn: String,
    /// The same database as a URL, for Node.
    pub database_url: String,
    /// The database as a URL for the role granted `jobs_worker` (the client libraries of l).
    pub worker_database_url: String,
    /// Data directory of the bench cluster (its postmaster.pid names the server's processes).
    pub data_dir: PathBuf,
    pub socket_dir: String,
    pub port: String,
    pub node: PathBuf,
    pub graphile_script: PathBuf,
    pub pgbench: PathBuf,
    pub report: PathBuf,
    pub json: PathBuf,
    pub scale: Scale,
    /// Comparators to run (all by default).
    pub comparators: Vec<String>,
    /// Scenarios to run, as their letters (`scenarios::ALL`); `None`, when BENCH_SCENARIOS is
    /// not set, runs all of them.
    pub scenarios: Option<String>,
    /// How many times the scenarios whose spread the report shows (a, b, c, r) run.
    pub repeats: u32,
    /// Versions of the comparators, for the report.
    pub graphile_version: String,
    pub node_version: String,
    pub pgmq_version: String,
}

fn var(name: &str) -> Result<String> {
    env::var(name)
        .with_context(|| format!("{name} is not set (run the suite through benchmarks/run)"))
}

fn var_or(name: &str, default: &str) -> String {
    env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// The report (BENCH_REPORT, by default `benchmarks/REPORT.md`) and the JSON of the run it is
/// rendered from (BENCH_JSON, by default the report's path with `.json`).
pub fn report_paths() -> (PathBuf, PathBuf) {
    let report = PathBuf::from(var_or("BENCH_REPORT", "benchmarks/REPORT.md"));
    let json = env::var("BENCH_JSON").map_or_else(|_| report.with_extension("json"), PathBuf::from);
    (report, json)
}

/// `charts/` beside the report.
pub fn charts_dir(report: &Path) -> PathBuf {
    report
        .parent()
        .map_or_else(|| PathBuf::from("charts"), |d| d.join("charts"))
}

impl Config {
    pub fn from_env() -> Result<Config> {
        let mut scale = match var_or("BENCH_SCALE", "full").as_str() {
            "full" => Scale::full(),
            "small" => Scale::small(),
            other => bail!("BENCH_SCALE must be full or small, not {other:?}"),
        };
        scale.overridden()?;
        let repeats = match var_or("BENCH_REPEATS", "2").parse::<u32>() {
            Ok(n) if (1..=10).contains(&n) => n,
            _ => bail!("BENCH_REPEATS must be a whole number from 1 to 10"),
        };
        let (report, json) = report_paths();
        let socket_dir = var("BENCH_SOCKETS")?;
        let port = var("BENCH_PORT")?;
        let db = var_or("BENCH_DB", "bench");
        let comparators = var_or("BENCH_COMPARATORS", "pg_jobs,handrolled,pgmq,graphile")
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        Ok(Config {
            dsn: format!("host={socket_dir} port={port} user={LOAD_ROLE} dbname={db}"),
            worker_dsn: format!("host={socket_dir} port={port} user={WORKER_ROLE} dbname={db}"),
            admin_dsn: format!("host={socket_dir} port={port} user=postgres dbname={db}"),
            database_url: format!(
                "postgres:///{db}?host={socket_dir}&port={port}&user={LOAD_ROLE}"
            ),
            worker_database_url: format!(
                "postgres:///{db}?host={socket_dir}&port={port}&user={WORKER_ROLE}"
            ),
            data_dir: PathBuf::from(var("BENCH_DATA")?),
            socket_dir,
            port,
            node: PathBuf::from(var("BENCH_NODE")?),
            graphile_script: PathBuf::from(var("BENCH_GRAPHILE_SCRIPT")?),
            pgbench: PathBuf::from(var_or(
                "BENCH_PGBENCH",
                "/usr/lib/postgresql/15/bin/pgbench",
            )),
            report,
            json,
            scale,
            comparators,
            scenarios: env::var("BENCH_SCENARIOS").ok(),
            repeats,
            graphile_version: var_or("BENCH_GRAPHILE_VERSION", "?"),
            node_version: var_or("BENCH_NODE_VERSION", "?"),
            pgmq_version: var_or("BENCH_PGMQ_VERSION", "?"),
        })
    }

    /// Where the report's charts go: `charts/` beside the report.
    pub fn charts_dir(&self) -> PathBuf {
        charts_dir(&self.report)
    }

    /// Whether the run measures the scenario of this letter.
    pub fn runs(&self, scenario: char) -> bool {
        self.scenarios.as_ref().is_none_or(|s| s.contains(scenario))
    }

    pub fn wants(&self, comparator: &str) -> bool {
        self.comparators.iter().any(|c| c == comparator)
    }
}
