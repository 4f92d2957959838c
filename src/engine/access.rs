//! Who may do what: the three roles `CREATE EXTENSION` makes and the check every function
//! makes of its caller (README "Privileges").
//!
//! The functions run as the extension's owner (`SECURITY DEFINER`), so the tables need no
//! grants beyond reading: a caller changes state only through the functions, and each function
//! checks that its caller has the privileges of the role its work needs.
//!
//! Every function that changes state also checks, before it touches anything, that something
//! can be written here (README "Failover and standbys"): not on a standby, not in a read-only
//! transaction. PostgreSQL would refuse the first write with the same SQLSTATE, but only after
//! the call had done what comes before its first write: a waiting claim on an empty queue
//! slept out its wait, a claim on a rate-limited queue spent a token of the shared bucket, and
//! the message named a statement the caller never wrote.
//!
//! First of all, every function checks that the SQL definitions installed in the database are
//! those of the loaded library (README "Upgrading"): between an upgrade's restart and its
//! `ALTER EXTENSION pg_jobs UPDATE`, the new library would otherwise run on the old version's
//! tables.

use std::cell::Cell;

use pgrx::pg_sys;

use crate::engine::errors::VERSION_MISMATCH;
use crate::pg::errors::{raise_with_hint, INSUFFICIENT_PRIVILEGE, READ_ONLY};
use crate::pg::extension::{self, LIBRARY_VERSION};
use crate::pg::{recovery, roles};

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
    let generation = roles::generation();
    CALLER_POWERS.with(|cached| {
        let mut powers = cached.get();
        if powers.caller != caller || powers.generation != generation {
            powers = CallerPowers {
                caller,
                generation,
                known: [None; 3],
            };
        }
        let slot = role as usize;
        let has = *powers.known[slot].get_or_insert_with(|| look_up(caller, role));
        cached.set(powers);
        has
    })
}

/// Whether `caller` has the privileges of `role`, from the catalogs.
fn look_up(caller: pg_sys::Oid, role: Role) -> bool {
    match roles::role_oid(role.name()) {
        Some(oid) => roles::has_privileges_of(caller, oid),
        None => roles::is_superuser(caller),
    }
}

/// What [`caller_has`] found out about one caller while no role or membership changed: every
/// call of every function asks, and a lookup by role name is most of what the answer costs.
#[derive(Clone, Copy)]
struct CallerPowers {
    /// The caller the answers are about.
    caller: pg_sys::Oid,
    /// [`roles::generation`] when they were found.
    generation: u64,
    /// Per [`Role`], in declaration order: whether the caller has its privileges, once asked.
    known: [Option<bool>; 3],
}

thread_local! {
    static CALLER_POWERS: Cell<CallerPowers> = const {
        Cell::new(CallerPowers {
            caller: pg_sys::InvalidOid,
            generation: 0,
            known: [None; 3],
        })
    };
}

/// Refuses a call that may change state unless the caller has the privileges of `role` and
/// this transaction can write; `what` says what the call does ("claim jobs"), for the
/// messages. Functions that only read call [`require_to_read`] instead, so a new function is
/// refused on a standby until it says it only reads.
#[track_caller]
pub fn require(role: Role, what: &str) {
    require_to_read(role, what);
    require_writable(what);
}

/// Refuses the call unless the caller has the privileges of `role`; for functions that only
/// read, which work on a standby too. The hint names the grant that would allow it.
#[track_caller]
pub fn require_to_read(role: Role, what: &str) {
    require_current_definitions(what);
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

/// Refuses, with 25006, a call that would write on a standby or in a read-only transaction,
/// saying where it can run instead.
#[track_caller]
pub fn require_writable(what: &str) {
    if recovery::in_recovery() {
        raise_with_hint(
            READ_ONLY,
            format!("cannot {what}: this server is a standby (read-only, in recovery); run it on the primary"),
            "Connect to the primary server (where pg_is_in_recovery() is false). A standby serves the reading functions: jobs_get, jobs_list, jobs_metrics, jobs_totals, jobs_worker_status, jobs_idempotency_get, jobs_cron_next and the views jobs.queue_stats and jobs.schedules.",
        );
    }
    if recovery::transaction_read_only() {
        raise_with_hint(
            READ_ONLY,
            format!("cannot {what} in a read-only transaction"),
            "Run it in a read-write transaction: BEGIN READ WRITE, or SET default_transaction_read_only = off.",
        );
    }
}

/// Refuses, with 55000, a call made while the database still has another version's SQL
/// definitions than the loaded library's (after an upgrade's restart, before its
/// `ALTER EXTENSION pg_jobs UPDATE`), saying what to run.
#[track_caller]
pub fn require_current_definitions(what: &str) {
    if let Err(installed) = extension::is_current() {
        let installed = installed.unwrap_or_else(|| "none".to_owned());
        raise_with_hint(
            VERSION_MISMATCH,
            format!(
                "cannot {what}: the pg_jobs library is version {LIBRARY_VERSION} but this database has the SQL definitions of version {installed}"
            ),
            "Run ALTER EXTENSION pg_jobs UPDATE in this database (as the extension's owner or a superuser); until then every pg_jobs function refuses and the worker idles. See README \"Upgrading\".",
        );
    }
}

/// A first parameter that no SQL caller passes (it takes no SQL argument), for functions whose
/// argument list differs from an earlier version's: PostgreSQL hands such a function the
/// arguments of the installed definition, and pgrx reads them before the function's first line
/// runs, so [`require_current_definitions`] must refuse before that. pgrx fetches the parameters
/// in order, so this one's check comes first; the function's own `require` follows as usual.
pub struct CurrentDefinitions;

// SAFETY: a virtual argument, as pgrx's own `FunctionCallInfo` parameter: it reads no datum
// and consumes no argument slot.
unsafe impl<'fcx> pgrx::callconv::ArgAbi<'fcx> for CurrentDefinitions {
    unsafe fn unbox_arg_unchecked(_arg: pgrx::callconv::Arg<'_, 'fcx>) -> Self {
        require_current_definitions("run this function");
        CurrentDefinitions
    }

    fn is_virtual_arg() -> bool {
        true
    }
}

// SAFETY: skipped in the SQL signature, as pgrx skips its own virtual arguments.
unsafe impl pgrx::pgrx_sql_entity_graph::metadata::SqlTranslatable for CurrentDefinitions {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(CurrentDefinitions);
    const TYPE_ORIGIN: pgrx::pgrx_sql_entity_graph::metadata::TypeOrigin =
        pgrx::pgrx_sql_entity_graph::metadata::TypeOrigin::External;
    const ARGUMENT_SQL: Result<
        pgrx::pgrx_sql_entity_graph::metadata::SqlMappingRef,
        pgrx::pgrx_sql_entity_graph::metadata::ArgumentError,
    > = Ok(pgrx::pgrx_sql_entity_graph::metadata::SqlMappingRef::Skip);
    const RETURN_SQL: Result<
        pgrx::pgrx_sql_entity_graph::metadata::ReturnsRef,
        pgrx::pgrx_sql_entity_graph::metadata::ReturnsError,
    > = Ok(pgrx::pgrx_sql_entity_graph::metadata::ReturnsRef::One(
        pgrx::pgrx_sql_entity_graph::metadata::SqlMappingRef::Skip,
    ));
}
