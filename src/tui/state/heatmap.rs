//! The Heatmap view's state: its cursor, magnification, colour scale and focus on the first keys.

/// Heatmap view state. The cursor is in source cells: (query bin, key column), where a key column
/// is a key bin of the full map or, in focus mode, one of the first K key positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeatmapView {
    /// Magnification 2^zoom; 0 shows the whole map.
    pub zoom: u8,
    pub row: usize,
    pub col: usize,
    pub log: bool,
    pub focus: bool,
}

pub const MAX_ZOOM: u8 = 6;
/// Cells a Shift+arrow / PageUp / PageDown move the heatmap cursor (panning when zoomed).
pub const PAN_STEP: isize = 8;

impl HeatmapView {
    pub(crate) fn zoom_by(&mut self, by: i8) {
        self.zoom = (self.zoom as i8 + by).clamp(0, MAX_ZOOM as i8) as u8;
    }

    /// Keeps the cursor inside a map of `dims` (rows, columns).
    pub(crate) fn clamp(&mut self, dims: Option<(usize, usize)>) {
        if let Some((rows, cols)) = dims {
            self.row = self.row.min(rows - 1);
            self.col = self.col.min(cols - 1);
        }
    }
}
