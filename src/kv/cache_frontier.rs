//! `recommend --cache-types`: the quantization question answered as a frontier over (cache type,
//! N exact first tokens, eviction policy, W). Each configuration's perplexity is compared with the
//! exact full cache's on the same steps (a paired 95% interval of the ratio), its memory with the
//! f16 full cache's; the frontier holds the configurations no other beats on both; the choice is
//! the best one within a memory budget, or without one the smallest within δ of the exact cache.

use serde::{Deserialize, Serialize};

use super::recommend::{bootstrap_ppl_interval, BOOTSTRAP_RESAMPLES};
use super::simulate::StreamOutcome;
use crate::model::cache_rounding::CacheRounding;

/// A memory budget: bytes, or a share of the f16 full cache's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum MemoryBudget {
    Bytes(u64),
    Share(f64),
}

impl MemoryBudget {
    /// The budget in bytes, given the f16 full cache's.
    pub fn bytes(&self, reference: u64) -> u64 {
        match *self {
            MemoryBudget::Bytes(b) => b,
            MemoryBudget::Share(s) => (s * reference as f64).floor() as u64,
        }
    }
}

/// One configuration of the frontier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrontierRow {
    /// The cache's formats (K, V, exact first tokens, rotation) and their short name.
    pub rounding: CacheRounding,
    pub format: String,
    /// The policy's label, its pinned tokens and its budget (`None`: the full cache).
    pub policy: String,
    pub sinks: usize,
    pub cache: Option<usize>,
    /// Perplexity over the scored steps.
    pub ppl: f64,
    /// exp(mean NLL difference from the exact full cache on the scored steps), with its paired
    /// 95% bootstrap interval.
    pub ratio: f64,
    pub ratio_ci: Option<[f64; 2]>,
    /// Keys and values at the cache's peak, and that over the f16 full cache's.
    pub bytes: u64,
    pub memory_share: f64,
    /// No other configuration has at most its memory and at most its perplexity, one of them less.
    pub on_frontier: bool,
}

/// The frontier and the choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheFrontier {
    pub tokens: usize,
    /// Steps from this one on are scored (every windowed configuration has evicted by then).
    pub scored_from: usize,
    pub scored_steps: usize,
    /// The exact full cache's perplexity on the scored steps, and its memory stored as f16.
    pub reference_ppl: f64,
    pub reference_bytes: u64,
    pub delta: f64,
    pub memory_budget: Option<MemoryBudget>,
    pub rows: Vec<FrontierRow>,
    /// The chosen row (`None`: nothing fits the budget, or nothing is within δ).
    pub chosen: Option<usize>,
    pub verdict: String,
}

fn ppl_from(nll: &[f64], from: usize) -> f64 {
    let tail = &nll[from.min(nll.len())..];
    (tail.iter().sum::<f64>() / tail.len().max(1) as f64).exp()
}

/// One row from a run under `rounding` against the exact full cache's `reference`.
fn row(rounding: &CacheRounding, o: &StreamOutcome, reference: &StreamOutcome, (from, reference_bytes): (usize, u64)) -> FrontierRow {
    let diffs: Vec<f64> = (from..o.nll.len().min(reference.nll.len())).map(|t| o.nll[t] - reference.nll[t]).collect();
    let mean = diffs.iter().sum::<f64>() / diffs.len().max(1) as f64;
    let full = o.policy.eviction == super::policy::Eviction::Dense;
    FrontierRow {
        rounding: *rounding,
        format: rounding.name(),
        policy: if full { "full cache".into() } else { o.label.clone() },
        sinks: o.policy.pinned(),
        cache: (!full).then_some(o.policy.cache),
        ppl: ppl_from(&o.nll, from),
        ratio: mean.exp(),
        ratio_ci: bootstrap_ppl_interval(&diffs, BOOTSTRAP_RESAMPLES),
        bytes: o.kv_memory.bytes,
        memory_share: o.kv_memory.bytes as f64 / reference_bytes.max(1) as f64,
        on_frontier: false,
    }
}

/// Builds the frontier from each configuration's outcome (paired with its rounding) and the exact
/// full cache's, scoring steps from `scored_from` on.
pub fn cache_frontier(
    runs: &[(CacheRounding, StreamOutcome)],
    reference: &StreamOutcome,
    scored_from: usize,
    delta: f64,
    memory_budget: Option<MemoryBudget>,
) -> CacheFrontier {
    let reference_bytes = reference.kv_memory.bytes;
    let mut rows: Vec<FrontierRow> = runs.iter().map(|(r, o)| row(r, o, reference, (scored_from, reference_bytes))).collect();
    for i in 0..rows.len() {
        let (b, p) = (rows[i].bytes, rows[i].ratio);
        rows[i].on_frontier = !rows.iter().any(|o| o.bytes <= b && o.ratio <= p && (o.bytes < b || o.ratio < p));
    }
    let budget = memory_budget.map(|m| m.bytes(reference_bytes));
    let chosen = match budget {
        Some(b) => (0..rows.len())
            .filter(|&i| rows[i].bytes <= b)
            .min_by(|&i, &j| rows[i].ratio.total_cmp(&rows[j].ratio).then(rows[i].bytes.cmp(&rows[j].bytes))),
        None => (0..rows.len())
            .filter(|&i| rows[i].ratio <= 1.0 + delta)
            .min_by(|&i, &j| rows[i].bytes.cmp(&rows[j].bytes).then(rows[i].ratio.total_cmp(&rows[j].ratio))),
    };
    let scored_steps = reference.nll.len().saturating_sub(scored_from);
    let mut f = CacheFrontier {
        tokens: reference.tokens,
        scored_from,
        scored_steps,
        reference_ppl: ppl_from(&reference.nll, scored_from),
        reference_bytes,
        delta,
        memory_budget,
        rows,
        chosen,
        verdict: String::new(),
    };
    f.verdict = verdict(&f, budget);
    f
}

fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// "q4_0 · 4 exact with sink S=4 W=256 costs +0.8% perplexity (95% interval …) at 31% of the f16
/// full cache's memory", or why nothing was chosen.
fn verdict(f: &CacheFrontier, budget: Option<u64>) -> String {
    let pct = |r: f64| format!("{:+.1}%", 100.0 * (r - 1.0));
    let Some(r) = f.chosen.map(|i| &f.rows[i]) else {
        return match budget {
            Some(b) => format!("No configuration fits {} (the smallest needs {}); add smaller budgets W or coarser cache types.", mib(b), mib(f.rows.iter().map(|r| r.bytes).min().unwrap_or(0))),
            None => format!(
                "No configuration is within {:.1}% of the exact full cache's perplexity ({:.3}); the closest is {}. Give --memory-budget to choose under a budget instead.",
                100.0 * f.delta,
                f.reference_ppl,
                f.rows.iter().min_by(|a, b| a.ratio.total_cmp(&b.ratio)).map_or("none".into(), |r| format!("{} with {} at {}", r.format, r.policy, pct(r.ratio)))
            ),
        };
    };
    let interval =
        r.ratio_ci.map_or(String::new(), |[lo, hi]| format!(" (95% interval {} to {}, paired over {} steps)", pct(lo), pct(hi), f.scored_steps));
    let why = match budget {
        Some(b) => format!("the lowest perplexity within {}", mib(b)),
        None => format!("the least memory within {:.1}% of the exact full cache", 100.0 * f.delta),
    };
    format!(
        "{} with {} costs {} perplexity{interval} at {:.0}% of the f16 full cache's memory ({} of {}): {why}.",
        r.format,
        r.policy,
        pct(r.ratio),
        100.0 * r.memory_share,
        mib(r.bytes),
        mib(f.reference_bytes)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::memory::KvMemory;
    use crate::kv::policy::{Eviction, Policy, PositionMode};

    fn outcome(eviction: Eviction, cache: usize, nll: Vec<f64>, bytes: u64) -> StreamOutcome {
        StreamOutcome {
            policy: Policy::new(eviction, cache, PositionMode::Slot),
            label: format!("{eviction:?} {cache}"),
            ppl: 0.0,
            ppl_after_eviction: None,
            first_eviction_step: None,
            cliff_step: None,
            tokens: nll.len() + 1,
            tokens_per_s: 1.0,
            cache_len: vec![],
            kv_memory: KvMemory { bytes, ..Default::default() },
            kept: None,
            nll,
        }
    }

    #[test]
    fn the_frontier_keeps_the_undominated_and_the_budget_picks_the_best_that_fits() {
        let base: Vec<f64> = (0..300).map(|t| 2.0 + ((t * 37) % 11) as f64 / 10.0).collect();
        let shift = |d: f64| base.iter().map(|v| v + d).collect::<Vec<_>>();
        let reference = outcome(Eviction::Dense, 300, base.clone(), 1000);
        let q8 = CacheRounding { keys: crate::numerics::cache_formats::CacheFormat::Q8_0, ..CacheRounding::default() };
        let runs = vec![
            (CacheRounding::default(), outcome(Eviction::Dense, 300, base.clone(), 1000)),
            (q8, outcome(Eviction::Dense, 300, shift(0.001), 530)),
            (q8, outcome(Eviction::Sink { sinks: 4 }, 64, shift(0.05), 120)),
            // Dominated: more memory and a higher perplexity than the q8_0 sink row.
            (q8, outcome(Eviction::Window, 128, shift(0.2), 240)),
        ];
        let f = cache_frontier(&runs, &reference, 64, 0.02, None);
        assert_eq!(f.rows.iter().map(|r| r.on_frontier).collect::<Vec<_>>(), [true, true, true, false]);
        assert_eq!(f.chosen, Some(1), "the least memory within 2%: {}", f.verdict);
        assert!((f.rows[2].ratio - 0.05f64.exp()).abs() < 1e-12 && f.rows[2].memory_share == 0.12);
        assert!(f.verdict.starts_with("K q8_0 · V f32 with full cache costs +0.1% perplexity"), "{}", f.verdict);
        let within = cache_frontier(&runs, &reference, 64, 0.02, Some(MemoryBudget::Share(0.25)));
        assert_eq!(within.chosen, Some(2), "{}", within.verdict);
        let none = cache_frontier(&runs, &reference, 64, 0.02, Some(MemoryBudget::Bytes(100)));
        assert_eq!(none.chosen, None);
        assert!(none.verdict.starts_with("No configuration fits"), "{}", none.verdict);
    }
}
