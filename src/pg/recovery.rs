//! Whether anything can be written here: not on a standby (a server in recovery), and not in a
//! read-only transaction.

use pgrx::pg_sys;

/// Whether this server is a standby, or a primary still replaying WAL at start-up: no
/// transaction can write until recovery ends (`pg_ctl promote` ends it on a standby).
pub fn in_recovery() -> bool {
    // SAFETY: reads shared memory PostgreSQL keeps for every process; no preconditions.
    unsafe { pg_sys::RecoveryInProgress() }
}

/// Whether the current transaction is read-only (`BEGIN READ ONLY`,
/// `default_transaction_read_only`, and every transaction on a standby).
pub fn transaction_read_only() -> bool {
    // SAFETY: a backend-global PostgreSQL sets at transaction start and on SET TRANSACTION.
    unsafe { pg_sys::XactReadOnly }
}
