//! The claim's part of groups (`engine::groups`): which of the grouped jobs it picked may run.
//!
//! A claim decides under each group's lock, taken without waiting: a group another claim is
//! deciding is skipped, never waited for, and two claims never both fill a group's last slot.
//! The group's state (its running jobs and its head) is read after the lock, under the latest
//! snapshot, so a slot freed by a commit is seen. A job it may not take is let go (its job
//! lock released); one behind its group's head (concurrency 1) or in a full group is marked
//! waiting, so the claim indexes leave it out until the group moves on.
//! The others (a group another claim is deciding) count as skipped for the claim floor.

use std::collections::HashMap;

use pgrx::spi::SpiClient;

use super::pick::{earliest, Candidate};
use crate::engine::groups::{self, GroupState};
use crate::engine::model::Position;
use crate::runtime::locks;

/// A group: its key and tenant.
type Group = (String, Option<String>);

/// What a claim knows of one group it decides for.
struct Deciding {
    /// Its state as read under the lock.
    state: GroupState,
    /// Jobs of it this claim is taking now.
    admitted: i64,
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
    // The groups in the order their jobs were picked; each one's lock, or none.
    let mut picked_groups: Vec<Group> = Vec::new();
    for group in candidates.iter().filter_map(|c| c.group.clone()) {
        if !picked_groups.contains(&group) {
            picked_groups.push(group);
        }
    }
    let locked: Vec<Group> = picked_groups
        .into_iter()
        .filter(|(key, tenant)| {
            locks::try_lock_group(locks::group_key_hash(queue, tenant.as_deref(), key))
        })
        .collect();
    let mut states = read_states(client, queue, &locked);

    let mut kept = Vec::with_capacity(candidates.len());
    let mut first_dropped = None;
    let mut marked = Vec::new();
    for candidate in candidates {
        let decision = match &candidate.group {
            None => Decision::Take,
            // Another claim is deciding for this group: skip it.
            Some(group) => match states.get_mut(group) {
                None => Decision::Skip,
                Some(deciding) => deciding.decide(concurrency, candidate.position.id),
            },
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
    /// Let it go: it may run without its group moving on (its group's head while a later job
    /// of it runs), or another claim is deciding for its group.
    Skip,
    /// Let it go and mark it waiting: its group must move on first.
    Wait,
}

impl Deciding {
    /// Whether job `id` of this group may run now, with `concurrency` jobs of the group at once.
    fn decide(&mut self, concurrency: i32, id: i64) -> Decision {
        let room = i64::from(concurrency) - self.state.running - self.admitted;
        let decision = if concurrency > 1 {
            if room > 0 {
                Decision::Take
            } else {
                Decision::Wait
            }
        } else if self.state.head != Some(id) {
            // An earlier job of the group is unfinished: it runs first.
            Decision::Wait
        } else if room > 0 {
            Decision::Take
        } else {
            Decision::Skip
        };
        if matches!(decision, Decision::Take) {
            self.admitted += 1;
        }
        decision
    }
}

/// The state of each locked group, read now.
fn read_states(client: &SpiClient<'_>, queue: &str, groups: &[Group]) -> HashMap<Group, Deciding> {
    if groups.is_empty() {
        return HashMap::new();
    }
    let keys: Vec<String> = groups.iter().map(|(key, _)| key.clone()).collect();
    let tenants: Vec<Option<String>> = groups.iter().map(|(_, tenant)| tenant.clone()).collect();
    groups::read_states(client, queue, keys, tenants)
        .into_iter()
        .map(|(group, state)| (group, Deciding { state, admitted: 0 }))
        .collect()
}
