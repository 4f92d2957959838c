//! The SQL API: every `#[pg_extern]` of pg_jobs, one module per area, each function checking
//! its arguments (`args`) and calling the engine. Nothing imports this layer.

mod args;
mod consume;
mod distribute;
mod idempotency;
mod observe;
mod operate;
mod produce;
mod queues;
mod schedules;
mod tenants;
mod workflows;
