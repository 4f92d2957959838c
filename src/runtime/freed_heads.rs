//! Freed heads of groups: the waiting jobs (`group_wait`) that a settle found at the head of a
//! group of concurrency 1 with nothing of the group running, handed to the next claim of their
//! queue in shared memory instead of written back into the claim indexes.
//!
//! Clearing a head's mark was a row update of its own (a new heap version and an entry in each
//! of four indexes) for nearly every grouped job, which its claim then updated again; a claim
//! that takes a freed head clears the mark in the update that takes it. A freed head is only a
//! hint: the claim that takes one checks, under the group's lock and the latest snapshot, that
//! the job is still its group's waiting head (`engine::claim`; unless no commit that queued jobs
//! of the queue can have become visible since the settle read the group: the entry's stamp,
//! `runtime::queued_changes`), and one that is not is dropped,
//! which is safe for the reason a mark is (whatever comes before the job in its group moves the
//! group on when it ends). What must never happen is that a valid one is lost while its job
//! stays marked, so:
//! * an entry is offered by the settle's transaction and becomes available only when it
//!   commits, after its locks are gone (before waiting claims are woken); a rollback drops it;
//! * a claim holds the entries it takes until it ends: a commit drops them (it took their jobs,
//!   found them no longer waiting heads, or cleared their marks), a rollback (of the
//!   transaction, or of any of its subtransactions) or a prepare makes them available again;
//! * when the table is full, or a name does not fit, the settle clears the mark as before;
//! * shared memory starts empty (a server start, a crash restart) while marks on disk may have
//!   had entries: no entry is offered in a database until a claim there has cleared the marks
//!   of every waiting head with nothing before it and committed ([`sweep_needed`]).

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU32, Ordering};

use pgrx::pg_sys;

use super::attached::Attached;
use super::position::Position;
use super::queue_id::{current_database, slot_index, SLOTS};
use super::queued_changes::Stamp;
use super::spin::SpinLocked;

/// Freed heads held at once, in every database.
pub const ENTRIES: usize = 4096;
/// Longest name (queue, group key, tenant, kind) an entry holds; a head with a longer one has
/// its mark cleared instead.
const TEXT_BYTES: usize = 63;
/// Databases that can be recorded swept.
const DATABASES: usize = 64;
/// A link's value for "no entry" (links are an entry's index plus one).
const NO_ENTRY: u32 = 0;
/// Most freed heads one call of [`take_all`] takes.
const TAKE_ALL_AT_ONCE: usize = 256;

/// A name of up to [`TEXT_BYTES`] bytes, or NULL.
#[repr(C)]
#[derive(Clone, Copy)]
struct ShortText {
    /// Its length; `u8::MAX` for NULL.
    len: u8,
    bytes: [u8; TEXT_BYTES],
}

impl ShortText {
    /// `text` as a short text, if it fits.
    fn new(text: Option<&str>) -> Option<ShortText> {
        let mut short = ShortText {
            len: u8::MAX,
            bytes: [0; TEXT_BYTES],
        };
        if let Some(text) = text {
            if text.len() > TEXT_BYTES {
                return None;
            }
            short.len = text.len() as u8;
            short.bytes[..text.len()].copy_from_slice(text.as_bytes());
        }
        Some(short)
    }

    /// The text, `None` for NULL (the bytes were copied from a `&str`).
    fn get(&self) -> Option<&str> {
        if self.len == u8::MAX {
            return None;
        }
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).ok()
    }
}

/// Who may use an entry.
#[repr(u8)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Use {
    /// Free for reuse (not linked).
    Free = 0,
    /// Offered by a transaction that has not committed yet (`holder`'s).
    Offered,
    /// Any claim of its queue may take it.
    Available,
    /// Taken by a claim that has not ended yet (`holder`'s).
    Taken,
}

/// One freed head.
#[repr(C)]
#[derive(Clone, Copy)]
struct Entry {
    next: u32,
    prev: u32,
    usage: Use,
    holder: i32,
    database: u32,
    position: Position,
    queue: ShortText,
    group_key: ShortText,
    tenant: ShortText,
    kind: ShortText,
    stamp: Stamp,
}

/// The table of freed heads: entries linked into one list per wake-up slot, in claim order
/// (so a claim takes the first it wants without reading the rest, and a settle, whose heads
/// mostly come after those offered before, links one in from the end), the free ones into
/// another, and the databases whose marks were swept since shared memory was made. All-zero
/// is an empty table.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Table {
    /// Entries ever handed out; those past it are free and unlinked.
    high: u32,
    free: u32,
    lists: [u32; SLOTS],
    tails: [u32; SLOTS],
    entries: [Entry; ENTRIES],
    swept: [u32; DATABASES],
}

/// The table behind its spin lock, as shared memory holds it, with a count of each slot's
/// list that claims read without the lock: a claim of a queue without freed heads (the queues
/// without groups among them) takes no lock. All-zero is an empty table.
#[repr(C)]
pub struct FreedHeads {
    linked: [AtomicU32; SLOTS],
    table: SpinLocked<Table>,
}

impl FreedHeads {
    /// Runs `body` with the table locked (see `SpinLocked::with`).
    fn with<R>(&self, body: impl FnOnce(&mut Table) -> R) -> R {
        self.table.with(body)
    }

    /// Whether the list of `slot` is empty, as last published. An entry is counted when it is
    /// offered, before the commit that makes it available wakes anyone.
    fn is_empty_at(&self, slot: usize) -> bool {
        self.linked[slot].load(Ordering::Acquire) == 0
    }

    /// `count` entries were linked into the list of `slot`.
    fn linked(&self, slot: usize, count: u32) {
        if count > 0 {
            self.linked[slot].fetch_add(count, Ordering::Release);
        }
    }

    /// `count` entries were unlinked from the list of `slot`.
    fn unlinked(&self, slot: usize, count: u32) {
        if count > 0 {
            self.linked[slot].fetch_sub(count, Ordering::Release);
        }
    }
}

/// A freed head, as the settle offers it and a claim takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FreedHead {
    /// The job's position in claim order (its id included).
    pub position: Position,
    /// Its queue.
    pub queue: String,
    /// Its group key.
    pub group_key: String,
    /// Its tenant, if any.
    pub tenant: Option<String>,
    /// Its kind.
    pub kind: String,
    /// What the settle read of the queue's counts of queueing commits before it read the group
    /// (`runtime::queued_changes`).
    pub stamp: Stamp,
}

/// What a claim asks of the freed heads it takes: the kind, tenant and run_at of each.
pub trait Wanted {
    /// Whether the claim may take a job of `kind` and `tenant` due at `run_at`. Called under
    /// the table's spin lock: it must be short and must not raise or panic.
    fn wants(&self, kind: &str, tenant: Option<&str>, run_at: i64) -> bool;
}

thread_local! {
    /// The entries this backend offered or took in its transaction: (index, job id).
    static MINE: RefCell<Vec<(u32, i64)>> = const { RefCell::new(Vec::new()) };
    /// Whether this transaction cleared its database's stranded marks (see [`sweep_needed`]).
    static SWEPT_HERE: Cell<bool> = const { Cell::new(false) };
    /// Whether this backend saw its database recorded swept (it stays so while shared memory
    /// lives, and new shared memory comes only with new backends).
    static SWEPT_SEEN: Cell<bool> = const { Cell::new(false) };
}

/// The freed heads in shared memory (`shmem` attaches them).
pub(super) static TABLE: Attached<FreedHeads> = Attached::new();

fn heads() -> Option<&'static FreedHeads> {
    TABLE.get()
}

fn my_pid() -> i32 {
    // SAFETY: MyProcPid is set once at backend start.
    unsafe { pg_sys::MyProcPid }
}

impl Table {
    fn entry(&mut self, link: u32) -> &mut Entry {
        &mut self.entries[(link - 1) as usize]
    }

    /// A free entry's link, if any is left.
    fn allocate(&mut self) -> Option<u32> {
        if self.free != NO_ENTRY {
            let link = self.free;
            self.free = self.entry(link).next;
            return Some(link);
        }
        if (self.high as usize) < ENTRIES {
            self.high += 1;
            return Some(self.high);
        }
        None
    }

    /// Links the entry `link` into the list of `slot` at its place in claim order, looking
    /// from the end.
    #[cfg(test)]
    fn link_in_order(&mut self, slot: usize, link: u32) {
        let tail = self.tails[slot];
        self.link_in_order_from(slot, link, tail);
    }

    /// Links the entry `link` into the list of `slot` at its place in claim order, looking
    /// back from the linked entry `from` (`NO_ENTRY`: from before the list's first), which must
    /// come before it in claim order or be the list's tail. Answers the entry it now follows,
    /// from which an entry that comes before it in claim order is looked for.
    fn link_in_order_from(&mut self, slot: usize, link: u32, from: u32) -> u32 {
        let position = self.entry(link).position;
        let mut before = from;
        while before != NO_ENTRY && self.entry(before).position > position {
            before = self.entry(before).prev;
        }
        let after = if before == NO_ENTRY {
            self.lists[slot]
        } else {
            self.entry(before).next
        };
        {
            let entry = self.entry(link);
            entry.prev = before;
            entry.next = after;
        }
        self.set_next(slot, before, link);
        self.set_prev(slot, after, link);
        before
    }

    /// Makes `next` follow the linked entry `link` in the list of `slot`, or start the list
    /// when `link` is `NO_ENTRY`.
    #[inline]
    fn set_next(&mut self, slot: usize, link: u32, next: u32) {
        if link == NO_ENTRY {
            self.lists[slot] = next;
        } else {
            self.entry(link).next = next;
        }
    }

    /// Makes `prev` come before the linked entry `link` in the list of `slot`, or end the list
    /// when `link` is `NO_ENTRY`.
    #[inline]
    fn set_prev(&mut self, slot: usize, link: u32, prev: u32) {
        if link == NO_ENTRY {
            self.tails[slot] = prev;
        } else {
            self.entry(link).prev = prev;
        }
    }

    /// Links the entries `made` ((which, slot, entry), sorted by slot and then from the last in
    /// claim order) into their slots' lists while there is room, pushing (which, slot, link) of
    /// each onto `linked`.
    fn link_all(&mut self, made: &[(usize, usize, Entry)], linked: &mut Vec<(usize, usize, u32)>) {
        // Where the walk of the slot being linked into stands.
        let mut walk: Option<(usize, u32)> = None;
        for (which, slot, entry) in made {
            let Some(link) = self.allocate() else { return };
            *self.entry(link) = *entry;
            let from = match walk {
                Some((walking, at)) if walking == *slot => at,
                _ => self.tails[*slot],
            };
            let before = self.link_in_order_from(*slot, link, from);
            walk = Some((*slot, before));
            linked.push((*which, *slot, link));
        }
    }

    /// Unlinks the linked entry `link` from the list of `slot` and frees it.
    fn release(&mut self, slot: usize, link: u32) {
        let Entry { prev, next, .. } = *self.entry(link);
        self.set_next(slot, prev, next);
        self.set_prev(slot, next, prev);
        let free = self.free;
        let entry = self.entry(link);
        entry.usage = Use::Free;
        entry.prev = NO_ENTRY;
        entry.next = free;
        self.free = link;
    }

    /// Calls `visit` on each available entry of `queue` in `database` in the list of `slot`,
    /// in claim order, while it answers `true`.
    fn each_available(
        &mut self,
        slot: usize,
        database: u32,
        queue: &str,
        mut visit: impl FnMut(u32, &mut Entry) -> bool,
    ) {
        let mut at = self.lists[slot];
        while at != NO_ENTRY {
            let entry = self.entry(at);
            let next = entry.next;
            if entry.usage == Use::Available
                && entry.database == database
                && entry.queue.get() == Some(queue)
                && !visit(at, entry)
            {
                return;
            }
            at = next;
        }
    }
}

/// Offers `offered` (heads of groups the caller holds the locks of) to the next claims of their
/// queues once this transaction commits, and answers for each one whether it was offered; one
/// that was not (no shared memory, this database not swept yet, the table full, a name too
/// long) has its mark cleared by the caller instead.
///
/// The heads are linked in from the last in claim order, so one walk back from each list's
/// tail places them all: a settle of 100 groups linked each one in with a walk of its own,
/// over the hundreds of heads other settles had offered, under the table's lock.
pub fn offer_all(offered: &[FreedHead]) -> Vec<bool> {
    let mut answers = vec![false; offered.len()];
    let Some(heads) = heads() else {
        return answers;
    };
    let database = current_database();
    let pid = my_pid();
    // Made before the lock, which nothing under it may fail: (which head, its slot, its entry).
    let mut made: Vec<(usize, usize, Entry)> = offered
        .iter()
        .enumerate()
        .filter_map(|(index, head)| {
            let entry = Entry {
                next: NO_ENTRY,
                prev: NO_ENTRY,
                usage: Use::Offered,
                holder: pid,
                database,
                position: head.position,
                queue: ShortText::new(Some(&head.queue))?,
                group_key: ShortText::new(Some(&head.group_key))?,
                tenant: ShortText::new(head.tenant.as_deref())?,
                kind: ShortText::new(Some(&head.kind))?,
                stamp: head.stamp,
            };
            Some((index, slot_index(&head.queue), entry))
        })
        .collect();
    made.sort_unstable_by(|(_, slot_a, a), (_, slot_b, b)| {
        slot_a.cmp(slot_b).then(b.position.cmp(&a.position))
    });
    let mut linked: Vec<(usize, usize, u32)> = Vec::with_capacity(made.len());
    heads.with(|table| {
        if table.swept.contains(&database) {
            table.link_all(&made, &mut linked);
        }
    });
    // A job offered twice (a cancel of a later job of its group moves the group on again) has
    // two entries: the claim that takes one drops the other (`engine::claim`).
    MINE.with(|mine| {
        let mut mine = mine.borrow_mut();
        for &(index, slot, link) in &linked {
            heads.linked(slot, 1);
            mine.push((link, offered[index].position.id));
            answers[index] = true;
        }
    });
    answers
}

/// Takes up to `wanted` available freed heads of `queue` that `claim` wants, the first in
/// claim order (the list's order); they are this transaction's until it ends or gives them back ([`give_back`]).
pub fn take(queue: &str, wanted: usize, claim: &impl Wanted) -> Vec<FreedHead> {
    let Some(heads) = heads() else {
        return Vec::new();
    };
    let slot = slot_index(queue);
    if wanted == 0 || queue.len() > TEXT_BYTES || heads.is_empty_at(slot) {
        return Vec::new();
    }
    let database = current_database();
    let pid = my_pid();
    let wanted = wanted.min(ENTRIES);
    // Allocated before the lock: nothing under it may fail.
    let mut taken: Vec<(u32, Entry)> = Vec::with_capacity(wanted);
    heads.with(|table| {
        table.each_available(slot, database, queue, |link, entry| {
            if claim.wants(
                entry.kind.get().unwrap_or_default(),
                entry.tenant.get(),
                entry.position.run_at,
            ) {
                entry.usage = Use::Taken;
                entry.holder = pid;
                taken.push((link, *entry));
            }
            taken.len() < wanted
        });
    });
    MINE.with(|mine| {
        mine.borrow_mut()
            .extend(taken.iter().map(|(link, e)| (*link, e.position.id)))
    });
    taken
        .into_iter()
        .map(|(_, entry)| FreedHead {
            position: entry.position,
            queue: queue.to_owned(),
            group_key: entry.group_key.get().unwrap_or_default().to_owned(),
            tenant: entry.tenant.get().map(str::to_owned),
            kind: entry.kind.get().unwrap_or_default().to_owned(),
            stamp: entry.stamp,
        })
        .collect()
}

/// Gives back the freed head of job `id` this transaction took and did not use (its job or
/// group was busy, or a job earlier in claim order came first): other claims may take it.
///
/// A freed head taken and not given back is dropped when the transaction commits, whether the
/// claim took its job, found it no longer its group's waiting head, or cleared its mark: a
/// rollback undoes the take or the clearing, so it gives the freed head back instead.
pub fn give_back(id: i64) {
    let Some(heads) = heads() else { return };
    let Some(link) = MINE.with(|mine| {
        let mut mine = mine.borrow_mut();
        let at = mine.iter().position(|(_, taken)| *taken == id)?;
        Some(mine.swap_remove(at).0)
    }) else {
        return;
    };
    let pid = my_pid();
    heads.with(|table| {
        let entry = table.entry(link);
        if entry.usage == Use::Taken && entry.holder == pid && entry.position.id == id {
            entry.usage = Use::Available;
        }
    });
}

/// The table and the slot of `queue`, when the queue may have freed heads there: shared memory
/// is attached, its name fits an entry and the slot's list is not empty.
fn slot_with_heads(queue: &str) -> Option<(&'static FreedHeads, usize)> {
    let heads = heads()?;
    let slot = slot_index(queue);
    (queue.len() <= TEXT_BYTES && !heads.is_empty_at(slot)).then_some((heads, slot))
}

/// Takes every available freed head of `queue` (its groups no longer run one job at a time,
/// or the claim cannot take them under its isolation level), up to a few hundred at once, and
/// returns their job ids, whose marks the caller clears; as with [`take`], they are dropped
/// when this transaction commits.
pub fn take_all(queue: &str) -> Vec<i64> {
    let Some((heads, slot)) = slot_with_heads(queue) else {
        return Vec::new();
    };
    let database = current_database();
    let pid = my_pid();
    let mut taken: Vec<(u32, i64)> = Vec::with_capacity(TAKE_ALL_AT_ONCE);
    heads.with(|table| {
        table.each_available(slot, database, queue, |link, entry| {
            entry.usage = Use::Taken;
            entry.holder = pid;
            taken.push((link, entry.position.id));
            taken.len() < TAKE_ALL_AT_ONCE
        });
    });
    let ids = taken.iter().map(|(_, id)| *id).collect();
    MINE.with(|mine| mine.borrow_mut().extend(taken));
    ids
}

/// The job ids of `queue`'s freed heads that claims may take now, in claim order.
pub fn available(queue: &str) -> Vec<i64> {
    let Some((heads, slot)) = slot_with_heads(queue) else {
        return Vec::new();
    };
    let database = current_database();
    let mut found: Vec<i64> = Vec::with_capacity(ENTRIES);
    heads.with(|table| {
        table.each_available(slot, database, queue, |_, entry| {
            found.push(entry.position.id);
            found.len() < ENTRIES
        });
    });
    found
}

/// Whether a claim must clear this database's stranded marks before freed heads are offered
/// here: nobody did since shared memory was made (and committed), and the table has room to
/// record it. Settles offer freed heads only in a database recorded swept; without shared
/// memory, or with no room left, none are offered, so no mark waits for one.
pub fn sweep_needed() -> bool {
    if SWEPT_SEEN.with(Cell::get) {
        return false;
    }
    let Some(heads) = heads() else { return false };
    let database = current_database();
    let (swept, room) =
        heads.with(|table| (table.swept.contains(&database), table.swept.contains(&0)));
    if swept {
        SWEPT_SEEN.with(|seen| seen.set(true));
    }
    !swept && room
}

/// This transaction cleared its database's stranded marks: once it commits, settles may offer
/// freed heads here.
pub fn swept_here() {
    SWEPT_HERE.with(|swept| swept.set(true));
}

/// The transaction ended: a commit makes its offers available, drops what it took and records
/// a sweep; a rollback drops its offers and gives back what it took. Runs after its locks are
/// gone, before waiting claims are woken.
pub fn transaction_ended(committed: bool) {
    let swept = SWEPT_HERE.with(|swept| swept.replace(false)) && committed;
    let mine = MINE.with(|mine| std::mem::take(&mut *mine.borrow_mut()));
    let Some(heads) = heads() else { return };
    if mine.is_empty() && !swept {
        return;
    }
    let database = current_database();
    let pid = my_pid();
    // Few slots per transaction: its queues'.
    let mut released: Vec<usize> = Vec::with_capacity(mine.len());
    heads.with(|table| {
        for &(link, id) in &mine {
            let entry = *table.entry(link);
            if entry.holder != pid || entry.position.id != id {
                continue;
            }
            let slot = entry.queue.get().map_or(0, slot_index);
            match (entry.usage, committed) {
                (Use::Offered, true) | (Use::Taken, false) => {
                    table.entry(link).usage = Use::Available;
                }
                (Use::Offered, false) | (Use::Taken, true) => {
                    table.release(slot, link);
                    released.push(slot);
                }
                _ => {}
            }
        }
        if swept && !table.swept.contains(&database) {
            if let Some(free) = table.swept.iter_mut().find(|d| **d == 0) {
                *free = database;
            }
        }
    });
    for slot in released {
        heads.unlinked(slot, 1);
    }
}

/// The transaction is being prepared: the heads it offered leave the table, and their job ids
/// are returned so that the transaction clears their marks in its own rows before the prepare
/// (`engine::two_phase`). A prepared transaction ends later, maybe after a restart that empties
/// shared memory, so nothing it hands over may live only here: its commit frees the heads
/// through the rows, whenever and wherever it happens, and a rollback leaves them marked
/// behind the group's running job, as before the settle.
pub fn withdraw_offers_here() -> Vec<i64> {
    let Some(heads) = heads() else {
        return Vec::new();
    };
    let mut withdrawn = Vec::new();
    let mut released: Vec<usize> = Vec::new();
    forget_mine(heads, |table, link, id| {
        let entry = *table.entry(link);
        if entry.usage != Use::Offered {
            return false;
        }
        let slot = entry.queue.get().map_or(0, slot_index);
        table.release(slot, link);
        released.push(slot);
        withdrawn.push(id);
        true
    });
    for slot in released {
        heads.unlinked(slot, 1);
    }
    withdrawn
}

/// The transaction is being prepared: it ends later, maybe in another session, so what it
/// offered and took is made available now (a claim checks each one under the group's lock,
/// which the prepared transaction keeps until it ends). A sweep it made is not recorded.
pub fn transaction_prepared() {
    SWEPT_HERE.with(|swept| swept.set(false));
    make_mine_available(|_| true);
}

/// A subtransaction was rolled back: the jobs a claim in it took are queued and marked again,
/// and the marks it cleared are back, so what this transaction took is made available again (a
/// job the rest of it still holds is passed over by the claims that meet it, its lock being
/// held). A sweep it may have made is forgotten: the next claim sweeps again.
pub fn subtransaction_aborted() {
    SWEPT_HERE.with(|swept| swept.set(false));
    make_mine_available(|usage| usage == Use::Taken);
}

/// Makes this transaction's entries whose use `which` names available, and forgets them.
fn make_mine_available(which: impl Fn(Use) -> bool) {
    let Some(heads) = heads() else { return };
    forget_mine(heads, |table, link, _| {
        let entry = table.entry(link);
        let applies = which(entry.usage);
        if applies {
            entry.usage = Use::Available;
        }
        applies
    });
}

/// Under the table's lock, asks `forget` of each entry this transaction took or offered that
/// still holds the same job for it, given the table, the entry's link and the job's id, and
/// forgets those it answers `true` for. Entries no longer this transaction's are left to the
/// transaction's end.
fn forget_mine(heads: &FreedHeads, mut forget: impl FnMut(&mut Table, u32, i64) -> bool) {
    let pid = my_pid();
    MINE.with(|mine| {
        let mut mine = mine.borrow_mut();
        if mine.is_empty() {
            return;
        }
        heads.with(|table| {
            mine.retain(|&(link, id)| {
                let entry = table.entry(link);
                let held = entry.holder == pid && entry.position.id == id;
                !(held && forget(table, link, id))
            });
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty_table() -> Box<Table> {
        // SAFETY: all-zero bytes are an empty table (see Table).
        unsafe { Box::<Table>::new_zeroed().assume_init() }
    }

    fn offer_into(table: &mut Table, slot: usize, id: i64) -> Option<u32> {
        let link = table.allocate()?;
        let entry = table.entry(link);
        entry.usage = Use::Available;
        entry.database = 1;
        entry.position = Position {
            priority: 0,
            run_at: 0,
            id,
        };
        table.link_in_order(slot, link);
        Some(link)
    }

    /// The ids of the list of `slot`, from its head, and again from its tail (reversed).
    fn ids(table: &mut Table, slot: usize) -> (Vec<i64>, Vec<i64>) {
        let mut forward = Vec::new();
        let mut at = table.lists[slot];
        while at != NO_ENTRY {
            forward.push(table.entry(at).position.id);
            at = table.entry(at).next;
        }
        let mut backward = Vec::new();
        let mut at = table.tails[slot];
        while at != NO_ENTRY {
            backward.push(table.entry(at).position.id);
            at = table.entry(at).prev;
        }
        backward.reverse();
        (forward, backward)
    }

    #[test]
    fn lists_keep_claim_order_and_entries_are_reused_once_released() {
        let mut table = empty_table();
        let mut links = std::collections::HashMap::new();
        for id in [5, 9, 1, 7, 7, 12] {
            links.insert(id, offer_into(&mut table, 3, id).expect("room"));
        }
        let in_order = vec![1, 5, 7, 7, 9, 12];
        assert_eq!(ids(&mut table, 3), (in_order.clone(), in_order));
        // From the middle, the head and the tail.
        for id in [9, 1, 12] {
            table.release(3, links[&id]);
        }
        assert_eq!(ids(&mut table, 3), (vec![5, 7, 7], vec![5, 7, 7]));
        assert_eq!(ids(&mut table, 2), (vec![], vec![]), "another slot's list");
        let reused = offer_into(&mut table, 2, 4).expect("room");
        assert_eq!(reused, links[&12], "the last released is reused first");
        assert_eq!(ids(&mut table, 2), (vec![4], vec![4]));
    }

    #[test]
    fn a_batch_linked_in_one_walk_keeps_claim_order_in_each_slot() {
        let mut table = empty_table();
        for id in [10, 20, 30, 40] {
            offer_into(&mut table, 1, id).expect("room");
        }
        offer_into(&mut table, 2, 25).expect("room");
        let entry = |id: i64| {
            let mut entry = table.entries[0];
            entry.position = Position {
                priority: 0,
                run_at: 0,
                id,
            };
            entry
        };
        // Before, between, after and equal to linked ones, in two slots, as offer_all sorts.
        let batch = [(45, 1), (40, 1), (35, 1), (15, 1), (5, 1), (30, 2), (1, 2)];
        let made: Vec<(usize, usize, Entry)> = batch
            .iter()
            .enumerate()
            .map(|(which, &(id, slot))| (which, slot, entry(id)))
            .collect();
        let mut linked = Vec::new();
        table.link_all(&made, &mut linked);
        assert_eq!(linked.len(), batch.len());
        let one = vec![5, 10, 15, 20, 30, 35, 40, 40, 45];
        assert_eq!(ids(&mut table, 1), (one.clone(), one));
        assert_eq!(ids(&mut table, 2), (vec![1, 25, 30], vec![1, 25, 30]));
    }

    #[test]
    fn a_batch_is_linked_while_there_is_room() {
        let mut table = empty_table();
        for id in 0..ENTRIES as i64 - 2 {
            offer_into(&mut table, 0, id).expect("room");
        }
        let mut entry = table.entries[0];
        entry.position.id = -1;
        let made: Vec<(usize, usize, Entry)> = (0..3).map(|which| (which, 0, entry)).collect();
        let mut linked = Vec::new();
        table.link_all(&made, &mut linked);
        let which: Vec<usize> = linked.iter().map(|(which, _, _)| *which).collect();
        assert_eq!(which, vec![0, 1], "two entries were left");
    }

    #[test]
    fn the_table_hands_out_every_entry_once() {
        let mut table = empty_table();
        let links: Vec<u32> = (0..ENTRIES as i64)
            .map(|id| offer_into(&mut table, (id % 3) as usize, id).expect("room"))
            .collect();
        assert_eq!(offer_into(&mut table, 0, -1), None, "full");
        let distinct: std::collections::HashSet<u32> = links.iter().copied().collect();
        assert_eq!(distinct.len(), ENTRIES);
        table.release(1, links[7]);
        assert_eq!(offer_into(&mut table, 0, -1), Some(links[7]));
    }

    #[test]
    fn short_texts_keep_names_up_to_their_size_and_null() {
        assert_eq!(ShortText::new(None).unwrap().get(), None);
        assert_eq!(ShortText::new(Some("")).unwrap().get(), Some(""));
        let longest = "é".repeat(31) + "x";
        assert_eq!(longest.len(), TEXT_BYTES);
        assert_eq!(
            ShortText::new(Some(&longest)).unwrap().get(),
            Some(longest.as_str())
        );
        assert!(ShortText::new(Some(&(longest + "y"))).is_none());
    }
}
