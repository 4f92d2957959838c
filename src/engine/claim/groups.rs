//! The claim's part of groups (`engine::groups`): which of the grouped jobs it picked may run.
//!
//! A claim decides under each group's lock, taken without waiting: a group another claim is
//! deciding is skipped, never waited for, and two claims never both fill a group's last slot.
//! What it needs to know is read after the lock, under the latest snapshot, so a slot freed by
//! a commit is seen: with `group_concurrency` 1, whether a job of the group runs or an
//! unfinished one comes before the candidate; with more, how many of the group run. A job it
//! may not take is let go (its job lock released) and marked waiting, so the claim indexes
//! leave it out until the group moves on. The others (a group another claim is deciding) count
//! as skipped for the claim floor.

use std::collections::{HashMap, HashSet};

use pgrx::spi::SpiClient;

use super::pick::{earliest, Candidate};
use crate::engine::groups;
use crate::engine::model::Position;
use crate::runtime::locks;

/// A group: its key and tenant.
type Group = (String, Option<String>);

/// What a claim knows of the groups it decides for, read under their locks.
enum Known {
    /// Concurrency 1: the candidates that must wait.
    Blocked(HashSet<i64>),
    /// More: for each group, its jobs running now and the jobs of it this claim is taking.
    Slots(HashMap<Group, (i64, i64)>),
}

/// What [`admit`] made of a claim's candidates.
pub struct Admitted {
    /// The candidates their groups allow (all of the ungrouped ones), in the order given.
    pub kept: Vec<Candidate>,
    /// The position of the first one let go that may run later without its group moving on
    /// (another claim was deciding for its group): the claim floor may not pass it.
    pub first_dropped: Option<Position>,
    /// The ones let go and marked waiting for their groups.
    pub marked: Vec<i64>,
}

/// Keeps the candidates their groups allow and lets go of the rest, marking those that must
/// wait for their group to move on.
pub fn admit(
    client: &SpiClient<'_>,
    queue: &str,
    concurrency: i32,
    candidates: &[Candidate],
) -> Admitted {
    if candidates.iter().all(|c| c.group.is_none()) {
        return Admitted {
            kept: candidates.to_vec(),
            first_dropped: None,
            marked: Vec::new(),
        };
    }
    // The groups of the picked jobs, each one's lock taken or not; one lock per group.
    let mut tried: HashSet<&Group> = HashSet::new();
    let locked: HashSet<Group> = candidates
        .iter()
        .filter_map(|c| c.group.as_ref())
        .filter(|group| tried.insert(group))
        .filter(|(key, tenant)| {
            locks::try_lock_group(locks::group_key_hash(queue, tenant.as_deref(), key))
        })
        .cloned()
        .collect();
    let mut known = read_known(client, queue, concurrency, candidates, &locked);

    let mut kept = Vec::with_capacity(candidates.len());
    let mut first_dropped = None;
    let mut marked = Vec::new();
    for candidate in candidates {
        let decision = match &candidate.group {
            None => Decision::Take,
            // Another claim is deciding for this group: skip it.
            Some(group) if !locked.contains(group) => Decision::Skip,
            Some(group) => known.decide(concurrency, group, candidate.position.id),
        };
        match decision {
            Decision::Take => kept.push(candidate.clone()),
            Decision::Skip => {
                locks::unlock_job(candidate.position.id);
                first_dropped = earliest(first_dropped, Some(candidate.position));
            }
            Decision::Wait => {
                locks::unlock_job(candidate.position.id);
                marked.push(candidate.position.id);
            }
        }
    }
    groups::mark_waiting(client, marked.clone());
    Admitted {
        kept,
        first_dropped,
        marked,
    }
}

/// What a claim does with one grouped candidate.
enum Decision {
    /// Take it.
    Take,
    /// Let it go: another claim is deciding for its group.
    Skip,
    /// Let it go and mark it waiting: its group must move on first.
    Wait,
}

impl Known {
    /// Whether job `id` of `group` (locked) may run now, with `concurrency` jobs of the group
    /// at once.
    fn decide(&mut self, concurrency: i32, group: &Group, id: i64) -> Decision {
        match self {
            // Two candidates of one group are never both free: the later one finds the
            // earlier one unfinished, unless it finished (then the take passes it over).
            Known::Blocked(blocked) if blocked.contains(&id) => Decision::Wait,
            Known::Blocked(_) => Decision::Take,
            Known::Slots(slots) => {
                // Every locked group has its row (the statement answers one per group given).
                let Some((running, admitted)) = slots.get_mut(group) else {
                    return Decision::Skip;
                };
                if i64::from(concurrency) - *running - *admitted > 0 {
                    *admitted += 1;
                    Decision::Take
                } else {
                    Decision::Wait
                }
            }
        }
    }
}

/// What the claim needs to know of the `locked` groups of its `candidates`, read now.
fn read_known(
    client: &SpiClient<'_>,
    queue: &str,
    concurrency: i32,
    candidates: &[Candidate],
    locked: &HashSet<Group>,
) -> Known {
    if concurrency > 1 {
        if locked.is_empty() {
            return Known::Slots(HashMap::new());
        }
        let keys: Vec<String> = locked.iter().map(|(key, _)| key.clone()).collect();
        let tenants: Vec<Option<String>> = locked.iter().map(|(_, t)| t.clone()).collect();
        let slots = groups::running_jobs(client, queue, keys, tenants)
            .into_iter()
            .map(|(group, running)| (group, (running, 0)))
            .collect();
        return Known::Slots(slots);
    }
    let deciding: Vec<(i64, &Group)> = candidates
        .iter()
        .filter_map(|c| Some((c.position.id, c.group.as_ref()?)))
        .filter(|(_, group)| locked.contains(group))
        .collect();
    if deciding.is_empty() {
        return Known::Blocked(HashSet::new());
    }
    let ids = deciding.iter().map(|(id, _)| *id).collect();
    let keys = deciding.iter().map(|(_, (key, _))| key.clone()).collect();
    let tenants = deciding
        .iter()
        .map(|(_, (_, tenant))| tenant.clone())
        .collect();
    Known::Blocked(groups::blocked_jobs(client, queue, ids, keys, tenants))
}
