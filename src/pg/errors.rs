//! Raising errors the way a user can act on them.
//!
//! Every error pg_jobs raises names the argument or object it is about and carries a SQLSTATE
//! that the README documents, so a client can branch on the condition rather than on the text.
//! Expected errors are sentences, never Rust backtraces (see [`quiet_backtraces`]).

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};

/// A required argument was NULL (22004).
pub const NULL_ARGUMENT: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED;
/// An argument is outside the range it accepts (22023).
pub const BAD_ARGUMENT: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE;
/// A call that changes state, on a standby or in a read-only transaction (25006).
pub const READ_ONLY: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION;
/// The caller lacks the role, or the tenant grant, the call needs (42501).
pub const INSUFFICIENT_PRIVILEGE: PgSqlErrorCode = PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE;

/// Raises an ERROR with a hint at the caller's location; never returns.
#[track_caller]
pub fn raise_with_hint(code: PgSqlErrorCode, message: String, hint: &str) -> ! {
    ErrorReport::new(code, message, "pg_jobs")
        .set_hint(hint)
        .report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// Raises an ERROR at the caller's location; never returns.
#[track_caller]
pub fn raise(code: PgSqlErrorCode, message: String) -> ! {
    ErrorReport::new(code, message, "pg_jobs").report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// Unwraps a required argument or raises 22004 naming it.
#[track_caller]
pub fn required<T>(value: Option<T>, argument: &str) -> T {
    match value {
        Some(value) => value,
        None => raise(NULL_ARGUMENT, format!("{argument} must not be NULL")),
    }
}

/// Quotes a value for an error message the way SQL would.
pub fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// Keeps Rust backtraces out of the errors pg_jobs reports, whatever the server's environment.
///
/// pgrx turns every ERROR that passes through Rust (ours, and PostgreSQL's own raised inside
/// our statements: a permission error, a statement timeout) into an unwinding panic, and its
/// panic hook captures a backtrace, which ends up in the error's DETAIL when `RUST_BACKTRACE`
/// is set. Those errors are expected conditions with messages of their own, not crashes. The
/// capture decision is made once per copy of the Rust standard library, and this library
/// carries its own copy: asking for a backtrace once with capture turned off fixes the
/// decision for this library alone, after which the environment is put back as it was, so
/// other libraries in the server process keep their behaviour.
pub fn quiet_backtraces() {
    const VARIABLE: &str = "RUST_LIB_BACKTRACE";
    let previous = std::env::var_os(VARIABLE);
    // SAFETY (environment): called from _PG_init, before the process starts any thread of ours.
    std::env::set_var(VARIABLE, "0");
    let _ = std::backtrace::Backtrace::capture();
    match previous {
        Some(value) => std::env::set_var(VARIABLE, value),
        None => std::env::remove_var(VARIABLE),
    }
}

static mut PREVIOUS_EMIT_LOG_HOOK: pgrx::pg_sys::emit_log_hook_type = None;

/// Says what to grant when PostgreSQL itself refuses a role pg_jobs's objects (a role without
/// any pg_jobs role calling a `jobs_*` function, or reading `jobs.*`): its "permission denied"
/// errors name the object, not the role that would allow it. Installed from `_PG_init`.
pub fn install_privilege_hints() {
    // SAFETY: hooks are installed once per process from _PG_init, chaining the previous one.
    unsafe {
        PREVIOUS_EMIT_LOG_HOOK = pgrx::pg_sys::emit_log_hook;
        pgrx::pg_sys::emit_log_hook = Some(add_privilege_hint);
    }
}

/// Whether a PostgreSQL "permission denied" message is about one of pg_jobs's objects.
fn about_pg_jobs(message: &str) -> bool {
    const OBJECTS: [&str; 5] = [
        "permission denied for function jobs_",
        "permission denied for schema jobs",
        "permission denied for table job",
        "permission denied for table queue",
        "permission denied for view queue_stats",
    ];
    OBJECTS.iter().any(|prefix| message.starts_with(prefix))
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn add_privilege_hint(edata: *mut pgrx::pg_sys::ErrorData) {
    // SAFETY: PostgreSQL passes the error being reported; we only read its fields and set a
    // missing hint, allocated in the current (error) memory context as the hint must be.
    unsafe {
        if let Some(previous) = PREVIOUS_EMIT_LOG_HOOK {
            previous(edata);
        }
        let error = &mut *edata;
        if error.elevel < pgrx::PgLogLevel::ERROR as i32
            || error.sqlerrcode != PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE as i32
            || !error.hint.is_null()
            || error.message.is_null()
        {
            return;
        }
        let message = std::ffi::CStr::from_ptr(error.message).to_string_lossy();
        if about_pg_jobs(&message) {
            error.hint = pgrx::pg_sys::pstrdup(
                c"pg_jobs is used through its roles: GRANT jobs_client (enqueue, read and cancel jobs), jobs_worker (a client that also claims and settles) or jobs_admin (everything) TO the role.".as_ptr(),
            );
        }
    }
}
