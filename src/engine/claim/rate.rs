//! A claim's share of its queue's rate limit: at most `rate_limit` jobs a second across every
//! session, with bursts of at most `rate_burst` (by the server's clock).
//!
//! With shared memory the tokens come from the queue's bucket there (`runtime::rate`); a claim
//! takes what it may before picking and gives back what it did not use. Without it (no
//! preload, or more limited queues than the shared table holds), from a row of
//! `jobs.rate_bucket` locked for the claim's transaction: slower, as claims of the queue then
//! take turns, but the limit holds all the same.

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::{self, FLOAT8OID, TEXTOID, TIMESTAMPTZOID};
use pgrx::spi::SpiClient;

use super::{probe, ClaimRequest, Probe};
use crate::pg::clock::server_now;
use crate::runtime::queue_state::{Admission, Limit, QueueState};
use crate::storage::{statement, timestamptz_arg, Statement};

static RATE_BUCKET: Statement = statement!(
    claim/rate_bucket(queue: TEXTOID, rate: FLOAT8OID, burst: FLOAT8OID, now: TIMESTAMPTZOID)
        -> (tokens)
);

static RATE_SPEND: Statement = statement!(
    claim/rate_spend(queue: TEXTOID, tokens: FLOAT8OID) -> ()
);

/// Gives back a token a waiting claim reserved and will not spend (its wait ran out).
pub fn give_back_reservation(queue: &str) {
    if let Some(Some(limit)) =
        crate::engine::queues::flow_settings(queue).map(|settings| settings.rate)
    {
        QueueState::of(queue).refund_tokens(limit, 1, server_now());
    }
}

/// Where a claim's tokens came from.
enum Source {
    /// The queue has no rate limit.
    Unlimited,
    /// The shared bucket: `held` tokens taken (reserved ones included), to give back unused.
    Shared {
        limit: Limit,
        held: u32,
        next: Option<i64>,
    },
    /// The locked row of `jobs.rate_bucket`: `held` tokens there now.
    Table { limit: Limit, held: u32 },
}

/// The jobs one attempt may take under its queue's rate limit.
pub struct Budget {
    source: Source,
    allowed: usize,
}

impl Budget {
    /// Takes the tokens for up to `request.n` jobs (`prepaid` of them reserved earlier).
    pub fn open(
        client: &SpiClient<'_>,
        state: &QueueState<'_>,
        limit: Option<Limit>,
        request: &ClaimRequest<'_>,
        now: pg_sys::TimestampTz,
        prepaid: u32,
    ) -> Budget {
        let n = request.n as u32;
        let Some(limit) = limit else {
            return Budget {
                source: Source::Unlimited,
                allowed: request.n,
            };
        };
        let want = n.saturating_sub(prepaid);
        let shared = if want == 0 {
            Some(Admission::Granted(0))
        } else {
            state.acquire_tokens(limit, want, false, server_now())
        };
        match shared {
            Some(Admission::Granted(granted)) => Budget::shared(limit, prepaid + granted, None),
            Some(Admission::EmptyUntil(next)) => Budget::shared(limit, prepaid, Some(next)),
            Some(Admission::ReservedFor(_)) => unreachable!("nothing was reserved"),
            Some(Admission::NoRoom) | None => {
                let args: [DatumWithOid; 4] = [
                    state.queue().into(),
                    limit.rate.into(),
                    limit.burst.into(),
                    timestamptz_arg(now),
                ];
                let tokens: f64 = RATE_BUCKET
                    .first(client, &args, "tokens")
                    .expect("rate_bucket.sql returns the tokens");
                let held = tokens.floor().clamp(0.0, f64::from(n)) as u32;
                Budget {
                    source: Source::Table { limit, held },
                    allowed: held as usize,
                }
            }
        }
    }

    fn shared(limit: Limit, held: u32, next: Option<i64>) -> Budget {
        Budget {
            source: Source::Shared { limit, held, next },
            allowed: held as usize,
        }
    }

    /// How many jobs the attempt may take.
    pub fn allowed(&self) -> usize {
        self.allowed
    }

    /// What an attempt the limit let nothing through says: the queue's probe, and, when a job
    /// is due, when a token comes. A waiting claim reserves that token (shared buckets only), so
    /// waiting claims are admitted one per token, in turn, instead of all waking at once.
    pub fn throttled(
        &self,
        client: &SpiClient<'_>,
        state: &QueueState<'_>,
        request: &ClaimRequest<'_>,
        now: pg_sys::TimestampTz,
    ) -> Probe {
        let mut probe = probe(client, state.queue());
        let due = !probe.paused && probe.earliest_run_at.is_some_and(|at| at <= now);
        if !due {
            return probe;
        }
        match &self.source {
            Source::Shared { limit, next, .. } => {
                if request.wait_micros > 0 {
                    if let Some(Admission::ReservedFor(at)) =
                        state.acquire_tokens(*limit, 1, true, server_now())
                    {
                        probe.throttled_until = Some(at);
                        probe.reserved = true;
                        return probe;
                    }
                }
                probe.throttled_until = *next;
            }
            Source::Table { limit, .. } => {
                // About when the row's bucket holds a token again.
                probe.throttled_until = Some(now + (1e6 / limit.rate).ceil() as i64);
            }
            Source::Unlimited => {}
        }
        probe
    }

    /// After the attempt took `taken` jobs: gives back the tokens it did not use (shared), or
    /// spends what it used (table).
    pub fn settle(&self, client: &SpiClient<'_>, state: &QueueState<'_>, taken: usize) {
        match &self.source {
            Source::Unlimited => {}
            Source::Shared { limit, held, .. } => {
                let unused = held.saturating_sub(taken as u32);
                state.refund_tokens(*limit, unused, server_now());
            }
            Source::Table { held, .. } => {
                let spent = (taken as u32).min(*held);
                if spent > 0 {
                    RATE_SPEND.run(client, &[state.queue().into(), f64::from(spent).into()]);
                }
            }
        }
    }
}
