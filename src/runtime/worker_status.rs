//! One background worker's report in shared memory, written by the worker (and, while no
//! worker runs for its database, by the launcher), read by `jobs_worker_status()`.

use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Longest error message kept in a worker's status.
pub const ERROR_BYTES: usize = 512;
/// Longest database name (NAMEDATALEN).
pub const NAME_BYTES: usize = 64;

/// One background worker's report. Counters are written by the worker alone.
#[repr(C)]
pub struct WorkerStatus {
    /// Database name, NUL-padded; empty when the entry is unused.
    database: [AtomicU8; NAME_BYTES],
    /// The worker's pid, 0 when it is not running. A starting worker claims the entry by
    /// setting it from 0, and sets it back to 0 as it exits (`worker::claim_entry`).
    pub pid: AtomicI32,
    /// When the worker started.
    pub started_at: AtomicI64,
    /// When the last tick finished, successful or not (0 before the first).
    pub last_tick: AtomicI64,
    /// When the last failing tick finished (0 when none has failed).
    pub last_error_at: AtomicI64,
    /// 1 when the worker serves the database: the extension existed there at its last tick.
    /// 0 before the first tick, without the extension, and on a standby (no ticks there).
    pub serving: AtomicU32,
    /// Ticks run since start.
    pub ticks: AtomicU64,
    /// Jobs reclaimed since start.
    pub reclaimed: AtomicU64,
    /// Jobs purged since start.
    pub purged: AtomicU64,
    /// Claim floors the worker found below a due job and reset, since start.
    pub floors_healed: AtomicU64,
    /// Expired idempotency records purged since start.
    pub idempotency_purged: AtomicU64,
    /// Jobs enqueued for schedules' slots since start.
    pub scheduled: AtomicU64,
    /// Sequence lock over `last_error`: odd while it is being written.
    error_seq: AtomicU64,
    /// The last tick error, NUL-padded.
    last_error: [AtomicU8; ERROR_BYTES],
}

impl WorkerStatus {
    /// The database this entry reports on.
    pub fn database(&self) -> String {
        read_text(&self.database)
    }

    /// Claims the entry for `database`.
    pub fn set_database(&self, database: &str) {
        write_text(&self.database, database);
    }

    /// The last tick error, if any.
    pub fn last_error(&self) -> Option<String> {
        loop {
            let before = self.error_seq.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let text = read_text(&self.last_error);
            if self.error_seq.load(Ordering::Acquire) == before {
                return (!text.is_empty()).then_some(text);
            }
        }
    }

    /// Records the error of a failed tick.
    pub fn set_last_error(&self, error: &str) {
        self.error_seq.fetch_add(1, Ordering::AcqRel);
        write_text(&self.last_error, error);
        self.error_seq.fetch_add(1, Ordering::AcqRel);
    }

    /// Shows why no worker serves the database (the launcher's note: the database does not
    /// exist, say) in place of a tick error, with no time of failure. Written only while no
    /// worker runs for the entry, so the worker and the launcher never write it at once.
    pub fn note(&self, reason: &str) {
        self.set_last_error(reason);
        self.last_error_at.store(0, Ordering::Release);
    }

    /// Forgets the last error or note (a worker starting).
    pub fn clear_error(&self) {
        self.set_last_error("");
        self.last_error_at.store(0, Ordering::Release);
    }
}

fn read_text(bytes: &[AtomicU8]) -> String {
    let raw: Vec<u8> = bytes
        .iter()
        .map(|b| b.load(Ordering::Relaxed))
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&raw).into_owned()
}

fn write_text(bytes: &[AtomicU8], text: &str) {
    // Cut on a character boundary so readers always see valid UTF-8.
    let mut end = text.len().min(bytes.len() - 1);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    for (i, slot) in bytes.iter().enumerate() {
        let byte = if i < end { text.as_bytes()[i] } else { 0 };
        slot.store(byte, Ordering::Relaxed);
    }
}
