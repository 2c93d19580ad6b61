//! The diagnosis of an analysis, as one typed value built once from its report: the figures the
//! Markdown report, the dashboard's Overview and the CLI's summary all state (sink positions,
//! Sink_k^ε, F-Attn and its split by layer kind, learned sinks, head classes, massive activations,
//! the strongest causal dependency). Renderers format it; none counts or averages again.

use super::heads::HeadClass;
use super::sinks::{learned_sinks, LearnedSinks};
use super::AnalysisReport;
use crate::capture::ablation::AblationResult;
use crate::model::info::ModelInfo;

/// What a diagnosis found.
#[derive(Debug, Clone)]
pub struct Diagnosis {
    pub probes: usize,
    pub epsilon: f64,
    /// Shortest and longest probe, in tokens.
    pub probe_tokens: (usize, usize),
    pub sink_positions: Vec<usize>,
    /// Sink_k^ε in percent, by k.
    pub sink_scores: Vec<(usize, f64)>,
    pub f_attn: f64,
    /// Mean α_0 on global and on windowed layers, for models with both kinds.
    pub alpha0_by_kind: Option<ByLayerKind>,
    pub learned_sinks: Option<LearnedSinks>,
    pub classes: ClassCounts,
    pub massive: Massive,
    /// The single head whose hidden key changed the loss most, and over how many tokens.
    pub causal: Option<(AblationResult, usize)>,
}

/// Means of a per-head value over the heads of global layers and of windowed ones.
#[derive(Debug, Clone, Copy)]
pub struct ByLayerKind {
    pub window: usize,
    pub windowed_layers: usize,
    pub n_layers: usize,
    /// (mean, heads) per kind; `None` for a kind without heads.
    pub global: Option<(f64, usize)>,
    pub windowed: Option<(f64, usize)>,
}

impl ByLayerKind {
    /// The split of (layer, value) per head, for a model with windowed layers.
    pub fn of(model: &ModelInfo, values: impl Iterator<Item = (usize, f64)>) -> Option<ByLayerKind> {
        let window = model.config.window().filter(|_| !model.config.windowed_layers().is_empty())?;
        let [global, windowed] = model.mean_by_layer_kind(values);
        Some(ByLayerKind { window, windowed_layers: model.config.windowed_layers().len(), n_layers: model.config.n_layers, global, windowed })
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

impl Diagnosis {
    pub fn of(a: &AnalysisReport) -> Diagnosis {
        let tokens = a.probes.iter().map(|p| p.n_tokens);
        let alpha0 = || a.heads.iter().filter_map(|h| Some((h.layer, *h.alpha.first()?)));
        Diagnosis {
            probes: a.probes.len(),
            epsilon: a.settings.epsilon,
            probe_tokens: (tokens.clone().min().unwrap_or(0), tokens.max().unwrap_or(0)),
            sink_positions: a.sink_positions.clone(),
            sink_scores: a.sink_score.iter().map(|(&k, &v)| (k, v)).collect(),
            f_attn: a.f_attn,
            alpha0_by_kind: ByLayerKind::of(&a.model, alpha0()),
            learned_sinks: learned_sinks(
                a.heads.iter().filter_map(|h| Some((h.layer, h.head, h.sink_mass?, h.alpha.first().copied().unwrap_or(0.0)))),
            ),
            classes: ClassCounts::of(a.heads.iter().map(|h| h.class)),
            massive: Massive { first_layer: a.massive.first_layer, dims: a.massive.dims.clone(), positions: a.massive.positions.clone() },
            causal: a.ablation.as_ref().and_then(|ab| Some((ab.top_heads.first()?.clone(), ab.n_tokens))),
        }
    }
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
