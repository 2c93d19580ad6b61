//! One module per tab, each drawing its view from `&App` into the body area, plus the help
//! overlay and the small helpers they share (the "missing part" notice, label/value lines).

pub mod activations;
pub mod compression;
pub mod grid;
pub mod heatmap;
pub mod help;
pub mod overview;
pub mod quant;
pub mod retrieval;
pub mod streaming;
pub mod survey;
pub mod tokens;

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};
use ratatui::Frame;

pub const ACCENT: Color = Color::Cyan;
pub const WARN: Color = Color::Yellow;
pub const DIM: Color = Color::DarkGray;

/// A bordered block with a title.
pub fn block(title: impl Into<String>) -> Block<'static> {
    Block::bordered()
        .border_style(Style::new().fg(DIM))
        .title(Span::styled(format!(" {} ", title.into()), Style::new().fg(ACCENT).add_modifier(Modifier::BOLD)))
}

/// Says which file a view needs and which command writes it.
pub fn missing(f: &mut Frame, area: Rect, title: &str, what: &str, command: &str) {
    let lines = vec![
        Line::from(Span::styled(what.to_string(), Style::new().fg(WARN).add_modifier(Modifier::BOLD))),
        Line::from(""),
        Line::from("Produce it with:"),
        Line::from(Span::styled(format!("  {command}"), Style::new().fg(ACCENT))),
    ];
    f.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }).block(block(title)), area);
}

/// "label  value" with the label dimmed.
pub fn kv(label: &str, value: impl Into<String>) -> Line<'static> {
    Line::from(vec![Span::styled(format!("{label} "), Style::new().fg(DIM)), Span::raw(value.into())])
}

pub fn heading(text: &str) -> Line<'static> {
    Line::from(Span::styled(text.to_string(), Style::new().fg(ACCENT).add_modifier(Modifier::BOLD)))
}

/// A horizontal bar of `frac` × `width` cells with eighth-block resolution.
pub fn bar(frac: f64, width: usize) -> String {
    let eighths = (frac.clamp(0.0, 1.0) * width as f64 * 8.0).round() as usize;
    let mut s = "█".repeat(eighths / 8);
    if !eighths.is_multiple_of(8) {
        s.push([' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'][eighths % 8]);
    }
    s
}

/// Cuts `s` to at most `width` characters, marking the cut with "…".
pub fn fit(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        s.to_string()
    } else if width == 0 {
        String::new()
    } else {
        let mut t: String = s.chars().take(width - 1).collect();
        t.push('…');
        t
    }
}

/// A token piece for labels: quoted display text.
pub fn quoted(display: Option<&String>) -> String {
    display.map_or(String::new(), |d| format!("'{d}'"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_and_fits() {
        assert_eq!(bar(0.5, 4), "██");
        assert_eq!(bar(1.0 / 32.0, 4), "▏");
        assert_eq!(bar(2.0, 2), "██");
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(fit("ab", 4), "ab");
    }
}
