//! What the calls that sleep until commits wake them (a waiting claim, `jobs_wait`) share:
//! whether a sleep may let go of the statement's snapshot.
//!
//! A sleeping call stops advertising its xmin, so an idle worker pool does not hold VACUUM
//! back, when nothing reads with the statement's snapshot after the call returns
//! (`pg::snapshot`): the statement must be nothing but a call of the waiting function, which is
//! recognised by its oid in this database.

use std::cell::Cell;

use pgrx::pg_sys::{self, TEXTOID};

use crate::pg::snapshot;
use crate::pg::subtransaction::in_subtransaction;
use crate::storage::{statement, with_client, Statement};

static OWN_FUNCTION: Statement = statement!(waiting/own_function(symbol: TEXTOID) -> (function));

/// A function of this library that sleeps until commits wake it.
#[derive(Clone, Copy)]
pub enum Waiting {
    /// `jobs_claim` with `wait`.
    Claim,
    /// `jobs_wait`.
    Wait,
}

impl Waiting {
    /// The C symbol of the function, as `pg_proc.prosrc` names it.
    fn symbol(self) -> &'static str {
        match self {
            Waiting::Claim => "jobs_claim_wrapper",
            Waiting::Wait => "jobs_wait_wrapper",
        }
    }
}

thread_local! {
    /// The oids of the functions (by [`Waiting`]) in this session's database, once looked up.
    static OIDS: [Cell<Option<pg_sys::Oid>>; 2] = const { [Cell::new(None), Cell::new(None)] };
}

/// The oid of `function` in this database (looked up once per session).
fn oid(function: Waiting) -> Option<pg_sys::Oid> {
    let known = OIDS.with(|oids| oids[function as usize].get());
    if known.is_some() {
        return known;
    }
    // In a subtransaction rolled back at once, so the catalog locks the lookup takes are not
    // held through the sleep that follows.
    let oid: Option<pg_sys::Oid> = in_subtransaction(|| {
        let oid = with_client(|client| {
            OWN_FUNCTION.first(client, &[function.symbol().into()], "function")
        });
        (oid, false)
    });
    OIDS.with(|oids| oids[function as usize].set(oid));
    oid
}

/// Whether the sleeps of one waiting call may let go of the statement's snapshot: decided
/// before its first sleep (a call that returns without sleeping never asks).
pub struct SleepSnapshot {
    function: Waiting,
    release: Option<bool>,
}

impl SleepSnapshot {
    /// For a call of `function`.
    pub fn new(function: Waiting) -> Self {
        SleepSnapshot {
            function,
            release: None,
        }
    }

    /// Before a sleep: stops advertising the statement's xmin when nothing reads with the
    /// statement's snapshot after this call returns.
    pub fn before_sleep(&mut self) {
        let function = self.function;
        if *self.release.get_or_insert_with(|| {
            oid(function).is_some_and(snapshot::nothing_reads_older_snapshots)
        }) {
            snapshot::stop_advertising_xmin();
        }
    }
}
