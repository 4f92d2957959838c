//! A spin lock over plain data in shared memory.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

/// Failed attempts at the lock between two yields of the CPU.
const SPINS_BEFORE_YIELD: u32 = 64;

/// Plain data behind a spin lock, for short critical sections in shared memory that copy a few
/// fields and cannot fail. All-zero bytes are a valid unlocked state when they are for `T`.
#[repr(C)]
pub struct SpinLocked<T: Copy> {
    lock: AtomicBool,
    data: UnsafeCell<T>,
}

// SAFETY: access to `data` is serialised by the spin lock.
unsafe impl<T: Copy> Sync for SpinLocked<T> {}

impl<T: Copy> SpinLocked<T> {
    /// Runs `body` with the data locked. `body` must be short and must not raise or panic.
    pub fn with<R>(&self, body: impl FnOnce(&mut T) -> R) -> R {
        let mut spins = 0u32;
        while self
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins = spins.wrapping_add(1);
            // A holder that lost its CPU keeps the lock for a time slice: spinning through it
            // burns the CPU the holder needs to go on (eight sessions on two cores, perf), so
            // after a short spin the waiter gives its CPU away.
            if spins.is_multiple_of(SPINS_BEFORE_YIELD) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        // SAFETY: the spin lock gives us the only reference; the body only copies plain data.
        let result = body(unsafe { &mut *self.data.get() });
        self.lock.store(false, Ordering::Release);
        result
    }
}
