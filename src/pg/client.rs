//! The backend's client connection: a waiting claim makes sure its client is still there before
//! it takes anything.
//!
//! A client killed while its statement runs (SIGKILL, a crash, a dropped network) leaves its
//! backend running that statement until it next talks to the client. A claim that waited for
//! work would claim a job, commit and only then fail to send it: the job would sit `running`
//! for a whole lease, an attempt spent on nothing. PostgreSQL can notice a closed connection
//! while a query runs (`client_connection_check_interval`, 14 and later), but only when that
//! setting is on; the claim checks for itself.

use pgrx::pg_sys;

use super::version;

/// Ends the session, as PostgreSQL does for a lost client (FATAL "connection to client lost"),
/// when the client's connection has been closed: the transaction is rolled back, so whatever it
/// claimed stays queued with its attempts.
pub fn end_if_gone() {
    // SAFETY: a backend outside any critical section; setting these two flags and checking for
    // interrupts is what PostgreSQL's own connection check does (ProcessInterrupts reports the
    // loss and stops sending to the client).
    unsafe {
        if version::client_connection_alive() {
            return;
        }
        pg_sys::ClientConnectionLost = 1;
        pg_sys::InterruptPending = 1;
    }
    pgrx::check_for_interrupts!();
}
