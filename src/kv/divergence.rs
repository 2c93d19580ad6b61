//! How far a rounding cache moves the model's next-token distributions from the exact cache's,
//! step by step: the stream replayed twice in lockstep under one policy (for a positional policy
//! the same keys visible to each query, exact in one cache and rounded in the other; a
//! score-based one keeps in each cache what that cache's own attention chooses), KL(P_exact ‖
//! P_rounded) per step — what users tuning cache types ask for besides perplexity — and where
//! that error lands, per head: the attention moved off the sink positions, the sinks' rounding
//! error against the rest.

use super::policy::{Policy, PositionMode};
use super::scored::ScoredCache;
use super::simulate::STREAM_BLOCK;
use super::trace::PolicyTrace;
use crate::error::{Error, Result};
use crate::metrics::divergence::{kl_rows, log_softmax_rows};
use crate::model::cache_rounding::CacheRounding;
use crate::model::decoder::Decoder;
use crate::model::head_tally::HeadTally;
use crate::model::policy_forward::StreamKv;
use serde::{Deserialize, Serialize};

/// Stream positions counted as the sinks when no other number is given (the first four, where
/// StreamingLLM pins and where the massive activations sit).
pub const SINK_POSITIONS: usize = 4;

/// Where a rounding cache's error lands in one query head.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadCacheError {
    pub layer: usize,
    pub head: usize,
    /// The KV head whose cache entries the head reads.
    pub kv_head: usize,
    /// Mean attention on the sink positions over the counted queries, with the exact cache and
    /// with the rounding one.
    pub sink_mass_exact: f64,
    pub sink_mass_rounded: f64,
    /// Mean relative error ‖k̂ − k‖/‖k‖ of the KV head's stored keys at the sink positions and at
    /// the others (`None`: no such entry was stored); the same for values.
    pub key_error_sinks: Option<f64>,
    pub key_error_rest: Option<f64>,
    pub value_error_sinks: Option<f64>,
    pub value_error_rest: Option<f64>,
    /// Mean absolute error ‖k̂ − k‖ of the stored keys at the sink positions and at the others:
    /// what moves a score (q·(k̂ − k)), large where a key's norm is.
    #[serde(default)]
    pub key_abs_error_sinks: Option<f64>,
    #[serde(default)]
    pub key_abs_error_rest: Option<f64>,
}

impl HeadCacheError {
    /// Attention the rounding moved off the sink positions (negative: onto them).
    pub fn sink_mass_moved(&self) -> f64 {
        self.sink_mass_exact - self.sink_mass_rounded
    }
}

/// Every head's [`HeadCacheError`] over one stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheErrorByHead {
    /// Stream positions `0..sink_positions` are the sinks.
    pub sink_positions: usize,
    /// Queries each head's masses average over (those at positions ≥ `sink_positions`).
    pub queries: usize,
    pub heads: Vec<HeadCacheError>,
}

impl CacheErrorByHead {
    /// The heads ordered by the attention moved off the sinks, most first (ties by layer, head).
    pub fn most_moved(&self) -> Vec<&HeadCacheError> {
        let mut heads: Vec<&HeadCacheError> = self.heads.iter().collect();
        heads.sort_by(|a, b| b.sink_mass_moved().total_cmp(&a.sink_mass_moved()).then((a.layer, a.head).cmp(&(b.layer, b.head))));
        heads
    }

    /// The sinks' rounding error over the other positions', mean over heads: (keys' relative
    /// error, values' relative error, keys' absolute error); `None` where no head stored both.
    pub fn sink_error_ratios(&self) -> (Option<f64>, Option<f64>, Option<f64>) {
        let mean_ratio = |pair: fn(&HeadCacheError) -> (Option<f64>, Option<f64>)| {
            let r: Vec<f64> = self.heads.iter().filter_map(|h| Some(pair(h).0? / pair(h).1.filter(|&x| x > 0.0)?)).collect();
            (!r.is_empty()).then(|| r.iter().sum::<f64>() / r.len() as f64)
        };
        (
            mean_ratio(|h| (h.key_error_sinks, h.key_error_rest)),
            mean_ratio(|h| (h.value_error_sinks, h.value_error_rest)),
            mean_ratio(|h| (h.key_abs_error_sinks, h.key_abs_error_rest)),
        )
    }
}

/// What the lockstep replay measured.
#[derive(Debug, Clone)]
pub struct Divergence {
    /// KL(P_exact ‖ P_rounded) of each step's next-token distribution.
    pub kl: Vec<f64>,
    pub by_head: CacheErrorByHead,
}

/// Refuses a policy whose stream is not replayed from stream keys.
pub fn check_divergence(model: &Decoder, policy: Policy) -> Result<()> {
    let learned = model.cfg.arch.learned_positions;
    if !policy.is_cached() || policy.positions == PositionMode::Delta || (learned && policy.positions == PositionMode::Slot) {
        return Err(Error::input(format!(
            "the KL divergence from the exact cache is measured for dense, window, sink, keep and the score-based policies at slot or original positions (original only on a model with learned positions), not for {}",
            policy.label()
        )));
    }
    Ok(())
}

/// KL(P_exact ‖ P_rounded) of the next-token distribution at each step t = 0…N−2 of `ids` under
/// `policy`, and each head's error with stream positions `0..sink_positions` as the sinks;
/// `progress(done, total)` counts steps. Positional policies replayed from stream keys only
/// (`delta` and a learned-position model under `slot` decode through their own caches).
pub fn divergence_from_exact(
    model: &Decoder,
    ids: &[u32],
    (policy, rounding): (Policy, CacheRounding),
    sink_positions: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Divergence> {
    check_divergence(model, policy)?;
    rounding.check(model.cfg.d_head)?;
    if policy.is_scored() {
        return scored_divergence(model, ids, (policy, rounding), sink_positions, progress);
    }
    let mut trace = PolicyTrace::after_prefix(policy, 0);
    let mut exact = StreamKv::new(policy.pinned_slots());
    let mut rounded = StreamKv::new(policy.pinned_slots()).with_rounding(rounding);
    let (mut exact_tally, mut rounded_tally) = (HeadTally::new(sink_positions), HeadTally::new(sink_positions));
    let kl = lockstep_kl(model, ids, progress, |tokens, b0| {
        let views = (b0..b0 + tokens.len()).map(|t| Ok(trace.step(t)?.0)).collect::<Result<Vec<_>>>()?;
        Ok((
            model.forward_windowed_tallied(tokens, &views, &mut exact, Some(&mut exact_tally))?,
            model.forward_windowed_tallied(tokens, &views, &mut rounded, Some(&mut rounded_tally))?,
        ))
    })?;
    Ok(Divergence { kl, by_head: by_head(&exact_tally, &rounded_tally) })
}

/// KL(P_exact ‖ P_rounded) at every step, the stream run a block at a time through `run` (the
/// block's tokens and first step → the exact and the rounding stream's final-norm hidden rows).
fn lockstep_kl(
    model: &Decoder,
    ids: &[u32],
    progress: &mut dyn FnMut(usize, usize),
    mut run: impl FnMut(&[u32], usize) -> Result<(candle_core::Tensor, candle_core::Tensor)>,
) -> Result<Vec<f64>> {
    let steps = ids.len().saturating_sub(1);
    let mut kl = Vec::with_capacity(steps);
    for b0 in (0..steps).step_by(STREAM_BLOCK) {
        let b = STREAM_BLOCK.min(steps - b0);
        let (exact, rounded) = run(&ids[b0..b0 + b], b0)?;
        let (p, vocab) = log_probs(model, &exact)?;
        let (q, _) = log_probs(model, &rounded)?;
        kl.extend(kl_rows(&p, &q, vocab));
        progress(b0 + b, steps);
    }
    Ok(kl)
}

/// [`divergence_from_exact`] for a score-based policy: two of its caches, exact and rounding, each
/// keeping the keys its own attention chooses, replayed in lockstep.
fn scored_divergence(
    model: &Decoder,
    ids: &[u32],
    (policy, rounding): (Policy, CacheRounding),
    sink_positions: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Divergence> {
    let cfg = &model.cfg;
    let cache = |r: CacheRounding| -> Result<ScoredCache> {
        Ok(ScoredCache::new(policy, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.d_head)?.with_rounding(r)?.with_head_tally(sink_positions))
    };
    let (mut exact, mut rounded) = (cache(CacheRounding::default())?, cache(rounding)?);
    let kl = lockstep_kl(model, ids, progress, |tokens, _| Ok((exact.forward_block(model, tokens)?.0, rounded.forward_block(model, tokens)?.0)))?;
    Ok(Divergence { kl, by_head: by_head(&exact.head_tally(), &rounded.head_tally()) })
}

/// Each final-norm hidden row's next-token log-probabilities, and the vocabulary size.
fn log_probs(model: &Decoder, hidden: &candle_core::Tensor) -> Result<(Vec<f32>, usize)> {
    let logits = model.logits(hidden)?;
    let vocab = logits.dim(1)?;
    Ok((log_softmax_rows(&logits.flatten_all()?.to_vec1::<f32>()?, vocab), vocab))
}

/// Each query head's row from the two streams' tallies.
fn by_head(exact: &HeadTally, rounded: &HeadTally) -> CacheErrorByHead {
    // Every attending layer counts the same queries; a hybrid's linear layers count none and
    // have no heads to report.
    let queries = rounded.queries.iter().copied().max().unwrap_or(0);
    let mean = |sum: f64, n: usize| if n > 0 { sum / n as f64 } else { 0.0 };
    let mut heads = Vec::new();
    for (layer, masses) in rounded.sink_mass.iter().enumerate().filter(|&(l, _)| queries == 0 || rounded.queries[l] > 0) {
        let (n, kv_heads) = (rounded.queries[layer], rounded.key_error[layer].len().max(1));
        let group = (masses.len() / kv_heads).max(1);
        for (head, &mass) in masses.iter().enumerate() {
            let (keys, values) = (rounded.key_error[layer][head / group], rounded.value_error[layer][head / group]);
            let exact_mass = exact.sink_mass.get(layer).and_then(|m| m.get(head)).copied().unwrap_or(0.0);
            heads.push(HeadCacheError {
                layer,
                head,
                kv_head: head / group,
                sink_mass_exact: mean(exact_mass, exact.queries.get(layer).copied().unwrap_or(0)),
                sink_mass_rounded: mean(mass, n),
                key_error_sinks: keys.at_sinks(),
                key_error_rest: keys.elsewhere(),
                value_error_sinks: values.at_sinks(),
                value_error_rest: values.elsewhere(),
                key_abs_error_sinks: keys.absolute().0,
                key_abs_error_rest: keys.absolute().1,
            });
        }
    }
    CacheErrorByHead { sink_positions: rounded.sink_positions, queries, heads }
}
