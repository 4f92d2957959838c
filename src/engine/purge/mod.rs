//! Retention: the background worker deletes finished jobs older than their queue's
//! `retention`, sweeping the table in id order a window at a time, each in a transaction of
//! its own (no index serves it: one on finished jobs would cost every completion an insertion
//! to speed up a job that runs once a tick).

use pgrx::pg_sys::{INT4OID, INT8OID};
use pgrx::spi::SpiClient;

use crate::storage::{shard, statement, Statement};

/// Jobs the retention sweep looks at per statement.
pub const WINDOW: usize = 2_000;
/// Ids a window spans at first, and again after each window that found live jobs.
pub const SPAN: i64 = 10 * WINDOW as i64;
/// Ids a window spans at most: each window that finds no live job doubles the span up to this,
/// so the sweep crosses a stretch of purged ids in a few windows, while a window over dead
/// versions that vacuum has not removed yet stays short.
pub const MAX_SPAN: i64 = 8 * SPAN;
/// Windows one tick sweeps at most, while they keep finding jobs to purge (or no job at all).
pub const WINDOWS_PER_TICK: usize = 20;

static PURGE: Statement = statement!(
    purge/purge(after_id: INT8OID, window: INT4OID, span: INT8OID)
        -> (last_id, looked, purged, newest)
);

/// Where the sweep is: the last id it looked at, and the span of its next window.
#[derive(Clone, Copy)]
struct Sweep {
    after: i64,
    span: i64,
}

/// Where a sweep starts.
const START: Sweep = Sweep {
    after: 0,
    span: SPAN,
};

thread_local! {
    /// Where the retention sweep is, per shard (`storage::shard`; 0: the plain table). A
    /// restart just starts the sweep over.
    static SWEEP: std::cell::RefCell<std::collections::HashMap<i64, Sweep>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// What one window of the sweep did.
pub struct Window {
    /// Jobs it deleted.
    pub purged: usize,
    /// Whether the tick should sweep another window now: this one deleted jobs, or found no
    /// live job to look at (a stretch of purged ids), and the pass goes on.
    pub go_on: bool,
}

/// One window of the sweep, from where the last one stopped: up to [`WINDOW`] jobs within a
/// span of ids. The worker runs one a transaction, and further ones (up to
/// [`WINDOWS_PER_TICK`] a tick) while they keep finding jobs to purge or no job at all. An idle
/// sweep costs a millisecond a tick; a table that fills with expired jobs faster than one window
/// a tick is swept faster.
///
/// A window that reaches the newest id ends the pass: the next one starts over at the oldest.
/// Waiting for an empty window instead would never start over while producers keep adding
/// jobs behind the sweep, which would then chase the newest jobs and purge nothing.
///
/// On a shard of a Citus cluster, job ids are sparse (they encode the node and the shard,
/// `engine::distribute::job_id_for`) and the sequence does not give the newest: a window there
/// is the next [`WINDOW`] jobs, however far apart, and one that finds fewer ends the pass.
pub fn sweep_window(client: &SpiClient<'_>) -> Window {
    let key = shard::current_key();
    let sharded = key != 0;
    let sweep = SWEEP.with(|s| s.borrow().get(&key).copied().unwrap_or(START));
    let span = if sharded {
        i64::MAX - sweep.after.max(0)
    } else {
        sweep.span
    };
    let rows = PURGE.run(
        client,
        &[sweep.after.into(), (WINDOW as i32).into(), span.into()],
    );
    let row = rows.first().expect("purge/purge returns one row");
    let purged = row.get::<i64>("purged").unwrap_or(0) as usize;
    let looked = row.get::<i64>("looked").unwrap_or(0);
    let newest = row.get::<i64>("newest").unwrap_or(0);
    let (after, span) = if looked >= WINDOW as i64 {
        // A full window: the next one starts after its last job.
        (row.get::<i64>("last_id").unwrap_or(sweep.after), SPAN)
    } else if sharded {
        (i64::MAX, SPAN)
    } else if looked == 0 {
        (
            sweep.after.saturating_add(sweep.span),
            (sweep.span * 2).min(MAX_SPAN),
        )
    } else {
        (sweep.after.saturating_add(sweep.span), SPAN)
    };
    let pass_ended = after == i64::MAX || (!sharded && after >= newest);
    SWEEP.with(|s| {
        s.borrow_mut().insert(
            key,
            if pass_ended {
                START
            } else {
                Sweep { after, span }
            },
        )
    });
    Window {
        purged,
        go_on: !pass_ended && (purged > 0 || looked == 0),
    }
}
