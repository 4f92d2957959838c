//! A job's position in claim order.

/// A position in claim order: priority, then run_at, then id (Rule 2). Claim floors and
/// reaches are positions; every statement that makes a job queued returns the job's position
/// as the columns `priority`, `run_at` and `id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    /// The job's priority (lower runs first).
    pub priority: i16,
    /// Its run_at, in microseconds since the Postgres epoch.
    pub run_at: i64,
    /// Its id.
    pub id: i64,
}

impl Position {
    /// The next position in claim order: ids are integers, so nothing lies strictly between.
    pub fn successor(self) -> Position {
        Position {
            id: self.id.saturating_add(1),
            ..self
        }
    }

    /// The last position of `priority` in claim order: every job of that priority lies before
    /// it (a job's run_at is finite), every job of a later priority after it.
    pub fn end_of_priority(priority: i16) -> Position {
        Position {
            priority,
            run_at: i64::MAX,
            id: i64::MAX,
        }
    }
}
