//! The dashboard's database work: fixed statements (the SQL files beside this one) with bound
//! parameters, over a small pool of connections as the dashboard's role.

use std::collections::HashMap;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use serde::Serialize;
use tokio_postgres::types::ToSql;
use tokio_postgres::NoTls;

/// A database error as the pages show it: the SQLSTATE (when the server raised it), the
/// message, and the hint.
#[derive(Debug)]
pub struct DbError {
    /// The SQLSTATE, when the server raised the error.
    pub code: Option<String>,
    /// What went wrong.
    pub message: String,
    /// What to do about it, when the server said.
    pub hint: Option<String>,
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.code {
            Some(code) => write!(f, "{} (SQLSTATE {code})", self.message),
            None => write!(f, "{}", self.message),
        }
    }
}

impl From<tokio_postgres::Error> for DbError {
    fn from(error: tokio_postgres::Error) -> DbError {
        match error.as_db_error() {
            Some(db) => DbError {
                code: Some(db.code().code().to_owned()),
                message: db.message().to_owned(),
                hint: db.hint().map(str::to_owned),
            },
            None => DbError {
                code: None,
                message: error.to_string(),
                hint: None,
            },
        }
    }
}

impl From<deadpool_postgres::PoolError> for DbError {
    fn from(error: deadpool_postgres::PoolError) -> DbError {
        DbError {
            code: None,
            message: format!("no database connection: {error}"),
            hint: None,
        }
    }
}

/// A result of the database work.
pub type DbResult<T> = Result<T, DbError>;

/// The connections.
pub struct Db {
    pool: Pool,
}

/// Who the dashboard is in the database.
#[derive(Clone, Debug, Default)]
pub struct Identity {
    /// Its role.
    pub role: String,
    /// Whether it has the privileges of jobs_admin.
    pub admin: bool,
    /// The tenants it is limited to (pg_jobs.tenant), if any.
    pub tenant: Option<String>,
    /// The database.
    pub database: String,
}

/// One queue's live counts.
#[derive(Clone, Debug, Serialize)]
pub struct QueueLive {
    /// The queue.
    pub queue: String,
    /// Whether it is paused.
    pub paused: bool,
    /// Its dead-letter queue, if it has one.
    pub dead_letter: Option<String>,
    /// Queued and due.
    pub ready: i64,
    /// Queued, not yet due.
    pub scheduled: i64,
    /// Running.
    pub running: i64,
    /// The oldest ready job's age, in seconds.
    pub oldest_ready_seconds: f64,
    /// Whether the queued jobs were counted only up to the limit (there are more).
    pub capped: bool,
}

/// Finished jobs of one queue the table holds: succeeded, failed, cancelled.
pub type Finished = HashMap<String, [i64; 3]>;

/// A minute of one queue's throughput.
#[derive(Clone, Debug)]
pub struct Minute {
    /// The queue.
    pub queue: String,
    /// The minute, in seconds since 1970.
    pub minute: i64,
    /// Jobs enqueued, completed, failed, retried.
    pub counts: [i64; 4],
}

/// What a page of jobs filters on (None: no filter).
#[derive(Clone, Debug, Default, serde::Deserialize, Serialize)]
pub struct JobFilter {
    /// A job state, or ready / scheduled.
    pub state: Option<String>,
    /// The job kind.
    pub kind: Option<String>,
    /// The tenant.
    pub tenant: Option<String>,
    /// The group key.
    pub group: Option<String>,
    /// Created at or after (a timestamp PostgreSQL reads).
    pub from: Option<String>,
    /// Created before.
    pub to: Option<String>,
}

impl JobFilter {
    /// The filter with empty fields dropped (an empty form field means no filter).
    pub fn cleaned(self) -> JobFilter {
        let clean = |v: Option<String>| v.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty());
        JobFilter {
            state: clean(self.state),
            kind: clean(self.kind),
            tenant: clean(self.tenant),
            group: clean(self.group),
            from: clean(self.from),
            to: clean(self.to),
        }
    }
}

/// One row of a page of jobs.
#[derive(Clone, Debug)]
pub struct JobLine {
    pub id: i64,
    pub kind: String,
    pub state: String,
    pub attempt: i32,
    pub max_attempts: i32,
    pub priority: i16,
    pub tenant: Option<String>,
    pub group_key: Option<String>,
    pub created: String,
    pub run_at: String,
    pub later: bool,
    pub worker: Option<String>,
    pub payload: String,
}

/// The states a page of jobs filters on.
pub const STATES: [&str; 7] = [
    "ready",
    "scheduled",
    "queued",
    "running",
    "succeeded",
    "failed",
    "cancelled",
];

/// The actions the dashboard offers, each one `jobs_*` function, as fixed SQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Retry,
    Cancel,
    RunNow,
    Pause,
    Resume,
}

impl Action {
    /// The action a form names, if it is one.
    pub fn parse(name: &str) -> Option<Action> {
        Some(match name {
            "retry" => Action::Retry,
            "cancel" => Action::Cancel,
            "run_now" => Action::RunNow,
            "pause" => Action::Pause,
            "resume" => Action::Resume,
            _ => return None,
        })
    }

    /// Its name in forms.
    pub fn name(self) -> &'static str {
        match self {
            Action::Retry => "retry",
            Action::Cancel => "cancel",
            Action::RunNow => "run_now",
            Action::Pause => "pause",
            Action::Resume => "resume",
        }
    }

    /// Its label on buttons.
    pub fn label(self) -> &'static str {
        match self {
            Action::Retry => "Retry",
            Action::Cancel => "Cancel",
            Action::RunNow => "Run now",
            Action::Pause => "Pause",
            Action::Resume => "Resume",
        }
    }

    /// Whether it acts on a job (else on a queue).
    pub fn on_job(self) -> bool {
        matches!(self, Action::Retry | Action::Cancel | Action::RunNow)
    }

    fn sql(self) -> &'static str {
        match self {
            Action::Retry => "SELECT jobs_retry($1::bigint)::text",
            Action::Cancel => "SELECT jobs_cancel($1::bigint)::text",
            Action::RunNow => "SELECT jobs_run_now($1::bigint)::text",
            Action::Pause => "SELECT jobs_pause($1::text)::text",
            Action::Resume => "SELECT jobs_resume($1::text)::text",
        }
    }
}

fn opt_str(value: &Option<String>) -> Option<&str> {
    value.as_deref()
}

impl Db {
    /// Connects (checking the connection string and that pg_jobs is there).
    pub async fn connect(conninfo: &str, size: usize) -> Result<Db, String> {
        let mut config: tokio_postgres::Config = conninfo
            .parse()
            .map_err(|e| format!("the connection string is not valid: {e}"))?;
        // So its sessions are recognisable in pg_stat_activity.
        if config.get_application_name().is_none() {
            config.application_name("pg_jobs_dashboard");
        }
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(size.max(2))
            .build()
            .map_err(|e| e.to_string())?;
        let db = Db { pool };
        let client = db.pool.get().await.map_err(|e| e.to_string())?;
        let installed = client
            .query_opt(
                "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pg_jobs'",
                &[],
            )
            .await
            .map_err(|e| e.to_string())?;
        if installed.is_none() {
            return Err(
                "pg_jobs is not installed in this database (CREATE EXTENSION pg_jobs)".to_owned(),
            );
        }
        Ok(db)
    }

    async fn query(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> DbResult<Vec<tokio_postgres::Row>> {
        let client = self.pool.get().await?;
        let statement = client.prepare_cached(sql).await?;
        Ok(client.query(&statement, params).await?)
    }

    /// Who the dashboard is.
    pub async fn identity(&self) -> DbResult<Identity> {
        let rows = self.query(include_str!("sql/whoami.sql"), &[]).await?;
        let row = &rows[0];
        Ok(Identity {
            role: row.get("role"),
            admin: row.get("admin"),
            tenant: row.get("tenant"),
            database: row.get("database"),
        })
    }

    /// Every queue's live counts, its queued jobs counted up to `limit`.
    pub async fn live(&self, limit: i32) -> DbResult<Vec<QueueLive>> {
        let rows = self.query(include_str!("sql/live.sql"), &[&limit]).await?;
        Ok(rows
            .iter()
            .map(|row| QueueLive {
                queue: row.get("queue"),
                paused: row.get("paused"),
                dead_letter: row.get("dead_letter"),
                ready: row.get("ready"),
                scheduled: row.get("scheduled"),
                running: row.get("running"),
                oldest_ready_seconds: row.get("oldest_ready_seconds"),
                capped: row.get("capped"),
            })
            .collect())
    }

    /// The finished jobs per queue (a read of the whole table).
    pub async fn finished(&self) -> DbResult<Finished> {
        let rows = self.query(include_str!("sql/finished.sql"), &[]).await?;
        Ok(rows
            .iter()
            .map(|row| {
                (
                    row.get("queue"),
                    [
                        row.get("succeeded"),
                        row.get("failed"),
                        row.get("cancelled"),
                    ],
                )
            })
            .collect())
    }

    /// The throughput of the last `seconds`, per queue and minute.
    pub async fn throughput(&self, seconds: i64) -> DbResult<Vec<Minute>> {
        let seconds = seconds as f64;
        let rows = self
            .query(include_str!("sql/throughput.sql"), &[&seconds])
            .await?;
        Ok(rows
            .iter()
            .map(|row| Minute {
                queue: row.get("queue"),
                minute: row.get("minute"),
                counts: [
                    row.get("enqueued"),
                    row.get("completed"),
                    row.get("failed"),
                    row.get("retried"),
                ],
            })
            .collect())
    }

    /// The newest job's id.
    pub async fn max_id(&self) -> DbResult<i64> {
        let rows = self.query(include_str!("sql/max_id.sql"), &[]).await?;
        Ok(rows[0].get("id"))
    }

    /// A page of `queue`'s jobs: at most `limit`, older than `before` and not below `lowest`.
    pub async fn jobs(
        &self,
        queue: &str,
        filter: &JobFilter,
        before: Option<i64>,
        lowest: i64,
        limit: i32,
    ) -> DbResult<Vec<JobLine>> {
        let rows = self
            .query(
                include_str!("sql/jobs.sql"),
                &[
                    &queue,
                    &opt_str(&filter.state),
                    &opt_str(&filter.kind),
                    &opt_str(&filter.tenant),
                    &opt_str(&filter.group),
                    &opt_str(&filter.from),
                    &opt_str(&filter.to),
                    &before,
                    &limit,
                    &lowest,
                ],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|row| JobLine {
                id: row.get("id"),
                kind: row.get("kind"),
                state: row.get("state"),
                attempt: row.get("attempt"),
                max_attempts: row.get("max_attempts"),
                priority: row.get("priority"),
                tenant: row.get("tenant"),
                group_key: row.get("group_key"),
                created: row.get("created"),
                run_at: row.get("run_at"),
                later: row.get("later"),
                worker: row.get("worker"),
                payload: row.get("payload"),
            })
            .collect())
    }

    /// The ids a bulk action on `queue`'s jobs matching `filter` acts on: at most `limit`.
    pub async fn bulk_ids(
        &self,
        queue: &str,
        filter: &JobFilter,
        limit: i32,
    ) -> DbResult<Vec<i64>> {
        let before: Option<i64> = None;
        let rows = self
            .query(
                include_str!("sql/bulk_ids.sql"),
                &[
                    &queue,
                    &opt_str(&filter.state),
                    &opt_str(&filter.kind),
                    &opt_str(&filter.tenant),
                    &opt_str(&filter.group),
                    &opt_str(&filter.from),
                    &opt_str(&filter.to),
                    &before,
                    &limit,
                ],
            )
            .await?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    /// One job as JSON, and whether it is due later.
    pub async fn job(&self, id: i64) -> DbResult<Option<(serde_json::Value, bool)>> {
        let rows = self.query(include_str!("sql/job.sql"), &[&id]).await?;
        Ok(rows.first().map(|row| (row.get("job"), row.get("later"))))
    }

    /// Rows of a fixed reading statement as JSON objects (for the pages that only print
    /// columns): `sql` is one of the SQL files, `params` bound.
    pub async fn rows_json(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> DbResult<Vec<serde_json::Map<String, serde_json::Value>>> {
        let wrapped = format!("SELECT to_jsonb(r) FROM ({sql}) r");
        let rows = self.query(&wrapped, params).await?;
        Ok(rows
            .iter()
            .filter_map(|row| match row.get::<_, serde_json::Value>(0) {
                serde_json::Value::Object(map) => Some(map),
                _ => None,
            })
            .collect())
    }

    /// Runs `action` on job `id` or queue `target` as the dashboard's role: the function's
    /// answer (the job's state afterwards, or empty for a queue).
    pub async fn act(&self, action: Action, target: &str) -> DbResult<String> {
        let rows = if action.on_job() {
            let id: i64 = target.parse().map_err(|_| DbError {
                code: None,
                message: format!("job id must be a number, got {target:?}"),
                hint: None,
            })?;
            self.query(action.sql(), &[&id]).await?
        } else {
            self.query(action.sql(), &[&target]).await?
        };
        Ok(rows
            .first()
            .and_then(|row| row.get::<_, Option<String>>(0))
            .unwrap_or_default())
    }

    /// Runs `action` on each of `ids` in one transaction (all or nothing): the states they
    /// ended in, counted.
    pub async fn act_on_many(&self, action: Action, ids: &[i64]) -> DbResult<Vec<(String, usize)>> {
        let mut client = self.pool.get().await?;
        let transaction = client.transaction().await?;
        let statement = transaction.prepare_cached(action.sql()).await?;
        let mut outcomes: Vec<(String, usize)> = Vec::new();
        for id in ids {
            let row = transaction.query_one(&statement, &[id]).await?;
            let state: String = row.get::<_, Option<String>>(0).unwrap_or_default();
            match outcomes.iter_mut().find(|(s, _)| *s == state) {
                Some((_, n)) => *n += 1,
                None => outcomes.push((state, 1)),
            }
        }
        transaction.commit().await?;
        Ok(outcomes)
    }
}
