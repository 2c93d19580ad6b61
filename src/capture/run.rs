//! One capture: check the memory estimate, run the forward pass once with the standard reducers
//! (and a full-tensor collector when asked), and score the text's next-token loss.

use std::time::Instant;

use super::collector::TensorCollector;
use super::heatmap::HeatmapReducer;
use super::heatmaps::Heatmaps;
use super::memory::{self, MemoryEstimate};
use super::summary::StandardReducers;
use crate::error::{Error, Result};
use crate::model::decoder::Decoder;
use crate::model::hook::HookFilter;
use crate::model::info::NllSummary;
use crate::model::receiver::{FanOut, HookReceiver};

#[derive(Debug, Clone)]
pub struct CaptureOptions {
    /// Early key positions that get a per-head α in the summary.
    pub first_keys: usize,
    /// Activations kept per layer.
    pub top_k: usize,
    /// Hooks whose full tensors are kept.
    pub save: Option<HookFilter>,
    /// Refuse when the estimate exceeds this many bytes (default: the system's available memory).
    pub memory_limit: Option<u64>,
    /// In-memory size of the loaded weights, for the estimate.
    pub weight_bytes: u64,
    /// Also score the text (next-token NLL): one T×vocab logits pass, computed in row chunks.
    pub score: bool,
    /// Also measure int8 quantization risk of every layer output.
    pub quant_risk: bool,
    /// Keep every head's pattern pooled onto at most this many bins per axis (`heatmaps.safetensors`).
    pub heatmap_bins: Option<usize>,
}

impl Default for CaptureOptions {
    /// What `capture` does with no flags: α for the first 16 keys, 16 activations per layer,
    /// the text scored, heatmaps on 128 × 128 bins, no saved tensors, no quantization risk.
    fn default() -> Self {
        CaptureOptions {
            first_keys: 16,
            top_k: 16,
            save: None,
            memory_limit: None,
            weight_bytes: 0,
            score: true,
            quant_risk: false,
            heatmap_bins: Some(128),
        }
    }
}

pub struct CaptureOutput {
    pub reducers: StandardReducers,
    pub tensors: Option<TensorCollector>,
    pub heatmaps: Option<Heatmaps>,
    pub nll: Option<NllSummary>,
    pub estimate: MemoryEstimate,
    pub wall_seconds: f64,
}

pub fn capture(model: &Decoder, ids: &[u32], opts: &CaptureOptions) -> Result<CaptureOutput> {
    let estimate = memory::estimate(&model.cfg, ids.len(), opts.weight_bytes, opts.save.as_ref(), opts.heatmap_bins.map(|g| (g, opts.first_keys)));
    // A limit given is the whole run's; what the system has available now excludes the weights,
    // which are already loaded.
    let (needed, limit) = match opts.memory_limit {
        Some(limit) => (estimate.total, Some(limit)),
        None => (estimate.total - estimate.weights, crate::model::fit::mem_available()),
    };
    if let Some(limit) = limit {
        if needed > limit {
            return Err(Error::input(format!(
                "this capture needs about {} (weights {} {}, activations {}, reducers {}, saved tensors {}) but only {} is available; select fewer hooks with --hooks, or fewer tokens with --max-tokens",
                memory::human(needed),
                if opts.memory_limit.is_some() { "included" } else { "already loaded and not counted" },
                memory::human(estimate.weights),
                memory::human(estimate.activations),
                memory::human(estimate.reducers),
                memory::human(estimate.saved_tensors),
                memory::human(limit)
            )));
        }
    }
    let start = Instant::now();
    let mut reducers = StandardReducers::new(&model.cfg, ids.len(), opts.first_keys, opts.top_k, opts.quant_risk);
    let mut tensors = opts.save.clone().map(|f| TensorCollector::new(f, ids.len()));
    let mut maps = opts.heatmap_bins.map(|g| HeatmapReducer::new(model.cfg.n_layers, model.cfg.n_heads, ids.len(), g, opts.first_keys));
    let hidden = {
        let mut sinks: Vec<&mut dyn HookReceiver> = vec![&mut reducers];
        if let Some(t) = tensors.as_mut() {
            sinks.push(t);
        }
        if let Some(m) = maps.as_mut() {
            sinks.push(m);
        }
        model.forward(ids, None, &mut FanOut(sinks))?
    };
    let heatmaps = maps.map(HeatmapReducer::finish);
    let nll = if opts.score { Some(score(model, &hidden, ids)?) } else { None };
    Ok(CaptureOutput { reducers, tensors, heatmaps, nll, estimate, wall_seconds: start.elapsed().as_secs_f64() })
}

/// Mean NLL of tokens 1..T given their prefixes, from final-norm hidden states (T, d).
pub fn score(model: &Decoder, hidden: &candle_core::Tensor, ids: &[u32]) -> Result<NllSummary> {
    let scored = ids.len().saturating_sub(1);
    let per_token = if scored > 0 { model.next_token_nll(&hidden.narrow(0, 0, scored)?, &ids[1..])? } else { Vec::new() };
    let total: f64 = per_token.iter().sum();
    let mean = if scored > 0 { total / scored as f64 } else { 0.0 };
    Ok(NllSummary { mean_nll: mean, perplexity: mean.exp(), scored, per_token })
}
