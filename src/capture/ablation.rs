//! Runs the causal head-dependency sweep: one clean pass keeps every layer's input, then each
//! variant (one head, or the whole layer, with key k hidden) re-runs only the layers from the
//! masked one onward — earlier layers cannot see the mask — and is scored against the clean
//! next-token distributions of the tokens after k.

use candle_core::Tensor;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::collector::TensorCollector;
use crate::error::{Error, Result};
use crate::metrics::divergence::{compare_logit_row, log_softmax_rows, CleanRow};
use crate::model::decoder::{Decoder, Hidden, KeyMask};
use crate::model::hook::{HookFilter, HookPoint};

/// One masked variant's effect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AblationResult {
    pub layer: usize,
    /// The masked head; `None` when every head of the layer is masked.
    pub head: Option<usize>,
    pub key_pos: usize,
    pub delta_nll: f64,
    pub kl: f64,
}

/// Logit rows scored at once (128 × vocab floats: 24 MiB for a 49k vocabulary — large enough for
/// an efficient matmul, small enough for the allocator to reuse the buffer).
const SCORE_ROWS: usize = 128;

/// Scored rows of a group's variants sent through the output head at once.
const STACKED_SCORE_ROWS: usize = 256;

/// Which variants to run.
pub struct AblationPlan {
    /// Key positions to hide (default 0..3).
    pub keys: Vec<usize>,
    /// Mask each head on its own (n_layers · n_heads variants per key).
    pub per_head: bool,
    /// Mask every head of a layer at once (n_layers variants per key).
    pub per_layer: bool,
}

/// Runs the plan on `ids`; `progress` is called after each variant with (done, total).
pub fn run_ablation(model: &Decoder, ids: &[u32], plan: &AblationPlan, progress: &mut dyn FnMut(usize, usize)) -> Result<Vec<AblationResult>> {
    let cfg = &model.cfg;
    // Variants of one (key, layer) share that layer's input and run as one stacked batch.
    // Each mask with the head it reports (None: the whole layer).
    let mut groups: Vec<Vec<(KeyMask, Option<usize>)>> = Vec::new();
    for &key in &plan.keys {
        // A linear-attention layer has no keys to hide.
        for layer in cfg.attention_layers() {
            let mut group = Vec::new();
            if plan.per_head {
                group.extend((0..cfg.n_heads).map(|h| (KeyMask::key(layer, vec![h], key), Some(h))));
            }
            if plan.per_layer {
                group.push((KeyMask::key(layer, (0..cfg.n_heads).collect(), key), None));
            }
            if !group.is_empty() {
                groups.push(group);
            }
        }
    }
    run_masks(model, ids, &groups, progress)
}

/// Runs groups of masks — every mask of a group names the same layer — against one clean pass of
/// `ids`, and scores each against the clean predictions. Each mask carries the head it reports
/// (`None`: a whole layer).
pub fn run_masks(
    model: &Decoder,
    ids: &[u32],
    groups: &[Vec<(KeyMask, Option<usize>)>],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<AblationResult>> {
    let t = ids.len();
    // Rows from the mask's first query on predict the next token; at least one must be scored.
    if let Some((m, _)) = groups.iter().flatten().find(|(m, _)| m.first_query() + 2 > t) {
        return Err(match m.hide {
            Hidden::Key(key) => Error::input(format!("cannot ablate key {key} of a {t}-token probe: it needs tokens after it to score")),
            Hidden::Streaming { sinks, recent } => {
                Error::input(format!("{t} tokens leave no query with keys beyond {sinks} sinks + {recent} recent to hide; use a longer text"))
            }
            Hidden::Span { ref keys, from } => Error::input(format!("cannot hide keys {keys:?} from query {from} of a {t}-token text")),
        });
    }
    let cfg = &model.cfg;
    let mut inputs = TensorCollector::new(HookFilter::parse("hook_resid_pre", cfg.n_layers)?, t);
    let hidden = model.forward(ids, None, &mut inputs)?;
    let vocab = cfg.vocab_size;
    let mut clean_logp = Vec::with_capacity((t - 1) * vocab);
    for start in (0..t - 1).step_by(SCORE_ROWS) {
        clean_logp.extend(log_softmax_rows(&logits_rows(model, &hidden, start, (start + SCORE_ROWS).min(t - 1))?, vocab));
    }
    let clean_row = |r: usize| CleanRow { logp: &clean_logp[r * vocab..(r + 1) * vocab], target: ids[r + 1] };
    let total: usize = groups.iter().map(Vec::len).sum();
    let mut results = Vec::with_capacity(total);
    for group in groups {
        let layer = group[0].0.layer;
        let masks: Vec<KeyMask> = group.iter().map(|(m, _)| m.clone()).collect();
        let (shape, data) = inputs.get(&HookPoint::ResidPre(layer)).ok_or_else(|| Error::Internal("missing resid_pre".into()))?;
        let resid = Tensor::from_slice(data, shape, &candle_core::Device::Cpu)?;
        let masked = model.forward_masked_stacked(&resid, &masks)?;
        // Rows i > key predict tokens i+1; rows ≤ key cannot see the mask. Every variant's scored
        // rows go through the output head together, in chunks (one weight pass serves many rows;
        // the logit buffers stay small enough for the allocator to reuse).
        let rows: Vec<(usize, usize)> = masks.iter().enumerate().flat_map(|(v, m)| (m.first_query()..t - 1).map(move |r| (v, r))).collect();
        let mut row_scores: Vec<(f64, f64)> = Vec::with_capacity(rows.len());
        for chunk in rows.chunks(STACKED_SCORE_ROWS) {
            let at: Vec<u32> = chunk.iter().map(|&(v, r)| (v * t + r) as u32).collect();
            let picked = masked.index_select(&Tensor::new(at.as_slice(), &candle_core::Device::Cpu)?, 0)?;
            let logits = model.logits(&picked)?.flatten_all()?.to_vec1::<f32>()?;
            row_scores.par_extend(logits.par_chunks(vocab).zip(chunk.par_iter()).map(|(row, &(_, r))| compare_logit_row(&clean_row(r), row)));
        }
        // Each variant's rows summed in order, in runs of SCORE_ROWS from its first scored row.
        let mut scored = row_scores.iter();
        for (mask, head) in group {
            let first = mask.first_query();
            let (mut dnll, mut kl) = (0.0, 0.0);
            for start in (first..t - 1).step_by(SCORE_ROWS) {
                let end = (start + SCORE_ROWS).min(t - 1);
                let (d, k) = scored.by_ref().take(end - start).fold((0.0, 0.0), |acc, r| (acc.0 + r.0, acc.1 + r.1));
                dnll += d;
                kl += k;
            }
            let n = (t - 1 - first) as f64;
            let key_pos = match mask.hide {
                Hidden::Key(key) | Hidden::Streaming { sinks: key, .. } => key,
                Hidden::Span { ref keys, .. } => keys.start,
            };
            results.push(AblationResult { layer, head: *head, key_pos, delta_nll: dnll / n, kl: kl / n });
            progress(results.len(), total);
        }
    }
    Ok(results)
}

/// Per (layer, KV head): the mean ΔNLL when every query head sharing that KV head sees only the
/// first `sinks` keys and its `recent` most recent ones (a streaming head in DuoAttention's sense),
/// the rest of the model unchanged — over the rows from S + R on. The causal evidence of which KV
/// heads need the whole cache.
pub fn streaming_head_ablation(
    model: &Decoder,
    ids: &[u32],
    sinks: usize,
    recent: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Vec<f64>>> {
    let cfg = &model.cfg;
    let group = cfg.n_heads / cfg.n_kv_heads;
    let groups: Vec<Vec<(KeyMask, Option<usize>)>> = cfg
        .attention_layers()
        .into_iter()
        .map(|layer| {
            (0..cfg.n_kv_heads).map(|kv| (KeyMask::streaming(layer, (kv * group..(kv + 1) * group).collect(), sinks, recent), Some(kv))).collect()
        })
        .collect();
    let results = run_masks(model, ids, &groups, progress)?;
    let mut delta = vec![vec![0.0; cfg.n_kv_heads]; cfg.n_layers];
    for r in results {
        delta[r.layer][r.head.unwrap_or(0)] = r.delta_nll;
    }
    Ok(delta)
}

/// Logits of hidden rows start..end as a flat [rows, vocab] vector.
fn logits_rows(model: &Decoder, hidden: &Tensor, start: usize, end: usize) -> Result<Vec<f32>> {
    Ok(model.logits(&hidden.narrow(0, start, end - start)?)?.flatten_all()?.to_vec1()?)
}
