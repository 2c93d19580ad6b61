//! KIVI's cache quantization (Liu et al., ICML 2024; its code at jy-yuan/KIVI): keys per channel
//! over groups of [`GROUP`] tokens, values per token over groups of [`GROUP`] channels, both
//! asymmetric (a group's min and scale), and a full-precision recent window of R tokens. Which
//! copy a query reads is a pure function of stream positions ([`KiviWindow`]), so a simulator can
//! hold both and choose per (query, key).
//!
//! The arithmetic follows KIVI's `quant_and_pack_kcache` / `_vcache` and their dequantization in
//! f32: scale = (max − min) / (2^bits − 1), code = round-half-even(clamp((x − min) / scale, 0,
//! 2^bits − 1)), read back as code · scale + min. A group whose values are all equal (scale 0,
//! where KIVI divides 0 by 0) reads back exactly.

/// Tokens per key group and channels per value group (KIVI's `group_size`).
pub const GROUP: usize = 32;

/// KIVI's full-precision recent window when none is given (its paper's R).
pub const DEFAULT_RESIDUAL: usize = 128;

/// Rounds one group through KIVI's asymmetric `bits`-bit code, each value replaced by what the
/// cache reads back.
fn round_group(group: &mut [f32], bits: u32) {
    let (min, max) = group.iter().fold((f32::MAX, -f32::MAX), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let top = ((1u32 << bits) - 1) as f32;
    let scale = (max - min) / top;
    if scale == 0.0 || !scale.is_finite() {
        return;
    }
    group.iter_mut().for_each(|x| *x = ((*x - min) / scale).clamp(0.0, top).round_ties_even() * scale + min);
}

/// A value row (one token, `d_head` channels, a multiple of [`GROUP`]) as KIVI stores it.
pub fn round_value_row(row: &mut [f32], bits: u32) {
    for group in row.chunks_exact_mut(GROUP) {
        round_group(group, bits);
    }
}

/// A group of [`GROUP`] consecutive key rows (`rows`: GROUP × `d_head`, row-major) as KIVI stores
/// them: each channel rounded over the group's tokens.
pub fn round_key_group(rows: &mut [f32], d_head: usize, bits: u32) {
    let mut channels: Vec<Vec<f32>> = (0..d_head).map(|c| rows.iter().skip(c).step_by(d_head).copied().collect()).collect();
    for channel in &mut channels {
        round_group(channel, bits);
    }
    for (i, row) in rows.chunks_exact_mut(d_head).enumerate() {
        row.iter_mut().zip(&channels).for_each(|(x, channel)| *x = channel[i]);
    }
}

/// When the query at a stream position reads a key or value in its quantized form. KIVI decodes
/// token by token: a key joins the full-precision residual and, once R keys fill it, the whole
/// chunk is quantized after that step's attention; a value is quantized after the step at which
/// R newer ones follow it. The first `exact_first` positions are kept outside KIVI's cache
/// (never rounded), and its chunks count from there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KiviWindow {
    pub residual: usize,
    pub exact_first: usize,
}

impl KiviWindow {
    /// Whether the query at `t` reads key `j` (j ≤ t) quantized.
    pub fn key_rounded(&self, j: usize, t: usize) -> bool {
        let n = self.exact_first;
        j >= n && (j - n) / self.residual < (t - n) / self.residual
    }

    /// Whether the query at `t` reads value `j` (j ≤ t) quantized.
    pub fn value_rounded(&self, j: usize, t: usize) -> bool {
        j >= self.exact_first && j + self.residual < t
    }

    /// The first position of the key group holding `j` (j ≥ `exact_first`).
    pub fn group_start(&self, j: usize) -> usize {
        let n = self.exact_first;
        n + (j - n) / GROUP * GROUP
    }

    /// Whether a key chunk closes after the query at `t` (its R keys then get quantized, all of
    /// which a policy must still hold).
    pub fn chunk_closes(&self, t: usize) -> bool {
        t >= self.exact_first && (t + 1 - self.exact_first).is_multiple_of(self.residual)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules_follow_kivis_token_by_token_schedule() {
        // Replays KIVI's decode loop with R = 64: the residual fills to R, then quantizes whole.
        let w = KiviWindow { residual: 64, exact_first: 0 };
        let (mut quantized_keys, mut quantized_values) = (0, 0);
        for t in 0..300 {
            for j in 0..=t {
                assert_eq!(w.key_rounded(j, t), j < quantized_keys, "key {j} at {t}");
                assert_eq!(w.value_rounded(j, t), j < quantized_values, "value {j} at {t}");
            }
            // After the step's attention: a full key residual is quantized whole; a value
            // residual holding R + 1 gives up its oldest.
            if t + 1 - quantized_keys == w.residual {
                assert!(w.chunk_closes(t));
                quantized_keys = t + 1;
            }
            if t + 1 - quantized_values > w.residual {
                quantized_values += 1;
            }
        }
        let n4 = KiviWindow { residual: 64, exact_first: 4 };
        assert!(!n4.key_rounded(3, 299) && !n4.value_rounded(3, 299) && n4.key_rounded(4, 68) && !n4.key_rounded(4, 67));
        assert_eq!(n4.group_start(40), 36);
    }

    #[test]
    fn groups_round_asymmetrically_and_a_constant_group_stays() {
        let mut row: Vec<f32> = (0..64).map(|i| i as f32).collect();
        round_value_row(&mut row, 2);
        // Group 0..31: min 0, scale 31/3; 10 → code 1 (10/10.33 = 0.97).
        assert_eq!(row[0], 0.0);
        assert_eq!(row[31], 31.0);
        assert!((row[10] - 31.0 / 3.0).abs() < 1e-5);
        let mut flat = vec![2.5f32; GROUP * 2];
        flat[0] = 7.0;
        round_key_group(&mut flat, 2, 2);
        assert!(flat.iter().skip(1).step_by(2).all(|&x| x == 2.5), "channel 1 is constant");
        assert_eq!(flat[0], 7.0);
        assert_eq!(flat[2], 2.5);
    }
}
