//! The findings of a run, as typed values built once: [`AnalysisFindings`] from an analysis (sink
//! positions, Sink_k^ε, F-Attn and its split by layer kind, learned sinks, head classes, massive
//! activations, the strongest causal dependencies) and [`CaptureFindings`] from a capture. The
//! Markdown report, the dashboard's Overview and the CLI's summary format them; none counts,
//! averages or ranks again.

use super::heads::HeadClass;
use super::sinks::{learned_sinks, LearnedSinks};
use super::AnalysisReport;
use crate::capture::ablation::AblationResult;
use crate::capture::summary::CaptureSummary;
use crate::model::info::ModelInfo;

/// What a diagnosis found.
#[derive(Debug, Clone)]
pub struct AnalysisFindings {
    pub probes: usize,
    /// Probes of the set left out for this model, each as "name (why)".
    pub skipped_probes: Vec<String>,
    pub epsilon: f64,
    /// The probes' lengths in tokens, each once, shortest first.
    pub probe_lengths: Vec<usize>,
    pub sink_positions: Vec<usize>,
    /// Sink_k^ε in percent, by k.
    pub sink_scores: Vec<(usize, f64)>,
    pub f_attn: f64,
    /// Mean α_0 on global and on windowed layers, for models with both kinds.
    pub alpha0_by_kind: Option<ByLayerKind>,
    pub learned_sinks: Option<LearnedSinks>,
    pub classes: ClassCounts,
    pub massive: Massive,
    /// The causal sweep's strongest effects, when the analysis ran one.
    pub causal: Option<Causal>,
}

/// The strongest effects of hiding early keys (the causal sweep).
#[derive(Debug, Clone)]
pub struct Causal {
    /// The hidden key positions.
    pub keys: Vec<usize>,
    /// Tokens the loss was measured over.
    pub tokens: usize,
    pub wall_seconds: f64,
    /// Single heads whose hidden key changed the loss most, largest first.
    pub top_heads: Vec<AblationResult>,
    /// The whole layer whose hidden key changed the loss most.
    pub top_layer: Option<AblationResult>,
}

/// What a capture's summary shows about the first token and the residual stream.
#[derive(Debug, Clone)]
pub struct CaptureFindings {
    /// Mean α_0 on global and on windowed layers, for models with both kinds.
    pub alpha0_by_kind: Option<ByLayerKind>,
    pub learned_sinks: Option<LearnedSinks>,
    /// Mean attention on position 0 over all layers and heads, and the layer paying the most
    /// (layer, its mean).
    pub first_token: Option<(f64, usize, f64)>,
    /// The layer with the largest |h|.
    pub largest_activation: Option<Largest>,
}

/// The largest residual activation of a capture.
#[derive(Debug, Clone, Copy)]
pub struct Largest {
    pub layer: usize,
    pub max_abs: f32,
    pub pos: Option<usize>,
    pub dim: Option<usize>,
    /// That layer's median |h|.
    pub median_abs: f32,
}

impl CaptureFindings {
    pub fn of(model: &ModelInfo, c: &CaptureSummary) -> CaptureFindings {
        let ls = &c.layers;
        let alpha0 = c.heads.iter().filter_map(|h| Some((h.layer, *h.alpha.first()?)));
        // Over the layers that attend (a hybrid's linear layers have no α_0).
        let attending: Vec<(usize, f64)> = ls.iter().filter_map(|l| Some((l.layer, l.mean_attention_pos0?))).collect();
        let first_token = attending.iter().max_by(|a, b| a.1.total_cmp(&b.1)).map(|&(layer, peak)| {
            let mean = attending.iter().map(|a| a.1).sum::<f64>() / attending.len() as f64;
            (mean, layer, peak)
        });
        CaptureFindings {
            alpha0_by_kind: ByLayerKind::of(model, alpha0),
            learned_sinks: learned_sinks(
                c.heads.iter().filter_map(|h| Some((h.layer, h.head, h.sink_mass?, h.alpha.first().copied().unwrap_or(0.0)))),
            ),
            first_token,
            largest_activation: ls.iter().max_by(|a, b| a.max_abs.total_cmp(&b.max_abs)).map(|t| Largest {
                layer: t.layer,
                max_abs: t.max_abs,
                pos: t.max_abs_pos,
                dim: t.max_abs_dim,
                median_abs: t.median_abs,
            }),
        }
    }
}

/// Means of a per-head value over the heads of global layers and of windowed ones.
#[derive(Debug, Clone)]
pub struct ByLayerKind {
    /// The windowed layers' sliding windows, smallest first.
    pub windows: Vec<usize>,
    pub windowed_layers: usize,
    pub n_layers: usize,
    /// (mean, heads) per kind; `None` for a kind without heads.
    pub global: Option<(f64, usize)>,
    pub windowed: Option<(f64, usize)>,
}

impl ByLayerKind {
    /// The split of (layer, value) per head, for a model with windowed layers.
    pub fn of(model: &ModelInfo, values: impl Iterator<Item = (usize, f64)>) -> Option<ByLayerKind> {
        let windows = Some(model.config.windows()).filter(|w| !w.is_empty())?;
        let [global, windowed] = model.mean_by_layer_kind(values);
        Some(ByLayerKind { windows, windowed_layers: model.config.windowed_layers().len(), n_layers: model.config.n_layers, global, windowed })
    }
}

/// How many heads fall in each class, in [`HeadClass::ALL`] order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassCounts(pub [(HeadClass, usize); 4]);

impl ClassCounts {
    pub fn of(classes: impl Iterator<Item = HeadClass>) -> ClassCounts {
        let mut counts = HeadClass::ALL.map(|c| (c, 0));
        for class in classes {
            if let Some(slot) = counts.iter_mut().find(|(c, _)| *c == class) {
                slot.1 += 1;
            }
        }
        ClassCounts(counts)
    }

    pub fn total(&self) -> usize {
        self.0.iter().map(|(_, n)| n).sum()
    }

    /// "sink 12, previous_token 3, broad 5, content 20".
    pub fn describe(&self, separator: &str) -> String {
        self.0.iter().map(|(c, n)| format!("{c} {n}")).collect::<Vec<_>>().join(separator)
    }
}

/// Massive activations over the probes.
#[derive(Debug, Clone)]
pub struct Massive {
    pub first_layer: Option<usize>,
    /// Most frequent first.
    pub dims: Vec<usize>,
    pub positions: Vec<usize>,
}

impl AnalysisFindings {
    pub fn of(a: &AnalysisReport) -> AnalysisFindings {
        let mut lengths: Vec<usize> = a.probes.iter().map(|p| p.n_tokens).collect();
        lengths.sort_unstable();
        lengths.dedup();
        let alpha0 = || a.heads.iter().filter_map(|h| Some((h.layer, *h.alpha.first()?)));
        AnalysisFindings {
            probes: a.probes.len(),
            skipped_probes: a.skipped_probes.iter().map(|p| format!("{} ({})", p.name, p.why)).collect(),
            epsilon: a.settings.epsilon,
            probe_lengths: lengths,
            sink_positions: a.sink_positions.clone(),
            sink_scores: a.sink_score.iter().map(|(&k, &v)| (k, v)).collect(),
            f_attn: a.f_attn,
            alpha0_by_kind: ByLayerKind::of(&a.model, alpha0()),
            learned_sinks: learned_sinks(
                a.heads.iter().filter_map(|h| Some((h.layer, h.head, h.sink_mass?, h.alpha.first().copied().unwrap_or(0.0)))),
            ),
            classes: ClassCounts::of(a.heads.iter().map(|h| h.class)),
            massive: Massive { first_layer: a.massive.first_layer, dims: a.massive.dims.clone(), positions: a.massive.positions.clone() },
            causal: a.ablation.as_ref().map(|ab| Causal {
                keys: ab.keys.clone(),
                tokens: ab.n_tokens,
                wall_seconds: ab.wall_seconds,
                top_heads: ab.top_heads.clone(),
                // The first of equal layers, as a stable sort by descending ΔNLL gives it.
                top_layer: ab.results.iter().filter(|r| r.head.is_none()).min_by(|a, b| b.delta_nll.total_cmp(&a.delta_nll)).cloned(),
            }),
        }
    }
}

/// Every head as (layer, head, α_0) from an α table ([layer][head][k]), the strongest sink first,
/// ties in (layer, head) order: the one ranking the dashboard, its opening head and the figures'
/// picks share. A head without α_0 counts as 0.
pub fn heads_by_alpha0(alphas: &[Vec<Vec<f64>>]) -> Vec<(usize, usize, f64)> {
    let mut heads: Vec<(usize, usize, f64)> =
        alphas.iter().enumerate().flat_map(|(l, hs)| hs.iter().enumerate().map(move |(h, a)| (l, h, a.first().copied().unwrap_or(0.0)))).collect();
    heads.sort_by(|a, b| b.2.total_cmp(&a.2).then((a.0, a.1).cmp(&(b.0, b.1))));
    heads
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_counts_cover_every_class_in_order() {
        let counts = ClassCounts::of([HeadClass::Content, HeadClass::Sink, HeadClass::Content].into_iter());
        assert_eq!(counts.describe(", "), "sink 1, previous_token 0, broad 0, content 2");
        assert_eq!(counts.total(), 3);
    }
}
