//! A score-based policy applied once to a whole prefilled prompt — SnapKV's and kvpress's setting,
//! where the question is known while the prompt is compressed. The prompt runs with every key;
//! the attention its own queries paid scores each (layer, KV head)'s keys (SnapKV: the last
//! `observe` queries — the question, when it ends the prompt — max-pooled over 7 neighbouring
//! positions; H2O: every query; TOVA: the last one), summed over the query heads that share the
//! KV head; each keeps its S first keys, its protected recent ones (H2O's R, SnapKV's window) and
//! the best-scored rest up to W (ties to the newer key, as the streaming rule evicts the older);
//! decoding then continues from that cache with no further eviction. Under a rounding cache the
//! prompt attends over its keys and values as the cache stores them, so its scores are the
//! rounded cache's, and the kept keys are stored rounded.

use candle_core::Tensor;

use crate::error::{Error, Result};
use crate::kv::cache::PolicyCache;
use crate::kv::head_set::snapkv_pooled;
use crate::kv::policy::{Eviction, Policy, Scorer};
use crate::kv::prefill::PrefillCapture;
use crate::kv::scored::ScoredCache;
use crate::model::cache_rounding::CacheRounding;
use crate::model::decoder::Decoder;

/// Runs `ids` with every key, compresses each (layer, KV head) to `policy`'s budget as its scorer
/// ranks the keys, and returns the cache (room for `extra` more tokens without eviction) and the
/// final-norm hidden row of the last token.
pub fn compress_prefilled(model: &Decoder, (policy, rounding): (Policy, CacheRounding), ids: &[u32], extra: usize) -> Result<(ScoredCache, Tensor)> {
    let cfg = &model.cfg;
    let Some(scorer) = policy.scorer() else { return Err(Error::Internal(format!("{} has no scorer to compress with", policy.label()))) };
    let n = ids.len();
    let (kvh, dh) = (cfg.n_kv_heads, cfg.d_head);
    let from = match scorer {
        Scorer::H2o { .. } => 0,
        Scorer::Tova => n - 1,
        Scorer::SnapKv { .. } => n.saturating_sub(policy.score_window()),
    };
    let mut rec = PrefillCapture::new(cfg, n, Some(from))?;
    // Under a rounding cache the prompt's own attention reads the keys and values as stored (an
    // engine writes each batch to its cache and attends over it), and so scores them.
    let hidden = match rounding.is_exact() {
        true => model.forward(ids, None, &mut rec)?,
        false => {
            let mut prefill = PolicyCache::new(Policy::new(Eviction::Dense, 0, policy.positions), dh)?.with_rounding(rounding)?;
            model.forward_with(ids, Some(&mut prefill), &mut rec)?
        }
    };
    let last = hidden.narrow(0, n - 1, 1)?;
    let grown = Policy { cache: policy.cache.max(n.min(policy.cache)) + extra, ..policy };
    let mut cache = ScoredCache::new(grown, cfg.n_layers, cfg.n_heads, kvh, dh)?.with_rounding(rounding)?;
    let group = cfg.n_heads / kvh.max(1);
    for l in 0..cfg.n_layers {
        let rope = model.layer_rope(l);
        let layer = rec.layer(l, &rope)?;
        for kv in 0..kvh {
            // A KV head's weight on a key: the sum over the query heads that share it.
            let scores: Vec<f64> = (0..n).map(|p| (0..group).map(|g| layer.sums[(kv * group + g) * n + p]).sum()).collect();
            let kept = kept_positions(&policy, scorer, &scores);
            let keys: Vec<(usize, Vec<f32>, Vec<f32>)> =
                kept.into_iter().map(|p| (p, layer.key_pre(p, kv).to_vec(), layer.value(p, kv).to_vec())).collect();
            cache.fill((l, kv), &keys, (&rope, &layer.tables))?;
        }
    }
    cache.set_stream_len(n);
    Ok((cache, last))
}

/// The positions one (layer, KV head) keeps, in order: all of them within the budget; else the
/// pinned first ones, the protected last ones and the best-scored rest.
fn kept_positions(policy: &Policy, scorer: Scorer, scores: &[f64]) -> Vec<usize> {
    let n = scores.len();
    let w = policy.cache;
    if n <= w {
        return (0..n).collect();
    }
    let pinned = policy.pinned().min(w);
    let tail = match scorer {
        Scorer::H2o { .. } | Scorer::SnapKv { .. } => policy.score_window(),
        Scorer::Tova => 0,
    }
    .min(w - pinned);
    let ranked: Vec<f64> = match scorer {
        Scorer::SnapKv { .. } => snapkv_pooled(scores),
        Scorer::H2o { .. } | Scorer::Tova => scores.to_vec(),
    };
    let mut middle: Vec<usize> = (pinned..n - tail).collect();
    // Best first; among equals the newer, as the streaming rule evicts the older.
    middle.sort_by(|&a, &b| ranked[b].total_cmp(&ranked[a]).then(b.cmp(&a)));
    middle.truncate(w - pinned - tail);
    let mut kept: Vec<usize> = (0..pinned).chain(middle).chain(n - tail..n).collect();
    kept.sort_unstable();
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::policy::{Eviction, PositionMode};

    #[test]
    fn kept_positions_follow_each_rule() {
        let scores = [0.0, 0.1, 0.9, 0.2, 0.9, 0.05, 0.3, 0.4];
        let kept = |e: Eviction, scores: &[f64]| {
            let policy = Policy::new(e, 5, PositionMode::Slot);
            kept_positions(&policy, policy.scorer().unwrap(), scores)
        };
        // h2o, S = 1, R = 2: position 0, the last two (6, 7), the best two of 1..6: 4 and 2
        // tie, both kept.
        assert_eq!(kept(Eviction::Scored { sinks: 1, scorer: Scorer::H2o { recent: Some(2) } }, &scores), vec![0, 2, 4, 6, 7]);
        // tova, nothing pinned: the five best, the tie at 0.9 kept, 0.3 and 0.4 and 0.2.
        assert_eq!(kept(Eviction::Scored { sinks: 0, scorer: Scorer::Tova }, &scores), vec![2, 3, 4, 6, 7]);
        // Within the budget everything stays.
        assert_eq!(kept(Eviction::Scored { sinks: 0, scorer: Scorer::Tova }, &scores[..5]), vec![0, 1, 2, 3, 4]);
        // snapkv, window 2: pooling spreads 0.9 over ±3 positions, so the newest of the pooled
        // ties win: 4 and 5 beside the window 6, 7 and the pinned 0.
        assert_eq!(kept(Eviction::Scored { sinks: 1, scorer: Scorer::SnapKv { observe: Some(2) } }, &scores), vec![0, 4, 5, 6, 7]);
    }
}
