//! Charts over an x axis, each a plain data struct implementing [`Figure`]: named series as lines
//! (perplexity while streaming, activation magnitudes per layer), bars (largest |h| per dim,
//! massive ones highlighted) and intervals.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::plot::{header, Figure, FONT};

/// Named series over one x axis, drawn as lines (log y when asked), with optional vertical markers.
pub struct LineChart {
    pub title: String,
    pub subtitle: String,
    pub x_desc: String,
    pub y_desc: String,
    pub series: Vec<(String, Vec<(f64, f64)>)>,
    pub log_y: bool,
    /// (x, label) drawn as dashed vertical lines.
    pub markers: Vec<(f64, String)>,
    /// Draw a dot on every point (for short, discrete x such as layers).
    pub points: bool,
    /// Put the legend in the lower right corner instead of the upper right.
    pub legend_bottom: bool,
}

/// Distinguishable line colours (Okabe–Ito, colour-blind safe).
const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
    RGBColor(240, 228, 66),
];

impl Figure for LineChart {
    fn size(&self) -> (u32, u32) {
        (1100, 640)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<(), DB> {
        root.fill(&WHITE)?;
        let pts = || self.series.iter().flat_map(|(_, s)| s.iter()).filter(|p| p.1.is_finite() && (!self.log_y || p.1 > 0.0));
        let x_max = pts().map(|p| p.0).fold(1f64, f64::max);
        let x_min = pts().map(|p| p.0).fold(x_max, f64::min).min(0.0);
        let y_max = pts().map(|p| p.1).fold(f64::MIN_POSITIVE, f64::max);
        let y_min = pts().map(|p| p.1).fold(y_max, f64::min);
        let body = header(root, &self.title, &self.subtitle)?;
        let mut builder = ChartBuilder::on(&body);
        builder.margin(14).x_label_area_size(50).y_label_area_size(80);
        let series_style = |i: usize| PALETTE[i % PALETTE.len()];
        macro_rules! finish {
            ($chart:expr, $y_desc:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .x_desc(self.x_desc.as_str())
                    .y_desc($y_desc)
                    // One label per integer x for short discrete axes (layers); a dozen for long ones.
                    .x_labels(if self.points && x_max - x_min <= 40.0 { (x_max - x_min).round() as usize + 1 } else { 10 })
                    .x_label_formatter(&|x| {
                        if x.fract() == 0.0 {
                            format!("{x:.0}")
                        } else if self.points {
                            String::new()
                        } else {
                            format!("{x:.1}")
                        }
                    })
                    .y_label_formatter(&|y| {
                        if y.abs() >= 100.0 {
                            format!("{y:.0}")
                        } else if y.abs() >= 1.0 || *y == 0.0 {
                            format!("{y:.1}")
                        } else if y.abs() >= 0.01 {
                            format!("{y:.2}")
                        } else {
                            format!("{y:.2e}")
                        }
                    })
                    .label_style((FONT, 14))
                    .axis_desc_style((FONT, 16))
                    .light_line_style(RGBColor(235, 235, 235))
                    .bold_line_style(RGBColor(215, 215, 215))
                    .draw()?;
                for (i, (name, s)) in self.series.iter().enumerate() {
                    let color = series_style(i);
                    let data: Vec<(f64, f64)> = s.iter().copied().filter(|p| p.1.is_finite() && (!self.log_y || p.1 > 0.0)).collect();
                    chart
                        .draw_series(LineSeries::new(data.clone(), color.stroke_width(2)))?
                        .label(name.as_str())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], color.stroke_width(3)));
                    if self.points {
                        chart.draw_series(data.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
                    }
                }
                let (y0, y1) = (chart.y_range().start, chart.y_range().end);
                for (x, label) in &self.markers {
                    chart.draw_series(DashedLineSeries::new(vec![(*x, y0), (*x, y1)], 6, 4, RGBColor(120, 120, 120).stroke_width(1)))?;
                    chart.draw_series(std::iter::once(Text::new(
                        label.clone(),
                        (*x, y1),
                        (FONT, 13).into_font().color(&RGBColor(90, 90, 90)).pos(plotters::style::text_anchor::Pos::new(
                            plotters::style::text_anchor::HPos::Left,
                            plotters::style::text_anchor::VPos::Top,
                        )),
                    )))?;
                }
                let corner = if self.legend_bottom { SeriesLabelPosition::LowerRight } else { SeriesLabelPosition::UpperRight };
                chart
                    .configure_series_labels()
                    .position(corner)
                    .background_style(WHITE.mix(0.85))
                    .border_style(RGBColor(200, 200, 200))
                    .label_font((FONT, 13))
                    .draw()?;
            }};
        }
        // A log axis over less than a decade shows no ticks; such data reads better on a linear one.
        let log_y = self.log_y && y_max / y_min.max(f64::MIN_POSITIVE) >= 10.0;
        let y_desc = if log_y { format!("{} (log scale)", self.y_desc) } else { self.y_desc.clone() };
        if log_y {
            let lo = y_min.max(f64::MIN_POSITIVE) / 1.5;
            // Headroom above the data for the legend.
            let hi = y_max * 5.0;
            finish!(builder.build_cartesian_2d(x_min..x_max, (lo..hi).log_scale())?, y_desc.as_str());
        } else {
            let pad = (y_max - y_min).abs().max(1e-9) * 0.08;
            finish!(builder.build_cartesian_2d(x_min..x_max, (y_min - pad)..(y_max + 4.0 * pad))?, y_desc.as_str());
        }
        Ok(())
    }
}

/// Bars with labels (e.g. max |h| per hidden dim), log y, highlighted bars in a second colour.
pub struct BarChart {
    pub title: String,
    pub subtitle: String,
    pub x_desc: String,
    pub y_desc: String,
    /// (label, value, highlighted), drawn left to right.
    pub bars: Vec<(String, f64, bool)>,
    /// What a highlighted bar means, for the legend.
    pub highlight_label: String,
    pub other_label: String,
    /// A dashed horizontal reference line and its label.
    pub reference: Option<(f64, String)>,
}

impl Figure for BarChart {
    fn size(&self) -> (u32, u32) {
        (1000, 620)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<(), DB> {
        use plotters::style::text_anchor::{HPos, Pos, VPos};
        root.fill(&WHITE)?;
        let n = self.bars.len().max(1);
        let hi = self.bars.iter().map(|b| b.1).fold(self.reference.as_ref().map_or(1.0, |r| r.0), f64::max) * 4.0;
        let lo = self.bars.iter().map(|b| b.1).filter(|v| *v > 0.0).fold(hi, f64::min).min(1.0) / 2.0;
        let body = header(root, &self.title, &self.subtitle)?;
        let mut chart = ChartBuilder::on(&body)
            .margin(14)
            .x_label_area_size(100)
            .y_label_area_size(80)
            .build_cartesian_2d(0f64..n as f64, (lo..hi).log_scale())?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_label_formatter(&|y| if *y >= 1.0 { format!("{y:.0}") } else { format!("{y:.2}") })
            .label_style((FONT, 14))
            .x_desc(self.x_desc.as_str())
            .y_desc(self.y_desc.as_str())
            .axis_desc_style((FONT, 16))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()?;
        for (hot, label) in [(true, &self.highlight_label), (false, &self.other_label)] {
            let color = if hot { PALETTE[1] } else { PALETTE[0] };
            let bars: Vec<_> = self
                .bars
                .iter()
                .enumerate()
                .filter(|(_, b)| b.2 == hot)
                .map(|(i, b)| Rectangle::new([(i as f64 + 0.15, lo), (i as f64 + 0.85, b.1.max(lo))], color.filled()))
                .collect();
            if !bars.is_empty() {
                chart.draw_series(bars)?.label(label.as_str()).legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
            }
        }
        if let Some((t, label)) = &self.reference {
            chart.draw_series(DashedLineSeries::new(vec![(0.0, *t), (n as f64, *t)], 6, 4, RGBColor(90, 90, 90).stroke_width(1)))?;
            let style = TextStyle::from((FONT, 13).into_font()).color(&RGBColor(60, 60, 60)).pos(Pos::new(HPos::Right, VPos::Bottom));
            chart.draw_series(std::iter::once(Text::new(label.clone(), (n as f64 - 0.1, *t * 1.1), style)))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(200, 200, 200))
            .label_font((FONT, 13))
            .draw()?;
        // One label per bar, centred under it (plotters' own ticks would skip some).
        let base = body.get_base_pixel();
        let style = TextStyle::from((FONT, 12).into_font()).transform(FontTransform::Rotate90).pos(Pos::new(HPos::Left, VPos::Center));
        for (i, (label, _, _)) in self.bars.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(i as f64 + 0.5, lo));
            body.draw(&Text::new(label.clone(), (x - base.0, y - base.1 + 6), style.clone()))?;
        }
        Ok(())
    }
}

/// One value per labelled row with an optional interval (dot and whisker), rows top to bottom:
/// perplexities after eviction per policy, a sampled one with its bootstrap interval.
pub struct IntervalChart {
    pub title: String,
    pub subtitle: String,
    pub x_desc: String,
    /// (label, value, interval, highlighted).
    pub rows: Vec<(String, f64, Option<[f64; 2]>, bool)>,
    pub highlight_label: String,
}

impl Figure for IntervalChart {
    fn size(&self) -> (u32, u32) {
        (1000, 200 + 44 * self.rows.len().max(1) as u32)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<(), DB> {
        use plotters::style::text_anchor::{HPos, Pos, VPos};
        root.fill(&WHITE)?;
        let n = self.rows.len().max(1) as f64;
        let ends = || self.rows.iter().flat_map(|r| [r.1].into_iter().chain(r.2.into_iter().flatten())).filter(|v| v.is_finite() && *v > 0.0);
        let hi = ends().fold(1.0, f64::max);
        let lo = ends().fold(hi, f64::min);
        // A log axis only when the values span a decade (a collapsed window beside the sinks).
        let log_x = hi / lo >= 10.0;
        let body = header(root, &self.title, &self.subtitle)?;
        let mut builder = ChartBuilder::on(&body);
        builder.margin(14).x_label_area_size(50).y_label_area_size(300);
        let y_label = |y: &f64| {
            let i = (n - 0.5 - y).round();
            if (y - (n - 0.5 - i)).abs() < 1e-6 && i >= 0.0 {
                self.rows.get(i as usize).map_or(String::new(), |r| r.0.clone())
            } else {
                String::new()
            }
        };
        macro_rules! finish {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .disable_y_mesh()
                    .y_labels(2 * self.rows.len() + 1)
                    .y_label_formatter(&y_label)
                    .x_label_formatter(&|x| if *x >= 100.0 { format!("{x:.0}") } else { format!("{x:.1}") })
                    .x_desc(self.x_desc.as_str())
                    .label_style((FONT, 14))
                    .axis_desc_style((FONT, 16))
                    .light_line_style(RGBColor(235, 235, 235))
                    .bold_line_style(RGBColor(215, 215, 215))
                    .draw()?;
                for (i, (_, v, ci, hot)) in self.rows.iter().enumerate() {
                    let y = n - 0.5 - i as f64;
                    let color = if *hot { PALETTE[1] } else { PALETTE[0] };
                    if let Some([a, b]) = ci {
                        chart.draw_series(std::iter::once(PathElement::new(vec![(*a, y), (*b, y)], color.stroke_width(2))))?;
                        for end in [*a, *b] {
                            chart.draw_series(std::iter::once(PathElement::new(vec![(end, y - 0.18), (end, y + 0.18)], color.stroke_width(2))))?;
                        }
                    }
                    let dot = chart.draw_series(std::iter::once(Circle::new((*v, y), 6, color.filled())))?;
                    if *hot && i == self.rows.iter().position(|r| r.3).unwrap_or(usize::MAX) {
                        dot.label(self.highlight_label.as_str()).legend(move |(x, y)| Circle::new((x + 7, y), 6, color.filled()));
                    }
                    let text = match ci {
                        Some([a, b]) => format!("{v:.2}  (95% interval {a:.2}–{b:.2})"),
                        None => format!("{v:.2}"),
                    };
                    let at = ci.map_or(*v, |c| c[1]);
                    let style = TextStyle::from((FONT, 13).into_font()).color(&RGBColor(60, 60, 60)).pos(Pos::new(HPos::Left, VPos::Bottom));
                    chart.draw_series(std::iter::once(Text::new(text, (at, y + 0.12), style)))?;
                }
                if self.rows.iter().any(|r| r.3) {
                    chart
                        .configure_series_labels()
                        .position(SeriesLabelPosition::LowerRight)
                        .background_style(WHITE.mix(0.85))
                        .border_style(RGBColor(200, 200, 200))
                        .label_font((FONT, 13))
                        .draw()?;
                }
            }};
        }
        if log_x {
            // Headroom on the right for the value labels.
            finish!(builder.build_cartesian_2d((lo / 1.3..hi * 6.0).log_scale(), 0f64..n)?);
        } else {
            let pad = (hi - lo).max(hi * 0.05);
            finish!(builder.build_cartesian_2d((lo - 0.3 * pad).max(0.0)..hi + 1.2 * pad, 0f64..n)?);
        }
        Ok(())
    }
}
