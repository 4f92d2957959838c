//! Groups: jobs that share a `group_key` in a queue run at most `group_concurrency` at a time,
//! and with concurrency 1 strictly in enqueue order (a later job of the group waits while an
//! earlier one is queued, even for a retry's backoff, or running).
//!
//! A claim decides which of the grouped jobs it picked may run under each group's lock, taken
//! without waiting: a group another claim is deciding is skipped, never waited for, and two
//! claims never both fill a group's last slot. The group's state (its running jobs and its
//! head) is read after the lock, with a fresh snapshot, so a slot freed by a commit is seen.
//! Jobs it may not take are let go (their job locks released) and count as skipped for the
//! claim floor, so the floor never passes a job that waits for its group: when the group frees
//! a slot (complete, fail, release, cancel, reclaim), the job is found where it is.

use std::collections::HashMap;

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::{TEXTARRAYOID, TEXTOID};
use pgrx::spi::SpiClient;

use super::pick::{earliest, Candidate};
use crate::engine::model::Position;
use crate::runtime::locks;
use crate::storage::{param, Statement};

static GROUP_STATE: Statement = Statement {
    name: "claim/group_state",
    sql: include_str!("group_state.sql"),
    params: &[
        param("queue", TEXTOID),
        param("group keys", TEXTARRAYOID),
        param("tenants", TEXTARRAYOID),
    ],
    columns: &["group_key", "tenant", "running", "head"],
};

/// A group: its key and tenant.
type Group = (String, Option<String>);

/// What a claim knows of one group it decides for.
struct GroupState {
    /// Its jobs running now (this claim's included, once taken).
    running: i64,
    /// Its first unfinished job, if any.
    head: Option<i64>,
    /// Jobs of it this claim is taking now.
    admitted: i64,
}

/// Keeps the candidates their groups allow (all of the ungrouped ones) and lets go of the
/// rest; returns the kept candidates, in the order given, and the position of the first one let
/// go.
pub fn admit(
    client: &SpiClient<'_>,
    queue: &str,
    concurrency: i32,
    candidates: &[Candidate],
) -> (Vec<Candidate>, Option<Position>) {
    if candidates.iter().all(|c| c.group.is_none()) {
        return (candidates.to_vec(), None);
    }
    // The groups in the order their jobs were picked; each one's lock, or none.
    let mut groups: Vec<Group> = Vec::new();
    for group in candidates.iter().filter_map(|c| c.group.clone()) {
        if !groups.contains(&group) {
            groups.push(group);
        }
    }
    let locked: Vec<Group> = groups
        .into_iter()
        .filter(|(key, tenant)| {
            locks::try_lock_group(locks::group_key_hash(queue, tenant.as_deref(), key))
        })
        .collect();
    let mut states = read_states(client, queue, &locked);

    let mut kept = Vec::with_capacity(candidates.len());
    let mut first_dropped = None;
    for candidate in candidates {
        let allowed = match &candidate.group {
            None => true,
            Some(group) => match states.get_mut(group) {
                // Another claim is deciding for this group: skip it.
                None => false,
                Some(state) => {
                    let room = i64::from(concurrency) - state.running - state.admitted;
                    let in_order = concurrency > 1
                        || (state.running == 0 && state.head == Some(candidate.position.id));
                    let allowed = room > 0 && in_order;
                    if allowed {
                        state.admitted += 1;
                    }
                    allowed
                }
            },
        };
        if allowed {
            kept.push(candidate.clone());
        } else {
            locks::unlock_job(candidate.position.id);
            first_dropped = earliest(first_dropped, Some(candidate.position));
        }
    }
    (kept, first_dropped)
}

/// The running jobs and head of each group, read now.
fn read_states(
    client: &SpiClient<'_>,
    queue: &str,
    groups: &[Group],
) -> HashMap<Group, GroupState> {
    if groups.is_empty() {
        return HashMap::new();
    }
    let keys: Vec<String> = groups.iter().map(|(key, _)| key.clone()).collect();
    let tenants: Vec<Option<String>> = groups.iter().map(|(_, tenant)| tenant.clone()).collect();
    let args: [DatumWithOid; 3] = [queue.into(), keys.into(), tenants.into()];
    GROUP_STATE
        .run(client, &args)
        .iter()
        .map(|row| {
            (
                (row.expect("group_key"), row.get("tenant")),
                GroupState {
                    running: row.get("running").unwrap_or(0),
                    head: row.get("head"),
                    admitted: 0,
                },
            )
        })
        .collect()
}
