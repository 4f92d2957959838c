//! Which due jobs a claim may take.

use pgrx::datum::DatumWithOid;

/// What a claim takes of its queue's due jobs. This type alone decides whether a claim may
/// move the claim floor and use the reach: only a claim that would take any due job in claim
/// order can tell that the jobs it passed over are not claimable (Rule 2).
pub struct ClaimFilter {
    /// Only jobs of these kinds; `None` for every kind.
    kinds: Option<Vec<String>>,
}

impl ClaimFilter {
    /// A filter for jobs of `kinds` (each non-empty), or of every kind.
    pub fn new(kinds: Option<Vec<String>>) -> ClaimFilter {
        ClaimFilter { kinds }
    }

    /// Whether the claim takes every due job in claim order, so the floor may rise past what it
    /// examined and the reach may be used and extended.
    pub fn takes_every_job(&self) -> bool {
        self.kinds.is_none()
    }

    /// The `kinds` argument of the candidates statement (NULL for every kind).
    pub fn kinds_arg(&self) -> DatumWithOid<'static> {
        self.kinds.clone().into()
    }
}
