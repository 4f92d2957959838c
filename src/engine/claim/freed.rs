//! The claim's part of freed heads (`runtime::freed_heads`): the waiting heads of groups of
//! concurrency 1 that settles handed over in shared memory, taken before the claim reads the
//! claim index and merged with what it picks there, in claim order (Rule 2).
//!
//! Each one is checked under its job's lock and its group's (both taken without waiting, as a
//! claim takes them for the jobs it picks), by reading the group's head under the latest
//! snapshot, unless no commit that queued jobs of its queue can have become visible since its
//! settle read the group (`runtime::queued_changes`; a burn-down queues none): one that is no
//! longer its group's waiting head is dropped (what comes before it
//! moves the group on when it ends), one whose job or group is busy is given back for a later
//! claim, and one that changed since it was offered (a unique `replace` moved it) has its mark
//! cleared, so the claim indexes serve it.

use std::collections::HashSet;

use pgrx::pg_sys;
use pgrx::spi::SpiClient;

use super::filter::ClaimFilter;
use super::pick::Candidate;
use crate::engine::groups;
use crate::engine::model::Position;
use crate::runtime::locks;
use crate::runtime::queue_state::{FreedHead, QueueState, Wanted};
use crate::storage::direct::group_reader::{self, GroupName};

/// What a claim wants of freed heads: due now, of its kinds and tenants.
struct Wants<'a> {
    filter: &'a ClaimFilter,
    now: pg_sys::TimestampTz,
}

impl Wanted for Wants<'_> {
    fn wants(&self, kind: &str, tenant: Option<&str>, run_at: i64) -> bool {
        run_at <= self.now && self.filter.admits(kind, tenant)
    }
}

/// Takes up to `wanted` freed heads of `queue` the claim may take (`filter`, due at `now`),
/// each still its group's waiting head: returns them in claim order, holding their job locks
/// and their groups' locks. The entries taken and not given back stay this transaction's: a
/// commit drops them, a rollback gives them back.
pub fn pick(
    client: &SpiClient<'_>,
    state: &QueueState<'_>,
    filter: &ClaimFilter,
    now: pg_sys::TimestampTz,
    wanted: usize,
) -> Vec<Candidate> {
    // Entries that no longer hold (their jobs ran, or went with a TRUNCATE) come first in claim
    // order: take again past them, as they stay this transaction's, until enough hold or none
    // are left.
    let mut candidates: Vec<Candidate> = Vec::new();
    let mut seen: HashSet<i64> = HashSet::new();
    // Given back only at the end, so the next take passes over them too.
    let mut busy: Vec<i64> = Vec::new();
    while candidates.len() < wanted {
        let heads = state.take_freed_heads(wanted - candidates.len(), &Wants { filter, now });
        if heads.is_empty() {
            break;
        }
        candidates.extend(check(
            client, state, filter, now, heads, &mut seen, &mut busy,
        ));
    }
    for id in busy {
        state.give_back_freed_head(id);
    }
    candidates.sort_unstable_by_key(|c| c.position);
    candidates
}

/// The freed `heads` a claim took that still hold, as candidates, under their job's and
/// group's locks; the others are noted in `busy` (their job or group is another
/// transaction's, to be given back) or left to be dropped. `seen`: the jobs checked before,
/// whose second entries are passed over.
fn check(
    client: &SpiClient<'_>,
    state: &QueueState<'_>,
    filter: &ClaimFilter,
    now: pg_sys::TimestampTz,
    heads: Vec<FreedHead>,
    seen: &mut HashSet<i64>,
    busy: &mut Vec<i64>,
) -> Vec<Candidate> {
    let mut locked = Vec::with_capacity(heads.len());
    for head in heads {
        let id = head.position.id;
        // A job offered twice: the second entry is dropped when this transaction commits.
        if !seen.insert(id) {
            continue;
        }
        if !locks::try_lock_job(id) {
            busy.push(id);
            continue;
        }
        let group_lock =
            locks::group_key_hash(state.queue(), head.tenant.as_deref(), &head.group_key);
        if !locks::try_lock_group(group_lock) {
            locks::unlock_job(id);
            busy.push(id);
            continue;
        }
        locked.push(head);
    }
    // Heads whose queue saw no commit that queued jobs since their settle read their groups are
    // still their groups' waiting heads (`runtime::queued_changes`): as offered, no read.
    let mut candidates = Vec::with_capacity(locked.len());
    locked.retain(|head| {
        if !state.unchanged_since(head.stamp) {
            return true;
        }
        candidates.push(Candidate {
            position: head.position,
            group: Some((head.group_key.clone(), head.tenant.clone())),
        });
        false
    });
    if locked.is_empty() {
        return candidates;
    }
    let names: Vec<GroupName<'_>> = locked
        .iter()
        .map(|head| GroupName {
            queue: state.queue(),
            key: &head.group_key,
            tenant: head.tenant.as_deref(),
            before: None,
        })
        .collect();
    // SAFETY: inside the claim's transaction.
    let found = unsafe { group_reader::group_heads(&names) };
    let Some(found) = found else {
        // They cannot be checked here (row-level security applies to the owner): their marks
        // are cleared, and claims decide them through the claim indexes.
        let ids: Vec<i64> = locked.iter().map(|head| head.position.id).collect();
        for &id in &ids {
            locks::unlock_job(id);
        }
        groups::unmark(client, ids);
        return candidates;
    };
    let mut changed = Vec::new();
    for (head, found) in locked.into_iter().zip(found) {
        let id = head.position.id;
        match found {
            Some(found) if found.id == id && found.waiting => {
                if found.run_at <= now && filter.admits(&found.kind, head.tenant.as_deref()) {
                    candidates.push(Candidate {
                        position: Position {
                            priority: found.priority,
                            run_at: found.run_at,
                            id,
                        },
                        group: Some((head.group_key, head.tenant)),
                    });
                    continue;
                }
                changed.push(id);
            }
            // Not its group's waiting head any more.
            _ => {}
        }
        // Dropped when this transaction commits (see `runtime::freed_heads::give_back`).
        locks::unlock_job(id);
    }
    groups::unmark(client, changed);
    candidates
}

/// What [`merge`] kept.
pub struct Merged {
    /// The freed heads kept, in claim order.
    pub freed: Vec<Candidate>,
    /// The jobs picked from the claim index kept, in claim order.
    pub picked: Vec<Candidate>,
    /// The first job picked from the claim index that was let go: the claim's floor and reach
    /// may not pass it, and its next read of the index starts there again.
    pub first_let_go: Option<Position>,
}

/// Of the freed heads `freed` and the jobs `picked` from the claim index (all under their job
/// locks), keeps the first `wanted` in claim order and lets go of the others.
pub fn merge(
    state: &QueueState<'_>,
    freed: Vec<Candidate>,
    picked: Vec<Candidate>,
    wanted: usize,
) -> Merged {
    let freed_ids: HashSet<i64> = freed.iter().map(|c| c.position.id).collect();
    let mut positions: Vec<Position> = freed.iter().map(|c| c.position).collect();
    let mut distinct_picked = Vec::with_capacity(picked.len());
    for candidate in picked {
        if freed_ids.contains(&candidate.position.id) {
            // Its mark was cleared meanwhile, and the job lock was taken twice: let go once.
            locks::unlock_job(candidate.position.id);
        } else {
            positions.push(candidate.position);
            distinct_picked.push(candidate);
        }
    }
    positions.sort_unstable();
    let cutoff = (positions.len() > wanted).then(|| positions.get(wanted.wrapping_sub(1)));
    let kept = |position: Position| match cutoff {
        None => true,
        Some(None) => false,
        Some(Some(last)) => position <= *last,
    };
    let mut merged = Merged {
        freed: Vec::with_capacity(freed.len()),
        picked: Vec::with_capacity(distinct_picked.len()),
        first_let_go: None,
    };
    for candidate in freed {
        if kept(candidate.position) {
            merged.freed.push(candidate);
        } else {
            locks::unlock_job(candidate.position.id);
            state.give_back_freed_head(candidate.position.id);
        }
    }
    for candidate in distinct_picked {
        if kept(candidate.position) {
            merged.picked.push(candidate);
        } else {
            locks::unlock_job(candidate.position.id);
            if merged
                .first_let_go
                .is_none_or(|first| candidate.position < first)
            {
                merged.first_let_go = Some(candidate.position);
            }
        }
    }
    merged
}
