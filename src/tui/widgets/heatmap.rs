//! The attention heatmap as pixels: a query × key source matrix pooled onto the visible pixels
//! (two per terminal cell, upper and lower half-block "▀"), causally masked cells left blank, the
//! cursor's cell highlighted, and a vertical colour bar for the legend.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};

use super::colour::{sequential, short, Scale};
use super::put;
use crate::tui::layout::HeatGeom;

/// The matrix being shown: rows are query bins, columns key bins (or single early keys).
pub struct HeatSource<'a> {
    pub values: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    /// Query bin r covers positions row_edges[r]..row_edges[r+1].
    pub row_edges: &'a [usize],
    /// The first key position of each column.
    pub col_keys: Vec<usize>,
}

impl HeatSource<'_> {
    /// Whether every key of (r, c) lies after every query of r (nothing to show under causality).
    pub fn masked(&self, r: usize, c: usize) -> bool {
        let last_query = self.row_edges.get(r + 1).map_or(usize::MAX, |e| e.saturating_sub(1));
        self.col_keys.get(c).is_none_or(|&k| k > last_query)
    }

    pub fn get(&self, r: usize, c: usize) -> f32 {
        self.values.get(r * self.cols + c).copied().unwrap_or(0.0)
    }

    /// Largest value of the matrix (the linear scale's top).
    pub fn max(&self) -> f32 {
        self.values.iter().copied().filter(|v| v.is_finite()).fold(0.0, f32::max)
    }
}

/// Pixel values in [0, 1] (`None`: masked), row-major, `width` × `height` pixels.
#[derive(Debug, Clone, PartialEq)]
pub struct Raster {
    pub width: usize,
    pub height: usize,
    pub px: Vec<Option<f32>>,
}

/// Pools the visible part of `src` onto the geometry's pixels: each pixel is the mean of the
/// unmasked source cells it covers (so the diagonal is not diluted by the masked triangle).
pub fn raster(src: &HeatSource<'_>, geom: &HeatGeom, scale: &Scale) -> Raster {
    let (width, height) = (geom.cols.used(), geom.rows.used());
    let col_ranges: Vec<(usize, usize)> = (0..width).map(|x| geom.cols.src_range(x)).collect();
    let mut px = Vec::with_capacity(width * height);
    for y in 0..height {
        let (r0, r1) = geom.rows.src_range(y);
        for &(c0, c1) in &col_ranges {
            let (mut sum, mut n) = (0f32, 0u32);
            for r in r0..r1.min(src.rows) {
                for c in c0..c1.min(src.cols) {
                    if !src.masked(r, c) {
                        sum += src.get(r, c);
                        n += 1;
                    }
                }
            }
            px.push((n > 0).then(|| scale.norm(sum / n as f32)));
        }
    }
    Raster { width, height, px }
}

const CURSOR: Color = Color::Rgb(0, 255, 255);

/// Paints the raster into `area` with half-blocks; pixels inside `cursor` ([x0,x1), [y0,y1)) are
/// drawn in the cursor colour.
pub fn paint(buf: &mut Buffer, area: Rect, r: &Raster, cursor: Option<((usize, usize), (usize, usize))>) {
    let colour = |x: usize, y: usize| -> Option<Color> {
        if y >= r.height {
            return None;
        }
        let in_cursor = cursor.is_some_and(|((x0, x1), (y0, y1))| (x0..x1).contains(&x) && (y0..y1).contains(&y));
        match r.px[y * r.width + x] {
            _ if in_cursor => Some(CURSOR),
            Some(t) => Some(sequential(t)),
            None => None,
        }
    };
    for cy in 0..(r.height.div_ceil(2)).min(area.height as usize) {
        for x in 0..r.width.min(area.width as usize) {
            let (top, bottom) = (colour(x, 2 * cy), colour(x, 2 * cy + 1));
            let Some(cell) = buf.cell_mut((area.x + x as u16, area.y + cy as u16)) else { continue };
            match (top, bottom) {
                (Some(t), Some(b)) => cell.set_symbol("▀").set_style(Style::new().fg(t).bg(b)),
                (Some(t), None) => cell.set_symbol("▀").set_style(Style::new().fg(t)),
                (None, Some(b)) => cell.set_symbol("▄").set_style(Style::new().fg(b)),
                (None, None) => cell.set_symbol(" "),
            };
        }
    }
}

/// A vertical colour bar with its top, middle and bottom values: the heatmap's legend.
pub fn colour_bar(buf: &mut Buffer, area: Rect, scale: &Scale) {
    let h = area.height as usize;
    if h == 0 || area.width < 3 {
        return;
    }
    for y in 0..h {
        let t = if h == 1 { 1.0 } else { 1.0 - y as f32 / (h - 1) as f32 };
        if let Some(cell) = buf.cell_mut((area.x, area.y + y as u16)) {
            cell.set_symbol("█").set_style(Style::new().fg(sequential(t)));
        }
        if let Some(cell) = buf.cell_mut((area.x + 1, area.y + y as u16)) {
            cell.set_symbol("█").set_style(Style::new().fg(sequential(t)));
        }
        if y == 0 || y + 1 == h || y == h / 2 {
            let label = short(scale.value_at(t) as f64);
            put(buf, area.x + 3, area.y + y as u16, &label, area.width as usize - 3, Style::new());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tui::layout;
    use crate::tui::state::heatmap::HeatmapView;

    /// A 4×4 causal pattern.
    fn pattern() -> Vec<f32> {
        vec![1.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.6, 0.2, 0.2, 0.0, 0.7, 0.1, 0.1, 0.1]
    }

    #[test]
    fn masks_the_upper_triangle_and_magnifies_exactly() {
        let values = pattern();
        let edges = [0, 1, 2, 3, 4];
        let src = HeatSource { values: &values, rows: 4, cols: 4, row_edges: &edges, col_keys: vec![0, 1, 2, 3] };
        assert!(src.masked(0, 1) && !src.masked(1, 1) && !src.masked(3, 3));
        let view = HeatmapView { zoom: 0, row: 3, col: 0, log: false, focus: false };
        let geom = layout::heatmap(Rect::new(0, 0, 8 + layout::HEAT_AXIS_W + 2, 1 + 4 + 2 + 2), 4, 4, &view);
        assert_eq!((geom.cols.used(), geom.rows.used()), (8, 8), "2 pixels per source cell each way");
        let r = raster(&src, &geom, &Scale::new(1.0, false));
        assert_eq!(r.px[0], Some(1.0));
        assert_eq!(r.px[2], None, "key 1 is after query 0");
        assert_eq!(r.px[7 * 8 + 7], Some(0.1));
        let mut buf = Buffer::empty(Rect::new(0, 0, 8, 4));
        let area = buf.area;
        paint(&mut buf, area, &r, None);
        let row0: String = (0..8).map(|x| buf[(x, 0)].symbol().to_string()).collect();
        assert_eq!(row0, "▀▀      ", "query 0 sees only key 0");
        assert_eq!(buf[(0, 0)].fg, sequential(1.0));
    }

    #[test]
    fn pooling_averages_unmasked_cells_only() {
        let values = pattern();
        let edges = [0, 1, 2, 3, 4];
        let src = HeatSource { values: &values, rows: 4, cols: 4, row_edges: &edges, col_keys: vec![0, 1, 2, 3] };
        let view = HeatmapView { zoom: 0, row: 0, col: 0, log: false, focus: false };
        // 2 pixel columns, 1 cell (2 pixel rows) high: each pixel pools a 2×2 block.
        let geom = layout::heatmap(Rect::new(0, 0, 2 + layout::HEAT_AXIS_W + 2, 1 + 1 + 2 + 2), 4, 4, &view);
        assert_eq!((geom.cols.used(), geom.rows.used()), (2, 2));
        let r = raster(&src, &geom, &Scale::new(1.0, false));
        assert_eq!(r.px[0], Some((1.0 + 0.5 + 0.5) / 3.0));
        assert_eq!(r.px[1], None);
        assert_eq!(r.px[3], Some((0.2 + 0.1 + 0.1) / 3.0));
    }
}
