//! pg_jobs on a Citus cluster (docs/src/internals/citus.md): `jobs_distribute()`, and running
//! each call on its shard's own tables on the node that holds the shard.
//!
//! Citus routes each call of a queue (or of a job id, whose text hashes into its queue's shard)
//! to the node holding the shard. There the call finds its shard by the same hash, takes Citus's
//! shared lock on the shard's placement (what a shard move takes exclusively before it switches
//! over), checks that the placement is on this node, and runs with the shard's tables current
//! (`storage::shard`): every statement then names `jobs.job_102008` rather than `jobs.job`, and
//! runs as on a single server. The background worker does the same for each shard on its node.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use pgrx::pg_sys::{INT4OID, INT8OID};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::PgSqlErrorCode;

use crate::pg::errors::{quote, raise_with_hint};
use crate::pg::{citus, version};
use crate::storage::shard::{self, Rename, ShardTables};
use crate::storage::{statement, with_client, Statement};

/// A call whose shard is on another node, or a cluster that cannot be distributed (0A000).
pub const NOT_HERE: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED;

static LAYOUT: Statement = statement!(
    distribute/layout()
        -> (job_shard, min_hash, max_hash, rate_shard, queue_shard, grant_shard, local_group,
            colocation)
);

static PLACED: Statement = statement!(distribute/placed(shard: INT8OID, group: INT4OID) -> (here));

static LOCAL_SHARDS: Statement = statement!(distribute/local_shards(group: INT4OID) -> (job_shard));

/// One shard of `jobs.job`: its hash range and the tables its calls run on.
struct Shard {
    /// Its place in hash order (Citus's shard index).
    index: u32,
    min_hash: i32,
    max_hash: i32,
    tables: Rc<ShardTables>,
}

/// The cluster's shards, as this session read them once: shard ids and hash ranges do not
/// change while jobs are distributed (a move keeps both; splits are not supported).
struct Layout {
    /// The oid of `jobs.job` it was read for (a new extension reads it again).
    job_table: pg_sys::Oid,
    /// In hash order.
    shards: Vec<Shard>,
    /// This node's Citus group.
    local_group: i32,
    /// The colocation group of `jobs.job` (for its placement locks).
    colocation: u32,
}

thread_local! {
    static LAYOUT_CACHE: RefCell<Option<Rc<Layout>>> = const { RefCell::new(None) };
    /// Whether each shard's placement was on this node, by shard id, as read under
    /// `pg::citus::invalidations()`'s count then (a newer count empties it).
    static PLACEMENTS: RefCell<(u64, HashMap<i64, bool>)> = RefCell::new((u64::MAX, HashMap::new()));
}

/// The layout, read on first use in the session (or after the extension was created again).
fn layout(client: &SpiClient<'_>) -> Rc<Layout> {
    // SAFETY: a catalog lookup inside a transaction.
    let job_table = unsafe { crate::storage::direct::jobs_relation(c"job") }.unwrap_or_default();
    if let Some(layout) = LAYOUT_CACHE.with(|cache| cache.borrow().clone()) {
        if layout.job_table == job_table {
            return layout;
        }
    }
    let mut local_group = 0;
    let mut colocation = 0;
    let shards = LAYOUT
        .run(client, &[])
        .iter()
        .enumerate()
        .map(|(index, row)| {
            let job_shard: i64 = row.get("job_shard").expect("a shard id");
            let rate_shard: i64 = row.get("rate_shard").expect("a shard id");
            let queue_shard: i64 = row
                .get("queue_shard")
                .expect("jobs.queue is a reference table");
            let grant_shard: i64 = row
                .get("grant_shard")
                .expect("jobs.tenant_grant is a reference table");
            local_group = row.get("local_group").expect("this node's group");
            colocation = row.get::<i32>("colocation").expect("a colocation group") as u32;
            Shard {
                index: index as u32,
                min_hash: row.get("min_hash").expect("a hash range"),
                max_hash: row.get("max_hash").expect("a hash range"),
                tables: Rc::new(ShardTables {
                    key: job_shard,
                    renames: vec![
                        rename("jobs.job", job_shard, false),
                        rename("jobs.rate_bucket", rate_shard, false),
                        rename("jobs.queue", queue_shard, true),
                        rename("jobs.tenant_grant", grant_shard, true),
                    ],
                }),
            }
        })
        .collect();
    let layout = Rc::new(Layout {
        job_table,
        shards,
        local_group,
        colocation,
    });
    LAYOUT_CACHE.with(|cache| *cache.borrow_mut() = Some(layout.clone()));
    layout
}

fn rename(table: &'static str, shard: i64, reference: bool) -> Rename {
    Rename {
        table,
        local: format!("{table}_{shard}"),
        reference,
    }
}

// Not in pgrx's bindings: common/hashfn.h and commands/sequence.h.
unsafe extern "C-unwind" {
    fn hash_bytes(k: *const u8, keylen: i32) -> u32;
    fn nextval_internal(relid: pg_sys::Oid, check_permissions: bool) -> i64;
}

/// PostgreSQL's `hashtext` of `text` (under a deterministic collation, as the queue's "C"):
/// `hash_bytes` of its bytes, which Citus hashes a text distribution value with.
pub fn hash_text(text: &str) -> i32 {
    // SAFETY: hashes the bytes of a live slice; it cannot raise an error.
    unsafe { hash_bytes(text.as_ptr(), text.len() as i32) as i32 }
}

/// The next value of sequence `sequence` (no privilege check: the extension's own).
fn next_value(sequence: pg_sys::Oid) -> i64 {
    // SAFETY: an existing sequence; an ERROR it raises is turned into a Rust panic at the
    // boundary, as pgrx does for its own bindings.
    unsafe { pg_sys::ffi::pg_guard_ffi_boundary(|| nextval_internal(sequence, false)) }
}

impl Layout {
    /// The shard whose hash range holds `hash`.
    fn shard_of(&self, hash: i32) -> &Shard {
        let at = self.shards.partition_point(|shard| shard.min_hash <= hash);
        let shard = &self.shards[at.saturating_sub(1)];
        debug_assert!(shard.min_hash <= hash && hash <= shard.max_hash);
        shard
    }
}

/// Runs `work` on the shard of `queue` (see the module's comment), or as it is outside a
/// distributed database. Raises 0A000 when the shard is on another node.
pub fn on_queue<R>(queue: &str, work: impl FnOnce() -> R) -> R {
    on_hash(hash_text(queue), || format!("queue {}", quote(queue)), work)
}

/// Runs `work` on the shard of job `id` (the shard its id's text hashes into, which is its
/// queue's: [`job_id_for`]), as [`on_queue`] does.
pub fn on_job<R>(id: i64, work: impl FnOnce() -> R) -> R {
    on_hash(hash_text(&id.to_string()), || format!("job {id}"), work)
}

/// Runs `work` on the shard of all of `ids`, which must share one (`jobs_complete_batch`).
pub fn on_jobs<R>(ids: &[i64], work: impl FnOnce() -> R) -> R {
    if !citus::distributed() || ids.is_empty() {
        return work();
    }
    let shards: Vec<i64> = with_client(|client| {
        let layout = layout(client);
        ids.iter()
            .map(|id| layout.shard_of(hash_text(&id.to_string())).tables.key)
            .collect()
    });
    if shards.iter().any(|shard| *shard != shards[0]) {
        raise_with_hint(
            NOT_HERE,
            "on a distributed cluster, one call can settle only jobs of one shard".into(),
            "Settle jobs of different queues in separate calls (jobs_complete, or jobs_complete_batch per queue).",
        );
    }
    on_job(ids[0], work)
}

fn on_hash<R>(hash: i32, what: impl FnOnce() -> String, work: impl FnOnce() -> R) -> R {
    if !citus::distributed() {
        return work();
    }
    let tables = with_client(|client| {
        let layout = layout(client);
        let shard = layout.shard_of(hash);
        if shard::current_key() == shard.tables.key {
            // Already on it (a call within a call, or a tick's shard).
            return Some(shard.tables.clone());
        }
        here(client, &layout, shard).then(|| shard.tables.clone())
    });
    let Some(tables) = tables else {
        raise_with_hint(
            NOT_HERE,
            format!(
                "the shard of {} is not on this node, and Citus did not route this call to it",
                what()
            ),
            "Citus routes a call made as a statement of its own, SELECT jobs_x(...) or SELECT * FROM jobs_x(...), whose first argument is a constant or a parameter: not one inside a query over other rows, nor a PL/pgSQL expression.",
        );
    };
    shard::with_shard(tables, work)
}

/// Whether the placement of `shard` is on this node, checked under the placement's shared
/// lock (taken for the rest of the transaction): the lock Citus's writes take and a shard move
/// takes exclusively before it switches the shard to another node (`LockShardDistributionMetadata`
/// of a hash-distributed table: the colocated shards' lock, advisory class 8). The answer is
/// kept until a relcache invalidation arrives; the ones committed before the lock was granted
/// are taken in right after it, so a move that committed is always seen.
fn here(client: &SpiClient<'_>, layout: &Layout, shard: &Shard) -> bool {
    const COLOCATED_SHARDS_METADATA: u16 = 8;
    let tag = pg_sys::LOCKTAG {
        // SAFETY: MyDatabaseId is fixed for the life of a connected backend.
        locktag_field1: u32::from(unsafe { pg_sys::MyDatabaseId }),
        locktag_field2: shard.index,
        locktag_field3: layout.colocation,
        locktag_field4: COLOCATED_SHARDS_METADATA,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    };
    // SAFETY: a transaction-level lock, waiting as Citus's own writers do; then the
    // invalidations, as LockRelationOid takes them in after its lock.
    unsafe {
        pg_sys::LockAcquire(&tag, pg_sys::ShareLock as pg_sys::LOCKMODE, false, false);
    }
    version::accept_invalidation_messages();
    let generation = citus::invalidations();
    let known = PLACEMENTS.with(|placements| {
        let placements = placements.borrow();
        (placements.0 == generation)
            .then(|| placements.1.get(&shard.tables.key).copied())
            .flatten()
    });
    if let Some(here) = known {
        return here;
    }
    let here = PLACED
        .first::<bool>(
            client,
            &[shard.tables.key.into(), layout.local_group.into()],
            "here",
        )
        .unwrap_or(false);
    PLACEMENTS.with(|placements| {
        let mut placements = placements.borrow_mut();
        if placements.0 != generation {
            *placements = (generation, HashMap::new());
        }
        placements.1.insert(shard.tables.key, here);
    });
    here
}

/// Runs `work` once on each shard of `jobs.job` placed on this node, each under its placement
/// lock (the background worker's tick, `jobs_reclaim`); `None` outside a distributed database.
pub fn on_each_local_shard(mut work: impl FnMut()) -> Option<usize> {
    if !citus::distributed() {
        return None;
    }
    let (layout, placed) = with_client(|client| {
        let layout = layout(client);
        let placed: Vec<i64> = LOCAL_SHARDS
            .run(client, &[layout.local_group.into()])
            .iter()
            .filter_map(|row| row.get("job_shard"))
            .collect();
        (layout, placed)
    });
    let mut ran = 0;
    for shard in layout
        .shards
        .iter()
        .filter(|shard| placed.contains(&shard.tables.key))
    {
        // A shard moved away since the list was read is no longer ours.
        if with_client(|client| here(client, &layout, shard)) {
            shard::with_shard(shard.tables.clone(), &mut work);
            ran += 1;
        }
    }
    Some(ran)
}

/// The shards of `jobs.job` placed on this node, by key, for work that runs each in
/// transactions of its own ([`on_local_shard`] in each); `None` outside a distributed database.
/// Inside a transaction.
pub fn local_shard_keys() -> Option<Vec<i64>> {
    if !citus::distributed() {
        return None;
    }
    Some(with_client(|client| {
        let layout = layout(client);
        LOCAL_SHARDS
            .run(client, &[layout.local_group.into()])
            .iter()
            .filter_map(|row| row.get("job_shard"))
            .collect()
    }))
}

/// Runs `work` on shard `key` of `jobs.job` under its placement lock (for the rest of the
/// caller's transaction), as [`on_each_local_shard`] does for each; `None` when the shard is
/// not on this node (any more: it moved since the list was read).
pub fn on_local_shard<R>(key: i64, work: impl FnOnce() -> R) -> Option<R> {
    let tables = with_client(|client| {
        let layout = layout(client);
        let shard = layout.shards.iter().find(|shard| shard.tables.key == key)?;
        here(client, &layout, shard).then(|| shard.tables.clone())
    })?;
    Some(shard::with_shard(tables, work))
}

/// Whether this node is the coordinator (Citus group 0) of a distributed database.
pub fn on_coordinator() -> bool {
    citus::distributed() && with_client(|client| layout(client).local_group == 0)
}

/// A new id for a job of `queue` in a distributed database (the trigger on `jobs.job`): one
/// whose text hashes into the queue's shard, so that Citus routes calls by id to it. It is
/// `(group << 40 | n) << 8 | k`, with `n` from this node's sequence of `jobs.job` (unique per
/// node, 2^40 of them), `group` this node's Citus group (so nodes never collide), and `k` the first of 0-255
/// that lands in the shard; when none does, it takes the next `n`.
pub fn job_id_for(queue: &str) -> i64 {
    let (sequence, shard_range, group) = with_client(|client| {
        let layout = layout(client);
        let shard = layout.shard_of(hash_text(queue));
        // SAFETY: catalog lookups inside a transaction.
        let sequence = unsafe {
            let namespace = pg_sys::get_namespace_oid(c"jobs".as_ptr(), false);
            pg_sys::get_relname_relid(c"job_id_seq".as_ptr(), namespace)
        };
        (
            sequence,
            (shard.min_hash, shard.max_hash),
            i64::from(layout.local_group),
        )
    });
    if !(0..1 << 15).contains(&group) {
        raise_with_hint(
            NOT_HERE,
            format!("pg_jobs cannot make job ids on a node of Citus group {group}"),
            "Job ids hold the node's group in 15 bits: re-add the node so that it gets a group below 32768.",
        );
    }
    loop {
        // Citus may have moved a node's sequence into a range of its own (group << 48): the
        // low 40 bits still count up from where this node began.
        let n = next_value(sequence) & ((1 << 40) - 1);
        for k in 0..256 {
            let id = ((group << 40 | n) << 8) | k;
            let hash = hash_text(&id.to_string());
            if shard_range.0 <= hash && hash <= shard_range.1 {
                return id;
            }
        }
    }
}

static CITUS_INSTALLED: Statement = statement!(distribute/citus_installed() -> (installed));

static STATE: Statement = statement!(distribute/state() -> (local_group, distributed, has_jobs));

/// The statements `jobs_distribute()` runs, `SHARD_COUNT` to be filled in.
const DISTRIBUTE: &str = include_str!("distribute.sql");

/// `jobs_distribute(shard_count)`: distributes this database's pg_jobs over its Citus cluster,
/// in the caller's transaction. Returns a line saying what it did.
pub fn distribute(shard_count: i32) -> String {
    with_client(|client| {
        if !CITUS_INSTALLED
            .first::<bool>(client, &[], "installed")
            .unwrap_or(false)
        {
            raise_with_hint(
                NOT_HERE,
                "jobs_distribute needs Citus, which is not installed in this database".into(),
                "Add citus to shared_preload_libraries (before pg_jobs) on every node, CREATE EXTENSION citus, add the worker nodes, then call jobs_distribute() on the coordinator.",
            );
        }
        let rows = STATE.run(client, &[]);
        let state = rows.first().expect("distribute/state returns one row");
        if state.get::<bool>("distributed").unwrap_or(false) {
            raise_with_hint(
                NOT_HERE,
                "pg_jobs is distributed already in this database".into(),
                "Nothing to do: jobs_distribute() runs once.",
            );
        }
        if state.get::<i32>("local_group") != Some(0) {
            raise_with_hint(
                NOT_HERE,
                "jobs_distribute must run on the Citus coordinator".into(),
                "Connect to the coordinator and call it there.",
            );
        }
        if state.get::<bool>("has_jobs").unwrap_or(false) {
            raise_with_hint(
                NOT_HERE,
                "jobs_distribute needs an empty jobs.job: the ids of jobs made before would not route to their shards".into(),
                "Distribute before the first job is enqueued, or wait until the jobs are finished and purged (or drop their queues).",
            );
        }
    });
    let sql = DISTRIBUTE.replace("SHARD_COUNT", &shard_count.to_string());
    Spi::run(&sql).unwrap_or_else(|error| panic!("jobs_distribute failed: {error}"));
    LAYOUT_CACHE.with(|cache| *cache.borrow_mut() = None);
    format!("pg_jobs is distributed over {shard_count} shards")
}
