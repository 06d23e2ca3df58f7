//! When a failed delivery is tried again: exponential backoff from 1 s, doubling to at most
//! 60 s, each pause drawn at random between half of it and all of it (so a receiver that comes
//! back is not hit by every pending delivery at once), and none once `retry_for` has passed
//! since the first attempt.

use std::time::Duration;

/// The first pause.
pub const FIRST: Duration = Duration::from_secs(1);
/// The longest pause.
pub const MAX: Duration = Duration::from_secs(60);

/// The pause after failed attempt `attempt` (1-based), `elapsed` after the first attempt
/// started, or `None` when no attempt may follow. `unit` in `[0, 1)` is the random draw.
pub fn next_pause(
    attempt: u32,
    elapsed: Duration,
    retry_for: Duration,
    unit: f64,
) -> Option<Duration> {
    let exp = attempt.saturating_sub(1).min(16);
    let full = FIRST.saturating_mul(1 << exp).min(MAX);
    let unit = if unit.is_finite() {
        unit.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let pause = full.mul_f64(0.5 + unit / 2.0);
    (elapsed.saturating_add(pause) < retry_for).then_some(pause)
}

/// A draw in `[0, 1)` from the system's random source (a fixed half when it cannot be read).
pub fn random_unit() -> f64 {
    let mut raw = [0u8; 8];
    match ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut raw) {
        Ok(()) => (u64::from_le_bytes(raw) >> 11) as f64 / (1u64 << 53) as f64,
        Err(_) => 0.5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN_MIN: Duration = Duration::from_secs(600);

    #[test]
    fn pauses_double_to_a_cap_with_jitter_and_stop_at_the_retry_time() {
        let s = |n| next_pause(n, Duration::ZERO, TEN_MIN, 0.999_999).unwrap();
        assert!(s(1) <= FIRST && s(1) > FIRST / 2);
        assert!(s(2) <= 2 * FIRST && s(2) > FIRST);
        assert!(s(10) <= MAX && s(10) > MAX / 2 + Duration::from_secs(29));
        assert_eq!(
            next_pause(3, Duration::ZERO, TEN_MIN, 0.0),
            Some(Duration::from_secs(2))
        );
        // Never past the retry time.
        assert_eq!(next_pause(5, Duration::from_secs(599), TEN_MIN, 0.0), None);
        assert_eq!(next_pause(1, Duration::ZERO, Duration::ZERO, 0.0), None);
        // A huge attempt number does not overflow.
        assert_eq!(
            next_pause(u32::MAX, Duration::ZERO, TEN_MIN, 1.0),
            Some(MAX)
        );
        // A draw outside [0, 1) is clamped.
        assert_eq!(
            next_pause(1, Duration::ZERO, TEN_MIN, f64::NAN),
            Some(FIRST / 2)
        );
    }

    #[test]
    fn random_draws_are_in_the_unit_interval_and_vary() {
        let draws: Vec<f64> = (0..64).map(|_| random_unit()).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        assert!(draws.windows(2).any(|w| w[0] != w[1]));
    }
}
