//! Picking the jobs a claim takes: due jobs in claim order, each under its job lock (Rule 1),
//! starting where the claim floor and the reach say nothing claimable lies before.

use std::cell::Cell;
use std::collections::HashSet;

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::{self, INT2OID, INT4OID, INT8OID, TEXTARRAYOID, TEXTOID, TIMESTAMPTZOID};
use pgrx::spi::SpiClient;

use super::filter::ClaimFilter;
use crate::engine::model::Position;
use crate::runtime::locks;
use crate::runtime::queue_state::{QueueState, Seen};
use crate::storage::direct::claim_reader::{self, DueJob, DueQuery};
use crate::storage::{param, timestamptz_arg, Param, Rows, Statement};

/// The parameters both candidate statements take.
const CANDIDATE_PARAMS: &[Param] = &[
    param("queue", TEXTOID),
    param("limit", INT4OID),
    param("kinds", TEXTARRAYOID),
    param("now", TIMESTAMPTZOID),
    param("start priority", INT2OID),
    param("start run_at", TIMESTAMPTZOID),
    param("start id", INT8OID),
    param("tenants", TEXTARRAYOID),
];

/// The columns both candidate statements return.
const CANDIDATE_COLUMNS: &[&str] = &["id", "priority", "run_at", "group_key", "tenant"];

/// Candidates of every kind, through the claim index.
static CANDIDATES: Statement = Statement {
    name: "claim/candidates",
    sql: include_str!("candidates.sql"),
    params: CANDIDATE_PARAMS,
    columns: CANDIDATE_COLUMNS,
};

/// Candidates of every kind within the start's priority: what [`CANDIDATES`] gives first, for
/// less to set up.
static CANDIDATES_IN_PRIORITY: Statement = Statement {
    name: "claim/candidates_in_priority",
    sql: include_str!("candidates_in_priority.sql"),
    params: CANDIDATE_PARAMS,
    columns: CANDIDATE_COLUMNS,
};

/// Candidates of some kinds, through the index by kind: same answers, without walking the
/// jobs of other kinds.
static CANDIDATES_OF_KINDS: Statement = Statement {
    name: "claim/candidates_of_kinds",
    sql: include_str!("candidates_of_kinds.sql"),
    params: CANDIDATE_PARAMS,
    columns: CANDIDATE_COLUMNS,
};

/// The position of the first due queued job of `queue` in claim order from `start` on, of any
/// kind and tenant (the candidates statement unfiltered, for one job); `None` when there is
/// none.
pub fn first_due(
    client: &SpiClient<'_>,
    queue: &str,
    now: pg_sys::TimestampTz,
    start: Option<Position>,
) -> Option<Position> {
    let args: [DatumWithOid; 8] = [
        queue.into(),
        1i32.into(),
        DatumWithOid::null_oid(TEXTARRAYOID),
        timestamptz_arg(now),
        start.map(|k| k.priority).into(),
        start.map_or(DatumWithOid::null_oid(TIMESTAMPTZOID), |k| {
            timestamptz_arg(k.run_at)
        }),
        start.map(|k| k.id).into(),
        DatumWithOid::null_oid(TEXTARRAYOID),
    ];
    let rows = CANDIDATES.run(client, &args);
    let first = rows.iter().next().map(|row| Position::from_row(&row));
    first
}

/// The rows of a candidate statement, as the claim reader gives them.
fn due_jobs(rows: &Rows) -> Vec<DueJob> {
    rows.iter()
        .map(|row| {
            let position = Position::from_row(&row);
            DueJob {
                priority: position.priority,
                run_at: position.run_at,
                id: position.id,
                group_key: row.get("group_key"),
                tenant: row.get("tenant"),
            }
        })
        .collect()
}

/// The earlier of two positions, either of which may be unknown.
pub fn earliest(a: Option<Position>, b: Option<Position>) -> Option<Position> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A job a claim picked (and holds the job lock of).
#[derive(Clone, Debug)]
pub struct Candidate {
    /// Its position in claim order (its id included).
    pub position: Position,
    /// Its group and tenant, when it has a group.
    pub group: Option<(String, Option<String>)>,
}

/// What one claim is picking from.
pub struct Picking<'a> {
    /// The queue.
    pub queue: &'a str,
    /// Which jobs it may take.
    pub filter: &'a ClaimFilter,
    /// Whether the queue's jobs are in the kinds index (its claims_by_kind), which a claim of
    /// some kinds then reads; otherwise it reads the claim index and skips other kinds.
    pub kinds_indexed: bool,
    /// The server's clock at the claim.
    pub now: pg_sys::TimestampTz,
    /// The queue's caches in shared memory.
    pub state: &'a QueueState<'a>,
    /// What the claim read of the queue's floor.
    pub seen: Option<&'a Seen>,
    /// Where the claim's next read past the reach and its next read from the floor go on: just
    /// past the last job each examined. See [`Picking::pick`].
    pub resume: Resume,
    /// See [`Picking::dead_past_floor`].
    pub(super) dead_past_floor: Cell<Option<Position>>,
}

/// Where a claim's reads of candidates go on when it picks again.
#[derive(Default)]
pub struct Resume {
    /// Past the reach.
    past_reach: Cell<Option<Position>>,
    /// From the floor.
    from_floor: Cell<Option<Position>>,
}

impl Resume {
    /// The claim let go of a job it picked at `position` (a freed head came first): its next
    /// reads start there again, not past it.
    pub fn rewind(&self, position: Position) {
        for cell in [&self.past_reach, &self.from_floor] {
            if cell.get().is_some_and(|resume| resume > position) {
                cell.set(Some(position));
            }
        }
    }
}

impl Picking<'_> {
    /// Picks up to `wanted` due jobs, holding their job locks; returns them and the position of
    /// the first job skipped or left unexamined (the floor may not rise past it).
    ///
    /// A claim of every kind that knows its queue's reach, or its tenant's (see
    /// `runtime::floor::extend_reach`), starts just past it, where the jobs are not held by the claims in flight, and goes back
    /// to the floor only for what it still lacks. Without that, concurrent claims all start at
    /// the floor and each tries the locks of the jobs the others hold first: a claim of 100
    /// among 8 tried about 660.
    /// Jobs in `let_go` (picked before by this claim and let go) are passed over.
    pub fn pick_jobs(
        &self,
        client: &SpiClient<'_>,
        wanted: usize,
        let_go: &HashSet<i64>,
    ) -> (Vec<Candidate>, Option<Position>) {
        let floor_key = self.seen.and_then(|s| s.key);
        let reach = self
            .seen
            .filter(|_| self.filter.reach_scope().is_some())
            .and_then(|s| s.reach)
            .filter(|reach| floor_key.is_some_and(|floor| *reach >= floor));
        let passed_over = let_go.clone();
        let (mut picked, mut skipped) = match reach {
            Some(reach) => {
                let past_reach = reach.successor();
                let (picked, skipped) = self.pick(
                    client,
                    wanted,
                    Some(past_reach),
                    &passed_over,
                    &self.resume.past_reach,
                );
                // What lies between the floor and the reach was not examined.
                (
                    picked,
                    Some(skipped.map_or(past_reach, |s| s.min(past_reach))),
                )
            }
            None => self.pick(
                client,
                wanted,
                floor_key,
                &passed_over,
                &self.resume.from_floor,
            ),
        };
        if reach.is_some() && picked.len() < wanted {
            let mut already: HashSet<i64> = picked.iter().map(|c| c.position.id).collect();
            already.extend(let_go);
            let (more, skipped_here) = self.pick(
                client,
                wanted - picked.len(),
                floor_key,
                &already,
                &self.resume.from_floor,
            );
            picked.extend(more);
            skipped = earliest(skipped, skipped_here);
        }
        (picked, skipped)
    }

    /// After a claim of every kind kept `kept` of what it picked: extends the reach of its scope
    /// (the queue's, or its tenant's) to
    /// the last of them in the floor's priority (jobs of later priorities may lie past delayed
    /// jobs of that one, which come due in place), but not past `first_dropped`, a job it
    /// picked and let go (its group was full): nobody holds that one.
    pub fn extend_reach(&self, kept: &[Position], first_dropped: Option<Position>) {
        let Some(scope) = self.filter.reach_scope() else {
            return;
        };
        let Some(seen) = self.seen else {
            return;
        };
        let Some(floor_key) = seen.key else { return };
        let furthest = kept
            .iter()
            .filter(|key| key.priority == floor_key.priority)
            .filter(|key| first_dropped.is_none_or(|dropped| **key < dropped))
            .max();
        if let Some(furthest) = furthest {
            // Should this transaction roll back, the jobs it took come back below the reach: the
            // claim notes them taken (`transitions::jobs_claimed`), so the rollback resets the
            // floor and the reach with it. What it kept but did not take, another claim took.
            self.state.extend_reach(seen, scope, *furthest);
        }
    }

    /// Picks up to `wanted` due jobs in claim order, from `start` on (or from `resume`, past
    /// the last job an earlier pick of this claim from there examined), taking each one's job
    /// lock and skipping those another transaction holds and those in `already` (picked
    /// before). Returns the positions picked and the position of the first job skipped.
    ///
    /// A claim picks again when its groups let some of its picks go or another claim took
    /// them first, and it goes on where it stopped: starting again from the floor, it read
    /// every job the claims in flight hold once more, and again after each batch of marks
    /// (eight sessions claiming 100 jobs each over 1,000 groups read 16,000 candidate rows a
    /// claim). A job let go behind the resume point meanwhile is left to the next claim, as
    /// one let go a moment after this claim had passed it.
    fn pick(
        &self,
        client: &SpiClient<'_>,
        wanted: usize,
        start: Option<Position>,
        already: &HashSet<i64>,
        resume: &Cell<Option<Position>>,
    ) -> (Vec<Candidate>, Option<Position>) {
        let from_floor = resume.get().is_none()
            && start.is_some()
            && start == self.seen.and_then(|seen| seen.key);
        let start = resume.get().or(start);
        let (picked, first_skipped, examined_to) =
            self.pick_from(client, wanted, start, already, from_floor);
        if let Some(last) = examined_to {
            resume.set(Some(last.successor()));
        }
        (picked, first_skipped)
    }

    /// The last of the entries at the start of this claim's read from the floor that no row
    /// version backs, as the read's snapshot saw them: the floor may rise just past it.
    ///
    /// Only for claims of every job under READ COMMITTED, whose reads take their snapshots
    /// after the claim read the floor: an entry they do not see is a job's claimed (or
    /// deleted) version, or a job whose enqueue had not committed then, and that commit's lower
    /// of the floor stops the raise short of it (`runtime::floor::raise`). Without this, the
    /// floor rose only past the jobs a claim took; while an old snapshot held vacuum back, the
    /// entries of jobs other claims took meanwhile lay past it, and every claim and every probe
    /// of an idle queue's waiting claims read them all again.
    pub fn dead_past_floor(&self) -> Option<Position> {
        self.dead_past_floor.get()
    }

    /// Whether this claim's reads from the floor note the entries they find no row behind.
    fn notes_dead_entries(&self) -> bool {
        // SAFETY: reads a backend global.
        let read_committed = unsafe { pg_sys::XactIsoLevel } < pg_sys::XACT_REPEATABLE_READ as i32;
        read_committed && self.filter.takes_every_job()
    }

    /// [`Picking::pick`] from `start` (the claim's floor, when `from_floor`); also returns the
    /// last job it examined.
    fn pick_from(
        &self,
        client: &SpiClient<'_>,
        wanted: usize,
        mut start: Option<Position>,
        already: &HashSet<i64>,
        from_floor: bool,
    ) -> (Vec<Candidate>, Option<Position>, Option<Position>) {
        // Only the first read starts at the floor itself.
        let mut note_dead = from_floor && self.notes_dead_entries();
        // Read a few more candidates than needed, in case other claims in flight hold some.
        // Few: claims start at the queue's reach, past the jobs the claims in flight hold, so
        // they seldom meet one, and every spare row read is paid by every claim, while a second
        // batch is paid only by the few claims that need one. Each further batch is twice as
        // large, so a claim behind many held jobs catches up in a few statements.
        let mut limit = (wanted + 2 + wanted / 8) as i32;
        let mut picked = Vec::with_capacity(wanted);
        let mut first_skipped = None;
        let mut examined_to = None;
        // From a start, its priority first: a claim nearly always finds enough there.
        let mut in_start_priority = start.is_some() && !self.filter.has_kinds();
        loop {
            let direct = start.filter(|_| in_start_priority).and_then(|from| {
                let query = DueQuery {
                    queue: self.queue,
                    priority: from.priority,
                    from_run_at: from.run_at,
                    from_id: from.id,
                    now: self.now,
                    limit: limit as usize,
                    tenants: self.filter.tenants(),
                    note_dead,
                };
                // SAFETY: inside the claim's transaction.
                let scan = unsafe { claim_reader::due_in_priority(&query) }?;
                if let Some((run_at, id)) = scan.dead_to {
                    self.dead_past_floor.set(Some(Position {
                        priority: from.priority,
                        run_at,
                        id,
                    }));
                }
                Some(scan.jobs)
            });
            note_dead = false;
            let candidates = direct.unwrap_or_else(|| {
                let args: [DatumWithOid; 8] = [
                    self.queue.into(),
                    limit.into(),
                    self.filter.kinds_arg(),
                    timestamptz_arg(self.now),
                    start.map(|k| k.priority).into(),
                    start.map_or(DatumWithOid::null_oid(TIMESTAMPTZOID), |k| {
                        timestamptz_arg(k.run_at)
                    }),
                    start.map(|k| k.id).into(),
                    self.filter.tenants_arg(),
                ];
                let statement = if self.filter.has_kinds() && self.kinds_indexed {
                    &CANDIDATES_OF_KINDS
                } else if in_start_priority {
                    &CANDIDATES_IN_PRIORITY
                } else {
                    &CANDIDATES
                };
                due_jobs(&statement.run(client, &args))
            });
            let mut last = None;
            for job in candidates.iter() {
                let key = Position {
                    priority: job.priority,
                    run_at: job.run_at,
                    id: job.id,
                };
                last = Some(key);
                examined_to = Some(key);
                if already.contains(&key.id) {
                    continue;
                }
                if locks::try_lock_job(key.id) {
                    let group = job
                        .group_key
                        .clone()
                        .map(|group| (group, job.tenant.clone()));
                    picked.push(Candidate {
                        position: key,
                        group,
                    });
                    if picked.len() == wanted {
                        return (picked, first_skipped, examined_to);
                    }
                } else if first_skipped.is_none() {
                    first_skipped = Some(key);
                }
            }
            match last {
                Some(last) if candidates.len() == limit as usize => {
                    start = Some(last.successor());
                    limit = limit.saturating_mul(2).min(10_000);
                }
                // The start's priority has no more due jobs: on to the later priorities.
                _ if in_start_priority => {
                    in_start_priority = false;
                    start = start.map(|from| Position::end_of_priority(from.priority));
                }
                _ => return (picked, first_skipped, examined_to),
            }
        }
    }
}
