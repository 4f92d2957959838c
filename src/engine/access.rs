//! Who may do what: the three roles `CREATE EXTENSION` makes and the check every function
//! makes of its caller (README "Privileges").
//!
//! The functions run as the extension's owner (`SECURITY DEFINER`), so the tables need no
//! grants beyond reading: a caller changes state only through the functions, and each function
//! checks that its caller has the privileges of the role its work needs.

use crate::pg::errors::{raise_with_hint, INSUFFICIENT_PRIVILEGE};
use crate::pg::roles;

/// The roles of pg_jobs, each with the powers of the one before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Enqueue, read its own jobs, cancel them, idempotency records.
    Client,
    /// The client's powers plus claim, heartbeat, settle and release.
    Worker,
    /// Everything: queues, pause, drop, retry, reclaim, schedules, tenants, every job.
    Admin,
}

impl Role {
    /// The role's name.
    pub fn name(self) -> &'static str {
        match self {
            Role::Client => "jobs_client",
            Role::Worker => "jobs_worker",
            Role::Admin => "jobs_admin",
        }
    }
}

/// Whether the caller has the privileges of `role` (superusers have every role's).
pub fn caller_has(role: Role) -> bool {
    let caller = roles::caller();
    match roles::role_oid(role.name()) {
        Some(oid) => roles::has_privileges_of(caller, oid),
        None => roles::is_superuser(caller),
    }
}

/// Refuses the call unless the caller has the privileges of `role`; `what` says what the call
/// does ("claim jobs"), for the message. The hint names the grant that would allow it.
#[track_caller]
pub fn require(role: Role, what: &str) {
    if caller_has(role) {
        return;
    }
    let caller = roles::role_name(roles::caller());
    let hint = if roles::role_oid(role.name()).is_some() {
        format!(
            "Grant the role that may: GRANT {} TO {};",
            role.name(),
            roles::quote_role(&caller)
        )
    } else {
        format!(
            "The role {} is missing; ALTER EXTENSION pg_jobs UPDATE or a superuser recreates it (CREATE ROLE {} NOLOGIN).",
            role.name(),
            role.name()
        )
    };
    raise_with_hint(
        INSUFFICIENT_PRIVILEGE,
        format!(
            "role {} may not {what}: that needs the privileges of {}",
            roles::quote_role(&caller),
            role.name()
        ),
        &hint,
    );
}
