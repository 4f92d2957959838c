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
//! A prepared transaction (`PREPARE TRANSACTION`) ends later, maybe in another session, which
//! knows nothing of its effects: at the prepare they are stashed in shared memory under the
//! transaction's gid, and `COMMIT PREPARED` / `ROLLBACK PREPARED` apply them in whichever session
//! runs it, once the outcome is visible. When the stash is full, the worker's floor check and
//! its wake-up backstop cover the transaction within a tick.
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
use super::spin::SpinLocked;
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
    /// Whether this transaction held job locks here, so a rollback must reset the floor.
    reset_on_abort: bool,
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
            reset_on_abort: false,
        }
    }

    /// Applies the effects of the transaction's outcome; it is visible to everyone by now.
    fn apply(&self, slot: &Slot, committed: bool) {
        if committed {
            if let Some(lowest) = self.lowest {
                floor::lower(slot, &self.queue, lowest);
            }
            if self.earliest_due != i64::MAX {
                wakeup::lower_next_due(slot, self.earliest_due);
            }
            wakeup::wake(slot, self.wake_on_commit);
        } else {
            if self.reset_on_abort {
                floor::reset(slot, &self.queue);
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
    /// Whether this transaction finished jobs (`jobs_wait` calls wake when it commits).
    static FINISHED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The gid of the PREPARE TRANSACTION this transaction ends with, once the statement ran.
    static PREPARING: RefCell<Option<String>> = const { RefCell::new(None) };
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
        e.reset_on_abort = true;
    });
}

/// Notes that this transaction holds the job lock of a queued job of `queue` (a claim picking
/// it, a cancel, a late holder's settle): claims skip that job meanwhile, so a rollback must
/// reset the floor.
pub fn job_locked(queue: &str) {
    note(queue, |e| e.reset_on_abort = true);
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

/// Installs the callbacks; called from `_PG_init` in every process that loads us.
pub fn register_callbacks() {
    // SAFETY: the callbacks are plain functions that live as long as the library; the utility
    // hook is installed once per process, here.
    unsafe {
        pg_sys::RegisterXactCallback(Some(on_xact_event), std::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(Some(on_subxact_event), std::ptr::null_mut());
        pg_sys::RegisterResourceReleaseCallback(Some(on_resource_release), std::ptr::null_mut());
        version::follow_two_phase_statements(version::TwoPhaseCallbacks {
            before: before_two_phase_statement,
            after: on_two_phase_statement,
        });
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_xact_event(
    event: pg_sys::XactEvent::Type,
    _arg: *mut std::ffi::c_void,
) {
    match event {
        // The transaction is being prepared: its effects apply when it is committed or rolled
        // back, maybe in another session. Take them now, before its resources are released as
        // if it had committed.
        pg_sys::XactEvent::XACT_EVENT_PREPARE => {
            queued_changes::transaction_ended();
            freed_heads::transaction_prepared();
            GRANTS_CHANGED.with(|c| c.set(false));
            QUEUES_CHANGED.with(|c| c.set(false));
            // COMMIT PREPARED wakes the waits whatever the transaction did.
            FINISHED.with(|f| f.set(false));
            let pending = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
            let settled = take_settled();
            let gid = PREPARING.with(|g| g.borrow_mut().take());
            if let (Some(shared), Some(gid)) = (shared(), gid) {
                if !pending.is_empty() || !settled.is_empty() {
                    stash(shared.prepared(), &gid, &pending, &settled);
                }
            }
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
        pg_sys::SubXactEvent::SUBXACT_EVENT_COMMIT_SUB => SETTLED.with(|settled| {
            for pending in settled.borrow_mut().iter_mut() {
                if pending.level >= level {
                    pending.level = level - 1;
                }
            }
        }),
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
    let Some(shared) = shared() else { return };
    for effects in pending {
        effects.apply(shared.slot(effects.slot), commit);
    }
}

/// A subtransaction (a savepoint rolled back to, a PL/pgSQL exception block) was rolled back:
/// jobs a claim or cancel in it held are queued again, below where that claim may have raised
/// the floor, so the floors of the queues this transaction touched are forgotten. The
/// transaction's own outcome is still to come, so its effects stay pending. Which queue the
/// rolled-back part touched is not tracked; resetting a floor it did not move costs the next
/// claim only a scan from the head of its queue.
///
/// Waiters are not woken here: a waiting claim's own empty attempts end this way, and waking
/// would wake the claim itself into a loop. The worker's tick wakes them for the jobs that came
/// back.
fn subtransaction_aborted() {
    freed_heads::subtransaction_aborted();
    let Some(shared) = shared() else { return };
    PENDING.with(|pending| {
        for effects in pending.borrow().iter().filter(|e| e.reset_on_abort) {
            floor::reset(shared.slot(effects.slot), &effects.queue);
        }
    });
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
/// prepare event, and applies a prepared transaction's stashed effects once it ended.
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
            let committed = statement == TwoPhaseStatement::CommitPrepared;
            if committed {
                // Which jobs it finished is not recorded: the waits look again.
                wakeup::wake_finish_waiters();
            }
            let Some(shared) = shared() else { return };
            let Some(stashed) = unstash(shared.prepared(), gid) else {
                return;
            };
            if committed {
                for (key, counts) in &stashed.settled {
                    totals::add(key, *counts);
                }
            }
            match stashed.effects {
                Some(effects) => {
                    for effects in effects {
                        effects.apply(shared.slot(effects.slot), committed);
                    }
                }
                None => {
                    // Its queues were not all recorded: forget this database's floors and wake
                    // everyone, which is always safe.
                    floor::reset_database(shared, current_database());
                    wakeup::wake_everyone();
                }
            }
        }
    }
}

/// Prepared transactions whose effects can be stashed at once.
const STASH_ENTRIES: usize = 64;
/// Queues recorded per prepared transaction; one that touched more is handled as "every queue".
const STASH_QUEUES: usize = 8;
/// Settled keys (queue and tenant) recorded per prepared transaction; the settles of more are
/// counted in the database's overflow entry of the totals.
const STASH_SETTLED: usize = 8;
/// Longest gid (GIDSIZE).
const GID_BYTES: usize = 200;
/// Longest queue name.
const NAME_BYTES: usize = 64;

/// One queue's effects of a prepared transaction, as plain data.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct StashedQueue {
    slot: u32,
    name_len: u8,
    name: [u8; NAME_BYTES],
    wake_on_commit: u32,
    earliest_due: i64,
    has_lowest: bool,
    lowest: Position,
    wake_on_abort: u32,
    reset_on_abort: bool,
}

/// The settles of one key by a prepared transaction, as plain data.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct StashedSettles {
    name_len: u8,
    name: [u8; NAME_BYTES],
    has_tenant: bool,
    tenant: u64,
    counts: Counts,
}

/// The effects of one prepared transaction (plain data in shared memory).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct StashEntry {
    used: bool,
    database: u32,
    gid_len: u8,
    gid: [u8; GID_BYTES],
    count: u8,
    /// More queues than [`STASH_QUEUES`] were touched.
    too_many: bool,
    queues: [StashedQueue; STASH_QUEUES],
    settled_count: u8,
    settled: [StashedSettles; STASH_SETTLED],
}

/// The effects of prepared transactions, in shared memory.
pub type PreparedStash = SpinLocked<[StashEntry; STASH_ENTRIES]>;

/// What the stash held for a gid.
struct Stashed {
    /// The effects on each queue; `None` when more queues were touched than were recorded.
    effects: Option<Vec<QueueEffects>>,
    /// The jobs it settled.
    settled: Vec<(totals::Key, Counts)>,
}

impl StashEntry {
    fn is(&self, database: u32, gid: &str) -> bool {
        self.used
            && self.database == database
            && &self.gid[..self.gid_len as usize] == gid.as_bytes()
    }
}

/// Records `pending` under `gid`; when the stash is full or the gid too long the effects are
/// left to the worker's tick (floor check and wake-up backstop).
fn stash(
    stash: &PreparedStash,
    gid: &str,
    pending: &[QueueEffects],
    settled: &[(totals::Key, Counts)],
) {
    if gid.len() > GID_BYTES {
        return;
    }
    let database = current_database();
    stash.with(|entries| {
        let Some(entry) = entries.iter_mut().find(|e| !e.used) else {
            return;
        };
        entry.used = true;
        entry.database = database;
        entry.gid_len = gid.len() as u8;
        entry.gid[..gid.len()].copy_from_slice(gid.as_bytes());
        entry.too_many = pending.len() > STASH_QUEUES;
        entry.count = pending.len().min(STASH_QUEUES) as u8;
        for (stashed, effects) in entry.queues.iter_mut().zip(pending) {
            let name = effects.queue.as_bytes();
            stashed.slot = effects.slot as u32;
            stashed.name_len = name.len() as u8;
            stashed.name[..name.len()].copy_from_slice(name);
            stashed.wake_on_commit = effects.wake_on_commit;
            stashed.earliest_due = effects.earliest_due;
            stashed.has_lowest = effects.lowest.is_some();
            stashed.lowest = effects.lowest.unwrap_or(Position {
                priority: 0,
                run_at: 0,
                id: 0,
            });
            stashed.wake_on_abort = effects.wake_on_abort;
            stashed.reset_on_abort = effects.reset_on_abort;
        }
        // The last record takes the keys beyond the others, as the overflow key (no name).
        entry.settled_count = settled.len().min(STASH_SETTLED) as u8;
        for (index, (key, counts)) in settled.iter().enumerate() {
            let record = &mut entry.settled[index.min(STASH_SETTLED - 1)];
            if index < STASH_SETTLED - 1 || settled.len() == STASH_SETTLED {
                let name = key.queue.as_bytes();
                let len = name.len().min(NAME_BYTES);
                record.name_len = len as u8;
                record.name[..len].copy_from_slice(&name[..len]);
                record.has_tenant = key.tenant.is_some();
                record.tenant = key.tenant.unwrap_or(0);
                record.counts = *counts;
            } else {
                if index == STASH_SETTLED - 1 {
                    record.name_len = 0;
                    record.has_tenant = false;
                    record.counts = Counts::default();
                }
                record.counts.add(*counts);
            }
        }
    });
}

/// Takes the effects stashed under `gid`, if any.
fn unstash(stash: &PreparedStash, gid: &str) -> Option<Stashed> {
    let database = current_database();
    let entry = stash.with(|entries| {
        let entry = entries.iter_mut().find(|e| e.is(database, gid))?;
        entry.used = false;
        Some(*entry)
    })?;
    let settled = entry.settled[..entry.settled_count as usize]
        .iter()
        .map(|record| {
            let key = totals::Key {
                queue: String::from_utf8_lossy(&record.name[..record.name_len as usize])
                    .into_owned(),
                tenant: record.has_tenant.then_some(record.tenant),
            };
            (key, record.counts)
        })
        .collect();
    if entry.too_many {
        return Some(Stashed {
            effects: None,
            settled,
        });
    }
    let effects = entry.queues[..entry.count as usize]
        .iter()
        .map(|stashed| QueueEffects {
            queue: String::from_utf8_lossy(&stashed.name[..stashed.name_len as usize]).into_owned(),
            slot: stashed.slot as usize,
            wake_on_commit: stashed.wake_on_commit,
            earliest_due: stashed.earliest_due,
            lowest: stashed.has_lowest.then_some(stashed.lowest),
            wake_on_abort: stashed.wake_on_abort,
            reset_on_abort: stashed.reset_on_abort,
        })
        .collect();
    Some(Stashed {
        effects: Some(effects),
        settled,
    })
}
