//! View-ready numbers derived once from a [`Run`] when the dashboard opens: the α table, head
//! classes, per-position attention mass, the text's own sink positions, per-layer magnitudes and
//! the streaming curves' raw NLL. Pure (no terminal, no model); the views only read it.

use crate::analysis::findings::AnalysisFindings;
use crate::analysis::heads::{HeadClass, HeadEvidence};
use crate::analysis::sinks::{discover_sink_positions, SinkPosition};
use crate::metrics::massive::is_massive;
use crate::report::run::Run;

/// ε used for the text's own sink positions when the run has no analysis settings.
pub const DEFAULT_EPSILON: f64 = 0.3;
/// A sink position needs this share of the text's queries at or after it (as in `analyze`).
const MIN_QUERY_SHARE: f64 = 0.25;

/// Column sums of every head's attention pattern, [layer, head, key position].
#[derive(Debug, Clone)]
pub struct ColMass {
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_tokens: usize,
    pub values: Vec<f32>,
    /// Where the numbers came from, for titles.
    pub source: &'static str,
    /// Per layer, whether it attends (a hybrid's linear-attention layers hold NaN or zeros).
    pub attends: Vec<bool>,
}

impl ColMass {
    /// Whether layer `layer` attends (has heads whose mass means anything).
    pub fn attends(&self, layer: usize) -> bool {
        self.attends.get(layer).copied().unwrap_or(true)
    }

    pub fn head(&self, layer: usize, head: usize) -> &[f32] {
        let at = (layer * self.n_heads + head) * self.n_tokens;
        &self.values[at..at + self.n_tokens]
    }
}

/// One layer's residual-stream magnitudes (Sun et al.'s massive-activation criterion).
#[derive(Debug, Clone, PartialEq)]
pub struct LayerRow {
    pub layer: usize,
    pub max_abs: f32,
    pub max_pos: Option<usize>,
    pub max_dim: Option<usize>,
    pub median_abs: f32,
    /// Largest elements kept by the capture: (position, dim, value).
    pub top: Vec<(usize, usize, f32)>,
    /// Dims whose max |h| in this layer is massive (`metrics::massive::is_massive`).
    pub massive_dims: Vec<usize>,
}

impl LayerRow {
    pub fn is_massive(&self, value: f32) -> bool {
        is_massive(value, self.median_abs)
    }

    /// The kept elements that are massive.
    pub fn massive(&self) -> impl Iterator<Item = &(usize, usize, f32)> {
        self.top.iter().filter(|(_, _, v)| self.is_massive(*v))
    }
}

/// Everything the views need beyond the run's own records.
#[derive(Debug, Clone)]
pub struct Data {
    pub n_layers: usize,
    pub n_heads: usize,
    /// α_k per [layer][head] for k < K.
    pub alpha: Vec<Vec<Vec<f64>>>,
    pub alpha_k: usize,
    /// Which report the α table comes from, for titles.
    pub alpha_source: String,
    pub classes: Option<Vec<Vec<HeadClass>>>,
    pub evidence: Option<Vec<Vec<HeadEvidence>>>,
    /// The strongest single-head ablation per head: (key, ΔNLL, KL).
    pub ablation: Vec<Vec<Option<(usize, f64, f64)>>>,
    /// The text's tokens as they should read on screen.
    pub display: Vec<String>,
    /// Whether the vocabulary is GPT-2-style byte-level (pieces decoded for display).
    pub byte_level: bool,
    pub col_mass: Option<ColMass>,
    /// Sink positions of the displayed text (from its own attention), strongest first.
    pub text_sinks: Vec<SinkPosition>,
    pub is_sink: Vec<bool>,
    /// The tokens as the Tokens view flows them: sink positions in brackets, so they stand out
    /// in plain text too.
    pub flow: Vec<String>,
    pub epsilon: f64,
    pub layers: Vec<LayerRow>,
    /// The analysis's findings, built once when the run is opened (the Overview renders them).
    pub findings: Option<AnalysisFindings>,
}

pub use crate::report::tokens::{display_piece, is_byte_level};

/// Whether a token ends a line of the text (a newline anywhere in it breaks the flow after it).
pub fn ends_line(display: &str) -> bool {
    display.contains('↵')
}

impl Data {
    pub fn new(run: &Run) -> Data {
        let model = run.model();
        let (n_layers, n_heads) = (model.config.n_layers, model.config.n_heads);
        let (alpha, alpha_source) = alpha_table(run, n_layers, n_heads);
        let alpha_k = alpha.iter().flatten().map(Vec::len).max().unwrap_or(0);
        let mut classes = None;
        let mut evidence = None;
        let mut ablation = vec![vec![None; n_heads]; n_layers];
        if let Some(a) = &run.analysis {
            let mut c = vec![vec![HeadClass::Content; n_heads]; n_layers];
            let mut e = vec![vec![None; n_heads]; n_layers];
            for h in &a.heads {
                if h.layer < n_layers && h.head < n_heads {
                    c[h.layer][h.head] = h.class;
                    e[h.layer][h.head] = Some(h.evidence.clone());
                }
            }
            classes = Some(c);
            // Evidence is complete only when every head was reported.
            evidence = e.into_iter().map(|row| row.into_iter().collect::<Option<Vec<_>>>()).collect::<Option<Vec<_>>>();
            if let Some(ab) = &a.ablation {
                for r in &ab.results {
                    let Some(h) = r.head else { continue };
                    if r.layer < n_layers && h < n_heads {
                        let slot = &mut ablation[r.layer][h];
                        if slot.is_none_or(|(_, d, _)| r.delta_nll > d) {
                            *slot = Some((r.key_pos, r.delta_nll, r.kl));
                        }
                    }
                }
            }
        }
        let tokens = run.tokens().unwrap_or(&[]);
        let pieces: Vec<&str> = tokens.iter().map(|t| t.piece.as_str()).collect();
        let byte_level = is_byte_level(&pieces);
        let display: Vec<String> = pieces.iter().map(|p| display_piece(p, byte_level)).collect();
        let col_mass = col_mass(run, tokens.len());
        let epsilon = run.analysis.as_ref().map_or(DEFAULT_EPSILON, |a| a.settings.epsilon);
        let text_sinks = match &col_mass {
            Some(cm) => {
                // A linear-attention layer has no heads (as in the analysis).
                let heads = |l: usize| if cm.attends(l) { cm.n_heads } else { 0 };
                let nested: Vec<Vec<Vec<f64>>> =
                    (0..cm.n_layers).map(|l| (0..heads(l)).map(|h| cm.head(l, h).iter().map(|&v| v as f64).collect()).collect()).collect();
                let t = cm.n_tokens;
                let min_queries = ((t as f64 * MIN_QUERY_SHARE).ceil() as usize).max(2);
                let pieces: Vec<String> = tokens.iter().map(|t| t.piece.clone()).collect();
                discover_sink_positions(&nested, t, &run.model().config.layer_windows(), epsilon, min_queries, &pieces)
            }
            // Without per-position mass, the analysis of the same text (its first probe) still knows.
            None => run
                .analysis
                .as_ref()
                .and_then(|a| a.probes.first())
                .filter(|p| p.tokens.len() == tokens.len() && p.tokens.iter().zip(tokens).all(|(a, b)| a.id == b.id))
                .map(|p| p.sink_positions.clone())
                .unwrap_or_default(),
        };
        let mut is_sink = vec![false; tokens.len()];
        for s in &text_sinks {
            if let Some(slot) = is_sink.get_mut(s.pos) {
                *slot = true;
            }
        }
        let flow = display.iter().zip(&is_sink).map(|(d, &s)| if s { format!("[{d}]") } else { d.clone() }).collect();
        let layers = layer_rows(run);
        Data {
            n_layers,
            n_heads,
            alpha,
            alpha_k,
            alpha_source,
            classes,
            evidence,
            ablation,
            display,
            byte_level,
            col_mass,
            text_sinks,
            is_sink,
            flow,
            epsilon,
            layers,
            findings: run.analysis.as_ref().map(AnalysisFindings::of),
        }
    }

    pub fn alpha(&self, layer: usize, head: usize, k: usize) -> Option<f64> {
        self.alpha.get(layer)?.get(head)?.get(k).copied()
    }

    pub fn class(&self, layer: usize, head: usize) -> Option<HeadClass> {
        self.classes.as_ref().and_then(|c| c.get(layer)?.get(head).copied())
    }
}

/// α per [layer][head][k]: the analysis's mean over probes (what its classes and Sink_k^ε use),
/// else the capture's own text.
fn alpha_table(run: &Run, n_layers: usize, n_heads: usize) -> (Vec<Vec<Vec<f64>>>, String) {
    if let (Some(table), Some(a)) = (run.analysis_alphas(), &run.analysis) {
        let n = a.probes.len();
        return (table, format!("mean over {n} probe{} (report.json)", if n == 1 { "" } else { "s" }));
    }
    if let (Some(table), Some(c)) = (run.capture_alphas(), &run.capture) {
        return (table, format!("{} (capture.json)", c.text_source));
    }
    (vec![vec![Vec::new(); n_heads]; n_layers], "none".into())
}

/// Per-position column mass: the capture's reductions, else the heatmaps when they are exact
/// (one bin per token, so a column sum is the mass).
fn col_mass(run: &Run, n_tokens: usize) -> Option<ColMass> {
    let cfg = &run.model().config;
    let attends = (0..cfg.n_layers).map(|l| !cfg.is_linear(l)).collect::<Vec<bool>>();
    if let Some((shape, values)) = run.reductions.as_ref().and_then(|r| r.get("attn_col_mass", 3)) {
        if shape[2] == n_tokens && values.len() == shape.iter().product::<usize>() {
            let (n_layers, n_heads, values) = (shape[0], shape[1], values.to_vec());
            return Some(ColMass { n_layers, n_heads, n_tokens, values, source: "reductions.safetensors", attends });
        }
    }
    let maps = run.heatmaps.as_ref().filter(|m| m.exact() && m.n_tokens == n_tokens)?;
    let t = maps.n_tokens;
    let mut values = vec![0f32; maps.n_layers * maps.n_heads * t];
    for l in 0..maps.n_layers {
        for h in 0..maps.n_heads {
            let grid = maps.head(l, h);
            let out = &mut values[(l * maps.n_heads + h) * t..][..t];
            for q in 0..t {
                for (k, slot) in out.iter_mut().enumerate().take(q + 1) {
                    *slot += grid[q * t + k];
                }
            }
        }
    }
    Some(ColMass { n_layers: maps.n_layers, n_heads: maps.n_heads, n_tokens: t, values, source: "heatmaps.safetensors", attends })
}

fn layer_rows(run: &Run) -> Vec<LayerRow> {
    let by_dim = run.reductions.as_ref().and_then(|r| r.get("max_abs_by_dim", 2));
    let massive_dims = |layer: usize, median: f32| -> Vec<usize> {
        let Some((shape, values)) = by_dim else { return Vec::new() };
        if layer >= shape[0] {
            return Vec::new();
        }
        let row = &values[layer * shape[1]..(layer + 1) * shape[1]];
        let mut dims: Vec<usize> = (0..shape[1]).filter(|&d| is_massive(row[d], median)).collect();
        dims.sort_by(|&a, &b| row[b].abs().total_cmp(&row[a].abs()));
        dims
    };
    if let Some(c) = &run.capture {
        return c
            .summary
            .layers
            .iter()
            .map(|s| {
                let top: Vec<(usize, usize, f32)> = s.top.iter().map(|a| (a.pos, a.dim, a.value)).collect();
                let mut row = LayerRow {
                    layer: s.layer,
                    max_abs: s.max_abs,
                    max_pos: s.max_abs_pos,
                    max_dim: s.max_abs_dim,
                    median_abs: s.median_abs,
                    top,
                    massive_dims: massive_dims(s.layer, s.median_abs),
                };
                if by_dim.is_none() {
                    let mut dims: Vec<usize> = row.massive().map(|&(_, d, _)| d).collect();
                    dims.dedup();
                    row.massive_dims = dims;
                }
                row
            })
            .collect();
    }
    // An analysis-only run: its first probe's per-layer magnitudes.
    let Some(p) = run.analysis.as_ref().and_then(|a| a.probes.first()) else { return Vec::new() };
    p.massive
        .layers
        .iter()
        .map(|m| {
            let top: Vec<(usize, usize, f32)> = p.massive.elements.iter().filter(|e| e.layer == m.layer).map(|e| (e.pos, e.dim, e.value)).collect();
            let mut dims: Vec<usize> = top.iter().map(|&(_, d, _)| d).collect();
            dims.dedup();
            let first = top.first().copied();
            LayerRow {
                layer: m.layer,
                max_abs: m.top.first().copied().unwrap_or(0.0),
                max_pos: first.map(|t| t.0),
                max_dim: first.map(|t| t.1),
                median_abs: m.median_abs,
                top,
                massive_dims: dims,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newline_pieces_end_a_line() {
        assert!(ends_line(&display_piece("ĊĠĠ", true)));
        assert!(!ends_line(&display_piece("Ġthe", true)));
    }

    #[test]
    fn massive_needs_both_bars() {
        let row = LayerRow {
            layer: 0,
            max_abs: 500.0,
            max_pos: Some(0),
            max_dim: Some(1),
            median_abs: 0.1,
            top: vec![(0, 1, 500.0), (3, 2, 90.0)],
            massive_dims: vec![],
        };
        assert_eq!(row.massive().count(), 1);
        let row = LayerRow { median_abs: 1.0, ..row };
        assert_eq!(row.massive().count(), 0);
    }
}
