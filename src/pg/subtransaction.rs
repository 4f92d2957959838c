//! Running a piece of work in an internal subtransaction, as PL/pgSQL does around an
//! exception block.

use pgrx::pg_sys;
use pgrx::{PgSqlErrorCode, PgTryBuilder};

/// An open internal subtransaction, with the memory context and resource owner in effect
/// before it began, which ending it restores (whichever way it ends).
#[derive(Clone, Copy)]
struct Subtransaction {
    context: pg_sys::MemoryContext,
    owner: pg_sys::ResourceOwner,
}

impl Subtransaction {
    /// Begins one, leaving the caller's memory context current.
    ///
    /// # Safety
    /// Inside a transaction; the subtransaction must be ended by [`Subtransaction::release`]
    /// or [`Subtransaction::roll_back`] before the caller returns.
    unsafe fn begin() -> Subtransaction {
        // SAFETY: the save/begin sequence PL/pgSQL uses around an exception block.
        unsafe {
            let outer = Subtransaction {
                context: pg_sys::CurrentMemoryContext,
                owner: pg_sys::CurrentResourceOwner,
            };
            pg_sys::BeginInternalSubTransaction(std::ptr::null());
            pg_sys::MemoryContextSwitchTo(outer.context);
            outer
        }
    }

    /// Commits its work into the enclosing transaction.
    ///
    /// # Safety
    /// It is the current subtransaction.
    unsafe fn release(self) {
        // SAFETY: as the caller promises; then the state before `begin` comes back.
        unsafe {
            pg_sys::ReleaseCurrentSubTransaction();
            self.restore();
        }
    }

    /// Rolls its work back (also after an ERROR inside it: the rollback releases what the
    /// failed work held, locks, buffer pins and memory).
    ///
    /// # Safety
    /// It is the current subtransaction.
    unsafe fn roll_back(self) {
        // SAFETY: as the caller promises; then the state before `begin` comes back.
        unsafe {
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
            self.restore();
        }
    }

    /// Makes the memory context and resource owner from before `begin` current again.
    ///
    /// # Safety
    /// Only once, after the subtransaction begun by `begin` ended (committed or rolled back), in
    /// the same process; the saved context and owner must still exist.
    unsafe fn restore(self) {
        // SAFETY: both were current when the subtransaction began and outlive it.
        unsafe {
            pg_sys::MemoryContextSwitchTo(self.context);
            pg_sys::CurrentResourceOwner = self.owner;
        }
    }
}

/// Runs `body` in a subtransaction, committed when `body` says to keep its work and rolled
/// back otherwise (or on an ERROR, which is then re-raised).
pub fn in_subtransaction<R>(body: impl FnOnce() -> (R, bool)) -> R {
    // SAFETY: inside the caller's transaction; every way out of `body` ends the subtransaction.
    unsafe {
        let sub = Subtransaction::begin();
        let (result, keep) = PgTryBuilder::new(std::panic::AssertUnwindSafe(body))
            .catch_others(move |error| {
                sub.roll_back();
                error.rethrow()
            })
            .execute();
        if keep {
            sub.release();
        } else {
            sub.roll_back();
        }
        result
    }
}

/// Runs `body` in a subtransaction that is kept when `body` returns, and rolled back when it
/// raises `code`, which then answers `None` (the error is not reported); any other ERROR rolls
/// it back and is re-raised.
pub fn unless_it_raises<R>(code: PgSqlErrorCode, body: impl FnOnce() -> R) -> Option<R> {
    // SAFETY: as in_subtransaction; a caught ERROR has been copied and flushed by PgTryBuilder
    // before its handler runs.
    unsafe {
        let sub = Subtransaction::begin();
        let result = PgTryBuilder::new(std::panic::AssertUnwindSafe(|| Some(body())))
            .catch_when(code, move |_| {
                sub.roll_back();
                None
            })
            .catch_others(move |error| {
                sub.roll_back();
                error.rethrow()
            })
            .execute();
        if result.is_some() {
            sub.release();
        }
        result
    }
}
