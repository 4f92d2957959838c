//! Lease tokens: a fresh one for every claim of every job (Rule 4).

use pgrx::pg_sys;

thread_local! {
    /// This backend's lease-token generator, seeded from the server's strong random source.
    static TOKENS: std::cell::Cell<u64> = std::cell::Cell::new(strong_seed());
}

fn strong_seed() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: fills our own buffer.
    let ok = unsafe { pg_sys::pg_strong_random(bytes.as_mut_ptr().cast(), bytes.len()) };
    assert!(
        ok,
        "pg_jobs could not read the server's random source to seed lease tokens"
    );
    u64::from_le_bytes(bytes)
}

/// A fresh lease token (a version-4 UUID). Tokens fence stale holders off; they are not
/// secrets (anyone who may read jobs.job sees them), so a fast generator seeded from the
/// strong source serves: a claim of 100 jobs would otherwise read the system's random source
/// 100 times.
pub fn lease_token() -> pgrx::Uuid {
    // splitmix64: a full-period 64-bit generator with good mixing.
    let next = || {
        TOKENS.with(|state| {
            let z = state.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
            state.set(z);
            let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        })
    };
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&next().to_le_bytes());
    bytes[8..].copy_from_slice(&next().to_le_bytes());
    bytes[6] = (bytes[6] & 0x0f) | 0x40; // version 4
    bytes[8] = (bytes[8] & 0x3f) | 0x80; // RFC 4122 variant
    pgrx::Uuid::from_bytes(bytes)
}
