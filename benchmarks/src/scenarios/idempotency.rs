//! i. Idempotency records (issue 13): what a request costs an HTTP middleware, `save` (take
//! the key, pending) + `update` (store the response, presenting the save's token) + `get` (what
//! a duplicate reads), each in its own transaction, from 8 concurrent clients on fresh keys.
//! pg_jobs's functions run beside a hand-written table doing the same
//! (`benchmarks/comparators/idempotency.sql`: `INSERT ... ON CONFLICT DO UPDATE ... WHERE`),
//! in alternating rounds of the same run so both see the same machine. Target: pg_jobs ≥ 0.9×
//! the hand-written table's requests per second.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use postgres::{Client, Statement};
use serde_json::json;
use uuid::Uuid;

use super::{attempt, Ctx};
use crate::comparators::Comparator;
use crate::config::WORKERS;
use crate::db::{self, Span, Window};
use crate::results::Measurement;

/// The scenario's letter in `BENCH_SCENARIOS` and in the report.
pub const SCENARIO: &str = "i";
/// Its one variant.
pub const VARIANT: &str = "save + update + get per request, 8 clients";
/// pg_jobs's side, as the report names it.
pub const PG_JOBS: &str = "pg_jobs";
/// The hand-written table's side, as the report names it.
pub const HAND_WRITTEN: &str = "hand-written table";
/// Rounds per side, alternating, each a third of the scale's enqueue duration (5 s at full
/// scale): many short rounds let both sides share whatever else the machine is doing.
const ROUNDS: u32 = 6;
/// The target of issue 13.
pub const TARGET: f64 = 0.9;

/// The three statements of one side, prepared on each client's connection.
struct Side {
    /// Takes key `$1` with fingerprint `$2` and returns the token.
    save: &'static str,
    /// Stores response `$2` in the record of key `$1` that holds token `$3`.
    update: &'static str,
    /// Reads the live record of key `$1`.
    get: &'static str,
    /// The table the side writes; both sides' tables are emptied before each round.
    table: &'static str,
}

const PG_JOBS_SIDE: Side = Side {
    save: "SELECT token FROM jobs_idempotency_save($1, fingerprint => $2, pending_for => '30 seconds')",
    update: "SELECT jobs_idempotency_update($1, 'completed', $2, token => $3)",
    get: "SELECT status, response FROM jobs_idempotency_get($1)",
    table: "jobs.idempotency",
};

const HAND_WRITTEN_SIDE: Side = Side {
    save: "INSERT INTO bench_idempotency AS r
                  (key, status, token, fingerprint, pending_for, created_at, updated_at, expires_at)
           VALUES ($1, 'pending', gen_random_uuid(), $2, '30 seconds', clock_timestamp(),
                   clock_timestamp(), clock_timestamp() + interval '24 hours')
           ON CONFLICT (scope, key) DO UPDATE
              SET status = excluded.status, token = excluded.token,
                  fingerprint = excluded.fingerprint, pending_for = excluded.pending_for,
                  created_at = excluded.created_at, updated_at = excluded.updated_at,
                  expires_at = excluded.expires_at, response = NULL
            WHERE r.expires_at <= clock_timestamp()
               OR (r.status <> 'pending' AND r.fingerprint IS NOT DISTINCT FROM excluded.fingerprint)
               OR (r.status = 'pending' AND r.updated_at + r.pending_for <= clock_timestamp())
           RETURNING r.token",
    update: "UPDATE bench_idempotency
                SET status = 'completed', response = $2, updated_at = clock_timestamp()
              WHERE scope = '' AND key = $1 AND token = $3 AND expires_at > clock_timestamp()",
    get: "SELECT status, response FROM bench_idempotency
           WHERE scope = '' AND key = $1 AND expires_at > clock_timestamp()",
    table: "bench_idempotency",
};

/// One client: its connection and the side's statements prepared on it.
struct Requester {
    conn: Client,
    save: Statement,
    update: Statement,
    get: Statement,
}

impl Requester {
    fn new(mut conn: Client, side: &Side) -> Result<Requester> {
        let save = conn.prepare(side.save)?;
        let update = conn.prepare(side.update)?;
        let get = conn.prepare(side.get)?;
        Ok(Requester {
            conn,
            save,
            update,
            get,
        })
    }

    /// One request's three calls for `key`.
    fn request(&mut self, key: &str, n: u64) -> Result<()> {
        let fingerprint = format!("{:064x}", u128::from(n as u32) * 0x9e37_79b9);
        let token: Uuid = self
            .conn
            .query_one(&self.save, &[&key, &fingerprint])?
            .get(0);
        let response = json!({"status": 201, "body": {"payment": n, "amount": 42}});
        self.conn
            .execute(&self.update, &[&key, &response, &token])?;
        let status: String = self.conn.query_one(&self.get, &[&key])?.get(0);
        if status != "completed" {
            return Err(anyhow!("{key}: the update was lost (status {status})"));
        }
        Ok(())
    }
}

/// Runs both sides in alternating rounds and returns one measurement per side.
pub fn run(ctx: &Ctx, admin: &mut Client, _: &[&dyn Comparator]) -> Vec<Measurement> {
    let setup = admin
        .batch_execute(include_str!("../../comparators/idempotency.sql"))
        .context("creating the hand-written idempotency table");
    let round = Duration::from_secs(ctx.cfg.scale.enqueue_secs.max(3)) / 3;
    let sides = [(PG_JOBS, &PG_JOBS_SIDE), (HAND_WRITTEN, &HAND_WRITTEN_SIDE)];
    let mut totals: Vec<(u64, Span)> = vec![(0, Span::default()); sides.len()];
    let mut failure: Option<String> = setup.err().map(|e| format!("{e:#}"));
    'rounds: for r in 0..ROUNDS {
        for (i, (name, side)) in sides.iter().enumerate() {
            if failure.is_some() {
                break 'rounds;
            }
            eprint!("  {SCENARIO} · round {} · {name} ... ", r + 1);
            match one_round(ctx, admin, &sides, side, round, r) {
                Ok((requests, span)) => {
                    eprintln!("{:.0} requests/s", requests as f64 / span.seconds);
                    totals[i].0 += requests;
                    totals[i].1.add(span);
                }
                Err(e) => failure = Some(format!("{name}: {e:#}")),
            }
        }
    }
    sides
        .iter()
        .zip(totals)
        .map(|((name, _), (requests, span))| {
            attempt(SCENARIO, VARIANT, name, || match &failure {
                Some(why) => Err(anyhow!("{why}")),
                None => Ok(Measurement::new(SCENARIO, VARIANT, name)
                    .throughput(requests, &span)
                    .note(format!(
                        "{ROUNDS} rounds of {:.0} s, alternating with the other side",
                        round.as_secs_f64()
                    ))),
            })
        })
        .collect()
}

/// One round of one side: emptied tables, then 8 clients for `length`.
///
/// Why every side's table is emptied, not just the one this round writes: the other side's
/// table, full of its last round's dead row versions, would otherwise be vacuumed by
/// autovacuum during this round, charging this side for the other's cleanup (the autovacuum
/// launcher visits the database once a minute, so it hit the same side's round every run).
fn one_round(
    ctx: &Ctx,
    admin: &mut Client,
    sides: &[(&str, &Side)],
    side: &Side,
    length: Duration,
    round: u32,
) -> Result<(u64, Span)> {
    for (_, each) in sides {
        admin.batch_execute(&format!("TRUNCATE {}", each.table))?;
        db::settle(admin, each.table)?;
    }
    let mut requesters = db::connect_many(&ctx.cfg.dsn, WORKERS)?
        .into_iter()
        .map(|conn| Requester::new(conn, side))
        .collect::<Result<Vec<_>>>()?;
    let done = AtomicU64::new(0);
    let window = Window::open(&ctx.server, admin)?;
    let deadline = Instant::now() + length;
    let outcomes: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = requesters
            .iter_mut()
            .enumerate()
            .map(|(client, requester)| {
                let done = &done;
                s.spawn(move || -> Result<()> {
                    let mut n: u64 = 0;
                    while Instant::now() < deadline {
                        requester.request(&format!("r{round}-c{client}-{n}"), n)?;
                        n += 1;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("a client thread panicked")))
            })
            .collect()
    });
    let span = window.close(&ctx.server, admin, 0.0)?;
    outcomes.into_iter().collect::<Result<()>>()?;
    Ok((done.into_inner(), span))
}
