//! Survey: the models of a `sinkscope survey` side by side — one row each (Sink_0^ε, F-Attn, what
//! a plain window costs, recommended S, streaming heads, massive activations), α_0 by relative
//! depth and Sink_0 against the window's collapse as charts, the selected model's sweeps and
//! verdict; Enter opens that model's run in every other view.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Chart, Dataset, GraphType, LegendPosition, Paragraph, Wrap};
use ratatui::Frame;

use super::{block, fit, kv, missing, DIM};
use crate::analysis::survey::{Survey, SurveyRow};
use crate::model::decoder::config::describe_windows;
use crate::tui::layout;
use crate::tui::state::App;
use crate::tui::widgets::colour::series;
use crate::tui::widgets::put;

pub fn render(f: &mut Frame, area: Rect, app: &App) {
    let Some(survey) = &app.run.survey else {
        missing(
            f,
            area,
            "Survey",
            "This run was not opened through a survey: no comparison across models to show.",
            "sinkscope survey -m MODEL -m MODEL … -o DIR   then   sinkscope dash DIR",
        );
        return;
    };
    let g = layout::survey(area, survey.rows.len());
    table(f, g.table, app, survey);
    depth_chart(f, g.depth, survey);
    collapse_chart(f, g.scatter, survey);
    details(f, g.details, survey.rows.get(app.survey.row));
}

/// The ratio a model's worst sweep shows, for the table and the scatter.
fn ratio(r: &SurveyRow) -> String {
    r.worst_window_ratio().map_or("-".into(), |x| format!("{x:.2}×"))
}

fn streaming(r: &SurveyRow) -> String {
    let cells: Vec<String> = r.sweeps.iter().filter_map(|w| Some(format!("{:.0}%@{}", w.streaming_heads?, w.cache))).collect();
    if cells.is_empty() {
        "-".into()
    } else {
        cells.join(" ")
    }
}

fn table(f: &mut Frame, area: Rect, app: &App, survey: &Survey) {
    f.render_widget(block(format!("{} models (↑/↓ select, Enter open its run; ● the run shown in the other views)", survey.rows.len())), area);
    let inner = layout::inner(area);
    if inner.height == 0 {
        return;
    }
    let buf = f.buffer_mut();
    let w = inner.width as usize;
    let rest = 10 + 10 + 9 + 8 + 12 + 4 + 16 + 16;
    let name_w = w.saturating_sub(3 + rest).clamp(8, 40);
    let header = format!(
        "   {:<name_w$} {:>9} {:>9} {:>8} {:>7} {:>11} {:>3} {:>15} {:>15}",
        "model", "family", "params", "Sink_0", "F-Attn", "window/best", "S", "streaming heads", "max |h| (×med)"
    );
    put(buf, inner.x, inner.y, header, w, Style::new().fg(DIM).add_modifier(Modifier::BOLD));
    let open = survey.rows.iter().position(|r| app.run.dir.ends_with(&r.run_dir));
    let visible = inner.height.saturating_sub(1) as usize;
    let first = layout::scroll(app.survey.row, survey.rows.len(), visible);
    for (i, r) in survey.rows.iter().enumerate().skip(first).take(visible) {
        let y = inner.y + 1 + (i - first) as u16;
        put(buf, inner.x, y, if Some(i) == open { " ●" } else { "  " }, 2, Style::new().fg(series(i)));
        let line = format!(
            " {:<name_w$} {:>9} {:>9} {:>7.1}% {:>7.3} {:>11} {:>3} {:>15} {:>15}",
            fit(&r.model, name_w),
            fit(&r.family, 9),
            format!("{:.1} M", r.n_params as f64 / 1e6),
            r.sink_0,
            r.f_attn,
            ratio(r),
            r.recommended_sinks().map_or("-".into(), |s| s.to_string()),
            fit(&streaming(r), 15),
            fit(&format!("{:.0} (×{:.0})", r.max_activation, r.max_to_median), 15),
        );
        let style = if i == app.survey.row { Style::new().add_modifier(Modifier::REVERSED) } else { Style::new() };
        put(buf, inner.x + 2, y, line, w.saturating_sub(2), style);
    }
}

fn depth_chart(f: &mut Frame, area: Rect, survey: &Survey) {
    let lines: Vec<Vec<(f64, f64)>> = survey
        .rows
        .iter()
        .map(|r| {
            r.alpha0_by_layer
                .iter()
                .enumerate()
                .filter(|(_, a)| a.is_finite())
                .map(|(l, &a)| (l as f64 / (r.n_layers.max(2) - 1) as f64, a))
                .collect()
        })
        .collect();
    let top = lines.iter().flatten().map(|p| p.1).fold(0.05, f64::max) * 1.05;
    let datasets: Vec<Dataset> = survey
        .rows
        .iter()
        .zip(&lines)
        .enumerate()
        .map(|(i, (r, pts))| {
            Dataset::default().name(r.model.clone()).marker(Marker::Braille).graph_type(GraphType::Line).style(Style::new().fg(series(i))).data(pts)
        })
        .collect();
    let chart = Chart::new(datasets)
        .block(block("mean α_0 (attention on the first token) by relative depth"))
        .x_axis(
            Axis::default()
                .title("depth")
                .bounds([0.0, 1.0])
                .labels(vec![Span::raw("0"), Span::raw("0.5"), Span::raw("1")])
                .style(Style::new().fg(DIM)),
        )
        .y_axis(
            Axis::default()
                .title("α_0")
                .bounds([0.0, top])
                .labels(vec![Span::raw("0"), Span::raw(format!("{:.2}", top / 2.0)), Span::raw(format!("{top:.2}"))])
                .style(Style::new().fg(DIM)),
        )
        .legend_position(Some(LegendPosition::TopLeft))
        .hidden_legend_constraints((ratatui::layout::Constraint::Percentage(60), ratatui::layout::Constraint::Percentage(60)));
    f.render_widget(chart, area);
}

fn collapse_chart(f: &mut Frame, area: Rect, survey: &Survey) {
    let points: Vec<Vec<(f64, f64)>> = survey.rows.iter().map(|r| r.worst_window_ratio().map(|y| vec![(r.sink_0, y)]).unwrap_or_default()).collect();
    let top = points.iter().flatten().map(|p| p.1).fold(1.1, f64::max) * 1.1;
    let datasets: Vec<Dataset> = survey
        .rows
        .iter()
        .zip(&points)
        .enumerate()
        .map(|(i, (r, pts))| {
            Dataset::default().name(r.model.clone()).marker(Marker::Block).graph_type(GraphType::Scatter).style(Style::new().fg(series(i))).data(pts)
        })
        .collect();
    let chart = Chart::new(datasets)
        .block(block("Sink_0^ε against the window's cost (one point per model)"))
        .x_axis(
            Axis::default()
                .title("Sink_0 %")
                .bounds([0.0, 100.0])
                .labels(vec![Span::raw("0"), Span::raw("50"), Span::raw("100")])
                .style(Style::new().fg(DIM)),
        )
        .y_axis(
            Axis::default()
                .title("window/best")
                .bounds([0.9, top])
                .labels(vec![Span::raw("0.9"), Span::raw(format!("{:.1}", (0.9 + top) / 2.0)), Span::raw(format!("{top:.1}"))])
                .style(Style::new().fg(DIM)),
        )
        .legend_position(Some(LegendPosition::TopLeft))
        .hidden_legend_constraints((ratatui::layout::Constraint::Percentage(60), ratatui::layout::Constraint::Percentage(60)));
    f.render_widget(chart, area);
}

fn details(f: &mut Frame, area: Rect, row: Option<&SurveyRow>) {
    let Some(r) = row else { return };
    let mut v = vec![Line::from(vec![
        Span::styled(format!("{} ", r.model), Style::new().fg(Color::White).add_modifier(Modifier::BOLD)),
        Span::raw(r.verdict()),
    ])];
    for w in &r.sweeps {
        let p = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.3}"));
        let text = std::path::Path::new(&w.text).file_name().map_or(w.text.clone(), |n| n.to_string_lossy().into_owned());
        v.push(kv(
            &format!("  W = {} on {} tokens of {text}:", w.cache, w.tokens),
            format!(
                "window {} · best {} · S = {} · streaming heads {}",
                p(w.window_ppl),
                p(w.best_ppl),
                w.recommended_sinks.map_or("-".into(), |s| s.to_string()),
                w.streaming_heads.map_or("not measured".into(), |s| format!("{s:.0}%"))
            ),
        ));
    }
    let windowed = if r.windowed_layers.is_empty() {
        "all layers global".to_string()
    } else {
        format!("{} of {} layers windowed (W = {})", r.windowed_layers.len(), r.n_layers, describe_windows(&r.windows))
    };
    let massive = r.first_massive_layer.map_or("no massive activations".into(), |l| format!("massive from layer {l}"));
    v.push(Line::from(Span::styled(
        format!("  {windowed} · learned sinks: {} · {massive} · run: {}", if r.learned_sinks { "yes" } else { "no" }, r.run_dir),
        Style::new().fg(DIM),
    )));
    f.render_widget(Paragraph::new(v).wrap(Wrap { trim: false }).block(block("Selected model")), area);
}
