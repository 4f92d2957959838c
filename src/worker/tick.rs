//! One tick of a worker: what it does, in order ([`STEPS`]), each step in short transactions of
//! its own.
//!
//! A transaction holds back vacuum for as long as it runs (its snapshot's xmin), everywhere
//! in the server. So no step holds one for long: every step runs in a transaction of its own,
//! and a step that works through a backlog (reclaim, the retention purge, the idempotency
//! purge) commits each bounded batch in its own transaction, the next batch starting with a
//! fresh snapshot. Between transactions the worker holds no snapshot at all. And no statement
//! walks an unbounded stretch of an index: dead index entries, which a held-back horizon keeps
//! by the thousand (every job claimed since), are walked in bounded windows too.
//!
//! A step that fails is rolled back alone, logged and recorded in `jobs_worker_status()`; the
//! tick goes on with the next step, except after a lock timeout (DDL holds a table, and the
//! next steps would each wait for it in turn): then the tick ends, and the next one starts over.
//!
//! Adding a step: write a `fn(&mut Tick) -> Result<(), Failure>` that does its work through
//! [`Tick::transaction`] (once, or once per batch), counts what it did in [`Tick::report`]
//! if `jobs_worker_status()` shows it, and add it to [`STEPS`] where it belongs in the order.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use pgrx::spi::SpiClient;

use super::transaction::{self, Failure};
use crate::engine::model::Position;
use crate::engine::tenants::TenantScope;
use crate::engine::workflows::signals;
use crate::engine::{claim, distribute, groups, idempotency, purge, reclaim, schedules, two_phase};
use crate::pg::clock::server_now;
use crate::pg::extension::LIBRARY_VERSION;
use crate::runtime::shmem::shared;
use crate::runtime::{floor, freed_heads};
use crate::storage::index_walk::TimeWindow;
use crate::storage::{statement, with_client, Statement};

/// Jobs reclaimed per tick at most, so a tick stays short however
/// far behind it is; the rest waits for the next ticks.
pub const RECLAIM_PER_TICK: usize = 10 * reclaim::BATCH;
/// Await timeouts a tick fires at most, a transaction a batch of `signals::BATCH`.
pub const AWAIT_TIMEOUTS_PER_TICK: usize = 10 * signals::BATCH;
/// Idempotency records purged per tick at most.
pub const IDEMPOTENCY_PURGED_PER_TICK: usize =
    idempotency::PURGE_BATCH * idempotency::PURGE_BATCHES_PER_TICK;

/// Windows of the claim index below claim floors one transaction checks at most.
const FLOOR_CHECKS_PER_TRANSACTION: usize = 16;

/// Windows below one queue's floor a tick checks at most (of `index_walk::WINDOW_ENTRIES`
/// entries each). Below a floor lie the entries of every job claimed since vacuum last ran,
/// and while an old snapshot holds vacuum back they pile up, one per job claimed, each needing
/// a visit of its heap row. Walking all of them every tick made the worker's tick cost grow
/// with the snapshot's age until the worker used most of a core and starved the claims; the
/// next tick goes on where this one stopped instead.
const FLOOR_WINDOWS_PER_TICK: usize = 10;

/// Lease index windows before the recent part a tick walks at most ([`reclaim_step`]).
const RECLAIM_EARLIER_WINDOWS_PER_TICK: usize = 10;

/// How long before the previous tick's start a tick's walk of the lease index in full begins:
/// a claim's lease runs from its statement's time, which its commit (and the tick's snapshot)
/// can follow by a moment.
const RECLAIM_RECENT_SLACK_MICROS: i64 = 10_000_000;

/// Where the next tick's reclaim goes on ([`reclaim_step`]).
#[derive(Clone, Copy)]
struct ReclaimResume {
    /// The start of the last tick whose walk of the recent part reached its end (`None`: no
    /// tick did yet, so the next walks the whole index).
    recent_from: Option<i64>,
    /// Where the walk of the earlier part goes on.
    earlier_from: i64,
}

thread_local! {
    /// Where the next tick's reclaim goes on. Kept in the worker's own memory: a restarted
    /// worker walks the whole lease index at its first tick.
    static RECLAIM_RESUME: Cell<ReclaimResume> = const {
        Cell::new(ReclaimResume {
            recent_from: None,
            earlier_from: i64::MIN,
        })
    };

    /// Per queue (slot and name), where the next tick's floor check goes on: the window after
    /// the last one checked, when the walk did not reach the floor. Kept in the worker's own
    /// memory: a restarted worker starts again from each queue's head.
    static FLOOR_CHECK_RESUME: RefCell<HashMap<(usize, String), Position>> =
        RefCell::new(HashMap::new());
}

/// What `pg_stat_activity.query` shows while a tick's transaction runs.
const ACTIVITY: &std::ffi::CStr = c"pg_jobs tick";

static EXTENSION_EXISTS: Statement = statement!(worker/extension_exists() -> (installed));

static TICK_SETTINGS: Statement = statement!(
    worker/tick_settings() -> (lock_timeout, statement_timeout)
);

/// A step of the tick.
struct Step {
    /// What it does, for the log and `jobs_worker_status()` when it fails ("reclaiming
    /// expired leases failed, retrying next tick: ...").
    doing: &'static str,
    /// What it works on, which decides where it runs on a Citus cluster.
    on: On,
    /// The step.
    run: fn(&mut Tick) -> Result<(), Failure>,
}

/// What a step works on. On a Citus cluster (docs/src/internals/citus.md) the steps on jobs
/// run once for each shard of `jobs.job` on this node, on the shard's tables, and the
/// schedules on the coordinator only; elsewhere every step runs once.
#[derive(Clone, Copy, PartialEq, Eq)]
enum On {
    /// `jobs.job` and the tables distributed with it.
    Jobs,
    /// The schedules, which the coordinator runs.
    Schedules,
    /// This node's own tables.
    Node,
}

/// The steps of a tick, in order.
const STEPS: &[Step] = &[
    Step {
        doing: "reclaiming expired leases",
        on: On::Jobs,
        run: reclaim_step,
    },
    Step {
        doing: "ending awaits whose timeout passed",
        on: On::Jobs,
        run: await_timeouts_step,
    },
    Step {
        doing: "checking the claim floors",
        on: On::Jobs,
        run: floors_step,
    },
    Step {
        doing: "enqueueing schedules",
        on: On::Schedules,
        run: schedules_step,
    },
    Step {
        doing: "purging finished jobs past retention",
        on: On::Jobs,
        run: purge_step,
    },
    Step {
        doing: "purging expired idempotency records",
        on: On::Node,
        run: idempotency_step,
    },
    Step {
        doing: "deleting the records of ended prepared transactions",
        on: On::Node,
        run: prepared_step,
    },
    Step {
        doing: "purging expired signals",
        on: On::Node,
        run: signals_step,
    },
    Step {
        doing: "clearing the marks of stranded group heads",
        on: On::Jobs,
        run: stranded_step,
    },
    Step {
        doing: "waking claims whose jobs came due",
        on: On::Jobs,
        run: wake_step,
    },
];

/// What one tick did.
#[derive(Default)]
pub struct TickReport {
    /// Whether the extension exists in the database, with this library's version.
    pub serving: bool,
    /// The installed version, when the extension exists with another version than this
    /// library's: the tick did nothing (README "Upgrading").
    pub outdated: Option<String>,
    /// Jobs reclaimed.
    pub reclaimed: usize,
    /// Finished jobs purged.
    pub purged: usize,
    /// Claim floors found unsound and reset.
    pub floors_healed: usize,
    /// Expired idempotency records purged.
    pub idempotency_purged: usize,
    /// Jobs enqueued for schedules' slots.
    pub scheduled: usize,
    /// Waiting jobs whose marks the tick cleared because shared memory lost their freed heads
    /// (the first tick after a start or a crash restart; `engine::groups::sweep_stranded`).
    pub stranded_cleared: usize,
    /// The steps that failed (each rolled back alone): what the step does, and why.
    pub failures: Vec<(&'static str, String)>,
}

/// A tick under way: what the steps share.
pub struct Tick {
    /// When this worker started (server clock).
    started_at: i64,
    /// The Citus shard of `jobs.job` the step works on, by key (see [`On`]).
    shard: Option<i64>,
    /// What the tick did so far.
    pub report: TickReport,
}

impl Tick {
    /// Runs `work` in a transaction of its own, under the tick's lock and statement timeouts
    /// (and on the step's shard, under its placement lock); commits when it returns, rolls back
    /// on an ERROR.
    pub fn transaction<R>(&self, work: impl FnOnce(&SpiClient<'_>) -> R) -> Result<R, Failure> {
        let shard = self.shard;
        transaction::run(ACTIVITY, || {
            with_client(|client| TICK_SETTINGS.run(client, &[]));
            let work = || with_client(work);
            match shard {
                None => Some(work()),
                Some(key) => distribute::on_local_shard(key, work),
            }
        })?
        .ok_or_else(|| Failure {
            message: format!(
                "shard {} of jobs.job moved to another node",
                self.shard.unwrap_or(0)
            ),
            lock_timeout: false,
            shard_moved: true,
        })
    }

    /// Runs `work`, which finds out what the steps need, in a transaction of its own (without
    /// the steps' timeouts or shard); when it fails, records the failure, doing `doing`, and
    /// answers `None`: the tick then ends.
    fn look<R>(&mut self, doing: &'static str, work: impl FnOnce() -> R) -> Option<R> {
        match transaction::run(ACTIVITY, work) {
            Ok(answer) => Some(answer),
            Err(failure) => {
                self.report.failures.push((doing, failure.message));
                None
            }
        }
    }
}

/// Runs one tick. `started_at` is when this worker started (server clock).
pub fn run(started_at: i64) -> TickReport {
    let mut tick = Tick {
        started_at,
        shard: None,
        report: TickReport::default(),
    };
    let Some(installed) = tick.look("looking for the extension", || {
        with_client(|client| EXTENSION_EXISTS.first::<String>(client, &[], "installed"))
    }) else {
        return tick.report;
    };
    // The library of a newer (or older) version than the SQL definitions would run its
    // statements against tables they do not describe: idle until ALTER EXTENSION UPDATE.
    tick.report.outdated = installed
        .as_ref()
        .filter(|version| version.as_str() != LIBRARY_VERSION)
        .cloned();
    tick.report.serving = installed.is_some() && tick.report.outdated.is_none();
    if !tick.report.serving {
        return tick.report;
    }
    if let Some(shared) = shared() {
        floor::forget_reaches(shared.floor_cells());
    }
    // On a Citus cluster: this node's shards, and whether it is the coordinator.
    let Some(citus) = tick.look("reading this node's shards", || {
        distribute::local_shard_keys().map(|keys| (keys, distribute::on_coordinator()))
    }) else {
        return tick.report;
    };
    for step in STEPS {
        let outcome = match (&citus, step.on) {
            (None, _) | (Some(_), On::Node) => (step.run)(&mut tick),
            (Some((_, coordinator)), On::Schedules) => match coordinator {
                true => (step.run)(&mut tick),
                false => Ok(()),
            },
            (Some((shards, _)), On::Jobs) => on_each_shard(&mut tick, step, shards),
        };
        if let Err(failure) = outcome {
            tick.report.failures.push((step.doing, failure.message));
            if failure.lock_timeout {
                break;
            }
        }
    }
    tick.report
}

/// Runs `step` once for each of `shards` (on a Citus cluster), skipping a shard that moved
/// away meanwhile; the first failure is the step's, and a lock timeout ends it.
fn on_each_shard(tick: &mut Tick, step: &Step, shards: &[i64]) -> Result<(), Failure> {
    let mut outcome = Ok(());
    for shard in shards {
        tick.shard = Some(*shard);
        let done = (step.run)(tick);
        tick.shard = None;
        match done {
            Err(failure) if failure.shard_moved => {}
            Err(failure) => {
                let lock_timeout = failure.lock_timeout;
                if outcome.is_ok() {
                    outcome = Err(failure);
                }
                if lock_timeout {
                    break;
                }
            }
            Ok(()) => {}
        }
    }
    outcome
}

/// Rule 5: expired leases back to queued (or failed), within a tick of expiring. The lease
/// index is walked a window at a time, a transaction a window (a window with more expired
/// leases than a batch takes is taken again), up to [`RECLAIM_PER_TICK`] jobs a tick: in full
/// from a little before the previous tick's start to now, where the leases that ran out since
/// lie; and before that, where a lease lies only if its claim committed after that tick looked
/// (a claim that ran out its lease before it committed) or the tick's share ran out, up to
/// [`RECLAIM_EARLIER_WINDOWS_PER_TICK`] windows, going on at the next tick where this one
/// stopped. Every job claimed since vacuum last ran leaves a dead entry in that earlier part,
/// and while an old snapshot holds vacuum back they pile up: walking them all every tick made
/// the tick's cost grow with the snapshot's age.
fn reclaim_step(tick: &mut Tick) -> Result<(), Failure> {
    let now = server_now();
    let resume = RECLAIM_RESUME.with(Cell::get);
    let recent_from = resume.recent_from.map_or(i64::MIN, |start| {
        start.saturating_sub(RECLAIM_RECENT_SLACK_MICROS)
    });
    let mut reclaimed = 0;
    let recent_done =
        reclaim_windows(tick, recent_from, now, usize::MAX, &mut reclaimed)?.is_none();
    let earlier_from = if recent_from == i64::MIN {
        None
    } else {
        reclaim_windows(
            tick,
            resume.earlier_from,
            recent_from,
            RECLAIM_EARLIER_WINDOWS_PER_TICK,
            &mut reclaimed,
        )?
    };
    RECLAIM_RESUME.with(|cell| {
        cell.set(ReclaimResume {
            // A recent part not walked to its end is walked again from its start.
            recent_from: if recent_done {
                Some(now)
            } else {
                resume.recent_from
            },
            earlier_from: earlier_from.unwrap_or(i64::MIN),
        })
    });
    Ok(())
}

/// Reclaims from the lease index a window at a time from `from` on, until a window ends past
/// `until`, `windows` windows were walked, or the tick's share of jobs is taken. Returns where
/// to go on when it stopped before `until`.
fn reclaim_windows(
    tick: &mut Tick,
    mut from: i64,
    until: i64,
    windows: usize,
    reclaimed: &mut usize,
) -> Result<Option<i64>, Failure> {
    let mut walked = 0;
    while *reclaimed < RECLAIM_PER_TICK && walked < windows {
        let limit = (RECLAIM_PER_TICK - *reclaimed).min(reclaim::BATCH);
        let (batch, window) = tick
            .transaction(|client| {
                let window = reclaim::lease_window(from)?;
                Some((
                    reclaim::reclaim_batch(client, &TenantScope::All, window, limit),
                    window,
                ))
            })?
            .unwrap_or((0, TimeWindow::ALL));
        walked += 1;
        *reclaimed += batch;
        tick.report.reclaimed += batch;
        // A full batch: the window may hold more (the loop ends once the tick's share is taken).
        if batch >= limit {
            continue;
        }
        if window.until > until {
            return Ok(None);
        }
        from = window.until;
    }
    Ok(Some(from))
}

/// Awaits whose timeout passed go back to the queue (`engine::workflows::signals`), a
/// transaction a batch, up to [`AWAIT_TIMEOUTS_PER_TICK`] a tick.
fn await_timeouts_step(tick: &mut Tick) -> Result<(), Failure> {
    let mut fired = 0;
    while fired < AWAIT_TIMEOUTS_PER_TICK {
        let batch = tick.transaction(|client| signals::fire_timeouts(client, &TenantScope::All))?;
        fired += batch;
        if batch < signals::BATCH {
            break;
        }
    }
    Ok(())
}

/// No due job may wait below a claim floor for long, whatever made it claimable: each floor is
/// checked from its queue's head, a window of the claim index at a time, up to
/// [`FLOOR_WINDOWS_PER_TICK`] windows a tick; a walk that has not reached the floor by then
/// goes on at the next tick, and one that reached it starts again from the head. So such a
/// job waits a tick when the index is clean, and a tick per [`FLOOR_WINDOWS_PER_TICK`] windows
/// of dead entries while an old snapshot keeps them. A transaction checks up to
/// [`FLOOR_CHECKS_PER_TRANSACTION`] windows, and ends after the first full one (a window that
/// ends before the floor): many queues with little below their floors share transactions, and
/// a queue with many dead entries below its floor gets a transaction a window.
fn floors_step(tick: &mut Tick) -> Result<(), Failure> {
    let floors = claim::owned_floors();
    let mut pending: std::collections::VecDeque<_> = FLOOR_CHECK_RESUME.with(|resume| {
        let mut resume = resume.borrow_mut();
        // Queues whose floor is gone (reset, or their slot taken) start again from the head.
        resume.retain(|(slot, queue), _| floors.iter().any(|(s, q, _)| s == slot && q == queue));
        floors
            .into_iter()
            .map(|(slot, queue, floor)| {
                // A floor lowered past where the walk stopped: all of it lies below that.
                let from = resume
                    .get(&(slot, queue.clone()))
                    .copied()
                    .filter(|from| *from < floor);
                (slot, queue, floor, from, FLOOR_WINDOWS_PER_TICK)
            })
            .collect()
    });
    while !pending.is_empty() {
        let healed = tick.transaction(|client| {
            let mut healed = 0;
            for _ in 0..FLOOR_CHECKS_PER_TRANSACTION {
                let Some((slot, queue, floor, from, windows_left)) = pending.pop_front() else {
                    break;
                };
                let window = claim::check_floor_window(client, slot, &queue, floor, from);
                healed += usize::from(window.healed);
                let resume_at = window.next.filter(|_| !window.healed);
                FLOOR_CHECK_RESUME.with(|resume| {
                    let mut resume = resume.borrow_mut();
                    match resume_at {
                        Some(next) => resume.insert((slot, queue.clone()), next),
                        None => resume.remove(&(slot, queue.clone())),
                    }
                });
                if let Some(next) = resume_at {
                    if windows_left > 1 {
                        pending.push_back((slot, queue, floor, Some(next), windows_left - 1));
                    }
                    break;
                }
            }
            healed
        })?;
        tick.report.floors_healed += healed;
    }
    Ok(())
}

/// Each due schedule slot once: its job and the schedule's progress commit together.
fn schedules_step(tick: &mut Tick) -> Result<(), Failure> {
    let started_at = tick.started_at;
    tick.report.scheduled +=
        tick.transaction(|client| schedules::run_for_worker(client, server_now(), started_at))?;
    Ok(())
}

/// Finished jobs past their queue's retention: a window of the table a transaction.
fn purge_step(tick: &mut Tick) -> Result<(), Failure> {
    for _ in 0..purge::WINDOWS_PER_TICK {
        let window = tick.transaction(purge::sweep_window)?;
        tick.report.purged += window.purged;
        if !window.go_on {
            break;
        }
    }
    Ok(())
}

/// Expired idempotency records: their index walked from its start to now a window at a time,
/// a transaction a window (and a batch), up to [`IDEMPOTENCY_PURGED_PER_TICK`] records a tick.
fn idempotency_step(tick: &mut Tick) -> Result<(), Failure> {
    let now = server_now();
    let mut from = i64::MIN;
    let mut purged = 0;
    while purged < IDEMPOTENCY_PURGED_PER_TICK {
        let limit = (IDEMPOTENCY_PURGED_PER_TICK - purged).min(idempotency::PURGE_BATCH);
        let (deleted, window) = tick
            .transaction(|client| {
                let window = idempotency::expiry_window(from)?;
                Some((idempotency::purge_batch(client, now, window, limit), window))
            })?
            .unwrap_or((0, TimeWindow::ALL));
        purged += deleted;
        tick.report.idempotency_purged += deleted;
        // A full batch: the window may hold more (the loop ends once the tick's share is taken).
        if deleted >= limit {
            continue;
        }
        if window.until > now {
            break;
        }
        from = window.until;
    }
    Ok(())
}

/// The records of prepared transactions that no `COMMIT PREPARED` will take.
fn prepared_step(tick: &mut Tick) -> Result<(), Failure> {
    tick.transaction(two_phase::purge_orphans)
}

/// Recorded signals past their expiry, a batch a tick.
fn signals_step(tick: &mut Tick) -> Result<(), Failure> {
    tick.transaction(signals::purge_expired)?;
    Ok(())
}

/// Once per database after shared memory was made: clears the marks of the waiting jobs whose
/// freed heads it lost, so that settles may hand heads over again and no claim pays for it (a
/// waiting claim's empty attempt would roll its sweep back, and sweep again at every wake-up).
/// Nothing when a claim is sweeping meanwhile.
fn stranded_step(tick: &mut Tick) -> Result<(), Failure> {
    if !freed_heads::sweep_needed() {
        return Ok(());
    }
    tick.report.stranded_cleared +=
        tick.transaction(|client| groups::sweep_stranded(client).unwrap_or(0))?;
    Ok(())
}

/// The wake-up backstop: claims waiting on queues whose earliest queued job came due.
fn wake_step(tick: &mut Tick) -> Result<(), Failure> {
    tick.transaction(claim::wake_due_waiters)
}

/// When the worker stops cleanly (SIGTERM): records the time, so the next worker counts the
/// schedules' slots from then on as missed (`catch_up`) rather than as due while it was up.
pub fn stopping() {
    let _ = transaction::run(ACTIVITY, || {
        with_client(|client| {
            let installed = EXTENSION_EXISTS.first::<String>(client, &[], "installed");
            if installed.as_deref() == Some(LIBRARY_VERSION) {
                TICK_SETTINGS.run(client, &[]);
                schedules::worker_stopping(client);
            }
        })
    });
}

/// Writes what this database counted since the last write into minute `minute` of the
/// throughput history (and drops the minutes older than 24 hours), in a transaction of its
/// own; returns what it wrote, to be marked written now that the transaction committed.
/// Nothing while the database lacks the extension at this library's version.
pub fn flush_throughput(minute: i64) -> Result<Vec<crate::runtime::totals::Unflushed>, String> {
    transaction::run(ACTIVITY, || {
        with_client(|client| {
            let installed = EXTENSION_EXISTS.first::<String>(client, &[], "installed");
            if installed.as_deref() != Some(LIBRARY_VERSION) {
                return Vec::new();
            }
            TICK_SETTINGS.run(client, &[]);
            crate::engine::throughput::write(client, minute, server_now())
        })
    })
    .map_err(|failure| failure.message)
}
