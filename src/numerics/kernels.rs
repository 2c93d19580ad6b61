//! The crate's scalar kernels, written so they vectorize: a branch-free e^x, masked softmax over
//! row segments, SwiGLU and GeGLU. Results are bit-identical with and without the AVX2 copies.

use candle_core::{Device, Tensor};
use rayon::prelude::*;

use super::tensor::with_f32;
use crate::error::Result;

/// silu(gate) · up for a (T, 2·d_ff) gate|up output, in one parallel pass over its rows.
pub fn swiglu(gate_up: &Tensor) -> Result<Tensor> {
    gated(gate_up, silu_times)
}

/// gelu_tanh(gate) · up (Gemma's MLP) for a (T, 2·d_ff) gate|up output, in one parallel pass over
/// its rows, e^x vectorized where candle's GELU calls libm's tanh per element.
pub fn geglu(gate_up: &Tensor) -> Result<Tensor> {
    gated(gate_up, gelu_tanh_times)
}

/// act(gate) · up row by row, `times(g, u, out)` writing one row.
fn gated(gate_up: &Tensor, times: fn(&[f32], &[f32], &mut [f32])) -> Result<Tensor> {
    let (t, two_ff) = gate_up.dims2()?;
    let ff = two_ff / 2;
    let gate_up = gate_up.contiguous()?;
    let out = with_f32(&gate_up, |x| {
        let mut out = vec![0f32; t * ff];
        out.par_chunks_mut(ff).zip(x.par_chunks(two_ff)).for_each(|(o, row)| {
            let (g, u) = row.split_at(ff);
            times(g, u, o)
        });
        out
    })?;
    Ok(Tensor::from_vec(out, (t, ff), &Device::Cpu)?)
}

/// Softmax over the first `visible` entries; the rest become exactly 0.
pub fn softmax_prefix(row: &mut [f32], visible: usize) {
    let visible = visible.min(row.len());
    // One segment: the visible prefix.
    #[allow(clippy::single_range_in_vec_init)]
    softmax_segments(row, &[0..visible]);
}

super::simd::vectorized_fn! {
    /// Softmax over the entries inside `segments` (disjoint, in order); every other entry becomes
    /// exactly 0 (not e^−87: a hidden key must contribute nothing).
    pub fn softmax_segments(row: &mut [f32], segments: &[std::ops::Range<usize>]) {
        // Eight lanes throughout so each pass vectorizes (a single accumulator cannot be
        // reordered); the max is the same in any order, the sum's order is fixed.
        let mut max_lanes = [f32::NEG_INFINITY; 8];
        for r in segments {
            let (chunks, rest) = row[r.clone()].as_chunks::<8>();
            for c in chunks {
                for (m, &v) in max_lanes.iter_mut().zip(c) {
                    *m = m.max(v);
                }
            }
            max_lanes[0] = rest.iter().fold(max_lanes[0], |m, &v| m.max(v));
        }
        let max = max_lanes.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let mut sum = 0f32;
        let mut end = 0;
        for r in segments {
            row[end..r.start].fill(0.0);
            // e^(s − max) stored and summed in the same pass.
            let mut lanes = [0f32; 8];
            let (chunks, rest) = row[r.clone()].as_chunks_mut::<8>();
            for c in chunks {
                for (l, s) in lanes.iter_mut().zip(c.iter_mut()) {
                    *s = exp_f32(*s - max);
                    *l += *s;
                }
            }
            rest.iter_mut().for_each(|s| *s = exp_f32(*s - max));
            sum += lanes.iter().sum::<f32>() + rest.iter().sum::<f32>();
            end = r.end;
        }
        row[end..].fill(0.0);
        let inv = 1.0 / sum;
        for r in segments {
            row[r.clone()].iter_mut().for_each(|s| *s *= inv);
        }
    }
}

/// [`softmax_segments`] with a learned sink logit joining the denominator (gpt-oss): the entries
/// sum to 1 − p and p, the mass the sink took, is returned. Computed as transformers does: the
/// max over the row and the sink subtracted first.
pub fn softmax_segments_with_sink(row: &mut [f32], segments: &[std::ops::Range<usize>], sink: f32) -> f32 {
    let max = segments.iter().flat_map(|r| row[r.clone()].iter().copied()).fold(sink, f32::max);
    let sink_exp = exp_f32(sink - max);
    let mut sum = sink_exp;
    let mut end = 0;
    for r in segments {
        row[end..r.start].fill(0.0);
        for s in &mut row[r.clone()] {
            *s = exp_f32(*s - max);
            sum += *s;
        }
        end = r.end;
    }
    row[end..].fill(0.0);
    let inv = 1.0 / sum;
    for r in segments {
        row[r.clone()].iter_mut().for_each(|s| *s *= inv);
    }
    sink_exp * inv
}

super::simd::vectorized_fn! {
    /// Σ x in f32, over eight lanes in a fixed order (so it vectorizes and gives the same bits
    /// on every run).
    pub fn sum_lanes(x: &[f32]) -> f32 {
        let mut lanes = [0f32; 8];
        let (chunks, rest) = x.as_chunks::<8>();
        for c in chunks {
            for (l, &v) in lanes.iter_mut().zip(c) {
                *l += v;
            }
        }
        lanes.iter().sum::<f32>() + rest.iter().sum::<f32>()
    }
}

super::simd::vectorized_fn! {
    /// out = silu(g) · u, elementwise.
    fn silu_times(g: &[f32], u: &[f32], out: &mut [f32]) {
        for ((o, &g), &u) in out.iter_mut().zip(g).zip(u) {
            *o = g / (1.0 + exp_f32(-g)) * u;
        }
    }
}

super::simd::vectorized_fn! {
    /// out = gelu_tanh(g) · u, elementwise: 0.5·g·(1 + tanh(z)) with z = √(2/π)·(g + 0.044715·g³),
    /// written as g / (1 + e^(−2z)) (the same function; no cancellation near tanh = −1).
    fn gelu_tanh_times(g: &[f32], u: &[f32], out: &mut [f32]) {
        const TWO_SQRT_2_OVER_PI: f32 = 1.595_769_2;
        for ((o, &g), &u) in out.iter_mut().zip(g).zip(u) {
            let z2 = TWO_SQRT_2_OVER_PI * (g + 0.044_715 * g * g * g);
            *o = g / (1.0 + exp_f32(-z2)) * u;
        }
    }
}

/// e^x with ≤2 ulp error for x in [−87, 88] (Cephes' expf polynomial), written branch-free so
/// loops over it vectorize; `f32::exp` is a libm call per element and dominated softmax time.
/// Arguments below −87 return e^−87 ≈ 1.6e−38, which is 0 for every use here.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding 1.5·2^23 rounds to the nearest integer in the default rounding mode.
    const ROUND: f32 = 12_582_912.0;
    // max/min rather than clamp, and n's integer read from the rounded sum's bits rather than a
    // saturating `as` cast: both vectorize (clamp and the cast compiled to scalar code).
    let input = x;
    #[allow(clippy::manual_clamp)]
    let x = x.max(-87.0).min(88.0);
    let shifted = x * LOG2E + ROUND;
    let n = shifted - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r + 0.166_666_65) * r + 0.5;
    let p = p * r * r + r + 1.0;
    // shifted = 1.5·2^23 + n exactly (its ulp is 1), so its bits are ROUND's plus n.
    let n_int = shifted.to_bits().wrapping_sub(ROUND.to_bits());
    let e = p * f32::from_bits(n_int.wrapping_add(127) << 23);
    // NaN stays NaN (max/min would have replaced it), as a blend that still vectorizes.
    if input.is_nan() {
        input
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The formula before it was made to vectorize (clamp, saturating cast): the same bits.
    fn exp_with_clamp_and_cast(x: f32) -> f32 {
        const ROUND: f32 = 12_582_912.0;
        let x = x.clamp(-87.0, 88.0);
        let n = (x * std::f32::consts::LOG2_E + ROUND) - ROUND;
        let r = x - n * 0.693_359_4 - n * -2.121_944_4e-4;
        let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r + 0.166_666_65) * r + 0.5;
        let p = p * r * r + r + 1.0;
        p * f32::from_bits(((n as i32 + 127) as u32) << 23)
    }

    #[test]
    fn vectorizable_exp_is_the_clamped_formula_bit_for_bit() {
        let mut x = -120.0f32;
        while x <= 120.0 {
            assert_eq!(exp_f32(x).to_bits(), exp_with_clamp_and_cast(x).to_bits(), "x = {x}");
            x += 0.001_7;
        }
        for x in [f32::NEG_INFINITY, f32::INFINITY, -87.0, 88.0, -0.0, 0.0] {
            assert_eq!(exp_f32(x).to_bits(), exp_with_clamp_and_cast(x).to_bits(), "x = {x}");
        }
        assert!(exp_f32(f32::NAN).is_nan());
    }

    #[test]
    fn fast_exp_matches_libm() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x <= 88.0 {
            let rel = ((exp_f32(x) as f64 - (x as f64).exp()) / (x as f64).exp()).abs();
            worst = worst.max(rel);
            x += 0.0137;
        }
        assert!(worst < 3e-7, "relative error {worst}");
        assert_eq!(exp_f32(0.0), 1.0);
        assert!(exp_f32(-1000.0) < 1e-37);
    }

    #[test]
    fn masked_softmax_rows() {
        // The future entry (100) is ignored, whatever it holds, and comes back as exactly 0.
        let mut row = vec![0.5, 1.0, 1.5, 100.0];
        softmax_prefix(&mut row, 3);
        let e: Vec<f32> = [0.5f32, 1.0, 1.5].iter().map(|x| x.exp()).collect();
        let z: f32 = e.iter().sum();
        for i in 0..3 {
            assert!((row[i] - e[i] / z).abs() < 1e-7);
        }
        assert_eq!(row[3], 0.0);
    }

    crate::numerics::simd::vectorized_fn! {
        fn shifted_exps(x: &[f32], out: &mut Vec<f32>) {
            out.extend(x.iter().map(|&v| exp_f32(v) * 0.5 + v));
        }
    }

    #[test]
    fn same_result_with_and_without_wide_vectors() {
        let x: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin() * 20.0).collect();
        let mut wide = Vec::new();
        shifted_exps(&x, &mut wide);
        let portable: Vec<f32> = x.iter().map(|&v| exp_f32(v) * 0.5 + v).collect();
        assert_eq!(wide, portable);
    }

    #[test]
    fn geglu_matches_the_tanh_formula_in_f64() {
        // gate and up in [−12, 12]: candle's (and transformers') 0.5·g·(1 + tanh(z)).
        let (t, ff) = (3, 801);
        let x: Vec<f32> = (0..t * 2 * ff).map(|i| ((i * 7919) % 2400) as f32 / 100.0 - 12.0).collect();
        let gate_up = Tensor::from_vec(x.clone(), (t, 2 * ff), &Device::Cpu).unwrap();
        let got: Vec<f32> = geglu(&gate_up).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(got.len(), t * ff);
        for r in 0..t {
            for j in 0..ff {
                let g = x[r * 2 * ff + j] as f64;
                let z = (2.0 / std::f64::consts::PI).sqrt() * (g + 0.044715 * g * g * g);
                let want = 0.5 * g * (1.0 + z.tanh()) * (x[r * 2 * ff + ff + j] as f64);
                let got = got[r * ff + j] as f64;
                assert!(got.is_finite() && (got - want).abs() <= 1e-6 * want.abs().max(1.0), "g = {g}: {got} vs {want}");
            }
        }
    }
}
