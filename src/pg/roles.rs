//! Who is calling: the session's role and its memberships, as PostgreSQL tracks them.

use std::cell::Cell;
use std::ffi::{CStr, CString};

use pgrx::pg_sys;

use crate::pg::version::register_syscache_callback;

thread_local! {
    /// Bumped when PostgreSQL invalidates this backend's cached roles or memberships.
    static GENERATION: Cell<u64> = const { Cell::new(0) };
}

/// Called by PostgreSQL when role or role-membership catalog entries change.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn roles_changed(_arg: pg_sys::Datum, _cache: i32, _hash: u32) {
    GENERATION.with(|g| g.set(g.get().wrapping_add(1)));
}

/// Makes [`generation`] follow role and membership changes; called from `_PG_init`.
pub fn register_callbacks() {
    // SAFETY: plain functions registered once per process, as PostgreSQL's own caches do.
    unsafe {
        register_syscache_callback(pg_sys::SysCacheIdentifier::AUTHMEMMEMROLE, roles_changed);
        register_syscache_callback(pg_sys::SysCacheIdentifier::AUTHOID, roles_changed);
    }
}

/// A number that changes whenever a role, its attributes (superuser, say) or a membership
/// changes anywhere in the cluster (roles are shared catalogs, so every backend hears of it):
/// what this backend derived from roles holds while it stays the same.
pub fn generation() -> u64 {
    GENERATION.with(Cell::get)
}

/// The role the caller acts as: the session's current role (what `SET ROLE` chose, or the
/// session user), also inside a `SECURITY DEFINER` function, where `current_user` is the
/// function's owner instead. pg_jobs's functions are definer functions, so this, not
/// `current_user`, is the caller whose powers they check.
pub fn caller() -> pg_sys::Oid {
    // SAFETY: reads a backend-global set by PostgreSQL for the session.
    unsafe { pg_sys::GetOuterUserId() }
}

/// The oid of the role named `name`, if it exists.
pub fn role_oid(name: &str) -> Option<pg_sys::Oid> {
    let name = CString::new(name).ok()?;
    // SAFETY: a NUL-terminated name; missing_ok, so no ERROR for an unknown role.
    let oid = unsafe { pg_sys::get_role_oid(name.as_ptr(), true) };
    (oid != pg_sys::InvalidOid).then_some(oid)
}

/// The name of role `oid` (or its number, for a role dropped meanwhile).
pub fn role_name(oid: pg_sys::Oid) -> String {
    // SAFETY: noerr, so NULL for an unknown role; the name is copied before the next lookup.
    unsafe {
        let name = pg_sys::GetUserNameFromId(oid, true);
        if name.is_null() {
            format!("{}", u32::from(oid))
        } else {
            CStr::from_ptr(name).to_string_lossy().into_owned()
        }
    }
}

/// Whether `member` has the privileges of `role` (directly, through inherited memberships, or
/// as a superuser), as `pg_has_role(member, role, 'USAGE')` says.
pub fn has_privileges_of(member: pg_sys::Oid, role: pg_sys::Oid) -> bool {
    // SAFETY: plain catalog lookups through PostgreSQL's membership cache.
    unsafe { pg_sys::has_privs_of_role(member, role) }
}

/// Whether `role` is a superuser.
pub fn is_superuser(role: pg_sys::Oid) -> bool {
    // SAFETY: a catalog lookup.
    unsafe { pg_sys::superuser_arg(role) }
}

/// Quotes a role name for SQL the way `quote_ident` would.
pub fn quote_role(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        name.to_owned()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// Runs `body` as `role` (as a `SECURITY DEFINER` function of that role's would), then makes
/// the caller's role current again, also when `body` raises. For work pg_jobs does on its own
/// tables from a callback (a transaction being prepared, a `COMMIT PREPARED`), where no
/// function of the extension sets its owner's identity.
pub fn as_role<R>(role: pg_sys::Oid, body: impl FnOnce() -> R) -> R {
    let mut outer_user = pg_sys::InvalidOid;
    let mut outer_context = 0;
    // SAFETY: saving and setting the current user as fmgr_security_definer does; the finally
    // block restores it on every way out (an ERROR's abort would restore it too).
    unsafe {
        pg_sys::GetUserIdAndSecContext(&mut outer_user, &mut outer_context);
        pg_sys::SetUserIdAndSecContext(
            role,
            outer_context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32,
        );
    }
    pgrx::PgTryBuilder::new(std::panic::AssertUnwindSafe(body))
        .finally(|| {
            // SAFETY: the values saved above.
            unsafe { pg_sys::SetUserIdAndSecContext(outer_user, outer_context) }
        })
        .execute()
}
