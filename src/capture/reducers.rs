//! Streaming reducers (DESIGN §5): each consumes one hook's tensors as they are produced and keeps
//! only O(layers·heads·T) numbers, so a long input never needs its T×T patterns in memory.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Range;

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::metrics::massive::{median_abs, MASSIVE_ABS};
use crate::metrics::quant::{quant_risk, QuantRisk};
use crate::metrics::sinks::alpha;
use crate::model::hook::HookPoint;
use crate::model::receiver::HookReceiver;
use crate::numerics::tensor::with_f32;

/// Query rows per layer on which the row entropy is computed (it costs a logarithm per entry).
const ENTROPY_SAMPLE_ROWS: usize = 64;

/// Running sums for one (layer, head).
#[derive(Debug, Clone, Default)]
pub struct HeadAccum {
    /// Σ_i A[i, key] over every query row seen, per key.
    pub col_mass: Vec<f64>,
    /// Σ_i A[i, i−1] (rows with i ≥ 1).
    pub prev_mass: f64,
    /// Σ_i A[i, i].
    pub self_mass: f64,
    /// Σ over sampled rows of −Σ_j A ln A.
    pub entropy_sum: f64,
    /// Entries below [`ZERO_ATTENTION`] among the keys each query row may see (its causal past,
    /// within the layer's own window), and how many such entries there were.
    pub zero_entries: usize,
    pub visible_entries: usize,
}

/// An attention weight below this is zero to f32 precision: a rectified design's exact zeros
/// (softpick, ReLU attention) and a softmax's underflow alike. A threshold rather than `== 0`
/// because where a softmax underflows to exactly 0 depends on its exp kernel (torch's reaches
/// 0 near e^−104, sinkscope's vectorized one stops at e^−87), not on the model.
pub const ZERO_ATTENTION: f32 = 1e-30;

/// Per (layer, head): attention mass each key receives (column sums over all queries), plus the
/// mass on the previous token and on itself, and the row entropy on a deterministic sample of
/// query rows (every `entropy_stride`-th, about 64 per layer).
pub struct AttentionStats {
    /// Entropy is computed on query rows q with q % entropy_stride == 0.
    pub entropy_stride: usize,
    /// [layer][head]
    pub heads: Vec<Vec<HeadAccum>>,
    /// [layer] number of sampled rows for entropy.
    pub entropy_rows: Vec<usize>,
    /// [layer] number of query rows seen.
    pub rows: Vec<usize>,
    /// [layer] the layer's own sliding window (α_k counts only the queries that can see k).
    pub windows: Vec<Option<usize>>,
}

impl AttentionStats {
    pub fn new(n_layers: usize, n_heads: usize, n_positions: usize) -> Self {
        AttentionStats {
            entropy_stride: n_positions.div_ceil(ENTROPY_SAMPLE_ROWS).max(1),
            heads: vec![vec![HeadAccum::default(); n_heads]; n_layers],
            entropy_rows: vec![0; n_layers],
            rows: vec![0; n_layers],
            windows: vec![None; n_layers],
        }
    }

    /// The same, with no heads in `layers` (a hybrid's linear-attention layers, which have no
    /// attention pattern to reduce).
    pub fn without_heads_in(mut self, layers: impl Iterator<Item = usize>) -> Self {
        layers.for_each(|l| self.heads[l].clear());
        self
    }

    /// The same, with each layer's own sliding window (`windows[l]`).
    pub fn with_windows(mut self, windows: Vec<Option<usize>>) -> Self {
        self.windows = windows;
        self
    }

    /// Gu et al.'s α_k = (1/(T−k)) Σ_{i≥k} A[i,k]: mean attention that queries at or after k pay
    /// to key k (0-indexed; causal masking makes A[i,k] = 0 for i < k) — on a windowed layer,
    /// the queries within its window of k.
    pub fn alpha(&self, layer: usize, head: usize, key: usize) -> f64 {
        alpha(&self.heads[layer][head].col_mass, self.rows[layer], key, self.windows.get(layer).copied().flatten())
    }

    /// Mean A[i, i−1] over the query rows i ≥ 1.
    pub fn prev_token_mass(&self, layer: usize, head: usize) -> f64 {
        self.heads[layer][head].prev_mass / self.rows[layer].saturating_sub(1).max(1) as f64
    }

    /// Mean A[i, i] over the query rows.
    pub fn self_mass(&self, layer: usize, head: usize) -> f64 {
        self.heads[layer][head].self_mass / self.rows[layer].max(1) as f64
    }

    /// Mean row entropy (nats) over the sampled query rows.
    pub fn entropy_mean(&self, layer: usize, head: usize) -> f64 {
        self.heads[layer][head].entropy_sum / self.entropy_rows[layer].max(1) as f64
    }

    fn add_block(&mut self, layer: usize, rows: Range<usize>, keys: usize, a: &[f32]) {
        use rayon::prelude::*;
        let block = rows.len();
        let stride = self.entropy_stride;
        let window = self.windows.get(layer).copied().flatten();
        self.heads[layer].par_iter_mut().enumerate().for_each(|(h, acc)| {
            if acc.col_mass.len() < keys {
                acc.col_mass.resize(keys, 0.0);
            }
            for r in 0..block {
                let q = rows.start + r;
                let row = &a[(h * block + r) * keys..(h * block + r + 1) * keys];
                let visible = (q + 1).min(keys);
                add_to_f64(&mut acc.col_mass, &row[..visible]);
                let seen = &row[window.map_or(0, |w| (q + 1).saturating_sub(w)).min(visible)..visible];
                acc.zero_entries += seen.iter().filter(|&&v| v < ZERO_ATTENTION).count();
                acc.visible_entries += seen.len();
                if q >= 1 && q - 1 < keys {
                    acc.prev_mass += row[q - 1] as f64;
                }
                if q < keys {
                    acc.self_mass += row[q] as f64;
                }
                if q.is_multiple_of(stride) {
                    acc.entropy_sum += row[..visible].iter().filter(|&&v| v > 0.0).map(|&v| -(v as f64) * (v as f64).ln()).sum::<f64>();
                }
            }
        });
        self.rows[layer] += block;
        self.entropy_rows[layer] += rows.filter(|q| q.is_multiple_of(stride)).count();
    }
}

crate::numerics::simd::vectorized_fn! {
    /// sums[i] += x[i] in f64 (the first x.len() entries).
    fn add_to_f64(sums: &mut [f64], x: &[f32]) {
        for (c, &v) in sums.iter_mut().zip(x) {
            *c += v as f64;
        }
    }
}

/// Hands a `hook_pattern` query block to `add(layer, query rows, keys, A)` as f32
/// [head, rows, keys]; other hooks are ignored.
pub fn record_pattern(hook: &HookPoint, rows: Range<usize>, value: &Tensor, add: impl FnOnce(usize, Range<usize>, usize, &[f32])) -> Result<()> {
    if let HookPoint::Pattern(l) = *hook {
        let keys = value.dim(2)?;
        with_f32(value, |a| add(l, rows, keys, a))?;
    }
    Ok(())
}

impl HookReceiver for AttentionStats {
    fn wants(&self, hook: &HookPoint) -> bool {
        matches!(hook, HookPoint::Pattern(_))
    }
    fn record(&mut self, hook: &HookPoint, rows: Range<usize>, value: &Tensor) -> Result<()> {
        record_pattern(hook, rows, value, |l, rows, keys, a| self.add_block(l, rows, keys, a))
    }
}

/// Per (layer, head): the softmax mass learned sink logits took (`hook_sink_prob`), summed over
/// query rows — only models with learned sinks deliver it.
pub struct SinkMass {
    /// [layer][head] Σ over query rows.
    pub sums: Vec<Vec<f64>>,
    /// [layer] query rows seen.
    pub rows: Vec<usize>,
}

impl SinkMass {
    pub fn new(n_layers: usize, n_heads: usize) -> Self {
        SinkMass { sums: vec![vec![0.0; n_heads]; n_layers], rows: vec![0; n_layers] }
    }

    /// Mean sink mass of (layer, head) over the query rows, if the model delivered any.
    pub fn mean(&self, layer: usize, head: usize) -> Option<f64> {
        let rows = *self.rows.get(layer)?;
        (rows > 0).then(|| self.sums[layer][head] / rows as f64)
    }
}

impl HookReceiver for SinkMass {
    fn wants(&self, hook: &HookPoint) -> bool {
        matches!(hook, HookPoint::SinkProb(_))
    }
    fn record(&mut self, hook: &HookPoint, rows: Range<usize>, value: &Tensor) -> Result<()> {
        let HookPoint::SinkProb(l) = *hook else { return Ok(()) };
        let block = rows.len();
        with_f32(value, |m| {
            for (sum, head) in self.sums[l].iter_mut().zip(m.chunks(block.max(1))) {
                *sum += head.iter().map(|&v| v as f64).sum::<f64>();
            }
        })?;
        self.rows[l] += block;
        Ok(())
    }
}

/// Per (layer, position) L2 norms of the residual stream at resid_pre, resid_mid and resid_post.
pub struct ResidNorms {
    pub pre: Vec<Vec<f32>>,
    pub mid: Vec<Vec<f32>>,
    pub post: Vec<Vec<f32>>,
}

impl ResidNorms {
    pub fn new(n_layers: usize) -> Self {
        ResidNorms { pre: vec![Vec::new(); n_layers], mid: vec![Vec::new(); n_layers], post: vec![Vec::new(); n_layers] }
    }
}

fn row_norms(value: &Tensor) -> Result<Vec<f32>> {
    let width = value.dims()[1..].iter().product::<usize>().max(1);
    use rayon::prelude::*;
    with_f32(value, |x| x.par_chunks(width).map(|r| r.iter().map(|v| v * v).sum::<f32>().sqrt()).collect())
}

impl HookReceiver for ResidNorms {
    fn wants(&self, hook: &HookPoint) -> bool {
        matches!(hook, HookPoint::ResidPre(_) | HookPoint::ResidMid(_) | HookPoint::ResidPost(_))
    }
    fn record(&mut self, hook: &HookPoint, _rows: Range<usize>, value: &Tensor) -> Result<()> {
        let norms = row_norms(value)?;
        match *hook {
            HookPoint::ResidPre(l) => self.pre[l].extend(norms),
            HookPoint::ResidMid(l) => self.mid[l].extend(norms),
            HookPoint::ResidPost(l) => self.post[l].extend(norms),
            _ => {}
        }
        Ok(())
    }
}

/// One residual-stream element.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Activation {
    pub pos: usize,
    pub dim: usize,
    pub value: f32,
}

/// At most this many elements above [`MASSIVE_ABS`] are kept per layer (largest first).
const ABOVE_CAP: usize = 4096;

/// Per layer (of resid_post, Sun et al.'s "layer output"): the top-k elements by |h| with their
/// (position, dim), every element with |h| > 100 (up to 4096, largest first), the median |h|, and
/// the max |h| of each dim.
pub struct TopActivations {
    k: usize,
    pub top: Vec<Vec<Activation>>,
    pub above: Vec<Vec<Activation>>,
    /// Median |h| of each recorded tensor; capture records a layer once, so this is the median
    /// over the whole layer output (several chunks would give the median of chunk medians).
    pub median_abs: Vec<f32>,
    pub max_abs_by_dim: Vec<Vec<f32>>,
    /// Σ h^p for p = 0…4 over every element of the layer output, for its kurtosis.
    power_sums: Vec<[f64; 5]>,
}

impl TopActivations {
    pub fn new(n_layers: usize, k: usize) -> Self {
        TopActivations {
            k,
            top: vec![Vec::new(); n_layers],
            above: vec![Vec::new(); n_layers],
            median_abs: vec![0.0; n_layers],
            max_abs_by_dim: vec![Vec::new(); n_layers],
            power_sums: vec![[0.0; 5]; n_layers],
        }
    }

    /// Pearson's kurtosis E[(h − μ)⁴] / σ⁴ of each layer output's elements (3 for a Gaussian;
    /// massive activations make it large), `None` for a layer not recorded or constant.
    pub fn kurtosis(&self) -> Vec<Option<f64>> {
        self.power_sums
            .iter()
            .map(|&[n, s1, s2, s3, s4]| {
                let mean = s1 / n;
                let m2 = s2 / n - mean * mean;
                let m4 = s4 / n - 4.0 * mean * s3 / n + 6.0 * mean * mean * s2 / n - 3.0 * mean.powi(4);
                (n > 0.0 && m2 > 0.0).then(|| m4 / (m2 * m2))
            })
            .collect()
    }
}

/// Σ h^p for p = 0…4 over `x`, in f64.
fn power_sums(x: &[f32]) -> [f64; 5] {
    let mut s = [x.len() as f64, 0.0, 0.0, 0.0, 0.0];
    for &v in x {
        let (v, v2) = (v as f64, (v as f64) * (v as f64));
        s[1] += v;
        s[2] += v2;
        s[3] += v2 * v;
        s[4] += v2 * v2;
    }
    s
}

/// An element ordered by |value| then position, for a bounded min-heap.
#[derive(PartialEq)]
struct ByAbs(f32, usize, usize, f32);
impl Eq for ByAbs {}
impl PartialOrd for ByAbs {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ByAbs {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0).then_with(|| other.1.cmp(&self.1)).then_with(|| other.2.cmp(&self.2))
    }
}

/// The k largest-|x| elements of a row-major [rows, width] block, largest first.
pub fn top_k_abs(x: &[f32], width: usize, first_row: usize, k: usize) -> Vec<Activation> {
    let mut heap: BinaryHeap<Reverse<ByAbs>> = BinaryHeap::with_capacity(k + 1);
    // |x| of the heap's smallest once it is full: anything smaller cannot enter, and most
    // elements are rejected by this one comparison (ties still go through the full order).
    let mut floor = f32::NEG_INFINITY;
    for (i, &v) in x.iter().enumerate() {
        if v.abs() < floor {
            continue;
        }
        let item = ByAbs(v.abs(), first_row + i / width, i % width, v);
        if heap.len() < k {
            heap.push(Reverse(item));
        } else if let Some(Reverse(min)) = heap.peek() {
            if item > *min {
                heap.pop();
                heap.push(Reverse(item));
            }
        }
        if heap.len() == k {
            floor = heap.peek().map_or(floor, |Reverse(min)| min.0);
        }
    }
    let mut out: Vec<ByAbs> = heap.into_iter().map(|Reverse(b)| b).collect();
    out.sort_by(|a, b| b.cmp(a));
    out.into_iter().map(|ByAbs(_, pos, dim, value)| Activation { pos, dim, value }).collect()
}

impl HookReceiver for TopActivations {
    fn wants(&self, hook: &HookPoint) -> bool {
        matches!(hook, HookPoint::ResidPost(_))
    }
    fn record(&mut self, hook: &HookPoint, rows: Range<usize>, value: &Tensor) -> Result<()> {
        let HookPoint::ResidPost(l) = *hook else { return Ok(()) };
        let width = value.dim(1)?;
        let k = self.k;
        let (top, median, by_dim, above) = with_f32(value, |x| {
            use rayon::prelude::*;
            // Row chunks in parallel (each its own top-k, per-dim max and elements over 100),
            // beside the median's selection.
            let chunk_rows = 64;
            let scan = || {
                x.par_chunks(chunk_rows * width.max(1))
                    .enumerate()
                    .map(|(c, chunk)| {
                        let first = rows.start + c * chunk_rows;
                        let mut by_dim = vec![0f32; width];
                        let mut above = Vec::new();
                        for (r, row) in chunk.chunks(width).enumerate() {
                            for (d, (m, v)) in by_dim.iter_mut().zip(row).enumerate() {
                                *m = m.max(v.abs());
                                if v.abs() > MASSIVE_ABS {
                                    above.push(Activation { pos: first + r, dim: d, value: *v });
                                }
                            }
                        }
                        (top_k_abs(chunk, width, first, k), by_dim, above, power_sums(chunk))
                    })
                    .collect::<Vec<_>>()
            };
            let (parts, median) = rayon::join(scan, || median_abs(x));
            let mut by_dim = vec![0f32; width];
            let (mut top, mut above) = (Vec::new(), Vec::new());
            // Chunk sums added in chunk order, whatever the thread count.
            let sums = &mut self.power_sums[l];
            for (t, d, a, p) in parts {
                top.extend(t);
                by_dim.iter_mut().zip(d).for_each(|(m, v)| *m = m.max(v));
                above.extend(a);
                sums.iter_mut().zip(p).for_each(|(s, v)| *s += v);
            }
            (top, median, by_dim, above)
        })?;
        let kept = &mut self.above[l];
        kept.extend(above);
        kept.sort_by(|a, b| b.value.abs().total_cmp(&a.value.abs()).then(a.pos.cmp(&b.pos)).then(a.dim.cmp(&b.dim)));
        kept.truncate(ABOVE_CAP);
        let merged = &mut self.top[l];
        merged.extend(top);
        merged.sort_by(|a, b| b.value.abs().total_cmp(&a.value.abs()).then(a.pos.cmp(&b.pos)).then(a.dim.cmp(&b.dim)));
        merged.truncate(k);
        self.median_abs[l] = median;
        let dims = &mut self.max_abs_by_dim[l];
        if dims.is_empty() {
            *dims = by_dim;
        } else {
            dims.iter_mut().zip(by_dim).for_each(|(a, b)| *a = a.max(b));
        }
        Ok(())
    }
}

/// Collects [`QuantRisk`] for every layer output.
pub struct QuantRiskReducer {
    pub layers: Vec<QuantRisk>,
}

impl HookReceiver for QuantRiskReducer {
    fn wants(&self, hook: &HookPoint) -> bool {
        matches!(hook, HookPoint::ResidPost(_))
    }
    fn record(&mut self, hook: &HookPoint, _rows: Range<usize>, value: &Tensor) -> Result<()> {
        if let HookPoint::ResidPost(l) = *hook {
            let width = value.dim(1)?;
            let risk = with_f32(value, |x| quant_risk(l, x, width))?;
            self.layers.push(risk);
        }
        Ok(())
    }
}

/// Per (layer, kv head, position) L2 norms of keys (pre-RoPE; rotation preserves the norm) and
/// values — sink positions tend to have small value norms (the "no-op" evidence).
pub struct KvNorms {
    pub key: Vec<Vec<Vec<f32>>>,
    pub value: Vec<Vec<Vec<f32>>>,
}

impl KvNorms {
    pub fn new(n_layers: usize, n_kv_heads: usize) -> Self {
        KvNorms { key: vec![vec![Vec::new(); n_kv_heads]; n_layers], value: vec![vec![Vec::new(); n_kv_heads]; n_layers] }
    }
}

impl HookReceiver for KvNorms {
    fn wants(&self, hook: &HookPoint) -> bool {
        matches!(hook, HookPoint::K(_) | HookPoint::V(_))
    }
    fn record(&mut self, hook: &HookPoint, _rows: Range<usize>, value: &Tensor) -> Result<()> {
        let (target, l) = match *hook {
            HookPoint::K(l) => (&mut self.key, l),
            HookPoint::V(l) => (&mut self.value, l),
            _ => return Ok(()),
        };
        let (_, heads, d_head) = value.dims3()?;
        with_f32(value, |x| {
            for (i, v) in x.chunks(d_head).enumerate() {
                target[l][i % heads].push(v.iter().map(|a| a * a).sum::<f32>().sqrt());
            }
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn alpha_is_mean_attention_from_queries_at_or_after_k() {
        // One head, T=3, causal pattern rows: [1], [0.5,0.5], [0.2,0.3,0.5].
        let a = vec![1.0, 0.0, 0.0, 0.5, 0.5, 0.0, 0.2, 0.3, 0.5];
        let t = Tensor::from_vec(a, (1, 3, 3), &Device::Cpu).unwrap();
        let mut s = AttentionStats::new(1, 1, 3);
        s.record(&HookPoint::Pattern(0), 0..3, &t).unwrap();
        assert!((s.alpha(0, 0, 0) - (1.0 + 0.5 + 0.2) / 3.0).abs() < 1e-7);
        assert!((s.alpha(0, 0, 1) - (0.5 + 0.3) / 2.0).abs() < 1e-7);
        assert!((s.alpha(0, 0, 2) - 0.5).abs() < 1e-7);
        let acc = &s.heads[0][0];
        assert!((acc.prev_mass - (0.5 + 0.3)).abs() < 1e-7);
        assert!((acc.self_mass - (1.0 + 0.5 + 0.5)).abs() < 1e-7);
        assert_eq!(s.entropy_rows[0], 3);
        let expected_entropy = 0.0 + 2.0 * (0.5f64 * 2f64.ln()) + -(0.2f64 * 0.2f64.ln() + 0.3 * 0.3f64.ln() + 0.5 * 0.5f64.ln());
        assert!((acc.entropy_sum - expected_entropy).abs() < 1e-6);
    }

    #[test]
    fn blocks_accumulate_like_one_pass() {
        // Same pattern delivered as two query blocks: rows 0..1 (1 key) and 1..3 (3 keys).
        let b0 = Tensor::from_vec(vec![1.0f32], (1, 1, 1), &Device::Cpu).unwrap();
        let b1 = Tensor::from_vec(vec![0.5f32, 0.5, 0.0, 0.2, 0.3, 0.5], (1, 2, 3), &Device::Cpu).unwrap();
        let mut s = AttentionStats::new(1, 1, 3);
        s.record(&HookPoint::Pattern(0), 0..1, &b0).unwrap();
        s.record(&HookPoint::Pattern(0), 1..3, &b1).unwrap();
        assert!((s.alpha(0, 0, 0) - 1.7 / 3.0).abs() < 1e-7);
        assert!((s.alpha(0, 0, 1) - 0.4).abs() < 1e-7);
    }

    #[test]
    fn top_k_and_median() {
        let x = [0.5, -300.0, 2.0, 1.0, 150.0, -1.5];
        let top = top_k_abs(&x, 3, 10, 2);
        assert_eq!(top, vec![Activation { pos: 10, dim: 1, value: -300.0 }, Activation { pos: 11, dim: 1, value: 150.0 }]);
        assert_eq!(median_abs(&x), (1.5 + 2.0) / 2.0);
        assert_eq!(median_abs(&[3.0, -1.0, 2.0]), 2.0);
    }

    #[test]
    fn top_k_equals_a_full_sort_with_ties() {
        // Many equal magnitudes of both signs: the order is |x|, then earlier position, then
        // lower dim, exactly as a full sort gives it.
        let x: Vec<f32> = (0..997).map(|i| (((i * 37) % 23) as f32 - 11.0) * 0.5).collect();
        let width = 7;
        for k in [0, 1, 5, 16, 40] {
            let mut all: Vec<Activation> = x.iter().enumerate().map(|(i, &v)| Activation { pos: 3 + i / width, dim: i % width, value: v }).collect();
            all.sort_by(|a, b| b.value.abs().total_cmp(&a.value.abs()).then(a.pos.cmp(&b.pos)).then(a.dim.cmp(&b.dim)));
            all.truncate(k);
            assert_eq!(top_k_abs(&x, width, 3, k), all, "k = {k}");
        }
    }

    #[test]
    fn norms_per_row_and_head() {
        let t = Tensor::from_vec(vec![3.0f32, 4.0, 0.0, 1.0], (2, 2), &Device::Cpu).unwrap();
        let mut r = ResidNorms::new(1);
        r.record(&HookPoint::ResidPost(0), 0..2, &t).unwrap();
        assert_eq!(r.post[0], vec![5.0, 1.0]);
        // [pos=1, kv_head=2, d_head=2]
        let v = Tensor::from_vec(vec![3.0f32, 4.0, 6.0, 8.0], (1, 2, 2), &Device::Cpu).unwrap();
        let mut kv = KvNorms::new(1, 2);
        kv.record(&HookPoint::V(0), 0..1, &v).unwrap();
        assert_eq!(kv.value[0], vec![vec![5.0], vec![10.0]]);
    }
}
