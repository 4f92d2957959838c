//! Workflows: jobs that wait for other jobs ([`dependencies`]), for a signal ([`signals`]), and
//! callers that read or wait for jobs' outcomes ([`results`]).
//!
//! A job that waits is in state `waiting`: no lease, no attempt spent, and in none of the
//! claim indexes (their predicate is `state = 'queued'`), nor in its group's index (queued or
//! running jobs only), so no claim path sees it: not the candidate statements, not the direct
//! reader of `job_claim_idx` (`storage::direct::claim_reader`, which checks the state on the row), not
//! the group heads (`storage::direct::group_reader`, queued or running only) nor the freed heads a
//! settle hands over (`runtime::freed_heads`, which are group heads). A waiting job takes no
//! slot of its group: its group's later jobs may run meanwhile, and once queued it is decided
//! by claims like any job of the group. It becomes `queued` in the transaction that settles its
//! last parent, or that signals it (or when its await times out), through the one door every
//! path to `queued` goes through (`engine::transitions`): the claim floor comes down to it and
//! waiting claims wake when that transaction commits, as for an enqueue.
//!
//! What queues that use none of this pay: the settle statements return one more column of the
//! settled row (`dependents`), and only a job whose flag is set makes its settle look for
//! dependents. The tables of dependencies, awaits and signals are apart from `jobs.job`, which
//! gains no index.
//!
//! Two-phase commit and crashes: everything here is rows of the caller's transaction and its
//! row and heavyweight locks, which a prepared transaction keeps across a restart; the jobs it
//! queues are reported through `engine::transitions` like any other (`runtime::effects` carries
//! them over a `PREPARE`, and the worker's floor check and wake-up backstop cover what a restart
//! loses). Nothing of it lives only in shared memory.

pub mod dependencies;
pub mod results;
pub mod signals;
