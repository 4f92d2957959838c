//! Connections, housekeeping statements, and measurement windows: what the server did between
//! two moments (wall time, server and load-generator CPU, WAL bytes, commits, statements).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use postgres::{Client, NoTls};

use crate::config::LOAD_ROLES;
use crate::cpu::{self, ServerCpu};

pub fn connect(dsn: &str) -> Result<Client> {
    Client::connect(dsn, NoTls).with_context(|| format!("connecting to {dsn}"))
}

/// Opens `n` connections (scenarios whose sessions are not a comparator's producers and
/// workers; those open theirs through `Comparator::connect`).
pub fn connect_many(dsn: &str, n: usize) -> Result<Vec<Client>> {
    (0..n).map(|_| connect(dsn)).collect()
}

/// VACUUM (ANALYZE) of a table, then a CHECKPOINT: every comparator starts a measurement from
/// the same clean state, without a checkpoint falling into it.
pub fn settle(admin: &mut Client, table: &str) -> Result<()> {
    admin.batch_execute(&format!("VACUUM (ANALYZE) {table}"))?;
    checkpoint(admin)
}

pub fn checkpoint(admin: &mut Client) -> Result<()> {
    admin.batch_execute("CHECKPOINT")?;
    Ok(())
}

/// Counters of the bench database at one moment.
#[derive(Clone, Copy, Debug)]
pub struct DbStats {
    pub wal_lsn: i64,
    pub xact_commit: i64,
    /// pg_stat_statements calls by the load generator's roles ([`LOAD_ROLES`]: top-level, and
    /// nested ones too while pg_stat_statements.track = 'all' is set for the roles). Statements
    /// nested in pg_jobs's `SECURITY DEFINER` functions are recorded under the extension's
    /// owner, which is why benchmarks/run makes `bench` the owner.
    pub statements: i64,
}

pub fn stats(admin: &mut Client) -> Result<DbStats> {
    let roles: Vec<&str> = LOAD_ROLES.to_vec();
    let row = admin.query_one(
        "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint,
                (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
                (SELECT coalesce(sum(s.calls), 0)::bigint
                   FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
                  WHERE r.rolname = ANY($1::text[]))",
        &[&roles],
    )?;
    Ok(DbStats {
        wal_lsn: row.get(0),
        xact_commit: row.get(1),
        statements: row.get(2),
    })
}

/// What happened between [`Window::open`] and [`Window::close`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Span {
    pub seconds: f64,
    pub server_cpu: f64,
    pub client_cpu: f64,
    pub wal_bytes: i64,
    pub commits: i64,
    pub statements: i64,
}

impl Span {
    /// Adds another span (rounds of a scenario).
    pub fn add(&mut self, other: Span) {
        self.seconds += other.seconds;
        self.server_cpu += other.server_cpu;
        self.client_cpu += other.client_cpu;
        self.wal_bytes += other.wal_bytes;
        self.commits += other.commits;
        self.statements += other.statements;
    }
}

pub struct Window {
    started: Instant,
    server_cpu: f64,
    client_cpu: f64,
    stats: DbStats,
}

impl Window {
    pub fn open(server: &ServerCpu, admin: &mut Client) -> Result<Window> {
        let stats = stats(admin)?;
        Ok(Window {
            server_cpu: server.seconds(),
            client_cpu: cpu::own_seconds(),
            stats,
            started: Instant::now(),
        })
    }

    /// Closes the window; `extra_client_cpu` is CPU of other client processes (Node) in it.
    pub fn close(
        self,
        server: &ServerCpu,
        admin: &mut Client,
        extra_client_cpu: f64,
    ) -> Result<Span> {
        let seconds = self.started.elapsed().as_secs_f64();
        let server_cpu = server.seconds() - self.server_cpu;
        let client_cpu = cpu::own_seconds() - self.client_cpu + extra_client_cpu;
        let stats = stats(admin)?;
        Ok(Span {
            seconds,
            server_cpu,
            client_cpu,
            wal_bytes: stats.wal_lsn - self.stats.wal_lsn,
            commits: stats.xact_commit - self.stats.xact_commit,
            statements: stats.statements - self.stats.statements,
        })
    }

    /// Closes the window after `delay`, long enough for exiting backends to flush their
    /// statistics (commit counts) to shared memory.
    pub fn close_after(
        self,
        delay: Duration,
        server: &ServerCpu,
        admin: &mut Client,
        extra_client_cpu: f64,
    ) -> Result<Span> {
        std::thread::sleep(delay);
        self.close(server, admin, extra_client_cpu)
    }
}

/// Whether an error is a cancelled statement (SQLSTATE 57014), which is how waiting workers
/// are stopped.
pub fn is_cancel(error: &anyhow::Error) -> bool {
    error
        .downcast_ref::<postgres::Error>()
        .and_then(|e| e.code())
        .is_some_and(|c| c.code() == "57014")
}
