//! The census across attention designs as a reader sees it: one Markdown table, the Parquet table
//! `census` and one figure (first-token mass against the largest activation), one row per model.

use std::fmt::Write;

#[cfg(feature = "plots")]
use super::charts::LineChart;
use super::tables::{Builder, Table};
use crate::analysis::census::{Census, CENSUS_EPSILONS};
use crate::capture::gate::GATE_CLOSED;

/// One model's census with the names it goes by.
pub struct CensusEntry<'a> {
    pub model: String,
    pub family: String,
    pub n_params: usize,
    pub n_layers: usize,
    pub census: &'a Census,
}

fn percent_at(c: &Census, epsilon: f64) -> f64 {
    c.sink_rate.iter().find(|r| r.epsilon == epsilon).map_or(f64::NAN, |r| r.percent)
}

/// The census table in Markdown, with a line saying what each column measures.
pub fn markdown(entries: &[CensusEntry]) -> String {
    let eps: Vec<String> = CENSUS_EPSILONS.iter().map(|e| format!("Sink_0^{e}")).collect();
    let mut out = format!(
        "| model | family | parameters | positions | windowed layers | {} | first-token mass | largest \\|h\\| (layer) | kurtosis there | attention weights ≈ 0 | learned-sink mass | gate σ (rows closed) |\n",
        eps.join(" | ")
    );
    out += &format!("|---|---|---:|---|---:|{}---:|---:|---:|---:|---:|---:|\n", "---:|".repeat(eps.len()));
    for e in entries {
        let c = e.census;
        let rates: Vec<String> = CENSUS_EPSILONS.iter().map(|&x| format!("{:.1}%", percent_at(c, x))).collect();
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} M | {} | {} of {} | {} | {:.3} | {:.1} ({}) | {} | {} | {} | {} |",
            e.model,
            e.family,
            e.n_params as f64 / 1e6,
            c.positions(),
            c.windowed_layers,
            e.n_layers,
            rates.join(" | "),
            c.first_token_mass,
            c.largest_activation,
            c.largest_layer,
            c.kurtosis.map_or("-".into(), |k| format!("{k:.0}")),
            c.zero_share.map_or("-".into(), |z| format!("{:.3}%", 100.0 * z)),
            c.learned_sink_mass.map_or("none".into(), |m| format!("{m:.3}")),
            match (c.gate_mean, c.gate_closed) {
                (Some(m), Some(closed)) => format!("{m:.3} ({:.1}%)", 100.0 * closed),
                _ => "none".into(),
            },
        );
    }
    out += &format!("\nSink_0^ε: percent of (probe, layer, head) whose α_0 (the mean attention later queries pay position 0) exceeds ε; first-token mass: mean α_0 (F-Attn); largest |h|: over every layer output of every probe, with Pearson's kurtosis of that layer output (3 for a Gaussian); attention weights ≈ 0: share of the weights a query may see that are below 1e-30 (a rectified design's exact zeros, a softmax's underflow); learned-sink mass: the mean softmax share of a learned sink logit (gpt-oss); gate σ: the mean output gate of a gated-attention model's heads (Qwen3-Next), with the share of query rows whose head gate is below {GATE_CLOSED} — its way of attending to nothing. Sink rates and first-token mass are over the layers that attend (a hybrid's linear layers have no α).\n");
    out
}

/// The `census` columns of Sink_0^ε, one per ε of [`CENSUS_EPSILONS`] in its order.
const SINK_RATE_COLUMNS: [&str; CENSUS_EPSILONS.len()] = ["sink_rate_0_2", "sink_rate_0_3", "sink_rate_0_8"];

/// `census`: one row per model.
pub fn table(entries: &[CensusEntry]) -> Table {
    let columns = Builder::bare(entries)
        .str("model", |e: &CensusEntry| e.model.clone())
        .str("family", |e| e.family.clone())
        .u32("n_params", |e| e.n_params)
        .u32("n_layers", |e| e.n_layers)
        .u32("probes", |e| e.census.probes)
        .f64("mean_tokens", |e| e.census.mean_tokens)
        .u32("rope_layers", |e| e.census.rope_layers)
        .u32("nope_layers", |e| e.census.nope_layers)
        .bool("learned_positions", |e| e.census.learned_positions)
        .u32("windowed_layers", |e| e.census.windowed_layers);
    let columns = CENSUS_EPSILONS
        .iter()
        .zip(SINK_RATE_COLUMNS)
        .fold(columns, |columns, (&epsilon, name)| columns.f64(name, move |e: &CensusEntry| percent_at(e.census, epsilon)));
    columns
        .f64("first_token_mass", |e| e.census.first_token_mass)
        .f64("largest_activation", |e| e.census.largest_activation)
        .u32("largest_layer", |e| e.census.largest_layer)
        .opt_f64("kurtosis", |e| e.census.kurtosis)
        .opt_f64("zero_share", |e| e.census.zero_share)
        .opt_f64("learned_sink_mass", |e| e.census.learned_sink_mass)
        .opt_f64("gate_mean", |e| e.census.gate_mean)
        .opt_f64("gate_closed", |e| e.census.gate_closed)
        .u32("linear_layers", |e| e.census.linear_layers)
        .build("census")
}

/// First-token mass against the largest activation, one point per model.
#[cfg(feature = "plots")]
pub fn figure(entries: &[CensusEntry]) -> LineChart {
    LineChart {
        title: "Where each design puts unwanted attention".into(),
        subtitle: "one point per model; x: mean α_0 (first-token mass); y: the largest |h| of any layer output".into(),
        x_desc: "first-token mass (mean α_0)".into(),
        y_desc: "largest |h| (log)".into(),
        series: entries.iter().map(|e| (e.model.clone(), vec![(e.census.first_token_mass, e.census.largest_activation.max(1e-3))])).collect(),
        log_y: true,
        markers: Vec::new(),
        points: true,
        legend_bottom: false,
    }
}
