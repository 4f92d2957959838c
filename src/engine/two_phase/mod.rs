//! Two-phase commit: what a transaction prepared with `PREPARE TRANSACTION` keeps in tables so
//! that its end applies its effects whenever and wherever it comes, also after a server restart
//! that emptied shared memory (`runtime::effects`, which calls these through
//! [`STORE`]). Each runs as the extension's owner: the callbacks run in the caller's session,
//! whose role may not write pg_jobs's tables.

use pgrx::pg_sys::{self, TEXTOID, TIMESTAMPTZOID};
use pgrx::spi::SpiClient;

use crate::engine::groups;
use crate::pg::clock::server_now;
use crate::pg::{extension, roles};
use crate::runtime::effects::TwoPhaseStore;
use crate::storage::{statement, timestamptz_arg, with_client, Statement};

static SAVE: Statement = statement!(two_phase/save(gid: TEXTOID, effects: TEXTOID) -> ());

static TAKE: Statement = statement!(two_phase/take(gid: TEXTOID) -> (effects));

static PURGE: Statement = statement!(two_phase/purge(now: TIMESTAMPTZOID) -> ());

/// The engine's side of two-phase commit, for `runtime::effects`.
pub const STORE: TwoPhaseStore = TwoPhaseStore {
    clear_marks,
    save,
    take,
};

/// Runs `body` as the extension's owner with SPI, when this library's version of pg_jobs is
/// installed in this database; `None` otherwise. The callbacks run outside any statement, so
/// it provides the snapshot SPI runs under (a fresh one: the transaction is READ COMMITTED for
/// a prepare's own rows, and a `COMMIT PREPARED` must see the commit it just made).
fn as_owner<R>(body: impl FnOnce(&SpiClient<'_>) -> R) -> Option<R> {
    extension::is_current().ok()?;
    let owner = extension::owner()?;
    // SAFETY: a snapshot pushed here is popped below on success; an ERROR aborts the
    // transaction, whose cleanup pops what is left of the active snapshot stack.
    let pushed = unsafe {
        if pg_sys::ActiveSnapshotSet() {
            false
        } else {
            pg_sys::PushActiveSnapshot(pg_sys::GetLatestSnapshot());
            true
        }
    };
    let result = roles::as_role(owner, || with_client(body));
    if pushed {
        // SAFETY: the snapshot pushed above is still the active one (SPI pops its own).
        unsafe { pg_sys::PopActiveSnapshot() };
    }
    Some(result)
}

/// Clears the marks of the freed heads `ids` that the transaction being prepared offered.
fn clear_marks(ids: Vec<i64>) {
    as_owner(|client| groups::unmark(client, ids));
}

/// Records the effects of the transaction being prepared under `gid`.
fn save(gid: &str, record: &str) {
    as_owner(|client| {
        SAVE.run(client, &[gid.into(), record.into()]);
    });
}

/// Takes the effects recorded under `gid`, after its `COMMIT PREPARED`.
fn take(gid: &str) -> Option<String> {
    as_owner(|client| {
        let records: Vec<String> = TAKE
            .run(client, &[gid.into()])
            .iter()
            .filter_map(|row| row.get::<String>("effects"))
            .collect();
        // One record a transaction; see take.sql for when there could be more.
        records.into_iter().next()
    })
    .flatten()
}

/// Deletes records no `COMMIT PREPARED` will take (the background worker's tick).
pub fn purge_orphans(client: &SpiClient<'_>) {
    PURGE.run(client, &[timestamptz_arg(server_now())]);
}
