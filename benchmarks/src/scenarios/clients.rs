//! l. The client libraries (clients/node, clients/python): a burn-down of 20,000 queued no-op
//! jobs by each library's worker at concurrency 8 with its defaults, directly and through a
//! PgBouncer 1.18 in transaction pooling mode, against the load generator's own SQL loop at
//! the same settings (8 sessions, one claim and one complete per job). The libraries run in
//! processes of their own; their CPU is read from /proc, the SQL loop's is this process's.
//!
//! benchmarks/run builds the libraries (clients/cluster.sh) and passes BENCH_CLIENTS (the
//! clients/ directory) and BENCH_PGBOUNCER_PORT; this file starts and stops the PgBouncer.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use postgres::Client;

use super::{attempt, burn, connect_workers, prepare_queued, Ctx};
use crate::comparators::pg_jobs::{PgJobs, QUEUE};
use crate::comparators::Comparator;
use crate::config::{LOAD_ROLES, WORKERS, WORKER_ROLE};
use crate::cpu;
use crate::db::Window;
use crate::results::Measurement;

/// Jobs burnt down per run.
pub const JOBS: u64 = 20_000;
pub const SQL_LOOP: &str = "SQL loop (Rust, 8 sessions)";
pub const NODE: &str = "Node (clients/node)";
pub const PYTHON: &str = "Python threads (clients/python)";
pub const PYTHON_ASYNC: &str = "Python asyncio (clients/python)";
pub const DIRECT: &str = "direct";
pub const BOUNCER: &str = "through PgBouncer";

/// A library's burn-down program.
struct Program {
    name: &'static str,
    command: Vec<String>,
}

fn programs(clients: &Path, dsn: &str) -> Vec<Program> {
    let node = clients.join("node/dist/bench/burndown.js");
    let python = clients.join("python/.venv/bin/python");
    let script = clients.join("python/bench/burndown.py");
    let jobs = JOBS.to_string();
    let concurrency = WORKERS.to_string();
    let s = |p: &PathBuf| p.display().to_string();
    vec![
        Program {
            name: NODE,
            command: vec![
                "node".into(),
                s(&node),
                dsn.into(),
                QUEUE.into(),
                jobs.clone(),
                concurrency.clone(),
            ],
        },
        Program {
            name: PYTHON,
            command: vec![
                s(&python),
                s(&script),
                dsn.into(),
                QUEUE.into(),
                jobs.clone(),
                concurrency.clone(),
                "threads".into(),
            ],
        },
        Program {
            name: PYTHON_ASYNC,
            command: vec![
                s(&python),
                s(&script),
                dsn.into(),
                QUEUE.into(),
                jobs,
                concurrency,
                "asyncio".into(),
            ],
        },
    ]
}

/// Runs the SQL loop and each library, directly and through PgBouncer (pg_jobs only, whatever
/// the queues of the run).
pub fn run(ctx: &Ctx, admin: &mut Client, _: &[&dyn Comparator]) -> Vec<Measurement> {
    let mut out = vec![attempt("l", DIRECT, SQL_LOOP, || sql_loop(ctx, admin))];
    let Ok(clients) = std::env::var("BENCH_CLIENTS") else {
        out.push(
            Measurement::new("l", DIRECT, NODE)
                .missing("BENCH_CLIENTS is not set (run through benchmarks/run)"),
        );
        return out;
    };
    let clients = PathBuf::from(clients);
    let port = std::env::var("BENCH_PGBOUNCER_PORT").unwrap_or_else(|_| "5489".into());
    let bouncer = match Bouncer::start(ctx, &port) {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("  l · PgBouncer did not start: {e:#}");
            None
        }
    };
    // The libraries' workers log in as the SQL loop's do: the role granted jobs_worker.
    let direct_dsn = ctx.cfg.worker_database_url.clone();
    let bouncer_dsn = format!(
        "postgresql://{WORKER_ROLE}@127.0.0.1:{port}/{}",
        database(ctx)
    );
    for (variant, dsn) in [(DIRECT, direct_dsn), (BOUNCER, bouncer_dsn)] {
        for program in programs(&clients, &dsn) {
            if variant == BOUNCER && bouncer.is_none() {
                out.push(
                    Measurement::new("l", variant, program.name).missing("PgBouncer did not start"),
                );
                continue;
            }
            out.push(attempt("l", variant, program.name, || {
                library(ctx, admin, &program, variant)
            }));
        }
    }
    drop(bouncer);
    out
}

/// The baseline: 8 sessions of this process, each claiming one job and completing it.
fn sql_loop(ctx: &Ctx, admin: &mut Client) -> Result<Measurement> {
    let c = PgJobs::new("pg_jobs", "10 seconds");
    prepare_queued(admin, &c, JOBS)?;
    let mut workers = connect_workers(ctx, &c, WORKERS)?;
    let window = Window::open(&ctx.server, admin)?;
    let burned = burn(&mut workers, 1, JOBS)?;
    let span = window.close(&ctx.server, admin, 0.0)?;
    check_empty(admin, &c)?;
    Ok(Measurement::new("l", DIRECT, SQL_LOOP)
        .throughput(burned.done, &span)
        .note("jobs_claim(n => 1) + jobs_complete(id, lease), prepared statements"))
}

fn check_empty(admin: &mut Client, c: &PgJobs) -> Result<()> {
    let left = c.pending(admin)?;
    if left != 0 {
        bail!("{left} jobs were still queued or running after the burn-down");
    }
    Ok(())
}

/// One library's burn-down: its program connects, says READY, starts on GO and says DONE.
fn library(ctx: &Ctx, admin: &mut Client, program: &Program, variant: &str) -> Result<Measurement> {
    let c = PgJobs::new("pg_jobs", "10 seconds");
    prepare_queued(admin, &c, JOBS)?;
    let mut child = Command::new(&program.command[0])
        .args(&program.command[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {}", program.command.join(" ")))?;
    let lines = lines_of(&mut child);
    let outcome = (|| {
        expect(&lines, "READY", Duration::from_secs(60))?;
        let pid = child.id() as i32;
        let cpu_before = cpu::process_seconds(pid);
        let window = Window::open(&ctx.server, admin)?;
        writeln!(child.stdin.as_mut().context("the program's stdin")?, "GO")?;
        expect(&lines, "DONE", Duration::from_secs(600))?;
        let client_cpu = cpu::process_seconds(pid) - cpu_before;
        let span = window.close(&ctx.server, admin, client_cpu)?;
        Ok(span)
    })();
    let span = match outcome {
        Ok(span) => span,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
    };
    let status = child.wait()?;
    if !status.success() {
        bail!("{} exited with {status}", program.command.join(" "));
    }
    check_empty(admin, &c)?;
    Ok(Measurement::new("l", variant, program.name)
        .throughput(JOBS, &span)
        .note("concurrency 8, the library's defaults"))
}

fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn expect(lines: &mpsc::Receiver<String>, word: &str, timeout: Duration) -> Result<()> {
    loop {
        match lines.recv_timeout(timeout) {
            Ok(line) if line.trim() == word => return Ok(()),
            Ok(_) => continue,
            Err(_) => {
                bail!("the program did not print {word} within {timeout:?} (see its stderr above)")
            }
        }
    }
}

/// The bench database's name.
fn database(ctx: &Ctx) -> String {
    ctx.cfg
        .dsn
        .split("dbname=")
        .nth(1)
        .unwrap_or("bench")
        .to_owned()
}

/// A PgBouncer in transaction pooling mode in front of the bench cluster, stopped on drop.
struct Bouncer {
    dir: PathBuf,
}

impl Bouncer {
    fn start(ctx: &Ctx, port: &str) -> Result<Bouncer> {
        let dir = PathBuf::from(&ctx.cfg.socket_dir).join("pgbouncer");
        std::fs::create_dir_all(&dir)?;
        let db = database(ctx);
        std::fs::write(
            dir.join("pgbouncer.ini"),
            format!(
                "[databases]\n{db} = host={} port={} dbname={db}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\n\
                 listen_port = {port}\nunix_socket_dir =\nauth_type = trust\nauth_file = {}/userlist.txt\n\
                 pool_mode = transaction\nmax_client_conn = 200\ndefault_pool_size = 20\n\
                 logfile = {}/pgbouncer.log\npidfile = {}/pgbouncer.pid\n",
                ctx.cfg.socket_dir,
                ctx.cfg.port,
                dir.display(),
                dir.display(),
                dir.display()
            ),
        )?;
        let users: String = LOAD_ROLES
            .iter()
            .map(|r| format!("\"{r}\" \"\"\n"))
            .collect();
        std::fs::write(dir.join("userlist.txt"), users)?;
        // PgBouncer refuses to run as root: as root, run it as the cluster's owner.
        let mut command = if unsafe { libc::geteuid() } == 0 {
            let _ = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir)
                .status();
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", "/usr/sbin/pgbouncer"]);
            c
        } else {
            Command::new("/usr/sbin/pgbouncer")
        };
        let status = command
            .arg("-d")
            .arg("-q")
            .arg(dir.join("pgbouncer.ini"))
            .status()?;
        if !status.success() {
            bail!(
                "pgbouncer exited with {status}; see {}/pgbouncer.log",
                dir.display()
            );
        }
        let bouncer = Bouncer { dir };
        let dsn = format!("host=127.0.0.1 port={port} user={WORKER_ROLE} dbname={db}");
        for _ in 0..50 {
            if postgres::Client::connect(&dsn, postgres::NoTls).is_ok() {
                return Ok(bouncer);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!("PgBouncer on port {port} does not answer")
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.dir.join("pgbouncer.pid")) {
            if let Ok(pid) = pid.trim().parse::<i32>() {
                // SAFETY: signals the PgBouncer this run started (its own pid file).
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
        }
    }
}
