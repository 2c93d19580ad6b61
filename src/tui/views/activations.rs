//! Activations: per-layer max |h| and median |h| of the residual stream on a log scale (braille
//! lines, with the massive bar |h| = 100), the per-layer table with where each maximum sits, and
//! the massive dims and positions (Sun et al. 2024); below them, when the run has one, what
//! activation quantization did.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Chart, Dataset, GraphType, Paragraph, Wrap};
use ratatui::Frame;

use super::{block, heading, kv, missing, quoted, DIM};
use crate::metrics::massive::{self, MASSIVE_ABS};
use crate::tui::layout::{self, scroll};
use crate::tui::state::App;
use crate::tui::widgets::colour::{decade, series, short};
use crate::tui::widgets::put;

/// log10 of a magnitude, floored so a zero median stays on the chart.
fn log(v: f32) -> f64 {
    (v.abs() as f64).max(1e-6).log10()
}

pub fn render(f: &mut Frame, area: Rect, app: &App) {
    let layers = &app.data.layers;
    let area = match &app.run.quant {
        Some(q) if layers.is_empty() => return super::quant::render(f, area, q),
        Some(q) => {
            // The quantization table under the magnitudes: its rows and verdicts, the (wrapped)
            // text line, the header, the baseline and the borders.
            let want = (q.cases.len() + q.skip_comparisons.len() + 6) as u16;
            let h = want.min(area.height / 2);
            super::quant::render(f, Rect { y: area.bottom() - h, height: h, ..area }, q);
            Rect { height: area.height - h, ..area }
        }
        None => area,
    };
    if layers.is_empty() {
        missing(
            f,
            area,
            "Activations",
            "This run has no per-layer magnitudes (needs capture.json, or report.json from analyze).",
            "sinkscope capture -m MODEL -f TEXT -o RUN_DIR",
        );
        return;
    }
    let chart_h = area.height * 45 / 100;
    let chart_area = Rect { height: chart_h, ..area };
    let bottom = Rect { y: area.y + chart_h, height: area.height - chart_h, ..area };
    let side_w = if bottom.width >= 100 { bottom.width * 38 / 100 } else { 0 };
    let table = Rect { width: bottom.width - side_w, ..bottom };
    let side_area = Rect { x: table.right(), width: side_w, ..bottom };
    chart(f, chart_area, app);
    table_view(f, table, app);
    if side_w > 2 {
        side(f, side_area, app);
    }
}

fn chart(f: &mut Frame, area: Rect, app: &App) {
    let layers = &app.data.layers;
    let max: Vec<(f64, f64)> = layers.iter().map(|l| (l.layer as f64, log(l.max_abs))).collect();
    let median: Vec<(f64, f64)> = layers.iter().map(|l| (l.layer as f64, log(l.median_abs))).collect();
    let last = layers.last().map_or(1.0, |l| l.layer.max(1) as f64);
    let ys = max.iter().chain(&median).map(|p| p.1);
    let (lo, hi) = ys.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), y| (a.min(y), b.max(y)));
    let (lo, hi) = ((lo.min(log(MASSIVE_ABS)) - 0.2).floor(), (hi.max(log(MASSIVE_ABS)) + 0.2).ceil());
    let bar = [(0.0, log(MASSIVE_ABS)), (last, log(MASSIVE_ABS))];
    let sel = app.data.layers.get(app.activations.layer).map_or(0.0, |l| l.layer as f64);
    let cursor = [(sel, lo), (sel, hi)];
    let datasets = vec![
        Dataset::default().name("|h| = 100").marker(Marker::Braille).graph_type(GraphType::Line).style(Style::new().fg(DIM)).data(&bar),
        Dataset::default().name("selected").marker(Marker::Braille).graph_type(GraphType::Line).style(Style::new().fg(Color::DarkGray)).data(&cursor),
        Dataset::default().name("median |h|").marker(Marker::Braille).graph_type(GraphType::Line).style(Style::new().fg(series(0))).data(&median),
        Dataset::default().name("max |h|").marker(Marker::Braille).graph_type(GraphType::Line).style(Style::new().fg(series(1))).data(&max),
    ];
    let y_labels: Vec<Span> = (lo as i32..=hi as i32).map(|e| Span::raw(decade(e))).collect();
    let y_labels = if y_labels.len() > 6 { y_labels.into_iter().step_by(2).collect() } else { y_labels };
    let x_labels = vec![Span::raw("0"), Span::raw(format!("{}", (last / 2.0).round())), Span::raw(format!("{last}"))];
    let c = Chart::new(datasets)
        .block(block("max |h| (yellow) vs median |h| (cyan) per layer · log scale · grey: |h| = 100"))
        .x_axis(Axis::default().title("layer").bounds([0.0, last]).labels(x_labels).style(Style::new().fg(DIM)))
        .y_axis(Axis::default().title("|h|").bounds([lo, hi]).labels(y_labels).style(Style::new().fg(DIM)))
        .legend_position(None);
    f.render_widget(c, area);
}

fn table_view(f: &mut Frame, area: Rect, app: &App) {
    f.render_widget(block("Per layer (resid_post)"), area);
    let inner = layout::inner(area);
    if inner.height == 0 {
        return;
    }
    let buf = f.buffer_mut();
    let header =
        format!("  {:>5} {:>9} {:>6} {:>5} {:<10} {:>9} {:>9}  {}", "layer", "max|h|", "pos", "dim", "token", "median", "max/med", "massive dims");
    put(buf, inner.x, inner.y, header, inner.width as usize, Style::new().fg(DIM).add_modifier(Modifier::BOLD));
    let rows = inner.height as usize - 1;
    let layers = &app.data.layers;
    let first = scroll(app.activations.layer, layers.len(), rows);
    for (r, l) in layers.iter().enumerate().skip(first).take(rows) {
        let token = l.max_pos.map_or(String::new(), |p| quoted(app.data.display.get(p)));
        let ratio = if l.median_abs > 0.0 { short((l.max_abs / l.median_abs) as f64) } else { "-".into() };
        let dims: Vec<String> = l.massive_dims.iter().take(6).map(|d| d.to_string()).collect();
        let mark = if r == app.activations.layer { "▶ " } else { "  " };
        let line = format!(
            "{mark}{:>5} {:>9} {:>6} {:>5} {:<10} {:>9} {:>9}  {}",
            l.layer,
            short(l.max_abs as f64),
            l.max_pos.map_or("-".into(), |p| p.to_string()),
            l.max_dim.map_or("-".into(), |d| d.to_string()),
            super::fit(&token, 10),
            short(l.median_abs as f64),
            ratio,
            dims.join(",")
        );
        let mut style = Style::new();
        if !l.massive_dims.is_empty() || l.massive().next().is_some() {
            style = style.fg(Color::LightRed);
        }
        if r == app.activations.layer {
            style = style.add_modifier(Modifier::REVERSED);
        }
        put(buf, inner.x, inner.y + 1 + (r - first) as u16, line, inner.width as usize, style);
    }
}

fn side(f: &mut Frame, area: Rect, app: &App) {
    let mut v = vec![heading("Massive activations")];
    v.push(Line::from(Span::styled(massive::criterion(), Style::new().fg(DIM))));
    if let Some(a) = &app.run.analysis {
        let m = &a.massive;
        v.push(kv(&format!("over {} probes: first layer", m.n_probes), m.first_layer.map_or("none".into(), |l| l.to_string())));
        if !m.dims.is_empty() {
            v.push(kv("dims", m.dims.iter().take(10).map(|d| d.to_string()).collect::<Vec<_>>().join(", ")));
            v.push(kv("positions", m.positions.iter().take(10).map(|p| p.to_string()).collect::<Vec<_>>().join(", ")));
            let rec: Vec<String> = m.recurring_dims.iter().take(6).map(|(d, n)| format!("{d} ({n}/{})", m.n_probes)).collect();
            v.push(kv("recurring", rec.join(", ")));
        }
    }
    if let Some(l) = app.data.layers.get(app.activations.layer) {
        v.push(Line::from(""));
        v.push(heading(&format!("Layer {}: largest elements", l.layer)));
        for &(pos, dim, value) in l.top.iter().take(8) {
            let flag = if l.is_massive(value) { " massive" } else { "" };
            v.push(Line::from(format!(
                "  pos {pos:>5} {} dim {dim:>4}: {}{flag}",
                super::fit(&quoted(app.data.display.get(pos)), 9),
                short(value as f64)
            )));
        }
    }
    f.render_widget(Paragraph::new(v).wrap(Wrap { trim: false }).block(block("Massive dims and positions")), area);
}
