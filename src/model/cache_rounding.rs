//! What a quantized KV cache does to attention, as llama.cpp's CPU flash attention computes it: a
//! key or value is rounded once, when it enters the cache, to the cache's format — for a block
//! format after a Walsh–Hadamard rotation of the head (`attn_rot_k` / `attn_rot_v`), which the
//! query shares and the output undoes — and the query is rounded to the format ggml takes the
//! dot product in (8-bit blocks against a block-format key, f16 against f16). Values read back
//! into f32. The first `exact_first` stream positions stay exact (IntactKV, KVSink).
//!
//! KIVI's schemes (`kivi2`, `kivi4`) have no row round trip: whether a query reads a key rounded
//! depends on its distance and the key's group (`numerics::kivi`), which only the block replay
//! models (`model::kivi_stream`); every cache that stores rows one at a time refuses them
//! ([`CacheRounding::refuse_kivi`]).
//!
//! Not modelled, below the engines' own floor: an f16 V accumulated in f16 (llama.cpp's
//! `VKQ16`), and q8_1's separately rounded block sum in the q4_1/q5_1 dot product.

use candle_core::{Device, Tensor};

use crate::error::{Error, Result};
use crate::model::decoder::DecoderConfig;
use crate::numerics::cache_formats::{CacheFormat, BLOCK};
use crate::numerics::hadamard;
use crate::numerics::kivi::{KiviWindow, DEFAULT_RESIDUAL, GROUP};

/// The cache's storage formats and what stays exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CacheRounding {
    pub keys: CacheFormat,
    pub values: CacheFormat,
    /// Stream positions `0..exact_first` keep exact keys and values.
    pub exact_first: usize,
    /// llama.cpp's Hadamard rotation before a block format stores (its default; switched off
    /// by `LLAMA_ATTN_ROT_DISABLE=1`).
    pub hadamard: bool,
    /// Keys are stored before RoPE and rotated when read (the `slot` position mode's engine), not
    /// stored rotated (llama.cpp, under `original` and `delta`).
    pub before_rope: bool,
    /// KIVI's full-precision recent window R (tokens), for its schemes only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kivi_residual: Option<usize>,
}

impl Default for CacheRounding {
    fn default() -> Self {
        CacheRounding { keys: CacheFormat::F32, values: CacheFormat::F32, exact_first: 0, hadamard: true, before_rope: false, kivi_residual: None }
    }
}

impl CacheRounding {
    /// Whether nothing is rounded (an f32 cache).
    pub fn is_exact(&self) -> bool {
        self.keys.is_exact() && self.values.is_exact()
    }

    /// Whether keys and values are stored by KIVI's scheme.
    pub fn is_kivi(&self) -> bool {
        self.keys.is_kivi() || self.values.is_kivi()
    }

    /// When a query reads KIVI's quantized copies (`None` for the other formats).
    pub fn kivi_window(&self) -> Option<KiviWindow> {
        self.is_kivi().then(|| KiviWindow { residual: self.kivi_residual.unwrap_or(DEFAULT_RESIDUAL), exact_first: self.exact_first })
    }

    /// Entries of a layer holding `held` that stay at full precision: the first `exact_first`,
    /// and under KIVI its recent window.
    pub fn full_precision_entries(&self, held: usize) -> usize {
        let first = self.exact_first.min(held);
        first + self.kivi_window().map_or(0, |w| w.residual.min(held - first))
    }

    /// Refuses KIVI's schemes in a cache that stores rows one at a time, named by `what`.
    pub fn refuse_kivi(&self, what: &str) -> Result<()> {
        match self.is_kivi() {
            true => Err(Error::input(format!(
                "a KIVI cache (kivi2, kivi4) is not modelled in {what}: its rounding depends on a key's group and the query's distance, which sinkscope models for dense, window and sink policies at original positions (`stream`, `recommend`, `needle`)"
            ))),
            false => Ok(()),
        }
    }

    /// [`CacheRounding::check`] for `cfg`'s heads, and the rule of a latent-attention cache: it
    /// stores one row per token and reads its values from it (llama.cpp: V a view of K), so keys
    /// and values round alike; KIVI and the Hadamard rotation, which treat them apart or mix the
    /// RoPE key into the latent's blocks, are not modelled there.
    pub fn check_for(&self, cfg: &DecoderConfig) -> Result<()> {
        if cfg.arch.mla.is_some() && !self.is_exact() {
            if self.keys != self.values || self.is_kivi() {
                return Err(Error::input(
                    "this model caches one latent row per token (multi-head latent attention) and reads its values from it: give one format to keys and values (--cache-type-v = --cache-type-k), not KIVI",
                ));
            }
            if self.hadamard && self.keys.is_block() {
                return Err(Error::input(
                    "a block-quantized latent cache is modelled without llama.cpp's Hadamard rotation only: give --no-attn-rot (or use f16, bf16 or fp8)",
                ));
            }
        }
        self.check(cfg.d_head)
    }

    /// Refuses a block format for heads whose size is not a multiple of its block, and a KIVI
    /// setting KIVI's scheme does not define.
    pub fn check(&self, d_head: usize) -> Result<()> {
        if self.is_kivi() {
            return self.check_kivi(d_head);
        }
        for (what, f) in [("key", self.keys), ("value", self.values)] {
            if f.is_block() && !d_head.is_multiple_of(BLOCK) {
                return Err(Error::input(format!(
                    "a {} {what} cache stores blocks of {BLOCK} values, and this model's heads hold {d_head}: use f16, bf16 or fp8",
                    f.name()
                )));
            }
        }
        Ok(())
    }

    fn check_kivi(&self, d_head: usize) -> Result<()> {
        if !(self.keys.is_kivi() && self.values.is_kivi()) {
            return Err(Error::input(format!(
                "KIVI stores keys per channel and values per token together: give kivi2 or kivi4 for both --cache-type-k and --cache-type-v (not {} with {})",
                self.keys.name(),
                self.values.name()
            )));
        }
        if !d_head.is_multiple_of(GROUP) {
            return Err(Error::input(format!(
                "KIVI groups a value's channels {GROUP} at a time, and this model's heads hold {d_head}: use f16, bf16 or fp8"
            )));
        }
        match self.kivi_residual.unwrap_or(DEFAULT_RESIDUAL) {
            r if r == 0 || !r.is_multiple_of(GROUP) => Err(Error::input(format!(
                "--kivi-residual {r}: KIVI quantizes whole groups of {GROUP} keys, so its recent window is a positive multiple of {GROUP}"
            ))),
            _ => Ok(()),
        }
    }

    /// A label such as `K q4_0 · V f16 · 4 exact` (`K kivi2 · V kivi2 · R 128` for KIVI).
    pub fn label(&self) -> String {
        let exact = if self.exact_first > 0 { format!(" · {} exact", self.exact_first) } else { String::new() };
        let residual = self.kivi_window().map_or(String::new(), |w| format!(" · R {}", w.residual));
        format!("K {} · V {}{residual}{exact}", self.keys.name(), self.values.name())
    }

    /// [`CacheRounding::label`], marked `(not rotated)` where block formats are stored without
    /// llama.cpp's Hadamard rotation: what tells near misses apart.
    pub fn name(&self) -> String {
        match self.hadamard || !self.has_block() {
            true => self.label(),
            false => format!("{} (not rotated)", self.label()),
        }
    }

    /// Whether keys or values are stored in a block format (which llama.cpp rotates).
    pub fn has_block(&self) -> bool {
        self.keys.is_block() || self.values.is_block()
    }

    /// The label and how keys are stored: `K q4_0 · V q4_0 · 4 exact; keys rounded after RoPE,
    /// block formats Hadamard-rotated (llama.cpp)`.
    pub fn describe(&self) -> String {
        let keys = match (self.is_kivi(), self.before_rope) {
            (true, _) => "keys per channel over 32 tokens after RoPE, values per token, the last R tokens exact (KIVI)",
            (false, true) => "keys rounded before RoPE (slot positions)",
            (false, false) => "keys rounded after RoPE",
        };
        let rotation = match (self.has_block(), self.hadamard) {
            (false, _) => "",
            (true, true) => ", block formats Hadamard-rotated (llama.cpp)",
            (true, false) => ", block formats not rotated (LLAMA_ATTN_ROT_DISABLE)",
        };
        format!("{}; {keys}{rotation}", self.label())
    }

    fn key_rotation(&self, d_head: usize) -> Option<usize> {
        (self.hadamard && self.keys.is_block()).then(|| hadamard::key_rotation(d_head)).flatten()
    }

    fn value_rotation(&self, d_head: usize) -> Option<usize> {
        (self.hadamard && self.values.is_block()).then(|| hadamard::value_rotation(d_head)).flatten()
    }

    /// Keys (heads, n, dh) as the cache returns them; row i sits at stream position `positions[i]`.
    pub fn keys(&self, k: &Tensor, positions: &[usize]) -> Result<Tensor> {
        let rotation = self.key_rotation(k.dim(2)?);
        self.round(k, self.keys, rotation, Some(positions))
    }

    /// Values (heads, n, dh) as the cache returns them.
    pub fn values(&self, v: &Tensor, positions: &[usize]) -> Result<Tensor> {
        let rotation = self.value_rotation(v.dim(2)?);
        self.round(v, self.values, rotation, Some(positions))
    }

    /// Queries (heads, n, dh), rotated, in the format of their product with the cached keys.
    pub fn queries(&self, q: &Tensor) -> Result<Tensor> {
        let rotation = self.key_rotation(q.dim(2)?);
        self.round(q, self.keys.query_format(), rotation, None)
    }

    /// One key row of a head (before or after RoPE, as `before_rope` says) at stream position
    /// `position`, as the cache returns it: for the caches that store rows one at a time.
    pub fn key_row(&self, row: &mut [f32], position: usize) {
        if position >= self.exact_first {
            round_row(row, self.keys, self.key_rotation(row.len()));
        }
    }

    /// One value row of a head at stream position `position`, as the cache returns it.
    pub fn value_row(&self, row: &mut [f32], position: usize) {
        if position >= self.exact_first {
            round_row(row, self.values, self.value_rotation(row.len()));
        }
    }

    /// One rotated query row of a head, in the format of its product with the cached keys.
    pub fn query_row(&self, row: &mut [f32]) {
        round_row(row, self.keys.query_format(), self.key_rotation(row.len()));
    }

    fn round(&self, x: &Tensor, format: CacheFormat, rotation: Option<usize>, positions: Option<&[usize]>) -> Result<Tensor> {
        if format.is_exact() {
            return Ok(x.clone());
        }
        if format.is_kivi() {
            return Err(Error::Internal("KIVI rows were rounded one at a time".into()));
        }
        let (heads, n, dh) = x.dims3()?;
        if positions.is_some_and(|p| p.len() != n) {
            return Err(Error::Internal("cache rounding: one stream position per row".into()));
        }
        let mut data = x.flatten_all()?.to_vec1::<f32>()?;
        for (i, row) in data.chunks_exact_mut(dh).enumerate() {
            if positions.is_some_and(|p| p[i % n] < self.exact_first) {
                continue;
            }
            round_row(row, format, rotation);
        }
        Ok(Tensor::from_vec(data, (heads, n, dh), &Device::Cpu)?)
    }
}

/// A row through `format` and back, in the rotated basis when there is a rotation (the Hadamard
/// transform is its own inverse, so the row returns to its own basis).
fn round_row(row: &mut [f32], format: CacheFormat, rotation: Option<usize>) {
    if format.is_exact() {
        return;
    }
    if let Some(r) = rotation {
        hadamard::rotate(row, r);
    }
    format.round_trip(row);
    if let Some(r) = rotation {
        hadamard::rotate(row, r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_positions_stay_and_the_rotation_trades_the_outlier_for_the_rest() {
        let dh = 64;
        let mut row = vec![0.05f32; dh];
        row[3] = 40.0;
        let k = Tensor::from_vec([row.clone(), row.clone()].concat(), (1, 2, dh), &Device::Cpu).unwrap();
        let q4 = CacheRounding { keys: CacheFormat::Q4_0, values: CacheFormat::Q4_0, exact_first: 1, ..Default::default() };
        let out = q4.keys(&k, &[0, 1]).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(&out[..dh], &row[..], "position 0 is exact");
        let plain = CacheRounding { hadamard: false, ..q4 };
        let flat = plain.keys(&k, &[0, 1]).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        // Unrotated, the outlier sets its block's scale and is kept almost exactly, while its
        // block's small values round to 0; rotated, every value of the head shares the outlier's
        // energy: the small values survive and the outlier itself is rounded like the rest.
        assert_eq!(flat[dh + 4], 0.0);
        assert!((flat[dh + 3] - 40.0).abs() < 0.05, "{}", flat[dh + 3]);
        assert!(out[dh + 4] != 0.0 && out[dh..].iter().all(|x| x.is_finite()));
        assert!((out[dh + 3] - 40.0).abs() > 0.5 && (out[dh + 3] - 40.0).abs() < 4.0, "{}", out[dh + 3]);
    }
}
