//! A proportion measured over independent trials, with its Wilson score interval (binomial; good
//! at 0 and 1 and for the few trials a sweep affords, where the normal approximation is not).

/// z for a two-sided 95% interval.
pub const Z95: f64 = 1.959_963_984_540_054;

/// `successes` of `n` as a share and its Wilson interval [low, high] at `z`; NaNs when n = 0.
pub fn wilson(successes: usize, n: usize, z: f64) -> (f64, [f64; 2]) {
    if n == 0 {
        return (f64::NAN, [f64::NAN; 2]);
    }
    let (k, n) = (successes.min(n) as f64, n as f64);
    let p = k / n;
    let z2 = z * z;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = z / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    (p, [(centre - half).max(0.0), (centre + half).min(1.0)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_intervals_match_published_values() {
        // Newcombe (1998), table I: 81/263 → 0.2553–0.3662; 0/10 → 0–0.2775; 10/10 → 0.7225–1.
        let (p, ci) = wilson(81, 263, Z95);
        assert!((p - 81.0 / 263.0).abs() < 1e-12);
        assert!((ci[0] - 0.2553).abs() < 1e-4 && (ci[1] - 0.3662).abs() < 1e-4, "{ci:?}");
        let (_, ci) = wilson(0, 10, Z95);
        assert!(ci[0].abs() < 1e-12 && (ci[1] - 0.2775).abs() < 1e-4, "{ci:?}");
        let (_, ci) = wilson(10, 10, Z95);
        assert!((ci[0] - 0.7225).abs() < 1e-4 && (ci[1] - 1.0).abs() < 1e-12, "{ci:?}");
        assert!(wilson(0, 0, Z95).0.is_nan());
    }
}
