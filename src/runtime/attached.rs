//! Where each part of pg_jobs's shared memory is found: `shmem` makes the area and attaches
//! every part it holds, so the modules that own the parts reach their own without knowing the
//! area (and the area's module, which knows them all, is the only one above them).

use std::sync::atomic::{AtomicPtr, Ordering};

/// The address of one part of the shared area, set when the area is made.
pub struct Attached<T>(AtomicPtr<T>);

impl<T: Sync> Attached<T> {
    /// Not attached yet: pg_jobs was not preloaded, or the area is not made yet.
    pub const fn new() -> Self {
        Self(AtomicPtr::new(std::ptr::null_mut()))
    }

    /// The part, or `None` when pg_jobs was not preloaded.
    pub fn get(&self) -> Option<&'static T> {
        // SAFETY: a non-null address was attached from the shared area, which lives as long
        // as the process and is never moved or freed; the parts are made for concurrent use
        // (T: Sync).
        unsafe { self.0.load(Ordering::Relaxed).as_ref() }
    }

    /// Records where the part is.
    ///
    /// # Safety
    /// `part` must point into the shared area made by `shmem` (valid for the life of the
    /// process), and be attached in the postmaster before any backend starts, or identically
    /// again after a crash restart while none runs.
    pub unsafe fn attach(&self, part: *mut T) {
        self.0.store(part, Ordering::Relaxed);
    }
}
