//! `index.md`: a run's findings in plain language with the numbers, linking every figure and
//! table that exists beside it. Deterministic text from the run's files only.

use crate::analysis::quant::QuantReport;
use std::fmt::Write;
use std::path::Path;

use super::bundle::{FigureSpec, FIGURES_DIR, TABLES_DIR};
use super::census::CensusEntry;
use super::records::{CaptureReport, StreamReport};
use super::run::Run;
use super::tables::Table;
use super::tokens::label;
use crate::analysis::census::Census;
use crate::analysis::findings::{AnalysisFindings, ByLayerKind, CaptureFindings, Largest};
use crate::analysis::sinks::LearnedSinks;
use crate::kv::per_head::{Frontier, FrontierRow};
use crate::metrics::massive;
use crate::model::info::ModelInfo;

/// The index page of a run; `exists` says whether a path relative to the run directory will be
/// there when the page is (figures and tables of the same export are still being staged).
pub fn index(run: &Run, figures: &[FigureSpec], tables: &[Table], exists: &dyn Fn(&Path) -> bool) -> String {
    let mut s = String::new();
    let m = run.model();
    let _ = writeln!(s, "# sinkscope report — {}\n", run.model_name());
    let _ = writeln!(
        s,
        "Run `{}` · sinkscope {} · made by `sinkscope export`; every number below comes from the JSON files in this directory.\n",
        run.id(),
        run.sinkscope_version()
    );
    s.push_str("## Model\n\n| | |\n|---|---|\n");
    let rows = [
        ("source", format!("`{}` ({})", m.source, m.format)),
        (
            "architecture",
            format!(
                "{}: {} layers × {} heads ({} kv heads), d_model {}",
                m.architecture, m.config.n_layers, m.config.n_heads, m.config.n_kv_heads, m.config.d_model
            ),
        ),
        ("context · vocab", format!("{} · {}", m.config.context_len, m.config.vocab_size)),
        ("weights", format!("{} → {}", m.quantization, m.compute)),
        ("tokenizer", format!("{} (adds BOS: {})", m.tokenizer, m.adds_bos)),
        ("attention", attention_kind(m)),
        ("SHA-256", m.sha256.clone().map_or("-".into(), |h| format!("`{h}`"))),
    ];
    for (k, v) in rows {
        let _ = writeln!(s, "| {k} | {v} |");
    }
    s.push('\n');
    findings(run, &mut s);
    if !figures.is_empty() {
        s.push_str("## Figures\n\n");
        for f in figures {
            let png = Path::new(FIGURES_DIR).join(format!("{}.png", f.stem));
            let svg = Path::new(FIGURES_DIR).join(format!("{}.svg", f.stem));
            match (exists(&png), exists(&svg)) {
                (true, has_svg) => {
                    let _ = writeln!(s, "### {}\n\n![{}]({FIGURES_DIR}/{}.png)\n", f.caption, f.caption, f.stem);
                    if has_svg {
                        let _ = writeln!(s, "[SVG]({FIGURES_DIR}/{}.svg)\n", f.stem);
                    }
                }
                (false, true) => {
                    let _ = writeln!(s, "### {}\n\n![{}]({FIGURES_DIR}/{}.svg)\n", f.caption, f.caption, f.stem);
                }
                (false, false) => {
                    let _ = writeln!(s, "### {}\n\nNot drawn yet: `sinkscope export {} --png`.\n", f.caption, run.dir.display());
                }
            }
        }
    }
    if !tables.is_empty() {
        s.push_str("## Tables\n\nParquet, one row per fact; schemas in the sinkscope README (`notebooks-data/README.md`).\n\n| table | rows | file |\n|---|---:|---|\n");
        for t in tables {
            let path = Path::new(TABLES_DIR).join(format!("{}.parquet", t.name));
            let link = if exists(&path) {
                format!("[{TABLES_DIR}/{0}.parquet]({TABLES_DIR}/{0}.parquet)", t.name)
            } else {
                "not written (`export --parquet`)".into()
            };
            let _ = writeln!(s, "| `{}` | {} | {link} |", t.name, t.n_rows());
        }
        s.push('\n');
    }
    s
}

fn findings(run: &Run, s: &mut String) {
    s.push_str("## Findings\n\n");
    if let Some(c) = &run.capture {
        capture_findings(run, c, s);
    }
    if let Some(a) = &run.analysis {
        diagnosis_section(&AnalysisFindings::of(a), s);
        let census = Census::of(a);
        let m = &a.model;
        let entry = CensusEntry {
            model: run.model_name(),
            family: m.architecture.clone(),
            n_params: m.n_params,
            n_layers: m.config.n_layers,
            census: &census,
        };
        s.push_str("### Census (comparable across designs; `survey` puts models side by side)\n\n");
        s.push_str(&super::census::markdown(&[entry]));
        s.push('\n');
    }
    if let Some(st) = &run.stream {
        stream_findings(run, st, s);
    }
    if let Some(f) = &run.per_head {
        per_head_findings(f, s);
    }
    if let Some(q) = &run.quant {
        quant_section(s, q);
    }
    if let Some(n) = &run.needle {
        s.push_str(&super::needle::markdown(n));
        s.push('\n');
    }
}

/// The captured text: attention on position 0 (by layer kind), learned sinks, the largest
/// activation.
fn capture_findings(run: &Run, c: &CaptureReport, s: &mut String) {
    let ppl = c.nll.as_ref().map_or(String::new(), |n| format!(", perplexity {:.2}", n.perplexity));
    let _ = writeln!(s, "**Captured text.** {} — {} tokens{ppl}.\n", c.text_source, c.n_tokens);
    let f = CaptureFindings::of(run.model(), &c.summary);
    if let Some(kinds) = &f.alpha0_by_kind {
        let _ = writeln!(s, "- **Attention on position 0 by layer kind.** {}", by_window_kind(kinds));
    }
    if let Some(ls) = &f.learned_sinks {
        let _ = writeln!(s, "- **Learned sinks.** {}", learned_sink_line(ls));
    }
    if let Some((mean, layer, peak)) = f.first_token {
        let first = c.tokens.first().map_or(String::new(), |t| format!(" (`{}`)", label(&t.piece, run.byte_level())));
        let _ = writeln!(
            s,
            "- **Attention on the first token{first}.** Averaged over all layers and heads, a query pays {:.1}% of its attention to position 0; layer {layer} is the most sink-bound at {:.1}%.",
            100.0 * mean,
            100.0 * peak
        );
    }
    if let Some(Largest { layer, max_abs, pos, dim, median_abs: median }) = f.largest_activation {
        let ratio = if median > 0.0 { format!(", {:.0}× that layer's median |h| of {:.3}", max_abs / median, median) } else { String::new() };
        let at = match (pos, dim) {
            (Some(p), Some(d)) => {
                format!(" at position {p} (`{}`), dim {d}", c.tokens.get(p).map_or(String::new(), |t| label(&t.piece, run.byte_level())))
            }
            _ => String::new(),
        };
        let _ = writeln!(s, "- **Largest activation.** |h| = {max_abs:.1} after layer {layer}{at}{ratio}.");
    }
    s.push('\n');
}

/// The streaming sweep: the recommendation and its table (or each policy's outcome), what
/// unpinned score-based policies kept, KV memory.
fn stream_findings(run: &Run, st: &StreamReport, s: &mut String) {
    let _ = writeln!(s, "**Streaming** over {} tokens of `{}`.\n", st.tokens.len(), st.text_source);
    if let Some(r) = &st.recommendation {
        let _ = writeln!(
            s,
            "- **Recommended sink count at W = {}: {}.** {}\n",
            r.cache,
            r.recommended_sinks.map_or("-".into(), |v| v.to_string()),
            r.verdict
        );
        s.push_str("| policy | perplexity | after first eviction | × best | cliff |\n|---|---:|---:|---:|---|\n");
        for row in &r.table {
            let _ = writeln!(
                s,
                "| {} | {:.3} | {} | {} | {} |",
                row.label,
                row.ppl,
                match (row.ppl_after_eviction, row.ppl_after_eviction_ci, row.scored_steps) {
                    (Some(p), Some([lo, hi]), Some(n)) => format!("{p:.3} (a sample of {n} steps; 95% interval {lo:.2}–{hi:.2})"),
                    (p, _, _) => p.map_or("-".into(), |p| format!("{p:.3}")),
                },
                row.ratio_to_best.map_or("-".into(), |x| format!("{x:.3}")),
                row.cliff_step.map_or("none".into(), |c| format!("step {c}"))
            );
        }
    } else {
        s.push_str("| policy | perplexity | after first eviction | cliff | KV memory at peak |\n|---|---:|---:|---|---|\n");
        for o in &st.outcomes {
            let _ = writeln!(
                s,
                "| {} | {:.3} | {} | {} | {} |",
                o.label,
                o.ppl,
                o.ppl_after_eviction.map_or("-".into(), |p| format!("{p:.3}")),
                o.cliff_step.map_or("none".into(), |c| format!("step {c}")),
                o.kv_memory.describe()
            );
        }
    }
    let kept = super::figures::unpinned_kept(run);
    if !kept.is_empty() {
        s.push_str("\nWhat score-based policies with nothing pinned kept (share of layer × KV head × step after the first eviction holding positions 0 / 1 / 2 / 3; mean age of the kept keys):\n\n");
        for (label, k) in kept {
            let shares: Vec<String> = k.kept_first_share.iter().map(|v| format!("{:.0}%", 100.0 * v)).collect();
            let _ = writeln!(s, "- {label}: {}; mean key age {:.1} tokens", shares.join(" / "), k.mean_age);
        }
    }
    if let Some(m) = st.recommendation.as_ref().and_then(|r| Some((r.cache, r.kv_memory?))) {
        let _ = writeln!(s, "\nKV memory at W = {}: {} per sequence.", m.0, m.1.describe());
    }
    if let Some(note) = st.recommendation.as_ref().and_then(|r| r.model_windows.as_ref()) {
        let _ = writeln!(s, "\nNote: {note}.");
    }
    s.push('\n');
}

/// Per-head policies against uniform ones at the same memory.
fn per_head_findings(f: &Frontier, s: &mut String) {
    let kv = f.gates.score.iter().map(Vec::len).sum::<usize>();
    let _ =
        writeln!(
        s,
        "**Per-head policies** over {} tokens: retrieval KV heads keep every key, the others {} sinks + {} recent (W = {}); heads ranked by {}.\n",
        f.tokens, f.sinks, f.cache - f.sinks, f.cache, f.gates.ranked_by_text()
    );
    let _ = writeln!(s, "| retrieval KV heads | KV memory (f16) | perplexity from step {} | uniform sink S = {}, same memory | its W | uniform memory at equal perplexity |\n|---|---:|---:|---:|---:|---:|", f.cache, f.sinks);
    for r in &f.rows {
        let _ = writeln!(
            s,
            "| {} of {kv} ({:.1}%) | {:.2} MiB | {:.3} | {:.3} | {} | {} |",
            r.retrieval_heads,
            100.0 * r.share,
            r.bytes as f64 / (1 << 20) as f64,
            r.ppl_from_w,
            r.uniform_ppl_from_w,
            r.uniform_cache,
            equal_ppl_memory(r)
        );
    }
    s.push('\n');
}

/// `quant`'s table of settings and its findings.
fn quant_section(s: &mut String, q: &QuantReport) {
    let _ = writeln!(
        s,
        "**Activation quantization** (fake, symmetric absmax, at every linear projection's input; weights as loaded) over {} × {} tokens of {}; static scales from {}{}. Sink side = predictions from positions < {}.\n",
        q.sequences,
        q.tokens_per_sequence,
        q.text_source,
        q.calibration.source,
        if q.calibration.in_sample { " (in-sample)" } else { "" },
        q.sink_positions
    );
    let _ = writeln!(
        s,
        "| setting | perplexity | NLL at sink positions (Δ) | NLL elsewhere (Δ) | worst site (SQNR) | zeroed |\n|---|---:|---:|---:|---|---:|"
    );
    let _ = writeln!(s, "| unquantized | {:.3} | {:.3} | {:.3} | | |", q.baseline.ppl, q.baseline.sink_nll, q.baseline.rest_nll);
    for c in &q.cases {
        let worst =
            c.worst_site().map_or("-".to_string(), |w| format!("layer {} {}: {:.1} dB", w.layer, w.site.name(), w.sqnr_db.unwrap_or(f64::INFINITY)));
        let zeroed = c.mean_zero_share();
        let _ = writeln!(
            s,
            "| {} | {:.3} | {:.3} ({:+.3}) | {:.3} ({:+.3}) | {worst} | {:.1}% |",
            c.label,
            c.nll.ppl,
            c.nll.sink_nll,
            c.delta_sink,
            c.nll.rest_nll,
            c.delta_rest,
            100.0 * zeroed
        );
    }
    s.push('\n');
    for f in q.findings() {
        let _ = writeln!(s, "- {f}");
    }
    s.push('\n');
}

/// The uniform cache's memory at the per-head row's perplexity, and what the per-head policy saves.
pub fn equal_ppl_memory(r: &FrontierRow) -> String {
    let Some(b) = r.uniform_bytes_at_equal_ppl else { return "outside the sweep".into() };
    let saved = 1.0 - r.bytes as f64 / b;
    let verdict = if saved.abs() < 0.005 {
        "the same".to_string()
    } else if saved > 0.0 {
        format!("per-head saves {:.0}%", 100.0 * saved)
    } else {
        format!("per-head needs {:.0}% more", -100.0 * saved)
    };
    format!("{:.2} MiB ({verdict})", b / (1 << 20) as f64)
}

/// How the layers attend: all globally, or some through a sliding window (which), and whether
/// heads carry learned sink logits.
fn attention_kind(m: &ModelInfo) -> String {
    let config = &m.config;
    let global: Vec<usize> = (0..config.n_layers).filter(|&l| config.layer_window(l).is_none()).collect();
    let windows: Vec<String> = config
        .windows()
        .into_iter()
        .map(|w| {
            let layers: Vec<usize> = (0..config.n_layers).filter(|&l| config.layer_window(l) == Some(w)).collect();
            format!("sliding window of {w} keys on layers {}", layer_ranges(&layers))
        })
        .collect();
    let mut out = if windows.is_empty() {
        "global (causal) on every layer".to_string()
    } else {
        let global = if global.is_empty() { "none".into() } else { layer_ranges(&global) };
        format!("{}; global layers: {global}", windows.join("; "))
    };
    if m.config.arch.learned_sinks {
        out.push_str("; a learned sink logit per head");
    }
    out
}

/// Sorted layer numbers as ranges: "0–4, 6–10, 12".
fn layer_ranges(layers: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < layers.len() {
        let mut j = i;
        while j + 1 < layers.len() && layers[j + 1] == layers[j] + 1 {
            j += 1;
        }
        parts.push(if j > i { format!("{}–{}", layers[i], layers[j]) } else { layers[i].to_string() });
        i = j + 1;
    }
    parts.join(", ")
}

/// The diagnosis's findings as a list.
fn diagnosis_section(d: &AnalysisFindings, s: &mut String) {
    let _ = writeln!(s, "**Sink diagnosis** over {} probes (ε = {}).\n", d.probes, d.epsilon);
    if !d.skipped_probes.is_empty() {
        let _ = writeln!(s, "Left out: {}.\n", d.skipped_probes.join("; "));
    }
    let positions: Vec<String> = d.sink_positions.iter().map(|p| p.to_string()).collect();
    let _ = writeln!(
        s,
        "- **Sink positions:** {}. F-Attn (mean attention on position 0 over probes, layers and heads) = {:.3}.",
        if positions.is_empty() { "none found".into() } else { positions.join(", ") },
        d.f_attn
    );
    if let Some(kinds) = &d.alpha0_by_kind {
        let _ = writeln!(s, "- **F-Attn by layer kind.** {}", by_window_kind(kinds));
    }
    if let Some(ls) = &d.learned_sinks {
        let _ = writeln!(s, "- **Learned sinks.** {}", learned_sink_line(ls));
    }
    let scores: Vec<String> = d.sink_scores.iter().filter(|(_, v)| *v > 0.0).take(6).map(|(k, v)| format!("Sink_{k} = {v:.1}%")).collect();
    if !scores.is_empty() {
        let _ = writeln!(s, "- **Share of heads that sink** (α_k > ε): {}.", scores.join(", "));
    }
    let _ = writeln!(s, "- **Head classes** ({} heads): {}.", d.classes.total(), d.classes.describe(", "));
    match d.massive.first_layer {
        Some(l) => {
            let dims: Vec<String> = d.massive.dims.iter().take(5).map(|d| d.to_string()).collect();
            let pos: Vec<String> = d.massive.positions.iter().take(5).map(|d| d.to_string()).collect();
            let _ = writeln!(
                s,
                "- **Massive activations** ({}) from layer {l} on, in dims {} at positions {}.",
                massive::criterion(),
                dims.join(", "),
                pos.join(", ")
            );
        }
        None => {
            let _ = writeln!(s, "- **Massive activations:** none (no element with {}).", massive::criterion());
        }
    }
    if let Some((top, n_tokens)) = d.causal.as_ref().and_then(|c| Some((c.top_heads.first()?, c.tokens))) {
        // Below a hundredth of a nat no head can be said to depend on the hidden key.
        let reading = if top.delta_nll >= 0.01 { "the head that depends most on an early key" } else { "negligible: no head depends on these keys" };
        let _ = writeln!(
            s,
            "- **Causal dependency.** The largest single-head effect: hiding key {} from layer {} head {} changes the next-token loss by {:+.3} nats (KL {:.3}) over {n_tokens} tokens — {reading}.",
            top.key_pos,
            top.layer,
            top.head.unwrap_or(0),
            top.delta_nll,
            top.kl,
        );
    }
    s.push('\n');
}

/// Mean α_0 over the heads of windowed layers and of global ones, for a model with both.
fn by_window_kind(k: &ByLayerKind) -> String {
    let mean = |side: Option<(f64, usize)>| side.map_or("no heads".into(), |(mean, n)| format!("{mean:.3} ({n} heads)"));
    format!(
        "Mean α_0 on the global layers {}, on the windowed layers {} (α there counts only the queries within a window of position 0).",
        mean(k.global),
        mean(k.windowed)
    )
}

/// The learned sinks' share of the softmax beside α_0.
fn learned_sink_line(ls: &LearnedSinks) -> String {
    let LearnedSinks { heads: n, mean, mean_alpha0, above_half, top } = *ls;
    format!(
        "The sink logits take {:.1}% of a softmax row on average over {n} heads (α_0 beside it: {:.1}%); {above_half} heads give them more than half; the most, layer {} head {}, {:.1}% (its α_0 {:.1}%).",
        100.0 * mean,
        100.0 * mean_alpha0,
        top.0,
        top.1,
        100.0 * top.2,
        100.0 * top.3
    )
}
