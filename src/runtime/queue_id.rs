//! How a queue is identified in shared memory and in lock tags, the same way in every backend.

use pgrx::pg_sys;

/// Number of wake-up slots; queues hash onto them, and two queues sharing one only cost each
/// other a spurious wake-up (and share a floor cell, which one of them owns at a time).
pub const SLOTS: usize = 1024;

/// A stable 64-bit hash of a queue name (FNV-1a), shared by the queue lock and the wake-up
/// slots so both identify a queue the same way in every backend.
pub fn queue_hash(queue: &str) -> u64 {
    queue.bytes().fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The database this backend is connected to.
pub fn current_database() -> u32 {
    // SAFETY: MyDatabaseId is fixed for the life of a connected backend.
    u32::from(unsafe { pg_sys::MyDatabaseId })
}

/// The index of `queue`'s wake-up slot in this database.
pub fn slot_index(queue: &str) -> usize {
    let database = u64::from(current_database());
    ((queue_hash(queue) ^ database.wrapping_mul(0x9e37_79b9_7f4a_7c15)) % SLOTS as u64) as usize
}
