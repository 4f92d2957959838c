//! Scale-out on Citus: `jobs_distribute` and the trigger that gives jobs their ids there
//! (docs/src/internals/citus.md).

use pgrx::prelude::*;

use super::args::check_range;
use crate::engine::{access, distribute};
use crate::pg::errors::{raise_with_hint, required, INSUFFICIENT_PRIVILEGE};
use crate::pg::{extension, roles};

/// Shard counts `jobs_distribute` accepts.
const MAX_SHARDS: i64 = 4096;

/// Distributes this database's pg_jobs over its Citus cluster: jobs and rate buckets by queue,
/// queues and tenant grants as reference tables, and every call of a queue or job routed to the
/// node holding its shard. Once, on the coordinator, by the extension's owner, before the first
/// job.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_distribute(shard_count: default!(Option<i32>, 32)) -> String {
    let caller = roles::caller();
    if extension::owner() != Some(caller) && !roles::is_superuser(caller) {
        raise_with_hint(
            INSUFFICIENT_PRIVILEGE,
            "only the owner of pg_jobs may distribute it".into(),
            "Call jobs_distribute() as the role that ran CREATE EXTENSION pg_jobs.",
        );
    }
    access::require_current_definitions("distribute pg_jobs");
    access::require_writable("distribute pg_jobs");
    let shard_count = required(shard_count, "shard_count");
    check_range(shard_count.into(), "shard_count", 1, MAX_SHARDS);
    distribute::distribute(shard_count)
}

/// SQL functions in the extension's own schema.
#[pg_schema]
mod jobs {
    use pgrx::prelude::*;

    use crate::engine::distribute;

    /// The trigger `jobs_distribute()` puts on `jobs.job`: gives each new job an id whose text
    /// hashes into its queue's shard, so that Citus routes calls by id to the job.
    #[pg_trigger]
    fn distributed_job_id<'a>(
        trigger: &'a PgTrigger<'a>,
    ) -> Result<Option<PgHeapTuple<'a, impl WhoAllocated>>, PgHeapTupleError> {
        let mut row = trigger
            .new()
            .expect("jobs.distributed_job_id runs BEFORE INSERT FOR EACH ROW")
            .into_owned();
        let queue: String = row
            .get_by_name("queue")
            .ok()
            .flatten()
            .expect("a job has a queue");
        row.set_by_name("id", distribute::job_id_for(&queue))
            .expect("jobs.job has a bigint column id");
        Ok(Some(row))
    }
}
