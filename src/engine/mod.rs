//! The model of a job queue: job states and outcomes, positions in claim order, the
//! transitions between states and the one door every transition to `queued` goes through, the
//! claim pipeline with its filter, settling, reclaim, backoff, dead letters, retention,
//! workflows (dependencies, results and durable waits), and what observers see. It runs its statements through `storage` and keeps shared state through
//! `runtime`; the SQL API (`api`) and the background worker (`worker`) call it.

pub mod access;
pub mod backoff;
pub mod claim;
pub mod dead_letter;
pub mod distribute;
pub mod enqueue;
pub mod errors;
pub mod groups;
pub mod idempotency;
pub mod model;
pub mod observe;
pub mod operate;
pub mod purge;
pub mod queues;
pub mod reclaim;
pub mod schedules;
pub mod settle;
pub mod tenants;
pub mod throughput;
pub mod transitions;
pub mod two_phase;
pub mod waiting;
pub mod workflows;
