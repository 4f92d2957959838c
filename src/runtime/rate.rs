//! Cluster-wide rate limits: one token bucket per rate-limited queue in shared memory, shared by
//! every session of the server.
//!
//! A bucket holds up to `burst` tokens and gains `rate` a second, by the server's clock. A claim
//! takes a token per job before picking (never more than the bucket holds), and gives back what
//! it did not use. A waiting claim that finds the bucket empty reserves the next token instead:
//! the bucket goes below zero by one, and the claim sleeps until the refill has paid for it, so
//! waiting claims are admitted one per token, in turn, without polling. A rolled-back claim does
//! not give its tokens back: the limit is a ceiling, and a claim that handed out nothing only
//! makes the rate lower.

use super::attached::Attached;
use super::queue_id::current_database;
use super::spin::SpinLocked;

/// The token buckets in shared memory (`shmem` attaches it).
pub(super) static TABLE: Attached<RateTable> = Attached::new();

/// Rate-limited queues the shared table holds at once; beyond them the slower path serves.
pub const BUCKETS: usize = 256;

/// One queue's bucket.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Bucket {
    used: bool,
    database: u32,
    name_len: u8,
    name: [u8; 64],
    /// Tokens at `at` (below zero: reserved by waiting claims).
    tokens: f64,
    /// When `tokens` was last brought up to date, in microseconds since the PostgreSQL epoch.
    at: i64,
}

/// Every queue's bucket.
pub type RateTable = SpinLocked<[Bucket; BUCKETS]>;

/// A queue's rate limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limit {
    /// Jobs a second.
    pub rate: f64,
    /// Most tokens the bucket holds.
    pub burst: f64,
}

/// What the limiter answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// This many jobs may be taken now (at least 1).
    Granted(u32),
    /// None now; a reserved token is the caller's from this time on (microseconds).
    ReservedFor(i64),
    /// None now, and the caller did not ask to reserve; a token comes at this time.
    EmptyUntil(i64),
    /// The shared table has no room for this queue: use the slower path.
    NoRoom,
}

impl Bucket {
    fn is(&self, database: u32, queue: &str) -> bool {
        self.used
            && self.database == database
            && &self.name[..self.name_len as usize] == queue.as_bytes()
    }

    /// Brings the tokens up to `now`. Callers read the clock at slightly different moments, so
    /// a `now` before the bucket's last update adds nothing and leaves `at` where it is: time
    /// only ever moves forward, or the same interval would pay tokens twice.
    fn refill(&mut self, limit: Limit, now: i64) {
        if now <= self.at {
            self.tokens = self.tokens.min(limit.burst);
            return;
        }
        let elapsed = (now - self.at) as f64 / 1e6;
        self.tokens = (self.tokens + limit.rate * elapsed).min(limit.burst);
        self.at = now;
    }

    /// When the bucket will hold one more token than it does at `now` would need: the time at
    /// which `tokens` reaches `target`.
    fn time_for(&self, limit: Limit, target: f64, now: i64) -> i64 {
        let missing = (target - self.tokens).max(0.0);
        // The float-to-integer cast saturates; the sum must too (a limit too small for the
        // timestamp range would otherwise wrap into the past and admit at once).
        now.saturating_add(((missing / limit.rate) * 1e6).ceil() as i64)
    }
}

/// Finds (or makes) the bucket of `queue` and runs `body` on it, brought up to `now`.
fn with_bucket<R>(
    queue: &str,
    limit: Limit,
    now: i64,
    body: impl FnOnce(&mut Bucket) -> R,
) -> Option<R> {
    let table = TABLE.get()?;
    let database = current_database();
    table.with(|buckets| {
        let index = match buckets.iter().position(|b| b.is(database, queue)) {
            Some(index) => index,
            None => {
                let free = buckets.iter().position(|b| !b.used)?;
                let bucket = &mut buckets[free];
                bucket.used = true;
                bucket.database = database;
                bucket.name_len = queue.len() as u8;
                bucket.name[..queue.len()].copy_from_slice(queue.as_bytes());
                // A new bucket starts full: one burst right away.
                bucket.tokens = limit.burst;
                bucket.at = now;
                free
            }
        };
        let bucket = &mut buckets[index];
        bucket.refill(limit, now);
        Some(body(bucket))
    })
}

/// Takes up to `want` tokens of `queue` now; with `reserve`, reserves the next token when there
/// is none. `None` without shared memory, or with `pg_jobs.fast_paths` off: the caller takes
/// them from `jobs.rate_bucket`.
pub fn acquire(queue: &str, limit: Limit, want: u32, reserve: bool, now: i64) -> Option<Admission> {
    if TABLE.get().is_none() || queue.len() > 63 || !crate::config::settings::fast_paths() {
        return None;
    }
    let admission = with_bucket(queue, limit, now, |bucket| {
        if bucket.tokens >= 1.0 {
            let granted = (bucket.tokens.floor() as u32).min(want).max(1);
            bucket.tokens -= f64::from(granted);
            Admission::Granted(granted)
        } else if reserve {
            bucket.tokens -= 1.0;
            Admission::ReservedFor(bucket.time_for(limit, 0.0, now))
        } else {
            Admission::EmptyUntil(bucket.time_for(limit, 1.0, now))
        }
    });
    Some(admission.unwrap_or(Admission::NoRoom))
}

/// Gives `count` unused tokens of `queue` back.
pub fn refund(queue: &str, limit: Limit, count: u32, now: i64) {
    if count == 0 {
        return;
    }
    let _ = with_bucket(queue, limit, now, |bucket| {
        bucket.tokens = (bucket.tokens + f64::from(count)).min(limit.burst);
    });
}

/// Forgets the bucket of `queue` (its limit was changed or cleared, or the queue dropped): the
/// next claim starts a fresh one.
pub fn forget(queue: &str) {
    let Some(table) = TABLE.get() else { return };
    let database = current_database();
    table.with(|buckets| {
        for bucket in buckets.iter_mut().filter(|b| b.is(database, queue)) {
            bucket.used = false;
        }
    });
}
