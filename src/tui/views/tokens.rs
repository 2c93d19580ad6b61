//! Tokens: the text as its tokens, each coloured by the attention it receives (α or column mass,
//! for the selected head, its layer, or all heads), sink positions in brackets, the cursor
//! token's numbers and the top receivers beside it.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::Frame;

use super::{block, fit, heading, kv, missing, DIM, WARN};
use crate::tui::layout;
use crate::tui::state::{App, TokenMeasure, TokenScope};
use crate::tui::widgets::colour::{sequential, short, text_on};
use crate::tui::widgets::put;

fn scope_text(app: &App) -> String {
    match app.tokens.scope {
        TokenScope::Head => format!("head L{}H{}", app.layer, app.head),
        TokenScope::Layer => format!("mean of layer {}", app.layer),
        TokenScope::All => "mean of all heads".into(),
    }
}

fn measure_text(m: TokenMeasure) -> &'static str {
    match m {
        TokenMeasure::Alpha => "α_k (mean from queries ≥ k)",
        TokenMeasure::Mass => "column mass / T",
    }
}

/// Positions 0..n whose value is comparable: for α, those that at least a quarter of the queries
/// can see (the last few positions have too few queries for a stable mean); for mass, all.
pub fn comparable(t: usize, measure: TokenMeasure) -> usize {
    match measure {
        TokenMeasure::Alpha => t - (t / 4).min(t.saturating_sub(1)),
        TokenMeasure::Mass => t,
    }
}

/// The colour scale's top: the largest comparable value.
pub fn colour_max(weights: &[f32], measure: TokenMeasure) -> f32 {
    weights[..comparable(weights.len(), measure)].iter().copied().fold(0.0, f32::max)
}

pub fn render(f: &mut Frame, area: Rect, app: &App) {
    let d = &app.data;
    if d.flow.is_empty() {
        missing(f, area, "Tokens", "This run has no tokens (needs capture.json or report.json).", "sinkscope capture -m MODEL -f TEXT -o RUN_DIR");
        return;
    }
    let (text_area, side_area) = layout::tokens(area);
    let weights = app.tokens.weights.as_deref();
    let max = weights.map_or(1.0, |w| colour_max(w, app.tokens.measure)).max(f32::MIN_POSITIVE);
    let title = match weights {
        Some(_) => format!("{} · {}", measure_text(app.tokens.measure), scope_text(app)),
        None => "text (no per-position attention in this run)".into(),
    };
    let bottom = match weights {
        Some(_) => Line::from(vec![
            Span::styled(" [tok] sink position (ε = ", Style::new().fg(DIM)),
            Span::styled(format!("{}", d.epsilon), Style::new().fg(DIM)),
            Span::styled(") · colour 0 ", Style::new().fg(DIM)),
            Span::styled("███", Style::new().fg(sequential(0.0))),
            Span::styled("███", Style::new().fg(sequential(0.5))),
            Span::styled("███", Style::new().fg(sequential(1.0))),
            Span::styled(format!(" {} ", short(max as f64)), Style::new().fg(DIM)),
        ]),
        None => {
            Line::from(Span::styled(" colouring needs reductions.safetensors: sinkscope capture -m MODEL -f TEXT -o RUN_DIR ", Style::new().fg(WARN)))
        }
    };
    f.render_widget(block(title).title_bottom(bottom), text_area);
    let inner = layout::inner(text_area);
    let places = layout::token_layout(&d.flow, inner.width);
    let first = layout::first_token_line(&places, app.tokens.cursor, inner.height);
    let buf = f.buffer_mut();
    for (i, p) in places.iter().enumerate() {
        if p.line < first {
            continue;
        }
        let row = p.line - first;
        if row >= inner.height as usize {
            break;
        }
        let mut style = match weights.and_then(|w| w.get(i)) {
            Some(&v) => {
                let t = (v / max).clamp(0.0, 1.0);
                Style::new().bg(sequential(t)).fg(text_on(t))
            }
            None => Style::new(),
        };
        if d.is_sink.get(i).copied().unwrap_or(false) {
            style = style.add_modifier(Modifier::BOLD);
        }
        if i == app.tokens.cursor {
            style = style.add_modifier(Modifier::REVERSED | Modifier::UNDERLINED);
        }
        put(buf, inner.x + p.x, inner.y + row as u16, &d.flow[i], p.w as usize, style);
    }
    if side_area.width > 2 {
        side(f, side_area, app, weights);
    }
}

fn side(f: &mut Frame, area: Rect, app: &App, weights: Option<&[f32]>) {
    let d = &app.data;
    let i = app.tokens.cursor;
    let mut v = vec![heading(&format!("Token {i}"))];
    v.push(kv("text", format!("'{}'", d.display.get(i).map_or("", String::as_str))));
    if let Some(t) = app.run.tokens().and_then(|t| t.get(i)) {
        v.push(kv("piece", format!("{} (id {})", t.piece, t.id)));
    }
    if let Some(w) = weights {
        let value = w.get(i).copied().unwrap_or(0.0);
        let rank = w.iter().filter(|&&x| x > value).count() + 1;
        v.push(kv("received", format!("{} · rank {rank} of {}", short(value as f64), w.len())));
    }
    if let Some(s) = d.text_sinks.iter().find(|s| s.pos == i) {
        v.push(kv("sink", format!("yes: {} heads with α > ε, mean α {:.3}", s.heads.len(), s.mean_alpha)));
    }
    v.push(Line::from(""));
    v.push(kv("scope", format!("{} (a)", scope_text(app))));
    v.push(kv("measure", format!("{} (m)", if app.tokens.measure == TokenMeasure::Alpha { "α" } else { "mass" })));
    if let Some(w) = weights {
        v.push(Line::from(""));
        v.push(heading("Receives most"));
        let n = comparable(w.len(), app.tokens.measure);
        if n < w.len() {
            v.push(Line::from(Span::styled(format!("(positions < {n}: seen by ≥ ¼ of the queries)"), Style::new().fg(DIM))));
        }
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| w[b].total_cmp(&w[a]).then(a.cmp(&b)));
        let width = area.width.saturating_sub(2 + 6 + 8) as usize;
        for &p in order.iter().take(10) {
            let token = fit(&format!("'{}'", d.display.get(p).map_or("", String::as_str)), width);
            let style = if p == i { Style::new().fg(Color::White).add_modifier(Modifier::BOLD) } else { Style::new() };
            v.push(Line::from(vec![
                Span::styled(format!("{p:>5} "), Style::new().fg(DIM)),
                Span::styled(format!("{token:<width$}"), style),
                Span::raw(format!(" {}", short(w[p] as f64))),
            ]));
        }
    }
    f.render_widget(Paragraph::new(v).wrap(Wrap { trim: false }).block(block("Cursor")), area);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpha_colour_max_ignores_the_last_quarter() {
        let w = [0.5, 0.1, 0.1, 0.9];
        assert_eq!(colour_max(&w, TokenMeasure::Alpha), 0.5);
        assert_eq!(colour_max(&w, TokenMeasure::Mass), 0.9);
        assert_eq!(colour_max(&[0.3], TokenMeasure::Alpha), 0.3);
        assert_eq!(colour_max(&[], TokenMeasure::Alpha), 0.0);
    }
}
