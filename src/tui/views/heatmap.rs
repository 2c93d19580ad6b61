//! Heatmap: the selected head's query × key attention (half-block pixels), query and key axes
//! (token labels in focus mode), the colour bar, and the cursor cell's tokens and value.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::Frame;

use super::{block, fit, heading, kv, missing, quoted, DIM};
use crate::capture::heatmaps::Heatmaps;
use crate::tui::layout::{self, HeatGeom};
use crate::tui::state::App;
use crate::tui::widgets::colour::{short, Scale};
use crate::tui::widgets::heatmap::{colour_bar, paint, raster, HeatSource};
use crate::tui::widgets::put;

/// The matrix the view shows for the app's head and mode.
pub fn source<'a>(app: &App, maps: &'a Heatmaps) -> HeatSource<'a> {
    let (l, h) = (app.layer, app.head);
    if app.heat.focus {
        HeatSource {
            values: maps.head_early(l, h),
            rows: maps.bins(),
            cols: maps.first_keys,
            row_edges: &maps.edges,
            col_keys: (0..maps.first_keys).collect(),
        }
    } else {
        HeatSource {
            values: maps.head(l, h),
            rows: maps.bins(),
            cols: maps.bins(),
            row_edges: &maps.edges,
            col_keys: maps.edges[..maps.bins()].to_vec(),
        }
    }
}

pub fn render(f: &mut Frame, area: Rect, app: &App) {
    let (Some(maps), Some((rows, cols))) = (app.run.heatmaps.as_ref(), app.heat_dims()) else {
        missing(
            f,
            area,
            "Heatmap",
            "No heatmaps.safetensors in this run (per-head attention maps pooled onto ≤128×128 bins).",
            "sinkscope capture -m MODEL -f TEXT -o RUN_DIR   (--heatmap-bins, default 128)",
        );
        return;
    };
    let g = layout::heatmap(area, rows, cols, &app.heat);
    let src = source(app, maps);
    let scale = Scale::new(src.max(), app.heat.log);
    let exact = maps.exact();
    let zoom = 1usize << app.heat.zoom;
    let what = if app.heat.focus { format!("focus: first {} keys", maps.first_keys) } else { "full map".to_string() };
    let bins = if exact { format!("{} tokens, exact", maps.n_tokens) } else { format!("{} tokens in {} bins", maps.n_tokens, maps.bins()) };
    let info = format!(" layer {} · head {} · {bins} · {what} · {} · zoom ×{zoom}", app.layer, app.head, if app.heat.log { "log" } else { "linear" });
    put(f.buffer_mut(), g.info.x, g.info.y, info, g.info.width as usize, Style::new().add_modifier(Modifier::BOLD));
    f.render_widget(block(format!("query ↓ × key → · L{}H{}", app.layer, app.head)), g.block);
    let r = raster(&src, &g, &scale);
    let cursor = g.rows.pixels_of(app.heat.row).zip(g.cols.pixels_of(app.heat.col)).map(|(ry, cx)| (cx, ry));
    paint(f.buffer_mut(), g.raster, &r, cursor);
    axes(f.buffer_mut(), &g, app, maps);
    if g.side.width > 2 {
        side(f, &g, app, maps, &src, &scale);
    }
}

/// Query positions down the left, key positions (and, when wide enough, tokens) along the bottom.
fn axes(buf: &mut Buffer, g: &HeatGeom, app: &App, maps: &Heatmaps) {
    let dim = Style::new().fg(DIM);
    let w = layout::HEAT_AXIS_W as usize - 1;
    let cells = g.rows.used().div_ceil(2);
    for cy in 0..cells.min(g.raster.height as usize) {
        if cy % 4 == 0 || cy + 1 == cells {
            let q = maps.edges.get(g.rows.src_range(cy * 2).0).copied().unwrap_or(0);
            put(buf, g.left_axis.x, g.raster.y + cy as u16, format!("{q:>w$}"), w, dim);
        }
    }
    let y = g.bottom_axis.y;
    if g.bottom_axis.height == 0 {
        return;
    }
    let used = g.cols.used();
    let mut next_free = 0usize;
    let mut x = 0usize;
    while x < used {
        let (c, _) = g.cols.src_range(x);
        let key = app.col_key(c);
        let label = key.to_string();
        // A new label where a column starts and the previous label has ended.
        if x >= next_free && (x == 0 || g.cols.src_range(x - 1).0 != c) {
            put(buf, g.raster.x + x as u16, y, &label, used - x, dim);
            // At least 6 cells apart so the labels read as a scale, not a run of digits.
            next_free = x + (label.len() + 2).max(6);
        }
        x += 1;
    }
    if g.bottom_axis.height < 2 {
        return;
    }
    // Tokens under their columns when each column is wide enough to read one.
    let col_w = g.cols.pixels_of(g.cols.lo).map_or(0, |(a, b)| b - a);
    if col_w >= 4 {
        for c in g.cols.lo..g.cols.lo + g.cols.vis {
            if let Some((x0, _)) = g.cols.pixels_of(c) {
                let label = fit(&app.data.display.get(app.col_key(c)).cloned().unwrap_or_default(), col_w - 1);
                put(buf, g.raster.x + x0 as u16, y + 1, label, col_w - 1, Style::new().fg(ratatui::style::Color::Gray));
            }
        }
    } else {
        put(buf, g.raster.x, y + 1, "key position →", g.raster.width as usize, dim);
    }
}

/// Positions of query bin `r` as text: "37 ' He'" when exact, "512–575" otherwise.
fn positions(app: &App, lo: usize, hi: usize) -> String {
    if hi == lo + 1 {
        format!("{lo} {}", quoted(app.data.display.get(lo)))
    } else {
        format!("{lo}–{}", hi - 1)
    }
}

fn side(f: &mut Frame, g: &HeatGeom, app: &App, maps: &Heatmaps, src: &HeatSource<'_>, scale: &Scale) {
    f.render_widget(block("Legend · cursor"), g.side);
    let inner = layout::inner(g.side);
    let bar_h = (inner.height / 3).clamp(2, 12).min(inner.height);
    colour_bar(f.buffer_mut(), Rect { height: bar_h, ..inner }, scale);
    let (r, c) = (app.heat.row, app.heat.col);
    let (q_lo, q_hi) = (maps.edges[r], maps.edges[r + 1]);
    let (k_lo, k_hi) = if app.heat.focus { (c, c + 1) } else { (maps.edges[c], maps.edges[c + 1]) };
    let value = src.get(r, c);
    let exact_cell = q_hi == q_lo + 1 && k_hi == k_lo + 1;
    let mut v = vec![
        Line::from(Span::styled(if scale.log { "log scale, 4 decades" } else { "linear from 0" }, Style::new().fg(DIM))),
        Line::from(""),
        heading("Cursor"),
        kv("query", positions(app, q_lo, q_hi)),
        kv("key  ", positions(app, k_lo, k_hi)),
    ];
    if src.masked(r, c) {
        v.push(kv("value", "— (key after query: causal mask)"));
    } else if exact_cell {
        v.push(kv(&format!("A[{q_lo},{k_lo}]"), format!("{value:.4}")));
    } else if app.heat.focus {
        v.push(kv("mean A", format!("{value:.4} over the bin's queries")));
    } else {
        v.push(kv("mass", format!("{value:.4} (mean over the bin's queries of the mass on its keys)")));
    }
    if let Some(a) = app.data.alpha(app.layer, app.head, k_lo).filter(|_| k_hi == k_lo + 1) {
        v.push(kv(&format!("α_{k_lo}"), format!("{a:.3} for this head")));
    }
    v.push(kv("max", short(src.max() as f64)));
    v.push(Line::from(""));
    v.push(Line::from(Span::styled("arrows move · +/- zoom · f focus · l log", Style::new().fg(DIM))));
    let text = Rect { y: inner.y + bar_h + 1, height: inner.height.saturating_sub(bar_h + 1), ..inner };
    f.render_widget(Paragraph::new(v).wrap(Wrap { trim: false }), text);
}
