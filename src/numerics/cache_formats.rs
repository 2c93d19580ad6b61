//! The number formats a KV cache stores keys and values in — llama.cpp's cache types (`f32`, `f16`,
//! `bf16`, the 32-wide blocks `q8_0`, `q5_0`, `q5_1`, `q4_0`, `q4_1`, `iq4_nl`) and vLLM's `fp8`
//! (e4m3, e5m2) — as a round trip: a row of f32 in, the values the engine reads back out.
//!
//! Each block format follows ggml's CPU writer (the `from_float` a cache write calls), including
//! its order of float operations, so the round trip is bit-exact against llama.cpp (held against
//! its library by `tests/cache_formats.rs`): scales are computed in f32, stored as f16, and the
//! stored f16 scale is what dequantization multiplies by.

use half::{bf16, f16};

/// One cache storage format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CacheFormat {
    F32,
    F16,
    Bf16,
    #[serde(rename = "q8_0")]
    Q8_0,
    #[serde(rename = "q5_0")]
    Q5_0,
    #[serde(rename = "q5_1")]
    Q5_1,
    #[serde(rename = "q4_0")]
    Q4_0,
    #[serde(rename = "q4_1")]
    Q4_1,
    #[serde(rename = "iq4_nl")]
    Iq4Nl,
    Fp8E4m3,
    Fp8E5m2,
    /// KIVI's 2-bit codes (`numerics::kivi`): not a row format, see [`CacheFormat::is_kivi`].
    Kivi2,
    Kivi4,
}

/// Values per block of the block formats.
pub const BLOCK: usize = 32;

/// iq4_nl's sixteen non-uniform levels (ggml's `kvalues_iq4nl`).
const IQ4_NL_LEVELS: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

impl CacheFormat {
    pub const ALL: [CacheFormat; 11] = [
        CacheFormat::F32,
        CacheFormat::F16,
        CacheFormat::Bf16,
        CacheFormat::Q8_0,
        CacheFormat::Q5_0,
        CacheFormat::Q5_1,
        CacheFormat::Q4_0,
        CacheFormat::Q4_1,
        CacheFormat::Iq4Nl,
        CacheFormat::Fp8E4m3,
        CacheFormat::Fp8E5m2,
    ];

    /// The name on the command line and in run files (llama.cpp's for its types).
    pub fn name(self) -> &'static str {
        match self {
            CacheFormat::F32 => "f32",
            CacheFormat::F16 => "f16",
            CacheFormat::Bf16 => "bf16",
            CacheFormat::Q8_0 => "q8_0",
            CacheFormat::Q5_0 => "q5_0",
            CacheFormat::Q5_1 => "q5_1",
            CacheFormat::Q4_0 => "q4_0",
            CacheFormat::Q4_1 => "q4_1",
            CacheFormat::Iq4Nl => "iq4_nl",
            CacheFormat::Fp8E4m3 => "fp8-e4m3",
            CacheFormat::Fp8E5m2 => "fp8-e5m2",
            CacheFormat::Kivi2 => "kivi2",
            CacheFormat::Kivi4 => "kivi4",
        }
    }

    /// KIVI's schemes (keys per channel, values per token, a full-precision recent window): not
    /// in [`CacheFormat::ALL`], whose formats round one row at a time.
    pub const KIVI: [CacheFormat; 2] = [CacheFormat::Kivi2, CacheFormat::Kivi4];

    pub fn parse(s: &str) -> Option<CacheFormat> {
        CacheFormat::ALL.into_iter().chain(CacheFormat::KIVI).find(|f| f.name() == s)
    }

    /// KIVI's code width (`Some(2)`, `Some(4)`) for its schemes.
    pub fn kivi_bits(self) -> Option<u32> {
        match self {
            CacheFormat::Kivi2 => Some(2),
            CacheFormat::Kivi4 => Some(4),
            _ => None,
        }
    }

    /// Whether the format is one of KIVI's, whose rounding depends on the neighbouring tokens and
    /// on the query's distance (`numerics::kivi`), so it has no row round trip.
    pub fn is_kivi(self) -> bool {
        self.kivi_bits().is_some()
    }

    /// Storage bits per value, block scales included (q4_0: 18 bytes per 32 values = 4.5).
    pub fn bits_per_value(self) -> f64 {
        match self {
            CacheFormat::F32 => 32.0,
            CacheFormat::F16 | CacheFormat::Bf16 => 16.0,
            CacheFormat::Q8_0 => 34.0 * 8.0 / 32.0,
            CacheFormat::Q5_0 => 22.0 * 8.0 / 32.0,
            CacheFormat::Q5_1 => 24.0 * 8.0 / 32.0,
            CacheFormat::Q4_0 | CacheFormat::Iq4Nl => 18.0 * 8.0 / 32.0,
            CacheFormat::Q4_1 => 20.0 * 8.0 / 32.0,
            CacheFormat::Fp8E4m3 | CacheFormat::Fp8E5m2 => 8.0,
            // A group of 32 codes carries its f16 min and scale (32 bits: 1 a value); the recent
            // window's tokens are counted apart, at f16 (`kv::memory`).
            CacheFormat::Kivi2 => 2.0 + 1.0,
            CacheFormat::Kivi4 => 4.0 + 1.0,
        }
    }

    /// Whether the format shares one scale across a block of 32 (ggml's "quantized" types, the
    /// ones llama.cpp rotates by a Hadamard matrix before storing).
    pub fn is_block(self) -> bool {
        matches!(self, CacheFormat::Q8_0 | CacheFormat::Q5_0 | CacheFormat::Q5_1 | CacheFormat::Q4_0 | CacheFormat::Q4_1 | CacheFormat::Iq4Nl)
    }

    /// Whether the round trip changes anything.
    pub fn is_exact(self) -> bool {
        self == CacheFormat::F32
    }

    /// The format ggml converts a query to before its dot product with keys stored in `self`
    /// (the type's `vec_dot_type`: 8-bit blocks for the block formats, f16 / bf16 for those).
    /// q8_1 (for q4_1, q5_1) reads back as q8_0 does; its extra block sum only speeds the product.
    pub fn query_format(self) -> CacheFormat {
        match self {
            f if f.is_block() => CacheFormat::Q8_0,
            CacheFormat::F16 => CacheFormat::F16,
            CacheFormat::Bf16 => CacheFormat::Bf16,
            _ => CacheFormat::F32,
        }
    }

    /// Rounds `row` in place to what the cache returns for it. Block formats need a row length
    /// that is a multiple of [`BLOCK`] (checked when the cache is configured). KIVI's schemes have
    /// no row round trip: the caches refuse them before storing a row (`CacheRounding::refuse_kivi`).
    pub fn round_trip(self, row: &mut [f32]) {
        debug_assert!(!self.is_kivi(), "KIVI has no row round trip");
        match self {
            CacheFormat::F32 => {}
            CacheFormat::F16 => row.iter_mut().for_each(|x| *x = f16::from_f32(*x).to_f32()),
            CacheFormat::Bf16 => row.iter_mut().for_each(|x| *x = bf16::from_f32(*x).to_f32()),
            CacheFormat::Fp8E4m3 => row.iter_mut().for_each(|x| *x = fp8_round(*x, 3, 7, 448.0)),
            CacheFormat::Fp8E5m2 => row.iter_mut().for_each(|x| *x = fp8_round(*x, 2, 15, 57344.0)),
            CacheFormat::Kivi2 | CacheFormat::Kivi4 => {}
            block => row.chunks_exact_mut(BLOCK).for_each(|b| round_block(block, b)),
        }
    }
}

/// A float stored as f16 and read back (the block scales).
fn via_f16(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

/// The value of largest magnitude in a block (the first, on ties), as ggml's writers pick it.
fn signed_max(b: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in b {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

fn round_block(format: CacheFormat, b: &mut [f32]) {
    match format {
        CacheFormat::Q8_0 => {
            // ggml's AVX2 writer: the multiplier is 127 / amax (not 1 / d), rounded half to even.
            let amax = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let d = via_f16(amax / 127.0);
            let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
            b.iter_mut().for_each(|x| *x = d * ((*x * id).round_ties_even() as i8) as f32);
        }
        CacheFormat::Q4_0 | CacheFormat::Q5_0 => {
            // Symmetric: d = max / −2^(bits−1), codes u = trunc(x/d + 2^(bits−1) + ½) capped.
            let half = if format == CacheFormat::Q4_0 { 8.0f32 } else { 16.0 };
            let top = 2.0 * half - 1.0;
            let d = signed_max(b) / -half;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let ds = via_f16(d);
            b.iter_mut().for_each(|x| *x = ds * (trunc_i8(*x * id + half + 0.5).min(top) - half));
        }
        CacheFormat::Q4_1 | CacheFormat::Q5_1 => {
            // Affine: d = (max − min) / (2^bits − 1), m = min, u = trunc((x − min)/d + ½).
            let levels = if format == CacheFormat::Q4_1 { 15.0f32 } else { 31.0 };
            let (min, max) = b.iter().fold((f32::MAX, -f32::MAX), |(lo, hi), &v| (lo.min(v), hi.max(v)));
            let d = (max - min) / levels;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            let (ds, ms) = (via_f16(d), via_f16(min));
            b.iter_mut().for_each(|x| {
                let u = trunc_i8((*x - min) * id + 0.5);
                // q4_1 caps at 15; q5_1 keeps the low 5 bits of the code it writes.
                let u = if format == CacheFormat::Q4_1 { u.min(levels) } else { ((u as i32) & 31) as f32 };
                *x = ds * u + ms;
            });
        }
        CacheFormat::Iq4Nl => round_iq4_nl(b),
        _ => {}
    }
}

/// C's `(int8_t) x` for the block writers' codes: truncation toward zero, wrapped to 8 bits.
fn trunc_i8(x: f32) -> f32 {
    (x as i32 as i8) as f32
}

/// ggml's iq4_nl writer for a cache (its reference, no search over scales): the scale from the
/// largest value, each value to its nearest level, then the least-squares scale for those
/// levels with weights x².
fn round_iq4_nl(b: &mut [f32]) {
    let (amax, max) = (b.iter().fold(0.0f32, |m, v| m.max(v.abs())), signed_max(b));
    if amax < 1e-15 {
        b.iter_mut().for_each(|x| *x = 0.0);
        return;
    }
    let id = 1.0 / (max / IQ4_NL_LEVELS[0] as f32);
    let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
    let mut codes = [0usize; BLOCK];
    for (c, &x) in codes.iter_mut().zip(b.iter()) {
        *c = nearest_level(id * x);
        let (q, w) = (IQ4_NL_LEVELS[*c] as f32, x * x);
        sumqx += w * q * x;
        sumq2 += w * q * q;
    }
    let d = via_f16(if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 });
    b.iter_mut().zip(codes).for_each(|(x, c)| *x = d * IQ4_NL_LEVELS[c] as f32);
}

/// Index of the iq4_nl level nearest `x` (the upper one on a tie), as ggml's `best_index_int8`.
fn nearest_level(x: f32) -> usize {
    let v = |i: usize| IQ4_NL_LEVELS[i] as f32;
    if x <= v(0) {
        return 0;
    }
    if x >= v(15) {
        return 15;
    }
    let (mut lo, mut hi) = (0usize, 15usize);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < v(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if x - v(hi - 1) < v(hi) - x {
        hi - 1
    } else {
        hi
    }
}

/// Rounds to the nearest 8-bit float with `mantissa` bits and exponent `bias`, half to even,
/// saturating at ±`max` (vLLM's conversion with a scale of 1: finite, no infinities). NaN stays.
fn fp8_round(x: f32, mantissa: i32, bias: i32, max: f32) -> f32 {
    if !x.is_finite() || x == 0.0 {
        return if x.is_nan() { x } else { x.signum() * max.min(x.abs()) };
    }
    let a = x.abs();
    // The spacing of representable values at a's binade (subnormals share the smallest one).
    let exp = (a.log2().floor() as i32).max(1 - bias);
    let step = 2f32.powi(exp - mantissa);
    let r = ((a / step).round_ties_even() * step).min(max);
    x.signum() * r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sizes_match_the_block_layouts() {
        for f in CacheFormat::ALL {
            assert_eq!(CacheFormat::parse(f.name()), Some(f));
        }
        assert_eq!(CacheFormat::Q4_0.bits_per_value(), 4.5);
        assert_eq!(CacheFormat::Q8_0.bits_per_value(), 8.5);
        assert_eq!(CacheFormat::parse("q4"), None);
    }

    #[test]
    fn fp8_rounds_to_its_grid_and_saturates() {
        assert_eq!(fp8_round(1.0, 3, 7, 448.0), 1.0);
        assert_eq!(fp8_round(1.0625, 3, 7, 448.0), 1.0); // halfway between 1 and 1.125: even
        assert_eq!(fp8_round(1.07, 3, 7, 448.0), 1.125);
        assert_eq!(fp8_round(1e6, 3, 7, 448.0), 448.0);
        assert_eq!(fp8_round(-1e6, 2, 15, 57344.0), -57344.0);
        assert_eq!(fp8_round(2f32.powi(-9), 3, 7, 448.0), 2f32.powi(-9)); // smallest subnormal
        assert_eq!(fp8_round(2f32.powi(-11), 3, 7, 448.0), 0.0);
    }

    #[test]
    fn a_block_with_one_outlier_loses_the_small_values() {
        let mut b = [0.01f32; BLOCK];
        b[0] = 100.0;
        CacheFormat::Q4_0.round_trip(&mut b);
        assert!((b[0] - 100.0).abs() < 0.1, "{}", b[0]);
        assert!(b[1..].iter().all(|&x| x == 0.0), "{b:?}");
    }
}
