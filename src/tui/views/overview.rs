//! Overview: the model's facts, the text, which parts of the run are present, the sink-count
//! recommendation, and the top findings (sink positions, Sink_k^ε, F-Attn, strongest sink heads,
//! head classes, causal dependency, massive activations), and a survey's table when the run was
//! opened through one.

use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::Frame;

use super::{block, heading, kv, quoted, DIM, WARN};
use crate::analysis::findings::{heads_by_alpha0, AnalysisFindings};
use crate::analysis::survey::Survey;
use crate::metrics::massive;
use crate::tui::data::{Data, LayerRow};
use crate::tui::state::App;
use crate::tui::widgets::colour::short;

pub fn render(f: &mut Frame, area: Rect, app: &App) {
    let (left, right) = (model_lines(app), findings_lines(app));
    if area.width >= 100 {
        let lw = area.width * 45 / 100;
        let l = Rect { width: lw, ..area };
        let r = Rect { x: area.x + lw, width: area.width - lw, ..area };
        column(f, l, "Model · text · run", left, app.overview.scroll);
        column(f, r, "Findings", right, app.overview.scroll);
    } else {
        let mut all = left;
        all.push(Line::from(""));
        all.extend(right);
        column(f, area, "Overview", all, app.overview.scroll);
    }
}

fn column(f: &mut Frame, area: Rect, title: &str, lines: Vec<Line<'static>>, scroll: usize) {
    let scroll = scroll.min(lines.len().saturating_sub(1)).min(u16::MAX as usize) as u16;
    f.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }).scroll((scroll, 0)).block(block(title)), area);
}

fn present(name: &str, yes: bool, hint: &str) -> Line<'static> {
    if yes {
        Line::from(vec![Span::raw(format!("  ✓ {name}"))])
    } else {
        Line::from(vec![Span::styled(format!("  ✗ {name}"), Style::new().fg(WARN)), Span::styled(format!("  ← {hint}"), Style::new().fg(DIM))])
    }
}

fn human_count(n: usize) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.2}B", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.1}M", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.1}K", n as f64 / 1e3),
        n => n.to_string(),
    }
}

fn model_lines(app: &App) -> Vec<Line<'static>> {
    let run = &app.run;
    let m = run.model();
    let mut v = vec![
        heading(&format!("{} ({}, {})", run.model_name(), m.architecture, m.format)),
        kv(
            "shape",
            format!(
                "{} layers × {} heads ({} kv) · d_model {} · d_head {} · d_ff {}",
                m.config.n_layers, m.config.n_heads, m.config.n_kv_heads, m.config.d_model, m.config.d_head, m.config.d_ff
            ),
        ),
        kv("size", format!("{} params · context {} · vocab {}", human_count(m.n_params), m.config.context_len, m.config.vocab_size)),
        kv("weights", format!("{} · compute {}", m.quantization, m.compute)),
        kv("rope", format!("{:?} θ={}", m.config.rope_layout, m.config.rope_theta).to_lowercase()),
        kv("source", m.source.clone()),
    ];
    if let Some(sha) = &m.sha256 {
        v.push(kv("sha256", format!("{}…", &sha[..sha.len().min(16)])));
    }
    v.push(Line::from(""));
    v.push(heading("Text"));
    v.push(kv("name", run.text_name()));
    let n = run.tokens().map_or(0, <[_]>::len);
    let mut tok = format!("{n} tokens");
    if let Some(c) = &run.capture {
        if c.truncated_tokens > 0 {
            tok.push_str(&format!(" (+{} dropped by --max-tokens)", c.truncated_tokens));
        }
        if let Some(nll) = &c.nll {
            tok.push_str(&format!(" · perplexity {:.3} over {} predictions", nll.perplexity, nll.scored));
        }
    }
    v.push(kv("length", tok));
    v.push(Line::from(""));
    v.push(heading(&format!("Run {}", run.id())));
    v.push(kv("dir", run.dir.display().to_string()));
    v.push(present("capture.json", run.capture.is_some(), "sinkscope capture -m MODEL -f TEXT -o RUN_DIR"));
    v.push(present("report.json (analysis)", run.analysis.is_some(), "sinkscope analyze -m MODEL -f TEXT -o RUN_DIR"));
    v.push(present("stream.json", run.stream.is_some(), "sinkscope recommend -m MODEL -f TEXT --cache 256 -o RUN_DIR"));
    v.push(present("heatmaps.safetensors", run.heatmaps.is_some(), "sinkscope capture … -o RUN_DIR"));
    v.push(present("reductions.safetensors", run.reductions.is_some(), "sinkscope capture … -o RUN_DIR"));
    if run.needle.is_some() {
        v.push(present("needle.json (pass-key retrieval: the Retrieval view)", true, "sinkscope needle -m MODEL -o RUN_DIR"));
    }
    v.push(Line::from(""));
    v.push(heading("Sink-count recommendation"));
    match run.stream.as_ref().and_then(|s| s.recommendation.as_ref()) {
        Some(r) => {
            let s = r.recommended_sinks.map_or("none needed (nothing was evicted)".to_string(), |s| format!("S = {s}"));
            v.push(Line::from(vec![
                Span::raw("pin "),
                Span::styled(s, Style::new().add_modifier(Modifier::BOLD)),
                Span::raw(format!(" at cache W = {} (δ = {}%)", r.cache, r.delta * 100.0)),
            ]));
            v.push(Line::from(r.verdict.clone()));
        }
        None => v.push(Line::from(Span::styled(
            "no recommendation in this run: sinkscope recommend -m MODEL -f TEXT --cache 256 -o RUN_DIR",
            Style::new().fg(WARN),
        ))),
    }
    v
}

/// The findings column: the survey (when the run is one), sinks, the strongest heads, the
/// causal sweep and massive activations, each rendered from the run's findings values.
fn findings_lines(app: &App) -> Vec<Line<'static>> {
    let mut v = Vec::new();
    if let Some(s) = &app.run.survey {
        survey_lines(s, &mut v);
    }
    sink_lines(app, &mut v);
    v.push(Line::from(""));
    head_lines(&app.data, &mut v);
    v.push(Line::from(""));
    causal_lines(app.data.findings.as_ref(), &mut v);
    v.push(Line::from(""));
    massive_lines(&app.data, &mut v);
    v
}

fn survey_lines(s: &Survey, v: &mut Vec<Line<'static>>) {
    v.push(heading(&format!("Survey of {} models (the Survey view, 7, compares them; Enter there opens another's run)", s.rows.len())));
    v.push(Line::from(Span::styled(
        "  model · Sink_0^ε · F-Attn · window/best after eviction · recommended S · streaming heads · run_dir",
        Style::new().fg(DIM),
    )));
    for r in &s.rows {
        let ratio = r.worst_window_ratio().map_or("-".into(), |x| format!("{x:.2}×"));
        let sinks = r.recommended_sinks().map_or("-".into(), |s| s.to_string());
        let streaming: Vec<String> = r.sweeps.iter().filter_map(|w| Some(format!("{:.0}%@W{}", w.streaming_heads?, w.cache))).collect();
        let streaming = if streaming.is_empty() { "-".to_string() } else { streaming.join(" ") };
        v.push(Line::from(format!("  {} · {:.1}% · {:.3} · {ratio} · S = {sinks} · {streaming} · {}", r.model, r.sink_0, r.f_attn, r.run_dir)));
    }
    v.push(Line::from(""));
}

/// Where the probes sink (positions, Sink_k^ε, F-Attn) and where this text does.
fn sink_lines(app: &App, v: &mut Vec<Line<'static>>) {
    let (run, data) = (&app.run, &app.data);
    v.push(heading("Sinks"));
    match run.analysis.as_ref().zip(data.findings.as_ref()) {
        Some((a, d)) => {
            let token_of = |pos: usize| {
                a.probes
                    .iter()
                    .flat_map(|p| &p.sink_positions)
                    .find(|s| s.pos == pos)
                    .map(|s| crate::tui::data::display_piece(&s.token, data.byte_level))
            };
            let list: Vec<String> = d.sink_positions.iter().take(12).map(|&p| format!("{p} {}", quoted(token_of(p).as_ref()))).collect();
            let more = d.sink_positions.len().saturating_sub(12);
            v.push(kv(
                &format!("positions ({} probes)", d.probes),
                format!("{}{}", list.join(", "), if more > 0 { format!(" +{more}") } else { String::new() }),
            ));
            let t = match (d.probe_lengths.first(), d.probe_lengths.last()) {
                (Some(tmin), Some(tmax)) if tmin != tmax => format!("T = {tmin}–{tmax}"),
                (tmin, _) => format!("T = {}", tmin.copied().unwrap_or(0)),
            };
            v.push(kv("Sink_k^ε", format!("% of (probe, layer, head) with α_k > ε, ε = {}, {t}", d.epsilon)));
            let cells: Vec<String> = d.sink_scores.iter().map(|(k, s)| format!("{k}:{s:.1}")).collect();
            for chunk in cells.chunks(8) {
                v.push(Line::from(format!("  {}", chunk.join("  "))));
            }
            v.push(kv("F-Attn", format!("{:.3} (mean attention to position 0 over layers, heads, probes)", d.f_attn)));
        }
        None => v.push(Line::from(Span::styled("no analysis (report.json): sinkscope analyze -m MODEL -f TEXT -o RUN_DIR", Style::new().fg(WARN)))),
    }
    if !data.text_sinks.is_empty() {
        let list: Vec<String> =
            data.text_sinks.iter().take(6).map(|s| format!("{} {} ({} heads)", s.pos, quoted(data.display.get(s.pos)), s.heads.len())).collect();
        v.push(kv("this text", list.join(", ")));
    }
}

/// The five heads with the largest α_0 and the head classes.
fn head_lines(data: &Data, v: &mut Vec<Line<'static>>) {
    v.push(heading("Strongest sink heads (α_0)"));
    let top: Vec<String> = heads_by_alpha0(&data.alpha).iter().take(5).map(|(l, h, a)| format!("L{l}H{h} {a:.2}")).collect();
    v.push(Line::from(format!("  {}", top.join(" · "))));
    if let Some(d) = &data.findings {
        v.push(kv("head classes", d.classes.describe(" · ")));
    }
}

/// The causal sweep's strongest single heads and whole layer.
fn causal_lines(findings: Option<&AnalysisFindings>, v: &mut Vec<Line<'static>>) {
    v.push(heading("Causal dependency (key masked → ΔNLL)"));
    match findings.and_then(|d| d.causal.as_ref()) {
        Some(c) => {
            v.push(kv("sweep", format!("keys {:?} on {} tokens", c.keys, c.tokens)));
            for r in c.top_heads.iter().take(5) {
                let who = r.head.map_or(format!("layer {}", r.layer), |h| format!("L{}H{h}", r.layer));
                v.push(Line::from(format!("  {who} key {}: ΔNLL {:+.4} · KL {}", r.key_pos, r.delta_nll, short(r.kl))));
            }
            if let Some(r) = &c.top_layer {
                v.push(Line::from(format!("  whole layer {} key {}: ΔNLL {:+.4}", r.layer, r.key_pos, r.delta_nll)));
            }
        }
        None => v.push(Line::from(Span::styled("no causal sweep: sinkscope analyze -m MODEL -f TEXT -o RUN_DIR", Style::new().fg(DIM)))),
    }
}

/// Massive activations: the analysis's, else this text's per-layer magnitudes.
fn massive_lines(data: &Data, v: &mut Vec<Line<'static>>) {
    v.push(heading(&format!("Massive activations ({})", massive::criterion())));
    let massive_layers: Vec<&LayerRow> = data.layers.iter().filter(|l| !l.massive_dims.is_empty() || l.massive().next().is_some()).collect();
    let analysed = data.findings.as_ref().map(|d| &d.massive);
    match (analysed, massive_layers.first()) {
        (Some(m), _) if m.first_layer.is_some() => {
            v.push(kv("first layer", m.first_layer.map_or("-".into(), |l| l.to_string())));
            v.push(kv("dims", m.dims.iter().take(8).map(|d| d.to_string()).collect::<Vec<_>>().join(", ")));
            v.push(kv("positions", m.positions.iter().take(8).map(|p| p.to_string()).collect::<Vec<_>>().join(", ")));
        }
        (_, Some(first)) => {
            let mut dims: Vec<usize> = massive_layers.iter().flat_map(|l| l.massive_dims.iter().copied()).collect();
            dims.sort_unstable();
            dims.dedup();
            v.push(kv("first layer (this text)", first.layer.to_string()));
            v.push(kv("dims", dims.iter().take(8).map(|d| d.to_string()).collect::<Vec<_>>().join(", ")));
        }
        _ if data.layers.is_empty() => {
            v.push(Line::from(Span::styled("no per-layer magnitudes: sinkscope capture -m MODEL -f TEXT -o RUN_DIR", Style::new().fg(DIM))))
        }
        _ => {
            let peak = data.layers.iter().max_by(|a, b| a.max_abs.total_cmp(&b.max_abs));
            v.push(Line::from(format!(
                "  none: largest |h| {} (layer {})",
                peak.map_or("-".into(), |p| short(p.max_abs as f64)),
                peak.map_or(0, |p| p.layer)
            )));
        }
    }
}
