//! Per-head cache policies (DuoAttention-style): which KV heads need the whole cache
//! ("retrieval") and which do with S sinks + R recent keys ("streaming"), judged from the
//! attention each head pays outside those keys on a long text (or from the causal evidence the
//! caller measured); the gates as DuoAttention's TSV; and the mixed policy's stream, where
//! retrieval heads keep every key and streaming heads S + R.

use std::ops::Range;

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use super::memory::{KvMemory, CACHE_ELEMENT_BYTES};
use super::policy::{Eviction, Policy, PositionMode, Scorer};
use super::scored::ScoredCache;
use super::simulate::{ppl, replay_scored, StreamOutcome, Track};
use crate::error::{Error, Result};
use crate::model::cache_rounding::CacheRounding;
use crate::model::decoder::Decoder;
use crate::model::hook::HookPoint;
use crate::model::receiver::HookReceiver;
use crate::numerics::tensor::with_f32;

/// Per (layer, query head): the attention mass each query row puts on keys that are neither
/// among the first S nor among its R most recent positions (its own included), and on key 0
/// (α_0), summed over the rows that have such keys (q ≥ S + R).
pub struct OutsideMass {
    sinks: usize,
    recent: usize,
    /// [layer][head]
    pub sums: Vec<Vec<f64>>,
    /// [layer][head]: attention on key 0 over the same rows.
    pub first_key: Vec<Vec<f64>>,
    /// [layer] rows counted.
    pub rows: Vec<usize>,
}

impl OutsideMass {
    pub fn new(n_layers: usize, n_heads: usize, sinks: usize, recent: usize) -> Self {
        OutsideMass {
            sinks,
            recent,
            sums: vec![vec![0.0; n_heads]; n_layers],
            first_key: vec![vec![0.0; n_heads]; n_layers],
            rows: vec![0; n_layers],
        }
    }

    /// Mean outside mass of (layer, head) over the rows counted.
    pub fn mean(&self, layer: usize, head: usize) -> f64 {
        self.sums[layer][head] / self.rows[layer].max(1) as f64
    }

    /// Mean attention of (layer, head) on key 0 over the rows counted.
    pub fn alpha0(&self, layer: usize, head: usize) -> f64 {
        self.first_key[layer][head] / self.rows[layer].max(1) as f64
    }
}

impl HookReceiver for OutsideMass {
    fn wants(&self, hook: &HookPoint) -> bool {
        matches!(hook, HookPoint::Pattern(_))
    }

    fn record(&mut self, hook: &HookPoint, rows: Range<usize>, value: &Tensor) -> Result<()> {
        let HookPoint::Pattern(l) = *hook else { return Ok(()) };
        let (heads, block, keys) = value.dims3()?;
        let (s, r) = (self.sinks, self.recent);
        let counted: Vec<usize> = (0..block).filter(|&i| rows.start + i >= s + r).collect();
        with_f32(value, |a| {
            for (h, (sum, first)) in self.sums[l].iter_mut().zip(self.first_key[l].iter_mut()).enumerate().take(heads) {
                for &i in &counted {
                    let q = rows.start + i;
                    let row = &a[(h * block + i) * keys..][..keys];
                    *sum += row[s..=(q - r).min(keys - 1)].iter().map(|&x| x as f64).sum::<f64>();
                    *first += row[0] as f64;
                }
            }
        })?;
        self.rows[l] += counted.len();
        Ok(())
    }
}

/// The evidence KV heads are ranked by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateEvidence {
    /// The attention paid outside the S sinks and R recent keys.
    #[default]
    Outside,
    /// The ΔNLL when the KV head alone is restricted to them.
    Causal,
}

/// Each KV head's need for the whole cache, and which heads get it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeadGates {
    pub sinks: usize,
    pub recent: usize,
    /// Tokens the scores were measured on.
    pub tokens: usize,
    /// The text they were measured on, when it is not the text the policies are evaluated on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<String>,
    /// [layer][kv head]: the largest mean outside mass among the query heads sharing the KV head
    /// (what a streaming cache would take away from it).
    pub score: Vec<Vec<f64>>,
    /// [layer][kv head]: the mean α_0 (attention on key 0) of its query heads, over the same rows.
    #[serde(default)]
    pub alpha0: Vec<Vec<f64>>,
    /// [layer][kv head]: mean ΔNLL (nats) over the rows from S + R on when this KV head alone is
    /// restricted to S + R keys, on the first `causal_tokens` tokens (`None`: not measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causal: Option<Vec<Vec<f64>>>,
    #[serde(default)]
    pub causal_tokens: usize,
    #[serde(default)]
    pub ranked_by: GateEvidence,
    /// [layer][kv head]: keeps the whole cache (1 in the TSV).
    pub full: Vec<Vec<bool>>,
}

impl HeadGates {
    /// The values the heads are ranked by (higher: needs the whole cache more).
    pub fn ranking(&self) -> &[Vec<f64>] {
        match (&self.causal, self.ranked_by) {
            (Some(c), GateEvidence::Causal) => c,
            _ => &self.score,
        }
    }

    /// What the heads were ranked by, in words.
    pub fn ranked_by_text(&self) -> String {
        let on = self.calibration.as_ref().map_or(String::new(), |c| format!(" of {c}"));
        match self.ranked_by {
            GateEvidence::Causal => format!("the ΔNLL when each alone keeps only those keys, over {} tokens{on}", self.causal_tokens),
            GateEvidence::Outside => format!("the attention they pay outside those keys over {} tokens{on}", self.tokens),
        }
    }
}

/// Per KV head: the outside mass (the largest of its query heads') and α_0 (their mean).
pub struct HeadEvidence {
    pub outside: Vec<Vec<f64>>,
    pub alpha0: Vec<Vec<f64>>,
}

/// What classifying KV heads is called where a hybrid is refused it.
pub const HEAD_CLASSIFICATION: &str = "classifying KV heads (heads, a needle's retrieval heads)";

/// Measures every KV head's outside mass and α_0 on `ids` (one forward, within the model's context).
pub fn measure(model: &Decoder, ids: &[u32], sinks: usize, recent: usize) -> Result<HeadEvidence> {
    let cfg = &model.cfg;
    cfg.refuse_linear_layers(HEAD_CLASSIFICATION)?;
    if ids.len() <= sinks + recent {
        return Err(Error::input(format!("{} tokens leave no query with keys beyond {sinks} sinks + {recent} recent; use a longer text", ids.len())));
    }
    let mut mass = OutsideMass::new(cfg.n_layers, cfg.n_heads, sinks, recent);
    model.forward(ids, None, &mut mass)?;
    let group = cfg.n_heads / cfg.n_kv_heads;
    let per_kv =
        |f: &dyn Fn(usize, usize) -> f64| -> Vec<Vec<f64>> { (0..cfg.n_layers).map(|l| (0..cfg.n_kv_heads).map(|kv| f(l, kv)).collect()).collect() };
    let outside = per_kv(&|l, kv| (0..group).map(|g| mass.mean(l, kv * group + g)).fold(0.0, f64::max));
    let alpha0 = per_kv(&|l, kv| (0..group).map(|g| mass.alpha0(l, kv * group + g)).sum::<f64>() / group as f64);
    Ok(HeadEvidence { outside, alpha0 })
}

/// Every (layer, head) of `score` ([layer][head]), the highest score first (ties: the earlier head).
pub fn ranked(score: &[Vec<f64>]) -> Vec<(usize, usize)> {
    let mut order: Vec<(usize, usize)> = score.iter().enumerate().flat_map(|(l, h)| (0..h.len()).map(move |kv| (l, kv))).collect();
    order.sort_by(|a, b| score[b.0][b.1].total_cmp(&score[a.0][a.1]).then(a.cmp(b)));
    order
}

/// The `share` of KV heads with the highest scores as retrieval heads (ties: the earlier head).
pub fn gates_by_share(score: &[Vec<f64>], share: f64) -> Vec<Vec<bool>> {
    let order = ranked(score);
    let n = (share.clamp(0.0, 1.0) * order.len() as f64).round() as usize;
    let mut full: Vec<Vec<bool>> = score.iter().map(|h| vec![false; h.len()]).collect();
    for &(l, kv) in &order[..n] {
        full[l][kv] = true;
    }
    full
}

/// The gates as DuoAttention writes them: one row per layer, one tab-separated column per KV
/// head, 1 = the whole cache.
pub fn gates_tsv(full: &[Vec<bool>]) -> String {
    full.iter().map(|l| l.iter().map(|&f| if f { "1" } else { "0" }).collect::<Vec<_>>().join("\t") + "\n").collect()
}

/// A mixed policy's stream and its memory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MixedOutcome {
    pub outcome: StreamOutcome,
    pub retrieval_heads: usize,
    pub kv_heads: usize,
    /// Entries over every (layer, KV head) at the end of the stream, and their f16 bytes.
    pub entries: usize,
    pub bytes: u64,
}

/// Bytes of `entries` keys and values of one KV head each (`widths`: elements of a key and of a
/// value), `exact` of them (the first positions `--unquantized-first` keeps) at f16 and the rest
/// in `rounding`'s formats (all at f16 when it is exact, as the engines store an exact cache).
fn stored_bytes(widths: (usize, usize), entries: usize, exact: usize, rounding: &CacheRounding) -> u64 {
    let f16_entry = (widths.0 + widths.1) as u64 * CACHE_ELEMENT_BYTES;
    if rounding.is_exact() {
        return entries as u64 * f16_entry;
    }
    let rounded_entry = (widths.0 as f64 * rounding.keys.bits_per_value() + widths.1 as f64 * rounding.values.bits_per_value()) / 8.0;
    (exact as u64 * f16_entry) + ((entries - exact) as f64 * rounded_entry).ceil() as u64
}

/// What a mixed policy's streaming heads keep: `h2o` whose recent window is all of W − S keeps
/// exactly what `sink` S keeps (at slot positions); retrieval heads are set on its cache with
/// [`ScoredCache::with_full_heads`].
pub fn mixed_policy(sinks: usize, cache: usize) -> Policy {
    Policy::new(Eviction::Scored { sinks, scorer: Scorer::H2o { recent: Some(cache.saturating_sub(sinks)) } }, cache, PositionMode::Slot)
}

/// Streams `ids` with retrieval heads (`full`) keeping every key and the others S sinks + the
/// rest of a budget of W recent keys, a block of tokens at a time, the cache storing keys and
/// values as `rounding` says.
pub fn simulate_mixed(
    model: &Decoder,
    ids: &[u32],
    full: &[Vec<bool>],
    (sinks, cache): (usize, usize),
    rounding: CacheRounding,
) -> Result<MixedOutcome> {
    let cfg = &model.cfg;
    if ids.len() < 2 || sinks >= cache {
        return Err(Error::input(format!(
            "a per-head policy needs at least 2 tokens and S = {sinks} pinned tokens below the streaming heads' budget W = {cache}"
        )));
    }
    let policy = mixed_policy(sinks, cache);
    let mut store =
        ScoredCache::new(policy, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.d_head)?.with_full_heads(full)?.with_rounding(rounding)?;
    let steps = ids.len() - 1;
    let Track { nll, lens, wall } = replay_scored(model, ids, &mut store, &mut |_, _| {})?;
    let retrieval_heads = full.iter().flatten().filter(|&&f| f).count();
    let kv_heads = cfg.n_layers * cfg.n_kv_heads;
    let first_eviction_step = (retrieval_heads < kv_heads && steps > cache).then_some(cache);
    let entries = store.entries();
    let (keys, values) = cfg.cached_elements();
    let bytes = stored_bytes((keys / cfg.n_kv_heads, values / cfg.n_kv_heads), entries, store.entries_before(rounding.exact_first), &rounding);
    // Sets of different sizes: the memory is what they hold together (every layer counted as
    // held, whatever a layer's own window lets its queries see).
    let memory = KvMemory {
        global_entries: lens.iter().copied().max().unwrap_or(0),
        windowed_entries: None,
        global_layers: cfg.n_layers,
        windowed_layers: 0,
        bytes,
        bytes_without_windows: bytes,
        stored_as: (!rounding.is_exact()).then_some(rounding),
        recurrent_bytes: 0,
    };
    let outcome = StreamOutcome {
        policy,
        label: format!("per-head: {retrieval_heads} of {kv_heads} KV heads full, the rest sink S={sinks} + {} recent", cache - sinks),
        ppl: ppl(&nll),
        ppl_after_eviction: first_eviction_step.map(|s| ppl(&nll[s..])),
        first_eviction_step,
        cliff_step: None,
        tokens: ids.len(),
        tokens_per_s: steps as f64 / wall.max(1e-9),
        kv_memory: memory,
        kept: store.stats(),
        nll,
        cache_len: lens,
    };
    Ok(MixedOutcome { outcome, retrieval_heads, kv_heads, entries, bytes })
}

/// One point of the per-head frontier, beside the uniform cache of the same memory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FrontierRow {
    pub share: f64,
    pub retrieval_heads: usize,
    /// Entries over every (layer, KV head) at the end of the stream, and their f16 bytes.
    pub entries: usize,
    pub bytes: u64,
    pub ppl: f64,
    /// Perplexity over the steps from W on (where streaming heads have evicted), the same steps
    /// for every row and for the uniform cache.
    pub ppl_from_w: f64,
    /// `sink S` with the budget that holds the same entries per KV head, over the same steps.
    pub uniform_cache: usize,
    pub uniform_ppl_from_w: f64,
    /// The f16 bytes a uniform `sink S` cache needs to reach this row's perplexity, read off the
    /// uniform points by linear interpolation (`None`: outside the swept range).
    #[serde(default)]
    pub uniform_bytes_at_equal_ppl: Option<f64>,
}

/// The memory at which the piecewise-linear curve through the uniform points (bytes, ppl) first
/// comes down to `ppl`; `None` when it never does within the points or starts below it.
pub fn uniform_bytes_at(rows: &[FrontierRow], ppl: f64) -> Option<f64> {
    let mut points: Vec<(f64, f64)> = rows.iter().map(|r| (r.bytes as f64, r.uniform_ppl_from_w)).collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Equal up to the two code paths' rounding (the 0% and 100% rows are the uniform cache
    // itself, run as a mixed policy and as `sink`).
    let tol = 1e-4 * ppl.abs();
    if let Some(&(b, _)) = points.iter().find(|p| (p.1 - ppl).abs() <= tol) {
        return Some(b);
    }
    if points.first().is_none_or(|p| p.1 < ppl) {
        return None;
    }
    points.windows(2).find_map(|w| {
        let ((b0, p0), (b1, p1)) = (w[0], w[1]);
        (p1 <= ppl && p0 >= ppl).then(|| b0 + (b1 - b0) * (p0 - ppl) / (p0 - p1))
    })
}

/// The sweep over the share of retrieval heads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Frontier {
    pub cache: usize,
    pub sinks: usize,
    pub tokens: usize,
    pub gates: HeadGates,
    pub rows: Vec<FrontierRow>,
    pub wall_seconds: f64,
    /// The formats every cache of the sweep stored keys and values in (absent: exact).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_rounding: Option<CacheRounding>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(bytes: u64, ppl: f64, uniform: f64) -> FrontierRow {
        FrontierRow {
            share: 0.0,
            retrieval_heads: 0,
            entries: 0,
            bytes,
            ppl,
            ppl_from_w: ppl,
            uniform_cache: 0,
            uniform_ppl_from_w: uniform,
            uniform_bytes_at_equal_ppl: None,
        }
    }

    #[test]
    fn equal_perplexity_memory_reads_the_uniform_curve() {
        let rows = [row(100, 30.0, 30.0), row(200, 26.0, 24.0), row(400, 20.0, 20.0)];
        // 26 lies between the uniform points (100, 30) and (200, 24): two thirds of the way.
        assert!((uniform_bytes_at(&rows, 26.0).unwrap() - 166.666_666).abs() < 1e-3);
        assert_eq!(uniform_bytes_at(&rows, 30.0), Some(100.0));
        assert_eq!(uniform_bytes_at(&rows, 20.0 + 1e-12), Some(400.0));
        assert_eq!(uniform_bytes_at(&rows, 19.0), None, "below every uniform point");
        assert_eq!(uniform_bytes_at(&rows, 31.0), None, "above the smallest cache");
    }
}
