//! The reducer bundle `capture` runs on every layer, and the compact summary it produces: per-layer
//! attention on position 0 and activation extremes, per-head α_k for the first K keys, and the
//! per-position arrays (saved separately as safetensors).

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use super::gate::GateStats;
use super::reducers::{Activation, AttentionStats, KvNorms, QuantRiskReducer, ResidNorms, SinkMass, TopActivations};
use crate::error::Result;
use crate::model::decoder::DecoderConfig;
use crate::model::hook::HookPoint;
use crate::model::receiver::HookReceiver;

/// Attention statistics, residual norms, top activations, k/v norms and (when asked for) int8
/// quantization risk, fed in one pass.
pub struct StandardReducers {
    pub attention: AttentionStats,
    pub resid: ResidNorms,
    pub top: TopActivations,
    pub kv: KvNorms,
    pub quant: QuantRiskReducer,
    pub sink_mass: SinkMass,
    pub gate: GateStats,
    quant_risk: bool,
    first_keys: usize,
    n_heads: usize,
}

impl StandardReducers {
    /// `first_keys`: how many early key positions get a per-head α in the summary (K);
    /// `top_k`: activations kept per layer.
    /// `quant_risk`: also measure int8 quantization risk per layer output (analyze uses it).
    pub fn new(cfg: &DecoderConfig, n_positions: usize, first_keys: usize, top_k: usize, quant_risk: bool) -> Self {
        StandardReducers {
            attention: AttentionStats::new(cfg.n_layers, cfg.n_heads, n_positions)
                .with_windows((0..cfg.n_layers).map(|l| cfg.layer_window(l)).collect())
                .without_heads_in(cfg.linear_layers().into_iter()),
            resid: ResidNorms::new(cfg.n_layers),
            top: TopActivations::new(cfg.n_layers, top_k),
            kv: KvNorms::new(cfg.n_layers, cfg.n_kv_heads),
            quant: QuantRiskReducer { layers: Vec::new() },
            sink_mass: SinkMass::new(cfg.n_layers, cfg.n_heads),
            gate: GateStats::new(cfg.n_layers, cfg.n_heads),
            quant_risk,
            first_keys,
            n_heads: cfg.n_heads,
        }
    }

    pub fn summarize(&self) -> CaptureSummary {
        let n_layers = self.attention.rows.len();
        let mut layers = Vec::with_capacity(n_layers);
        let mut heads = Vec::new();
        for l in 0..n_layers {
            let t = self.attention.rows[l];
            // A linear-attention layer has no heads here: nothing attends, nothing is averaged.
            let n_heads = self.attention.heads[l].len();
            let alpha0: Vec<f64> = (0..n_heads).map(|h| self.attention.alpha(l, h, 0)).collect();
            let top = &self.top.top[l];
            let max = top.first().copied();
            let mean = |v: &[f32]| if v.is_empty() { 0.0 } else { v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64 };
            layers.push(LayerSummary {
                layer: l,
                window: self.attention.windows.get(l).copied().flatten(),
                mean_attention_pos0: (n_heads > 0).then(|| alpha0.iter().sum::<f64>() / n_heads as f64),
                max_abs: max.map_or(0.0, |a| a.value.abs()),
                max_abs_pos: max.map(|a| a.pos),
                max_abs_dim: max.map(|a| a.dim),
                median_abs: self.top.median_abs[l],
                top: top.clone(),
                resid_norm_mean_pre: mean(&self.resid.pre[l]),
                resid_norm_mean_post: mean(&self.resid.post[l]),
                resid_norm_pos0_post: self.resid.post[l].first().copied().unwrap_or(0.0),
            });
            for h in 0..n_heads {
                let alpha = (0..self.first_keys.min(t)).map(|k| self.attention.alpha(l, h, k)).collect();
                heads.push(HeadSummary {
                    layer: l,
                    head: h,
                    alpha,
                    prev_token_mass: self.attention.prev_token_mass(l, h),
                    self_mass: self.attention.self_mass(l, h),
                    entropy_mean: self.attention.entropy_mean(l, h),
                    sink_mass: self.sink_mass.mean(l, h),
                    gate_mean: self.gate.mean(l, h),
                    gate_closed: self.gate.closed_share(l, h),
                });
            }
        }
        CaptureSummary { first_keys: self.first_keys, layers, heads }
    }

    /// Saves the per-position reductions as safetensors (F32), atomically:
    /// `attn_col_mass` [layer, head, key] (Σ over queries of A[i,key]; NaN on a linear-attention layer), `resid_norm_{pre,mid,post}`
    /// [layer, pos], `key_norm`/`value_norm` [layer, kv_head, pos] (NaN on a linear-attention layer), `max_abs_by_dim` [layer, d_model].
    pub fn save_arrays(&self, path: &Path, metadata: BTreeMap<String, String>) -> Result<()> {
        let mut arrays: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
        let n_layers = self.attention.rows.len();
        let keys = self.attention.heads.iter().flatten().map(|h| h.col_mass.len()).max().unwrap_or(0);
        let mut col = Vec::with_capacity(n_layers * self.n_heads * keys);
        for layer in &self.attention.heads {
            for head in layer {
                col.extend(head.col_mass.iter().map(|&v| v as f32));
                col.extend(std::iter::repeat_n(0.0, keys - head.col_mass.len()));
            }
            // A linear-attention layer (no heads) attends to nothing: NaN, not a mass of 0.
            col.extend(std::iter::repeat_n(f32::NAN, if layer.is_empty() { self.n_heads * keys } else { 0 }));
        }
        arrays.push(("attn_col_mass".into(), vec![n_layers, self.n_heads, keys], col));
        for (name, rows) in [("resid_norm_pre", &self.resid.pre), ("resid_norm_mid", &self.resid.mid), ("resid_norm_post", &self.resid.post)] {
            let t = rows.first().map_or(0, Vec::len);
            arrays.push((name.into(), vec![rows.len(), t], rows.concat()));
        }
        for (name, per) in [("key_norm", &self.kv.key), ("value_norm", &self.kv.value)] {
            let kvh = per.first().map_or(0, Vec::len);
            let t = per.iter().flatten().map(Vec::len).max().unwrap_or(0);
            // A linear-attention layer has no keys or values: NaN.
            let values = per.iter().flatten().flat_map(|v| if v.is_empty() { vec![f32::NAN; t] } else { v.clone() }).collect();
            arrays.push((name.into(), vec![per.len(), kvh, t], values));
        }
        let d = self.top.max_abs_by_dim.first().map_or(0, Vec::len);
        arrays.push(("max_abs_by_dim".into(), vec![n_layers, d], self.top.max_abs_by_dim.concat()));
        let tensors: Vec<(String, &[usize], &[f32])> = arrays.iter().map(|(n, s, v)| (n.clone(), s.as_slice(), v.as_slice())).collect();
        crate::io::arrays::write_safetensors_f32(path, &tensors, metadata)
    }
}

impl HookReceiver for StandardReducers {
    fn wants(&self, hook: &HookPoint) -> bool {
        self.attention.wants(hook)
            || self.sink_mass.wants(hook)
            || self.gate.wants(hook)
            || self.resid.wants(hook)
            || self.top.wants(hook)
            || self.kv.wants(hook)
            || (self.quant_risk && self.quant.wants(hook))
    }
    fn record(&mut self, hook: &HookPoint, rows: Range<usize>, value: &Tensor) -> Result<()> {
        let quant_risk = self.quant_risk;
        let sinks: [(&mut dyn HookReceiver, bool); 7] = [
            (&mut self.attention, true),
            (&mut self.sink_mass, true),
            (&mut self.gate, true),
            (&mut self.resid, true),
            (&mut self.top, true),
            (&mut self.kv, true),
            (&mut self.quant, quant_risk),
        ];
        for (s, on) in sinks {
            if on && s.wants(hook) {
                s.record(hook, rows.clone(), value)?;
            }
        }
        Ok(())
    }
}

/// Per-layer facts for the demo table and the JSON summary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LayerSummary {
    pub layer: usize,
    /// The layer's own sliding window (None: global attention).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<usize>,
    /// Mean over heads of α_0: the average attention a query pays to position 0 (`None`: a
    /// linear-attention layer, which attends to no position).
    pub mean_attention_pos0: Option<f64>,
    /// Largest |h| in the layer output (resid_post), and where.
    pub max_abs: f32,
    pub max_abs_pos: Option<usize>,
    pub max_abs_dim: Option<usize>,
    pub median_abs: f32,
    pub top: Vec<Activation>,
    pub resid_norm_mean_pre: f64,
    pub resid_norm_mean_post: f64,
    pub resid_norm_pos0_post: f32,
}

/// Per-head attention facts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeadSummary {
    pub layer: usize,
    pub head: usize,
    /// α_k for k = 0..K−1 (Gu et al. 2024): mean attention from queries i ≥ k to key k.
    pub alpha: Vec<f64>,
    /// Mean A[i, i−1] over i ≥ 1.
    pub prev_token_mass: f64,
    /// Mean A[i, i].
    pub self_mass: f64,
    /// Mean row entropy in nats (on a deterministic sample of ≤256 query rows).
    pub entropy_mean: f64,
    /// Mean softmax mass the head's learned sink logit took (models with learned sinks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink_mass: Option<f64>,
    /// Mean σ(gate) of the head's output gate (gated attention), and the share of query rows
    /// whose gate closed (below `capture::gate::GATE_CLOSED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_mean: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_closed: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaptureSummary {
    pub first_keys: usize,
    pub layers: Vec<LayerSummary>,
    pub heads: Vec<HeadSummary>,
}
