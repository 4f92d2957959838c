//! Which claims are waiting for work right now, for the `jobs.workers` view: one entry per
//! waiting `jobs_claim`, with its backend, worker name, queue, tenants and since when it waits.
//!
//! A claim registers only once it is about to sleep (a claim that finds work at once writes
//! nothing here), and leaves when its wait ends, however it ends (the registration is dropped
//! on an ERROR too). A backend that died without leaving (a crash restarts the server, which
//! makes shared memory anew; a FATAL unwinds through the drop) is filtered out by readers,
//! which show only entries whose backend is alive. Only a cache of what is happening: nothing
//! here outlives a restart, and nothing needs to.

use pgrx::pg_sys;

use super::attached::Attached;
use super::queue_id::current_database;
use super::spin::SpinLocked;

/// The waiting claims in shared memory (`shmem` attaches it).
pub(super) static TABLE: Attached<WaitingClaims> = Attached::new();

/// Waiting claims shown at once; a claim that finds the table full waits unlisted.
pub const ENTRIES: usize = 512;
/// Longest worker name and queue name kept (longer worker names are cut).
const NAME_BYTES: usize = 64;
/// Room for the waiter's tenants, joined by a unit separator.
const TENANT_BYTES: usize = 192;
/// Separates the tenants in [`Entry::tenants`] (no tenant name holds it in practice; a name
/// that does is only shown to callers who see every tenant).
const SEPARATOR: u8 = 0x1f;

/// One waiting claim, as plain data.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Entry {
    /// The backend's pid; 0 for a free entry.
    pid: i32,
    database: u32,
    since: i64,
    worker_len: u8,
    worker: [u8; NAME_BYTES],
    queue_len: u8,
    queue: [u8; NAME_BYTES],
    /// The claim may take every tenant's jobs.
    every_tenant: bool,
    /// The tenants did not fit (or a name holds the separator): shown to callers who see
    /// every tenant only.
    tenants_cut: bool,
    tenants_len: u8,
    tenants: [u8; TENANT_BYTES],
}

/// Every waiting claim, in shared memory.
pub type WaitingClaims = SpinLocked<[Entry; ENTRIES]>;

/// A waiting claim, as readers see it.
pub struct WaitingClaim {
    /// Its backend.
    pub pid: i32,
    /// The worker name it claims as.
    pub worker: String,
    /// The queue it waits on.
    pub queue: String,
    /// When it began to sleep (server clock, PostgreSQL epoch).
    pub since: i64,
}

/// Which waiting claims a reader is shown.
pub enum Visible<'a> {
    /// Every one.
    All,
    /// Those that take only jobs of these tenants.
    Tenants(&'a [String]),
    /// None (a client without a tenant: waiting claims belong to workers).
    Nothing,
}

/// A claim's entry while it waits; dropping it (the wait ended, or an ERROR unwound it)
/// frees the entry.
pub struct Registration {
    index: Option<usize>,
}

fn copy_name(into: &mut [u8], text: &str) -> u8 {
    // Cut at a character boundary.
    let mut len = text.len().min(into.len());
    while !text.is_char_boundary(len) {
        len -= 1;
    }
    into[..len].copy_from_slice(&text.as_bytes()[..len]);
    len as u8
}

/// Lists this backend's claim as waiting on `queue` as `worker` from `since`, taking the jobs
/// of `tenants` (`None`: every tenant's). Nothing without shared memory, or when the table is
/// full.
pub fn register(queue: &str, worker: &str, tenants: Option<&[String]>, since: i64) -> Registration {
    let Some(table) = TABLE.get() else {
        return Registration { index: None };
    };
    let mut entry = Entry {
        // SAFETY: set by PostgreSQL for the life of the process.
        pid: unsafe { pg_sys::MyProcPid },
        database: current_database(),
        since,
        worker_len: 0,
        worker: [0; NAME_BYTES],
        queue_len: 0,
        queue: [0; NAME_BYTES],
        every_tenant: tenants.is_none(),
        tenants_cut: false,
        tenants_len: 0,
        tenants: [0; TENANT_BYTES],
    };
    entry.worker_len = copy_name(&mut entry.worker, worker);
    entry.queue_len = copy_name(&mut entry.queue, queue);
    if let Some(tenants) = tenants {
        let joined = tenants.join("\u{1f}");
        let holds_separator = tenants.iter().any(|t| t.as_bytes().contains(&SEPARATOR));
        if joined.len() > TENANT_BYTES || holds_separator {
            entry.tenants_cut = true;
        } else {
            entry.tenants_len = copy_name(&mut entry.tenants, &joined);
        }
    }
    let index = table.with(|entries| {
        let free = entries.iter().position(|e| e.pid == 0)?;
        entries[free] = entry;
        Some(free)
    });
    Registration { index }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let (Some(index), Some(table)) = (self.index, TABLE.get()) else {
            return;
        };
        // SAFETY: set by PostgreSQL for the life of the process.
        let pid = unsafe { pg_sys::MyProcPid };
        table.with(|entries| {
            if entries[index].pid == pid {
                entries[index].pid = 0;
            }
        });
    }
}

/// The waiting claims of this database that `visible` covers and whose backends are alive.
pub fn read(visible: Visible<'_>) -> Vec<WaitingClaim> {
    let Some(table) = TABLE.get() else {
        return Vec::new();
    };
    if matches!(visible, Visible::Nothing) {
        return Vec::new();
    }
    let database = current_database();
    let entries: Vec<Entry> = table.with(|entries| {
        entries
            .iter()
            .filter(|e| e.pid != 0 && e.database == database)
            .copied()
            .collect()
    });
    entries
        .into_iter()
        .filter(|entry| match visible {
            Visible::All => true,
            Visible::Nothing => false,
            Visible::Tenants(tenants) => {
                !entry.every_tenant
                    && !entry.tenants_cut
                    && entry.tenants[..entry.tenants_len as usize]
                        .split(|b| *b == SEPARATOR)
                        .all(|t| tenants.iter().any(|mine| mine.as_bytes() == t))
            }
        })
        // SAFETY: looks the pid up in the proc array (under its lock), as pg_stat_activity's
        // functions do.
        .filter(|entry| unsafe { !pg_sys::BackendPidGetProc(entry.pid).is_null() })
        .map(|entry| WaitingClaim {
            pid: entry.pid,
            worker: String::from_utf8_lossy(&entry.worker[..entry.worker_len as usize])
                .into_owned(),
            queue: String::from_utf8_lossy(&entry.queue[..entry.queue_len as usize]).into_owned(),
            since: entry.since,
        })
        .collect()
}
