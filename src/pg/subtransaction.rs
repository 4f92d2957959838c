//! Running a piece of work in an internal subtransaction, as PL/pgSQL does around an
//! exception block.

use pgrx::pg_sys;
use pgrx::PgTryBuilder;

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
