//! The help overlay (`?`): every key and mouse action, grouped by view.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph};
use ratatui::Frame;

use super::{block, ACCENT};

/// (keys, what they do) per section; the single list the overlay shows.
pub const KEYS: &[(&str, &[(&str, &str)])] = &[
    (
        "Everywhere",
        &[
            ("1-9 · Tab · Shift-Tab", "switch view (or click a tab)"),
            ("[ ]  { }", "previous/next head · previous/next layer"),
            ("e", "export this view's table to RUN_DIR/exports/"),
            ("?", "this help (Esc closes it)"),
            ("q · Esc", "quit"),
        ],
    ),
    ("Overview", &[("↑ ↓", "scroll")]),
    (
        "Grid",
        &[
            ("arrows · click", "select a head"),
            ("Enter · click again", "open it in the heatmap"),
            (", .", "k of α_k (previous/next)"),
            ("c", "colour by α_k / by head class"),
        ],
    ),
    (
        "Heatmap",
        &[
            ("arrows · click", "move the cursor (query, key)"),
            ("Shift+arrows · PgUp PgDn", "move 8 cells (pans when zoomed)"),
            ("+ - 0 · wheel", "zoom in / out / reset"),
            ("l", "log / linear colour scale"),
            ("f", "focus on the first K keys (token labels)"),
        ],
    ),
    ("Tokens", &[("← → · ↑ ↓ · click", "move the cursor token"), ("a", "scope: head / layer mean / all heads"), ("m", "measure: α_k / column mass")]),
    ("Activations", &[("↑ ↓", "select a layer")]),
    ("Streaming", &[("↑ ↓ · click", "select a policy"), ("w", "rolling window 32 / 8 / 128 tokens")]),
    ("Retrieval", &[("↑ ↓", "select a policy (its depth × length grid)")]),
    ("Survey", &[("↑ ↓", "select a model"), ("Enter", "open that model's run (every view then shows it)")]),
];

pub fn render(f: &mut Frame, area: Rect) {
    let mut lines = Vec::new();
    for (section, keys) in KEYS {
        lines.push(Line::from(Span::styled(*section, Style::new().fg(ACCENT).add_modifier(Modifier::BOLD))));
        for (k, what) in *keys {
            lines.push(Line::from(vec![
                Span::styled(format!("  {k:<26}"), Style::new().fg(Color::White).add_modifier(Modifier::BOLD)),
                Span::raw(*what),
            ]));
        }
    }
    let w = 76.min(area.width);
    let h = (lines.len() as u16 + 2).min(area.height);
    let popup = Rect { x: area.x + (area.width - w) / 2, y: area.y + (area.height - h) / 2, width: w, height: h };
    f.render_widget(Clear, popup);
    f.render_widget(Paragraph::new(lines).block(block("Keys (? or Esc to close)")), popup);
}
