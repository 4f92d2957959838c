//! Running a piece of work in an internal subtransaction, as PL/pgSQL does around an
//! exception block.

use pgrx::pg_sys;
use pgrx::{PgSqlErrorCode, PgTryBuilder};

/// Runs `body` in a subtransaction, committed when `body` says to keep its work and rolled
/// back otherwise (or on an ERROR, which is then re-raised).
pub fn in_subtransaction<R>(body: impl FnOnce() -> (R, bool)) -> R {
    // SAFETY: the same save/begin/restore sequence PL/pgSQL uses around an exception block:
    // the memory context and resource owner in effect before the subtransaction are restored
    // after it ends, whichever way it ends.
    unsafe {
        let context = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(context);
        let restore = move || {
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::CurrentResourceOwner = owner;
        };
        let (result, keep) = PgTryBuilder::new(std::panic::AssertUnwindSafe(body))
            .catch_others(move |error| {
                pg_sys::RollbackAndReleaseCurrentSubTransaction();
                restore();
                error.rethrow()
            })
            .execute();
        if keep {
            pg_sys::ReleaseCurrentSubTransaction();
        } else {
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
        }
        restore();
        result
    }
}

/// Runs `body` in a subtransaction that is kept when `body` returns, and rolled back when it
/// raises `code`, which then answers `None` (the error is not reported); any other ERROR rolls
/// it back and is re-raised.
pub fn unless_it_raises<R>(code: PgSqlErrorCode, body: impl FnOnce() -> R) -> Option<R> {
    // SAFETY: as in_subtransaction; a caught ERROR has been copied and flushed by PgTryBuilder
    // before its handler runs, and the subtransaction's rollback releases what the failed work
    // held (locks, buffer pins, memory).
    unsafe {
        let context = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(context);
        let restore = move || {
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::CurrentResourceOwner = owner;
        };
        let result = PgTryBuilder::new(std::panic::AssertUnwindSafe(|| Some(body())))
            .catch_when(code, move |_| {
                pg_sys::RollbackAndReleaseCurrentSubTransaction();
                restore();
                None
            })
            .catch_others(move |error| {
                pg_sys::RollbackAndReleaseCurrentSubTransaction();
                restore();
                error.rethrow()
            })
            .execute();
        if result.is_some() {
            pg_sys::ReleaseCurrentSubTransaction();
            restore();
        }
        result
    }
}
