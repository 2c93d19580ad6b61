//! Downward steps in a noisy series (token logprobs): a one-sided CUSUM whose threshold is set
//! from a target false-alarm rate, with each step's start dated and its size measured.
//!
//! At each token the detector compares the logprob with a baseline — mean and standard deviation
//! of the `baseline` tokens before the current CUSUM run, so a shift never leaks into its own
//! reference — and accumulates the standardised drop minus half the smallest step worth an alarm
//! (Page 1954). The threshold h makes the in-control average run length 10,000 / (false alarms
//! per 10,000 tokens) for independent Gaussian noise, by Siegmund's approximation
//! ARL₀ ≈ (e^{2kh'} − 2kh' − 1) / (2k²), h' = h + 1.166. Token logprobs are neither Gaussian nor
//! independent, and the baseline's mean is only an estimate, so each standardised value is clipped
//! at ±3 σ, the threshold is planned as if that mean were one standard error off, and the rate
//! actually reached is measured, not assumed (`benches/watch_eval.rs`).

use serde::{Deserialize, Serialize};

/// What counts as a step, and how often the detector may be wrong on a steady series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepOptions {
    /// Smallest drop of the mean worth an alarm (nats).
    pub min_step: f64,
    /// Tokens in the baseline before each run (and the warm-up after the start or a step).
    pub baseline: usize,
    /// Target false alarms per 10,000 tokens on a steady series.
    pub false_alarms_per_10k: f64,
}

impl Default for StepOptions {
    fn default() -> Self {
        StepOptions { min_step: 0.5, baseline: 96, false_alarms_per_10k: 1.0 }
    }
}

/// One detected step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// The first token of the new level (the CUSUM run's start).
    pub start: usize,
    /// The token at which the alarm was raised (start + detection delay).
    pub alarm: usize,
    /// Mean before minus mean after (nats; positive = logprob fell), over up to `baseline`
    /// tokens on each side.
    pub size: f64,
    pub mean_before: f64,
    pub mean_after: f64,
}

/// Floor on the baseline's standard deviation (nats), so a run of identical values does not
/// make every wiggle a step.
const MIN_SIGMA: f64 = 0.05;
/// Standardised values are clipped here (one terrible token is not a step).
const CLIP: f64 = 3.0;

/// The CUSUM threshold (in σ units) for reference value `k` (σ units) and in-control average
/// run length `arl0`, by Siegmund's approximation, solved by bisection.
pub fn threshold(k: f64, arl0: f64) -> f64 {
    let arl = |h: f64| {
        let a = 2.0 * k * (h + 1.166);
        if k < 1e-9 {
            (h + 1.166).powi(2)
        } else {
            (a.exp() - a - 1.0) / (2.0 * k * k)
        }
    };
    let (mut lo, mut hi) = (0.0, 1.0);
    while arl(hi) < arl0 && hi < 1e6 {
        hi *= 2.0;
    }
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if arl(mid) < arl0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// Smallest reference value (σ units) the threshold is planned for.
const MIN_K: f64 = 0.05;
/// Tokens of a new level before its first comparison (its baseline grows from there).
const WARM_UP: usize = 32;
/// Fewest tokens on either side of a dated step.
const MIN_SEGMENT: f64 = 16.0;
/// The first tokens of a series have little context to predict from (their logprobs are far
/// below the rest): they stay out of every baseline.
pub const CONTEXT_FREE: usize = 16;

/// The most likely start of a step in `x[from..=alarm]`, searched from `earliest`: the split
/// with the largest two-sample statistic (mean before − mean after)·√(n₁n₂/(n₁+n₂)), ties to
/// the earlier split. The CUSUM run's own start can lie well before the change when noise had
/// already lifted it off zero.
fn date_step(x: &[f64], from: usize, earliest: usize, alarm: usize) -> usize {
    let seg = &x[from..=alarm.min(x.len() - 1)];
    let total: f64 = seg.iter().sum();
    let n = seg.len() as f64;
    let mut before = seg[..earliest - from].iter().sum::<f64>();
    let mut best = (f64::NEG_INFINITY, earliest);
    for (tau, value) in x.iter().enumerate().take(from + seg.len()).skip(earliest) {
        let n1 = (tau - from) as f64;
        let n2 = n - n1;
        // A few bad tokens right before the alarm are not a level.
        if n1 >= MIN_SEGMENT && n2 >= MIN_SEGMENT {
            let stat = (before / n1 - (total - before) / n2) * (n1 * n2 / n).sqrt();
            if stat > best.0 {
                best = (stat, tau);
            }
        }
        before += value;
    }
    best.1
}

/// Mean and population variance of `x` (0, 0 when empty).
pub fn mean_var(x: &[f64]) -> (f64, f64) {
    let n = x.len().max(1) as f64;
    let mean = x.iter().sum::<f64>() / n;
    (mean, x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n)
}

/// Mean and standard deviation of `x` (population), σ floored at [`MIN_SIGMA`].
fn mean_sd(x: &[f64]) -> (f64, f64) {
    let (mean, var) = mean_var(x);
    (mean, var.sqrt().max(MIN_SIGMA))
}

/// The downward steps of `x`, in order. Nothing is looked for in the first `baseline / 2`
/// tokens, nor in the first tokens of the level after a step.
pub fn downward_steps(x: &[f64], opts: &StepOptions) -> Vec<Step> {
    let b = opts.baseline.max(8);
    let arl0 = 1e4 / opts.false_alarms_per_10k.max(1e-6);
    let mut steps = Vec::new();
    // The current regime starts here (after the context-free first tokens, or at the last step).
    let mut regime = CONTEXT_FREE.min(x.len() / 4);
    let mut t = regime + b / 2;
    let mut run_start = t;
    let mut s = 0.0;
    let mut reference: Option<(f64, f64, f64)> = None;
    while t < x.len() {
        // The baseline: up to b tokens before the run, inside the regime; fixed while s > 0.
        let (mean, sd, h) = *reference.get_or_insert_with(|| {
            let base = &x[run_start.saturating_sub(b).max(regime)..run_start];
            let (mean, sd) = mean_sd(base);
            // The baseline mean is itself estimated: plan the threshold for one standard error of
            // it against us (its in-control drift is then k − 1/√n, not k).
            let k = opts.min_step / (2.0 * sd) - 1.0 / (base.len() as f64).sqrt();
            (mean, sd, threshold(k.max(MIN_K), arl0))
        });
        let k = opts.min_step / (2.0 * sd);
        let z = ((mean - x[t]) / sd).clamp(-CLIP, CLIP);
        s = (s + z - k).max(0.0);
        if s == 0.0 {
            run_start = t + 1;
            reference = None;
        } else if s > h {
            let from = run_start.saturating_sub(b).max(regime);
            let start = date_step(x, from, run_start.saturating_sub(b / 2).max(from + 1), t);
            let (mean_before, _) = mean_sd(&x[start.saturating_sub(b).max(regime)..start]);
            let (mean_after, _) = mean_sd(&x[start..(start + b).min(x.len())]);
            steps.push(Step { start, alarm: t, size: mean_before - mean_after, mean_before, mean_after });
            // The new level needs a short baseline of its own before anything is compared with it.
            regime = start;
            t = (start + WARM_UP.min(b)).max(t + 1);
            run_start = t;
            s = 0.0;
            reference = None;
            continue;
        }
        t += 1;
    }
    steps
}

/// Rolling mean of the last `window` values at each index (fewer at the start).
pub fn rolling_mean(x: &[f64], window: usize) -> Vec<f64> {
    let w = window.max(1);
    let mut sum = 0.0;
    (0..x.len())
        .map(|i| {
            sum += x[i];
            if i >= w {
                sum -= x[i - w];
            }
            sum / (i + 1).min(w) as f64
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reproducible noise: xorshift64* mapped to a roughly Gaussian sum of uniforms.
    fn noise(n: usize, seed: u64) -> Vec<f64> {
        let mut state = seed.max(1);
        let mut next = move || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
        };
        (0..n).map(|_| (0..12).map(|_| next()).sum::<f64>() - 6.0).collect()
    }

    #[test]
    fn threshold_meets_its_run_length() {
        // The textbook pair: k = 0.5, h = 4 has ARL₀ ≈ 336 (Montgomery, Introduction to
        // Statistical Quality Control); Siegmund's approximation gives 338 there.
        let h = threshold(0.5, 338.0);
        assert!((h - 4.0).abs() < 0.05, "{h}");
        assert!(threshold(0.25, 1e4) > threshold(0.25, 1e3));
    }

    #[test]
    fn a_step_is_dated_and_sized_and_noise_alone_raises_none() {
        let mut x: Vec<f64> = noise(3000, 7).iter().map(|v| -2.0 + v).collect();
        assert!(downward_steps(&x, &StepOptions::default()).is_empty(), "steady noise");
        for v in &mut x[1500..] {
            *v -= 1.0;
        }
        let steps = downward_steps(&x, &StepOptions::default());
        assert_eq!(steps.len(), 1, "{steps:?}");
        let s = steps[0];
        assert!((1490..=1515).contains(&s.start) && s.alarm >= s.start && s.alarm < 1560, "{s:?}");
        assert!((s.size - 1.0).abs() < 0.35, "{s:?}");
        // A rise is not a step down.
        let up: Vec<f64> = x.iter().enumerate().map(|(i, v)| if i >= 1500 { v + 2.0 } else { *v }).collect();
        assert!(downward_steps(&up, &StepOptions::default()).is_empty());
    }

    #[test]
    fn rolling_mean_averages_what_it_has() {
        assert_eq!(rolling_mean(&[1.0, 3.0, 5.0, 7.0], 2), vec![1.0, 2.0, 4.0, 6.0]);
    }
}
