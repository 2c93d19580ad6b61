//! Activation quantization on plain numbers: the outlier risk a layer output carries (what
//! per-tensor int8 would do to its ordinary values, reported from a capture), and the symmetric
//! absmax fake quantization `sinkscope quant` applies (grids, scales, the noise it adds).

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::massive::{is_massive, median_abs};

/// What per-tensor int8 quantization of a layer output would do to its ordinary (non-massive)
/// activations, compared with per-token scales (the seeds' warning about outliers).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QuantRisk {
    pub layer: usize,
    pub max_abs: f32,
    pub median_abs: f32,
    /// Elements counted as massive ([`crate::metrics::massive::is_massive`]) and excluded below.
    pub n_massive: usize,
    /// Per-tensor scale max|h|/127: distinct int8 codes the ordinary activations land on, the
    /// share that round to 0, and their signal-to-quantization-noise ratio in dB.
    pub per_tensor_levels: usize,
    pub per_tensor_share_zero: f64,
    pub per_tensor_sqnr_db: f64,
    /// The same with one scale per token (position): max|h[pos]|/127.
    pub per_token_levels: usize,
    pub per_token_share_zero: f64,
    pub per_token_sqnr_db: f64,
}

/// Computes [`QuantRisk`] for one layer output `x` of shape [rows, width].
pub fn quant_risk(layer: usize, x: &[f32], width: usize) -> QuantRisk {
    let median = median_abs(x);
    let max = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let n_massive = x.iter().filter(|&&v| is_massive(v, median)).count();
    // (levels seen, zeros, signal power, noise power, count) for one scale per chunk of `chunk` values.
    let stats = |chunk: usize| {
        let mut seen = [false; 255];
        let (mut zeros, mut signal, mut noise, mut n) = (0usize, 0f64, 0f64, 0usize);
        for row in x.chunks(chunk) {
            let scale = row.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
            for &v in row.iter().filter(|&&v| !is_massive(v, median)) {
                let code = if scale > 0.0 { (v / scale).round().clamp(-127.0, 127.0) } else { 0.0 };
                seen[(code as i32 + 127) as usize] = true;
                zeros += (code == 0.0) as usize;
                signal += (v as f64).powi(2);
                noise += (v as f64 - code as f64 * scale as f64).powi(2);
                n += 1;
            }
        }
        let sqnr = if noise > 0.0 { 10.0 * (signal / noise).log10() } else { f64::INFINITY };
        (seen.iter().filter(|&&s| s).count(), zeros as f64 / n.max(1) as f64, sqnr)
    };
    let (pt_levels, pt_zero, pt_sqnr) = stats(x.len().max(1));
    let (tok_levels, tok_zero, tok_sqnr) = stats(width.max(1));
    QuantRisk {
        layer,
        max_abs: max,
        median_abs: median,
        n_massive,
        per_tensor_levels: pt_levels,
        per_tensor_share_zero: pt_zero,
        per_tensor_sqnr_db: pt_sqnr,
        per_token_levels: tok_levels,
        per_token_share_zero: tok_zero,
        per_token_sqnr_db: tok_sqnr,
    }
}

/// How activation scales are chosen: from the tensor being quantized (dynamic) or once from a
/// calibration text (static); one scale for the whole tensor, per token (row) or per channel
/// (column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuantScheme {
    TensorDynamic,
    TokenDynamic,
    ChannelStatic,
    TensorStatic,
}

/// The integer widths the fake quantization takes.
pub const BIT_WIDTHS: std::ops::RangeInclusive<u32> = 2..=16;

impl QuantScheme {
    pub const ALL: [QuantScheme; 4] = [QuantScheme::TensorDynamic, QuantScheme::TokenDynamic, QuantScheme::ChannelStatic, QuantScheme::TensorStatic];

    /// The scheme of this name (`None`: no such scheme).
    pub fn parse(name: &str) -> Option<QuantScheme> {
        QuantScheme::ALL.into_iter().find(|s| s.name() == name.trim())
    }

    pub fn name(&self) -> &'static str {
        match self {
            QuantScheme::TensorDynamic => "tensor_dynamic",
            QuantScheme::TokenDynamic => "token_dynamic",
            QuantScheme::ChannelStatic => "channel_static",
            QuantScheme::TensorStatic => "tensor_static",
        }
    }

    /// Whether its scales come from a calibration pass.
    pub fn is_static(&self) -> bool {
        matches!(self, QuantScheme::ChannelStatic | QuantScheme::TensorStatic)
    }
}

/// The largest code of a symmetric signed grid of `bits` bits: 127 for int8, 7 for int4.
pub fn qmax(bits: u32) -> f32 {
    ((1u32 << (bits.clamp(2, 16) - 1)) - 1) as f32
}

/// The scale of each element of a (rows, width) matrix.
#[derive(Debug, Clone, Copy)]
pub enum Scales<'a> {
    Tensor(f32),
    /// One per row.
    Rows(&'a [f32]),
    /// One per column.
    Columns(&'a [f32]),
}

/// What fake quantization did to a tensor: signal and noise power (Σx², Σ(x − x̂)²), and how
/// many nonzero inputs were rounded to code 0. Sums over tensors add up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct QuantNoise {
    pub signal: f64,
    pub noise: f64,
    pub nonzero: u64,
    pub zeroed: u64,
}

impl QuantNoise {
    pub fn add(&mut self, other: &QuantNoise) {
        self.signal += other.signal;
        self.noise += other.noise;
        self.nonzero += other.nonzero;
        self.zeroed += other.zeroed;
    }

    /// Signal-to-quantization-noise ratio 10·log10(Σx² / Σ(x − x̂)²); `None` when nothing changed.
    pub fn sqnr_db(&self) -> Option<f64> {
        (self.noise > 0.0).then(|| 10.0 * (self.signal / self.noise).log10())
    }

    /// Share of the nonzero inputs that landed on code 0.
    pub fn zero_share(&self) -> f64 {
        if self.nonzero == 0 {
            0.0
        } else {
            self.zeroed as f64 / self.nonzero as f64
        }
    }
}

/// Symmetric absmax fake quantization of the row-major (rows, `width`) matrix `x` in place:
/// q = clamp(round_half_even(x / s), −qmax, qmax), x̂ = q·s (0 where s = 0), all in f32 (as
/// PyTorch's `torch.round` computes it). Rows run in parallel and their noise is summed in row
/// order, so the result does not depend on the thread count.
pub fn fake_quantize(x: &mut [f32], width: usize, scales: Scales<'_>, qmax: f32) -> QuantNoise {
    let width = width.max(1);
    let per_row: Vec<QuantNoise> = x
        .par_chunks_mut(width)
        .enumerate()
        .map(|(r, row)| {
            let mut n = QuantNoise::default();
            for (c, v) in row.iter_mut().enumerate() {
                let s = match scales {
                    Scales::Tensor(s) => s,
                    Scales::Rows(s) => s[r],
                    Scales::Columns(s) => s[c],
                };
                let code = if s > 0.0 { (*v / s).round_ties_even().clamp(-qmax, qmax) } else { 0.0 };
                let q = code * s;
                n.signal += (*v as f64).powi(2);
                n.noise += (*v as f64 - q as f64).powi(2);
                if *v != 0.0 {
                    n.nonzero += 1;
                    n.zeroed += (code == 0.0) as u64;
                }
                *v = q;
            }
            n
        })
        .collect();
    let mut total = QuantNoise::default();
    for n in &per_row {
        total.add(n);
    }
    total
}

/// Fake-quantizes `x` (rows, `width`) under `scheme`: dynamic scales from `x` itself, static ones
/// from `calibrated`, each channel's largest |value| over a calibration text (per-tensor static:
/// their maximum). None when a static scheme has no calibration of this width.
pub fn quantize_with_scheme(scheme: QuantScheme, x: &mut [f32], width: usize, calibrated: Option<&[f32]>, qmax: f32) -> Option<QuantNoise> {
    Some(match (scheme, calibrated) {
        (QuantScheme::TensorDynamic, _) => {
            let s = x.iter().fold(0f32, |m, v| m.max(v.abs())) / qmax;
            fake_quantize(x, width, Scales::Tensor(s), qmax)
        }
        (QuantScheme::TokenDynamic, _) => {
            let s: Vec<f32> = absmax_rows(x, width).into_iter().map(|m| m / qmax).collect();
            fake_quantize(x, width, Scales::Rows(&s), qmax)
        }
        (QuantScheme::TensorStatic, Some(cols)) if cols.len() == width => {
            fake_quantize(x, width, Scales::Tensor(cols.iter().fold(0f32, |m, &v| m.max(v)) / qmax), qmax)
        }
        (QuantScheme::ChannelStatic, Some(cols)) if cols.len() == width => {
            let s: Vec<f32> = cols.iter().map(|&m| m / qmax).collect();
            fake_quantize(x, width, Scales::Columns(&s), qmax)
        }
        _ => return None,
    })
}

/// max |x| of each row of a (rows, `width`) matrix.
pub fn absmax_rows(x: &[f32], width: usize) -> Vec<f32> {
    x.chunks(width.max(1)).map(|row| row.iter().fold(0f32, |m, v| m.max(v.abs()))).collect()
}

/// Raises `acc[c]` to max |x[r, c]| over the rows of a (rows, acc.len()) matrix.
pub fn absmax_columns_into(acc: &mut [f32], x: &[f32]) {
    for row in x.chunks(acc.len().max(1)) {
        for (a, v) in acc.iter_mut().zip(row) {
            *a = a.max(v.abs());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quant_risk_sees_outliers_collapse_per_tensor_scales() {
        // Two tokens of width 4: token 0 carries a massive 10000; ordinary values are ~1.
        let x = [10000.0, 1.0, -1.0, 0.5, 1.0, -2.0, 0.25, 1.5];
        let r = quant_risk(3, &x, 4);
        assert_eq!(r.n_massive, 1);
        // Per-tensor scale 10000/127 ≈ 78.7: every ordinary value rounds to 0.
        assert_eq!(r.per_tensor_levels, 1);
        assert_eq!(r.per_tensor_share_zero, 1.0);
        assert!((r.per_tensor_sqnr_db - 0.0).abs() < 1e-9);
        // Per-token: token 1's scale is 2/127, so its values keep their levels; token 0's do not.
        assert!(r.per_token_levels > 3);
        assert!((r.per_token_share_zero - 3.0 / 7.0).abs() < 1e-12);
        assert!(r.per_token_sqnr_db > r.per_tensor_sqnr_db);
    }

    #[test]
    fn fake_quantization_rounds_half_to_even_and_clamps() {
        assert_eq!((qmax(8), qmax(4)), (127.0, 7.0));
        // Scale 1: 2.5 → 2 (half to even), −3.5 → −4, 9 → clamped to 7, 0.4 → 0 (zeroed).
        let mut x = [2.5, -3.5, 9.0, 0.4, 0.0];
        let n = fake_quantize(&mut x, 5, Scales::Tensor(1.0), 7.0);
        assert_eq!(x, [2.0, -4.0, 7.0, 0.0, 0.0]);
        assert_eq!((n.nonzero, n.zeroed), (4, 1));
        assert!((n.noise - (0.25 + 0.25 + 4.0 + 0.16)).abs() < 1e-6);
        assert!((n.zero_share() - 0.25).abs() < 1e-12);
        // Per-row and per-column scales; a zero scale quantizes to 0.
        let mut x = [1.0, 2.0, 3.0, 4.0];
        fake_quantize(&mut x, 2, Scales::Rows(&[0.0, 2.0]), 7.0);
        assert_eq!(x, [0.0, 0.0, 4.0, 4.0]);
        let mut x = [1.0, 2.0, 3.0, 4.0];
        fake_quantize(&mut x, 2, Scales::Columns(&[1.0, 4.0]), 127.0);
        assert_eq!(x, [1.0, 0.0, 3.0, 4.0]);
        assert_eq!(absmax_rows(&[1.0, -5.0, 2.0, 0.5], 2), vec![5.0, 2.0]);
        let mut acc = vec![0.0; 2];
        absmax_columns_into(&mut acc, &[1.0, -5.0, -2.0, 0.5]);
        assert_eq!(acc, vec![2.0, 5.0]);
        assert_eq!(QuantNoise::default().sqnr_db(), None);
    }
}
