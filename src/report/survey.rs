//! The survey's comparison as a reader sees it: survey.md (one row per model, each sweep, the
//! census across designs, the figures) and the figures (Sink_0^ε against the window's collapse,
//! α_0 by relative depth, the census's first-token mass against the largest activation).

use std::fmt::Write;

use super::census::CensusEntry;
#[cfg(feature = "plots")]
use super::charts::LineChart;
use crate::analysis::survey::{Survey, SurveyRow};
use crate::model::decoder::config::describe_windows;

/// survey.md.
pub fn markdown(s: &Survey) -> String {
    let mut out = String::from("# sinkscope survey\n\n");
    let _ = writeln!(
        out,
        "{} models; probe-set diagnosis (default probes, T = 64, ε = {}); sink-count sweeps of `sink S` (S = 0 is a plain window) per text and budget W. sinkscope {}.\n",
        s.rows.len(),
        s.epsilon,
        s.sinkscope_version
    );
    out.push_str("| model | family | parameters | windowed layers | learned sinks | Sink_0^ε | F-Attn | sink positions > 0 | largest \\|h\\| (× median) | first massive layer | window / best ppl after eviction | recommended S | streaming heads (S = 4 + W − 4 recent lose ≤ 5%) |\n");
    out.push_str("|---|---|---:|---|---|---:|---:|---|---:|---:|---:|---:|---|\n");
    for r in &s.rows {
        let windowed = if r.windowed_layers.is_empty() {
            "none".to_string()
        } else {
            format!("{} of {} (W = {})", r.windowed_layers.len(), r.n_layers, describe_windows(&r.windows))
        };
        let beyond = if r.sink_positions_beyond_0.is_empty() {
            "none".to_string()
        } else {
            r.sink_positions_beyond_0.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ")
        };
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} M | {windowed} | {} | {:.1}% | {:.3} | {beyond} | {:.1} (×{:.0}) | {} | {} | {} | {} |",
            r.model,
            r.family,
            r.n_params as f64 / 1e6,
            if r.learned_sinks { "yes" } else { "no" },
            r.sink_0,
            r.f_attn,
            r.max_activation,
            r.max_to_median,
            r.first_massive_layer.map_or("none".into(), |l| l.to_string()),
            r.worst_window_ratio().map_or("-".into(), |x| format!("{x:.2}×")),
            r.recommended_sinks().map_or("-".into(), |s| s.to_string()),
            streaming_cell(r),
        );
    }
    out.push_str("\n## Which model needs sinks\n\n");
    for r in &s.rows {
        let _ = writeln!(out, "- **{}** {}.", r.model, r.verdict());
        for w in &r.sweeps {
            let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.3}"));
            let text = std::path::Path::new(&w.text).file_name().map_or(w.text.clone(), |n| n.to_string_lossy().into_owned());
            let _ = writeln!(
                out,
                "  - {} tokens of `{text}`, W = {}: window {}, best {}, recommended S = {}, streaming heads {}",
                w.tokens,
                w.cache,
                f(w.window_ppl),
                f(w.best_ppl),
                w.recommended_sinks.map_or("-".into(), |s| s.to_string()),
                w.streaming_heads.map_or("not measured".into(), |p| format!("{p:.0}%"))
            );
        }
    }
    let census = census_entries(s);
    if !census.is_empty() {
        out.push_str("\n## Census across designs\n\n");
        out.push_str(&super::census::markdown(&census));
    }
    out.push_str("\n## Figures\n\n![Sink_0 against the window's collapse](figures/survey-sink0-vs-collapse.png)\n\n![α_0 by relative depth](figures/survey-alpha0-depth.png)\n\n![First-token mass against the largest activation](figures/survey-census.png)\n\nThe tables are `tables/survey.parquet` (one row per model × text × budget) and `tables/census.parquet` (one row per model); each model's own run directories (report.json, stream.json) are under `models/`.\n");
    out
}

/// The census rows of the models that have one (surveys from before it have none).
pub fn census_entries(s: &Survey) -> Vec<CensusEntry<'_>> {
    s.rows
        .iter()
        .filter_map(|r| {
            Some(CensusEntry {
                model: r.model.clone(),
                family: r.family.clone(),
                n_params: r.n_params,
                n_layers: r.n_layers,
                census: r.census.as_ref()?,
            })
        })
        .collect()
}

/// A model's streaming-head shares per budget, e.g. "48% (W 128), 71% (W 256)".
fn streaming_cell(r: &SurveyRow) -> String {
    let cells: Vec<String> = r.sweeps.iter().filter_map(|w| Some(format!("{:.0}% (W {})", w.streaming_heads?, w.cache))).collect();
    if cells.is_empty() {
        "not measured".into()
    } else {
        cells.join(", ")
    }
}

/// The survey's figures by file stem.
#[cfg(feature = "plots")]
pub fn figures(s: &Survey) -> Vec<(&'static str, LineChart)> {
    let scatter = LineChart {
        title: "Sink_0^ε against what a plain window costs".into(),
        subtitle: format!(
            "one point per model; x: share of (probe, layer, head) with α_0 > {}; y: worst window/best perplexity after eviction over its sweeps",
            s.epsilon
        ),
        x_desc: "Sink_0^ε (%)".into(),
        y_desc: "window / best perplexity after eviction".into(),
        series: s.rows.iter().filter_map(|r| Some((r.model.clone(), vec![(r.sink_0, r.worst_window_ratio()?)]))).collect(),
        log_y: false,
        markers: Vec::new(),
        points: true,
        legend_bottom: false,
    };
    let depth = LineChart {
        title: "Attention on the first token by depth".into(),
        subtitle: "mean α_0 over heads and probes, per layer; depth = layer / (layers − 1)".into(),
        x_desc: "relative depth".into(),
        y_desc: "mean α_0".into(),
        series: s
            .rows
            .iter()
            .map(|r| {
                // A hybrid's linear layers (NaN) have no point.
                let points = r.alpha0_by_layer.iter().enumerate().filter(|(_, a)| a.is_finite());
                (r.model.clone(), points.map(|(l, &a)| (l as f64 / (r.n_layers.max(2) - 1) as f64, a)).collect())
            })
            .collect(),
        log_y: false,
        markers: Vec::new(),
        // Lines only: dots would label the axis at its integers, 0 and 1.
        points: false,
        legend_bottom: false,
    };
    vec![("survey-sink0-vs-collapse", scatter), ("survey-alpha0-depth", depth), ("survey-census", super::census::figure(&census_entries(s)))]
}
