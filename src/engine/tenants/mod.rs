//! Tenants: which tenants a role may act for (`jobs_grant_tenant`), which one a session acts
//! for (`SET pg_jobs.tenant`), and the scope every statement on jobs is limited to.
//!
//! The setting is checked whenever it is used, against the grants of the role the session acts
//! as at that moment: a `SET` made before a `SET ROLE`, inside a function, or through
//! `ALTER ROLE ... SET` cannot widen anything, because nothing is decided when it is set.
//! Without a tenant set, a client sees only jobs without a tenant, and a worker or admin sees
//! every tenant's (the shared worker pool). The scope reaches every statement that reads or
//! changes jobs as a parameter, and direct reads of the tables through a row-level security
//! policy that calls [`scope`] too.

use std::cell::RefCell;
use std::sync::atomic::Ordering;

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::{self, OIDOID, TEXTOID};

use crate::config::settings;
use crate::engine::access::{self, Role};
use crate::pg::errors::{quote, raise, raise_with_hint, BAD_ARGUMENT, INSUFFICIENT_PRIVILEGE};
use crate::pg::roles;
use crate::runtime::effects;
use crate::runtime::shmem::shared;
use crate::storage::{statement, with_client, Statement};

static GRANTED: Statement = statement!(tenants/granted(role: OIDOID) -> (tenant));

static GRANT: Statement = statement!(
    tenants/grant(role_name: TEXTOID, tenant: TEXTOID) -> (granted)
);

static REVOKE: Statement = statement!(
    tenants/revoke(role_name: TEXTOID, tenant: TEXTOID) -> (revoked)
);

/// Longest tenant name, in bytes.
pub const TENANT_BYTES: usize = 255;

/// The jobs a call may see and touch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TenantScope {
    /// Every tenant's, and jobs without one (a worker or admin with no tenant set).
    All,
    /// Only jobs without a tenant (a client with no tenant set).
    Untenanted,
    /// Only these tenants' jobs (a session with `pg_jobs.tenant` set).
    Tenants(Vec<String>),
}

impl TenantScope {
    /// The scope as the `tenants` parameter of the statements: NULL for every job, `{}` for
    /// jobs without a tenant, else the tenants.
    pub fn param(&self) -> DatumWithOid<'static> {
        match self {
            TenantScope::All => DatumWithOid::null_oid(pg_sys::TEXTARRAYOID),
            TenantScope::Untenanted => Vec::<String>::new().into(),
            TenantScope::Tenants(tenants) => tenants.clone().into(),
        }
    }

    /// Whether the scope covers every job.
    pub fn is_all(&self) -> bool {
        *self == TenantScope::All
    }

    /// The scope as the SQL value `jobs.tenant_scope()` returns (see [`TenantScope::param`]).
    pub fn as_array(&self) -> Option<Vec<String>> {
        match self {
            TenantScope::All => None,
            TenantScope::Untenanted => Some(Vec::new()),
            TenantScope::Tenants(tenants) => Some(tenants.clone()),
        }
    }
}

/// The tenants a role may act for, cached per session until a grant, a revoke or a change of
/// role memberships could have changed them.
struct Granted {
    role: pg_sys::Oid,
    shared_generation: u64,
    local_generation: u64,
    tenants: Vec<String>,
}

thread_local! {
    static GRANTED_CACHE: RefCell<Option<Granted>> = const { RefCell::new(None) };
}

/// The tenants `role` may act for. With `pg_jobs.fast_paths` off, read every time.
fn granted_tenants(role: pg_sys::Oid) -> Vec<String> {
    let shared_generation = shared()
        .filter(|_| settings::fast_paths())
        .map(|s| s.tenant_grants().load(Ordering::Acquire));
    let local_generation = roles::generation();
    if let Some(shared_generation) = shared_generation {
        let cached = GRANTED_CACHE.with(|cache| {
            cache.borrow().as_ref().and_then(|c| {
                (c.role == role
                    && c.shared_generation == shared_generation
                    && c.local_generation == local_generation)
                    .then(|| c.tenants.clone())
            })
        });
        if let Some(tenants) = cached {
            return tenants;
        }
    }
    let tenants: Vec<String> = with_client(|client| {
        GRANTED
            .run(client, &[role.into()])
            .iter()
            .filter_map(|row| row.get("tenant"))
            .collect()
    });
    // Without shared memory no session hears of another's grants: look them up every time.
    if let Some(shared_generation) = shared_generation {
        GRANTED_CACHE.with(|cache| {
            *cache.borrow_mut() = Some(Granted {
                role,
                shared_generation,
                local_generation,
                tenants: tenants.clone(),
            })
        });
    }
    tenants
}

/// The tenants named by `pg_jobs.tenant`, in order, without duplicates.
fn setting() -> Vec<String> {
    let mut tenants: Vec<String> = Vec::new();
    if let Some(value) = settings::TENANT.get() {
        for tenant in value.to_string_lossy().split(',').map(str::trim) {
            if !tenant.is_empty() && !tenants.iter().any(|t| t == tenant) {
                tenants.push(tenant.to_owned());
            }
        }
    }
    tenants
}

/// Refuses `tenant` unless the caller may act for it; `source` says where it came from.
fn check_granted(tenant: &str, granted: Option<&[String]>, source: &str) {
    let Some(granted) = granted else { return };
    if granted.iter().any(|t| t == tenant) {
        return;
    }
    let caller = roles::role_name(roles::caller());
    raise_with_hint(
        INSUFFICIENT_PRIVILEGE,
        format!(
            "role {} may not act for tenant {} ({source})",
            roles::quote_role(&caller),
            quote(tenant)
        ),
        &format!(
            "A jobs_admin grants it: SELECT jobs_grant_tenant({}, {});",
            quote(&caller),
            quote(tenant)
        ),
    );
}

/// The tenants the caller may act for; `None` for a superuser, who may act for any.
fn caller_grants() -> Option<Vec<String>> {
    let caller = roles::caller();
    (!roles::is_superuser(caller)).then(|| granted_tenants(caller))
}

/// The scope of the current call: the tenants `pg_jobs.tenant` names, each checked against the
/// caller's grants now, or, with none set, every job for a worker or admin and the jobs
/// without a tenant for anyone else. Raises 42501 for a tenant the caller was not granted.
pub fn scope() -> TenantScope {
    let tenants = setting();
    if tenants.is_empty() {
        return if access::caller_has(Role::Worker) {
            TenantScope::All
        } else {
            TenantScope::Untenanted
        };
    }
    let grants = caller_grants();
    for tenant in &tenants {
        check_granted(tenant, grants.as_deref(), "pg_jobs.tenant");
    }
    TenantScope::Tenants(tenants)
}

/// The tenant a job enqueued now belongs to: `explicit` when given (checked like the setting:
/// granted, and within the session's tenants when it has some), else the session's tenant.
pub fn tenant_for_new_job(explicit: Option<&str>, scope: &TenantScope) -> Option<String> {
    match (explicit, scope) {
        (Some(tenant), TenantScope::Tenants(tenants)) => {
            if !tenants.iter().any(|t| t == tenant) {
                raise_with_hint(
                    INSUFFICIENT_PRIVILEGE,
                    format!(
                        "tenant {} is not among the tenants this session acts for ({})",
                        quote(tenant),
                        tenants.join(", ")
                    ),
                    "Set pg_jobs.tenant to the tenant, or leave the tenant argument out.",
                );
            }
            Some(tenant.to_owned())
        }
        (Some(tenant), _) => {
            check_tenant_name(tenant, "tenant");
            check_granted(tenant, caller_grants().as_deref(), "the tenant argument");
            Some(tenant.to_owned())
        }
        (None, TenantScope::Tenants(tenants)) if tenants.len() == 1 => Some(tenants[0].clone()),
        (None, TenantScope::Tenants(tenants)) => raise(
            BAD_ARGUMENT,
            format!(
                "tenant must be given when pg_jobs.tenant names several tenants ({})",
                tenants.join(", ")
            ),
        ),
        (None, _) => None,
    }
}

/// Checks a tenant name: 1–255 bytes, no commas (they separate tenants in `pg_jobs.tenant`),
/// no surrounding spaces.
#[track_caller]
pub fn check_tenant_name(tenant: &str, argument: &str) {
    if tenant.is_empty()
        || tenant.len() > TENANT_BYTES
        || tenant.contains(',')
        || tenant.trim() != tenant
    {
        raise(
            BAD_ARGUMENT,
            format!(
                "{argument} must be 1 to {TENANT_BYTES} bytes without commas or surrounding spaces, got {}",
                quote(tenant)
            ),
        );
    }
}

/// Lets `role` act for `tenant`; answers whether the grant is new.
pub fn grant(role: &str, tenant: &str) -> bool {
    if roles::role_oid(role).is_none() {
        raise(
            crate::engine::errors::UNKNOWN_ROLE,
            format!("role {} does not exist", quote(role)),
        );
    }
    change_grant(&GRANT, "granted", role, tenant)
}

/// Takes `tenant` from `role`; answers whether there was such a grant.
pub fn revoke(role: &str, tenant: &str) -> bool {
    change_grant(&REVOKE, "revoked", role, tenant)
}

/// Runs `statement`, which grants `tenant` to `role` or revokes it, and has the sessions read
/// the grants again; answers whether it changed a grant (returned its `changed` column).
fn change_grant(statement: &'static Statement, changed: &str, role: &str, tenant: &str) -> bool {
    let changed = with_client(|client| {
        statement
            .first::<bool>(client, &[role.into(), tenant.into()], changed)
            .is_some()
    });
    effects::tenant_grants_changed();
    changed
}
