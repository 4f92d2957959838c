//! Claim floors: for each queue, a position in claim order (priority, run_at, id) below which no
//! job is claimable, so a claim starts its index scan there instead of at the head of the
//! queue's part of the claim index.
//!
//! Why: a claimed job leaves a dead entry at the head of the claim index, and while any
//! snapshot older than the claim is open (a long report, a replica's feedback, a forgotten
//! `BEGIN`), vacuum cannot remove it and scans cannot mark it dead. Without a floor every claim
//! walks all of them, so claims get slower with every job claimed for as long as the snapshot
//! lives. With a floor a claim skips them.
//!
//! Soundness: a claim that takes jobs of every kind raises the floor to just past the last job
//! it took, but never past a job made queued since the claim read the floor: every change to
//! the floor bumps a generation counter, the cell remembers its latest lowers, and a claim that
//! finds a bump it cannot account for gives up; every commit that makes a job queued lowers
//! it to that job's position (the engine's one door for that is `engine::transitions`); every
//! rollback of a transaction that held job locks (a claim, a cancel) resets it, and so does the
//! end of a prepared transaction that did either.
//! Jobs a claim skipped because another transaction held them are either taken by that
//! transaction or come back through its rollback. Whatever path the code does not know about
//! (a restore, a row written behind the functions' back) is caught by the background worker,
//! which resets a floor that has a due queued job below it that no transaction holds
//! ([`owned_floors`]; a claim in flight holds the jobs it is taking). The floor lives
//! in shared memory, so a restart simply forgets it.
//!
//! Next to the floor each queue has a reach: how far claims in flight have picked. Concurrent
//! claims start past it instead of all trying the same held jobs at the floor
//! ([`extend_reach`] says why that is sound, [`forget_reaches`] what bounds it). Claims scoped to
//! one tenant cannot extend that reach (they pass over other tenants' jobs without trying them),
//! so the cell keeps a second reach for one tenant: how far that tenant's claims picked among its
//! own jobs.

use super::position::Position;
use super::queue_id::current_database;
use super::spin::SpinLocked;

/// Longest tenant name a tenant's reach records; claims of longer names do without one.
const REACH_TENANT_BYTES: usize = 63;

/// How many of its latest lowers a cell remembers. A claim reads the floor, takes its jobs and
/// then raises the floor past them; on a busy queue other transactions enqueue meanwhile, and
/// each commit lowers the floor (bumps its generation) even when its job lies far past it. A
/// raise that gave up on any bump would leave the floor behind for good, and while an old
/// snapshot holds vacuum back every claim's probe would walk the dead entries from there. With
/// the lowers since its reading remembered, the claim raises the floor no further than the
/// lowest job they made queued. Any other bump (a reset, a heal, another queue taking the
/// cell), or more lowers than remembered, still makes it give up.
const REMEMBERED_LOWERS: usize = 16;

/// One lower a cell remembers: the generation it made, and where its job was queued (for the
/// queue that owned the cell then; a lower for another queue sharing the cell limits nothing).
#[repr(C)]
#[derive(Clone, Copy)]
struct Lowered {
    generation: u64,
    limits: bool,
    key: Position,
}

/// Whose jobs a reach covers: those a claim may take, when it takes every due one of them in
/// claim order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReachScope<'a> {
    /// Every job of the queue (a claim of every kind and tenant).
    Every,
    /// The jobs of one tenant (a claim of every kind scoped to that tenant).
    Tenant(&'a str),
}

/// One queue's floor; its slot may serve another queue meanwhile.
pub type FloorCell = SpinLocked<FloorData>;

/// The data of a floor cell.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FloorData {
    /// Bumped by every change but a raise, so a claim can tell whether its reading still holds.
    generation: u64,
    database: u32,
    name_len: u8,
    name: [u8; 64],
    has_key: bool,
    key: Position,
    /// The reach: the furthest position that claims of every kind picked while `generation`
    /// was `reach_generation`. Valid only while the two are equal.
    has_reach: bool,
    reach_generation: u64,
    reach: Position,
    /// The reach of one tenant's claims: the furthest position they picked among that tenant's
    /// jobs while `generation` was `tenant_reach_generation`.
    has_tenant_reach: bool,
    tenant_reach_generation: u64,
    tenant_reach: Position,
    tenant_len: u8,
    tenant: [u8; REACH_TENANT_BYTES],
    /// The latest lowers, the one that made generation `g` at `g % REMEMBERED_LOWERS`.
    lowers: [Lowered; REMEMBERED_LOWERS],
}

impl FloorData {
    fn reach_valid(&self) -> bool {
        self.has_reach && self.reach_generation == self.generation
    }

    /// The lowest position a lower since generation `seen` made a job of this cell's queue
    /// queued at (`Some(None)`: none did), or `None` when a bump since then was not a
    /// remembered lower.
    fn lowered_since(&self, seen: u64) -> Option<Option<Position>> {
        if self.generation.wrapping_sub(seen) > REMEMBERED_LOWERS as u64 {
            return None;
        }
        let mut lowest: Option<Position> = None;
        for generation in seen + 1..=self.generation {
            let lowered = &self.lowers[(generation % REMEMBERED_LOWERS as u64) as usize];
            if lowered.generation != generation {
                return None;
            }
            if lowered.limits {
                lowest = Some(lowest.map_or(lowered.key, |l| l.min(lowered.key)));
            }
        }
        Some(lowest)
    }

    fn tenant_reach_valid(&self) -> bool {
        self.has_tenant_reach && self.tenant_reach_generation == self.generation
    }

    fn tenant_is(&self, tenant: &str) -> bool {
        &self.tenant[..self.tenant_len as usize] == tenant.as_bytes()
    }

    /// The reach that holds for `scope`, if any.
    fn reach_of(&self, scope: ReachScope<'_>) -> Option<Position> {
        match scope {
            ReachScope::Every => self.reach_valid().then_some(self.reach),
            ReachScope::Tenant(tenant) => {
                (self.tenant_reach_valid() && self.tenant_is(tenant)).then_some(self.tenant_reach)
            }
        }
    }

    fn owned_by(&self, database: u32, queue: &str) -> bool {
        self.database == database && &self.name[..self.name_len as usize] == queue.as_bytes()
    }

    fn queue(&self) -> String {
        String::from_utf8_lossy(&self.name[..self.name_len as usize]).into_owned()
    }
}

/// What a claim read of its queue's floor before it started.
pub struct Seen {
    generation: u64,
    /// Where to start, if the floor is known.
    pub key: Option<Position>,
    /// The furthest position claims in flight of the reader's scope picked, if known (see
    /// [`extend_reach`]).
    pub reach: Option<Position>,
}

impl Seen {
    /// What a claim of a transaction that itself made a job queued at `lowest` may start from:
    /// the floor as read, unless that job lies below it (the commit lowers the floor only for
    /// the claims after it); then from the job, and with no reach (it may lie below that too).
    pub fn lowered_to(self, lowest: Option<Position>) -> Seen {
        match (self.key, lowest) {
            (Some(key), Some(lowest)) if lowest < key => Seen {
                generation: self.generation,
                key: Some(lowest),
                reach: None,
            },
            _ => self,
        }
    }
}

/// Reads the queue's floor, and the reach of `scope` (none without a scope); `None` without
/// shared memory.
pub fn read(cell: Option<&FloorCell>, queue: &str, scope: Option<ReachScope<'_>>) -> Option<Seen> {
    let database = current_database();
    cell.map(|cell| {
        cell.with(|data| {
            let owned = data.owned_by(database, queue);
            Seen {
                generation: data.generation,
                key: (owned && data.has_key).then_some(data.key),
                reach: scope
                    .filter(|_| owned && data.has_key)
                    .and_then(|scope| data.reach_of(scope)),
            }
        })
    })
}

/// Raises the queue's floor to `to` (the last job a claim of every kind took), but not past a
/// job that a lower since `seen` was read made queued; not at all if the floor was reset since,
/// or changed in a way the cell no longer remembers.
pub fn raise(cell: &FloorCell, queue: &str, seen: &Seen, to: Position) {
    raise_in(cell, current_database(), queue, seen, to);
}

/// [`raise`] for a queue of `database`.
fn raise_in(cell: &FloorCell, database: u32, queue: &str, seen: &Seen, to: Position) {
    cell.with(|data| {
        let to = if data.generation == seen.generation {
            to
        } else if data.owned_by(database, queue) {
            // Jobs queued since the claim read the floor may lie below `to`, unseen by it.
            match data.lowered_since(seen.generation) {
                Some(Some(lowest)) => to.min(lowest),
                Some(None) => to,
                None => return,
            }
        } else {
            return;
        };
        if data.owned_by(database, queue) {
            if !data.has_key || data.key < to {
                data.key = to;
                data.has_key = true;
            }
        } else if queue.len() < data.name.len() {
            // The slot served another queue (or none); it serves this one from now on.
            data.database = database;
            data.name_len = queue.len() as u8;
            data.name[..queue.len()].copy_from_slice(queue.as_bytes());
            data.key = to;
            data.has_key = true;
            data.generation += 1;
        }
    });
}

/// Lowers the queue's floor to `key`: a job became queued there.
pub fn lower(cell: &FloorCell, queue: &str, key: Position) {
    lower_in(cell, current_database(), queue, key);
}

/// [`lower`] for a queue of `database` (the end of a prepared transaction may be handled in
/// any session of that database).
fn lower_in(cell: &FloorCell, database: u32, queue: &str, key: Position) {
    cell.with(|data| {
        // A reach before the new job still holds; claims that read the old generation may not
        // extend it, as they did not see the job.
        let reach_holds = data.reach_valid() && data.reach < key;
        let tenant_reach_holds = data.tenant_reach_valid() && data.tenant_reach < key;
        let owned = data.owned_by(database, queue);
        data.generation += 1;
        let generation = data.generation;
        data.lowers[(generation % REMEMBERED_LOWERS as u64) as usize] = Lowered {
            generation,
            limits: owned,
            key,
        };
        if reach_holds {
            data.reach_generation = generation;
        }
        if tenant_reach_holds {
            data.tenant_reach_generation = generation;
        }
        if owned && data.has_key && key < data.key {
            data.key = key;
        }
    });
}

/// Records that a claim of every job of `scope`, which read `seen`, picked (holds the job locks
/// of) jobs up to `to`, skipping only jobs other transactions held.
///
/// The reach is a hint that lets the next claims start past the jobs claims in flight hold,
/// instead of each trying the same held jobs' locks first. Between the floor and the reach,
/// every job is held by a claim in flight or already taken: a claim's jobs come back only
/// through its rollback (which resets the floor and with it the reach) and any other way a job
/// becomes queued lowers the floor (which forgets a reach past that job). So it only moves
/// when nothing changed since the claim read `seen`.
///
/// A tenant's reach says the same of that tenant's jobs alone: its claims see no other jobs.
/// The cell keeps one tenant's; another tenant's claim takes it over (its predecessor's claims
/// then start at the floor, as they would without one).
pub fn extend_reach(
    cell: &FloorCell,
    queue: &str,
    seen: &Seen,
    scope: ReachScope<'_>,
    to: Position,
) {
    let database = current_database();
    cell.with(|data| {
        if data.generation != seen.generation || !data.owned_by(database, queue) || !data.has_key {
            return;
        }
        match scope {
            ReachScope::Every => {
                if !data.reach_valid() || data.reach < to {
                    data.reach = to;
                    data.has_reach = true;
                    data.reach_generation = data.generation;
                }
            }
            ReachScope::Tenant(tenant) => {
                if tenant.len() > REACH_TENANT_BYTES {
                    return;
                }
                if data.tenant_reach_valid() && data.tenant_is(tenant) && data.tenant_reach >= to {
                    return;
                }
                data.tenant_len = tenant.len() as u8;
                data.tenant[..tenant.len()].copy_from_slice(tenant.as_bytes());
                data.tenant_reach = to;
                data.has_tenant_reach = true;
                data.tenant_reach_generation = data.generation;
            }
        }
    });
}

/// Forgets the queue's floor: jobs may be claimable anywhere again.
pub fn reset(cell: &FloorCell, queue: &str) {
    reset_in(cell, current_database(), queue);
}

/// [`reset`] for a queue of `database`.
fn reset_in(cell: &FloorCell, database: u32, queue: &str) {
    cell.with(|data| {
        data.generation += 1;
        if data.owned_by(database, queue) {
            data.has_key = false;
        }
    });
}

/// Forgets every floor of `database`: used when a change whose queues are not known ends (a
/// prepared transaction whose effects could not all be recorded).
pub fn reset_database<'a>(cells: impl Iterator<Item = &'a FloorCell>, database: u32) {
    for cell in cells {
        cell.with(|data| {
            data.generation += 1;
            if data.database == database {
                data.has_key = false;
            }
        });
    }
}

/// Forgets every queue's reach; the worker does this each tick. A job the reach passed while
/// a transaction that was not a claim held it (a cancel or a late settle that then left the
/// job queued) would otherwise wait until claims run out of jobs past the reach; this way it
/// waits at most a tick.
pub fn forget_reaches<'a>(cells: impl Iterator<Item = &'a FloorCell>) {
    for cell in cells {
        cell.with(|data| {
            data.has_reach = false;
            data.has_tenant_reach = false;
        });
    }
}

/// The floors that queues of this database hold right now, for the worker's check that no due
/// job sits below one.
pub fn owned_floors<'a>(
    cells: impl Iterator<Item = &'a FloorCell>,
) -> Vec<(usize, String, Position)> {
    let database = current_database();
    cells
        .enumerate()
        .filter_map(|(index, cell)| {
            cell.with(|data| {
                (data.database == database && data.has_key).then(|| (index, data.queue(), data.key))
            })
        })
        .collect()
}

/// Resets the floor of `queue` in `cell` if it is still at `key`: the worker found a due job
/// below it. Returns whether it did.
pub fn heal(cell: &FloorCell, queue: &str, key: Position) -> bool {
    let database = current_database();
    cell.with(|data| {
        if !(data.owned_by(database, queue) && data.has_key && data.key == key) {
            return false;
        }
        data.generation += 1;
        data.has_key = false;
        true
    })
}

/// A queue's floor as diagnostics show it.
pub struct FloorView {
    /// The floor, when the queue owns its slot's floor cell and the floor is known.
    pub key: Option<Position>,
    /// The cell's generation.
    pub generation: u64,
    /// The reach, when valid.
    pub reach: Option<Position>,
}

/// The queue's floor, for `jobs.runtime_state`.
pub fn view(cell: &FloorCell, queue: &str) -> FloorView {
    let database = current_database();
    cell.with(|data| {
        let owned = data.owned_by(database, queue);
        FloorView {
            key: (owned && data.has_key).then_some(data.key),
            generation: data.generation,
            reach: (owned && data.has_key && data.reach_valid()).then_some(data.reach),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATABASE: u32 = 7;
    const QUEUE: &str = "q";

    fn cell() -> Box<FloorCell> {
        // SAFETY: all-zero bytes are an unlocked cell that serves no queue.
        unsafe { Box::<FloorCell>::new_zeroed().assume_init() }
    }

    fn at(id: i64) -> Position {
        Position {
            priority: 0,
            run_at: 0,
            id,
        }
    }

    fn seen(cell: &FloorCell) -> Seen {
        cell.with(|data| Seen {
            generation: data.generation,
            key: (data.owned_by(DATABASE, QUEUE) && data.has_key).then_some(data.key),
            reach: None,
        })
    }

    fn floor(cell: &FloorCell) -> Option<Position> {
        cell.with(|data| (data.owned_by(DATABASE, QUEUE) && data.has_key).then_some(data.key))
    }

    /// A cell that serves the queue, with its floor at `id`.
    fn floor_at(id: i64) -> Box<FloorCell> {
        let cell = cell();
        raise_in(&cell, DATABASE, QUEUE, &seen(&cell), at(id));
        assert_eq!(floor(&cell), Some(at(id)));
        cell
    }

    #[test]
    fn a_raise_passes_jobs_queued_meanwhile_past_where_it_stops() {
        let cell = floor_at(10);
        let read = seen(&cell);
        // Producers commit jobs at the tail while the claim takes 11 to 20.
        for id in 100..105 {
            lower_in(&cell, DATABASE, QUEUE, at(id));
        }
        raise_in(&cell, DATABASE, QUEUE, &read, at(20));
        assert_eq!(floor(&cell), Some(at(20)));
    }

    #[test]
    fn a_raise_stops_at_a_job_queued_below_where_it_would_go() {
        let cell = floor_at(10);
        let read = seen(&cell);
        lower_in(&cell, DATABASE, QUEUE, at(100));
        // Job 15 was queued after the claim's snapshot: the claim never saw it.
        lower_in(&cell, DATABASE, QUEUE, at(15));
        raise_in(&cell, DATABASE, QUEUE, &read, at(20));
        assert_eq!(floor(&cell), Some(at(15)));
    }

    #[test]
    fn a_raise_gives_up_after_a_reset_or_more_lowers_than_remembered() {
        let cell = floor_at(10);
        let read = seen(&cell);
        lower_in(&cell, DATABASE, QUEUE, at(100));
        reset_in(&cell, DATABASE, QUEUE);
        raise_in(&cell, DATABASE, QUEUE, &read, at(20));
        assert_eq!(
            floor(&cell),
            None,
            "a rolled-back claim's jobs may lie anywhere"
        );

        let cell = floor_at(10);
        let read = seen(&cell);
        for id in 0..=REMEMBERED_LOWERS as i64 {
            lower_in(&cell, DATABASE, QUEUE, at(100 + id));
        }
        raise_in(&cell, DATABASE, QUEUE, &read, at(20));
        assert_eq!(
            floor(&cell),
            Some(at(10)),
            "one lower too many is forgotten"
        );
    }

    #[test]
    fn another_queues_lowers_do_not_hold_a_raise_back() {
        let cell = floor_at(10);
        let read = seen(&cell);
        // A queue whose slot is this one enqueues at a position below the raise.
        lower_in(&cell, DATABASE, "other", at(12));
        lower_in(&cell, DATABASE + 1, QUEUE, at(13));
        raise_in(&cell, DATABASE, QUEUE, &read, at(20));
        assert_eq!(floor(&cell), Some(at(20)));
    }
}
