//! The counts mode (issue 39): what one operation costs the server per job, in counts that do
//! not drift with the machine's speed or load, for pg_jobs, the hand-rolled queue and pgmq in
//! the same run.
//!
//! For each operation (enqueue 1; enqueue 1,000 per call; claim + complete 1; claim 100 +
//! complete the batch; pg_jobs also with unique keys, over groups, as a tenant's worker, and
//! completing and claiming in one transaction)
//! and each queue, one measured session on the counts cluster, whose postmaster runs under
//! callgrind (benchmarks/run starts it):
//!
//! 1. The cluster is started afresh (`benchmarks/counts-cluster start`): pg_jobs's
//!    shared-memory caches outlive a TRUNCATE, and a row must not find what the rows before it
//!    left there.
//! 2. The queue is emptied, the jobs a claim needs loaded, the table vacuumed and analyzed,
//!    all by the `postgres` session.
//! 3. The measured session connects as the queue's producers and workers do, prepares its
//!    statements and runs the operation [`Size::warm`] times, so its caches and plans are
//!    settled (PostgreSQL picks a generic plan after five executions).
//! 4. `SELECT pg_sleep(0)` twice: callgrind writes what the backend executed up to each
//!    marker; the second file holds one marker alone. The `postgres` session takes a
//!    checkpoint and notes the WAL insert position and the buffers the session's statements
//!    dirtied so far.
//! 5. The operation [`Size::measured`] times, then a marker: the third file holds the stretch
//!    and one marker; the `postgres` session notes the WAL position and buffers again.
//!
//! Instructions: the third file's less the second's. WAL: `pg_waldump --stats=record` over the
//! stretch, without the standby snapshots and checkpoints other processes log on their own
//! schedule; bytes of the records, and of the full-page images apart. Buffers dirtied:
//! pg_stat_statements's `shared_blks_dirtied` of the session's role (PostgreSQL 15 has no
//! pg_stat_io); as the stretch starts right after a checkpoint, every page it writes counts
//! once. Commits: the stretch's commit records. Each divided by the jobs of the stretch. Every row is measured `BENCH_COUNTS_REPEATS` times (default 2),
//! all rows once before any row again, and [`drifting`] names the figures whose repetitions
//! differ by more than ±2%.

mod callgrind;
mod waldump;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use postgres::Client;

use crate::comparators::handrolled::Handrolled;
use crate::comparators::pg_jobs::{Login, PgJobs, QUEUE};
use crate::comparators::pgmq::Pgmq;
use crate::comparators::{payload, Comparator, Producer, Worker};
use crate::config::{Config, WORKER_ROLE};
use crate::db;
use crate::results::{CountRow, Counts, PerJob};
use crate::scenarios::flow::{load_grouped, UniqueProducer};

/// What an operation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// Enqueues this many jobs per call (1: one job per transaction).
    Enqueue(usize),
    /// Claims this many jobs, then completes them: one job with `jobs_complete` and its
    /// likes, several with one batched call.
    ClaimComplete(i32),
}

/// How pg_jobs's queue is used; the other queues are used plainly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    Plain,
    /// Every job with a distinct unique key sent by the client.
    UniqueKeys,
    /// Jobs spread over 1,000 groups of a queue with `group_concurrency => 1`.
    Groups,
    /// Producers and workers log in as the `jobs_worker` role acting for a tenant.
    Tenant,
    /// The worker completes the jobs it holds and claims its next ones in one call and one
    /// transaction (`jobs_complete_and_claim`): one commit per claim.
    OneCommit,
    /// The queue claims by kind (`claims_by_kind`): every job also goes into the kinds index.
    ByKind,
}

/// The tenant of [`Usage::Tenant`].
const TENANT: &str = "acme";

/// The operations, as the table names them.
pub const ENQUEUE_1: &str = "enqueue, 1 per transaction";
pub const ENQUEUE_1000: &str = "enqueue, 1,000 per call";
pub const CLAIM_1: &str = "claim 1 + complete it";
pub const CLAIM_100: &str = "claim 100 + complete them in one call";

/// The queues (and pg_jobs's usages), as the table names them.
pub const PG_JOBS: &str = "pg_jobs";
pub const HANDROLLED: &str = "hand-rolled";
pub const PGMQ: &str = "pgmq";
pub const UNIQUE: &str = "pg_jobs, distinct unique keys";
pub const GROUPS: &str = "pg_jobs, 1,000 groups at concurrency 1";
pub const TENANTS: &str = "pg_jobs, jobs_worker for a tenant";
pub const ONE_COMMIT: &str = "pg_jobs, one commit per claim (jobs_complete_and_claim)";
pub const BY_KIND: &str = "pg_jobs, claims_by_kind (jobs in the kinds index too)";

/// One row of the table: an operation on a queue.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub operation: &'static str,
    pub work: Work,
    pub queue: &'static str,
    pub usage: Usage,
}

/// Every row, in the table's order.
pub fn cases() -> Vec<Case> {
    let operations = [
        (ENQUEUE_1, Work::Enqueue(1)),
        (ENQUEUE_1000, Work::Enqueue(1000)),
        (CLAIM_1, Work::ClaimComplete(1)),
        (CLAIM_100, Work::ClaimComplete(100)),
    ];
    let mut out = Vec::new();
    for (operation, work) in operations {
        let mut queues = vec![
            (PG_JOBS, Usage::Plain),
            (HANDROLLED, Usage::Plain),
            (PGMQ, Usage::Plain),
        ];
        match work {
            Work::Enqueue(_) => {
                queues.push((UNIQUE, Usage::UniqueKeys));
                queues.push((BY_KIND, Usage::ByKind));
            }
            Work::ClaimComplete(_) => queues.push((GROUPS, Usage::Groups)),
        }
        queues.push((TENANTS, Usage::Tenant));
        if let Work::ClaimComplete(_) = work {
            queues.push((ONE_COMMIT, Usage::OneCommit));
        }
        for (queue, usage) in queues {
            out.push(Case {
                operation,
                work,
                queue,
                usage,
            });
        }
    }
    out
}

/// The cases whose queue (as the table names it) contains one of the comma-separated words
/// of `filter` (BENCH_COUNTS_ONLY, for iterating on a few rows), or is exactly a word written
/// with a leading `=` (`=pg_jobs`: pg_jobs's plain rows alone); all of them without one.
pub fn only(cases: Vec<Case>, filter: Option<&str>) -> Vec<Case> {
    let Some(filter) = filter.filter(|f| !f.trim().is_empty()) else {
        return cases;
    };
    let words: Vec<&str> = filter
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .collect();
    cases
        .into_iter()
        .filter(|c| {
            words.iter().any(|w| match w.strip_prefix('=') {
                Some(exact) => c.queue == exact,
                None => c.queue.contains(w),
            })
        })
        .collect()
}

/// How many times a case's operation runs before and in its measured stretch.
#[derive(Clone, Copy, Debug)]
pub struct Size {
    pub warm: u32,
    pub measured: u32,
}

/// Enough calls for a settled session and a stretch whose per-job figures do not hang on
/// one call; few enough for a run under callgrind of a few minutes.
pub fn size(work: Work) -> Size {
    match work {
        Work::Enqueue(1) | Work::ClaimComplete(1) => Size {
            warm: 20,
            measured: 100,
        },
        Work::Enqueue(_) | Work::ClaimComplete(_) => Size {
            warm: 6,
            measured: 5,
        },
    }
}

/// Jobs queued before a claim's session starts: more than its warm-up and stretch take.
const BACKLOG: u64 = 2_000;

/// One figure of [`PerJob`], read out of it.
pub type Figure = fn(&PerJob) -> f64;

/// The figures whose repetitions must agree, and how the table names them.
pub const CHECKED: [(&str, Figure); 5] = [
    ("instructions", |p| p.instructions),
    ("WAL bytes", |p| p.wal_bytes),
    ("WAL records", |p| p.wal_records),
    ("buffers dirtied", |p| p.buffers_dirtied),
    ("commits", |p| p.commits),
];

/// How far apart a figure's repetitions may be: ±2% of their mean.
pub const AGREE: f64 = 0.02;

/// Each checked figure of each row whose repetitions are further apart than [`AGREE`].
pub fn drifting(counts: &Counts) -> Vec<String> {
    let mut out = Vec::new();
    for row in &counts.rows {
        for (name, figure) in CHECKED {
            if let Some(spread) = row.spread(figure).filter(|s| *s > AGREE) {
                out.push(format!(
                    "{} · {}: {name} ±{:.1}%",
                    row.operation,
                    row.queue,
                    spread * 100.0
                ));
            }
        }
    }
    out
}

/// The counts run's own settings, besides those of [`Config`] (which point at the counts
/// cluster).
struct Setup {
    cfg: Config,
    /// `benchmarks/counts-cluster`, which starts the cluster afresh.
    cluster: PathBuf,
    /// Where callgrind writes the backends' files.
    callgrind_dir: PathBuf,
    /// `pg_waldump` of the cluster's PostgreSQL, and the cluster's `pg_wal`.
    waldump: PathBuf,
    wal_dir: PathBuf,
    repetitions: u32,
}

impl Setup {
    fn from_env() -> Result<Setup> {
        let cfg = Config::from_env()?;
        let var = |name: &str| {
            std::env::var(name).with_context(|| {
                format!("{name} is not set (run the counts through benchmarks/run counts)")
            })
        };
        let repetitions = match std::env::var("BENCH_COUNTS_REPEATS").as_deref() {
            Err(_) => 2,
            Ok(n) => match n.parse::<u32>() {
                Ok(n) if (1..=10).contains(&n) => n,
                _ => bail!("BENCH_COUNTS_REPEATS must be a whole number from 1 to 10, not {n:?}"),
            },
        };
        Ok(Setup {
            cluster: PathBuf::from(var("BENCH_COUNTS_CLUSTER")?),
            callgrind_dir: PathBuf::from(var("BENCH_CALLGRIND_DIR")?),
            waldump: PathBuf::from(var("BENCH_PGWALDUMP")?),
            wal_dir: cfg.data_dir.join("pg_wal"),
            repetitions,
            cfg,
        })
    }
}

/// Measures every case `BENCH_COUNTS_REPEATS` times on the counts cluster.
pub fn run() -> Result<Counts> {
    let setup = Setup::from_env()?;
    let mut admin = db::connect(&setup.cfg.admin_dsn)?;
    // Tables outlive the restarts: the grant is made once.
    admin.execute(
        "SELECT jobs_grant_tenant($1::text, $2::text)",
        &[&WORKER_ROLE, &TENANT],
    )?;
    let row = admin.query_one(
        "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI \"UTC\"'),
                (SELECT extversion FROM pg_extension WHERE extname = 'pg_jobs'),
                version()",
        &[],
    )?;
    let (started, version, postgres): (String, String, String) =
        (row.get(0), row.get(1), row.get(2));
    drop(admin);
    let git = std::env::var("BENCH_GIT").unwrap_or_else(|_| "?".into());
    let cases = only(cases(), std::env::var("BENCH_COUNTS_ONLY").ok().as_deref());
    ensure!(
        !cases.is_empty(),
        "BENCH_COUNTS_ONLY names no row: give words of the queue column, comma-separated"
    );
    let mut rows: Vec<CountRow> = cases
        .iter()
        .map(|case| CountRow {
            operation: case.operation.to_owned(),
            queue: case.queue.to_owned(),
            jobs: jobs_of(case.work, size(case.work).measured),
            ..CountRow::default()
        })
        .collect();
    for repeat in 0..setup.repetitions {
        eprintln!("\n== counts (run {} of {})", repeat + 1, setup.repetitions);
        for (case, row) in cases.iter().zip(rows.iter_mut()) {
            eprint!("  {} · {} ... ", case.operation, case.queue);
            let started = Instant::now();
            match measure(&setup, case) {
                Ok(per) => {
                    eprintln!(
                        "{:.0} instructions, {:.0} WAL bytes, {:.2} commits per job ({:.0} s)",
                        per.instructions,
                        per.wal_bytes,
                        per.commits,
                        started.elapsed().as_secs_f64()
                    );
                    row.runs.push(per);
                }
                Err(e) => {
                    eprintln!("FAILED: {e:#}");
                    row.missing = Some(format!("error: {e:#}"));
                }
            }
        }
    }
    Ok(Counts {
        started,
        engine: format!("pg_jobs {version} (git {git})"),
        postgres,
        valgrind: std::env::var("BENCH_VALGRIND_VERSION").unwrap_or_else(|_| "?".into()),
        repetitions: setup.repetitions,
        rows,
    })
}

/// Jobs in `calls` calls of `work`.
fn jobs_of(work: Work, calls: u32) -> u64 {
    calls as u64
        * match work {
            Work::Enqueue(n) => n as u64,
            Work::ClaimComplete(n) => n as u64,
        }
}

/// The queue a case measures.
fn queue(case: &Case) -> Box<dyn Comparator> {
    match (case.queue, case.usage) {
        (HANDROLLED, _) => Box::new(Handrolled),
        (PGMQ, _) => Box::new(Pgmq),
        (_, Usage::Tenant) => Box::new(PgJobs::logged_in(
            PG_JOBS,
            "10 seconds",
            Login::WorkerForTenant(TENANT),
        )),
        _ => Box::new(PgJobs::new(PG_JOBS, "10 seconds")),
    }
}

/// Starts the cluster afresh and connects to it as `postgres`.
fn restart(setup: &Setup) -> Result<Client> {
    let status = Command::new(&setup.cluster)
        .arg("start")
        .status()
        .with_context(|| format!("running {}", setup.cluster.display()))?;
    ensure!(
        status.success(),
        "{} start failed ({status})",
        setup.cluster.display()
    );
    db::connect(&setup.cfg.admin_dsn)
}

/// One repetition of one case (see the module's doc).
fn measure(setup: &Setup, case: &Case) -> Result<PerJob> {
    let admin = &mut restart(setup)?;
    let c = queue(case);
    c.reset(admin)?;
    if case.usage == Usage::Groups {
        admin.execute(
            &format!("SELECT jobs_create_queue('{QUEUE}', group_concurrency => 1)"),
            &[],
        )?;
    }
    if case.usage == Usage::ByKind {
        admin.execute(
            &format!("SELECT jobs_create_queue('{QUEUE}', claims_by_kind => true)"),
            &[],
        )?;
    }
    if let Work::ClaimComplete(_) = case.work {
        if case.usage == Usage::Groups {
            load_grouped(admin, BACKLOG)?;
        } else {
            c.load_queued(admin, BACKLOG)?;
        }
    }
    admin.batch_execute(&format!("VACUUM (ANALYZE) {}", c.table()))?;
    let mut conn = c.connect(&setup.cfg)?;
    let row = conn.query_one("SELECT pg_backend_pid(), current_user::text", &[])?;
    let (pid, role): (i32, String) = (row.get(0), row.get(1));
    let size = size(case.work);
    let jobs = jobs_of(case.work, size.measured);
    match case.work {
        Work::Enqueue(n) => {
            let mut p = if case.usage == Usage::UniqueKeys {
                UniqueProducer::prepare(conn)?
            } else {
                c.producer(conn)?
            };
            let mut next = 0;
            let mut enqueue = |p: &mut dyn Producer| -> Result<()> {
                if n == 1 {
                    p.enqueue(&payload(next))?;
                } else {
                    let payloads: Vec<_> = (next..next + n as u64).map(payload).collect();
                    p.enqueue_batch(&payloads)?;
                }
                next += n as u64;
                Ok(())
            };
            (|| {
                for _ in 0..size.warm {
                    enqueue(p.as_mut())?;
                }
                let probe = Probe::open(admin, p.session(), pid, &role)?;
                for _ in 0..size.measured {
                    enqueue(p.as_mut())?;
                }
                probe.close(setup, admin, p.session(), jobs)
            })()
        }
        Work::ClaimComplete(n) => {
            let mut w = c.worker(conn)?;
            let full = |claimed: Vec<_>| -> Result<Vec<_>> {
                ensure!(
                    claimed.len() == n as usize,
                    "a claim of {n} brought {} jobs with {BACKLOG} loaded",
                    claimed.len()
                );
                Ok(claimed)
            };
            // One commit per claim: each step completes the jobs the step before claimed and
            // claims as many, so a step settles n jobs in one transaction, as a steady
            // worker's does; the first jobs in hand come from a plain claim.
            let mut held = if case.usage == Usage::OneCommit {
                full(w.claim(n)?)?
            } else {
                Vec::new()
            };
            let mut step = |w: &mut dyn Worker| -> Result<()> {
                if case.usage == Usage::OneCommit {
                    held = full(w.complete_and_claim(&held, n)?)?;
                    Ok(())
                } else {
                    let claimed = full(w.claim(n)?)?;
                    w.complete(&claimed)
                }
            };
            (|| {
                for _ in 0..size.warm {
                    step(w.as_mut())?;
                }
                let probe = Probe::open(admin, w.session(), pid, &role)?;
                for _ in 0..size.measured {
                    step(w.as_mut())?;
                }
                probe.close(setup, admin, w.session(), jobs)
            })()
        }
    }
}

/// The server's counters at the start of a measured stretch.
struct Probe {
    pid: i32,
    role: String,
    lsn: String,
    dirtied: i64,
}

/// The WAL insert position and the buffers `role`'s statements have dirtied so far.
fn snapshot(admin: &mut Client, role: &str) -> Result<(String, i64)> {
    let row = admin.query_one(
        "SELECT pg_current_wal_insert_lsn()::text,
                (SELECT coalesce(sum(s.shared_blks_dirtied), 0)::bigint
                   FROM pg_stat_statements s
                   JOIN pg_roles r ON r.oid = s.userid
                   JOIN pg_database d ON d.oid = s.dbid
                  WHERE r.rolname = $1 AND d.datname = current_database())",
        &[&role],
    )?;
    Ok((row.get(0), row.get(1)))
}

/// Marks a stretch in `session`'s backend for callgrind.
fn mark(session: &mut Client) -> Result<()> {
    session.batch_execute("SELECT pg_sleep(0)")?;
    Ok(())
}

impl Probe {
    /// Marks the start: the first marker's file holds the connection and warm-up, the
    /// second's one marker alone. Then a checkpoint, so the stretch dirties every page it
    /// writes once (and images it in the WAL once).
    fn open(admin: &mut Client, session: &mut Client, pid: i32, role: &str) -> Result<Probe> {
        mark(session)?;
        mark(session)?;
        db::checkpoint(admin)?;
        let (lsn, dirtied) = snapshot(admin, role)?;
        Ok(Probe {
            pid,
            role: role.to_owned(),
            lsn,
            dirtied,
        })
    }

    /// Marks the end and reads what the stretch of `jobs` jobs cost.
    fn close(
        self,
        setup: &Setup,
        admin: &mut Client,
        session: &mut Client,
        jobs: u64,
    ) -> Result<PerJob> {
        mark(session)?;
        let (end, dirtied) = snapshot(admin, &self.role)?;
        wait_flushed(admin, &end)?;
        let dir = &setup.callgrind_dir;
        let marker = callgrind::instructions(&callgrind::part_file(dir, self.pid, 2))?;
        let stretch = callgrind::instructions(&callgrind::part_file(dir, self.pid, 3))?;
        let types = waldump::stats(&setup.waldump, &setup.wal_dir, &self.lsn, &end)?;
        let types: Vec<_> = types
            .into_iter()
            .filter(|t| !waldump::not_the_sessions(&t.name))
            .collect();
        let per = |v: f64| v / jobs as f64;
        let count = |prefix: &str| {
            per(types
                .iter()
                .filter(|t| t.name.starts_with(prefix))
                .map(|t| t.count as f64)
                .sum())
        };
        Ok(PerJob {
            instructions: per(stretch.saturating_sub(marker) as f64),
            wal_bytes: per(types.iter().map(|t| t.record_bytes as f64).sum()),
            fpi_bytes: per(types.iter().map(|t| t.fpi_bytes as f64).sum()),
            wal_records: per(types.iter().map(|t| t.count as f64).sum()),
            heap_records: count("Heap/"),
            heap2_records: count("Heap2/"),
            btree_inserts: count("Btree/INSERT_"),
            btree_splits: count("Btree/SPLIT_"),
            buffers_dirtied: per((dirtied - self.dirtied) as f64),
            commits: per(types
                .iter()
                .filter(|t| t.name == "Transaction/COMMIT")
                .map(|t| t.count as f64)
                .sum()),
            records: types
                .iter()
                .map(|t| (t.name.clone(), per(t.count as f64)))
                .collect(),
        })
    }
}

/// Waits until the WAL up to `lsn` is on disk, where pg_waldump reads it (the stretch's last
/// commit flushed its own records; a record another process wrote after it may not be yet).
fn wait_flushed(admin: &mut Client, lsn: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let flushed: bool = admin
            .query_one(
                "SELECT pg_current_wal_flush_lsn() >= $1::text::pg_lsn",
                &[&lsn],
            )?
            .get(0);
        if flushed {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the WAL up to {lsn} was not flushed within 10 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::{
        cases, drifting, Usage, Work, BY_KIND, CLAIM_100, ENQUEUE_1, GROUPS, ONE_COMMIT, PG_JOBS,
    };
    use crate::results::{CountRow, Counts, PerJob};

    #[test]
    fn every_operation_runs_on_each_queue_and_pg_jobs_variants_where_they_apply() {
        let all = cases();
        assert_eq!(all.len(), 4 * 5 + 2 + 2);
        let on = |op: &str| all.iter().filter(|c| c.operation == op).count();
        assert_eq!(on(CLAIM_100), 6);
        assert_eq!(on(ENQUEUE_1), 6);
        assert!(all
            .iter()
            .filter(|c| c.usage == Usage::ByKind)
            .all(|c| matches!(c.work, Work::Enqueue(_)) && c.queue == BY_KIND));
        assert!(all
            .iter()
            .filter(|c| c.usage == Usage::OneCommit)
            .all(|c| matches!(c.work, Work::ClaimComplete(_)) && c.queue == ONE_COMMIT));
        assert!(all
            .iter()
            .any(|c| c.operation == CLAIM_100 && c.queue == GROUPS && c.usage == Usage::Groups));
        assert!(!all
            .iter()
            .any(|c| matches!(c.work, Work::ClaimComplete(_)) && c.usage == Usage::UniqueKeys));
        assert!(all
            .iter()
            .any(|c| c.queue == PG_JOBS && c.usage == Usage::Plain));
    }

    #[test]
    fn a_filter_keeps_the_rows_whose_queue_it_names() {
        let all = cases().len();
        assert_eq!(super::only(cases(), None).len(), all);
        assert_eq!(super::only(cases(), Some(" ")).len(), all);
        let mine = super::only(cases(), Some("one commit"));
        assert_eq!(mine.len(), 2);
        assert!(mine.iter().all(|c| c.queue == ONE_COMMIT));
        assert_eq!(super::only(cases(), Some("pgmq, hand-rolled")).len(), 8);
        assert!(super::only(cases(), Some("nothing")).is_empty());
        let plain = super::only(cases(), Some("=pg_jobs"));
        assert_eq!(plain.len(), 4);
        assert!(plain.iter().all(|c| c.queue == PG_JOBS));
        assert_eq!(super::only(cases(), Some("=pg_jobs, pgmq")).len(), 8);
    }

    fn row(instructions: [f64; 2], commits: [f64; 2]) -> CountRow {
        CountRow {
            operation: "enqueue".into(),
            queue: "pg_jobs".into(),
            jobs: 100,
            runs: instructions
                .iter()
                .zip(commits)
                .map(|(&i, c)| PerJob {
                    instructions: i,
                    commits: c,
                    ..PerJob::default()
                })
                .collect(),
            missing: None,
        }
    }

    #[test]
    fn repetitions_further_apart_than_two_percent_are_named() {
        let counts = Counts {
            rows: vec![
                // ±1.0%: agrees.
                row([99_000.0, 101_000.0], [1.0, 1.0]),
                // ±2.5%: drifts.
                row([97_500.0, 102_500.0], [1.0, 1.0]),
            ],
            ..Counts::default()
        };
        assert_eq!(drifting(&counts), ["enqueue · pg_jobs: instructions ±2.5%"]);
        let one = Counts {
            rows: vec![CountRow {
                runs: vec![PerJob::default()],
                ..CountRow::default()
            }],
            ..Counts::default()
        };
        assert!(drifting(&one).is_empty());
    }
}
