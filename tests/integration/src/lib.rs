//! Test harness for pg_jobs: throwaway PostgreSQL clusters with the extension preloaded, and
//! helpers to talk to them over real connections.
//!
//! Every test binary gets its own cluster (see [`Cluster::shared`]), started from the PostgreSQL
//! installation [`pg_bin`] names, with the installed extension (`cargo pgrx install` runs first, from
//! `scripts/test`). Tests in one binary run in parallel and keep apart by using their own
//! queues ([`unique_queue`]).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub use postgres::{Client, NoTls};
pub use rng::Rng;

pub mod catalog;
pub mod manifest;
pub mod markdown;
pub mod released;
pub mod rng;
pub mod vanishing;

/// Where the PostgreSQL binaries live: `PG_JOBS_PG_BIN` (scripts/test points it at each
/// version's installation in turn: Debian's PostgreSQL 15, or a server build it fetched), else
/// Debian's directory for `PG_JOBS_PG_MAJOR` (default 15). pg_jobs must be installed into that
/// installation, built for its major (`cargo pgrx install --pg-config <its pg_config>
/// --no-default-features --features pgNN`).
pub fn pg_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("PG_JOBS_PG_BIN") {
        return PathBuf::from(bin);
    }
    let major = std::env::var("PG_JOBS_PG_MAJOR").unwrap_or_else(|_| "15".to_owned());
    PathBuf::from(format!("/usr/lib/postgresql/{major}/bin"))
}

/// A directory of the PostgreSQL installation the tests run, as its `pg_config` reports it
/// (`--pkglibdir`, `--sharedir`, ...).
pub fn pg_config_dir(option: &str) -> PathBuf {
    let output = Command::new(pg_bin().join("pg_config"))
        .arg(option)
        .output()
        .unwrap_or_else(|e| panic!("run pg_config {option}: {e}"));
    assert!(output.status.success(), "pg_config {option} failed");
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

/// The major version of the PostgreSQL installation the tests run (13 for "PostgreSQL 13.4"),
/// for the few checks whose SQL differs between versions.
pub fn pg_major() -> u32 {
    static MAJOR: OnceLock<u32> = OnceLock::new();
    *MAJOR.get_or_init(|| {
        let output = Command::new(pg_bin().join("pg_config"))
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("run {}/pg_config --version: {e}", pg_bin().display()));
        let version = String::from_utf8_lossy(&output.stdout);
        version
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|major| major.parse().ok())
            .unwrap_or_else(|| {
                panic!("pg_config --version said {version:?}, not \"PostgreSQL N.M\"")
            })
    })
}

/// Makes the statistics this session has gathered (transactions, table counts) visible in
/// `pg_stat_*` views now, rather than at a later flush.
///
/// From PostgreSQL 15 on, `pg_stat_force_next_flush()` does that. Before, a backend sends its
/// counts to the statistics collector only when it goes idle at least 500 ms
/// (PGSTAT_STAT_INTERVAL) after its last report, so this waits that long and ends one more
/// transaction, then lets the collector write its file for readers.
pub fn flush_statistics(client: &mut Client) {
    if pg_major() >= 15 {
        client
            .batch_execute("SELECT pg_stat_force_next_flush()")
            .expect("pg_stat_force_next_flush()");
    } else {
        std::thread::sleep(Duration::from_millis(600));
        client.batch_execute("SELECT 1").expect("SELECT 1");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The database's transactions so far (committed and rolled back, as the statistics show
/// them) and its background worker's ticks, after [`flush_statistics`]: the worker's own
/// transactions reach the statistics about once a second, so they may lag its tick count.
pub fn transactions_and_ticks(client: &mut Client) -> (i64, i64) {
    flush_statistics(client);
    let row = client
        .query_one(
            "SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database
                      WHERE datname = current_database()),
                    (SELECT ticks FROM jobs_worker_status()
                      WHERE database = current_database())",
            &[],
        )
        .expect("read the transactions and the worker's ticks");
    (row.get(0), row.get(1))
}

/// The jobs in states no committed state may have (each as `job <id>: <row>`): a queued job
/// with a lease or finished, a running one without a lease, a finished one with a lease, or
/// attempts outside `0..=max_attempts`.
pub fn impossible_states(client: &mut Client) -> Result<Vec<String>, postgres::Error> {
    Ok(client
        .query(
            "SELECT format('job %s: %s', id, to_jsonb(j))
               FROM jobs.job j
              WHERE NOT CASE state
                  WHEN 'queued'    THEN finished_at IS NULL AND lease_until IS NULL
                                        AND attempt < max_attempts
                  WHEN 'running'   THEN lease IS NOT NULL AND lease_until IS NOT NULL
                                        AND attempt >= 1 AND finished_at IS NULL
                  ELSE finished_at IS NOT NULL AND lease_until IS NULL
                END
                 OR attempt NOT BETWEEN 0 AND max_attempts",
            &[],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs a PostgreSQL program, as the `postgres` user when we are root (initdb refuses root).
///
/// When the installation has a libpq of its own, the program (and the server it may start)
/// loads that one: the PyPI server builds' `libpqwalreceiver.so` is linked with a run path of
/// the machine they were built on, so a standby's WAL receiver would otherwise load the
/// system's older libpq, which refuses the `sslnegotiation` option that `pg_basebackup -R` of
/// 17 and later writes into `primary_conninfo`.
fn pg_command(program: &str) -> Command {
    pg_command_in(&pg_bin(), program)
}

/// Runs the PostgreSQL program `program` of the installation whose binaries are in `bin` (a
/// private copy of the one [`pg_bin`] names, say), as [`pg_command`] does: pg_dump,
/// pg_restore, or another installation's server programs.
pub fn pg_command_in(bin: &Path, program: &str) -> Command {
    static LIBRARY_PATH: OnceLock<Option<String>> = OnceLock::new();
    let library_path = LIBRARY_PATH.get_or_init(|| {
        let libdir = pg_config_dir("--libdir");
        libdir
            .join("libpq.so.5")
            .exists()
            .then(|| format!("LD_LIBRARY_PATH={}", libdir.display()))
    });
    let mut command = Command::new(if running_as_root() { "runuser" } else { "env" });
    if running_as_root() {
        command.args(["-u", "postgres", "--", "env"]);
    }
    command.args(library_path).arg(bin.join(program));
    command
}

/// Runs `command`, panicking with its output when it fails.
pub fn run(command: Command, what: &str) {
    run_or_explain(command, what, String::new);
}

/// Runs `command`, panicking with its output and what `explain` adds (a server log, say)
/// when it fails.
fn run_or_explain(mut command: Command, what: &str, explain: impl FnOnce() -> String) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: could not start: {e}"));
    assert!(
        output.status.success(),
        "{what} failed: {}\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        explain()
    );
}

/// Clusters to stop when the test binary exits.
static RUNNING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Stops every cluster this binary started and deletes its directory, unless
/// `PG_JOBS_TEST_KEEP` is set: then the directories (data, server log) stay for a post-mortem.
extern "C" fn stop_all_clusters() {
    let Ok(clusters) = RUNNING.lock() else { return };
    let keep = std::env::var_os("PG_JOBS_TEST_KEEP").is_some();
    for data in clusters.iter() {
        let _ = pg_command("pg_ctl")
            .args(["stop", "-m", "immediate", "-D"])
            .arg(data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        match data.parent() {
            Some(base) if keep => eprintln!("kept the test cluster at {}", base.display()),
            Some(base) => {
                let _ = std::fs::remove_dir_all(base);
            }
            None => {}
        }
    }
}

/// A PostgreSQL cluster of our own: its data directory, socket directory and port.
pub struct Cluster {
    /// The data directory.
    pub data: PathBuf,
    /// The directory of the Unix socket and the log.
    pub base: PathBuf,
    /// The TCP port it listens on (localhost only).
    pub port: u16,
    /// Variables set in the server's environment.
    env: Vec<(String, String)>,
    /// The binaries of the PostgreSQL installation it runs ([`pg_bin`] unless started with
    /// [`Cluster::start_in`]).
    bin: PathBuf,
}

/// Settings every test cluster gets: pg_jobs preloaded with a fast worker tick.
pub const TEST_SETTINGS: &[&str] = &[
    "shared_preload_libraries = 'pg_jobs'",
    "pg_jobs.databases = 'postgres'",
    "pg_jobs.tick = '100ms'",
    "max_connections = 100",
    "fsync = off",
    "synchronous_commit = off",
    "full_page_writes = off",
    "log_min_messages = warning",
    "restart_after_crash = on",
];

/// The key of a settings line (`key = value`).
fn setting_key(line: &str) -> &str {
    line.split('=').next().unwrap_or_default().trim()
}

/// [`TEST_SETTINGS`] with each of `overrides` replacing the line of the same key (or added).
pub fn settings_with(overrides: &[&'static str]) -> Vec<&'static str> {
    TEST_SETTINGS
        .iter()
        .copied()
        .filter(|line| {
            overrides
                .iter()
                .all(|o| setting_key(o) != setting_key(line))
        })
        .chain(overrides.iter().copied())
        .collect()
}

/// [`TEST_SETTINGS`] without the lines whose keys start with one of `prefixes`.
pub fn settings_without(prefixes: &[&str]) -> Vec<&'static str> {
    TEST_SETTINGS
        .iter()
        .copied()
        .filter(|line| !prefixes.iter().any(|p| setting_key(line).starts_with(p)))
        .collect()
}

/// Whether the test clusters run pg_jobs's fast paths (`pg_jobs.fast_paths`, on by default):
/// `PG_JOBS_TEST_FAST_PATHS=off` (scripts/test's second pass on 15) starts every cluster with
/// them off, so each path takes its SQL statement, and tests that look at a fast path expect
/// the statement instead.
pub fn fast_paths() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| match std::env::var("PG_JOBS_TEST_FAST_PATHS") {
        Err(_) => true,
        Ok(value) => match value.trim().to_ascii_lowercase().as_str() {
            "" | "on" | "true" | "1" => true,
            "off" | "false" | "0" => false,
            other => panic!("PG_JOBS_TEST_FAST_PATHS is {other:?}; set it to on or off"),
        },
    })
}

/// The line [`Cluster::start`] adds to every cluster's postgresql.conf for [`fast_paths`].
const FAST_PATHS_OFF: &str = "pg_jobs.fast_paths = off";

impl Cluster {
    /// The cluster shared by every test of this binary, started on first use with
    /// [`TEST_SETTINGS`] and the extension created in database `postgres`.
    pub fn shared() -> &'static Cluster {
        static SHARED: OnceLock<Cluster> = OnceLock::new();
        SHARED.get_or_init(|| Cluster::start_with_extension("shared", TEST_SETTINGS))
    }

    /// [`Cluster::start`], then the extension created in database `postgres`: a cluster of a
    /// test's own, ready for its first call.
    pub fn start_with_extension(name: &str, settings: &[&str]) -> Cluster {
        let cluster = Cluster::start(name, settings);
        cluster
            .connect()
            .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_jobs")
            .unwrap_or_else(|e| panic!("create the extension in cluster {name}: {e}"));
        cluster
    }

    /// Drops database `name` if it is there (left by an earlier run) and creates it empty, for
    /// a test that needs a database of its own.
    pub fn recreate_database(&self, name: &str) {
        let mut admin = self.connect();
        for sql in [
            format!("DROP DATABASE IF EXISTS {name}"),
            format!("CREATE DATABASE {name}"),
        ] {
            admin
                .batch_execute(&sql)
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }

    /// Creates and starts a new cluster with `settings` appended to postgresql.conf.
    pub fn start(name: &str, settings: &[&str]) -> Cluster {
        Cluster::start_with_env(name, settings, &[])
    }

    /// [`Cluster::start`], with `env` set in the server's environment (as on machines where
    /// `RUST_BACKTRACE=1` is set for every process).
    pub fn start_with_env(name: &str, settings: &[&str], env: &[(&str, &str)]) -> Cluster {
        Cluster::start_in(&pg_bin(), name, settings, env)
    }

    /// [`Cluster::start_with_env`] with the PostgreSQL installation whose binaries are in
    /// `bin` (a private copy with another version of pg_jobs, say).
    pub fn start_in(bin: &Path, name: &str, settings: &[&str], env: &[(&str, &str)]) -> Cluster {
        check_installed();
        let base = new_base(name);
        let data = base.join("data");
        let mut initdb = pg_command_in(bin, "initdb");
        initdb
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
            .arg(&data);
        run(initdb, "initdb");
        Cluster::configure_and_start(bin, base, settings, env)
    }

    /// A streaming standby of this (running) cluster: a `pg_basebackup -R` copy of its data
    /// directory, with `settings` appended to the copied postgresql.conf, started in hot
    /// standby. The standby connects to the primary with `application_name = name`, the name
    /// `synchronous_standby_names` on the primary must give to make it synchronous. The
    /// primary's settings come along in the copy, its port and socket directory replaced.
    pub fn start_standby(&self, name: &str, settings: &[&str]) -> Cluster {
        let base = new_base(name);
        let mut backup = pg_command_in(&self.bin, "pg_basebackup");
        backup
            .args([
                "--write-recovery-conf",
                "--wal-method=stream",
                "--checkpoint=fast",
            ])
            .args(["--no-sync", "--pgdata"])
            .arg(base.join("data"))
            .arg(format!(
                "--dbname=host=localhost port={} user=postgres application_name={name}",
                self.port
            ));
        run(backup, "pg_basebackup");
        Cluster::configure_and_start(&self.bin, base, settings, &[])
    }

    /// Gives the cluster in `base` (its data directory made) a port and socket of its own and
    /// `settings`, registers it to be stopped at exit, and starts it.
    fn configure_and_start(
        bin: &Path,
        base: PathBuf,
        settings: &[&str],
        env: &[(&str, &str)],
    ) -> Cluster {
        let data = base.join("data");
        let port = free_port();
        let mut conf = format!(
            "\nport = {port}\nlisten_addresses = 'localhost'\nunix_socket_directories = '{}'\n",
            base.display()
        );
        for setting in settings {
            conf.push_str(setting);
            conf.push('\n');
        }
        // After the test's own settings: the run's choice holds for every cluster (a test that
        // compares both ways sets it per session, which a superuser may).
        if !fast_paths() {
            conf.push_str(FAST_PATHS_OFF);
            conf.push('\n');
        }
        append_as_owner(&data.join("postgresql.conf"), &conf);

        let cluster = Cluster {
            data,
            base,
            port,
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            bin: bin.to_owned(),
        };
        RUNNING.lock().unwrap().push(cluster.data.clone());
        static AT_EXIT: OnceLock<()> = OnceLock::new();
        AT_EXIT.get_or_init(|| {
            // SAFETY: registers a plain function to run at process exit.
            unsafe { libc::atexit(stop_all_clusters) };
        });
        cluster.pg_ctl_start();
        cluster
    }

    /// Promotes a standby to a primary (`pg_ctl promote`), returning once it accepts writes.
    pub fn promote(&self) {
        let mut promote = pg_command_in(&self.bin, "pg_ctl");
        promote
            .args(["promote", "-w", "-t", "60", "-D"])
            .arg(&self.data);
        run(promote, "pg_ctl promote");
    }

    fn pg_ctl_start(&self) {
        let mut start = pg_command_in(&self.bin, "pg_ctl");
        start.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        start
            .args(["start", "-w", "-t", "60", "-D"])
            .arg(&self.data)
            .arg("-l")
            .arg(self.base.join("log"));
        // Why a server does not start is in its log (a pg_jobs built for another major, say).
        run_or_explain(start, "pg_ctl start", || {
            format!("\nserver log:\n{}", self.log())
        });
    }

    /// Stops the server like a power cut: no shutdown checkpoint.
    pub fn crash(&self) {
        let mut stop = pg_command_in(&self.bin, "pg_ctl");
        stop.args(["stop", "-m", "immediate", "-w", "-D"])
            .arg(&self.data);
        run(stop, "pg_ctl stop -m immediate");
    }

    /// Stops the server cleanly (`pg_ctl stop -m fast`): sessions are ended, a shutdown
    /// checkpoint is written.
    pub fn stop(&self) {
        let mut stop = pg_command_in(&self.bin, "pg_ctl");
        stop.args(["stop", "-m", "fast", "-w", "-t", "60", "-D"])
            .arg(&self.data);
        run(stop, "pg_ctl stop -m fast");
    }

    /// Starts the server again after [`Cluster::crash`]; it runs crash recovery first.
    pub fn restart(&self) {
        self.pg_ctl_start();
    }

    /// Restarts the running server cleanly (`pg_ctl restart -m fast`): sessions are ended, a
    /// shutdown checkpoint is written, and the server starts again with no recovery to do.
    pub fn restart_fast(&self) {
        let mut restart = pg_command_in(&self.bin, "pg_ctl");
        restart.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        restart
            .args(["restart", "-m", "fast", "-w", "-t", "60", "-D"])
            .arg(&self.data)
            .arg("-l")
            .arg(self.base.join("log"));
        run(restart, "pg_ctl restart -m fast");
    }

    /// The server log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.base.join("log")).unwrap_or_default()
    }

    /// Runs `sql` in `database` on a connection of its own and returns the warnings it raised,
    /// each as its message and hint.
    pub fn warnings_of(&self, database: &str, sql: &str) -> Vec<(String, String)> {
        let warnings = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = warnings.clone();
        let mut config: postgres::Config = self.dsn(database).parse().unwrap();
        config.notice_callback(move |notice| {
            if notice.severity() == "WARNING" {
                sink.lock().unwrap().push((
                    notice.message().to_owned(),
                    notice.hint().unwrap_or_default().to_owned(),
                ));
            }
        });
        let mut client = config.connect(NoTls).unwrap();
        client.batch_execute(sql).unwrap();
        drop(client);
        let said = warnings.lock().unwrap().clone();
        said
    }

    /// A connection string for `database`, as the superuser `postgres`.
    pub fn dsn(&self, database: &str) -> String {
        self.dsn_as("postgres", database)
    }

    /// A connection string for `database`, logging in as `role` (the clusters trust local
    /// connections, so any login role can connect).
    pub fn dsn_as(&self, role: &str, database: &str) -> String {
        format!(
            "host=localhost port={} user={role} dbname={database} connect_timeout=10",
            self.port
        )
    }

    /// A new connection to database `postgres` as the login role `role`.
    pub fn connect_as(&self, role: &str) -> Client {
        Client::connect(&self.dsn_as(role, "postgres"), NoTls)
            .unwrap_or_else(|e| panic!("connect as {role}: {e}"))
    }

    /// A new connection to database `postgres` and a queue no other test uses, made over it
    /// with `settings` (see [`unique_queue`]): how most tests begin.
    pub fn connect_with_queue(&self, prefix: &str, settings: &str) -> (Client, String) {
        let mut client = self.connect();
        let queue = unique_queue(&mut client, prefix, settings);
        (client, queue)
    }

    /// A new connection to database `postgres`.
    pub fn connect(&self) -> Client {
        self.connect_to("postgres")
    }

    /// A new connection to `database`, retried while the server starts or recovers.
    pub fn connect_to(&self, database: &str) -> Client {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match Client::connect(&self.dsn(database), NoTls) {
                Ok(client) => return client,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("could not connect to the test cluster: {e}"),
            }
        }
    }
}

/// Panics, saying what to run, when pg_jobs is not installed into the PostgreSQL installation
/// the tests use: otherwise the first server start fails on `shared_preload_libraries`.
fn check_installed() {
    static CHECKED: OnceLock<()> = OnceLock::new();
    CHECKED.get_or_init(|| {
        let library = pg_config_dir("--pkglibdir").join("pg_jobs.so");
        let control = pg_config_dir("--sharedir").join("extension/pg_jobs.control");
        assert!(
            library.exists() && control.exists(),
            "pg_jobs is not installed into the PostgreSQL {} at {} (no {} or {}): run \
             cargo pgrx install --pg-config {}/pg_config --no-default-features --features pg{}",
            pg_major(),
            pg_bin().display(),
            library.display(),
            control.display(),
            pg_bin().display(),
            pg_major()
        );
    });
}

/// A new, empty directory for a cluster named `name` (owned by `postgres` when we are root),
/// under `PG_JOBS_TEST_DIR` (default `/var/tmp/pg_jobs-tests`).
fn new_base(name: &str) -> PathBuf {
    let root = std::env::var_os("PG_JOBS_TEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/pg_jobs-tests"));
    std::fs::create_dir_all(&root).expect("create the test directory");
    make_world_writable(&root);
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let base = root.join(format!(
        "{name}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).expect("create the cluster directory");
    if running_as_root() {
        run(
            {
                let mut c = Command::new("chown");
                c.args(["postgres:postgres"]).arg(&base);
                c
            },
            "chown",
        );
    }
    base
}

fn make_world_writable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o1777));
}

fn append_as_owner(path: &Path, text: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("open postgresql.conf");
    file.write_all(text.as_bytes())
        .expect("write postgresql.conf");
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("find a free port")
}

/// A queue name no other test uses, created on the shared cluster with `settings` (SQL named
/// arguments such as `"lease => '1 second'"`, or empty).
pub fn unique_queue(client: &mut Client, prefix: &str, settings: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let name = format!("{prefix}-{}", COUNTER.fetch_add(1, Ordering::Relaxed));
    let extra = if settings.is_empty() {
        String::new()
    } else {
        format!(", {settings}")
    };
    client
        .batch_execute(&format!("SELECT jobs_create_queue('{name}'{extra})"))
        .unwrap_or_else(|e| panic!("create queue {name}: {e}"));
    name
}

/// Waits until `condition` holds, polling every 20 ms, or panics with `what` after `timeout`.
pub fn wait_until(timeout: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the backend `pid` waits for a lock; `what` names it in the timeout's message.
pub fn wait_for_a_lock(client: &mut Client, pid: i32, what: &str) {
    wait_until(Duration::from_secs(10), what, || {
        scalar::<bool>(
            client,
            "SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1",
            &[&pid],
        )
    });
}

/// A job claimed over SQL: its id and lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// The job id.
    pub id: i64,
    /// The lease token of this claim.
    pub lease: uuid::Uuid,
    /// The attempt this claim started.
    pub attempt: i32,
}

impl Claimed {
    /// The claim in a row whose first three columns are a job's `id`, `lease` and `attempt`
    /// (as `jobs_claim` returns them, or as read back from `jobs.job`).
    pub fn from_row(row: &postgres::Row) -> Claimed {
        Claimed {
            id: row.get(0),
            lease: row.get(1),
            attempt: row.get(2),
        }
    }
}

/// Claims up to `n` jobs of `queue` with the given extra SQL arguments (", lease => ...").
pub fn claim(
    client: &mut impl postgres::GenericClient,
    queue: &str,
    n: i32,
    extra: &str,
) -> Vec<Claimed> {
    client
        .query(
            &format!("SELECT id, lease, attempt FROM jobs_claim($1, n => $2{extra})"),
            &[&queue, &n],
        )
        .unwrap_or_else(|e| panic!("claim from {queue}: {e}"))
        .iter()
        .map(Claimed::from_row)
        .collect()
}

/// The ids of the jobs [`claim`] took, in the order it took them.
pub fn claim_ids(client: &mut impl postgres::GenericClient, queue: &str, n: i32) -> Vec<i64> {
    claim(client, queue, n, "").iter().map(|c| c.id).collect()
}

/// Runs `sql`, a call whose `$1` and `$2` are a claimed job's id and lease (`jobs_fail($1, $2,
/// 'boom')`, say), and returns its answer.
pub fn settle(client: &mut impl postgres::GenericClient, sql: &str, job: &Claimed) -> String {
    scalar(client, sql, &[&job.id, &job.lease])
}

/// Completes a job claimed with `job`'s lease and returns `jobs_complete`'s answer
/// (`succeeded`, or `lost` when the lease is no longer the job's).
pub fn complete(client: &mut impl postgres::GenericClient, job: &Claimed) -> String {
    settle(client, "SELECT jobs_complete($1, $2)", job)
}

/// Asserts that a claim of up to `n` jobs of `queue` takes none; `why` (the assert's message)
/// says why none may be taken, and a claim that took jobs names them.
pub fn assert_claims_nothing(
    client: &mut impl postgres::GenericClient,
    queue: &str,
    n: i32,
    why: &str,
) {
    let taken = claim_ids(client, queue, n);
    assert!(taken.is_empty(), "{why}: the claim took {taken:?}");
}

/// Enqueues one job with `payload` and returns its id.
pub fn enqueue(client: &mut Client, queue: &str, payload: serde_json::Value) -> i64 {
    client
        .query_one("SELECT jobs_enqueue($1, $2)", &[&queue, &payload])
        .unwrap_or_else(|e| panic!("enqueue into {queue}: {e}"))
        .get(0)
}

/// Enqueues `n` jobs with empty payloads into `queue` in one batch and returns their ids, in
/// enqueue order: a backlog for tests about claims rather than payloads.
pub fn enqueue_empty(client: &mut Client, queue: &str, n: i32) -> Vec<i64> {
    column(
        client,
        "SELECT id FROM jobs_enqueue_batch($1, array_fill('{}'::jsonb, ARRAY[$2::int]))",
        &[&queue, &n],
    )
}

/// The freed heads a test expects once settles moved groups of concurrency 1 on: `heads` with
/// the fast paths on; none with them off, where a settle clears each head's mark instead of
/// handing it over (so claims find it through the claim index all the same).
pub fn offered(heads: impl IntoIterator<Item = i64>) -> Vec<i64> {
    if fast_paths() {
        heads.into_iter().collect()
    } else {
        Vec::new()
    }
}

/// The ids of `queue`'s freed heads that claims may take now (`jobs.runtime_state`), in claim
/// order: the waiting group heads settles handed to the next claims.
pub fn freed_heads(client: &mut Client, queue: &str) -> Vec<i64> {
    scalar(
        client,
        "SELECT freed_heads FROM jobs.runtime_state($1)",
        &[&queue],
    )
}

/// The job's state.
pub fn state(client: &mut Client, id: i64) -> String {
    client
        .query_one("SELECT state::text FROM jobs.job WHERE id = $1", &[&id])
        .unwrap_or_else(|e| panic!("read job {id}: {e}"))
        .get(0)
}

/// The parameters of a query, as `postgres` takes them.
pub type Params<'a> = &'a [&'a (dyn postgres::types::ToSql + Sync)];

/// Runs a single-value SQL query with parameters and returns the value (on a connection or
/// inside a transaction).
pub fn scalar<T: for<'a> postgres::types::FromSql<'a>>(
    client: &mut impl postgres::GenericClient,
    sql: &str,
    params: Params,
) -> T {
    client
        .query_one(sql, params)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
}

/// Runs a query and collects its first column, a value a row in the rows' order, into what
/// the caller asks for (a `Vec`, a set).
pub fn column<T: for<'a> postgres::types::FromSql<'a>, C: FromIterator<T>>(
    client: &mut impl postgres::GenericClient,
    sql: &str,
    params: Params,
) -> C {
    client
        .query(sql, params)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// A tuple read from the columns of one row, in order: what [`row`] returns.
pub trait FromRow {
    /// Reads the tuple from `row`'s first columns.
    fn from_row(row: &postgres::Row) -> Self;
}

/// Implements [`FromRow`] for the tuple of the given types, column `i` into element `i`.
macro_rules! from_row_for_tuple {
    ($($t:ident $i:tt),+) => {
        impl<$($t: for<'a> postgres::types::FromSql<'a>),+> FromRow for ($($t,)+) {
            fn from_row(row: &postgres::Row) -> Self {
                ($(row.get::<_, $t>($i),)+)
            }
        }
    };
}

from_row_for_tuple!(A 0, B 1);
from_row_for_tuple!(A 0, B 1, C 2);
from_row_for_tuple!(A 0, B 1, C 2, D 3);

/// Runs a query that returns exactly one row and returns its columns as a tuple.
pub fn row<T: FromRow>(client: &mut impl postgres::GenericClient, sql: &str, params: Params) -> T {
    let row = client
        .query_one(sql, params)
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    T::from_row(&row)
}

/// How many of `queue`'s jobs are in `state` (`queued`, `running`, ...; as seen by this
/// connection).
pub fn jobs_in_state(client: &mut impl postgres::GenericClient, queue: &str, state: &str) -> i64 {
    scalar(
        client,
        "SELECT count(*) FROM jobs.job WHERE queue = $1 AND state::text = $2",
        &[&queue, &state],
    )
}

/// How many jobs `queue` has, in any state (as seen by this connection).
pub fn jobs_in(client: &mut impl postgres::GenericClient, queue: &str) -> i64 {
    scalar(
        client,
        "SELECT count(*) FROM jobs.job WHERE queue = $1",
        &[&queue],
    )
}

/// A session that logs the plan of every statement it runs, nested ones included
/// (`auto_explain` with ANALYZE and BUFFERS, sent back as NOTICEs), for tests about what a
/// call touches rather than how long it takes.
pub struct ExplainingSession {
    /// The connection; statements run on it are logged.
    pub client: Client,
    notices: std::sync::Arc<Mutex<Vec<String>>>,
}

impl ExplainingSession {
    /// Connects to `cluster` with auto_explain on; `settings` are extra `SET` statements.
    pub fn open(cluster: &Cluster, settings: &str) -> ExplainingSession {
        ExplainingSession::open_in(cluster, "postgres", settings)
    }

    /// Connects to `database` of `cluster` with auto_explain on; `settings` are extra `SET`
    /// statements.
    pub fn open_in(cluster: &Cluster, database: &str, settings: &str) -> ExplainingSession {
        let notices = std::sync::Arc::new(Mutex::new(Vec::new()));
        let mut config: postgres::Config = cluster.dsn(database).parse().expect("parse the DSN");
        let sink = notices.clone();
        config
            .notice_callback(move |notice| sink.lock().unwrap().push(notice.message().to_owned()));
        let mut client = config.connect(NoTls).expect("connect");
        client
            .batch_execute(&format!(
                "LOAD 'auto_explain';
                 SET auto_explain.log_min_duration = 0;
                 SET auto_explain.log_analyze = on;
                 SET auto_explain.log_buffers = on;
                 SET auto_explain.log_timing = off;
                 SET auto_explain.log_nested_statements = on;
                 SET auto_explain.log_format = 'json';
                 SET auto_explain.log_level = 'notice';
                 SET client_min_messages = 'notice';
                 {settings}"
            ))
            .expect("set up auto_explain");
        ExplainingSession { client, notices }
    }

    /// The plans logged since the last call, oldest first.
    pub fn take_plans(&self) -> Vec<serde_json::Value> {
        std::mem::take(&mut *self.notices.lock().unwrap())
            .iter()
            .filter_map(|notice| {
                let json = &notice[notice.find("plan:")?..];
                serde_json::from_str(&json[json.find('{')?..]).ok()
            })
            .collect()
    }
}

/// Shared buffers (hit + read) a plan node touched, its children and nested statements
/// included.
pub fn plan_buffers(node: &serde_json::Value) -> i64 {
    node["Shared Hit Blocks"].as_i64().unwrap_or(0)
        + node["Shared Read Blocks"].as_i64().unwrap_or(0)
}

/// Every node of a plan tree.
pub fn plan_nodes(plan: &serde_json::Value) -> Vec<&serde_json::Value> {
    let mut all = vec![plan];
    if let Some(children) = plan["Plans"].as_array() {
        for child in children {
            all.extend(plan_nodes(child));
        }
    }
    all
}

/// The version of the pg_jobs being tested: the `version` of the repository's Cargo.toml.
pub fn pg_jobs_version() -> &'static str {
    include_str!("../../../Cargo.toml")
        .lines()
        .find_map(|line| line.strip_prefix("version = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .expect("Cargo.toml has a version line")
}
