//! One attempt's rounds of picking and taking: each round picks the due jobs still wanted,
//! merges them with the freed heads, lets their groups decide, and takes what is left with one
//! statement; rounds go on until the attempt has what it may take, the queue has nothing more,
//! or it examined its limit.

use std::collections::HashSet;

use pgrx::datum::{DatumWithOid, Interval};
use pgrx::pg_sys::{self, INT8ARRAYOID, INTERVALOID, TEXTOID, TIMESTAMPTZOID, UUIDARRAYOID};
use pgrx::spi::SpiClient;

use crate::engine::groups::{self as engine_groups, unmark, GroupRef};
use crate::engine::model::Position;
use crate::engine::queues::{self, unknown_queue};
use crate::engine::transitions;
use crate::runtime::queue_state::{QueueState, Seen};
use crate::storage::rows::ClaimedRow;
use crate::storage::{statement, timestamptz_arg, Statement};

use super::pick::{earliest, Candidate, Picking};
use super::{advance_floor, freed, groups, new_floor, probe, token, ClaimRequest, Probe};

static TAKE: Statement = statement!(
    claim/take(ids: INT8ARRAYOID, leases: UUIDARRAYOID, worker: TEXTOID, lease_length: INTERVALOID,
        now: TIMESTAMPTZOID) -> (claimed, priority, run_at, id)
);

/// Most candidates one attempt examines (picked and let go again because their group was
/// full), per job it wants, before it returns with what it has: groups that are all busy must
/// not make a claim walk the whole queue.
const EXAMINED_PER_JOB: usize = 10;

/// What one attempt has picked, taken and let go so far.
pub struct Rounds<'r, 'q> {
    request: &'r ClaimRequest<'q>,
    flow: Option<queues::FlowSettings>,
    now: pg_sys::TimestampTz,
    /// Most jobs the attempt may take (its rate limit may allow fewer than asked for).
    allowed: usize,
    /// The caller's memory context: claimed rows copied here outlive SPI and any
    /// subtransaction.
    result_context: pg_sys::MemoryContext,
    /// The jobs taken, each with its place in claim order.
    claimed: Vec<(Position, ClaimedRow)>,
    /// The first job skipped (held by another claim, or let go): the floor may not pass it.
    first_skipped: Option<Position>,
    /// The first job let go that may run later without its group moving on: the reach may
    /// not pass it.
    first_dropped: Option<Position>,
    /// Where the jobs their groups allowed lie in the claim index.
    kept_positions: Vec<Position>,
    /// Jobs let go: later rounds do not pick them again.
    let_go: HashSet<i64>,
    /// Candidates examined, against [`EXAMINED_PER_JOB`].
    examined: usize,
    /// Freed heads taken: they lie outside the claim indexes and tell nothing of the floor.
    freed_taken: HashSet<i64>,
    /// Whether the attempt stopped at its limit of candidates examined.
    capped: bool,
}

impl<'r, 'q> Rounds<'r, 'q> {
    /// An attempt of `request` as of `now` that may take up to `allowed` jobs, copying the
    /// rows it claims into `result_context`.
    pub fn new(
        request: &'r ClaimRequest<'q>,
        flow: Option<queues::FlowSettings>,
        now: pg_sys::TimestampTz,
        allowed: usize,
        result_context: pg_sys::MemoryContext,
    ) -> Self {
        Rounds {
            request,
            flow,
            now,
            allowed,
            result_context,
            claimed: Vec::new(),
            first_skipped: None,
            first_dropped: None,
            kept_positions: Vec::new(),
            let_go: HashSet::new(),
            examined: 0,
            freed_taken: HashSet::new(),
            capped: false,
        }
    }

    /// Runs rounds until the attempt has what it may take, the queue has nothing more for it,
    /// or it examined its limit. A picked job that another claim took (and committed) after
    /// the candidates' snapshot is not taken, nor one its group does not allow now; the next
    /// round picks again, with a fresh snapshot, for the ones missing.
    pub fn run(
        &mut self,
        client: &SpiClient<'_>,
        picking: &Picking<'_>,
        mut freed: Vec<Candidate>,
    ) {
        loop {
            let wanted = self.allowed - self.claimed.len();
            let (candidates, freed_kept) = self.pick(client, picking, &mut freed, wanted);
            if candidates.is_empty() && freed_kept.is_empty() {
                return;
            }
            let offered = candidates.len() + freed_kept.len();
            self.examined += offered;
            let kept = self.admit(client, &candidates);
            let taken = self.take(client, &kept, &freed_kept);
            if self.examined >= EXAMINED_PER_JOB * self.request.n.max(100) {
                self.capped = true;
                return;
            }
            let exhausted = offered < wanted;
            if self.claimed.len() >= self.allowed || (exhausted && taken == offered) {
                return;
            }
        }
    }

    /// How many jobs the rounds took.
    pub fn taken(&self) -> usize {
        self.claimed.len()
    }

    /// Lets the claim's reach cover what the rounds read.
    pub fn extend_reach(&self, picking: &Picking<'_>) {
        picking.extend_reach(&self.kept_positions, self.first_dropped);
    }

    /// Raises the queue's floor (`seen` when the attempt began) past what the rounds took
    /// from the claim index, when the claim's filter lets it tell what lies below.
    pub fn raise_floor(&self, client: &SpiClient<'_>, state: &QueueState<'_>, seen: &Seen) {
        if !self.request.filter.takes_every_job() {
            advance_floor(client, state, seen, self.now, self.claimed.len());
            return;
        }
        let taken: Vec<Position> = self
            .claimed
            .iter()
            .map(|(key, _)| *key)
            .filter(|key| !self.freed_taken.contains(&key.id))
            .collect();
        match new_floor(client, state.queue(), seen, &taken, self.first_skipped) {
            Some(to) => state.raise_floor(seen, to),
            // Every job it took lay past the reach: it cannot tell what lies between the floor
            // and the reach, so it cannot raise the floor past it. Left at that, the floor rose
            // only after the worker forgot the reach at its tick, and the first claims after
            // each tick walked a tick's worth of claimed jobs' index entries.
            None if !taken.is_empty() => advance_floor(client, state, seen, self.now, taken.len()),
            None => {}
        }
    }

    /// The jobs taken in claim order, or, when there are none, what the queue looks like.
    pub fn finish(self, client: &SpiClient<'_>) -> (Vec<ClaimedRow>, Option<Probe>) {
        let queue = self.request.queue;
        if self.claimed.is_empty() {
            let mut probe = probe(client, queue);
            probe.capped = self.capped;
            return (Vec::new(), Some(probe));
        }
        transitions::jobs_claimed(queue, self.claimed.len());
        let mut claimed = self.claimed;
        // Claim order: priority, then run_at, then id (Rule 2).
        claimed.sort_unstable_by_key(|(key, _)| *key);
        (claimed.into_iter().map(|(_, row)| row).collect(), None)
    }

    /// Picks up to `wanted` due jobs from the claim index and merges them in claim order with
    /// the freed heads not offered yet: the picked ones, and the freed heads kept.
    fn pick(
        &mut self,
        client: &SpiClient<'_>,
        picking: &Picking<'_>,
        freed: &mut Vec<Candidate>,
        wanted: usize,
    ) -> (Vec<Candidate>, Vec<Candidate>) {
        let (candidates, skipped) = picking.pick_jobs(client, wanted, &self.let_go);
        self.first_skipped = earliest(self.first_skipped, skipped);
        if freed.is_empty() {
            return (candidates, Vec::new());
        }
        let merged = freed::merge(picking.state, std::mem::take(freed), candidates, wanted);
        if let Some(let_go_here) = merged.first_let_go {
            picking.resume.rewind(let_go_here);
            self.first_skipped = earliest(self.first_skipped, Some(let_go_here));
            self.first_dropped = earliest(self.first_dropped, Some(let_go_here));
        }
        (merged.picked, merged.freed)
    }

    /// Keeps the candidates their groups allow. Jobs marked waiting leave the claim indexes:
    /// the floor and the reach may pass them (clearing the mark brings the floor back down).
    fn admit(&mut self, client: &SpiClient<'_>, candidates: &[Candidate]) -> Vec<Candidate> {
        let concurrency = self.flow.map_or(1, |f| f.group_concurrency);
        let groups::Admitted {
            kept,
            first_dropped,
            marked,
        } = groups::admit(client, self.request.queue, concurrency, candidates);
        self.let_go.extend(marked);
        if let Some(dropped) = first_dropped {
            self.first_dropped = earliest(self.first_dropped, Some(dropped));
            self.first_skipped = earliest(self.first_skipped, Some(dropped));
            self.let_go.extend(
                candidates
                    .iter()
                    .map(|c| c.position.id)
                    .filter(|id| !kept.iter().any(|k| k.position.id == *id)),
            );
        }
        self.kept_positions.extend(kept.iter().map(|c| c.position));
        kept
    }

    /// Takes the `kept` jobs and freed heads that are still queued, each under a fresh lease,
    /// with one statement, and returns how many it took. The groups of grouped jobs it missed
    /// move on; freed heads it missed have their marks cleared.
    fn take(
        &mut self,
        client: &SpiClient<'_>,
        kept: &[Candidate],
        freed_kept: &[Candidate],
    ) -> usize {
        let queue = self.request.queue;
        let picked: Vec<i64> = kept
            .iter()
            .chain(freed_kept)
            .map(|c| c.position.id)
            .collect();
        let picked_count = picked.len();
        let mut taken_count = 0;
        let mut taken_ids: HashSet<i64> = HashSet::new();
        if !picked.is_empty() {
            let leases: Vec<pgrx::Uuid> = picked.iter().map(|_| token::lease_token()).collect();
            let take_args: [DatumWithOid; 5] = [
                picked.into(),
                leases.into(),
                self.request.worker.as_str().into(),
                lease_length(self.request, self.flow).into(),
                timestamptz_arg(self.now),
            ];
            let taken = TAKE.run(client, &take_args);
            taken_count = taken.len();
            for row in taken.iter() {
                taken_ids.extend(row.get::<i64>("id"));
                if let Some(claimed) = row.get_in::<ClaimedRow>("claimed", self.result_context) {
                    self.claimed.push((Position::from_row(&row), claimed));
                }
            }
        }
        if taken_count < picked_count {
            move_missed_groups_on(client, queue, kept.iter().chain(freed_kept), &taken_ids);
        }
        if !freed_kept.is_empty() {
            self.settle_freed(client, freed_kept);
        }
        taken_count
    }

    /// After the take: the freed heads `kept` that it took are noted in `freed_taken`; any it
    /// did not take (changed since they were checked) have their marks cleared. Either way
    /// their entries are dropped when this transaction commits.
    fn settle_freed(&mut self, client: &SpiClient<'_>, kept: &[Candidate]) {
        let claimed_ids: HashSet<i64> = self.claimed.iter().map(|(key, _)| key.id).collect();
        let mut not_taken = Vec::new();
        for candidate in kept {
            let id = candidate.position.id;
            if claimed_ids.contains(&id) {
                self.freed_taken.insert(id);
            } else {
                not_taken.push(id);
            }
        }
        unmark(client, not_taken);
    }
}

/// The lease length of a claim's jobs: the request's, or its queue's (from the settings the
/// session keeps: reading it in the take statement set up a subquery and its index scan on
/// every call).
fn lease_length(request: &ClaimRequest<'_>, flow: Option<queues::FlowSettings>) -> Interval {
    match (request.lease, flow) {
        (Some(lease), _) => lease,
        (None, Some(flow)) => flow.lease,
        // It had jobs to take a moment ago: it was dropped since.
        (None, None) => unknown_queue(request.queue),
    }
}

/// After a take that missed some of the jobs it meant to take (`picked`, of `queue`; `taken`
/// the ones it took): moves on the groups of the grouped ones it missed, under their locks,
/// which this claim holds. A late holder's settle finished such a job while this claim waited
/// for its row, and moved the group on without the group's lock, which this claim held
/// (`engine::groups::move_on`): the jobs this claim marked waiting behind it, in this
/// transaction, were not seen then; they are now.
fn move_missed_groups_on<'a>(
    client: &SpiClient<'_>,
    queue: &str,
    picked: impl Iterator<Item = &'a Candidate>,
    taken: &HashSet<i64>,
) {
    let missed: Vec<GroupRef> = picked
        .filter(|c| !taken.contains(&c.position.id))
        .filter_map(|c| {
            let (key, tenant) = c.group.clone()?;
            Some(GroupRef {
                queue: queue.to_owned(),
                key,
                tenant,
            })
        })
        .collect();
    engine_groups::move_on(client, missed);
}
