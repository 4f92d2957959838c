//! Job states, the outcomes of calls that present a lease, and positions in claim order.

pub use crate::runtime::Position;

/// The state of a job (`jobs.state`): `queued → running → succeeded | failed | cancelled`, and
/// `running → queued` on retry, release or reclaim; `waiting → queued` when a job's
/// dependencies succeed or its signal comes, and `running → waiting` on an await
/// (`engine::workflows`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Waiting to be claimed (due at its run_at).
    Queued,
    /// Held by a lease.
    Running,
    /// Finished: completed.
    Succeeded,
    /// Finished: out of attempts, or failed without retry.
    Failed,
    /// Finished: cancelled.
    Cancelled,
    /// Waiting for its dependencies or a signal: no lease, no attempt spent, never claimed.
    Waiting,
}

impl JobState {
    /// Every state, in the order of the `jobs.state` enum.
    pub const ALL: [JobState; 6] = [
        JobState::Queued,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Waiting,
    ];

    /// The state's SQL name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Waiting => "waiting",
        }
    }

    /// The state with this SQL name.
    pub fn parse(name: &str) -> Option<JobState> {
        JobState::ALL
            .into_iter()
            .find(|state| state.as_str() == name)
    }

    /// Whether the state is terminal (Rule 8): only `jobs_retry` leaves it.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }
}

/// What a heartbeat or settle call answers (Rule 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A heartbeat renewed the lease.
    Running,
    /// A failure was scheduled for a retry, or a release handed the job back.
    Queued,
    /// The job completed.
    Succeeded,
    /// The job ended failed.
    Failed,
    /// The job was cancelled under this lease; nothing was recorded (Rule 7).
    Cancelled,
    /// An await handed the job back to wait for its signal.
    Waiting,
    /// The lease is not the job's current one (or there is no such job); nothing changed.
    Lost,
}

impl Outcome {
    /// The answer as the SQL functions return it.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Running => "running",
            Outcome::Queued => "queued",
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
            Outcome::Waiting => "waiting",
            Outcome::Lost => "lost",
        }
    }
}

impl Position {
    /// Reads a job's position from the columns `priority`, `run_at` and `id` of a row, the way
    /// every statement that makes a job queued returns it.
    pub fn from_row(row: &crate::storage::Row<'_>) -> Position {
        Position {
            priority: row.expect("priority"),
            run_at: i64::from(row.expect::<pgrx::datum::TimestampWithTimeZone>("run_at")),
            id: row.expect("id"),
        }
    }
}
