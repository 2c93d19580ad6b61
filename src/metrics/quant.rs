//! Quantization-outlier risk (the seeds' warning): what per-tensor int8 activation quantization
//! would do to a layer output given its massive values, compared with one scale per token. Reported,
//! never applied to the model.

use serde::{Deserialize, Serialize};

use super::massive::{is_massive, median_abs};

/// What per-tensor int8 quantization of a layer output would do to its ordinary (non-massive)
/// activations, compared with per-token scales (the seeds' warning about outliers).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QuantRisk {
    pub layer: usize,
    pub max_abs: f32,
    pub median_abs: f32,
    /// Elements counted as massive (|h| > 100 and ≥ 1000× median) and excluded below.
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

}
