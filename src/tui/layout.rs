//! Where each part of the screen goes, as pure functions of the terminal size and the state.
//! Drawing and mouse hit-testing both call these, so a click always lands on what was drawn.

use ratatui::layout::Rect;
use ratatui::text::Span;

use super::state::heatmap::HeatmapView;
use super::tab::Tab;

/// The three horizontal bands of every screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Areas {
    pub tabs: Rect,
    pub body: Rect,
    pub status: Rect,
}

pub fn areas(width: u16, height: u16) -> Areas {
    let full = Rect::new(0, 0, width, height);
    let tabs = Rect { height: height.min(1), ..full };
    let status = Rect { y: height.saturating_sub(1), height: u16::from(height >= 2), ..full };
    let body = Rect { y: tabs.bottom(), height: height.saturating_sub(tabs.height + status.height), ..full };
    Areas { tabs, body, status }
}

pub const TAB_PREFIX: &str = " sinkscope ";

/// Each tab's label and its [start, end) columns in the tab bar.
pub fn tab_ranges(tabs: Rect) -> Vec<(Tab, (u16, u16))> {
    let mut x = tabs.x + TAB_PREFIX.chars().count() as u16;
    Tab::ALL
        .iter()
        .map(|&t| {
            let w = tab_label(t).chars().count() as u16;
            let r = (x, x + w);
            // Labels are padded with a space each side: side by side they read apart.
            x += w;
            (t, r)
        })
        .collect()
}

pub fn tab_label(t: Tab) -> String {
    format!(" {} {} ", t.index() + 1, t.title())
}

pub fn tab_at(tabs: Rect, x: u16, y: u16) -> Option<Tab> {
    if tabs.height == 0 || y != tabs.y {
        return None;
    }
    tab_ranges(tabs).into_iter().find(|(_, (a, b))| x >= *a && x < *b && *b <= tabs.right()).map(|(t, _)| t)
}

/// The first of `visible` rows to show so that `selected` is on screen (centred when possible).
pub fn scroll(selected: usize, total: usize, visible: usize) -> usize {
    if visible == 0 || total <= visible {
        return 0;
    }
    selected.saturating_sub(visible / 2).min(total - visible)
}

/// The layer × head grid and its side panel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GridGeom {
    /// The bordered grid block.
    pub block: Rect,
    pub side: Rect,
    pub label_w: u16,
    pub cell_w: u16,
    /// Top-left of the first visible layer's first cell.
    pub x0: u16,
    pub y0: u16,
    pub first_layer: usize,
    pub rows: usize,
    pub n_heads: usize,
}

pub fn grid(body: Rect, n_layers: usize, n_heads: usize, layer: usize) -> GridGeom {
    let label_w = (format!("L{}", n_layers.saturating_sub(1)).len() + 1) as u16;
    let side_min = if body.width >= 70 { 36 } else { 0 };
    let avail = body.width.saturating_sub(side_min + 2 + label_w);
    let cell_w = (avail / n_heads.max(1) as u16).clamp(1, 6);
    let grid_w = (2 + label_w + cell_w * n_heads as u16).min(body.width);
    let block = Rect { width: grid_w, ..body };
    let side = Rect { x: body.x + grid_w, width: body.width - grid_w, ..body };
    // Inside the border: a header row of head numbers, the layers, two legend rows.
    let rows_avail = body.height.saturating_sub(2 + 1 + 2) as usize;
    let rows = rows_avail.min(n_layers);
    GridGeom { block, side, label_w, cell_w, x0: body.x + 1 + label_w, y0: body.y + 2, first_layer: scroll(layer, n_layers, rows), rows, n_heads }
}

impl GridGeom {
    pub fn cell_at(&self, x: u16, y: u16) -> Option<(usize, usize)> {
        if x < self.x0 || y < self.y0 {
            return None;
        }
        let (h, r) = (((x - self.x0) / self.cell_w) as usize, (y - self.y0) as usize);
        (h < self.n_heads && r < self.rows && self.x0 + (h as u16 + 1) * self.cell_w <= self.block.right()).then_some((self.first_layer + r, h))
    }

    pub fn cell_origin(&self, layer: usize, head: usize) -> Option<(u16, u16)> {
        let r = layer.checked_sub(self.first_layer).filter(|&r| r < self.rows)?;
        (head < self.n_heads).then(|| (self.x0 + head as u16 * self.cell_w, self.y0 + r as u16))
    }
}

/// One axis of the heatmap: which source cells are visible and how they map to pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeatAxis {
    /// First visible source cell and how many are visible.
    pub lo: usize,
    pub vis: usize,
    /// Pixels available along the axis.
    pub px: usize,
}

impl HeatAxis {
    /// `n` source cells magnified 2^zoom around `cursor` onto `px` pixels.
    pub fn new(n: usize, cursor: usize, zoom: u8, px: usize) -> HeatAxis {
        let vis = n.div_ceil(1usize << zoom.min(16)).clamp(1.min(n), n);
        let lo = cursor.saturating_sub(vis / 2).min(n - vis);
        HeatAxis { lo, vis, px }
    }

    /// Pixels per source cell when magnifying (whole pixels, so every cell is equally wide).
    fn scale(&self) -> Option<usize> {
        (self.vis > 0 && self.vis <= self.px).then(|| self.px / self.vis)
    }

    /// Pixels actually drawn.
    pub fn used(&self) -> usize {
        match self.scale() {
            Some(s) => self.vis * s,
            None => self.px,
        }
    }

    /// The source cells [a, b) pooled into pixel `p`.
    pub fn src_range(&self, p: usize) -> (usize, usize) {
        match self.scale() {
            Some(s) => {
                let c = self.lo + p / s;
                (c, c + 1)
            }
            None => {
                let a = p * self.vis / self.px;
                let b = ((p + 1) * self.vis / self.px).max(a + 1);
                (self.lo + a, self.lo + b)
            }
        }
    }

    /// The pixels [p0, p1) showing source cell `c`, if visible.
    pub fn pixels_of(&self, c: usize) -> Option<(usize, usize)> {
        if c < self.lo || c >= self.lo + self.vis || self.px == 0 {
            return None;
        }
        match self.scale() {
            Some(s) => Some(((c - self.lo) * s, (c - self.lo + 1) * s)),
            None => {
                let p = ((c - self.lo) * self.px / self.vis).min(self.px - 1);
                let p = (p.saturating_sub(1)..=p + 1).find(|&q| q < self.px && self.src_range(q).0 <= c && c < self.src_range(q).1)?;
                Some((p, p + 1))
            }
        }
    }
}

/// The heatmap view's rectangles and pixel mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeatGeom {
    pub info: Rect,
    pub block: Rect,
    pub left_axis: Rect,
    pub raster: Rect,
    pub bottom_axis: Rect,
    pub side: Rect,
    pub rows: HeatAxis,
    pub cols: HeatAxis,
}

pub const HEAT_AXIS_W: u16 = 6;
pub const HEAT_SIDE_W: u16 = 32;

pub fn heatmap(body: Rect, n_rows: usize, n_cols: usize, view: &HeatmapView) -> HeatGeom {
    let info = Rect { height: body.height.min(1), ..body };
    let rest = Rect { y: info.bottom(), height: body.height - info.height, ..body };
    let side_w = if rest.width >= 70 { HEAT_SIDE_W } else { 0 };
    let block = Rect { width: rest.width - side_w, ..rest };
    let side = Rect { x: block.right(), width: side_w, ..rest };
    let inner = inner(block);
    let raster = Rect {
        x: inner.x + HEAT_AXIS_W.min(inner.width),
        y: inner.y,
        width: inner.width.saturating_sub(HEAT_AXIS_W),
        height: inner.height.saturating_sub(2),
    };
    let left_axis = Rect { x: inner.x, width: HEAT_AXIS_W.min(inner.width), ..raster };
    let bottom_axis = Rect { y: raster.bottom(), height: inner.height - raster.height, ..raster };
    let rows = HeatAxis::new(n_rows, view.row, view.zoom, raster.height as usize * 2);
    let cols = HeatAxis::new(n_cols, view.col, view.zoom, raster.width as usize);
    HeatGeom { info, block, left_axis, raster, bottom_axis, side, rows, cols }
}

impl HeatGeom {
    /// The source cell (row, col) under a terminal cell (its upper half).
    pub fn cell_at(&self, x: u16, y: u16) -> Option<(usize, usize)> {
        if x < self.raster.x || y < self.raster.y {
            return None;
        }
        let (px, py) = ((x - self.raster.x) as usize, (y - self.raster.y) as usize * 2);
        (px < self.cols.used() && py < self.rows.used()).then(|| (self.rows.src_range(py).0, self.cols.src_range(px).0))
    }
}

/// A rectangle less a one-cell border.
pub fn inner(r: Rect) -> Rect {
    Rect { x: r.x + r.width.min(1), y: r.y + r.height.min(1), width: r.width.saturating_sub(2), height: r.height.saturating_sub(2) }
}

/// Tokens view: the text block and the side panel.
pub fn tokens(body: Rect) -> (Rect, Rect) {
    let side_w = if body.width >= 80 { 34 } else { 0 };
    (Rect { width: body.width - side_w, ..body }, Rect { x: body.right() - side_w, width: side_w, ..body })
}

pub fn token_text_area(body: Rect) -> Rect {
    inner(tokens(body).0)
}

pub fn token_text_width(body: Rect) -> u16 {
    token_text_area(body).width
}

/// Where a token sits in the flowed text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub line: usize,
    pub x: u16,
    pub w: u16,
}

/// Flows the tokens into lines of `width` columns; a newline token ends its line.
pub fn token_layout(display: &[String], width: u16) -> Vec<Place> {
    let width = width.max(1);
    let (mut line, mut x) = (0usize, 0u16);
    let mut out = Vec::with_capacity(display.len());
    for d in display {
        let w = (Span::raw(d.as_str()).width() as u16).clamp(1, width);
        if x > 0 && x + w > width {
            line += 1;
            x = 0;
        }
        out.push(Place { line, x, w });
        x += w;
        if super::data::ends_line(d) {
            line += 1;
            x = 0;
        }
    }
    out
}

/// The first line to show so the cursor's line is visible.
pub fn first_token_line(places: &[Place], cursor: usize, height: u16) -> usize {
    let total = places.last().map_or(0, |p| p.line + 1);
    scroll(places.get(cursor).map_or(0, |p| p.line), total, height as usize)
}

pub fn token_at(places: &[Place], area: Rect, first_line: usize, x: u16, y: u16) -> Option<usize> {
    if !(area.x..area.right()).contains(&x) || !(area.y..area.bottom()).contains(&y) {
        return None;
    }
    let (line, col) = (first_line + (y - area.y) as usize, x - area.x);
    places.iter().position(|p| p.line == line && col >= p.x && col < p.x + p.w)
}

/// The token `dy` lines above/below the cursor, at about the same column.
pub fn token_line_move(display: &[String], width: u16, cursor: usize, dy: isize) -> usize {
    let places = token_layout(display, width);
    let Some(here) = places.get(cursor) else { return cursor };
    let last_line = places.last().map_or(0, |p| p.line);
    let target = (here.line as isize + dy).clamp(0, last_line as isize) as usize;
    let on_line = places.iter().enumerate().filter(|(_, p)| p.line == target);
    on_line.take_while(|(_, p)| p.x <= here.x).last().map(|(i, _)| i).or_else(|| places.iter().position(|p| p.line == target)).unwrap_or(cursor)
}

/// Streaming view: chart above, sweep table and verdict below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamGeom {
    pub chart: Rect,
    pub table: Rect,
    pub verdict: Rect,
}

pub fn streaming(body: Rect) -> StreamGeom {
    let chart_h = (body.height as u32 * 55 / 100) as u16;
    let chart = Rect { height: chart_h, ..body };
    let bottom = Rect { y: chart.bottom(), height: body.height - chart_h, ..body };
    let (table, verdict) = if bottom.width >= 110 {
        let tw = bottom.width * 70 / 100;
        (Rect { width: tw, ..bottom }, Rect { x: bottom.x + tw, width: bottom.width - tw, ..bottom })
    } else {
        let th = bottom.height * 60 / 100;
        (Rect { height: th, ..bottom }, Rect { y: bottom.y + th, height: bottom.height - th, ..bottom })
    };
    StreamGeom { chart, table, verdict }
}

impl StreamGeom {
    /// The table row (policy index) under screen row `y`: border, then a header row.
    pub fn row_at(&self, y: u16) -> Option<usize> {
        (y >= self.table.y + 2 && y + 1 < self.table.bottom()).then(|| (y - self.table.y - 2) as usize)
    }
}

/// The Survey view: the table of models on top, α_0 by depth and Sink_0 against the window's
/// collapse side by side below it, the selected model's sweeps at the bottom.
pub struct SurveyGeom {
    pub table: Rect,
    pub depth: Rect,
    pub scatter: Rect,
    pub details: Rect,
}

pub fn survey(body: Rect, models: usize) -> SurveyGeom {
    // Borders and a header row around the models, at most half the body.
    let table_h = (models as u16 + 3).min(body.height / 2);
    let details_h = 7.min(body.height.saturating_sub(table_h));
    let charts_h = body.height.saturating_sub(table_h + details_h);
    let table = Rect { height: table_h, ..body };
    let charts = Rect { y: table.bottom(), height: charts_h, ..body };
    let half = charts.width / 2;
    SurveyGeom {
        table,
        depth: Rect { width: half, ..charts },
        scatter: Rect { x: charts.x + half, width: charts.width - half, ..charts },
        details: Rect { y: charts.bottom(), height: details_h, ..body },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_fit_any_size() {
        let a = areas(120, 40);
        assert_eq!((a.tabs.height, a.body.y, a.body.height, a.status.y), (1, 1, 38, 39));
        let a = areas(1, 1);
        assert_eq!((a.tabs.height, a.body.height, a.status.height), (1, 0, 0));
        let a = areas(0, 0);
        assert_eq!(a.body.height, 0);
    }

    #[test]
    fn scroll_keeps_the_selection_visible() {
        assert_eq!(scroll(0, 30, 10), 0);
        assert_eq!(scroll(15, 30, 10), 10);
        assert_eq!(scroll(29, 30, 10), 20);
        assert_eq!(scroll(5, 3, 10), 0);
        for sel in 0..30 {
            let first = scroll(sel, 30, 7);
            assert!(sel >= first && sel < first + 7);
        }
    }

    #[test]
    fn heat_axis_magnifies_by_whole_pixels_and_pools_otherwise() {
        let a = HeatAxis::new(16, 0, 0, 100);
        assert_eq!((a.lo, a.vis, a.used()), (0, 16, 96));
        assert_eq!(a.src_range(6), (1, 2));
        assert_eq!(a.pixels_of(1), Some((6, 12)));
        let a = HeatAxis::new(128, 0, 0, 50);
        assert_eq!(a.used(), 50);
        let covered: usize = (0..50).map(|p| a.src_range(p).1 - a.src_range(p).0).sum();
        assert_eq!(covered, 128, "pooled pixels cover every source cell once");
        for c in 0..128 {
            let (p, _) = a.pixels_of(c).unwrap();
            let (lo, hi) = a.src_range(p);
            assert!(lo <= c && c < hi);
        }
        // Zoomed ×4 around 100: 32 cells visible, window clamped to the end.
        let a = HeatAxis::new(128, 120, 2, 64);
        assert_eq!((a.lo, a.vis), (96, 32));
        assert_eq!(a.pixels_of(10), None);
    }

    #[test]
    fn token_flow_wraps_and_breaks_lines() {
        let d: Vec<String> = ["<s>", " Once", " upon", "↵", " a", " time"].iter().map(|s| s.to_string()).collect();
        let p = token_layout(&d, 10);
        assert_eq!(p.iter().map(|p| (p.line, p.x)).collect::<Vec<_>>(), vec![(0, 0), (0, 3), (1, 0), (1, 5), (2, 0), (2, 2)]);
        assert_eq!(token_line_move(&d, 10, 1, 1), 2);
        assert_eq!(token_line_move(&d, 10, 5, -2), 0, "column 2 of line 0 is inside <s>");
        let area = Rect::new(1, 1, 10, 3);
        assert_eq!(token_at(&p, area, 0, 5, 1), Some(1));
        assert_eq!(token_at(&p, area, 0, 1, 3), Some(4));
        assert_eq!(token_at(&p, area, 0, 9, 3), None);
    }
}
