//! `jobs_claim`: handing due jobs to a worker under a fresh lease, optionally waiting for work.

use std::collections::HashSet;

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgTryBuilder;

use crate::datum::ClaimedRow;
use crate::errors::{
    check_interval, check_range, raise, required, BAD_ARGUMENT, WAIT_NEEDS_READ_COMMITTED,
};
use crate::floor::{self, Key};
use crate::guc;
use crate::locks;
use crate::queue::{check_lease, queue_arg, unknown_queue};
use crate::spi::{server_now, timestamptz_arg, with_client, Statement};
use crate::wakeup::{self, Waiter};

/// Most jobs one claim may take.
pub const MAX_CLAIM: i64 = 1000;

static CANDIDATES: Statement = Statement {
    sql: include_str!("../sql/claim_candidates.sql"),
    args: &[
        pg_sys::TEXTOID,
        pg_sys::INT4OID,
        pg_sys::TEXTARRAYOID,
        pg_sys::TIMESTAMPTZOID,
        pg_sys::INT2OID,
        pg_sys::TIMESTAMPTZOID,
        pg_sys::INT8OID,
    ],
};

static TAKE: Statement = Statement {
    sql: include_str!("../sql/claim_take.sql"),
    args: &[
        pg_sys::INT8ARRAYOID,
        pg_sys::UUIDARRAYOID,
        pg_sys::TEXTOID,
        pg_sys::INTERVALOID,
        pg_sys::TIMESTAMPTZOID,
        pg_sys::TEXTOID,
    ],
};

static LOWEST_QUEUED_PRIORITY: Statement = Statement {
    sql: include_str!("../sql/lowest_queued_priority.sql"),
    args: &[pg_sys::TEXTOID],
};

static PROBE: Statement = Statement {
    sql: include_str!("../sql/claim_probe.sql"),
    args: &[pg_sys::TEXTOID],
};

/// What a claim attempt that got nothing learnt about the queue.
struct Probe {
    paused: bool,
    earliest_run_at: Option<pg_sys::TimestampTz>,
}

/// Claims up to `n` due jobs of `queue` for `worker`, each under a fresh lease; with `wait`,
/// sleeps until a commit makes a job claimable, a delayed job comes due, or the wait ends.
#[pg_extern(volatile, parallel_unsafe)]
fn jobs_claim(
    queue: Option<&str>,
    worker: default!(Option<&str>, "NULL"),
    n: default!(Option<i32>, 1),
    lease: default!(Option<Interval>, "NULL"),
    kinds: default!(Option<Vec<Option<String>>>, "NULL"),
    wait: default!(Option<Interval>, "'0'"),
) -> SetOfIterator<'static, ClaimedRow> {
    let queue = queue_arg(queue);
    let worker = worker
        .map(str::to_owned)
        .unwrap_or_else(default_worker_name);
    let n = required(n, "n");
    check_range(n.into(), "n", 1, MAX_CLAIM);
    if let Some(lease) = &lease {
        check_lease(lease, "lease");
    }
    if let Some(kinds) = &kinds {
        if kinds.iter().flatten().next().is_none() {
            raise(
                BAD_ARGUMENT,
                "kinds must name at least one kind, or be NULL for every kind".into(),
            );
        }
    }
    let wait = required(wait, "wait");
    let max_wait_ms = i128::from(guc::MAX_WAIT_MS.get());
    check_interval(
        &wait,
        "wait",
        false,
        max_wait_ms * 1000,
        &format!("at least 0 and at most pg_jobs.max_wait ({max_wait_ms} ms)"),
    );
    let wait_micros = wait.as_micros() as i64;

    // The SRF's own memory context: results copied here outlive SPI and any subtransaction.
    // SAFETY: reading the current context pointer.
    let result_context = unsafe { pg_sys::CurrentMemoryContext };
    let slot = wakeup::slot(queue);
    let attempt = |now: pg_sys::TimestampTz| -> (Vec<ClaimedRow>, Option<Probe>) {
        with_client(|client| {
            let seen = floor::read(slot, queue);
            let mut claimed_rows: Vec<(Key, ClaimedRow)> = Vec::new();
            let mut first_skipped: Option<Key> = None;
            // A picked job that another claim took (and committed) after the candidates'
            // snapshot is not taken; pick again, with a fresh snapshot, for the ones missing.
            loop {
                let wanted = n as usize - claimed_rows.len();
                let (picked, skipped) =
                    pick_jobs(client, slot, queue, wanted, &kinds, now, seen.as_ref());
                first_skipped = earliest(first_skipped, skipped);
                if picked.is_empty() {
                    break;
                }
                let leases: Vec<pgrx::Uuid> = picked.iter().map(|_| lease_token()).collect();
                let take_args: [DatumWithOid; 6] = [
                    picked.clone().into(),
                    leases.into(),
                    worker.as_str().into(),
                    lease.into(),
                    timestamptz_arg(now),
                    queue.into(),
                ];
                let taken = TAKE.run(client, &take_args);
                for row in taken.iter() {
                    if let Some(claimed) = row.get_in::<ClaimedRow>(1, result_context) {
                        claimed_rows.push((Key::from_row(&row, 2, 3, 4), claimed));
                    }
                }
                if taken.len() == picked.len() || claimed_rows.len() >= n as usize {
                    break;
                }
            }
            // A claim of some kinds skipped other kinds' jobs, so only a claim of every kind
            // may move the floor.
            if let (None, Some(slot), Some(seen)) = (&kinds, slot, &seen) {
                let taken_keys: Vec<Key> = claimed_rows.iter().map(|(key, _)| *key).collect();
                if let Some(to) = new_floor(client, queue, seen.key, &taken_keys, first_skipped) {
                    floor::raise(slot, queue, seen, to);
                }
            }
            if !claimed_rows.is_empty() {
                wakeup::jobs_claimed(queue, claimed_rows.len() as u32);
                // Claim order: priority, then run_at, then id.
                claimed_rows.sort_unstable_by_key(|(key, _)| *key);
                return (claimed_rows.into_iter().map(|(_, row)| row).collect(), None);
            }
            let probe = PROBE.run(client, &[queue.into()]);
            let Some(probe) = probe.first() else {
                unknown_queue(queue)
            };
            let paused: bool = probe.get(1).unwrap_or(false);
            let earliest_run_at: Option<i64> = probe.get::<TimestampWithTimeZone>(2).map(i64::from);
            (
                Vec::new(),
                Some(Probe {
                    paused,
                    earliest_run_at,
                }),
            )
        })
    };

    if wait_micros == 0 {
        return SetOfIterator::new(attempt(server_now()).0);
    }

    // SAFETY: reads the session's isolation level.
    if unsafe { pg_sys::XactIsoLevel } >= pg_sys::XACT_REPEATABLE_READ as i32 {
        crate::errors::raise_with_hint(
            WAIT_NEEDS_READ_COMMITTED,
            "jobs_claim cannot wait under REPEATABLE READ or SERIALIZABLE isolation".into(),
            "Its snapshot would never see the jobs it waits for; claim in a READ COMMITTED transaction, or pass wait => '0'.",
        );
    }
    let deadline = server_now().saturating_add(wait_micros);
    let waiter = Waiter::new(queue);
    loop {
        let seen = waiter.generation();
        let now = server_now();
        // Each attempt runs in a subtransaction that is rolled back when it claims nothing,
        // so the locks its statements took are gone while we sleep.
        let (rows, probe) = in_subtransaction(|| {
            let (rows, probe) = attempt(now);
            let keep = !rows.is_empty();
            ((rows, probe), keep)
        });
        if !rows.is_empty() || now >= deadline {
            return SetOfIterator::new(rows);
        }
        let mut wake_at = deadline;
        if let Some(Probe {
            paused: false,
            earliest_run_at: Some(run_at),
        }) = probe
        {
            // A due job we could not take (held by another claimer, another kind) must not
            // make us spin; only a future one times the sleep.
            if run_at > now {
                wake_at = wake_at.min(run_at);
            }
        }
        waiter.sleep(wake_at, seen);
    }
}

/// Where the claim floor may move after a claim of every kind took `taken`: just past the last
/// job taken in the lowest priority it took from, but not past a job it skipped because another
/// transaction held it, and not to a priority above one that still has queued jobs (delayed
/// ones come due later, in place).
fn new_floor(
    client: &pgrx::spi::SpiClient<'_>,
    queue: &str,
    floor: Option<Key>,
    taken: &[Key],
    skipped: Option<Key>,
) -> Option<Key> {
    let priority = taken.iter().map(|key| key.priority).min()?;
    let to = taken
        .iter()
        .copied()
        .filter(|key| key.priority == priority && skipped.is_none_or(|skipped| *key < skipped))
        .max()?;
    // Within the floor's own priority no lower priority can hold jobs; elsewhere, ask.
    if floor.is_none_or(|floor| floor.priority != priority) {
        let lowest: Option<i16> = LOWEST_QUEUED_PRIORITY.first(client, &[queue.into()]);
        if lowest.is_some_and(|lowest| lowest < priority) {
            return None;
        }
    }
    Some(to.successor())
}

/// The earlier of two positions, either of which may be unknown.
fn earliest(a: Option<Key>, b: Option<Key>) -> Option<Key> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Picks up to `wanted` due jobs for a claim that read `seen`, holding their job locks;
/// returns their ids and the position of the first job skipped or left unexamined (the floor
/// may not rise past it).
///
/// A claim of every kind that knows its queue's reach (see [`floor::extend_reach`]) starts
/// just past it, where the jobs are not held by the claims in flight, and goes back to the
/// floor only for what it still lacks. Without that, concurrent claims all start at the floor
/// and each tries the locks of the jobs the others hold first: a claim of 100 among 8 tried
/// about 660. A claim of every kind then extends the reach to the last job it picked in the
/// floor's priority (jobs of later priorities may lie past delayed jobs of that one, which
/// come due in place).
fn pick_jobs(
    client: &pgrx::spi::SpiClient<'_>,
    slot: Option<&crate::shmem::Slot>,
    queue: &str,
    wanted: usize,
    kinds: &Option<Vec<Option<String>>>,
    now: pg_sys::TimestampTz,
    seen: Option<&floor::Seen>,
) -> (Vec<i64>, Option<Key>) {
    let floor_key = seen.and_then(|s| s.key);
    let reach = seen
        .filter(|_| kinds.is_none())
        .and_then(|s| s.reach)
        .filter(|reach| floor_key.is_some_and(|floor| *reach >= floor));
    let nothing_picked = HashSet::new();
    let (mut picked, mut skipped) = match reach {
        Some(reach) => {
            let past_reach = reach.successor();
            let (picked, skipped) = pick(
                client,
                queue,
                wanted,
                kinds,
                now,
                Some(past_reach),
                &nothing_picked,
            );
            // What lies between the floor and the reach was not examined.
            (
                picked,
                Some(skipped.map_or(past_reach, |s| s.min(past_reach))),
            )
        }
        None => pick(
            client,
            queue,
            wanted,
            kinds,
            now,
            floor_key,
            &nothing_picked,
        ),
    };
    if reach.is_some() && picked.len() < wanted {
        let already: HashSet<i64> = picked.iter().map(|k| k.id).collect();
        let (more, skipped_here) = pick(
            client,
            queue,
            wanted - picked.len(),
            kinds,
            now,
            floor_key,
            &already,
        );
        picked.extend(more);
        skipped = earliest(skipped, skipped_here);
    }
    if let (None, Some(slot), Some(seen), Some(floor_key)) = (kinds, slot, seen, floor_key) {
        let furthest = picked
            .iter()
            .filter(|key| key.priority == floor_key.priority)
            .max();
        if let Some(furthest) = furthest {
            // Should this transaction roll back, the jobs come back below the reach: the
            // rollback must reset the floor, and the reach with it.
            wakeup::job_locked(queue);
            floor::extend_reach(slot, queue, seen, *furthest);
        }
    }
    (picked.iter().map(|key| key.id).collect(), skipped)
}

/// Picks up to `wanted` due jobs in claim order, from `start` on, taking each one's job lock
/// and skipping those another transaction holds and those in `already` (picked before).
/// Returns the positions picked and the position of the first job skipped.
fn pick(
    client: &pgrx::spi::SpiClient<'_>,
    queue: &str,
    wanted: usize,
    kinds: &Option<Vec<Option<String>>>,
    now: pg_sys::TimestampTz,
    mut start: Option<Key>,
    already: &HashSet<i64>,
) -> (Vec<Key>, Option<Key>) {
    // Read a few more candidates than needed: the head of a busy queue is usually held by
    // other claims in flight. Each further batch is twice as large, so a claim behind many
    // others catches up in a few statements.
    let mut limit = (wanted + 16) as i32;
    let mut picked = Vec::with_capacity(wanted);
    let mut first_skipped = None;
    loop {
        let args: [DatumWithOid; 7] = [
            queue.into(),
            limit.into(),
            kinds.clone().into(),
            timestamptz_arg(now),
            start.map(|k| k.priority).into(),
            start.map_or(DatumWithOid::null_oid(pg_sys::TIMESTAMPTZOID), |k| {
                timestamptz_arg(k.run_at)
            }),
            start.map(|k| k.id).into(),
        ];
        let candidates = CANDIDATES.run(client, &args);
        let mut last = None;
        for row in candidates.iter() {
            let key = Key::from_row(&row, 2, 3, 1);
            last = Some(key);
            if already.contains(&key.id) {
                continue;
            }
            if locks::try_lock_job(key.id) {
                picked.push(key);
                if picked.len() == wanted {
                    return (picked, first_skipped);
                }
            } else if first_skipped.is_none() {
                first_skipped = Some(key);
            }
        }
        match last {
            Some(last) if candidates.len() == limit as usize => {
                start = Some(last.successor());
                limit = limit.saturating_mul(2).min(10_000);
            }
            _ => return (picked, first_skipped),
        }
    }
}

thread_local! {
    /// This backend's lease-token generator, seeded from the server's strong random source.
    static TOKENS: std::cell::Cell<u64> = std::cell::Cell::new(strong_seed());
}

fn strong_seed() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: fills our own buffer.
    let ok = unsafe { pg_sys::pg_strong_random(bytes.as_mut_ptr().cast(), bytes.len()) };
    assert!(
        ok,
        "pg_jobs could not read the server's random source to seed lease tokens"
    );
    u64::from_le_bytes(bytes)
}

/// A fresh lease token (a version-4 UUID). Tokens fence stale holders off; they are not
/// secrets (anyone who may read jobs.job sees them), so a fast generator seeded from the
/// strong source serves: a claim of 100 jobs would otherwise read the system's random source
/// 100 times.
fn lease_token() -> pgrx::Uuid {
    // splitmix64: a full-period 64-bit generator with good mixing.
    let next = || {
        TOKENS.with(|state| {
            let z = state.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
            state.set(z);
            let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        })
    };
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&next().to_le_bytes());
    bytes[8..].copy_from_slice(&next().to_le_bytes());
    bytes[6] = (bytes[6] & 0x0f) | 0x40; // version 4
    bytes[8] = (bytes[8] & 0x3f) | 0x80; // RFC 4122 variant
    pgrx::Uuid::from_bytes(bytes)
}

/// The worker name a claim records when none is given: `application_name`, else the pid.
fn default_worker_name() -> String {
    // SAFETY: application_name is a GUC string, valid for the session.
    let application_name = unsafe {
        let name = pg_sys::application_name;
        if name.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned()
        }
    };
    if application_name.is_empty() {
        // SAFETY: MyProcPid is set for the life of the backend.
        format!("pid:{}", unsafe { pg_sys::MyProcPid })
    } else {
        application_name
    }
}

/// Runs `body` in a subtransaction, committed when `body` says to keep its work and rolled
/// back otherwise (or on an ERROR, which is then re-raised).
fn in_subtransaction<R>(body: impl FnOnce() -> (R, bool)) -> R {
    // SAFETY: the same save/begin/restore sequence PL/pgSQL uses around an exception block.
    unsafe {
        let context = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(context);
        let restore = move || {
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::CurrentResourceOwner = owner;
        };
        let (result, keep) = PgTryBuilder::new(std::panic::AssertUnwindSafe(body))
            .catch_others(move |error| {
                pg_sys::RollbackAndReleaseCurrentSubTransaction();
                restore();
                error.rethrow()
            })
            .execute();
        if keep {
            pg_sys::ReleaseCurrentSubTransaction();
        } else {
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
        }
        restore();
        result
    }
}
