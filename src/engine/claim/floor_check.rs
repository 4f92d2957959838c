//! The worker's check that the claim floors are sound: below a queue's floor lie only jobs that
//! claims in flight hold. The check walks the claim index below each floor window by window,
//! each in a transaction of its own, and resets a floor with a due job no transaction holds
//! below it (left by a path the code does not know about), waking the queue's waiters.

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::{self, INT2OID, INT4OID, INT8OID, TEXTOID, TIMESTAMPTZOID};
use pgrx::spi::SpiClient;

use crate::engine::model::Position;
use crate::pg::clock::server_now;
use crate::runtime::floor;
use crate::runtime::locks;
use crate::runtime::shmem::shared;
use crate::runtime::wakeup;
use crate::storage::direct::{self, Compare};
use crate::storage::{index_walk, statement, timestamptz_arg, Statement};

static FLOOR_CHECK: Statement = statement!(
    claim/floor_check(queue: TEXTOID, floor_priority: INT2OID, floor_run_at: TIMESTAMPTZOID,
        floor_id: INT8OID, now: TIMESTAMPTZOID, from_priority: INT2OID, from_run_at: TIMESTAMPTZOID,
        from_id: INT8OID) -> (id)
);

static FLOOR_RECHECK: Statement = statement!(
    claim/floor_recheck(queue: TEXTOID, floor_priority: INT2OID, floor_run_at: TIMESTAMPTZOID,
        floor_id: INT8OID, job_id: INT8OID, now: TIMESTAMPTZOID) -> (below)
);

/// The claim floors that queues of this database hold, for the worker's check that each is
/// sound ([`check_floor_window`]): the slot of each, its queue and its floor.
pub fn owned_floors() -> Vec<(usize, String, Position)> {
    shared()
        .map(|shared| floor::owned_floors(shared.floor_cells()))
        .unwrap_or_default()
}

/// What the check of one window below a claim floor found.
pub struct FloorWindow {
    /// The floor had a due queued job below it, and was reset (the queue's waiters woken).
    pub healed: bool,
    /// Where the next window starts, when this one ended before the floor.
    pub next: Option<Position>,
}

/// The worker's check that `queue`'s claim floor (`floor`, in slot `slot`) is sound, over one
/// window of the claim index below it, from `from` (`None`: the queue's head) on: a floor
/// with a due queued job below it (left by a path the code does not know about) is reset, so
/// such a job waits at most until the check reaches it, a tick when the index is clean. The
/// worker checks window after window, each in a transaction of its own, until the floor.
pub fn check_floor_window(
    client: &SpiClient<'_>,
    slot: usize,
    queue: &str,
    floor: Position,
    from: Option<Position>,
) -> FloorWindow {
    let Some(shared) = shared() else {
        return FloorWindow {
            healed: false,
            next: None,
        };
    };
    let end = claim_index_window_end(queue, from).filter(|end| *end < floor);
    let from = from.unwrap_or(Position {
        priority: i16::MIN,
        run_at: i64::MIN,
        id: i64::MIN,
    });
    let until = end.unwrap_or(floor);
    let healed = stranded_below(client, queue, from, until, floor, server_now())
        && floor::heal(shared.slot(slot).floor(), queue, floor);
    if healed {
        wakeup::wake_queue(queue);
    }
    FloorWindow {
        healed,
        next: if healed { None } else { end },
    }
}

/// Where the window of the claim index that starts at `from` (`None`: the head of `queue`)
/// ends: the position of the first entry past it (`storage::index_walk`). `None` when the
/// queue's entries end first.
fn claim_index_window_end(queue: &str, from: Option<Position>) -> Option<Position> {
    // SAFETY: inside the caller's transaction; the scan keys' arguments are by value, or the
    // row comparison's members, which live until the walk returns.
    let end = unsafe {
        let text = pg_sys::cstring_to_text_with_len(queue.as_ptr().cast(), queue.len() as i32);
        // The index's own function, so the key is the one the index holds (any deterministic
        // collation hashes alike).
        let hash = pg_sys::OidFunctionCall1Coll(
            pg_sys::Oid::from(pg_sys::F_HASHTEXT),
            pg_sys::C_COLLATION_OID,
            pg_sys::Datum::from(text),
        );
        let mut members: [pg_sys::ScanKeyData; 3] = [std::mem::zeroed(); 3];
        index_walk::window_end(c"job", c"job_claim_idx", |index| {
            let ge = pg_sys::BTGreaterEqualStrategyNumber;
            let eq = pg_sys::BTEqualStrategyNumber;
            let mut keys = vec![direct::key(
                index,
                1,
                INT4OID,
                eq,
                Compare::Condition,
                hash,
            )?];
            if let Some(from) = from {
                // `(priority, run_at, id) >= from`, as one row comparison.
                members = direct::row_members(
                    index,
                    2,
                    ge,
                    [
                        (INT2OID, pg_sys::Datum::from(from.priority)),
                        (TIMESTAMPTZOID, pg_sys::Datum::from(from.run_at)),
                        (INT8OID, pg_sys::Datum::from(from.id)),
                    ],
                )?;
                keys.push(direct::row_header(2, ge, &mut members));
            }
            Some(keys)
        })
    };
    let key = end.ok()??;
    Some(Position {
        priority: key[1].value() as i16,
        run_at: key[2].value() as i64,
        id: key[3].value() as i64,
    })
}

/// Whether a due queued job that no transaction holds sits in `[from, until)`, below `floor`.
///
/// A claim raises the floor past the jobs it takes before it commits, so until then the
/// check's snapshot sees those jobs queued below the floor. Each is under its job lock, held
/// by the claim to its end: a job whose lock another transaction holds is that
/// transaction's to take or to give back (a rollback resets the floor), so only a job whose
/// lock the worker gets is asked about again, under the lock and with the latest snapshot.
/// Without this the worker reset a busy queue's floor whenever its check met a claim in
/// flight, and the next claim walked the claim index from the queue's head. The check looks
/// at the first 32 such jobs: a stranded job behind more held ones than that is found at a
/// later tick, once their claims ended.
fn stranded_below(
    client: &SpiClient<'_>,
    queue: &str,
    from: Position,
    until: Position,
    floor: Position,
    now: pg_sys::TimestampTz,
) -> bool {
    let args: [DatumWithOid; 8] = [
        queue.into(),
        until.priority.into(),
        timestamptz_arg(until.run_at),
        until.id.into(),
        timestamptz_arg(now),
        from.priority.into(),
        timestamptz_arg(from.run_at),
        from.id.into(),
    ];
    let below: Vec<i64> = FLOOR_CHECK
        .run(client, &args)
        .iter()
        .filter_map(|row| row.get("id"))
        .collect();
    below.into_iter().any(|id| {
        if !locks::try_lock_job(id) {
            return false;
        }
        let args: [DatumWithOid; 6] = [
            queue.into(),
            floor.priority.into(),
            timestamptz_arg(floor.run_at),
            floor.id.into(),
            id.into(),
            timestamptz_arg(now),
        ];
        let still_below = FLOOR_RECHECK
            .run_latest(client, &args)
            .first()
            .and_then(|row| row.get::<bool>("below"))
            .unwrap_or(false);
        locks::unlock_job(id);
        still_below
    })
}
