//! Attention-sink metrics over reduced attention (pure functions, no model):
//! - α_k^{l,h} = (1/(T−k)) Σ_{i=k}^{T−1} A^{l,h}_{i,k} — per-head key importance (Gu et al. 2024,
//!   "When Attention Sink Emerges in Language Models", ICLR 2025);
//! - Sink_k^ε = 100 · fraction of (sample, layer, head) with α_k > ε (Gu et al.; ε = 0.3, T = 64 in
//!   the paper) — a share of heads, not a mass;
//! - F-Attn = mean over layers and heads of the attention paid to position 0 (Qiu et al. 2025), i.e.
//!   the mean of α_0;
//! - sink-position discovery: every key position that some head treats as a sink (α_k > ε over
//!   enough later queries), not only position 0;
//! - learned sinks (gpt-oss): the share of each softmax row a head's sink logit takes, summarised.

use serde::{Deserialize, Serialize};

pub use crate::metrics::sinks::{alpha, seeing};

/// α for one sample: [layer][head][k] for k < K.
pub type Alphas = Vec<Vec<Vec<f64>>>;

/// Sink_k^ε in percent over every (sample, layer, head).
pub fn sink_score(samples: &[&Alphas], k: usize, epsilon: f64) -> f64 {
    let (mut hits, mut total) = (0usize, 0usize);
    for sample in samples {
        for head in sample.iter().flatten() {
            total += 1;
            if head.get(k).is_some_and(|&a| a > epsilon) {
                hits += 1;
            }
        }
    }
    if total == 0 {
        0.0
    } else {
        100.0 * hits as f64 / total as f64
    }
}

/// F-Attn: mean over samples, layers and heads of α_0.
pub fn f_attn(samples: &[&Alphas]) -> f64 {
    let values: Vec<f64> = samples.iter().flat_map(|s| s.iter().flatten().filter_map(|h| h.first().copied())).collect();
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// One head that sinks onto a position, and how much.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SinkHead {
    pub layer: usize,
    pub head: usize,
    pub alpha: f64,
}

/// A key position that acts as a sink for at least one head.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SinkPosition {
    pub pos: usize,
    /// The token at that position (vocabulary piece).
    pub token: String,
    /// Heads with α_pos > ε, strongest first.
    pub heads: Vec<SinkHead>,
    /// Mean α_pos over all heads of all layers.
    pub mean_alpha: f64,
}

/// Finds every position k that some head attends to as a sink: α_k > ε, with at least
/// `min_queries` queries at or after k so that one query's self-attention cannot qualify.
/// `col_mass[l][h][k]` are column sums over T query rows. Sorted by number of heads, then position.
/// `windows[l]` is layer l's own sliding window (missing: global): there α_k counts the queries
/// within the window of k, and a key the whole window sees qualifies.
pub fn discover_sink_positions(
    col_mass: &[Vec<Vec<f64>>],
    t: usize,
    windows: &[Option<usize>],
    epsilon: f64,
    min_queries: usize,
    tokens: &[String],
) -> Vec<SinkPosition> {
    let max_k = t.saturating_sub(min_queries.max(1)) + 1;
    let n_heads_total = col_mass.iter().map(Vec::len).sum::<usize>().max(1);
    let mut found = Vec::new();
    for k in 0..max_k.min(t) {
        let mut heads = Vec::new();
        let mut sum = 0.0;
        for (l, layer) in col_mass.iter().enumerate() {
            let window = windows.get(l).copied().flatten();
            let enough = seeing(t, k, window) >= min_queries.min(window.unwrap_or(usize::MAX));
            for (h, col) in layer.iter().enumerate() {
                let a = alpha(col, t, k, window);
                sum += a;
                if a > epsilon && enough {
                    heads.push(SinkHead { layer: l, head: h, alpha: a });
                }
            }
        }
        if !heads.is_empty() {
            heads.sort_by(|a, b| b.alpha.total_cmp(&a.alpha));
            found.push(SinkPosition { pos: k, token: tokens.get(k).cloned().unwrap_or_default(), heads, mean_alpha: sum / n_heads_total as f64 });
        }
    }
    found.sort_by(|a, b| b.heads.len().cmp(&a.heads.len()).then(a.pos.cmp(&b.pos)));
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Column masses of a causal T×T pattern given as rows.
    fn col_mass(rows: &[Vec<f64>]) -> Vec<f64> {
        let t = rows.len();
        (0..t).map(|k| rows.iter().map(|r| r.get(k).copied().unwrap_or(0.0)).sum()).collect()
    }

    #[test]
    fn alpha_averages_over_queries_at_or_after_k() {
        let rows = vec![vec![1.0], vec![0.9, 0.1], vec![0.8, 0.1, 0.1], vec![0.7, 0.1, 0.1, 0.1]];
        let c = col_mass(&rows);
        assert!((alpha(&c, 4, 0, None) - 3.4 / 4.0).abs() < 1e-12);
        assert!((alpha(&c, 4, 1, None) - 0.3 / 3.0).abs() < 1e-12);
        assert!((alpha(&c, 4, 3, None) - 0.1).abs() < 1e-12);
        assert_eq!(alpha(&c, 4, 4, None), 0.0);
        // With a window of 2 keys, key 0 is seen by queries 0 and 1 only: (1.0 + 0.4) / 2.
        let windowed = col_mass(&[vec![1.0], vec![0.4, 0.6], vec![0.0, 0.5, 0.5], vec![0.0, 0.0, 0.3, 0.7]]);
        assert!((alpha(&windowed, 4, 0, Some(2)) - 0.7).abs() < 1e-12);
        assert!((alpha(&windowed, 4, 0, None) - 1.4 / 4.0).abs() < 1e-12);
        assert_eq!((seeing(4, 0, Some(2)), seeing(4, 3, Some(2)), seeing(4, 1, None)), (2, 1, 3));
    }

    #[test]
    fn sink_score_counts_heads_not_mass() {
        // Two samples × 1 layer × 2 heads; α_0 = 0.9, 0.2 and 0.5, 0.31.
        let a: Alphas = vec![vec![vec![0.9], vec![0.2]]];
        let b: Alphas = vec![vec![vec![0.5], vec![0.31]]];
        assert_eq!(sink_score(&[&a, &b], 0, 0.3), 75.0);
        assert_eq!(sink_score(&[&a, &b], 0, 0.6), 25.0);
        assert_eq!(sink_score(&[&a, &b], 5, 0.3), 0.0);
        assert!((f_attn(&[&a, &b]) - (0.9 + 0.2 + 0.5 + 0.31) / 4.0).abs() < 1e-12);
    }

    #[test]
    fn discovers_a_delimiter_sink_beyond_position_zero() {
        // T = 6. Head (0,0) sinks on 0; head (0,1) sinks on position 2 (a "." say) once it exists.
        let t = 6;
        let h0: Vec<Vec<f64>> = (0..t)
            .map(|i| {
                let mut r = vec![0.0; i + 1];
                r[0] = 1.0;
                r
            })
            .collect();
        let h1: Vec<Vec<f64>> = (0..t)
            .map(|i| {
                let mut r = vec![1.0 / (i + 1) as f64; i + 1];
                if i >= 2 {
                    r.iter_mut().for_each(|v| *v = 0.1 / i as f64);
                    r[2] = 0.9;
                }
                r
            })
            .collect();
        let cm = vec![vec![col_mass(&h0), col_mass(&h1)]];
        let tokens: Vec<String> = ["<s>", "a", ".", "b", "c", "d"].iter().map(|s| s.to_string()).collect();
        let found = discover_sink_positions(&cm, t, &[], 0.3, 2, &tokens);
        let positions: Vec<usize> = found.iter().map(|s| s.pos).collect();
        assert_eq!(positions, vec![0, 2]);
        assert_eq!(found[1].token, ".");
        assert_eq!(found[1].heads, vec![SinkHead { layer: 0, head: 1, alpha: 0.9 }]);
        // The last position (one query) can never qualify with min_queries = 2.
        assert!(found.iter().all(|s| s.pos <= 4));
    }
}

/// Learned sink logits summarised over heads, beside α_0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LearnedSinks {
    pub heads: usize,
    /// Mean share of a softmax row the sink logits take, and the mean α_0 beside it.
    pub mean: f64,
    pub mean_alpha0: f64,
    /// Heads whose sink takes more than half of a row.
    pub above_half: usize,
    /// The head whose sink takes most: (layer, head, sink mass, α_0).
    pub top: (usize, usize, f64, f64),
}

/// Summarises (layer, head, sink mass, α_0) per head; `None` without learned sinks.
pub fn learned_sinks(heads: impl Iterator<Item = (usize, usize, f64, f64)>) -> Option<LearnedSinks> {
    let heads: Vec<(usize, usize, f64, f64)> = heads.collect();
    let n = heads.len();
    let top = *heads.iter().max_by(|a, b| a.2.total_cmp(&b.2))?;
    Some(LearnedSinks {
        heads: n,
        mean: heads.iter().map(|h| h.2).sum::<f64>() / n as f64,
        mean_alpha0: heads.iter().map(|h| h.3).sum::<f64>() / n as f64,
        above_half: heads.iter().filter(|h| h.2 > 0.5).count(),
        top,
    })
}
