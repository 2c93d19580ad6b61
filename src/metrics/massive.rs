//! Sun et al.'s massive-activation criterion and the median |h| it is measured against.

/// Elements above this |h| are all kept (Sun et al.'s absolute bar for a massive activation).
pub const MASSIVE_ABS: f32 = 100.0;
/// … and a massive activation is also at least this many times the layer's median |h|.
pub const MASSIVE_RATIO: f32 = 1000.0;
/// Sun et al.'s criterion: |h| > [`MASSIVE_ABS`] and |h| ≥ [`MASSIVE_RATIO`] × the layer's median |h|.
pub fn is_massive(value: f32, median_abs: f32) -> bool {
    value.abs() > MASSIVE_ABS && value.abs() >= MASSIVE_RATIO * median_abs
}

/// The criterion in words, for every place that states it.
pub fn criterion() -> String {
    format!("|h| > {MASSIVE_ABS} and ≥ {MASSIVE_RATIO}× the layer median")
}

/// Median of |x| (mean of the two middle values for an even count).
pub fn median_abs(x: &[f32]) -> f32 {
    if x.is_empty() {
        return 0.0;
    }
    let mut v: Vec<f32> = x.iter().map(|a| a.abs()).collect();
    let mid = v.len() / 2;
    let (_, &mut upper, _) = v.select_nth_unstable_by(mid, f32::total_cmp);
    if v.len() % 2 == 1 {
        upper
    } else {
        let lower = v[..mid].iter().copied().fold(f32::NEG_INFINITY, f32::max);
        (lower + upper) / 2.0
    }
}
