//! The effects a transaction has on shared memory when it ends (Rule 9: nothing of a
//! transaction reaches other sessions before it commits).
//!
//! A transaction that makes jobs claimable notes the queue (through `engine::transitions`);
//! when it commits, the queue's claim floor is lowered to those jobs and as many waiting claims
//! are signalled as jobs became claimable, so a commit of one job does not stampede a hundred
//! waiters. The signals go out after the transaction has released its locks (a waiter woken
//! while the job locks of a finishing claim were still held would skip those jobs), from a
//! resource-release callback. Nothing is signalled on rollback, except for transactions that
//! held job locks: a rolled-back claim puts its jobs back, so it wakes waiters and resets the
//! floor. A delayed job lowers its slot's next due time, which waiting claims use to time their
//! sleep.
//!
//! A prepared transaction (`PREPARE TRANSACTION`) ends later, maybe in another session and
//! after a server restart that empties shared memory, so nothing of it may live only here. Just
//! before it is prepared it turns what it would have handed over in shared memory into rows of
//! its own (the engine's [`TwoPhaseStore`]): the freed heads it offered get their marks cleared
//! in their rows, and its effects (the queues it made jobs claimable in, the jobs it settled) are
//! recorded in `jobs.prepared_effects` under its gid. `COMMIT PREPARED`, in whichever session
//! and whenever it runs, takes that record once the commit is visible and applies it: floors
//! lowered, waiting claims woken, totals counted. `ROLLBACK PREPARED` rolls the record back with
//! the rest; a rolled-back claim's jobs are queued again, so it forgets the database's floors
//! and wakes every waiting claim.
//!
//! The jobs a transaction settles are added to the totals (`runtime::totals`) when it commits,
//! and only the settles of its subtransactions that committed too: a settle inside a savepoint
//! that is rolled back counts nothing.

use std::cell::RefCell;

use pgrx::pg_sys;
use pgrx::prelude::*;

use super::floor;
use super::freed_heads;
use super::position::Position;
use super::queue_id::{current_database, slot_index};
use super::queued_changes;
use super::shmem::{shared, Slot};
use super::totals::{self, Counts};
use super::wakeup::{self, WAKE_ALL};
use crate::pg::clock::server_now;
use crate::pg::version::{self, TwoPhaseStatement};

/// What this transaction does to one queue's shared state when it ends.
#[derive(Clone)]
struct QueueEffects {
    queue: String,
    slot: usize,
    /// Waiters to wake on commit: one per job that became claimable.
    wake_on_commit: u32,
    /// The earliest run_at of a delayed job that became queued (i64::MAX: none).
    earliest_due: i64,
    /// The lowest position of a job that became queued, for the floor.
    lowest: Option<Position>,
    /// Jobs this transaction claimed, which a rollback hands back.
    wake_on_abort: u32,
    /// The subtransaction nesting levels (bit n: level n, the last bit standing for every
    /// deeper one) at which this transaction held job locks here or claimed jobs, so that
    /// rolling back any of them must reset the floor: a rolled-back claim puts its jobs back.
    /// A rolled-back part that did neither (a waiting claim's empty attempt) leaves the floor.
    reset_levels: u64,
}

impl QueueEffects {
    fn new(queue: &str) -> QueueEffects {
        QueueEffects {
            queue: queue.to_owned(),
            slot: slot_index(queue),
            wake_on_commit: 0,
            earliest_due: i64::MAX,
            lowest: None,
            wake_on_abort: 0,
            reset_levels: 0,
        }
    }

    /// Applies the effects of the transaction's outcome; it is visible to everyone by now.
    fn apply(&self, slot: &Slot, committed: bool) {
        if committed {
            if let Some(lowest) = self.lowest {
                floor::lower(slot.floor(), &self.queue, lowest);
            }
            if self.earliest_due != i64::MAX {
                wakeup::lower_next_due(slot, self.earliest_due);
            }
            wakeup::wake(slot, self.wake_on_commit);
        } else {
            if self.reset_levels != 0 {
                floor::reset(slot.floor(), &self.queue);
            }
            wakeup::wake(slot, self.wake_on_abort);
        }
    }
}

/// Settles of this transaction not counted yet: one key's counts, made at one subtransaction
/// nesting level.
struct PendingSettles {
    level: i32,
    key: totals::Key,
    counts: Counts,
}

thread_local! {
    static PENDING: RefCell<Vec<QueueEffects>> = const { RefCell::new(Vec::new()) };
    static SETTLED: RefCell<Vec<PendingSettles>> = const { RefCell::new(Vec::new()) };
    /// Whether this transaction changed tenant grants.
    static GRANTS_CHANGED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Whether this transaction changed queue settings.
    static QUEUES_CHANGED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Whether this transaction drops the extension.
    static EXTENSION_DROPPED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Whether this transaction finished jobs (`jobs_wait` calls wake when it commits).
    static FINISHED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The gid of the PREPARE TRANSACTION this transaction ends with, once the statement ran.
    static PREPARING: RefCell<Option<String>> = const { RefCell::new(None) };

}

/// The current subtransaction nesting level (1: the top level).
fn nest_level() -> i32 {
    // SAFETY: reads the current transaction state's nesting level.
    unsafe { pg_sys::GetCurrentTransactionNestLevel() }
}

/// The bit of nesting level `level` in a set of levels (levels past 63 share the last bit).
fn level_bit(level: i32) -> u64 {
    1u64 << level.clamp(0, 63)
}

/// Runs `change` on this transaction's pending effects for `queue` (nothing without shared
/// memory).
fn note(queue: &str, change: impl FnOnce(&mut QueueEffects)) {
    if shared().is_none() {
        return;
    }
    PENDING.with(|pending| {
        let mut pending = pending.borrow_mut();
        let index = match pending.iter().position(|e| e.queue == queue) {
            Some(index) => index,
            None => {
                pending.push(QueueEffects::new(queue));
                pending.len() - 1
            }
        };
        change(&mut pending[index]);
    });
}

/// Notes that `count` jobs of `queue` become queued when this transaction commits, the first
/// of them (in claim order) at `first`.
pub fn jobs_queued(queue: &str, count: u32, first: Position) {
    if count == 0 {
        return;
    }
    let now = server_now();
    note(queue, |e| {
        e.lowest = Some(e.lowest.map_or(first, |lowest| lowest.min(first)));
        if first.run_at <= now {
            e.wake_on_commit = e.wake_on_commit.saturating_add(count);
        } else {
            e.earliest_due = e.earliest_due.min(first.run_at);
        }
    });
}

/// The lowest position of a job of `queue` this transaction made queued: it lowers the queue's
/// floor only when the transaction commits, but the transaction's own claims see the job now.
pub fn pending_lowest(queue: &str) -> Option<Position> {
    PENDING.with(|pending| {
        pending
            .borrow()
            .iter()
            .find(|e| e.queue == queue)
            .and_then(|e| e.lowest)
    })
}

/// Notes that `count` queued jobs of `queue` become claimable without moving in claim order
/// when this transaction commits (a group's slot was freed, so its next job may run).
pub fn jobs_unblocked(queue: &str, count: u32) {
    note(queue, |e| {
        e.wake_on_commit = e.wake_on_commit.saturating_add(count)
    });
}

/// Notes that this transaction settled jobs of `key`: the totals count them when it commits.
pub fn jobs_settled(key: totals::Key, counts: Counts) {
    if shared().is_none() || counts.is_empty() {
        return;
    }
    // SAFETY: reads the current transaction state's nesting level.
    let level = unsafe { pg_sys::GetCurrentTransactionNestLevel() };
    SETTLED.with(|settled| {
        let mut settled = settled.borrow_mut();
        match settled
            .iter_mut()
            .find(|s| s.level == level && s.key == key)
        {
            Some(pending) => pending.counts.add(counts),
            None => settled.push(PendingSettles { level, key, counts }),
        }
    });
}

/// This transaction's uncounted settles, summed per key, taken for its end.
fn take_settled() -> Vec<(totals::Key, Counts)> {
    let settled = SETTLED.with(|s| std::mem::take(&mut *s.borrow_mut()));
    let mut by_key: Vec<(totals::Key, Counts)> = Vec::new();
    for pending in settled {
        match by_key.iter_mut().find(|(key, _)| *key == pending.key) {
            Some((_, counts)) => counts.add(pending.counts),
            None => by_key.push((pending.key, pending.counts)),
        }
    }
    by_key
}

/// Notes that a resume makes every queued job of `queue` claimable again.
pub fn queue_resumed(queue: &str) {
    note(queue, |e| e.wake_on_commit = WAKE_ALL);
}

/// Notes that this transaction claimed `count` jobs of `queue`, which a rollback gives back.
pub fn jobs_claimed(queue: &str, count: u32) {
    note(queue, |e| {
        e.wake_on_abort = e.wake_on_abort.saturating_add(count);
        e.reset_levels |= level_bit(nest_level());
    });
}

/// Notes that this transaction holds the job lock of a queued job of `queue` (a claim picking
/// it, a cancel, a late holder's settle): claims skip that job meanwhile, so a rollback must
/// reset the floor.
pub fn job_locked(queue: &str) {
    note(queue, |e| e.reset_levels |= level_bit(nest_level()));
}

/// Notes that this transaction finished jobs: when it commits, the `jobs_wait` calls asleep
/// look again. Whether any sleeps is asked then, after the commit is visible, so a call that
/// starts to sleep meanwhile has already seen the jobs finished.
pub fn jobs_finished() {
    if shared().is_some() {
        FINISHED.with(|f| f.set(true));
    }
}

/// Notes that this transaction changed tenant grants: when it commits, every session drops the
/// grants it cached.
pub fn tenant_grants_changed() {
    GRANTS_CHANGED.with(|c| c.set(true));
}

/// Notes that this transaction changed queue settings: when it commits, every session drops
/// the settings it cached.
pub fn queue_settings_changed() {
    QUEUES_CHANGED.with(|c| c.set(true));
}

/// Whether this transaction changed queue settings (its changes reach the other sessions'
/// caches only when it commits, so its own reads must not go through them).
pub fn queue_settings_changed_here() -> bool {
    QUEUES_CHANGED.with(|c| c.get())
}

/// Tells every session that queue settings may have changed.
fn bump_queue_settings() {
    if let Some(shared) = shared() {
        shared
            .queue_settings()
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Tells every session that tenant grants may have changed.
fn bump_tenant_grants() {
    if let Some(shared) = shared() {
        shared
            .tenant_grants()
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// What the engine keeps in tables for a prepared transaction, so that its end applies its
/// effects whenever and wherever it comes (see the module's notes). Each runs as the
/// extension's owner, and does nothing where pg_jobs is not installed (or not this version).
#[derive(Clone, Copy)]
pub struct TwoPhaseStore {
    /// Before the prepare: clears the marks of the freed heads with these job ids, in the
    /// transaction being prepared (noting their queues as jobs made claimable).
    pub clear_marks: fn(Vec<i64>),
    /// Before the prepare: records `record` (JSON) under `gid` in the transaction.
    pub save: fn(gid: &str, record: &str),
    /// After `COMMIT PREPARED`: takes (deletes and returns) the record saved under `gid`.
    pub take: fn(gid: &str) -> Option<String>,
}

/// The engine's durable side of two-phase commit, once registered.
static STORE: std::sync::OnceLock<TwoPhaseStore> = std::sync::OnceLock::new();

/// Installs the callbacks, with the engine's durable side of two-phase commit; called from
/// `_PG_init` in every process that loads us.
pub fn register_callbacks(store: TwoPhaseStore) {
    let _ = STORE.set(store);
    // SAFETY: the callbacks are plain functions that live as long as the library; the utility
    // hook is installed once per process, here.
    unsafe {
        pg_sys::RegisterXactCallback(Some(on_xact_event), std::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(Some(on_subxact_event), std::ptr::null_mut());
        pg_sys::RegisterResourceReleaseCallback(Some(on_resource_release), std::ptr::null_mut());
        version::follow_utility_statements(version::UtilityCallbacks {
            before: before_two_phase_statement,
            after: on_two_phase_statement,
            dropping_extension: extension_dropping,
        });
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_xact_event(
    event: pg_sys::XactEvent::Type,
    _arg: *mut std::ffi::c_void,
) {
    match event {
        // About to be prepared, and still able to write: what it would hand over in shared
        // memory goes into its own rows instead (see the module's notes).
        pg_sys::XactEvent::XACT_EVENT_PRE_PREPARE => record_for_prepare(),
        // Prepared: its effects apply when it is committed or rolled back, from the record.
        // Drop them here, before its resources are released as if it had committed.
        pg_sys::XactEvent::XACT_EVENT_PREPARE => {
            queued_changes::transaction_ended();
            freed_heads::transaction_prepared();
            GRANTS_CHANGED.with(|c| c.set(false));
            QUEUES_CHANGED.with(|c| c.set(false));
            EXTENSION_DROPPED.with(|c| c.set(false));
            FINISHED.with(|f| f.set(false));
            PENDING.with(|p| p.borrow_mut().clear());
            SETTLED.with(|s| s.borrow_mut().clear());
            PREPARING.with(|g| g.borrow_mut().take());
        }
        // Visible to everyone now, and still holding its locks: sessions learn of its changes
        // to queues and grants before anyone waiting for those locks goes on (an enqueue that
        // waited for a drop's queue lock must not use the dropped queue's kept row).
        pg_sys::XactEvent::XACT_EVENT_COMMIT => {
            queued_changes::transaction_ended();
            PREPARING.with(|g| g.borrow_mut().take());
            if GRANTS_CHANGED.with(|c| c.replace(false)) {
                bump_tenant_grants();
            }
            if QUEUES_CHANGED.with(|c| c.replace(false)) {
                bump_queue_settings();
            }
        }
        pg_sys::XactEvent::XACT_EVENT_ABORT => {
            queued_changes::transaction_ended();
            PREPARING.with(|g| g.borrow_mut().take());
        }
        // Not visible yet: claims that find the count begun read the groups they take heads of.
        pg_sys::XactEvent::XACT_EVENT_PRE_COMMIT => PENDING.with(|pending| {
            let pending = pending.borrow();
            queued_changes::commit_begins(
                pending
                    .iter()
                    .filter(|e| e.lowest.is_some())
                    .map(|e| e.queue.as_str()),
            );
        }),
        _ => {}
    }
}

/// Keeps the settles of a subtransaction that committed (they are its parent's now) and drops
/// those of one that was rolled back. Both events come while the subtransaction is current.
#[pg_guard]
unsafe extern "C-unwind" fn on_subxact_event(
    event: pg_sys::SubXactEvent::Type,
    _subtransaction: pg_sys::SubTransactionId,
    _parent: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    // SAFETY: reads the current transaction state's nesting level.
    let level = unsafe { pg_sys::GetCurrentTransactionNestLevel() };
    match event {
        pg_sys::SubXactEvent::SUBXACT_EVENT_COMMIT_SUB => {
            SETTLED.with(|settled| {
                for pending in settled.borrow_mut().iter_mut() {
                    if pending.level >= level {
                        pending.level = level - 1;
                    }
                }
            });
            // What it noted is its parent's now.
            let committed = !(level_bit(level) - 1) | level_bit(level);
            PENDING.with(|pending| {
                for effects in pending.borrow_mut().iter_mut() {
                    if effects.reset_levels & committed != 0 {
                        effects.reset_levels =
                            (effects.reset_levels & !committed) | level_bit(level - 1);
                    }
                }
            });
        }
        pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB => {
            SETTLED.with(|settled| settled.borrow_mut().retain(|s| s.level < level))
        }
        _ => {}
    }
}

/// Fires the transaction's wake-ups once its locks are gone; it is visible to everyone by then.
#[pg_guard]
unsafe extern "C-unwind" fn on_resource_release(
    phase: pg_sys::ResourceReleasePhase::Type,
    commit: bool,
    top_level: bool,
    _arg: *mut std::ffi::c_void,
) {
    if phase != pg_sys::ResourceReleasePhase::RESOURCE_RELEASE_AFTER_LOCKS {
        return;
    }
    if !top_level {
        if !commit {
            subtransaction_aborted();
        }
        return;
    }
    // Before the wake-ups: a claim woken for a freed head must find it.
    freed_heads::transaction_ended(commit);
    let pending = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
    let settled = take_settled();
    if commit {
        for (key, counts) in &settled {
            totals::add(key, *counts);
        }
    }
    if FINISHED.with(|f| f.replace(false)) && commit {
        wakeup::wake_finish_waiters();
    }
    // A commit bumped them at its commit event; a rollback changed nothing.
    GRANTS_CHANGED.with(|c| c.set(false));
    QUEUES_CHANGED.with(|c| c.set(false));
    if EXTENSION_DROPPED.with(|c| c.replace(false)) && commit {
        // Waiting claims of this database would sleep on to the end of their wait and then
        // find no tables: woken now, they see the extension gone and say so.
        wakeup::wake_everyone();
    }
    let Some(shared) = shared() else { return };
    for effects in pending {
        effects.apply(shared.slot(effects.slot), commit);
    }
}

/// A subtransaction (a savepoint rolled back to, a PL/pgSQL exception block, a waiting claim's
/// attempt) was rolled back: jobs a claim or cancel in it held are queued again, below where
/// that claim may have raised the floor, so the floors of the queues it (or a deeper one) took
/// or locked jobs of are forgotten. A rolled-back part that took nothing, as a waiting claim's
/// empty attempt, leaves the floor where it is: resetting it there made every claim after a
/// busy queue's contended wake-ups walk from the head of the queue, over every dead index
/// entry an old snapshot keeps. The transaction's own outcome is still to come, so its
/// effects stay pending.
///
/// Waiters are not woken here: a waiting claim's own empty attempts end this way, and waking
/// would wake the claim itself into a loop. The worker's tick wakes them for the jobs that came
/// back.
fn subtransaction_aborted() {
    freed_heads::subtransaction_aborted();
    let level = nest_level();
    // The levels rolled back: this one and every deeper one.
    let rolled_back = !(level_bit(level) - 1) | level_bit(level);
    PENDING.with(|pending| {
        for effects in pending.borrow_mut().iter_mut() {
            if effects.reset_levels & rolled_back != 0 {
                if let Some(shared) = shared() {
                    floor::reset(shared.slot(effects.slot).floor(), &effects.queue);
                }
            }
            effects.reset_levels &= !rolled_back;
        }
    });
}

/// Before `DROP EXTENSION pg_jobs`: its commit wakes the waiting claims.
fn extension_dropping() {
    EXTENSION_DROPPED.with(|c| c.set(true));
}

/// Before `COMMIT PREPARED` or `ROLLBACK PREPARED`: the prepared transaction may have changed
/// queues or grants (which is not recorded), and it lets go of its locks before the statement
/// ends, so every session drops what it cached now, and again when it ended
/// ([`on_two_phase_statement`]: a session may have cached a row in between, from a snapshot
/// taken before the commit).
fn before_two_phase_statement(statement: TwoPhaseStatement, _gid: &str) {
    if statement != TwoPhaseStatement::Prepare {
        queued_changes::two_phase_begins();
        bump_tenant_grants();
        bump_queue_settings();
    }
}

/// Follows the two-phase statements of this session: remembers the gid of a PREPARE for the
/// prepare events, and applies a prepared transaction's recorded effects once it ended.
fn on_two_phase_statement(statement: TwoPhaseStatement, gid: &str) {
    match statement {
        TwoPhaseStatement::Prepare => {
            PREPARING.with(|g| *g.borrow_mut() = Some(gid.to_owned()));
        }
        TwoPhaseStatement::CommitPrepared | TwoPhaseStatement::RollbackPrepared => {
            // Visible to everyone now.
            queued_changes::two_phase_ended();
            // A prepared transaction may have changed tenant grants; which ones is not
            // recorded, and dropping the sessions' caches is cheap.
            bump_tenant_grants();
            bump_queue_settings();
            if statement == TwoPhaseStatement::RollbackPrepared {
                // A claim it made put its jobs back (below where the claim raised the floor,
                // and maybe after waiting claims slept); which queues is not recorded.
                if let Some(shared) = shared() {
                    floor::reset_database(shared.floor_cells(), current_database());
                    wakeup::wake_everyone();
                }
                return;
            }
            let Some(store) = STORE.get() else {
                return;
            };
            let Some(record) = (store.take)(gid).and_then(|r| PreparedRecord::parse(&r)) else {
                return;
            };
            for (key, counts) in record.settled() {
                totals::add(&key, counts);
            }
            if record.finished {
                wakeup::wake_finish_waiters();
            }
            if let Some(shared) = shared() {
                for effects in record.queue_effects() {
                    effects.apply(shared.slot(effects.slot), true);
                }
            }
        }
    }
}

/// Just before `PREPARE TRANSACTION` takes effect: clears the marks of the freed heads this
/// transaction offered (in its own rows), then records its effects under its gid, both through
/// the engine's store and in the transaction being prepared.
fn record_for_prepare() {
    let Some(gid) = PREPARING.with(|g| g.borrow().clone()) else {
        return;
    };
    let Some(store) = STORE.get() else {
        return;
    };
    let offered = freed_heads::withdraw_offers_here();
    if !offered.is_empty() {
        (store.clear_marks)(offered);
    }
    let mut record = PENDING.with(|pending| {
        SETTLED.with(|settled| PreparedRecord::of(&pending.borrow(), &settled.borrow()))
    });
    record.finished = FINISHED.with(std::cell::Cell::get);
    if !record.is_empty() {
        (store.save)(&gid, &record.to_json());
    }
}

/// What a prepared transaction's commit does to shared memory, as recorded in
/// `jobs.prepared_effects`: per queue, the waiters to wake, the earliest delayed job and the
/// lowest position it made queued; per queue and tenant, the jobs it settled. Tenants are kept
/// as the hash the totals use, in text (JSON numbers lose the high bits of a 64-bit integer).
#[derive(serde::Serialize, serde::Deserialize, Default)]
struct PreparedRecord {
    queues: Vec<RecordedQueue>,
    settled: Vec<RecordedSettles>,
    /// Whether it finished jobs: `jobs_wait` calls wake when it commits.
    #[serde(default)]
    finished: bool,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct RecordedQueue {
    queue: String,
    wake: u32,
    due: Option<i64>,
    lowest: Option<(i16, i64, i64)>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct RecordedSettles {
    queue: String,
    tenant: Option<String>,
    counts: Counts,
}

impl PreparedRecord {
    /// The record of a transaction's pending effects (what a commit would apply) and settles.
    fn of(pending: &[QueueEffects], settled: &[PendingSettles]) -> PreparedRecord {
        let queues = pending
            .iter()
            .filter(|e| e.wake_on_commit > 0 || e.earliest_due != i64::MAX || e.lowest.is_some())
            .map(|e| RecordedQueue {
                queue: e.queue.clone(),
                wake: e.wake_on_commit,
                due: (e.earliest_due != i64::MAX).then_some(e.earliest_due),
                lowest: e.lowest.map(|p| (p.priority, p.run_at, p.id)),
            })
            .collect();
        let mut by_key: Vec<(totals::Key, Counts)> = Vec::new();
        for pending in settled {
            match by_key.iter_mut().find(|(key, _)| *key == pending.key) {
                Some((_, counts)) => counts.add(pending.counts),
                None => by_key.push((pending.key.clone(), pending.counts)),
            }
        }
        let settled = by_key
            .into_iter()
            .map(|(key, counts)| RecordedSettles {
                queue: key.queue,
                tenant: key.tenant.map(|hash| hash.to_string()),
                counts,
            })
            .collect();
        PreparedRecord {
            queues,
            settled,
            finished: false,
        }
    }

    fn is_empty(&self) -> bool {
        self.queues.is_empty() && self.settled.is_empty() && !self.finished
    }

    fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a record of plain values serialises")
    }

    /// The record `json` holds; `None` (nothing applied) for anything else.
    fn parse(json: &str) -> Option<PreparedRecord> {
        serde_json::from_str(json).ok()
    }

    /// The queue effects a commit applies.
    fn queue_effects(&self) -> Vec<QueueEffects> {
        self.queues
            .iter()
            .map(|q| QueueEffects {
                wake_on_commit: q.wake,
                earliest_due: q.due.unwrap_or(i64::MAX),
                lowest: q.lowest.map(|(priority, run_at, id)| Position {
                    priority,
                    run_at,
                    id,
                }),
                ..QueueEffects::new(&q.queue)
            })
            .collect()
    }

    /// The settles a commit counts.
    fn settled(&self) -> Vec<(totals::Key, Counts)> {
        self.settled
            .iter()
            .map(|s| {
                let key = totals::Key {
                    queue: s.queue.clone(),
                    tenant: s.tenant.as_deref().and_then(|t| t.parse().ok()),
                };
                (key, s.counts)
            })
            .collect()
    }
}
