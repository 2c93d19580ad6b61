//! A run as tidy tables (DESIGN §9): one row per fact, long format, with the run's metadata on
//! every row so tables from many runs concatenate. Pure: builds typed columns from a [`Run`]; the
//! Parquet writer and the figures consume them. Column names and types are a public contract
//! (documented in notebooks-data/README.md) — change them only deliberately.

use super::records::{CaptureReport, StreamReport};
use super::run::Run;
use crate::analysis::massive::{find_massive, MassiveElement};
use crate::analysis::quant::{QuantCase, QuantReport, SiteNoise};
use crate::analysis::sinks::seeing;
use crate::analysis::survey::{Survey, SurveyRow, SurveySweep};
use crate::kv::per_head::Frontier;
use crate::model::info::TokenInfo;

/// The probe name of rows that come from `capture.json` rather than from an analysis probe.
pub const CAPTURE_PROBE: &str = "capture";

#[derive(Debug, Clone, PartialEq)]
pub enum ColumnData {
    U32(Vec<u32>),
    OptU32(Vec<Option<u32>>),
    F64(Vec<f64>),
    OptF64(Vec<Option<f64>>),
    Str(Vec<String>),
    Bool(Vec<bool>),
}

impl ColumnData {
    pub fn len(&self) -> usize {
        match self {
            ColumnData::U32(v) => v.len(),
            ColumnData::OptU32(v) => v.len(),
            ColumnData::F64(v) => v.len(),
            ColumnData::OptF64(v) => v.len(),
            ColumnData::Str(v) => v.len(),
            ColumnData::Bool(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The type's name as documented: u32, f64, str, bool (nullable ones end in `?`).
    pub fn type_name(&self) -> &'static str {
        match self {
            ColumnData::U32(_) => "u32",
            ColumnData::OptU32(_) => "u32?",
            ColumnData::F64(_) => "f64",
            ColumnData::OptF64(_) => "f64?",
            ColumnData::Str(_) => "str",
            ColumnData::Bool(_) => "bool",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub name: &'static str,
    pub data: ColumnData,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub name: &'static str,
    pub columns: Vec<Column>,
}

impl Table {
    pub fn n_rows(&self) -> usize {
        self.columns.first().map_or(0, |c| c.data.len())
    }

    pub fn column(&self, name: &str) -> Option<&ColumnData> {
        self.columns.iter().find(|c| c.name == name).map(|c| &c.data)
    }
}

/// Builds a table from rows with one closure per column.
pub(super) struct Builder<'a, R> {
    rows: &'a [R],
    columns: Vec<Column>,
}

impl<'a, R> Builder<'a, R> {
    pub(super) fn new(rows: &'a [R], meta: &Meta) -> Self {
        let n = rows.len();
        let columns = vec![
            Column { name: "model", data: ColumnData::Str(vec![meta.model.clone(); n]) },
            Column { name: "model_sha256", data: ColumnData::Str(vec![meta.sha256.clone(); n]) },
            Column { name: "sinkscope_version", data: ColumnData::Str(vec![meta.version.clone(); n]) },
        ];
        Builder { rows, columns }
    }
    /// Without the run's metadata columns (a table whose rows come from several models).
    pub(super) fn bare(rows: &'a [R]) -> Self {
        Builder { rows, columns: Vec::new() }
    }
    pub(super) fn u32(mut self, name: &'static str, f: impl Fn(&R) -> usize) -> Self {
        self.columns.push(Column { name, data: ColumnData::U32(self.rows.iter().map(|r| f(r) as u32).collect()) });
        self
    }
    pub(super) fn opt_u32(mut self, name: &'static str, f: impl Fn(&R) -> Option<usize>) -> Self {
        self.columns.push(Column { name, data: ColumnData::OptU32(self.rows.iter().map(|r| f(r).map(|v| v as u32)).collect()) });
        self
    }
    pub(super) fn f64(mut self, name: &'static str, f: impl Fn(&R) -> f64) -> Self {
        self.columns.push(Column { name, data: ColumnData::F64(self.rows.iter().map(f).collect()) });
        self
    }
    pub(super) fn opt_f64(mut self, name: &'static str, f: impl Fn(&R) -> Option<f64>) -> Self {
        self.columns.push(Column { name, data: ColumnData::OptF64(self.rows.iter().map(f).collect()) });
        self
    }
    pub(super) fn str(mut self, name: &'static str, f: impl Fn(&R) -> String) -> Self {
        self.columns.push(Column { name, data: ColumnData::Str(self.rows.iter().map(f).collect()) });
        self
    }
    pub(super) fn bool(mut self, name: &'static str, f: impl Fn(&R) -> bool) -> Self {
        self.columns.push(Column { name, data: ColumnData::Bool(self.rows.iter().map(f).collect()) });
        self
    }
    pub(super) fn build(self, name: &'static str) -> Table {
        Table { name, columns: self.columns }
    }
}

/// The metadata columns every table starts with.
pub(super) struct Meta {
    pub(super) model: String,
    pub(super) sha256: String,
    pub(super) version: String,
}

pub(super) fn meta(run: &Run) -> Meta {
    Meta { model: run.model_name(), sha256: run.model().sha256.clone().unwrap_or_default(), version: run.sinkscope_version().to_string() }
}

/// Every table the run has data for, in a fixed order.
pub fn tables(run: &Run) -> Vec<Table> {
    let m = meta(run);
    let mut out = vec![head_sinks(run, &m), layers(run, &m), massive(run, &m)];
    if let Some(t) = resid_norms(run, &m) {
        out.push(t);
    }
    if let Some(t) = ablation(run, &m) {
        out.push(t);
    }
    if let Some(c) = run.capture.as_ref().filter(|c| c.nll.as_ref().is_some_and(|n| !n.per_token.is_empty())) {
        out.push(capture_tokens(c, &m));
    }
    if let Some(s) = &run.stream {
        out.push(stream_nll(s, &m));
        if s.recommendation.is_some() {
            out.push(recommend(s, &m));
        }
    }
    if let Some(f) = &run.per_head {
        out.push(head_gates(f, &m));
        out.push(per_head_frontier(f, &m));
    }
    if let Some(q) = &run.quant {
        out.push(quant(q, &m));
    }
    out
}

/// `quant`: per setting (scheme, bits, K/V or not, calibration skip) and per layer and site, the
/// SQNR and zeroed share, beside the setting's perplexity and NLL at the sink positions and the
/// rest (and the unquantized model's).
fn quant(q: &QuantReport, m: &Meta) -> Table {
    let rows: Vec<(&QuantCase, &SiteNoise)> = q.cases.iter().flat_map(|c| c.sites.iter().map(move |s| (c, s))).collect();
    Builder::new(&rows, m)
        .str("setting", |r| r.0.label.clone())
        .str("scheme", |r| r.0.setting.scheme.name().to_string())
        .u32("bits", |r| r.0.setting.bits as usize)
        .bool("kv", |r| r.0.setting.kv)
        .u32("calib_skip", |r| r.0.setting.calib_skip)
        .u32("layer", |r| r.1.layer)
        .str("site", |r| r.1.site.name().to_string())
        .opt_f64("sqnr_db", |r| r.1.sqnr_db)
        .f64("zero_share", |r| r.1.zero_share)
        .f64("ppl", |r| r.0.nll.ppl)
        .f64("sink_nll", |r| r.0.nll.sink_nll)
        .f64("rest_nll", |r| r.0.nll.rest_nll)
        .f64("delta_sink", |r| r.0.delta_sink)
        .f64("delta_rest", |r| r.0.delta_rest)
        .f64("baseline_ppl", |_| q.baseline.ppl)
        .u32("sink_positions", |_| q.sink_positions)
        .u32("sequences", |_| q.sequences)
        .u32("tokens_per_sequence", |_| q.tokens_per_sequence)
        .build("quant")
}

/// `head_gates`: per (layer, KV head), the attention its query heads put outside S sinks + R
/// recent keys, their α_0, the causal ΔNLL when measured, and its rank by the evidence the gates
/// used (1 = needs the whole cache most).
fn head_gates(f: &Frontier, m: &Meta) -> Table {
    let g = &f.gates;
    let ranking = g.ranking();
    let cells: Vec<(usize, usize)> = g.score.iter().enumerate().flat_map(|(l, h)| (0..h.len()).map(move |kv| (l, kv))).collect();
    let mut order: Vec<usize> = (0..cells.len()).collect();
    order.sort_by(|&a, &b| ranking[cells[b].0][cells[b].1].total_cmp(&ranking[cells[a].0][cells[a].1]).then(a.cmp(&b)));
    let mut rank = vec![0; cells.len()];
    for (r, &i) in order.iter().enumerate() {
        rank[i] = r + 1;
    }
    let rows: Vec<(usize, usize, usize)> = cells.into_iter().zip(rank).map(|((l, kv), r)| (l, kv, r)).collect();
    Builder::new(&rows, m)
        .u32("layer", |r| r.0)
        .u32("kv_head", |r| r.1)
        .f64("outside_mass", |r| g.score[r.0][r.1])
        .opt_f64("alpha0", |r| g.alpha0.get(r.0).and_then(|h| h.get(r.1)).copied())
        .opt_f64("causal_delta_nll", |r| g.causal.as_ref().map(|c| c[r.0][r.1]))
        .u32("rank", |r| r.2)
        .bool("full_cache", |r| g.full[r.0][r.1])
        .str("ranked_by", |_| format!("{:?}", g.ranked_by).to_lowercase())
        .u32("sinks", |_| g.sinks)
        .u32("recent", |_| g.recent)
        .u32("tokens", |_| g.tokens)
        .build("head_gates")
}

/// `per_head_frontier`: per share of retrieval heads, KV memory and perplexity from step W, beside
/// `sink S` at the same memory.
fn per_head_frontier(f: &Frontier, m: &Meta) -> Table {
    Builder::new(&f.rows, m)
        .f64("share", |r| r.share)
        .u32("retrieval_heads", |r| r.retrieval_heads)
        .u32("entries", |r| r.entries)
        .f64("bytes", |r| r.bytes as f64)
        .f64("ppl_from_w", |r| r.ppl_from_w)
        .u32("uniform_cache", |r| r.uniform_cache)
        .f64("uniform_ppl_from_w", |r| r.uniform_ppl_from_w)
        .opt_f64("uniform_bytes_at_equal_ppl", |r| r.uniform_bytes_at_equal_ppl)
        .u32("cache", |_| f.cache)
        .u32("sinks", |_| f.sinks)
        .build("per_head_frontier")
}

/// A value per [layer][head].
type PerHead = Vec<Vec<f64>>;

/// A probe's per-head α_k (k < K) with its tokens, T, and the kv-head value norms if known.
struct AlphaSource<'a> {
    probe: String,
    tokens: &'a [TokenInfo],
    /// [layer][head][k]
    alpha: Vec<Vec<Vec<f64>>>,
    /// [layer, kv_head, pos] value norms (the capture only).
    value_norm: Option<(&'a [usize], &'a [f32])>,
    /// [layer][head] mean learned-sink mass, where the model has learned sinks.
    sink_mass: Option<Vec<Vec<f64>>>,
    /// [layer][head] mean σ(gate) and share of rows with the gate closed (gated attention).
    gate: Option<(PerHead, PerHead)>,
}

fn alpha_sources(run: &Run) -> Vec<AlphaSource<'_>> {
    let mut sources = Vec::new();
    if let (Some(c), Some(alpha)) = (&run.capture, run.capture_alphas()) {
        let value_norm = run.reductions.as_ref().and_then(|r| r.get("value_norm", 3));
        let n_heads = run.model().config.n_heads;
        let mass: Vec<Vec<f64>> = c
            .summary
            .heads
            .chunks(n_heads.max(1))
            .map(|layer| layer.iter().filter_map(|h| h.sink_mass).collect::<Vec<_>>())
            .filter(|v| !v.is_empty())
            .collect();
        let sink_mass = (!mass.is_empty()).then_some(mass);
        // By each head's own layer (a hybrid's linear layers have no heads).
        let by_layer = |of: fn(&crate::capture::summary::HeadSummary) -> Option<f64>| -> PerHead {
            let layers = c.summary.heads.iter().map(|h| h.layer + 1).max().unwrap_or(0);
            (0..layers).map(|l| c.summary.heads.iter().filter(|h| h.layer == l).filter_map(of).collect()).collect()
        };
        let (open, closed) = (by_layer(|h| h.gate_mean), by_layer(|h| h.gate_closed));
        let gate = open.iter().any(|l| !l.is_empty()).then_some((open, closed));
        sources.push(AlphaSource { probe: CAPTURE_PROBE.into(), tokens: &c.tokens, alpha, value_norm, sink_mass, gate });
    }
    if let Some(a) = &run.analysis {
        for p in &a.probes {
            let sink_mass = (!p.sink_mass.is_empty()).then(|| p.sink_mass.clone());
            let gate = (!p.gate_mean.is_empty()).then(|| (p.gate_mean.clone(), p.gate_closed.clone()));
            sources.push(AlphaSource { probe: p.name.clone(), tokens: &p.tokens, alpha: p.alpha.clone(), value_norm: None, sink_mass, gate });
        }
    }
    sources
}

struct HeadSinkRow<'a> {
    probe: &'a str,
    layer: usize,
    head: usize,
    key_pos: usize,
    token: &'a str,
    n_tokens: usize,
    alpha: f64,
    value_norm: Option<f64>,
    class: Option<String>,
    /// The layer's own sliding window, if it has one.
    window: Option<usize>,
    /// The head's mean learned-sink mass (models with learned sinks).
    sink_mass: Option<f64>,
    /// The head's mean σ(gate) and share of rows with the gate closed (gated attention).
    gate_mean: Option<f64>,
    gate_closed: Option<f64>,
}

/// `head_sinks`: per (probe, layer, head, key position k < K), α_k and friends.
fn head_sinks(run: &Run, m: &Meta) -> Table {
    let sources = alpha_sources(run);
    let epsilon = run.analysis.as_ref().map_or(0.3, |a| a.settings.epsilon);
    let classes: std::collections::HashMap<(usize, usize), String> =
        run.analysis.iter().flat_map(|a| a.heads.iter().map(|h| ((h.layer, h.head), h.class.to_string()))).collect();
    let n_heads = run.model().config.n_heads.max(1);
    let group = (n_heads / run.model().config.n_kv_heads.max(1)).max(1);
    let mut rows = Vec::new();
    for s in &sources {
        for (layer, heads) in s.alpha.iter().enumerate() {
            for (head, alphas) in heads.iter().enumerate() {
                for (k, &alpha) in alphas.iter().enumerate() {
                    let value_norm = s.value_norm.and_then(|(shape, data)| {
                        let (kvh, t) = (shape[1], shape[2]);
                        let g = head / group;
                        (layer < shape[0] && g < kvh && k < t).then(|| data[(layer * kvh + g) * t + k] as f64)
                    });
                    rows.push(HeadSinkRow {
                        probe: &s.probe,
                        layer,
                        head,
                        key_pos: k,
                        token: s.tokens.get(k).map_or("", |t| t.piece.as_str()),
                        n_tokens: s.tokens.len(),
                        alpha,
                        value_norm,
                        class: classes.get(&(layer, head)).cloned(),
                        window: run.model().config.layer_window(layer),
                        sink_mass: s.sink_mass.as_ref().and_then(|m| m.get(layer)?.get(head).copied()),
                        gate_mean: s.gate.as_ref().and_then(|(g, _)| g.get(layer)?.get(head).copied()),
                        gate_closed: s.gate.as_ref().and_then(|(_, g)| g.get(layer)?.get(head).copied()),
                    });
                }
            }
        }
    }
    Builder::new(&rows, m)
        .str("probe", |r| r.probe.to_string())
        .u32("layer", |r| r.layer)
        .u32("head", |r| r.head)
        .u32("key_pos", |r| r.key_pos)
        .str("token", |r| r.token.to_string())
        .u32("n_tokens", |r| r.n_tokens)
        .f64("alpha", |r| r.alpha)
        // Column mass over every query row, divided by T (α averages only over rows that can see k).
        .f64("mass_mean", |r| r.alpha * seeing(r.n_tokens, r.key_pos, r.window) as f64 / r.n_tokens.max(1) as f64)
        .opt_u32("window", |r| r.window)
        .opt_f64("sink_mass", |r| r.sink_mass)
        .opt_f64("gate_mean", |r| r.gate_mean)
        .opt_f64("gate_closed", |r| r.gate_closed)
        .bool("is_sink", |r| r.alpha > epsilon)
        .f64("epsilon", |_| epsilon)
        .opt_f64("value_norm", |r| r.value_norm)
        .str("head_class", |r| r.class.clone().unwrap_or_default())
        .build("head_sinks")
}

struct LayerRow<'a> {
    probe: &'a str,
    layer: usize,
    attention_pos0: Option<f64>,
    max_abs: f64,
    max_abs_pos: Option<usize>,
    max_abs_dim: Option<usize>,
    median_abs: f64,
    resid_norm_mean: Option<f64>,
    resid_norm_pos0: Option<f64>,
}

/// `layers`: per (probe, layer), attention on position 0 and the activation extremes.
fn layers(run: &Run, m: &Meta) -> Table {
    let mut rows = Vec::new();
    if let Some(c) = &run.capture {
        for l in &c.summary.layers {
            rows.push(LayerRow {
                probe: CAPTURE_PROBE,
                layer: l.layer,
                attention_pos0: l.mean_attention_pos0,
                max_abs: l.max_abs as f64,
                max_abs_pos: l.max_abs_pos,
                max_abs_dim: l.max_abs_dim,
                median_abs: l.median_abs as f64,
                resid_norm_mean: Some(l.resid_norm_mean_post),
                resid_norm_pos0: Some(l.resid_norm_pos0_post as f64),
            });
        }
    }
    if let Some(a) = &run.analysis {
        for p in &a.probes {
            for lm in &p.massive.layers {
                // None on a linear-attention layer (no heads attend there).
                let alpha0 = p
                    .alpha
                    .get(lm.layer)
                    .filter(|heads| !heads.is_empty())
                    .map(|heads| heads.iter().map(|h| h.first().copied().unwrap_or(0.0)).sum::<f64>() / heads.len() as f64);
                rows.push(LayerRow {
                    probe: &p.name,
                    layer: lm.layer,
                    attention_pos0: alpha0,
                    max_abs: lm.top.first().copied().unwrap_or(0.0) as f64,
                    max_abs_pos: None,
                    max_abs_dim: None,
                    median_abs: lm.median_abs as f64,
                    resid_norm_mean: None,
                    resid_norm_pos0: None,
                });
            }
        }
    }
    Builder::new(&rows, m)
        .str("probe", |r| r.probe.to_string())
        .u32("layer", |r| r.layer)
        .opt_f64("attention_pos0", |r| r.attention_pos0)
        .f64("max_abs", |r| r.max_abs)
        .opt_u32("max_abs_pos", |r| r.max_abs_pos)
        .opt_u32("max_abs_dim", |r| r.max_abs_dim)
        .f64("median_abs", |r| r.median_abs)
        .opt_f64("resid_norm_mean", |r| r.resid_norm_mean)
        .opt_f64("resid_norm_pos0", |r| r.resid_norm_pos0)
        .build("layers")
}

/// `massive`: every massive element (`metrics::massive::is_massive`).
fn massive(run: &Run, m: &Meta) -> Table {
    let mut rows: Vec<(String, MassiveElement)> = Vec::new();
    if let Some(c) = &run.capture {
        let top: Vec<_> = c.summary.layers.iter().map(|l| l.top.clone()).collect();
        let median: Vec<f32> = c.summary.layers.iter().map(|l| l.median_abs).collect();
        let pieces: Vec<String> = c.tokens.iter().map(|t| t.piece.clone()).collect();
        // capture.json keeps each layer's top-k, so its massive rows are those among the top-k.
        rows.extend(find_massive(&top, &top, &median, &pieces).elements.into_iter().map(|e| (CAPTURE_PROBE.to_string(), e)));
    }
    if let Some(a) = &run.analysis {
        for p in &a.probes {
            rows.extend(p.massive.elements.iter().map(|e| (p.name.clone(), e.clone())));
        }
    }
    Builder::new(&rows, m)
        .str("probe", |r| r.0.clone())
        .u32("layer", |r| r.1.layer)
        .u32("pos", |r| r.1.pos)
        .str("token", |r| r.1.token.clone())
        .u32("dim", |r| r.1.dim)
        .f64("value", |r| r.1.value as f64)
        .f64("ratio_to_median", |r| r.1.ratio_to_median as f64)
        .build("massive")
}

/// `resid_norms`: per (layer, position) of the captured text, ‖h‖ before the layer, after its
/// attention, and after its MLP.
fn resid_norms(run: &Run, m: &Meta) -> Option<Table> {
    let r = run.reductions.as_ref()?;
    let tokens = run.capture.as_ref().map(|c| c.tokens.as_slice())?;
    let (shape, pre) = r.get("resid_norm_pre", 2)?;
    let (_, mid) = r.get("resid_norm_mid", 2)?;
    let (_, post) = r.get("resid_norm_post", 2)?;
    let (n_layers, t) = (shape[0], shape[1]);
    if mid.len() != pre.len() || post.len() != pre.len() || t != tokens.len() {
        return None;
    }
    let rows: Vec<(usize, usize)> = (0..n_layers).flat_map(|l| (0..t).map(move |p| (l, p))).collect();
    let at = |r: &(usize, usize)| r.0 * t + r.1;
    Some(
        Builder::new(&rows, m)
            .str("probe", |_| CAPTURE_PROBE.to_string())
            .u32("layer", |r| r.0)
            .u32("pos", |r| r.1)
            .str("token", |r| tokens[r.1].piece.clone())
            .f64("norm_pre", |r| pre[at(r)] as f64)
            .f64("norm_mid", |r| mid[at(r)] as f64)
            .f64("norm_post", |r| post[at(r)] as f64)
            .build("resid_norms"),
    )
}

/// `ablation`: the causal sweep, one row per masked (layer, head or whole layer, key).
fn ablation(run: &Run, m: &Meta) -> Option<Table> {
    let a = run.analysis.as_ref()?.ablation.as_ref()?;
    Some(
        Builder::new(&a.results, m)
            .u32("layer", |r| r.layer)
            .opt_u32("head", |r| r.head)
            .str("scope", |r| if r.head.is_some() { "head".into() } else { "layer".into() })
            .u32("key_pos", |r| r.key_pos)
            .f64("delta_nll", |r| r.delta_nll)
            .f64("kl", |r| r.kl)
            .u32("n_tokens", |_| a.n_tokens)
            .build("ablation"),
    )
}

/// `stream_nll`: per (policy, step), the NLL of the next token and what the query could see.
fn stream_nll(s: &StreamReport, m: &Meta) -> Table {
    let rows: Vec<(usize, usize)> = s.outcomes.iter().enumerate().flat_map(|(o, out)| (0..out.nll.len()).map(move |step| (o, step))).collect();
    let o = |r: &(usize, usize)| &s.outcomes[r.0];
    Builder::new(&rows, m)
        .str("text", |_| s.text_source.clone())
        .str("policy", |r| o(r).label.clone())
        .str("kind", |r| o(r).policy.kind().name().to_owned())
        .u32("sinks", |r| o(r).policy.pinned())
        .u32("cache", |r| o(r).policy.cache)
        .str("positions", |r| format!("{:?}", o(r).policy.positions).to_lowercase())
        .u32("step", |r| r.1)
        // Step t predicts token t+1.
        .str("token", |r| s.tokens.get(r.1 + 1).map_or(String::new(), |t| t.piece.clone()))
        // Null where the policy did not score the step (recompute scores every K-th step).
        .opt_f64("nll", |r| Some(o(r).nll[r.1]).filter(|v| v.is_finite()))
        .u32("cache_len", |r| o(r).cache_len.get(r.1).copied().unwrap_or(0))
        .bool("evicted", |r| o(r).first_eviction_step.is_some_and(|e| r.1 >= e))
        // `stream --kl`'s divergence of this step from the exact cache (null without it).
        .opt_f64("kl_from_exact", |r| s.kl_from_exact.as_ref().filter(|_| s.outcomes.len() == 1).and_then(|k| k.get(r.1).copied()))
        .build("stream_nll")
}

/// `tokens`: the captured text token by token with each token's NLL given its prefix (null at
/// position 0, which has none).
fn capture_tokens(c: &CaptureReport, m: &Meta) -> Table {
    let per_token = c.nll.as_ref().map_or(&[][..], |n| &n.per_token[..]);
    Builder::new(&c.tokens, m)
        .str("text", |_| c.text_source.clone())
        .u32("pos", |t| t.pos)
        .u32("token_id", |t| t.id as usize)
        .str("piece", |t| t.piece.clone())
        .opt_f64("nll", |t| t.pos.checked_sub(1).and_then(|i| per_token.get(i).copied()))
        .build("tokens")
}

/// `recommend`: the sink-count sweep's evidence table, one row per policy.
fn recommend(s: &StreamReport, m: &Meta) -> Table {
    let empty = Vec::new();
    let rec = s.recommendation.as_ref();
    let rows = rec.map_or(&empty, |r| &r.table);
    let recommended = rec.and_then(|r| r.recommended_sinks);
    Builder::new(rows, m)
        .str("text", |_| s.text_source.clone())
        .u32("cache", |_| rec.map_or(0, |r| r.cache))
        .str("policy", |r| r.label.clone())
        .opt_u32("sinks", |r| r.sinks)
        .f64("ppl", |r| r.ppl)
        .opt_f64("ppl_after_eviction", |r| r.ppl_after_eviction)
        .opt_f64("ppl_after_eviction_ci_low", |r| r.ppl_after_eviction_ci.map(|c| c[0]))
        .opt_f64("ppl_after_eviction_ci_high", |r| r.ppl_after_eviction_ci.map(|c| c[1]))
        .opt_u32("scored_steps", |r| r.scored_steps)
        .opt_f64("ratio_to_best", |r| r.ratio_to_best)
        .opt_u32("cliff_step", |r| r.cliff_step)
        .bool("recommended", |r| r.sinks.is_some() && r.sinks == recommended)
        .f64("delta", |_| rec.map_or(0.0, |r| r.delta))
        .u32("tokens", |_| rec.map_or(0, |r| r.tokens))
        .build("recommend")
}

/// `survey`: one row per model × sweep (text, budget), the model's diagnosis repeated on each.
pub fn survey_table(s: &Survey) -> Table {
    let rows: Vec<(&SurveyRow, Option<&SurveySweep>)> = s
        .rows
        .iter()
        .flat_map(|r| {
            let sweeps: Vec<Option<&SurveySweep>> = if r.sweeps.is_empty() { vec![None] } else { r.sweeps.iter().map(Some).collect() };
            sweeps.into_iter().map(move |w| (r, w))
        })
        .collect();
    Builder::bare(&rows)
        .str("model", |r| r.0.model.clone())
        .str("model_sha256", |r| r.0.sha256.clone().unwrap_or_default())
        .str("sinkscope_version", |_| s.sinkscope_version.clone())
        .str("family", |r| r.0.family.clone())
        .u32("n_params", |r| r.0.n_params)
        .u32("n_layers", |r| r.0.n_layers)
        .str("windowed_layers", |r| r.0.windowed_layers.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(","))
        .bool("learned_sinks", |r| r.0.learned_sinks)
        .f64("sink_0", |r| r.0.sink_0)
        .f64("f_attn", |r| r.0.f_attn)
        .str("sink_positions", |r| r.0.sink_positions_beyond_0.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(","))
        .f64("max_activation", |r| r.0.max_activation)
        .f64("max_to_median", |r| r.0.max_to_median)
        .opt_u32("first_massive_layer", |r| r.0.first_massive_layer)
        .str("text", |r| r.1.map_or(String::new(), |w| w.text.clone()))
        .opt_u32("cache", |r| r.1.map(|w| w.cache))
        .opt_u32("tokens", |r| r.1.map(|w| w.tokens))
        .opt_f64("window_ppl", |r| r.1.and_then(|w| w.window_ppl))
        .opt_f64("best_ppl", |r| r.1.and_then(|w| w.best_ppl))
        .opt_f64("window_ratio", |r| r.1.and_then(|w| w.window_ratio))
        .opt_u32("recommended_sinks", |r| r.1.and_then(|w| w.recommended_sinks))
        .opt_f64("streaming_heads", |r| r.1.and_then(|w| w.streaming_heads))
        .build("survey")
}
