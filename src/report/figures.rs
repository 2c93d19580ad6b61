//! Which figures a run gets, and their data: picks the heads worth a heatmap (strongest sinks, the
//! most depended-on head, a contrast head), and builds the plot structs from a [`Run`]. Drawing
//! is `plot`'s job; this module only decides and extracts.

#[cfg(feature = "plots")]
use super::charts::{BarChart, IntervalChart, LineChart};
#[cfg(feature = "plots")]
use super::plot::{HeadGrid, HeadHeatmap, Scale, MAX_LABELLED_TOKENS};
use super::run::Run;
#[cfg(feature = "plots")]
use super::tokens::label;
use crate::analysis::findings::heads_by_alpha0;
#[cfg(feature = "plots")]
use crate::analysis::sink_loss::RequestReport;
#[cfg(feature = "plots")]
use crate::kv::canary::{CanaryRun, FIRST_SLOTS};
use crate::kv::scored::KeptStats;
#[cfg(feature = "plots")]
use crate::metrics::massive::{criterion, is_massive, MASSIVE_ABS};

/// Per-head α_k over the run's main text: the capture's, else the analysis's mean over probes.
/// [layer][head][k].
pub fn head_alphas(run: &Run) -> Option<Vec<Vec<Vec<f64>>>> {
    run.capture_alphas().or_else(|| run.analysis_alphas())
}

/// The heads that get heatmaps: the three with the largest α_0, the head whose key-0 ablation
/// hurts most (if analyzed), and the head with the smallest α_0 for contrast — deduplicated, in
/// that order.
pub fn default_heads(run: &Run) -> Vec<(usize, usize)> {
    let Some(alphas) = head_alphas(run) else { return Vec::new() };
    let all = heads_by_alpha0(&alphas);
    let mut heads: Vec<(usize, usize)> = all.iter().take(3).map(|&(l, h, _)| (l, h)).collect();
    if let Some(top) = run.analysis.as_ref().and_then(|a| a.ablation.as_ref()).and_then(|ab| ab.top_heads.first()) {
        if let Some(h) = top.head {
            heads.push((top.layer, h));
        }
    }
    if let Some(&(l, h, _)) = all.last() {
        heads.push((l, h));
    }
    let mut seen = Vec::new();
    heads.retain(|h| {
        if seen.contains(h) {
            false
        } else {
            seen.push(*h);
            true
        }
    });
    heads
}

/// The sink positions worth an α grid: 0 plus up to two discovered others.
pub fn grid_keys(run: &Run) -> Vec<usize> {
    let mut keys = vec![0];
    if let Some(a) = &run.analysis {
        keys.extend(a.sink_positions.iter().copied().filter(|&k| k != 0 && k < a.settings.first_keys).take(2));
    }
    keys
}

#[cfg(feature = "plots")]
pub fn alpha_grid(run: &Run, k: usize) -> Option<HeadGrid> {
    let alphas = head_alphas(run)?;
    let values: Vec<Vec<f64>> = alphas.iter().map(|hs| hs.iter().map(|a| a.get(k).copied().unwrap_or(0.0)).collect()).collect();
    let token = run.tokens().and_then(|t| t.get(k)).map(|t| format!(" ({})", label(&t.piece, run.byte_level()))).unwrap_or_default();
    let source = if run.capture.is_some() { run.text_name() } else { "mean over the analysis probes".into() };
    Some(HeadGrid {
        title: format!("{} — attention on position {k}{token}, α_{k} per head", run.model_name()),
        subtitle: format!("α_k = mean over queries i ≥ k of A[i,k]; {source}"),
        values,
        value_label: format!("α_{k}"),
    })
}

#[cfg(feature = "plots")]
/// The full query × key map of one head, on the given colour scale.
pub fn head_heatmap(run: &Run, layer: usize, head: usize, scale: Scale) -> Option<HeadHeatmap> {
    let maps = run.heatmaps.as_ref()?;
    if layer >= maps.n_layers || head >= maps.n_heads {
        return None;
    }
    let g = maps.bins();
    let tokens = token_labels(run, maps.exact() && g <= MAX_LABELLED_TOKENS);
    let resolution = if maps.exact() {
        "exact pattern".to_string()
    } else {
        format!("{} tokens pooled onto {g}×{g} bins (row means of bin mass)", maps.n_tokens)
    };
    Some(HeadHeatmap {
        title: format!("{} — layer {layer}, head {head}", run.model_name()),
        subtitle: format!("{}; {resolution}; {} colour scale", run.text_name(), if scale == Scale::Log { "log" } else { "linear" }),
        values: maps.head(layer, head).to_vec(),
        rows: g,
        cols: g,
        row_edges: maps.edges.clone(),
        col_edges: maps.edges.clone(),
        col_tokens: tokens.clone(),
        row_tokens: tokens,
        scale,
    })
}

#[cfg(feature = "plots")]
/// The first K keys of one head at full key resolution (every query bin), linear scale.
pub fn head_early(run: &Run, layer: usize, head: usize) -> Option<HeadHeatmap> {
    let maps = run.heatmaps.as_ref()?;
    if layer >= maps.n_layers || head >= maps.n_heads || maps.first_keys == 0 {
        return None;
    }
    let (g, k) = (maps.bins(), maps.first_keys);
    let all = token_labels(run, true);
    let col_tokens = all.as_ref().map(|t| t[..k.min(t.len())].to_vec());
    let row_tokens = if maps.exact() && g <= MAX_LABELLED_TOKENS { all } else { None };
    Some(HeadHeatmap {
        title: format!("{} — layer {layer}, head {head}: the first {k} keys", run.model_name()),
        subtitle: format!("{}; every query's attention on keys 0–{}; linear colour scale", run.text_name(), k - 1),
        values: maps.head_early(layer, head).to_vec(),
        rows: g,
        cols: k,
        row_edges: maps.edges.clone(),
        col_edges: (0..=k).collect(),
        col_tokens,
        row_tokens,
        scale: Scale::Linear,
    })
}

#[cfg(feature = "plots")]
fn token_labels(run: &Run, wanted: bool) -> Option<Vec<String>> {
    let tokens = run.tokens().filter(|_| wanted)?;
    // Decided once for the whole text (it scans every token).
    let byte_level = run.byte_level();
    Some(tokens.iter().map(|t| label(&t.piece, byte_level)).collect())
}

#[cfg(feature = "plots")]
/// Per-layer max |h|, median |h| and mean residual norm of the captured text (log y).
pub fn layer_magnitudes(run: &Run) -> Option<LineChart> {
    let c = run.capture.as_ref()?;
    let ls = &c.summary.layers;
    let series = vec![
        ("max |h| (layer output)".to_string(), ls.iter().map(|l| (l.layer as f64, l.max_abs as f64)).collect()),
        ("median |h|".to_string(), ls.iter().map(|l| (l.layer as f64, l.median_abs as f64)).collect()),
        ("mean ‖h‖ over positions".to_string(), ls.iter().map(|l| (l.layer as f64, l.resid_norm_mean_post)).collect()),
        ("‖h‖ at position 0".to_string(), ls.iter().map(|l| (l.layer as f64, l.resid_norm_pos0_post as f64)).collect()),
    ];
    Some(LineChart {
        title: format!("{} — activation magnitudes per layer", run.model_name()),
        subtitle: format!("{}, {} tokens; residual stream after each layer", run.text_name(), c.n_tokens),
        x_desc: "layer".into(),
        y_desc: "magnitude".into(),
        series,
        log_y: true,
        markers: Vec::new(),
        points: true,
        // The lines run high on the right (massive activations), the corner below them is free.
        legend_bottom: true,
    })
}

#[cfg(feature = "plots")]
/// The hidden dims with the largest |h| anywhere in the residual stream, as bars (log y), with
/// the massive-activation bar of |h| = 100 marked.
pub fn massive_dims(run: &Run, n: usize) -> Option<BarChart> {
    let (shape, data) = run.reductions.as_ref()?.get("max_abs_by_dim", 2)?;
    let (layers, d) = (shape[0], shape[1]);
    let mut best: Vec<(usize, f64, usize)> = (0..d)
        .map(|dim| {
            let (l, v) = (0..layers).map(|l| (l, data[l * d + dim] as f64)).fold((0, 0.0), |a, b| if b.1 > a.1 { b } else { a });
            (dim, v, l)
        })
        .collect();
    best.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    best.truncate(n);
    let medians: Vec<f32> = run.capture.as_ref().map(|c| c.summary.layers.iter().map(|l| l.median_abs).collect()).unwrap_or_default();
    // Sun et al.'s criterion, as `metrics::massive` defines it.
    let massive = |v: f64, l: usize| medians.get(l).is_some_and(|&m| is_massive(v as f32, m));
    Some(BarChart {
        title: format!("{} — largest |h| per hidden dim", run.model_name()),
        subtitle: format!("{}; max over layers and positions of the residual stream; top {} of {d} dims", run.text_name(), best.len()),
        x_desc: "hidden dim (layer of its max)".into(),
        y_desc: "max |h| (log scale)".into(),
        bars: best.iter().map(|&(dim, v, l)| (format!("{dim} · L{l}"), v, massive(v, l))).collect(),
        highlight_label: format!("massive: {}", criterion()),
        other_label: "not massive".into(),
        reference: Some((MASSIVE_ABS as f64, "|h| = 100".into())),
    })
}

/// Tokens in the rolling window of the perplexity curves.
pub const PPL_WINDOW: usize = 64;

/// The rolling window of a stream's perplexity figure: [`PPL_WINDOW`], or a 400th of a long stream.
pub fn ppl_window(tokens: usize) -> usize {
    PPL_WINDOW.max(tokens / 400)
}

/// At every step, exp of the mean of the finite NLLs among the last `window` steps (NaN marks an
/// unscored step); `None` where fewer than `min_scored` of them were scored. The figures and the
/// dashboard both draw their curves from this.
pub fn rolling_ppl(nll: &[f64], window: usize, min_scored: usize) -> Vec<Option<f64>> {
    let window = window.max(1);
    let (mut sum, mut n) = (0.0, 0usize);
    let mut out = Vec::with_capacity(nll.len());
    for (i, &v) in nll.iter().enumerate() {
        if v.is_finite() {
            sum += v;
            n += 1;
        }
        if i >= window && nll[i - window].is_finite() {
            sum -= nll[i - window];
            n -= 1;
        }
        out.push((n >= min_scored.max(1)).then(|| (sum / n as f64).exp()));
    }
    out
}

#[cfg(feature = "plots")]
/// Rolling perplexity (exp of the mean NLL over the last [`ppl_window`] steps) per policy, with
/// the first eviction and each policy's cliff marked.
pub fn ppl_curves(run: &Run) -> Option<LineChart> {
    let s = run.stream.as_ref()?;
    // A policy scored only on some steps (recompute every K-th) would be a rolling mean over a few
    // samples: too noisy to compare by eye; `ppl_after_eviction` shows it with its interval.
    let (dense, sparse): (Vec<_>, Vec<_>) = s.outcomes.iter().partition(|o| o.nll.iter().all(|v| v.is_finite()));
    // From half a window on, so the first points are not means over a handful of tokens.
    // Long streams (100,000 tokens) would be a blur of 64-token means: about 400 windows across.
    let window = ppl_window(s.tokens.len());
    let curve =
        |nll: &[f64]| rolling_ppl(nll, window, 4).into_iter().enumerate().skip(window / 2).filter_map(|(i, p)| Some((i as f64, p?))).collect();
    let series = dense.iter().map(|o| (o.label.clone(), curve(&o.nll))).collect();
    let omitted = if sparse.is_empty() {
        String::new()
    } else {
        format!(
            "; scored on a subset of steps, so shown with its interval in ppl-after-eviction instead: {}",
            sparse.iter().map(|o| o.label.as_str()).collect::<Vec<_>>().join(", ")
        )
    };
    let mut markers = Vec::new();
    if let Some(e) = s.outcomes.iter().filter_map(|o| o.first_eviction_step).min() {
        markers.push((e as f64, format!(" first eviction (step {e})")));
    }
    let cache = s.outcomes.iter().find(|o| o.policy.cache > 0).map(|o| o.policy.cache).unwrap_or(0);
    Some(LineChart {
        title: format!("{} — perplexity while streaming, per cache policy", run.model_name()),
        subtitle: format!("{}; {} tokens; budget W = {cache}; rolling perplexity over {window} tokens{omitted}", s.text_source, s.tokens.len()),
        x_desc: "tokens streamed".into(),
        y_desc: "perplexity".into(),
        series,
        log_y: true,
        markers,
        points: false,
        legend_bottom: false,
    })
}

#[cfg(feature = "plots")]
/// Perplexity after the first eviction per policy of a sweep, the recommended S highlighted; a
/// value estimated from a sample of the steps is drawn with its 95% bootstrap interval.
pub fn ppl_after_eviction(run: &Run) -> Option<IntervalChart> {
    let s = run.stream.as_ref()?;
    let rec = s.recommendation.as_ref()?;
    let rows: Vec<_> = rec
        .table
        .iter()
        .filter_map(|r| {
            Some((r.label.clone(), r.ppl_after_eviction?, r.ppl_after_eviction_ci, r.sinks.is_some() && r.sinks == rec.recommended_sinks))
        })
        .collect();
    if rows.is_empty() {
        return None;
    }
    let sampled = rec.table.iter().any(|r| r.ppl_after_eviction_ci.is_some());
    Some(IntervalChart {
        title: format!("{} — perplexity after the first eviction, per cache policy", run.model_name()),
        subtitle: format!(
            "{}; {} tokens; budget W = {}{}",
            s.text_source,
            s.tokens.len(),
            rec.cache,
            if sampled {
                "; whiskers: 95% bootstrap interval of a value scored on a sample of the steps"
            } else {
                "; every step scored (exact values)"
            }
        ),
        x_desc: "perplexity over the steps after the first eviction".into(),
        rows,
        highlight_label: "recommended S".into(),
    })
}

#[cfg(feature = "plots")]
/// `recommend --per-head`'s frontier: KV memory (MiB, f16) against perplexity from step W, the
/// per-head policies beside `sink S` caches of the same memory.
pub fn per_head_frontier(run: &Run) -> Option<LineChart> {
    let f = run.per_head.as_ref()?;
    // KiB for tiny models, so the axis is not squeezed against its minimum width of 1.
    let big = f.rows.iter().any(|r| r.bytes >= 1 << 20);
    let (unit, div) = if big { ("MiB", (1u64 << 20) as f64) } else { ("KiB", 1024.0) };
    let mib = |b: u64| b as f64 / div;
    let series = vec![
        (
            format!("per-head: retrieval heads whole, others S={} + {} recent", f.sinks, f.cache - f.sinks),
            f.rows.iter().map(|r| (mib(r.bytes), r.ppl_from_w)).collect(),
        ),
        (format!("uniform sink S={}, same memory", f.sinks), f.rows.iter().map(|r| (mib(r.bytes), r.uniform_ppl_from_w)).collect()),
    ];
    Some(LineChart {
        title: format!("{} — per-head cache policies", run.model_name()),
        subtitle: format!(
            "{} tokens; perplexity from step {} (W); shares of retrieval heads {}",
            f.tokens,
            f.cache,
            f.rows.iter().map(|r| format!("{:.0}%", 100.0 * r.share)).collect::<Vec<_>>().join(", ")
        ),
        x_desc: format!("KV cache at the end of the stream ({unit}, f16)"),
        y_desc: "perplexity".into(),
        series,
        log_y: false,
        markers: Vec::new(),
        points: true,
        legend_bottom: false,
    })
}

/// The bit widths of a run's `quant` sweep, widest first.
pub fn quant_bits(run: &Run) -> Vec<u32> {
    let mut bits: Vec<u32> = run.quant.as_ref().map_or(Vec::new(), |q| q.cases.iter().map(|c| c.setting.bits).collect());
    bits.sort_unstable_by(|a, b| b.cmp(a));
    bits.dedup();
    bits
}

#[cfg(feature = "plots")]
/// `quant` at one bit width: per scheme, the mean NLL increase over the unquantized model at each
/// of the first positions (averaged over the sequences), sink positions marked.
pub fn quant_nll(run: &Run, bits: u32) -> Option<LineChart> {
    // Positions shown: the sinks and what follows them.
    const QUANT_POSITIONS: usize = 64;
    let q = run.quant.as_ref()?;
    let series: Vec<(String, Vec<(f64, f64)>)> = q
        .cases
        .iter()
        .filter(|c| c.setting.bits == bits)
        .map(|c| {
            (
                c.label.clone(),
                c.nll_by_position
                    .iter()
                    .zip(&q.baseline_by_position)
                    .take(QUANT_POSITIONS)
                    .enumerate()
                    .map(|(p, (v, b))| (p as f64, v - b))
                    .collect(),
            )
        })
        .collect();
    if series.is_empty() {
        return None;
    }
    Some(LineChart {
        title: format!("{} — int{bits} activation quantization by position", run.model_name()),
        subtitle: format!("{} × {} tokens of {}; static scales from {}", q.sequences, q.tokens_per_sequence, q.text_source, q.calibration.source),
        x_desc: "position of the predicting token (each sequence starts at 0)".into(),
        y_desc: "NLL increase over unquantized (nats)".into(),
        series,
        log_y: false,
        markers: vec![(q.sink_positions as f64 - 0.5, format!("first {} positions", q.sink_positions))],
        points: false,
        legend_bottom: false,
    })
}

#[cfg(feature = "plots")]
/// `quant` at one bit width: per scheme, each layer's lowest SQNR over its projection inputs.
pub fn quant_sqnr(run: &Run, bits: u32) -> Option<LineChart> {
    let q = run.quant.as_ref()?;
    let series: Vec<(String, Vec<(f64, f64)>)> = q
        .cases
        .iter()
        .filter(|c| c.setting.bits == bits)
        .map(|c| {
            let mut by_layer: std::collections::BTreeMap<usize, f64> = std::collections::BTreeMap::new();
            for s in &c.sites {
                if let Some(db) = s.sqnr_db {
                    let e = by_layer.entry(s.layer).or_insert(f64::INFINITY);
                    *e = e.min(db);
                }
            }
            (c.label.clone(), by_layer.into_iter().map(|(l, db)| (l as f64, db)).collect())
        })
        .collect();
    if series.iter().all(|s| s.1.is_empty()) {
        return None;
    }
    Some(LineChart {
        title: format!("{} — int{bits}: where quantization noise is worst", run.model_name()),
        subtitle: "lowest SQNR over each layer's projection inputs (qkv, o, gate_up, down; k, v with --kv)".into(),
        x_desc: "layer".into(),
        y_desc: "SQNR (dB)".into(),
        series,
        log_y: false,
        markers: Vec::new(),
        points: true,
        legend_bottom: true,
    })
}

/// The streams of a run that say whether heavy hitters rediscover the sinks: score-based policies
/// with nothing pinned, and what they kept.
pub fn unpinned_kept(run: &Run) -> Vec<(&str, KeptStats)> {
    run.stream.as_ref().map_or(Vec::new(), |s| {
        s.outcomes.iter().filter(|o| o.policy.is_scored() && o.policy.pinned() == 0).filter_map(|o| Some((o.label.as_str(), o.kept?))).collect()
    })
}

#[cfg(feature = "plots")]
/// For each score-based policy with nothing pinned: the share of (layer, KV head, step after the
/// first eviction) whose kept set holds each of the first positions.
pub fn kept_first(run: &Run) -> Option<LineChart> {
    let kept = unpinned_kept(run);
    if kept.is_empty() {
        return None;
    }
    let series = kept
        .iter()
        .map(|(label, k)| (label.to_string(), k.kept_first_share.iter().enumerate().map(|(pos, s)| (pos as f64, 100.0 * s)).collect()))
        .collect();
    Some(LineChart {
        title: format!("{} — do score-based policies keep the first tokens?", run.model_name()),
        subtitle: format!("{}; nothing pinned (S = 0); share of (layer, KV head, step after the first eviction)", run.text_name()),
        x_desc: "position in the stream".into(),
        y_desc: "kept (% of layer × KV head × step)".into(),
        series,
        log_y: false,
        markers: Vec::new(),
        points: true,
        legend_bottom: true,
    })
}

#[cfg(feature = "plots")]
/// One request of a serving trace: token logprobs, their rolling mean, the level before and after
/// each detected step (over the `baseline` tokens each level was measured on), evictions and
/// steps marked.
pub fn watch_chart(r: &RequestReport, rolling: usize, baseline: usize) -> LineChart {
    let xy = |v: &[f64]| v.iter().enumerate().map(|(i, &y)| (i as f64, y)).collect::<Vec<_>>();
    let mut series = vec![("token logprob".to_string(), xy(&r.logprobs)), (format!("rolling mean ({rolling} tokens)"), xy(&r.rolling))];
    // Each step as the levels it separates (one series: consecutive steps join end to start).
    let levels: Vec<(f64, f64)> = r
        .steps
        .iter()
        .flat_map(|s| {
            let (from, at, to) = (s.step.start.saturating_sub(baseline) as f64, s.step.start as f64, (s.step.start + baseline).min(r.tokens) as f64);
            [(from, s.step.mean_before), (at, s.step.mean_before), (at, s.step.mean_after), (to, s.step.mean_after)]
        })
        .collect();
    if !levels.is_empty() {
        series.push(("level before / after each step".to_string(), levels));
    }
    // An eviction that a step was dated to shares the step's marker (their labels would overlap).
    let near_step = |e: usize| r.steps.iter().any(|s| s.eviction == Some(e) && s.sink_loss);
    let mut markers: Vec<(f64, String)> =
        r.evictions.iter().filter(|&&e| !near_step(e)).take(12).map(|&e| (e as f64, "eviction".to_string())).collect();
    markers.extend(
        r.steps
            .iter()
            .map(|s| (s.step.start as f64, format!("{}step −{:.2} nats", if s.sink_loss { "eviction → SINK LOSS: " } else { "" }, s.step.size))),
    );
    LineChart {
        title: format!("sink-loss watch — request {}", r.id),
        subtitle: format!(
            "{} tokens; mean logprob {:.3}; {} eviction{} ({}); {} step{} down",
            r.tokens,
            r.mean_logprob,
            r.evictions.len(),
            if r.evictions.len() == 1 { "" } else { "s" },
            r.eviction_source,
            r.steps.len(),
            if r.steps.len() == 1 { "" } else { "s" }
        ),
        x_desc: "token".into(),
        y_desc: "logprob (nats)".into(),
        series,
        log_y: false,
        markers,
        points: false,
        legend_bottom: true,
    }
}

#[cfg(feature = "plots")]
/// The landmarks of a canary run, as vertical markers at their token index (one marker, labels
/// joined, where they coincide).
fn canary_markers(run: &CanaryRun) -> Vec<(f64, String)> {
    let at = |i: Option<usize>| i.and_then(|i| run.steps.get(i)).map(|s| s.index as f64);
    let mut out: Vec<(f64, String)> = Vec::new();
    for (x, label) in
        [(at(run.first_eviction), "first eviction"), (at(run.sink_evicted), "first token evicted"), (at(run.collapse_at), "collapse flagged")]
    {
        let Some(x) = x else { continue };
        match out.iter_mut().find(|m| m.0 == x) {
            Some(m) => m.1 = format!("{} = {label}", m.1),
            None => out.push((x, label.to_string())),
        }
    }
    out
}

#[cfg(feature = "plots")]
/// A canary run's attention on the first four cache slots per step: the watched layer, the mean
/// over layers, the first and the last layer; evictions marked.
pub fn canary_mass(model: &str, run: &CanaryRun) -> LineChart {
    let layers = run.steps.first().map_or(0, |s| s.first_slot_mass.len());
    let of = |f: &dyn Fn(&[f64]) -> f64| run.steps.iter().map(|s| (s.index as f64, f(&s.first_slot_mass))).collect::<Vec<_>>();
    let layer = |l: usize| move |m: &[f64]| m.get(l).copied().unwrap_or(0.0);
    let mut series = vec![
        (format!("layer {} (watched)", run.layer), of(&layer(run.layer))),
        ("mean over layers".to_string(), run.steps.iter().map(|s| (s.index as f64, s.mean_mass())).collect()),
    ];
    // The first and last layers that attend (a hybrid's linear layers hold NaN).
    let attending: Vec<usize> = (0..layers).filter(|&l| run.steps.first().is_some_and(|s| s.first_slot_mass[l].is_finite())).collect();
    for l in [attending.first().copied().unwrap_or(0), attending.last().copied().unwrap_or(0)] {
        if l != run.layer && layers > 0 && !series.iter().any(|s| s.0 == format!("layer {l}")) {
            series.push((format!("layer {l}"), of(&layer(l))));
        }
    }
    LineChart {
        title: format!("Canary under {}: attention on the first {FIRST_SLOTS} cache slots", run.policy.label()),
        subtitle: format!(
            "{model}; per step, mean over heads; baseline (watched layer, before the first eviction) {}; flagged below {:.0}% of it",
            run.baseline_mass.map_or("-".into(), |b| format!("{b:.3}")),
            100.0 * run.collapse
        ),
        x_desc: "token index".into(),
        y_desc: "attention on slots 0–3".into(),
        series,
        log_y: false,
        markers: canary_markers(run),
        points: false,
        legend_bottom: false,
    }
}

#[cfg(feature = "plots")]
/// A canary run's token log-probabilities and their rolling mean; evictions marked.
pub fn canary_logprob(model: &str, run: &CanaryRun, rolling: usize) -> LineChart {
    let xy: Vec<(f64, f64)> = run.steps.iter().map(|s| (s.index as f64, s.logprob)).collect();
    let mean = crate::metrics::changepoint::rolling_mean(&run.steps.iter().map(|s| s.logprob).collect::<Vec<_>>(), rolling);
    LineChart {
        title: format!("Canary under {}: token log-probability", run.policy.label()),
        subtitle: format!("{model}; natural log; rolling mean over {rolling} tokens"),
        x_desc: "token index".into(),
        y_desc: "log p(token)".into(),
        series: vec![
            ("token logprob".into(), xy),
            (format!("rolling mean ({rolling})"), run.steps.iter().zip(mean).map(|(s, m)| (s.index as f64, m)).collect()),
        ],
        log_y: false,
        markers: canary_markers(run),
        points: false,
        legend_bottom: true,
    }
}
