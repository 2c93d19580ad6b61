//! The diagnosis: pure functions from captured reductions to findings — sink metrics and sink
//! positions, massive activations, head classes, causal head dependency, quantization risk and what fake quantization did — and
//! their aggregation over probes into an [`AnalysisReport`]; sink loss in a serving trace, and
//! whether a trace conforms to a declared cache policy; pass-key retrieval's accuracy per policy.
//! Never loads a model.

pub mod census;
pub mod conformance;
pub mod findings;
pub mod format_check;
pub mod heads;
pub mod massive;
pub mod needle;
pub mod press;
pub mod quant;
pub mod sink_loss;
pub mod sinks;
pub mod survey;
pub mod tasks;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::capture::ablation::AblationResult;
use crate::capture::reducers::AttentionStats;
use crate::capture::summary::StandardReducers;
use crate::metrics::quant::QuantRisk;
use crate::model::info::{ModelInfo, NllSummary, TokenInfo};
use crate::probe::{BuiltProbe, SkippedProbe};
use heads::{classify, uniform_entropy, HeadClass, HeadEvidence};
use massive::{find_massive, recurring_dims, MassiveReport};
use sinks::{alpha, discover_sink_positions, f_attn, sink_score, Alphas, SinkPosition};

/// Settings every finding depends on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AnalysisSettings {
    /// ε of Sink_k^ε and of sink-position discovery.
    pub epsilon: f64,
    /// K: α_k is reported for k < K.
    pub first_keys: usize,
    /// A sink position needs at least this share of the probe's queries at or after it.
    pub min_query_share: f64,
}

impl Default for AnalysisSettings {
    fn default() -> Self {
        AnalysisSettings { epsilon: 0.3, first_keys: 16, min_query_share: 0.25 }
    }
}

/// Value and key norms at the probe's sink positions versus all other positions, per layer
/// (means over kv heads and positions).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerNorms {
    pub layer: usize,
    /// NaN (JSON null) when the probe has no sink positions.
    #[serde(serialize_with = "crate::io::serde_nan::nan_as_null", deserialize_with = "crate::io::serde_nan::nan_if_null")]
    pub value_norm_sink: f64,
    #[serde(serialize_with = "crate::io::serde_nan::nan_as_null", deserialize_with = "crate::io::serde_nan::nan_if_null")]
    pub value_norm_rest: f64,
    #[serde(serialize_with = "crate::io::serde_nan::nan_as_null", deserialize_with = "crate::io::serde_nan::nan_if_null")]
    pub key_norm_sink: f64,
    #[serde(serialize_with = "crate::io::serde_nan::nan_as_null", deserialize_with = "crate::io::serde_nan::nan_if_null")]
    pub key_norm_rest: f64,
}

/// Everything measured on one probe.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProbeReport {
    pub name: String,
    pub kind: String,
    pub n_tokens: usize,
    pub bos: bool,
    pub replaced_positions: Vec<usize>,
    pub tokens: Vec<TokenInfo>,
    pub nll: Option<NllSummary>,
    pub f_attn: f64,
    /// α_k per [layer][head] for k < K.
    pub alpha: Alphas,
    pub sink_positions: Vec<SinkPosition>,
    pub massive: MassiveReport,
    pub norms: Vec<LayerNorms>,
    pub quant_risk: Vec<QuantRisk>,
    /// Per [layer][head].
    pub head_evidence: Vec<Vec<HeadEvidence>>,
    /// Mean softmax mass of each head's learned sink logit, per [layer][head] (models with
    /// learned sinks; empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sink_mass: Vec<Vec<f64>>,
    /// Mean σ(gate) of each head's output gate, and the share of its query rows whose gate
    /// closed, per [layer][head] (gated attention; a layer without a gate has no heads; empty for
    /// a model without gates).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gate_mean: Vec<Vec<f64>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gate_closed: Vec<Vec<f64>>,
    /// Share of the attention entries queries may see that are zero to f32 precision (below
    /// `capture::reducers::ZERO_ATTENTION`), over every layer and head (`None` in runs from
    /// before it was measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zero_share: Option<f64>,
}

/// One head's summary over the natural-text probes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeadReport {
    pub layer: usize,
    pub head: usize,
    /// Mean α_k over all probes, k < K.
    pub alpha: Vec<f64>,
    pub class: HeadClass,
    /// Mean evidence over the natural-text probes (all probes if there are none).
    pub evidence: HeadEvidence,
    /// Mean softmax mass of the head's learned sink logit over all probes (models with learned
    /// sinks): beside α_0, where the head's "attend to nothing" mass goes instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink_mass: Option<f64>,
    /// Mean σ(gate) of the head's output gate over all probes, and the share of query rows whose
    /// gate closed (gated attention): a closed gate is where this design's "attend to nothing" goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_mean: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_closed: Option<f64>,
}

/// Massive activations over all probes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MassiveSummary {
    /// Earliest layer with a massive element in any probe.
    pub first_layer: Option<usize>,
    /// Dims massive in any probe, most frequent first.
    pub dims: Vec<usize>,
    /// Positions carrying massive elements in any probe, most frequent first.
    pub positions: Vec<usize>,
    /// (dim, number of probes in which it is massive).
    pub recurring_dims: Vec<(usize, usize)>,
    pub n_probes: usize,
}

/// The causal sweep's findings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AblationSummary {
    pub n_tokens: usize,
    pub keys: Vec<usize>,
    pub wall_seconds: f64,
    pub results: Vec<AblationResult>,
    /// Single heads with the largest ΔNLL (up to 10).
    pub top_heads: Vec<AblationResult>,
}

/// What `sinkscope analyze` writes as `report.json` (and prints with `--json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AnalysisReport {
    pub sinkscope_version: String,
    pub model: ModelInfo,
    pub settings: AnalysisSettings,
    /// Token positions that act as sinks in any probe, ascending.
    pub sink_positions: Vec<usize>,
    /// Sink_k^ε in percent over every (probe, layer, head), keyed by position k (a string in JSON,
    /// in numeric order).
    pub sink_score: BTreeMap<usize, f64>,
    /// Mean over probes, layers and heads of the attention paid to position 0.
    pub f_attn: f64,
    pub massive: MassiveSummary,
    pub heads: Vec<HeadReport>,
    pub ablation: Option<AblationSummary>,
    pub probes: Vec<ProbeReport>,
    /// Probes of the set that could not be built for this model, and why (a flipped-BOS probe
    /// where the tokenizer has no BOS to flip).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_probes: Vec<SkippedProbe>,
    pub wall_seconds: f64,
}

/// Everything `analyze_probe` needs from one captured probe.
pub struct ProbeCapture<'a> {
    pub probe: &'a BuiltProbe,
    pub pieces: Vec<String>,
    pub reducers: &'a StandardReducers,
    pub quant_risk: Vec<QuantRisk>,
    pub nll: Option<NllSummary>,
}

pub fn analyze_probe(c: &ProbeCapture<'_>, settings: &AnalysisSettings) -> ProbeReport {
    let att = &c.reducers.attention;
    let t = c.probe.ids.len();
    let n_layers = att.heads.len();
    let k_max = settings.first_keys.min(t);
    let alphas: Alphas = (0..n_layers).map(|l| (0..att.heads[l].len()).map(|h| (0..k_max).map(|k| att.alpha(l, h, k)).collect()).collect()).collect();
    let col_mass: Vec<Vec<Vec<f64>>> = att.heads.iter().map(|layer| layer.iter().map(|h| h.col_mass.clone()).collect()).collect();
    let min_queries = ((t as f64 * settings.min_query_share).ceil() as usize).max(2);
    let sink_positions = discover_sink_positions(&col_mass, t, &att.windows, settings.epsilon, min_queries, &c.pieces);
    let mut massive = find_massive(&c.reducers.top.top, &c.reducers.top.above, &c.reducers.top.median_abs, &c.pieces);
    massive.layers.iter_mut().zip(c.reducers.top.kurtosis()).for_each(|(layer, k)| layer.kurtosis = k);
    let (zeros, visible) = att.heads.iter().flatten().fold((0, 0), |(z, v), h| (z + h.zero_entries, v + h.visible_entries));
    let sink_set: Vec<usize> = sink_positions.iter().map(|s| s.pos).collect();
    let norms = (0..n_layers).map(|l| layer_norms(l, &c.reducers.kv.value[l], &c.reducers.kv.key[l], &sink_set)).collect();
    let uniform = uniform_entropy(t, att.entropy_stride);
    let head_evidence = att
        .heads
        .iter()
        .enumerate()
        .map(|(l, layer)| {
            layer
                .iter()
                .enumerate()
                .map(|(head, h)| {
                    let (sink_alpha, sink_pos) = sink_set
                        .iter()
                        .chain(std::iter::once(&0))
                        .map(|&k| (alpha(&h.col_mass, t, k, att.windows.get(l).copied().flatten()), k))
                        .fold((0.0, None), |best, (a, k)| if a > best.0 { (a, Some(k)) } else { best });
                    HeadEvidence {
                        sink_alpha,
                        sink_pos,
                        prev_token_mass: att.prev_token_mass(l, head),
                        self_mass: att.self_mass(l, head),
                        normalized_entropy: if uniform > 0.0 { att.entropy_mean(l, head) / uniform } else { 0.0 },
                    }
                })
                .collect()
        })
        .collect();
    ProbeReport {
        name: c.probe.name.clone(),
        kind: c.probe.kind.clone(),
        n_tokens: t,
        bos: c.probe.bos,
        replaced_positions: c.probe.replaced.clone(),
        tokens: c.probe.ids.iter().zip(&c.pieces).enumerate().map(|(pos, (&id, piece))| TokenInfo { pos, id, piece: piece.clone() }).collect(),
        nll: c.nll.clone(),
        f_attn: f_attn(&[&alphas]),
        alpha: alphas,
        sink_positions,
        massive,
        norms,
        quant_risk: c.quant_risk.clone(),
        head_evidence,
        zero_share: (visible > 0).then(|| zeros as f64 / visible as f64),
        sink_mass: (0..n_layers)
            .map(|l| (0..att.heads[l].len()).filter_map(|h| c.reducers.sink_mass.mean(l, h)).collect::<Vec<f64>>())
            .filter(|v| !v.is_empty())
            .collect(),
        gate_mean: per_gated_head(att, |l, h| c.reducers.gate.mean(l, h)),
        gate_closed: per_gated_head(att, |l, h| c.reducers.gate.closed_share(l, h)),
    }
}

/// `of(layer, head)` per [layer][head] of the attending heads, a layer without a gate holding
/// none; empty when no layer delivered one.
fn per_gated_head(att: &AttentionStats, of: impl Fn(usize, usize) -> Option<f64>) -> Vec<Vec<f64>> {
    let per: Vec<Vec<f64>> = att.heads.iter().enumerate().map(|(l, heads)| (0..heads.len()).filter_map(|h| of(l, h)).collect()).collect();
    if per.iter().all(Vec::is_empty) {
        Vec::new()
    } else {
        per
    }
}

fn layer_norms(layer: usize, value: &[Vec<f32>], key: &[Vec<f32>], sinks: &[usize]) -> LayerNorms {
    let split = |per_head: &[Vec<f32>]| {
        let (mut s, mut ns, mut r, mut nr) = (0f64, 0usize, 0f64, 0usize);
        for head in per_head {
            for (pos, &v) in head.iter().enumerate() {
                if sinks.contains(&pos) {
                    s += v as f64;
                    ns += 1;
                } else {
                    r += v as f64;
                    nr += 1;
                }
            }
        }
        (if ns > 0 { s / ns as f64 } else { f64::NAN }, if nr > 0 { r / nr as f64 } else { f64::NAN })
    };
    let (vs, vr) = split(value);
    let (ks, kr) = split(key);
    LayerNorms { layer, value_norm_sink: vs, value_norm_rest: vr, key_norm_sink: ks, key_norm_rest: kr }
}

/// Combines per-probe reports into the report users read.
pub fn aggregate(
    model: ModelInfo,
    settings: AnalysisSettings,
    probes: Vec<ProbeReport>,
    ablation: Option<AblationSummary>,
    wall_seconds: f64,
) -> AnalysisReport {
    let samples: Vec<&Alphas> = probes.iter().map(|p| &p.alpha).collect();
    // The first head of any layer (a hybrid's linear layers have none).
    let k_max = probes.iter().map(|p| p.alpha.iter().flatten().next().map_or(0, Vec::len)).max().unwrap_or(0);
    let sink_score = (0..k_max).map(|k| (k, sink_score(&samples, k, settings.epsilon))).collect();
    let mut positions: Vec<usize> = probes.iter().flat_map(|p| p.sink_positions.iter().map(|s| s.pos)).collect();
    positions.sort_unstable();
    positions.dedup();
    let massive_reports: Vec<&MassiveReport> = probes.iter().map(|p| &p.massive).collect();
    let massive = MassiveSummary {
        first_layer: probes.iter().filter_map(|p| p.massive.first_layer).min(),
        dims: massive::by_frequency(probes.iter().flat_map(|p| p.massive.elements.iter().map(|e| e.dim))),
        positions: massive::by_frequency(probes.iter().flat_map(|p| p.massive.elements.iter().map(|e| e.pos))),
        recurring_dims: recurring_dims(&massive_reports),
        n_probes: probes.len(),
    };
    let natural: Vec<&ProbeReport> = probes.iter().filter(|p| p.kind == "text" || p.kind == "file").collect();
    let class_probes: Vec<&ProbeReport> = if natural.is_empty() { probes.iter().collect() } else { natural };
    let mut heads = Vec::new();
    if let Some(first) = probes.first() {
        for (l, layer) in first.alpha.iter().enumerate() {
            for h in 0..layer.len() {
                let alpha = (0..k_max)
                    .map(|k| probes.iter().map(|p| p.alpha[l][h].get(k).copied().unwrap_or(0.0)).sum::<f64>() / probes.len() as f64)
                    .collect();
                let n = class_probes.len() as f64;
                let ev: Vec<&HeadEvidence> = class_probes.iter().map(|p| &p.head_evidence[l][h]).collect();
                let sink_pos = ev.iter().max_by(|a, b| a.sink_alpha.total_cmp(&b.sink_alpha)).and_then(|e| e.sink_pos);
                let evidence = HeadEvidence {
                    sink_alpha: ev.iter().map(|e| e.sink_alpha).sum::<f64>() / n,
                    sink_pos,
                    prev_token_mass: ev.iter().map(|e| e.prev_token_mass).sum::<f64>() / n,
                    self_mass: ev.iter().map(|e| e.self_mass).sum::<f64>() / n,
                    normalized_entropy: ev.iter().map(|e| e.normalized_entropy).sum::<f64>() / n,
                };
                let masses: Vec<f64> = probes.iter().filter_map(|p| p.sink_mass.get(l)?.get(h).copied()).collect();
                let sink_mass = (!masses.is_empty()).then(|| masses.iter().sum::<f64>() / masses.len() as f64);
                let over_probes = |of: fn(&ProbeReport) -> &Vec<Vec<f64>>| {
                    let v: Vec<f64> = probes.iter().filter_map(|p| of(p).get(l)?.get(h).copied()).collect();
                    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
                };
                let (gate_mean, gate_closed) = (over_probes(|p| &p.gate_mean), over_probes(|p| &p.gate_closed));
                heads.push(HeadReport { layer: l, head: h, alpha, class: classify(&evidence), evidence, sink_mass, gate_mean, gate_closed });
            }
        }
    }
    AnalysisReport {
        sinkscope_version: env!("CARGO_PKG_VERSION").to_string(),
        model,
        settings,
        sink_positions: positions,
        sink_score,
        f_attn: f_attn(&samples),
        massive,
        heads,
        ablation,
        probes,
        skipped_probes: Vec::new(),
        wall_seconds,
    }
}
