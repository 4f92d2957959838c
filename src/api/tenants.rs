//! Tenants: `jobs_grant_tenant` and `jobs_revoke_tenant`.

use pgrx::prelude::*;

use crate::engine::access::{self, Role};
use crate::engine::tenants::{self, check_tenant_name};
use crate::pg::errors::required;

/// Lets `role` (and the roles that have its privileges) act for `tenant`: set it in
/// `pg_jobs.tenant`, pass it as `tenant =>`. Answers whether the grant is new.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_grant_tenant(role: Option<&str>, tenant: Option<&str>) -> bool {
    access::require(Role::Admin, "grant tenants");
    let role = required(role, "role");
    let tenant = required(tenant, "tenant");
    check_tenant_name(tenant, "tenant");
    tenants::grant(role, tenant)
}

/// Takes `tenant` from `role`; sessions of the role stop acting for it at their next call.
/// Answers whether there was such a grant.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_revoke_tenant(role: Option<&str>, tenant: Option<&str>) -> bool {
    access::require(Role::Admin, "revoke tenants");
    let role = required(role, "role");
    let tenant = required(tenant, "tenant");
    tenants::revoke(role, tenant)
}
