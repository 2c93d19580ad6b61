//! Drawing pieces the views share: colour scales, the half-block heatmap raster and its colour
//! bar, and a bounds-checked string writer (ratatui's panics on a row outside the buffer, and
//! tiny terminals make that row easy to reach).

pub mod colour;
pub mod heatmap;

use ratatui::buffer::Buffer;
use ratatui::style::Style;

/// Writes `s` at (x, y), at most `max_width` cells, nothing if (x, y) is off the buffer.
pub fn put(buf: &mut Buffer, x: u16, y: u16, s: impl AsRef<str>, max_width: usize, style: Style) {
    let a = buf.area;
    if y >= a.y && y < a.bottom() && x >= a.x && x < a.right() {
        buf.set_stringn(x, y, s, max_width, style);
    }
}
