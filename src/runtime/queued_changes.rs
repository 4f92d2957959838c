//! Commits that make jobs queued, counted as they start and end becoming visible, so that a
//! claim can tell that nothing was queued in a queue since a settle read one of its groups: then
//! the group head the settle handed over (`runtime::freed_heads`) is still the group's waiting
//! head, and the claim need not read the group again.
//!
//! A freed head stops being its group's waiting head only when a job of the group comes before
//! it: one inserted with a lower id (ids are drawn before commit, so commits may come out of
//! order), or one made queued again (a retry, a release, a reclaim, `jobs_retry`), or when the
//! head itself is changed (a unique `replace`, a cleared mark). Every such path reports the
//! jobs it queues (`engine::transitions`), and a transaction that reported any counts itself
//! into its queue's slot twice: `begun` before its commit becomes visible (the pre-commit
//! event), `ended` after (the commit or abort event). A prepared transaction's commit becomes
//! visible in `COMMIT PREPARED`, which counts into one pair for all queues around the
//! statement, wherever it runs.
//!
//! The settle reads a [`Stamp`] of its head's queue before it reads the group. If no counted
//! commit was half-way then (`begun` equal to `ended` in both pairs), every one before is
//! visible to its read; a claim that finds both `begun` unchanged knows no counted commit has
//! started since, so none became visible after the read. Any other answer sends the claim to
//! the group's index. A count that never ends (a backend that died half-way) only makes every
//! later claim of the slot read, until shared memory is made anew.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use super::attached::Attached;
use super::queue_id::{slot_index, SLOTS};

/// The counts, in shared memory. All-zero is the start.
#[repr(C)]
pub struct QueuedChanges {
    begun: [AtomicU64; SLOTS],
    ended: [AtomicU64; SLOTS],
    two_phase_begun: AtomicU64,
    two_phase_ended: AtomicU64,
}

/// What a settle read of a queue's counts before it read a group of the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Stamp {
    /// Whether no counted commit was half-way when it was read (a stamp that is not is never
    /// unchanged).
    quiet: bool,
    begun: u64,
    two_phase_begun: u64,
}

thread_local! {
    /// The slots this transaction counted into at its pre-commit event, to count out of when it
    /// ends.
    static BEGUN: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    /// Whether this session counted a `COMMIT PREPARED` or `ROLLBACK PREPARED` in that has not
    /// ended yet.
    static TWO_PHASE_BEGUN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The counts in shared memory (`shmem` attaches them).
pub(super) static TABLE: Attached<QueuedChanges> = Attached::new();

fn changes() -> Option<&'static QueuedChanges> {
    TABLE.get()
}

/// The counts of `queue`'s slot now, read `ended` before `begun` (so equal counts mean that
/// nothing was half-way at the first read). A default stamp (never unchanged) without shared
/// memory.
pub fn stamp(queue: &str) -> Stamp {
    let Some(changes) = changes() else {
        return Stamp::default();
    };
    let slot = slot_index(queue);
    let ended = changes.ended[slot].load(Ordering::SeqCst);
    let two_phase_ended = changes.two_phase_ended.load(Ordering::SeqCst);
    let begun = changes.begun[slot].load(Ordering::SeqCst);
    let two_phase_begun = changes.two_phase_begun.load(Ordering::SeqCst);
    Stamp {
        quiet: begun == ended && two_phase_begun == two_phase_ended,
        begun,
        two_phase_begun,
    }
}

/// Whether no commit that made jobs of `queue` queued can have become visible since `stamp`
/// was read (see the module's notes).
pub fn unchanged_since(queue: &str, stamp: Stamp) -> bool {
    let Some(changes) = changes() else {
        return false;
    };
    stamp.quiet
        && changes.begun[slot_index(queue)].load(Ordering::SeqCst) == stamp.begun
        && changes.two_phase_begun.load(Ordering::SeqCst) == stamp.two_phase_begun
}

/// Before this transaction's commit becomes visible: it made jobs of `queues` queued.
pub fn commit_begins<'a>(queues: impl Iterator<Item = &'a str>) {
    let Some(changes) = changes() else { return };
    let mut slots: Vec<usize> = queues.map(slot_index).collect();
    slots.sort_unstable();
    slots.dedup();
    for &slot in &slots {
        changes.begun[slot].fetch_add(1, Ordering::SeqCst);
    }
    BEGUN.with(|begun| begun.borrow_mut().extend(slots));
}

/// This transaction ended (committed, visible to everyone, or rolled back): what it counted in
/// at its pre-commit event is counted out.
pub fn transaction_ended() {
    let slots = BEGUN.with(|begun| std::mem::take(&mut *begun.borrow_mut()));
    if let Some(changes) = changes() {
        for slot in slots {
            changes.ended[slot].fetch_add(1, Ordering::SeqCst);
        }
    }
    two_phase_ended();
}

/// Before `COMMIT PREPARED` or `ROLLBACK PREPARED` runs: the prepared transaction may have
/// made jobs of any queue queued.
pub fn two_phase_begins() {
    let Some(changes) = changes() else { return };
    if !TWO_PHASE_BEGUN.with(|begun| begun.replace(true)) {
        changes.two_phase_begun.fetch_add(1, Ordering::SeqCst);
    }
}

/// After `COMMIT PREPARED` or `ROLLBACK PREPARED` (or its failure, when the session's
/// transaction ends).
pub fn two_phase_ended() {
    if !TWO_PHASE_BEGUN.with(|begun| begun.replace(false)) {
        return;
    }
    if let Some(changes) = changes() {
        changes.two_phase_ended.fetch_add(1, Ordering::SeqCst);
    }
}
