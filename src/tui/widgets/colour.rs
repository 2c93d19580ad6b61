//! Colour scales shared by the views: one sequential map for attention and magnitudes (value →
//! colour, linear or log), readable text colours on top of it, and fixed colours per head class
//! and per plotted series.

use ratatui::style::Color;

use crate::analysis::heads::HeadClass;

/// Stops of a dark-to-bright sequential map (close to matplotlib's "inferno"): ordered by
/// lightness, so small and large values stay distinguishable on any terminal background.
const STOPS: [(f32, (u8, u8, u8)); 6] =
    [(0.0, (12, 8, 38)), (0.2, (66, 10, 104)), (0.4, (147, 38, 103)), (0.6, (221, 81, 58)), (0.8, (252, 165, 10)), (1.0, (252, 255, 164))];

/// The colour of `t` in [0, 1] (clamped; NaN is the darkest).
pub fn sequential(t: f32) -> Color {
    let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
    let i = STOPS.iter().rposition(|(s, _)| *s <= t).unwrap_or(0).min(STOPS.len() - 2);
    let ((s0, a), (s1, b)) = (STOPS[i], STOPS[i + 1]);
    let f = (t - s0) / (s1 - s0);
    let mix = |x: u8, y: u8| (x as f32 + (y as f32 - x as f32) * f).round() as u8;
    Color::Rgb(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// Text colour that stays readable on `sequential(t)`.
pub fn text_on(t: f32) -> Color {
    if t > 0.55 {
        Color::Black
    } else {
        Color::White
    }
}

pub fn class_colour(c: HeadClass) -> Color {
    match c {
        HeadClass::Sink => Color::Rgb(230, 90, 60),
        HeadClass::PreviousToken => Color::Rgb(70, 130, 220),
        HeadClass::Broad => Color::Rgb(90, 170, 90),
        HeadClass::Content => Color::Rgb(110, 110, 110),
    }
}

pub fn class_letter(c: HeadClass) -> &'static str {
    match c {
        HeadClass::Sink => "S",
        HeadClass::PreviousToken => "P",
        HeadClass::Broad => "B",
        HeadClass::Content => "C",
    }
}

/// Distinct line colours for plotted series.
pub fn series(i: usize) -> Color {
    const COLOURS: [Color; 8] =
        [Color::Cyan, Color::Yellow, Color::Magenta, Color::Green, Color::LightRed, Color::LightBlue, Color::White, Color::LightGreen];
    COLOURS[i % COLOURS.len()]
}

/// Maps values onto [0, 1]: linearly from 0 to `max`, or logarithmically over `decades` decades
/// below `max`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    pub max: f32,
    pub log: bool,
    pub decades: f32,
}

impl Scale {
    pub fn new(max: f32, log: bool) -> Scale {
        Scale { max: if max > 0.0 && max.is_finite() { max } else { 1.0 }, log, decades: 4.0 }
    }

    pub fn norm(&self, v: f32) -> f32 {
        // NaN and non-positive values both map to 0.
        if v.is_nan() || v <= 0.0 {
            return 0.0;
        }
        if self.log {
            ((v / self.max).log10() / self.decades + 1.0).clamp(0.0, 1.0)
        } else {
            (v / self.max).clamp(0.0, 1.0)
        }
    }

    /// The value shown at `t` in [0, 1] (the inverse of [`Scale::norm`]).
    pub fn value_at(&self, t: f32) -> f32 {
        if self.log {
            self.max * 10f32.powf((t - 1.0) * self.decades)
        } else {
            self.max * t
        }
    }
}

/// A number in at most ~7 characters: fixed for ordinary magnitudes, scientific otherwise.
pub fn short(v: f64) -> String {
    let a = v.abs();
    if v == 0.0 {
        "0".into()
    } else if !(1e-3..1e5).contains(&a) {
        format!("{v:.1e}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// The label of the log-axis tick 10^e: "0.01", "1", "100", "1e5".
pub fn decade(e: i32) -> String {
    match e {
        e if e <= -4 || e >= 5 => format!("1e{e}"),
        e if e < 0 => format!("{:.*}", (-e) as usize, 10f64.powi(e)),
        e => format!("{:.0}", 10f64.powi(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_spans_dark_to_bright() {
        assert_eq!(sequential(0.0), Color::Rgb(12, 8, 38));
        assert_eq!(sequential(1.0), Color::Rgb(252, 255, 164));
        assert_eq!(sequential(7.0), sequential(1.0));
        assert_eq!(sequential(f32::NAN), sequential(0.0));
        assert_eq!(sequential(0.1), Color::Rgb(39, 9, 71));
    }

    #[test]
    fn scales_invert() {
        let lin = Scale::new(0.5, false);
        assert_eq!(lin.norm(0.25), 0.5);
        assert_eq!(lin.norm(-1.0), 0.0);
        let log = Scale::new(1.0, true);
        assert!((log.norm(0.01) - 0.5).abs() < 1e-6);
        assert_eq!(log.norm(1e-6), 0.0);
        for t in [0.0f32, 0.3, 1.0] {
            assert!((log.norm(log.value_at(t)) - t).abs() < 1e-5);
            assert!((lin.norm(lin.value_at(t)) - t).abs() < 1e-6);
        }
        assert_eq!(Scale::new(0.0, false).max, 1.0);
    }

    #[test]
    fn short_numbers() {
        assert_eq!(short(0.81234), "0.812");
        assert_eq!(short(3.5), "3.50");
        assert_eq!(short(1234.0), "1234");
        assert_eq!(short(2.5e-5), "2.5e-5");
        assert_eq!(short(0.0), "0");
        assert_eq!([decade(-2), decade(0), decade(2), decade(5), decade(-4)], ["0.01", "1", "100", "1e5", "1e-4"]);
    }
}
