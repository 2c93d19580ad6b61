//! Quantized caches as files: `stream --kl`'s table `cache_error_heads` (one row per query head:
//! the attention moved off the sink positions, the sinks' and the other positions' key and value
//! rounding error) with the layer × head figure of the attention moved, and `recommend
//! --cache-types`'s table `cache_frontier` (one row per configuration).

use super::records::StreamReport;
use super::run::Run;
use super::tables::{meta, Builder, Meta, Table};
use crate::kv::cache_frontier::FrontierRow;
use crate::kv::divergence::HeadCacheError;

/// The run's quantized-cache tables (none without them).
pub fn tables(run: &Run) -> Vec<Table> {
    let Some(s) = &run.stream else { return Vec::new() };
    let m = meta(run);
    table(s, &m).into_iter().chain(frontier_table(s, &m)).collect()
}

/// `cache_error_heads`, when the stream measured it.
fn table(s: &StreamReport, m: &Meta) -> Option<Table> {
    let e = s.cache_error_by_head.as_ref()?;
    let format = s.cache_rounding.map(|r| r.name()).unwrap_or_default();
    let policy = s.outcomes.first().map(|o| o.label.clone()).unwrap_or_default();
    Some(
        Builder::new(&e.heads, m)
            .str("text", |_| s.text_source.clone())
            .str("policy", |_| policy.clone())
            .str("cache_format", |_| format.clone())
            .u32("sink_positions", |_| e.sink_positions)
            .u32("queries", |_| e.queries)
            .u32("layer", |h: &HeadCacheError| h.layer)
            .u32("head", |h| h.head)
            .u32("kv_head", |h| h.kv_head)
            .f64("sink_mass_exact", |h| h.sink_mass_exact)
            .f64("sink_mass_rounded", |h| h.sink_mass_rounded)
            .f64("sink_mass_moved", |h| h.sink_mass_moved())
            .opt_f64("key_error_sinks", |h| h.key_error_sinks)
            .opt_f64("key_error_rest", |h| h.key_error_rest)
            .opt_f64("value_error_sinks", |h| h.value_error_sinks)
            .opt_f64("value_error_rest", |h| h.value_error_rest)
            .opt_f64("key_abs_error_sinks", |h| h.key_abs_error_sinks)
            .opt_f64("key_abs_error_rest", |h| h.key_abs_error_rest)
            .build("cache_error_heads"),
    )
}

/// `cache_frontier`, when the run swept cache types.
fn frontier_table(s: &StreamReport, m: &Meta) -> Option<Table> {
    let f = s.cache_frontier.as_ref()?;
    Some(
        Builder::new(&f.rows, m)
            .str("text", |_| s.text_source.clone())
            .str("cache_format", |r: &FrontierRow| r.format.clone())
            .str("cache_type_k", |r| r.rounding.keys.name().to_owned())
            .str("cache_type_v", |r| r.rounding.values.name().to_owned())
            .u32("unquantized_first", |r| r.rounding.exact_first)
            .str("policy", |r| r.policy.clone())
            .u32("sinks", |r| r.sinks)
            .opt_u32("cache", |r| r.cache)
            .f64("ppl", |r| r.ppl)
            .f64("ppl_ratio", |r| r.ratio)
            .opt_f64("ppl_ratio_ci_low", |r| r.ratio_ci.map(|c| c[0]))
            .opt_f64("ppl_ratio_ci_high", |r| r.ratio_ci.map(|c| c[1]))
            .u32("scored_from", |_| f.scored_from)
            .f64("reference_ppl", |_| f.reference_ppl)
            // Bytes as a float: a cache of 4 GiB or more does not fit a u32.
            .f64("bytes", |r| r.bytes as f64)
            .f64("memory_share", |r| r.memory_share)
            .bool("on_frontier", |r| r.on_frontier)
            .bool("chosen", |r| f.chosen.is_some_and(|c| std::ptr::eq(&f.rows[c], r)))
            .build("cache_frontier"),
    )
}

/// The attention each head's rounding moved off the sink positions (its size: a head that moved
/// attention onto them counts as much), layer × head.
#[cfg(feature = "plots")]
pub fn moved_grid(s: &StreamReport, model: &str) -> Option<super::plot::HeadGrid> {
    let e = s.cache_error_by_head.as_ref()?;
    let layers = e.heads.iter().map(|h| h.layer + 1).max()?;
    let heads = e.heads.iter().map(|h| h.head + 1).max()?;
    let mut values = vec![vec![0.0; heads]; layers];
    for h in &e.heads {
        values[h.layer][h.head] = h.sink_mass_moved().abs();
    }
    let format = s.cache_rounding.map(|r| r.name()).unwrap_or_else(|| "exact".into());
    Some(super::plot::HeadGrid {
        title: format!("{model} — attention a {format} cache moves off the sinks, per head"),
        subtitle: format!(
            "|mean attention on positions 0–{} with the exact cache − with the rounding one|, over {} queries",
            e.sink_positions.saturating_sub(1),
            e.queries
        ),
        values,
        value_label: "|Δ sink mass|".into(),
    })
}

/// `recommend --cache-types`' configurations: perplexity over the exact full cache's against
/// memory, one line per cache type (its configurations by memory), the frontier as its own line.
#[cfg(feature = "plots")]
pub fn frontier_chart(s: &StreamReport, model: &str) -> Option<super::charts::LineChart> {
    let f = s.cache_frontier.as_ref()?;
    let point = |r: &FrontierRow| (100.0 * r.memory_share, r.ratio);
    let mut formats: Vec<&str> = Vec::new();
    for r in &f.rows {
        if !formats.contains(&r.format.as_str()) {
            formats.push(&r.format);
        }
    }
    let by_memory = |mut v: Vec<(f64, f64)>| {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    };
    let mut series: Vec<(String, Vec<(f64, f64)>)> =
        formats.iter().map(|&name| (name.to_string(), by_memory(f.rows.iter().filter(|r| r.format == name).map(point).collect()))).collect();
    series.push(("the frontier".into(), by_memory(f.rows.iter().filter(|r| r.on_frontier).map(point).collect())));
    let chosen = f.chosen.map_or("none".to_string(), |i| format!("{} with {}", f.rows[i].format, f.rows[i].policy));
    Some(super::charts::LineChart {
        title: format!("{model} — cache types: perplexity against memory"),
        subtitle: format!(
            "{} tokens, scored from step {}; the exact full cache's perplexity {:.3}; chosen: {chosen}",
            f.tokens, f.scored_from, f.reference_ppl
        ),
        x_desc: "KV memory at the peak (% of the f16 full cache)".into(),
        y_desc: "perplexity over the exact full cache's (log)".into(),
        series,
        log_y: true,
        markers: Vec::new(),
        points: true,
        legend_bottom: true,
    })
}
