//! Retrieval: `sinkscope needle`'s pass-key sweep — per policy the accuracy with the needle within
//! and beyond its budget, the selected policy's depth × length grid of rank-1 accuracy (cells
//! coloured red to green), and which heads retrieve when the run measured them.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::Frame;

use super::{block, fit, kv, missing, DIM};
use crate::analysis::needle::{budget_split, NeedleHeads, NeedleReport};
use crate::report::needle::accuracy_rgb;
use crate::tui::layout;
use crate::tui::state::App;
use crate::tui::widgets::put;

pub fn render(f: &mut Frame, area: Rect, app: &App) {
    let Some(r) = &app.run.needle else {
        missing(
            f,
            area,
            "Retrieval",
            "No needle.json in this run: no pass-key retrieval results to show.",
            "sinkscope needle -m MODEL -f BOOK --lengths 512,1024 --cache 256 [--retrieval-heads] -o RUN_DIR",
        );
        return;
    };
    let selected = app.retrieval.policy.min(r.policies.len().saturating_sub(1));
    let rows = (r.policies.len() as u16 + 3).min(area.height / 2).max(4);
    let [top, bottom] = Layout::vertical([Constraint::Length(rows), Constraint::Min(0)]).areas(area);
    let [grid_area, heads_area] = Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(bottom);
    table(f, top, r, selected);
    grid(f, grid_area, r, selected);
    match &r.heads {
        Some(h) => heads(f, heads_area, h),
        None => f.render_widget(
            Paragraph::new(vec![
                Line::from("Which heads retrieve was not measured in this run."),
                Line::from(Span::styled("add --retrieval-heads to sinkscope needle", Style::new().fg(DIM))),
            ])
            .wrap(Wrap { trim: false })
            .block(block("Heads")),
            heads_area,
        ),
    }
}

/// "first% / exact% of n", or "—".
fn side(v: Option<(usize, f64, f64)>) -> String {
    v.map_or("—".to_string(), |(n, rank, exact)| format!("{:.0}% / {:.0}% of {n}", rank * 100.0, exact * 100.0))
}

fn table(f: &mut Frame, area: Rect, r: &NeedleReport, selected: usize) {
    let s = &r.settings;
    f.render_widget(
        block(format!(
            "Pass-key retrieval · {} trials per cell · key ranked among {} (chance {:.0}%) · ↑/↓ select",
            s.trials,
            s.distractors + 1,
            100.0 / (s.distractors + 1) as f64
        )),
        area,
    );
    let inner = layout::inner(area);
    if inner.height == 0 {
        return;
    }
    let buf = f.buffer_mut();
    let w = inner.width as usize;
    let label_w = w.saturating_sub(2 + 2 * 26 + 2).clamp(8, 90);
    let header = format!("  {:<label_w$} {:>25} {:>25}", "policy", "within W: first / exact", "beyond W: first / exact");
    put(buf, inner.x, inner.y, header, w, Style::new().fg(DIM).add_modifier(Modifier::BOLD));
    let visible = inner.height.saturating_sub(1) as usize;
    let first = layout::scroll(selected, r.policies.len(), visible);
    for (i, p) in r.policies.iter().enumerate().skip(first).take(visible) {
        let split = budget_split(&r.cells, &p.label);
        let line = format!(
            "{} {:<label_w$} {:>25} {:>25}",
            if i == selected { "▶" } else { " " },
            fit(&p.label, label_w),
            side(split.within),
            side(split.beyond)
        );
        let style = if i == selected { Style::new().add_modifier(Modifier::BOLD) } else { Style::new() };
        put(buf, inner.x, inner.y + 1 + (i - first) as u16, line, w, style);
    }
}

fn accuracy_colour(v: f64) -> Color {
    let (r, g, b) = accuracy_rgb(v);
    Color::Rgb(r, g, b)
}

fn grid(f: &mut Frame, area: Rect, r: &NeedleReport, selected: usize) {
    let Some(p) = r.policies.get(selected) else { return };
    f.render_widget(block(format!("{} · rank-1 accuracy, depth × length", fit(&p.label, 60))), area);
    let inner = layout::inner(area);
    if inner.height == 0 || inner.width < 8 {
        return;
    }
    let s = &r.settings;
    let buf = f.buffer_mut();
    let cell = 7usize;
    let mut header = format!("{:>6}", "depth");
    for l in &s.lengths {
        header += &format!("{l:>cell$}");
    }
    put(buf, inner.x, inner.y, header, inner.width as usize, Style::new().fg(DIM).add_modifier(Modifier::BOLD));
    for (row, &d) in s.depths.iter().enumerate().take(inner.height.saturating_sub(1) as usize) {
        let y = inner.y + 1 + row as u16;
        put(buf, inner.x, y, format!("{d:>6.2}"), inner.width as usize, Style::new().fg(DIM));
        for (col, &l) in s.lengths.iter().enumerate() {
            let x = inner.x + 6 + (col * cell) as u16;
            if x + cell as u16 > inner.right() {
                break;
            }
            let found = r.cells.iter().find(|c| c.policy == p.label && c.length == l && c.depth == d);
            let (text, style) = match found {
                Some(c) => (format!("{:>5.0}% ", c.rank_accuracy * 100.0), Style::new().fg(Color::Black).bg(accuracy_colour(c.rank_accuracy))),
                None => (format!("{:>6} ", "—"), Style::new().fg(DIM)),
            };
            put(buf, x + 1, y, text, cell - 1, style);
        }
    }
}

fn heads(f: &mut Frame, area: Rect, h: &NeedleHeads) {
    let mut v = vec![
        kv("measured on", format!("{} prompts of {} tokens · dense answer NLL {:.2}", h.effects.prompts, h.length, h.effects.answer_nll)),
        Line::from(Span::styled(
            format!("{:<10} {:>9}  {}", "KV head", "ΔNLL", "rank by attention outside S+R (● kept whole)"),
            Style::new().fg(DIM),
        )),
    ];
    for (l, kv_head, d, rank) in h.leaders(area.height.saturating_sub(6).max(1) as usize) {
        let whole = h.full_by_needle.get(l).and_then(|r| r.get(kv_head)).copied().unwrap_or(false);
        v.push(Line::from(format!("{:<10} {d:>+9.3}  {rank} {}", format!("L{l}.kv{kv_head}"), if whole { "●" } else { "" })));
    }
    v.push(Line::from(""));
    v.push(kv(
        "whole",
        format!(
            "{} of {} KV heads each; {} the same · Spearman ρ {}",
            h.kept(),
            h.full_by_needle.iter().flatten().count(),
            h.overlap,
            h.rank_correlation.map_or("—".into(), |r| format!("{r:.2}"))
        ),
    ));
    f.render_widget(Paragraph::new(v).wrap(Wrap { trim: false }).block(block("Which heads retrieve")), area);
}
