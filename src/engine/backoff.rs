//! Retry backoff (Rule 6): how long a failed job waits before its next attempt.

use pgrx::pg_sys;

/// The delay after failed attempt `attempt` (1-based), in microseconds:
/// `min(max, base × 2^(attempt−1))`, then stretched by `jitter × random` (`random` in [0, 1)),
/// so jitter never shortens the delay.
pub fn delay_micros(base: i128, max: i128, jitter: f64, attempt: i32, random: f64) -> i128 {
    // Past 2^62 every sane base is far beyond any max; the cap keeps the shift in range.
    let exponent = (attempt.max(1) - 1).min(62) as u32;
    let delay = base.saturating_mul(1i128 << exponent).min(max).max(0);
    let jitter = if jitter.is_nan() {
        0.0
    } else {
        jitter.clamp(0.0, 1.0)
    };
    delay + (delay as f64 * jitter * random.clamp(0.0, 1.0)) as i128
}

/// A uniformly distributed number in [0, 1) from the server's random source.
pub fn random_fraction() -> f64 {
    let mut bytes = [0u8; 8];
    // SAFETY: fills our own buffer; on the rare failure we fall back to no jitter.
    let ok = unsafe { pg_sys::pg_strong_random(bytes.as_mut_ptr().cast(), bytes.len()) };
    if !ok {
        return 0.0;
    }
    // 53 random bits make every double in [0, 1) on the grid equally likely.
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::delay_micros;

    const S: i128 = 1_000_000;

    #[test]
    fn doubles_per_attempt_until_the_cap() {
        let delays: Vec<i128> = (1..=8)
            .map(|a| delay_micros(S, 60 * S, 0.0, a, 0.0))
            .collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60].map(|s| s * S));
    }

    #[test]
    fn jitter_only_stretches() {
        assert_eq!(delay_micros(10 * S, 3600 * S, 0.5, 1, 0.0), 10 * S);
        assert_eq!(
            delay_micros(10 * S, 3600 * S, 0.5, 1, 0.999_999),
            10 * S + 4_999_995
        );
    }

    #[test]
    fn huge_attempts_do_not_overflow() {
        assert_eq!(delay_micros(S, 3600 * S, 0.0, i32::MAX, 0.0), 3600 * S);
    }
}
