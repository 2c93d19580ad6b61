//! Figures with plotters, as PNG (text drawn from the embedded DejaVu Sans, so no system fonts are
//! needed) or SVG: the [`Figure`] trait, [`save`] (backend from the file extension, written
//! atomically), the shared header and colour scales, per-head attention heatmaps and the layer ×
//! head α grid. Charts over an x axis are in `report::charts`.

use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::colors::colormaps::ViridisRGB;

use crate::error::{Error, Result};
use crate::io::write_atomic;

type DrawResult<T, DB> = std::result::Result<T, DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// The font family every figure uses; registered from embedded bytes on first use.
pub(super) const FONT: &str = "sans-serif";

fn register_fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The DejaVu bytes are valid OpenType; a failure here would be a packaging bug.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let _ = plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold());
    });
}

/// Something that draws itself onto any plotters backend.
pub trait Figure {
    /// Pixel size (also the SVG's size).
    fn size(&self) -> (u32, u32);
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<(), DB>;
}

/// Renders `fig` to `path` (`.png` or `.svg`), atomically.
pub fn save<F: Figure>(fig: &F, path: &Path) -> Result<()> {
    register_fonts();
    let fail = |e: String| Error::Internal(format!("drawing {}: {e}", path.display()));
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    match ext.as_str() {
        "svg" => write_atomic(path, svg_string(fig)?.as_bytes()),
        "png" => {
            let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            let name = path.file_name().map_or("figure".into(), |n| n.to_string_lossy().into_owned());
            // The encoder picks PNG from the extension, so the temp file keeps it.
            let tmp = dir.join(format!(".{name}.tmp-{}.png", std::process::id()));
            let root = BitMapBackend::new(&tmp, fig.size()).into_drawing_area();
            let drawn = fig.draw(&root).map_err(|e| fail(e.to_string()));
            // The file is created by `present` (or by the backend's drop): written and renamed as
            // one step an interruption cannot cut (see `io::staging::exclusive`).
            crate::io::staging::exclusive(|| {
                let presented = drawn.and_then(|_| root.present().map_err(|e| fail(e.to_string())));
                drop(root);
                let renamed = presented.and_then(|_| std::fs::rename(&tmp, path).map_err(|e| Error::file(path, format!("cannot write ({e})"))));
                if renamed.is_err() {
                    let _ = std::fs::remove_file(&tmp);
                }
                renamed
            })
        }
        _ => Err(Error::file(path, "has no .png or .svg extension")),
    }
}

/// `fig` as SVG text (what [`save`] writes to a `.svg` file).
pub fn svg_string<F: Figure>(fig: &F) -> Result<String> {
    register_fonts();
    let fail = |e: String| Error::Internal(format!("drawing an SVG figure: {e}"));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, fig.size()).into_drawing_area();
        fig.draw(&root).map_err(|e| fail(e.to_string()))?;
        root.present().map_err(|e| fail(e.to_string()))?;
    }
    Ok(svg)
}

/// Colour scale of a heatmap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    Linear,
    /// log10 of the value, clipped below at [`LOG_FLOOR`].
    Log,
}

/// Attention below this is drawn as the bottom of the log scale.
pub const LOG_FLOOR: f64 = 1e-4;

impl Scale {
    fn map(self, v: f64) -> f64 {
        match self {
            Scale::Linear => v,
            Scale::Log => v.max(LOG_FLOOR).log10(),
        }
    }
    fn tick_label(self, x: f64) -> String {
        match self {
            Scale::Linear => format!("{x:.2}"),
            Scale::Log => format!("1e{}", x.round() as i64),
        }
    }
}

fn viridis(t: f64) -> RGBColor {
    ViridisRGB::get_color(t.clamp(0.0, 1.0))
}

/// Colour of a cell that the causal mask hides (never computed, not zero).
const MASKED: RGBColor = RGBColor(236, 236, 236);

/// Draws the title and a grey subtitle centred in a strip at the top; returns the area below. A
/// subtitle wider than the canvas wraps onto a second line at a space (and is cut with "…" where
/// even two lines cannot hold it), so no text runs off either edge.
pub(super) fn header<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, title: &str, subtitle: &str) -> DrawResult<DrawingArea<DB, Shift>, DB> {
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    let w = root.dim_in_pixel().0 as i32;
    let sub_style = (FONT, 14).into_font().color(&RGBColor(90, 90, 90));
    let room = (w - 24).max(40) as u32;
    let fits = |s: &str| root.estimate_text_size(s, &sub_style).map_or(true, |(tw, _)| tw <= room);
    let lines = wrap_to_fit(subtitle, &fits);
    let (head, body) = root.split_vertically(66 + 17 * (lines.len() as i32 - 1).max(0));
    let centred = Pos::new(HPos::Center, VPos::Top);
    head.draw(&Text::new(title.to_string(), (w / 2, 10), TextStyle::from((FONT, 21).into_font().style(FontStyle::Bold)).pos(centred)))?;
    for (i, line) in lines.iter().enumerate() {
        head.draw(&Text::new(line.clone(), (w / 2, 40 + 17 * i as i32), sub_style.clone().pos(centred)))?;
    }
    Ok(body)
}

/// `text` as one line when it fits, else two lines broken at the space that leaves the first as
/// long as it can be, the second cut with "…" if it still does not fit.
fn wrap_to_fit(text: &str, fits: &dyn Fn(&str) -> bool) -> Vec<String> {
    if fits(text) {
        return vec![text.to_string()];
    }
    let spaces: Vec<usize> = text.char_indices().filter(|(_, c)| *c == ' ').map(|(i, _)| i).collect();
    let Some(&split) = spaces.iter().rev().find(|&&i| fits(&text[..i])) else { return vec![shorten(text, fits)] };
    let (first, rest) = (&text[..split], text[split + 1..].trim_start());
    vec![first.to_string(), shorten(rest, fits)]
}

/// `text`, or its longest prefix (in whole characters) that fits with "…" after it.
fn shorten(text: &str, fits: &dyn Fn(&str) -> bool) -> String {
    if fits(text) {
        return text.to_string();
    }
    let ends: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    ends.iter().rev().map(|&i| format!("{}…", text[..i].trim_end())).find(|s| fits(s)).unwrap_or_else(|| "…".into())
}

/// A vertical colour bar from `lo` to `hi` (in mapped units) with ticks.
fn draw_colorbar<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, lo: f64, hi: f64, scale: Scale, label: &str) -> DrawResult<(), DB> {
    let mut chart =
        ChartBuilder::on(area).margin_top(50).margin_bottom(70).margin_right(10).y_label_area_size(58).build_cartesian_2d(0f64..1f64, lo..hi)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .disable_x_axis()
        .y_labels(if scale == Scale::Log { (hi - lo).round() as usize + 1 } else { 6 })
        .y_label_formatter(&|y| scale.tick_label(*y))
        .y_desc(label)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .draw()?;
    let steps = 200;
    chart.draw_series((0..steps).map(|i| {
        let a = lo + (hi - lo) * i as f64 / steps as f64;
        let b = lo + (hi - lo) * (i + 1) as f64 / steps as f64;
        Rectangle::new([(0.0, a), (1.0, b)], viridis(i as f64 / (steps - 1) as f64).filled())
    }))?;
    Ok(())
}

/// One head's attention map: rows are query bins, columns key bins (or the first K keys).
pub struct HeadHeatmap {
    pub title: String,
    pub subtitle: String,
    /// Row-major [rows × cols].
    pub values: Vec<f32>,
    pub rows: usize,
    pub cols: usize,
    /// Position range of each row bin and column bin (for the causal mask and tick labels).
    pub row_edges: Vec<usize>,
    pub col_edges: Vec<usize>,
    /// Labels per column / row (display text of one token each), when few enough to read.
    pub col_tokens: Option<Vec<String>>,
    pub row_tokens: Option<Vec<String>>,
    pub scale: Scale,
}

/// Most tokens that still get one label each on an axis.
pub const MAX_LABELLED_TOKENS: usize = 48;

impl HeadHeatmap {
    fn axis_label(edges: &[usize], tokens: &Option<Vec<String>>, v: f64) -> String {
        if v.fract() != 0.0 {
            return String::new();
        }
        let i = v.floor() as usize;
        match tokens {
            Some(t) => t.get(i).cloned().unwrap_or_default(),
            None => edges.get(i).map_or(String::new(), |p| p.to_string()),
        }
    }
}

impl Figure for HeadHeatmap {
    fn size(&self) -> (u32, u32) {
        (980, 860)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<(), DB> {
        root.fill(&WHITE)?;
        let (w, _) = self.size();
        let body = header(root, &self.title, &self.subtitle)?;
        let (main, bar) = body.split_horizontally(w - 120);
        let max = self.values.iter().copied().fold(0f32, f32::max).max(1e-12) as f64;
        let (lo, hi) = match self.scale {
            Scale::Linear => (0.0, max),
            Scale::Log => (LOG_FLOOR.log10(), max.log10().ceil().max(LOG_FLOOR.log10() + 1.0)),
        };
        let labelled = self.col_tokens.is_some();
        let label_area = if labelled { 110 } else { 50 };
        let mut chart = ChartBuilder::on(&main)
            .margin(12)
            .x_label_area_size(label_area)
            .y_label_area_size(if self.row_tokens.is_some() { 100 } else { 60 })
            .build_cartesian_2d(0f64..self.cols as f64, self.rows as f64..0f64)?;
        let x_fmt = |v: &f64| Self::axis_label(&self.col_edges, &None, *v);
        let y_fmt = |v: &f64| Self::axis_label(&self.row_edges, &None, *v);
        // Token labels are drawn one per cell below (plotters' own ticks would skip some).
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(if self.col_tokens.is_some() { 0 } else { 10 })
            .y_labels(if self.row_tokens.is_some() { 0 } else { 10 })
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .label_style((FONT, 14))
            .x_desc(if self.col_tokens.is_some() { "key token" } else { "key position" })
            .y_desc(if self.row_tokens.is_some() { "query token" } else { "query position" })
            .axis_desc_style((FONT, 16))
            .draw()?;
        let base = main.get_base_pixel();
        let to_main = |p: (i32, i32)| (p.0 - base.0, p.1 - base.1);
        {
            use plotters::style::text_anchor::{HPos, Pos, VPos};
            let small = |n: usize| if n <= 24 { 13 } else { 11 };
            if let Some(tokens) = &self.col_tokens {
                let style =
                    TextStyle::from((FONT, small(self.cols)).into_font()).transform(FontTransform::Rotate90).pos(Pos::new(HPos::Left, VPos::Center));
                for (c, t) in tokens.iter().enumerate().take(self.cols) {
                    let (x, y) = to_main(chart.backend_coord(&(c as f64 + 0.5, self.rows as f64)));
                    main.draw(&Text::new(t.clone(), (x, y + 6), style.clone()))?;
                }
            }
            if let Some(tokens) = &self.row_tokens {
                let style = TextStyle::from((FONT, small(self.rows)).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
                for (r, t) in tokens.iter().enumerate().take(self.rows) {
                    let (x, y) = to_main(chart.backend_coord(&(0.0, r as f64 + 0.5)));
                    main.draw(&Text::new(t.clone(), (x - 6, y), style.clone()))?;
                }
            }
        }
        let cells = (0..self.rows).flat_map(|r| (0..self.cols).map(move |c| (r, c)));
        chart.draw_series(cells.map(|(r, c)| {
            let (x, y) = (c as f64, r as f64);
            // A key bin that starts after the query bin's last position is masked out entirely.
            let masked = self.col_edges.get(c).zip(self.row_edges.get(r + 1)).is_some_and(|(&k0, &q_end)| k0 >= q_end);
            let color = if masked {
                MASKED
            } else {
                let m = self.scale.map(self.values[r * self.cols + c] as f64);
                viridis((m - lo) / (hi - lo).max(1e-12))
            };
            Rectangle::new([(x, y), (x + 1.0, y + 1.0)], color.filled())
        }))?;
        draw_colorbar(&bar, lo, hi, self.scale, "attention")
    }
}

/// A layer × head grid of one number per head (α_k by default).
pub struct HeadGrid {
    pub title: String,
    pub subtitle: String,
    /// [layer][head]
    pub values: Vec<Vec<f64>>,
    pub value_label: String,
}

impl Figure for HeadGrid {
    fn size(&self) -> (u32, u32) {
        let heads = self.values.first().map_or(1, Vec::len) as u32;
        let layers = self.values.len() as u32;
        ((260 + heads * 56).clamp(960, 1500), (190 + layers * 26).clamp(480, 1400))
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<(), DB> {
        root.fill(&WHITE)?;
        let (w, _) = self.size();
        let body = header(root, &self.title, &self.subtitle)?;
        let (main, bar) = body.split_horizontally(w - 120);
        let layers = self.values.len();
        let heads = self.values.first().map_or(0, Vec::len);
        let hi = self.values.iter().flatten().copied().fold(0f64, f64::max).max(1e-12);
        let mut chart = ChartBuilder::on(&main)
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..heads as f64, layers as f64..0f64)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(heads + 1)
            .y_labels((layers + 1).min(31))
            .x_label_formatter(&|v| if v.fract() == 0.0 && (*v as usize) < heads { format!("{}", *v as usize) } else { String::new() })
            .y_label_formatter(&|v| if v.fract() == 0.0 && (*v as usize) < layers { format!("{}", *v as usize) } else { String::new() })
            .x_label_offset(if heads > 0 { (main.dim_in_pixel().0 as i32 - 80) / heads as i32 / 2 } else { 0 })
            .y_label_offset(if layers > 0 { (main.dim_in_pixel().1 as i32 - 110) / layers as i32 / 2 } else { 0 })
            .x_desc("head")
            .y_desc("layer")
            .label_style((FONT, 13))
            .axis_desc_style((FONT, 16))
            .draw()?;
        chart.draw_series(self.values.iter().enumerate().flat_map(|(l, row)| {
            row.iter()
                .enumerate()
                .map(move |(h, &v)| Rectangle::new([(h as f64, l as f64), (h as f64 + 1.0, l as f64 + 1.0)], viridis(v / hi).filled()))
        }))?;
        // The values themselves when the cells are wide enough to hold them.
        if heads <= 16 {
            chart.draw_series(self.values.iter().enumerate().flat_map(|(l, row)| {
                row.iter().enumerate().map(move |(h, &v)| {
                    let color = if v / hi > 0.6 { BLACK } else { WHITE };
                    Text::new(format!("{v:.2}"), (h as f64 + 0.18, l as f64 + 0.2), (FONT, 11).into_font().color(&color))
                })
            }))?;
        }
        draw_colorbar(&bar, 0.0, hi, Scale::Linear, &self.value_label)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_subtitles_wrap_and_cut_instead_of_running_off() {
        let fits = |s: &str| s.chars().count() <= 10;
        assert_eq!(wrap_to_fit("short", &fits), ["short"]);
        assert_eq!(wrap_to_fit("one two three four", &fits), ["one two", "three four"]);
        assert_eq!(wrap_to_fit("one two three four five", &fits), ["one two", "three fou…"]);
        assert_eq!(wrap_to_fit("abcdefghijklmnop", &fits), ["abcdefghi…"]);
    }
}
