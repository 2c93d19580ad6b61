//! Which context positions each (layer, KV head) keeps, given its press's scores: kvpress's
//! uniform cut (`ScorerPress`), PyramidKV's per-layer budgets, AdaKV's head-adaptive allocation
//! and ChunkKV's whole chunks. Ties go to the earlier position (torch.topk's CPU order is
//! implementation-defined, so kvpress may keep another of positions scored exactly alike).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How a layer's budget is split among its KV heads and across layers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "rule")]
pub enum Budget {
    /// Every (layer, KV head) keeps kvpress's `compute_n_kept` positions.
    Uniform,
    /// PyramidKV (`PyramidKVPress.get_layer_budget`): more keys in the lower layers, fewer in the
    /// upper, linearly, summing to the uniform budget; `window` is SnapKV's observation window,
    /// `beta` the pyramid's steepness.
    Pyramid { window: usize, beta: f64 },
    /// AdaKV (`AdaKVPress`): a layer keeps its heads' uniform budgets in total, but chooses the
    /// keys across its KV heads by score; each head keeps at least `alpha` of its uniform budget.
    Adaptive { alpha: f64 },
}

/// PyramidKV's defaults in kvpress.
pub const PYRAMID_WINDOW: usize = 64;
pub const PYRAMID_BETA: f64 = 20.0;
/// AdaKV's `alpha_safeguard` default in kvpress.
pub const ADAPTIVE_ALPHA: f64 = 0.2;

impl Budget {
    pub fn name(&self) -> &'static str {
        match self {
            Budget::Uniform => "uniform",
            Budget::Pyramid { .. } => "pyramid",
            Budget::Adaptive { .. } => "adaptive",
        }
    }

    pub fn check(&self) -> Result<()> {
        match *self {
            Budget::Pyramid { beta, .. } if !(beta >= 1.0 && beta.is_finite()) => {
                Err(Error::input(format!("a pyramid steepness (beta) of {beta}: it is at least 1")))
            }
            Budget::Adaptive { alpha } if !(0.0..=1.0).contains(&alpha) => {
                Err(Error::input(format!("an adaptive safeguard (alpha) of {alpha}: the share of a head's budget it keeps is between 0 and 1")))
            }
            _ => Ok(()),
        }
    }
}

/// kvpress's `compute_n_kept`: the keys a ratio keeps of `n` (at least 1).
pub fn n_kept(n: usize, ratio: f64) -> usize {
    ((n as f64 * (1.0 - ratio)) as usize).max(1)
}

/// PyramidKV's budget for layer `layer` of `layers` over a context of `n` (kvpress's formula,
/// Python's `round`: half to even).
pub fn pyramid_budget(n: usize, ratio: f64, (window, beta): (usize, f64), (layer, layers): (usize, usize)) -> usize {
    let (q, w) = (n as f64, window as f64);
    let most = w + q * (1.0 - ratio);
    let mut min_num = (most - w) / beta;
    let mut max_num = (most - w) * 2.0 - min_num;
    if max_num >= q - w {
        max_num = q - w;
        min_num = (most - w) * 2.0 - max_num;
    }
    if !(q >= max_num && max_num >= min_num && min_num >= w) {
        return ((q * (1.0 - ratio)).round_ties_even() as usize).max(1);
    }
    let steps = if layers > 1 { (max_num - min_num) / (layers - 1) as f64 } else { 0.0 };
    ((max_num - layer as f64 * steps).round_ties_even().max(0.0) as usize).min(n)
}

/// The positions `scores` (higher keeps) keeps: the first `sinks`, then the best-scored up to
/// `n`, ties to the earlier position; ascending.
pub fn kept_positions(scores: &[f64], n: usize, sinks: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (sinks.min(scores.len())..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    let mut kept: Vec<usize> = (0..sinks.min(n)).chain(order.into_iter().take(n.saturating_sub(sinks))).collect();
    kept.sort_unstable();
    kept
}

/// AdaKV's choice over one layer's KV heads (`scores[kv][p]`): each head's best
/// ⌊alpha·keep⌋ (at least 1 when alpha > 0) and its first `sinks` kept first, then the best of
/// every head's other keys until the layer holds `keep` per head in total; ties to the lower
/// head, then the earlier position.
pub fn adaptive_positions(scores: &[Vec<f64>], keep: usize, sinks: usize, alpha: f64) -> Vec<Vec<usize>> {
    let safe = match alpha > 0.0 {
        true => ((keep as f64 * alpha) as usize).max(1),
        false => 0,
    };
    let mut forced: Vec<Vec<bool>> = scores
        .iter()
        .map(|s| {
            let mut f = vec![false; s.len()];
            kept_positions(s, safe.max(sinks.min(keep)), sinks.min(keep)).into_iter().for_each(|p| f[p] = true);
            f
        })
        .collect();
    let total = keep * scores.len();
    let taken: usize = forced.iter().map(|f| f.iter().filter(|&&x| x).count()).sum();
    let mut rest: Vec<(usize, usize)> =
        forced.iter().enumerate().flat_map(|(h, f)| (0..f.len()).filter(move |&p| !f[p]).map(move |p| (h, p))).collect();
    rest.sort_by(|&(ha, pa), &(hb, pb)| scores[hb][pb].total_cmp(&scores[ha][pa]).then((ha, pa).cmp(&(hb, pb))));
    for (h, p) in rest.into_iter().take(total.saturating_sub(taken)) {
        forced[h][p] = true;
    }
    forced.iter().map(|f| (0..f.len()).filter(|&p| f[p]).collect()).collect()
}

/// ChunkKV's choice for one layer: the context cut into chunks of `chunk` from position 0 (a
/// shorter last chunk is a chunk of its own), each scored by the mean over its positions of the
/// score summed over the KV heads; the best ⌊chunks·(1 − ratio)⌋ (at least 1) kept whole, the
/// same for every KV head, chunks holding a pinned position first; ties to the earlier chunk.
/// `None` when the context is shorter than one chunk (kvpress then cuts token by token).
pub fn chunk_positions(scores: &[Vec<f64>], chunk: usize, ratio: f64, sinks: usize) -> Option<Vec<usize>> {
    let n = scores.first().map_or(0, Vec::len);
    if chunk == 0 || n / chunk == 0 {
        return None;
    }
    let chunks = n.div_ceil(chunk);
    let summed: Vec<f64> = (0..n).map(|p| scores.iter().map(|s| s[p]).sum()).collect();
    let chunk_scores: Vec<f64> = (0..chunks)
        .map(|c| {
            let span = &summed[c * chunk..((c + 1) * chunk).min(n)];
            span.iter().sum::<f64>() / span.len() as f64
        })
        .collect();
    let keep = ((chunks as f64 * (1.0 - ratio)) as usize).max(1);
    let pinned = sinks.min(n).div_ceil(chunk);
    let kept = kept_positions(&chunk_scores, keep.max(pinned), pinned);
    Some(kept.into_iter().flat_map(|c| c * chunk..((c + 1) * chunk).min(n)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cut_keeps_sinks_then_the_best_and_ties_go_to_the_earlier_position() {
        assert_eq!(n_kept(512, 0.25), 384);
        assert_eq!(n_kept(3, 0.9), 1);
        let scores = [0.0, 5.0, 1.0, 5.0, 2.0, 5.0];
        assert_eq!(kept_positions(&scores, 2, 0), vec![1, 3]);
        assert_eq!(kept_positions(&scores, 3, 1), vec![0, 1, 3]);
    }

    #[test]
    fn pyramid_budgets_fall_linearly_and_sum_to_the_uniform_budget() {
        let budgets: Vec<usize> = (0..30).map(|l| pyramid_budget(512, 0.5, (64, 20.0), (l, 30))).collect();
        assert!(budgets.windows(2).all(|w| w[0] >= w[1]), "{budgets:?}");
        let total: usize = budgets.iter().sum();
        assert!((total as f64 - 30.0 * 256.0).abs() <= 30.0, "{total}");
        // A context too short for the pyramid: kvpress falls back to the uniform budget.
        assert_eq!(pyramid_budget(100, 0.5, (64, 20.0), (0, 30)), 50);
    }

    #[test]
    fn adaptive_keeps_the_layer_total_and_every_heads_safeguard() {
        let scores = vec![vec![9.0, 8.0, 7.0, 6.0], vec![0.1, 0.4, 0.3, 0.2]];
        let kept = adaptive_positions(&scores, 2, 0, 0.5);
        assert_eq!(kept, vec![vec![0, 1, 2], vec![1]]);
        assert_eq!(adaptive_positions(&scores, 2, 1, 0.0), vec![vec![0, 1, 2], vec![0]]);
    }

    #[test]
    fn chunks_stay_whole_and_the_last_short_chunk_counts() {
        let scores = vec![vec![1.0, 1.0, 5.0, 5.0, 0.0, 0.0, 9.0], vec![0.0; 7]];
        assert_eq!(chunk_positions(&scores, 2, 0.5, 0), Some(vec![2, 3, 6]));
        assert_eq!(chunk_positions(&scores, 2, 0.5, 1), Some(vec![0, 1, 6]));
        assert_eq!(chunk_positions(&scores, 8, 0.5, 0), None);
    }
}
