//! Streaming: rolling perplexity against tokens for every KV-cache policy (braille lines), the
//! first eviction marked, the sweep table with the recommended sink count, the verdict, what a
//! score-based policy kept, the per-head frontier when the run has one, and what a rounding cache
//! moved (its KL, the heads that lost most sink attention).

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Chart, Dataset, GraphType, Paragraph, Wrap};
use ratatui::Frame;

use super::{block, heading, kv, missing, DIM};
use crate::kv::cache_frontier::CacheFrontier;
use crate::report::records::StreamReport;
use crate::tui::layout;
use crate::tui::state::App;
use crate::tui::widgets::colour::{series, short};
use crate::tui::widgets::put;

pub fn render(f: &mut Frame, area: Rect, app: &App) {
    let Some(stream) = &app.run.stream else {
        missing(
            f,
            area,
            "Streaming",
            "No stream.json in this run: no KV-cache streaming results to show.",
            "sinkscope recommend -m MODEL -f TEXT --cache 256 -o RUN_DIR   (or sinkscope stream … -o RUN_DIR)",
        );
        return;
    };
    let g = layout::streaming(area);
    chart(f, g.chart, app);
    table(f, g.table, app);
    let mut v = Vec::new();
    match &stream.recommendation {
        Some(r) => {
            let s = r.recommended_sinks.map_or("none needed".to_string(), |s| format!("S = {s}"));
            v.push(Line::from(vec![
                Span::raw("Pin "),
                Span::styled(s, Style::new().fg(Color::LightGreen).add_modifier(Modifier::BOLD)),
                Span::raw(format!(" sink tokens at W = {}", r.cache)),
            ]));
            v.push(kv(
                "sweep",
                format!(
                    "{} tokens · δ = {}% · first eviction at step {}",
                    r.tokens,
                    r.delta * 100.0,
                    r.first_eviction_step.map_or("-".into(), |s| s.to_string())
                ),
            ));
            v.push(Line::from(""));
            v.push(Line::from(r.verdict.clone()));
        }
        None => match &app.run.per_head {
            _ if stream.cache_frontier.is_some() => v.extend(stream.cache_frontier.as_ref().map(frontier_lines).unwrap_or_default()),
            Some(fr) => {
                v.push(heading(&format!("Per-head policies, W = {}", fr.cache)));
                v.push(Line::from(Span::styled("PPL from step W: per-head · uniform sink, same memory", Style::new().fg(DIM))));
                for r in &fr.rows {
                    let mib = r.bytes as f64 / (1 << 20) as f64;
                    v.push(kv(&format!("{:>3.0}%", 100.0 * r.share), format!("{:.3} · {:.3} ({mib:.2} MiB)", r.ppl_from_w, r.uniform_ppl_from_w)));
                }
            }
            None => v.push(Line::from(Span::styled(
                "stream.json from `sinkscope stream`: one policy, no sweep (run `recommend` for the sink-count table).",
                Style::new().fg(DIM),
            ))),
        },
    }
    v.extend(rounding_lines(stream));
    v.push(Line::from(""));
    v.push(kv("text", format!("{} from char {}", stream.text_source, stream.start_char)));
    // What the selected score-based policy kept: do its heavy hitters rediscover the sinks?
    if let Some(k) = stream.outcomes.get(app.streaming.policy).and_then(|o| o.kept) {
        let shares: Vec<String> = k.kept_first_share.iter().map(|s| format!("{:.0}%", 100.0 * s)).collect();
        v.push(kv("kept 0–3", format!("{} of (layer, KV head, step)", shares.join(" / "))));
        v.push(kv("mean age", format!("{:.1} tokens", k.mean_age)));
    }
    f.render_widget(Paragraph::new(v).wrap(Wrap { trim: false }).block(block("Recommendation")), g.verdict);
}

/// `recommend --cache-types`: the configurations on the frontier and the verdict.
fn frontier_lines(f: &CacheFrontier) -> Vec<Line<'static>> {
    // The verdict first: the panel is short, the frontier's rows can be many.
    let mut v = vec![
        heading("Cache types"),
        Line::from(f.verdict.clone()),
        Line::from(""),
        heading(&format!("The frontier (exact full cache {:.3})", f.reference_ppl)),
    ];
    for (i, r) in f.rows.iter().enumerate().filter(|(_, r)| r.on_frontier) {
        let line = kv(&format!("{:>5.1}%", 100.0 * r.memory_share), format!("{:+.1}% · {} · {}", 100.0 * (r.ratio - 1.0), r.format, r.policy));
        v.push(if f.chosen == Some(i) { line.style(Style::new().fg(Color::LightGreen)) } else { line });
    }
    v
}

/// A rounding cache's format, its KL from the exact cache and the heads whose attention it moved
/// most off the sinks (`stream --kl`).
fn rounding_lines(stream: &StreamReport) -> Vec<Line<'static>> {
    let Some(rounding) = stream.cache_rounding else { return Vec::new() };
    let mut v = vec![Line::from(""), heading(&format!("Cache {}", rounding.name()))];
    if let Some(kl) = stream.kl_from_exact.as_ref().filter(|k| !k.is_empty()) {
        v.push(kv("KL", format!("{:.4} nats per token from the exact cache (mean)", kl.iter().sum::<f64>() / kl.len() as f64)));
    }
    let Some(e) = &stream.cache_error_by_head else { return v };
    let times = |r: Option<f64>| r.map_or("n/a".to_string(), |r| format!("{r:.2}×"));
    let (keys, values, keys_abs) = e.sink_error_ratios();
    v.push(kv(
        "sink error",
        format!(
            "keys {} ({} absolute) · values {} the other positions' (0–{})",
            times(keys),
            times(keys_abs),
            times(values),
            e.sink_positions.saturating_sub(1)
        ),
    ));
    v.push(Line::from(Span::styled("moved most off the sinks (exact → rounded):", Style::new().fg(DIM))));
    for h in e.most_moved().into_iter().take(5) {
        v.push(kv(&format!("L{} H{}", h.layer, h.head), format!("{:.3} → {:.3}", h.sink_mass_exact, h.sink_mass_rounded)));
    }
    v
}

fn chart(f: &mut Frame, area: Rect, app: &App) {
    let curves = &app.streaming.curves;
    let x_max = curves.iter().filter_map(|c| c.points.last()).map(|p| p.0).fold(1.0, f64::max);
    // The y axis is ln(PPL), labelled in PPL.
    let ys = curves.iter().flat_map(|c| c.log_points.iter().map(|p| p.1)).filter(|y| y.is_finite());
    let (lo, hi) = ys.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), y| (a.min(y), b.max(y)));
    let (lo, hi) = if lo.is_finite() { (lo, hi) } else { (0.0, 1.0) };
    let pad = ((hi - lo) * 0.05).max(1e-3);
    let (lo, hi) = (lo - pad, hi + pad);
    let eviction = curves.iter().filter_map(|c| c.first_eviction).min();
    let ev_line = eviction.map(|e| [(e as f64, lo), (e as f64, hi)]);
    let cliff = app.streaming.curves.get(app.streaming.policy).and_then(|c| c.cliff).map(|s| [(s as f64, lo), (s as f64, hi)]);
    let mut datasets = Vec::new();
    if let Some(line) = &ev_line {
        datasets.push(
            Dataset::default().name("first eviction").marker(Marker::Braille).graph_type(GraphType::Line).style(Style::new().fg(DIM)).data(line),
        );
    }
    if let Some(line) = &cliff {
        datasets
            .push(Dataset::default().name("cliff").marker(Marker::Braille).graph_type(GraphType::Line).style(Style::new().fg(Color::Red)).data(line));
    }
    // The selected policy is drawn last, on top of the others.
    let order = (0..curves.len()).filter(|&i| i != app.streaming.policy).chain((app.streaming.policy < curves.len()).then_some(app.streaming.policy));
    for i in order {
        datasets.push(
            Dataset::default()
                .name(curves[i].label.clone())
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(Style::new().fg(series(i)))
                .data(&curves[i].log_points),
        );
    }
    let mid = (lo + hi) / 2.0;
    let title = format!(
        "perplexity (log scale), rolling {} tokens, per policy · grey line: first eviction{}",
        app.streaming.window,
        eviction.map_or(String::new(), |e| format!(" (step {e})"))
    );
    let c = Chart::new(datasets)
        .block(block(title))
        .x_axis(
            Axis::default()
                .title("token")
                .bounds([0.0, x_max])
                .labels(vec![Span::raw("0"), Span::raw(format!("{:.0}", x_max / 2.0)), Span::raw(format!("{x_max:.0}"))])
                .style(Style::new().fg(DIM)),
        )
        .y_axis(
            Axis::default()
                .title("PPL")
                .bounds([lo, hi])
                .labels(vec![Span::raw(short(lo.exp())), Span::raw(short(mid.exp())), Span::raw(short(hi.exp()))])
                .style(Style::new().fg(DIM)),
        )
        .legend_position(None);
    f.render_widget(c, area);
}

fn table(f: &mut Frame, area: Rect, app: &App) {
    let Some(stream) = &app.run.stream else { return };
    f.render_widget(block("Policies (↑/↓ select, w window)"), area);
    let inner = layout::inner(area);
    if inner.height == 0 {
        return;
    }
    let buf = f.buffer_mut();
    let w = inner.width as usize;
    // Columns after the label: marker and swatch (3), star (3), then the numbers.
    let label_w = w.saturating_sub(3 + 3 + 10 + 11 + 7 + 7 + 8).clamp(8, 44);
    let header = format!("      {:<label_w$} {:>9} {:>10} {:>6} {:>6} {:>7}", "policy", "PPL", "after ev.", "×best", "cliff", "tok/s");
    put(buf, inner.x, inner.y, header, w, Style::new().fg(DIM).add_modifier(Modifier::BOLD));
    let rec = stream.recommendation.as_ref();
    for (i, o) in stream.outcomes.iter().enumerate().take(inner.height as usize - 1) {
        let row = rec.and_then(|r| r.table.iter().find(|t| t.label == o.label));
        let recommended = rec.is_some_and(|r| r.recommended_sinks.is_some() && row.is_some_and(|t| t.sinks == r.recommended_sinks));
        let ratio = row.and_then(|t| t.ratio_to_best).map_or("-".into(), |x| format!("{x:.3}"));
        let y = inner.y + 1 + i as u16;
        put(buf, inner.x, y, if i == app.streaming.policy { "▶" } else { " " }, 1, Style::new());
        put(buf, inner.x + 1, y, "━━", 2, Style::new().fg(series(i)));
        let line = format!(
            " {} {:<label_w$} {:>9} {:>10} {:>6} {:>6} {:>7}",
            if recommended { "★" } else { " " },
            super::fit(&o.label, label_w),
            format!("{:.3}", o.ppl),
            match (o.ppl_after_eviction, row.and_then(|t| t.ppl_after_eviction_ci)) {
                // An estimate from a sample of the steps: its interval is on the line below the table.
                (Some(p), Some(_)) => format!("≈{p:.3}"),
                (Some(p), None) => format!("{p:.3}"),
                (None, _) => "-".into(),
            },
            ratio,
            o.cliff_step.map_or("none".into(), |s| s.to_string()),
            format!("{:.0}", o.tokens_per_s)
        );
        let mut style = Style::new();
        if recommended {
            style = style.fg(Color::LightGreen);
        }
        if i == app.streaming.policy {
            style = style.add_modifier(Modifier::REVERSED);
        }
        put(buf, inner.x + 3, y, line, w.saturating_sub(3), style);
    }
    // Sampled values with their 95% intervals, below the rows when there is room.
    let below = inner.y + 1 + stream.outcomes.len() as u16;
    let notes = rec.into_iter().flat_map(|r| r.table.iter()).filter_map(|t| {
        let [lo, hi] = t.ppl_after_eviction_ci?;
        Some(format!("      ≈ {}: {} post-eviction steps scored, 95% interval {lo:.2}–{hi:.2}", t.label, t.scored_steps.unwrap_or(0)))
    });
    for (j, note) in notes.enumerate() {
        let y = below + j as u16;
        if y >= inner.y + inner.height {
            break;
        }
        put(buf, inner.x, y, note, w, Style::new().fg(DIM));
    }
}
