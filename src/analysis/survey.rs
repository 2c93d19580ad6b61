//! The survey's comparison across models: one row per model from its probe-set diagnosis and its
//! sink-count sweeps — family, size, windowed layers, learned sinks, Sink_0^ε, F-Attn, sink
//! positions beyond 0, the largest activation and its ratio to the median, the first massive layer,
//! α_0 by layer, and per text and budget the window's post-eviction perplexity against the best,
//! the recommended S and the share of KV heads a streaming cache would barely touch.

use serde::{Deserialize, Serialize};

use super::census::Census;
use super::AnalysisReport;
use crate::kv::recommend::Recommendation;

/// One sink-count sweep of a model (one text, one budget).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SurveySweep {
    pub text: String,
    pub cache: usize,
    pub tokens: usize,
    /// Post-eviction perplexity of the plain window (S = 0) and of the best S.
    pub window_ppl: Option<f64>,
    pub best_ppl: Option<f64>,
    /// window / best: how much evicting the first tokens costs.
    pub window_ratio: Option<f64>,
    pub recommended_sinks: Option<usize>,
    /// Percent of KV heads that are streaming heads at this budget (see [`StreamingHeads`]);
    /// `None` in surveys from before it was measured.
    #[serde(default)]
    pub streaming_heads: Option<f64>,
}

/// KV heads that lose almost nothing when they keep only S sinks and the W − S most recent keys
/// (DuoAttention's streaming heads), measured as the attention their query heads pay outside
/// those keys on a text: at most [`StreamingHeads::THRESHOLD`] of it, averaged over the rows
/// that have such keys (the largest among the query heads sharing the KV head).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamingHeads {
    pub sha256: String,
    pub text: String,
    /// Tokens asked for (`--tokens`) and measured on (fewer when the text or context is shorter).
    #[serde(default)]
    pub requested_tokens: usize,
    pub tokens: usize,
    pub sinks: usize,
    pub recent: usize,
    pub threshold: f64,
    /// [layer][kv head] mean attention outside the S + R keys.
    pub outside: Vec<Vec<f64>>,
    /// Percent of KV heads with `outside` ≤ threshold.
    pub share: f64,
}

impl StreamingHeads {
    /// Attention mass outside the kept keys below which a KV head counts as a streaming head.
    pub const THRESHOLD: f64 = 0.05;
    /// Sinks a streaming head keeps in the survey's measurement (StreamingLLM's four).
    pub const SINKS: usize = 4;

    /// (sinks, recent keys) a streaming head keeps at budget `cache`: [`Self::SINKS`] (at most
    /// half the budget) and the rest of the budget.
    pub fn keys_for(cache: usize) -> (usize, usize) {
        let sinks = Self::SINKS.min(cache / 2);
        (sinks, cache - sinks)
    }

    pub fn new(
        sha256: &str,
        text: &str,
        (requested_tokens, tokens): (usize, usize),
        (sinks, recent): (usize, usize),
        outside: Vec<Vec<f64>>,
    ) -> StreamingHeads {
        let all = outside.iter().map(Vec::len).sum::<usize>().max(1);
        let streaming = outside.iter().flatten().filter(|&&m| m <= Self::THRESHOLD).count();
        let share = 100.0 * streaming as f64 / all as f64;
        StreamingHeads {
            sha256: sha256.to_string(),
            text: text.to_string(),
            requested_tokens,
            tokens,
            sinks,
            recent,
            threshold: Self::THRESHOLD,
            outside,
            share,
        }
    }
}

impl SurveySweep {
    pub fn of(text: &str, r: &Recommendation, streaming: Option<&StreamingHeads>) -> SurveySweep {
        let sink_rows = || r.table.iter().filter(|row| row.sinks.is_some());
        let window_ppl = sink_rows().find(|row| row.sinks == Some(0)).and_then(|row| row.ppl_after_eviction);
        let best_ppl = sink_rows().filter_map(|row| row.ppl_after_eviction).min_by(f64::total_cmp);
        SurveySweep {
            text: text.to_string(),
            cache: r.cache,
            tokens: r.tokens,
            window_ppl,
            best_ppl,
            window_ratio: window_ppl.zip(best_ppl).map(|(w, b)| w / b),
            recommended_sinks: r.recommended_sinks,
            streaming_heads: streaming.map(|h| h.share),
        }
    }
}

/// One model's row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SurveyRow {
    pub model: String,
    /// The model's run directory, relative to the survey's (its report.json; its sweeps below it).
    #[serde(default)]
    pub run_dir: String,
    pub source: String,
    pub sha256: Option<String>,
    pub family: String,
    pub n_params: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    /// Layers attending through a sliding window of the model's own (empty: all global).
    pub windowed_layers: Vec<usize>,
    /// Their sliding windows, smallest first (surveys from before it hold one `window`).
    #[serde(default, alias = "window", deserialize_with = "one_or_many")]
    pub windows: Vec<usize>,
    pub learned_sinks: bool,
    /// Sink_0^ε in percent over every (probe, layer, head).
    #[serde(serialize_with = "crate::io::serde_nan::nan_as_null", deserialize_with = "crate::io::serde_nan::nan_if_null")]
    pub sink_0: f64,
    #[serde(serialize_with = "crate::io::serde_nan::nan_as_null", deserialize_with = "crate::io::serde_nan::nan_if_null")]
    pub f_attn: f64,
    /// Sink positions found other than 0.
    pub sink_positions_beyond_0: Vec<usize>,
    /// The largest |h| in any layer output of any probe, and its ratio to that layer's median.
    pub max_activation: f64,
    /// Infinite when that median is 0 (written as null, read back as infinite).
    #[serde(serialize_with = "crate::io::serde_nan::nan_as_null", deserialize_with = "crate::io::serde_nan::inf_if_null")]
    pub max_to_median: f64,
    pub first_massive_layer: Option<usize>,
    /// Mean α_0 over heads, per layer (NaN, `null` in the JSON, on a hybrid's linear-attention
    /// layer, which has no heads).
    #[serde(serialize_with = "crate::io::serde_nan::nans_as_null", deserialize_with = "crate::io::serde_nan::nans_if_null")]
    pub alpha0_by_layer: Vec<f64>,
    pub sweeps: Vec<SurveySweep>,
    /// The model's census row (`None` in surveys from before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub census: Option<Census>,
}

impl SurveyRow {
    pub fn new(name: &str, run_dir: &str, a: &AnalysisReport, sweeps: Vec<SurveySweep>) -> SurveyRow {
        let m = &a.model;
        let sink_0 = a.sink_score.get(&0).copied().unwrap_or(0.0);
        let (mut max_activation, mut max_to_median) = (0.0f64, 0.0f64);
        for r in a.probes.iter().flat_map(|p| &p.quant_risk) {
            if r.max_abs as f64 > max_activation {
                max_activation = r.max_abs as f64;
                max_to_median = if r.median_abs > 0.0 { r.max_abs as f64 / r.median_abs as f64 } else { f64::INFINITY };
            }
        }
        let mut alpha0_by_layer = vec![(0.0, 0usize); m.config.n_layers];
        for h in &a.heads {
            if let (Some(slot), Some(&a0)) = (alpha0_by_layer.get_mut(h.layer), h.alpha.first()) {
                slot.0 += a0;
                slot.1 += 1;
            }
        }
        SurveyRow {
            model: name.to_string(),
            run_dir: run_dir.to_string(),
            source: m.source.clone(),
            sha256: m.sha256.clone(),
            family: m.architecture.clone(),
            n_params: m.n_params,
            n_layers: m.config.n_layers,
            n_heads: m.config.n_heads,
            windowed_layers: m.config.windowed_layers(),
            windows: m.config.windows(),
            learned_sinks: m.config.arch.learned_sinks,
            sink_0,
            f_attn: a.f_attn,
            sink_positions_beyond_0: a.sink_positions.iter().copied().filter(|&p| p > 0).collect(),
            max_activation,
            max_to_median,
            first_massive_layer: a.massive.first_layer,
            alpha0_by_layer: alpha0_by_layer.into_iter().map(|(s, n)| if n == 0 { f64::NAN } else { s / n as f64 }).collect(),
            sweeps,
            census: Some(Census::of(a)),
        }
    }

    /// The largest window/best ratio over the model's sweeps (how badly eviction can hurt it).
    pub fn worst_window_ratio(&self) -> Option<f64> {
        self.sweeps.iter().filter_map(|s| s.window_ratio).max_by(f64::total_cmp)
    }

    /// The largest S any sweep recommends.
    pub fn recommended_sinks(&self) -> Option<usize> {
        self.sweeps.iter().filter_map(|s| s.recommended_sinks).max()
    }

    /// In words: whether the model needs pinned sinks, from its sweeps.
    pub fn verdict(&self) -> String {
        match (self.recommended_sinks(), self.worst_window_ratio()) {
            (Some(0), Some(r)) => format!("needs no sinks (a plain window is within the sweep's δ; window/best {r:.2}×)"),
            (Some(s), Some(r)) => format!("needs S = {s} (a plain window costs {r:.2}× the best perplexity after eviction)"),
            _ => "no sweep evicted anything".to_string(),
        }
    }
}

/// `sinkscope survey`'s result (survey.json).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Survey {
    pub sinkscope_version: String,
    /// ε of Sink_0^ε.
    pub epsilon: f64,
    pub rows: Vec<SurveyRow>,
}

/// Reads a list of counts that older records held as one optional count (`null`, `512`, `[512, 4096]`).
fn one_or_many<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<usize>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(Option<usize>),
        Many(Vec<usize>),
    }
    Ok(match OneOrMany::deserialize(deserializer)? {
        OneOrMany::One(one) => one.into_iter().collect(),
        OneOrMany::Many(many) => many,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Surveys written before a model could have two windows held one optional `window`.
    #[test]
    fn windows_read_from_one_or_many() {
        #[derive(Deserialize)]
        struct Row {
            #[serde(default, alias = "window", deserialize_with = "one_or_many")]
            windows: Vec<usize>,
        }
        let read = |json: &str| serde_json::from_str::<Row>(json).unwrap().windows;
        assert_eq!(read(r#"{"window": null}"#), Vec::<usize>::new());
        assert_eq!(read(r#"{"window": 512}"#), [512]);
        assert_eq!(read(r#"{"windows": [128, 512]}"#), [128, 512]);
        assert_eq!(read("{}"), Vec::<usize>::new());
    }
}
