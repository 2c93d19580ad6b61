//! The census across attention designs: per model, the numbers that say where its heads put the
//! attention they do not want to spend — the sink rate at several ε (Gu et al.; Barbero et al.),
//! the first-token mass, the largest activation and the kurtosis of the layer output holding it,
//! the share of attention weights that are zero to f32 precision, the learned-sink mass, how far
//! output gates open and how often they close — beside how its layers are positioned (RoPE, NoPE,
//! learned), windowed or linear (no attention), read from one analysis so that every family
//! reads the same way.

use serde::{Deserialize, Serialize};

use super::AnalysisReport;

/// The ε thresholds the census reports Sink_0^ε at: Gu et al.'s 0.3, Barbero et al.'s 0.2 and 0.8.
pub const CENSUS_EPSILONS: [f64; 3] = [0.2, 0.3, 0.8];

/// Sink_0^ε at one ε.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SinkRate {
    pub epsilon: f64,
    /// Percent of (probe, layer, head) whose α_0 exceeds ε.
    pub percent: f64,
}

/// One model's census row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Census {
    /// Probes measured, and their mean length in tokens.
    pub probes: usize,
    pub mean_tokens: f64,
    /// Sink_0^ε at each of [`CENSUS_EPSILONS`].
    pub sink_rate: Vec<SinkRate>,
    /// Mean α_0 over probes, layers and heads (F-Attn).
    pub first_token_mass: f64,
    /// The largest |h| of any layer output of any probe, its layer, and the kurtosis of that
    /// layer output in that probe (3 for a Gaussian).
    pub largest_activation: f64,
    pub largest_layer: usize,
    pub kurtosis: Option<f64>,
    /// Mean over probes of the share of visible attention entries that are zero to f32 precision
    /// (below `capture::reducers::ZERO_ATTENTION`, 1e-30).
    pub zero_share: Option<f64>,
    /// Mean softmax mass of the learned sink logits over probes, layers and heads (gpt-oss;
    /// `None` for a model without them).
    pub learned_sink_mass: Option<f64>,
    /// Mean σ(gate) of the output gates over probes, layers and heads, and the mean share of
    /// query rows whose gate closed (gated attention; `None` for a model without gates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_mean: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_closed: Option<f64>,
    /// Layers that do not attend (a hybrid's linear-attention layers): no α, no position.
    #[serde(default)]
    pub linear_layers: usize,
    /// Layers by how they position: rotated (RoPE), not rotated (NoPE), or none rotated because
    /// the model adds learned absolute positions.
    pub rope_layers: usize,
    pub nope_layers: usize,
    pub learned_positions: bool,
    /// Layers attending through a sliding window of their own.
    pub windowed_layers: usize,
}

impl Census {
    /// The census of one analysis (every probe it ran).
    pub fn of(a: &AnalysisReport) -> Census {
        let cfg = &a.model.config;
        let alpha0: Vec<f64> = a.probes.iter().flat_map(|p| p.alpha.iter().flatten().filter_map(|h| h.first().copied())).collect();
        let sink_rate = CENSUS_EPSILONS
            .iter()
            .map(|&epsilon| SinkRate {
                epsilon,
                percent: 100.0 * alpha0.iter().filter(|&&a| a > epsilon).count() as f64 / alpha0.len().max(1) as f64,
            })
            .collect();
        let (mut largest_activation, mut largest_layer, mut kurtosis) = (0.0f64, 0, None);
        for layer in a.probes.iter().flat_map(|p| &p.massive.layers) {
            if let Some(&top) = layer.top.first().filter(|&&t| t as f64 > largest_activation) {
                (largest_activation, largest_layer, kurtosis) = (top as f64, layer.layer, layer.kurtosis);
            }
        }
        let zeros: Vec<f64> = a.probes.iter().filter_map(|p| p.zero_share).collect();
        let sink_mass: Vec<f64> = a.probes.iter().flat_map(|p| p.sink_mass.iter().flatten().copied()).collect();
        let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
        let gates =
            |of: fn(&super::ProbeReport) -> &Vec<Vec<f64>>| -> Vec<f64> { a.probes.iter().flat_map(|p| of(p).iter().flatten().copied()).collect() };
        let learned_positions = cfg.arch.learned_positions;
        let attending = cfg.attention_layers().len();
        let nope_layers = if learned_positions { attending } else { cfg.layers.iter().filter(|l| l.nope && !l.linear).count() };
        Census {
            probes: a.probes.len(),
            mean_tokens: mean(&a.probes.iter().map(|p| p.n_tokens as f64).collect::<Vec<_>>()).unwrap_or(0.0),
            sink_rate,
            first_token_mass: mean(&alpha0).unwrap_or(0.0),
            largest_activation,
            largest_layer,
            kurtosis,
            zero_share: (zeros.len() == a.probes.len()).then(|| mean(&zeros)).flatten(),
            learned_sink_mass: if cfg.arch.learned_sinks { mean(&sink_mass) } else { None },
            gate_mean: mean(&gates(|p| &p.gate_mean)),
            gate_closed: mean(&gates(|p| &p.gate_closed)),
            linear_layers: cfg.n_layers - attending,
            rope_layers: attending - nope_layers,
            nope_layers,
            learned_positions,
            windowed_layers: cfg.windowed_layers().len(),
        }
    }

    /// How the layers position, in a few words ("30 RoPE", "27 RoPE + 9 NoPE", "learned",
    /// "12 RoPE + 36 linear").
    pub fn positions(&self) -> String {
        let attending = match (self.learned_positions, self.nope_layers) {
            (true, _) => "learned absolute".into(),
            (false, 0) => format!("{} RoPE", self.rope_layers),
            (false, n) => format!("{} RoPE + {n} NoPE", self.rope_layers),
        };
        match self.linear_layers {
            0 => attending,
            n => format!("{attending} + {n} linear"),
        }
    }
}
