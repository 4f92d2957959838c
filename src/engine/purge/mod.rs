//! Retention: the background worker deletes finished jobs older than their queue's
//! `retention`, sweeping the table in id order a window at a time (no index serves it: one on
//! finished jobs would cost every completion an insertion to speed up a job that runs once a
//! tick).

use pgrx::pg_sys::{INT4OID, INT8OID};
use pgrx::spi::SpiClient;

use crate::storage::{param, shard, Statement};

/// Jobs the retention sweep looks at per statement.
pub const WINDOW: usize = 2_000;
/// Windows one tick sweeps at most, while they keep finding jobs to purge.
pub const WINDOWS_PER_TICK: usize = 20;

static PURGE: Statement = Statement {
    name: "purge/purge",
    sql: include_str!("purge.sql"),
    params: &[param("after id", INT8OID), param("window", INT4OID)],
    columns: &["last_id", "looked", "purged"],
};

thread_local! {
    /// The last job id the retention sweep looked at, per shard (`storage::shard`; 0: the plain
    /// table).
    static POSITION: std::cell::RefCell<std::collections::HashMap<i64, i64>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// The sweep's position on the current table.
fn position() -> i64 {
    POSITION.with(|p| p.borrow().get(&shard::current_key()).copied().unwrap_or(0))
}

/// Moves the sweep's position on the current table.
fn set_position(last: i64) {
    POSITION.with(|p| p.borrow_mut().insert(shard::current_key(), last));
}

/// One tick's share of the sweep: one window, and further ones (up to [`WINDOWS_PER_TICK`])
/// while windows keep finding jobs to purge, from where the last tick stopped (a restart just
/// starts the sweep over). An idle sweep costs a millisecond a tick; a table that fills with
/// expired jobs faster than one window a tick is swept faster. Returns how many it deleted.
///
/// A window that reaches the newest job ends the pass: the next one starts over at the oldest.
/// Waiting for an empty window instead would never start over while producers keep adding
/// jobs behind the sweep, which would then chase the newest jobs and purge nothing.
pub fn sweep(client: &SpiClient<'_>) -> usize {
    let mut purged = 0;
    for _ in 0..WINDOWS_PER_TICK {
        let rows = PURGE.run(client, &[position().into(), (WINDOW as i32).into()]);
        let row = rows.first().expect("purge/purge returns one row");
        let purged_here = row.get::<i64>("purged").unwrap_or(0) as usize;
        purged += purged_here;
        let looked = row.get::<i64>("looked").unwrap_or(0);
        match row.get::<i64>("last_id") {
            Some(last) if looked >= WINDOW as i64 => set_position(last),
            _ => {
                set_position(0);
                break;
            }
        }
        if purged_here == 0 {
            break;
        }
    }
    purged
}
