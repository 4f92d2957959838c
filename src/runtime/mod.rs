//! What pg_jobs keeps outside its tables, in shared memory and per transaction: claim floors
//! and reaches, wake-up slots for waiting claims, the effects a transaction has on them when it
//! commits, rolls back or is prepared, the extension's own heavyweight locks, rate-limit
//! buckets, the totals of settled jobs, the freed heads of groups and the counts of commits that
//! queue jobs (which tell a claim a freed head still holds), and the background workers'
//! status. It uses `pg`
//! only; the engine drives it.

mod attached;
pub mod effects;
pub mod floor;
pub mod freed_heads;
pub mod locks;
mod position;
mod queue_id;
pub mod queue_state;
pub mod queued_changes;
pub mod rate;
pub mod shmem;
mod spin;
pub mod totals;
pub mod waiting_claims;
pub mod wakeup;
pub mod worker_status;

pub use position::Position;
