//! Which due jobs a claim may take.

use pgrx::datum::DatumWithOid;

use crate::engine::tenants::TenantScope;
use crate::runtime::queue_state::ReachScope;

/// What a claim takes of its queue's due jobs: of some kinds only, of the caller's tenants
/// only. This type alone decides whether a claim may move the claim floor and use the reach:
/// only a claim that would take any due job in claim order can tell that the jobs it passed
/// over are not claimable (Rule 2).
pub struct ClaimFilter {
    /// Only jobs of these kinds; `None` for every kind.
    kinds: Option<Vec<String>>,
    /// Only jobs of the tenants the caller acts for.
    scope: TenantScope,
}

impl ClaimFilter {
    /// A filter for jobs of `kinds` (each non-empty), or of every kind, within `scope`.
    pub fn new(kinds: Option<Vec<String>>, scope: TenantScope) -> ClaimFilter {
        ClaimFilter { kinds, scope }
    }

    /// The tenants whose jobs the claim may take.
    pub fn scope(&self) -> &TenantScope {
        &self.scope
    }

    /// Whether the claim takes every due job in claim order, so the floor may rise past what it
    /// examined and the reach may be used and extended.
    pub fn takes_every_job(&self) -> bool {
        self.kinds.is_none() && self.scope.is_all()
    }

    /// Whose reach the claim may use and extend (see `runtime::floor::extend_reach`): every
    /// job's when it takes every due job, one tenant's when it takes every due job of that
    /// tenant; none when it takes only some kinds.
    pub fn reach_scope(&self) -> Option<ReachScope<'_>> {
        if self.kinds.is_some() {
            return None;
        }
        match &self.scope {
            TenantScope::All => Some(ReachScope::Every),
            TenantScope::Tenants(tenants) if tenants.len() == 1 => {
                Some(ReachScope::Tenant(&tenants[0]))
            }
            TenantScope::Tenants(_) | TenantScope::Untenanted => None,
        }
    }

    /// Whether the claim may take a job of `kind` and `tenant` (as the candidate statements
    /// filter them).
    pub fn admits(&self, kind: &str, tenant: Option<&str>) -> bool {
        let kind_admitted = self
            .kinds
            .as_ref()
            .is_none_or(|kinds| kinds.iter().any(|k| k == kind));
        kind_admitted
            && match &self.scope {
                TenantScope::All => true,
                TenantScope::Untenanted => tenant.is_none(),
                TenantScope::Tenants(tenants) => {
                    tenant.is_some_and(|tenant| tenants.iter().any(|t| t == tenant))
                }
            }
    }

    /// Whether the claim takes only jobs of some kinds.
    pub fn has_kinds(&self) -> bool {
        self.kinds.is_some()
    }

    /// The `kinds` argument of the candidates statement (NULL for every kind).
    pub fn kinds_arg(&self) -> DatumWithOid<'static> {
        self.kinds.clone().into()
    }

    /// Whose jobs it takes: `None` every job's, `Some([])` only jobs without a tenant, else
    /// only these tenants'.
    pub fn tenants(&self) -> Option<&[String]> {
        match &self.scope {
            TenantScope::All => None,
            TenantScope::Untenanted => Some(&[]),
            TenantScope::Tenants(tenants) => Some(tenants),
        }
    }

    /// The `tenants` argument of the candidates statement (NULL for every job).
    pub fn tenants_arg(&self) -> DatumWithOid<'static> {
        self.scope.param()
    }
}
