//! The figure of a `verify` run: the engine's log-probability minus the simulator's under the
//! declared policy, per token, with the noise floor and the evictions marked.

use super::charts::LineChart;
use crate::analysis::conformance::{Conformance, Verdict};

/// Δ per token (engine − simulator), ± the floor's largest |Δ| as a band, evictions as markers.
pub fn verify_chart(c: &Conformance, evictions: &[usize], policy: &str, model: &str) -> LineChart {
    let delta: Vec<(f64, f64)> = c.delta.iter().enumerate().filter_map(|(i, d)| d.map(|d| (i as f64, d))).collect();
    let (x0, x1) = (delta.first().map_or(0.0, |p| p.0), delta.last().map_or(0.0, |p| p.0));
    let band = c.floor.max_abs;
    let mut series = vec![("engine − simulator (nats)".to_string(), delta)];
    if band.is_finite() {
        // The band as one closed outline (one legend entry).
        let outline = vec![(x0, band), (x1, band), (x1, -band), (x0, -band), (x0, band)];
        series.push((format!("± largest |Δ| before the first eviction ({band:.4})"), outline));
    }
    let mut markers: Vec<(f64, String)> = evictions.iter().take(12).map(|&e| (e as f64, "eviction".to_string())).collect();
    if let Verdict::Diverges { from } = c.verdict {
        markers.push((from as f64, "diverges".into()));
    }
    let verdict = match c.verdict {
        Verdict::Conforms => "conforms".to_string(),
        Verdict::Diverges { from } => format!("diverges from token {from}"),
        Verdict::NotEvicted => "nothing evicted".to_string(),
    };
    LineChart {
        title: format!("verify — {model}: {verdict}"),
        subtitle: format!(
            "{policy}; mean |Δ| {:.4} before the first eviction ({} tokens), {:.4} after ({} tokens)",
            c.floor.mean_abs, c.floor.steps, c.after.mean_abs, c.after.steps
        ),
        x_desc: "token".into(),
        y_desc: "Δ logprob (nats)".into(),
        series,
        log_y: false,
        markers,
        points: false,
        legend_bottom: true,
    }
}
