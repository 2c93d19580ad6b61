//! Grid: the layer × head table coloured by α_k (k chosen with , and .) or by head class, the
//! selected head's evidence beside it, and a legend. Enter (or a second click) opens the head in
//! the heatmap.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::Frame;

use super::{bar, block, heading, kv, missing, quoted, DIM, WARN};
use crate::analysis::heads::HeadClass;
use crate::tui::layout::{self, GridGeom};
use crate::tui::state::{App, GridColour};
use crate::tui::widgets::colour::{class_colour, class_letter, sequential, short, text_on};
use crate::tui::widgets::put;

pub fn render(f: &mut Frame, area: Rect, app: &App) {
    let d = &app.data;
    if d.alpha.iter().flatten().all(Vec::is_empty) {
        missing(f, area, "Grid", "This run has no per-head α (needs capture.json or report.json).", "sinkscope capture -m MODEL -f TEXT -o RUN_DIR");
        return;
    }
    let g = layout::grid(area, d.n_layers, d.n_heads, app.layer);
    let title = match app.grid.colour {
        GridColour::Alpha => format!("α_{} per head", app.grid.k),
        GridColour::Class => "head class (report.json)".to_string(),
    };
    f.render_widget(block(title), g.block);
    draw_cells(f.buffer_mut(), &g, app);
    legend(f.buffer_mut(), &g, app);
    if g.side.width > 2 {
        side_panel(f, g.side, app);
    }
}

fn draw_cells(buf: &mut Buffer, g: &GridGeom, app: &App) {
    let d = &app.data;
    let cw = g.cell_w as usize;
    // Head numbers above the columns.
    for h in 0..d.n_heads {
        if let Some((x, _)) = g.cell_origin(g.first_layer, h) {
            let label = if cw >= 3 || h % 5 == 0 { format!("{h:^cw$}") } else { String::new() };
            put(buf, x, g.y0 - 1, &label, cw.max(h.to_string().len()), Style::new().fg(DIM));
        }
    }
    for r in 0..g.rows {
        let l = g.first_layer + r;
        put(buf, g.block.x + 1, g.y0 + r as u16, format!("L{l}"), g.label_w as usize, Style::new().fg(DIM));
        for h in 0..d.n_heads {
            let Some((x, y)) = g.cell_origin(l, h) else { continue };
            let selected = (l, h) == (app.layer, app.head);
            let (text, style) = cell(app, l, h, cw, selected);
            put(buf, x, y, &text, cw, style);
        }
    }
}

/// One grid cell's text and style.
fn cell(app: &App, l: usize, h: usize, cw: usize, selected: bool) -> (String, Style) {
    let d = &app.data;
    let (inner, bg, fg) = match app.grid.colour {
        GridColour::Alpha => match d.alpha(l, h, app.grid.k) {
            Some(a) => {
                let t = a as f32;
                let label = if cw >= 6 {
                    format!("{a:.2}")
                } else if cw >= 4 {
                    format!("{:.2}", a).trim_start_matches('0').to_string()
                } else {
                    String::new()
                };
                (label, sequential(t), text_on(t))
            }
            None => ("·".into(), Color::Reset, DIM),
        },
        GridColour::Class => match d.class(l, h) {
            Some(c) => (class_letter(c).to_string(), class_colour(c), Color::Black),
            None => ("?".into(), Color::Reset, DIM),
        },
    };
    // Brackets mark the selection in plain text too (snapshots, screen readers, tmux captures).
    let text = if selected && cw >= 3 { format!("[{:^w$}]", inner, w = cw - 2) } else { format!("{:^cw$}", inner) };
    let mut style = Style::new().bg(bg).fg(fg);
    if selected {
        style = style.add_modifier(Modifier::BOLD | Modifier::UNDERLINED);
    }
    (text, style)
}

fn legend(buf: &mut Buffer, g: &GridGeom, app: &App) {
    let inner = layout::inner(g.block);
    if inner.height < 3 {
        return;
    }
    let y = inner.bottom() - 2;
    let w = inner.width as usize;
    match app.grid.colour {
        GridColour::Alpha => {
            let mut x = inner.x;
            put(buf, x, y, "0 ", w, Style::new().fg(DIM));
            x += 2;
            let n = (inner.width.saturating_sub(4)).min(20);
            for i in 0..n {
                let t = i as f32 / (n.max(2) - 1) as f32;
                put(buf, x + i, y, "█", 1, Style::new().fg(sequential(t)));
            }
            put(buf, x + n, y, " 1", 2, Style::new().fg(DIM));
            put(buf, inner.x, y + 1, format!("k={} (, .)  c: by class", app.grid.k), w, Style::new().fg(DIM));
        }
        GridColour::Class => {
            if app.data.classes.is_none() {
                put(buf, inner.x, y, "no head classes: run `sinkscope analyze`", w, Style::new().fg(WARN));
                return;
            }
            let mut x = inner.x;
            let mut row = y;
            for c in [HeadClass::Sink, HeadClass::PreviousToken, HeadClass::Broad, HeadClass::Content] {
                let label = format!(" {} ", class_letter(c));
                let name = format!(" {c} ");
                if x + (label.len() + name.len()) as u16 > inner.right() {
                    x = inner.x;
                    row += 1;
                    if row >= inner.bottom() {
                        break;
                    }
                }
                put(buf, x, row, &label, 3, Style::new().bg(class_colour(c)).fg(Color::Black));
                put(buf, x + 3, row, &name, name.len(), Style::new().fg(DIM));
                x += 3 + name.chars().count() as u16;
            }
        }
    }
}

fn side_panel(f: &mut Frame, area: Rect, app: &App) {
    let d = &app.data;
    let (l, h) = (app.layer, app.head);
    let mut v = vec![heading(&format!("Layer {l} · Head {h}"))];
    if let Some(c) = d.class(l, h) {
        v.push(Line::from(vec![
            Span::styled("class ", Style::new().fg(DIM)),
            Span::styled(format!(" {c} "), Style::new().bg(class_colour(c)).fg(Color::Black)),
        ]));
    }
    if let Some(e) = d.evidence.as_ref().and_then(|e| e.get(l)?.get(h)) {
        v.push(kv("sink α", format!("{:.3}{}", e.sink_alpha, e.sink_pos.map_or(String::new(), |p| format!(" on position {p}")))));
        v.push(kv("prev-token", format!("{:.3}", e.prev_token_mass)));
        v.push(kv("self", format!("{:.3}", e.self_mass)));
        v.push(kv("entropy", format!("{:.2} of uniform", e.normalized_entropy)));
    }
    match d.ablation.get(l).and_then(|r| r.get(h)).copied().flatten() {
        Some((key, dnll, kl)) => v.push(kv("mask key", format!("{key}: ΔNLL {dnll:+.4}, KL {}", short(kl)))),
        None => v.push(Line::from(Span::styled("no causal sweep for this head", Style::new().fg(DIM)))),
    }
    v.push(Line::from(""));
    v.push(Line::from(Span::styled(format!("α_k, k < {}, from {}", d.alpha_k, d.alpha_source), Style::new().fg(DIM))));
    let bar_w = (area.width as usize).saturating_sub(2 + 4 + 7 + 8).max(4);
    let same_text = d.alpha_source.ends_with("(capture.json)");
    for k in 0..d.alpha_k {
        let Some(a) = d.alpha(l, h, k) else { break };
        let token = if same_text { super::fit(&quoted(d.display.get(k)), 7) } else { String::new() };
        let style = if k == app.grid.k { Style::new().fg(Color::White).add_modifier(Modifier::BOLD) } else { Style::new() };
        v.push(Line::from(vec![
            Span::styled(format!("{k:>3} "), Style::new().fg(DIM)),
            Span::styled(format!("{:<w$}", bar(a, bar_w), w = bar_w), style.fg(sequential(a as f32))),
            Span::styled(format!(" {a:.3}"), style),
            Span::styled(format!(" {token}"), Style::new().fg(DIM)),
        ]));
    }
    v.push(Line::from(""));
    v.push(Line::from(Span::styled("Enter: open in heatmap", Style::new().fg(DIM))));
    f.render_widget(Paragraph::new(v).wrap(Wrap { trim: false }).block(block("Selected head")), area);
}
