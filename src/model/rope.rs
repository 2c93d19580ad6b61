//! Rotary position embeddings: cos/sin tables for arbitrary position ids, applied in the layout the
//! weights were stored in (GGUF llama and llama2.c: adjacent pairs; HF safetensors: half-split).

use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::error::Result;

/// How a head's dimensions are paired for rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeLayout {
    /// Pairs (2i, 2i+1): llama.cpp's `LLAMA_ROPE_TYPE_NORM`, Meta's original and llama2.c weights.
    Interleaved,
    /// Pairs (i, i+d/2): HF transformers' `rotate_half` (llama.cpp's NEOX type).
    HalfSplit,
}

impl std::fmt::Display for RopeLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RopeLayout::Interleaved => "interleaved (adjacent pairs)",
            RopeLayout::HalfSplit => "half-split (rotate_half)",
        })
    }
}

/// RoPE for one model: frequency base, head size, the leading dimensions of each head that rotate
/// (all of them, or a fraction: GPT-NeoX/Pythia and Phi rotate 25–50% and pass the rest through)
/// and layout.
#[derive(Debug, Clone)]
pub struct Rope {
    pub theta: f64,
    pub d_head: usize,
    pub rot_dims: usize,
    pub layout: RopeLayout,
    /// YaRN's rescaled frequencies and attention factor, where the model extends its context so.
    pub yarn: Option<Yarn>,
    /// What each frequency is divided by (Llama 3's scaling, linear interpolation, a GGUF's
    /// `rope_freqs.weight`), one per rotated pair; `None`: all 1.
    pub freq_factors: Option<std::sync::Arc<[f64]>>,
}

/// RoPE frequencies divided by a factor each: how a model extends its context by interpolation
/// (transformers' `linear` and `llama3` scalings; llama.cpp stores the factors themselves as
/// `rope_freqs.weight`, its "freq_factors", dividing θ_i as here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FreqFactors {
    /// Where the factors come from, in words ("llama3 ×8 from 8192 positions", "rope_freqs.weight").
    pub source: String,
    /// One factor per rotated pair of dimensions, lowest dimension (highest frequency) first.
    pub factors: Vec<f64>,
}

impl FreqFactors {
    /// Linear interpolation (transformers' `linear`, llama.cpp's `rope.scaling.type = linear`):
    /// every frequency divided by `factor`.
    pub fn linear(factor: f64, pairs: usize) -> FreqFactors {
        FreqFactors { source: format!("linear ×{factor}"), factors: vec![factor; pairs] }
    }

    /// Llama 3.1's scaling (transformers' `_compute_llama3_parameters`, the factors llama.cpp's
    /// converter writes as `rope_freqs.weight`): wavelengths shorter than
    /// `original / high_freq_factor` kept, longer than `original / low_freq_factor` divided by
    /// `factor`, and between them a smooth blend of the two.
    pub fn llama3(theta: f64, rot_dims: usize, factor: f64, low_freq_factor: f64, high_freq_factor: f64, original: f64) -> FreqFactors {
        let (low_wavelen, high_wavelen) = (original / low_freq_factor, original / high_freq_factor);
        let factors = (0..rot_dims / 2)
            .map(|i| {
                let wavelen = 2.0 * std::f64::consts::PI * theta.powf((2 * i) as f64 / rot_dims as f64);
                if wavelen < high_wavelen {
                    1.0
                } else if wavelen > low_wavelen {
                    factor
                } else {
                    let smooth = (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                    1.0 / ((1.0 - smooth) / factor + smooth)
                }
            })
            .collect();
        FreqFactors { source: format!("llama3 ×{factor} from {original} positions (low {low_freq_factor}, high {high_freq_factor})"), factors }
    }
}

/// YaRN (Peng et al. 2023) as transformers computes it: frequencies interpolated by `factor`
/// below a ramp between the dimensions that turn `beta_slow` and `beta_fast` times over the
/// original context, kept above it; cos and sin (so q and k) scaled by `attention_factor`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Yarn {
    pub factor: f64,
    pub original_context: f64,
    pub beta_fast: f64,
    pub beta_slow: f64,
    /// Round the ramp's ends outward to whole dimensions.
    pub truncate: bool,
    pub attention_factor: f64,
}

impl Yarn {
    /// The inverse frequencies of `dims` rotated dimensions with base `theta`.
    fn inv_freq(&self, theta: f64, dims: usize) -> Vec<f64> {
        let d = dims as f64;
        // The dimension whose wavelength fits `turns` times into the original context.
        let dim_at = |turns: f64| d * (self.original_context / (turns * 2.0 * std::f64::consts::PI)).ln() / (2.0 * theta.ln());
        let (mut low, mut high) = (dim_at(self.beta_fast), dim_at(self.beta_slow));
        if self.truncate {
            (low, high) = (low.floor(), high.ceil());
        }
        let (low, mut high) = (low.max(0.0), high.min(d - 1.0));
        if low == high {
            high += 0.001;
        }
        (0..dims / 2)
            .map(|i| {
                let base = theta.powf((2 * i) as f64 / d);
                let kept = 1.0 - ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                (1.0 / (self.factor * base)) * (1.0 - kept) + (1.0 / base) * kept
            })
            .collect()
    }
}

impl Rope {
    /// cos and sin tables of shape (positions, rot_dims/2) for the given position ids.
    /// Angles are computed in f64 and rounded once, so long positions stay accurate.
    pub fn tables(&self, positions: &[usize], device: &Device) -> Result<(Tensor, Tensor)> {
        let scale = self.yarn.map_or(1.0, |y| y.attention_factor);
        self.tables_at(&positions.iter().map(|&p| p as f64).collect::<Vec<_>>(), scale, device)
    }

    /// cos/sin tables for (possibly negative) positions, scaled by `scale`.
    fn tables_at(&self, positions: &[f64], scale: f64, device: &Device) -> Result<(Tensor, Tensor)> {
        let half = self.rot_dims / 2;
        let mut inv_freq: Vec<f64> = match &self.yarn {
            Some(y) => y.inv_freq(self.theta, self.rot_dims),
            None => (0..half).map(|i| self.theta.powf(-((2 * i) as f64) / self.rot_dims as f64)).collect(),
        };
        if let Some(factors) = &self.freq_factors {
            inv_freq.iter_mut().zip(factors.iter()).for_each(|(f, d)| *f /= d);
        }
        let mut cos = Vec::with_capacity(positions.len() * half);
        let mut sin = Vec::with_capacity(positions.len() * half);
        for &p in positions {
            for &f in &inv_freq {
                let angle = p * f;
                cos.push((angle.cos() * scale) as f32);
                sin.push((angle.sin() * scale) as f32);
            }
        }
        Ok((Tensor::from_vec(cos, (positions.len(), half), device)?, Tensor::from_vec(sin, (positions.len(), half), device)?))
    }

    /// `x` (one head's row) rotated by one position's `cos`/`sin` (rot_dims/2 of each) into
    /// `out`, in this rope's layout; dimensions past rot_dims pass through.
    pub fn rotate_row(&self, x: &[f32], cos: &[f32], sin: &[f32], out: &mut [f32]) {
        let half = self.rot_dims / 2;
        debug_assert!(self.rot_dims <= x.len());
        out.copy_from_slice(x);
        for i in 0..half {
            let (a, b) = match self.layout {
                RopeLayout::HalfSplit => (i, i + half),
                RopeLayout::Interleaved => (2 * i, 2 * i + 1),
            };
            let (c, s) = (cos[i], sin[i]);
            out[a] = x[a] * c - x[b] * s;
            out[b] = x[b] * c + x[a] * s;
        }
    }

    /// Rotates `x` (heads, positions.len(), d_head) to the given positions.
    pub fn rotate(&self, x: &Tensor, positions: &[usize]) -> Result<Tensor> {
        let (cos, sin) = self.tables(positions, x.device())?;
        self.apply(&x.contiguous()?, &cos, &sin)
    }

    /// Rotates `x` (heads, positions.len(), d_head) using rows of precomputed tables for positions
    /// 0..table.len() (see [`RopeTable`]); positions past the table are computed directly.
    pub fn rotate_cached(&self, x: &Tensor, positions: &[usize], table: &mut RopeTable) -> Result<Tensor> {
        let max = positions.iter().copied().max().map_or(0, |m| m + 1);
        table.ensure(self, max, x.device())?;
        let contiguous_from_zero = positions.iter().enumerate().all(|(i, &p)| p == i);
        let (cos, sin) = if contiguous_from_zero {
            (table.cos.narrow(0, 0, positions.len())?, table.sin.narrow(0, 0, positions.len())?)
        } else {
            let idx = Tensor::from_vec(positions.iter().map(|&p| p as u32).collect::<Vec<_>>(), positions.len(), x.device())?;
            (table.cos.index_select(&idx, 0)?, table.sin.index_select(&idx, 0)?)
        };
        self.apply(&x.contiguous()?, &cos, &sin)
    }

    /// Rotates by signed position offsets (e.g. −Δ to shift rotated keys back after an eviction).
    pub fn rotate_by(&self, x: &Tensor, offsets: &[i64]) -> Result<Tensor> {
        // A pure rotation: the key already carries YaRN's attention factor.
        let (cos, sin) = self.tables_at(&offsets.iter().map(|&p| p as f64).collect::<Vec<_>>(), 1.0, x.device())?;
        self.apply(&x.contiguous()?, &cos, &sin)
    }

    /// Rotates `x` of shape (heads, positions, d_head) (contiguous) by the given tables.
    pub fn apply(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        if self.rot_dims == 0 {
            // A family without rotary positions (GPT-2's are learned and added to the input).
            return Ok(x.clone());
        }
        if self.rot_dims < self.d_head {
            let rotated = self.apply_all(&x.narrow(2, 0, self.rot_dims)?.contiguous()?, cos, sin)?;
            let passed = x.narrow(2, self.rot_dims, self.d_head - self.rot_dims)?;
            return Ok(Tensor::cat(&[&rotated, &passed], 2)?);
        }
        self.apply_all(x, cos, sin)
    }

    /// Rotates every dimension of `x` (the last one the tables' width × 2).
    fn apply_all(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        let x4 = x.unsqueeze(0)?;
        let out = match self.layout {
            RopeLayout::Interleaved => candle_nn::rotary_emb::rope_i(&x4, cos, sin)?,
            RopeLayout::HalfSplit => candle_nn::rotary_emb::rope(&x4, cos, sin)?,
        };
        Ok(out.squeeze(0)?)
    }
}

/// One [`RopeTable`] per RoPE base, rotary width and scaling, for caches that serve layers with
/// different bases (Gemma 3's local and global layers), none (SmolLM3's NoPE layers) or without
/// the model's scaling (OLMo 3's windowed layers). The layers of one model share one scaling.
#[derive(Debug, Clone)]
pub struct RopeTables {
    d_head: usize,
    tables: Vec<((u64, usize, bool), RopeTable)>,
}

impl RopeTables {
    pub fn new(d_head: usize) -> Self {
        RopeTables { d_head, tables: Vec::new() }
    }

    /// The table of `rope`'s base and width.
    pub fn of(&mut self, rope: &Rope) -> Result<&mut RopeTable> {
        // A NoPE layer's rope (no rotated dimension) shares its base with the rotating ones.
        let key = (rope.theta.to_bits(), rope.rot_dims, rope.yarn.is_some() || rope.freq_factors.is_some());
        let i = match self.tables.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                self.tables.push((key, RopeTable::empty(self.d_head)?));
                self.tables.len() - 1
            }
        };
        Ok(&mut self.tables[i].1)
    }
}

/// cos/sin rows for positions 0..len, grown on demand (doubling), so caches that re-rotate every
/// kept key at every step do not recompute trigonometry.
#[derive(Debug, Clone)]
pub struct RopeTable {
    cos: Tensor,
    sin: Tensor,
    len: usize,
}

impl RopeTable {
    pub fn empty(d_head: usize) -> Result<Self> {
        let z = Tensor::zeros((0, d_head / 2), candle_core::DType::F32, &Device::Cpu)?;
        Ok(RopeTable { cos: z.clone(), sin: z, len: 0 })
    }

    fn ensure(&mut self, rope: &Rope, len: usize, device: &Device) -> Result<()> {
        if len > self.len {
            let grown = len.max(2 * self.len).max(64);
            let (cos, sin) = rope.tables(&(0..grown).collect::<Vec<_>>(), device)?;
            *self = RopeTable { cos, sin, len: grown };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rotate(layout: RopeLayout, x: Vec<f32>, pos: usize) -> Vec<f32> {
        let rope = Rope { theta: 10000.0, d_head: 4, rot_dims: 4, layout, yarn: None, freq_factors: None };
        let (c, s) = rope.tables(&[pos], &Device::Cpu).unwrap();
        let t = Tensor::from_vec(x, (1, 1, 4), &Device::Cpu).unwrap();
        rope.apply(&t, &c, &s).unwrap().flatten_all().unwrap().to_vec1().unwrap()
    }

    #[test]
    fn interleaved_rotates_adjacent_pairs() {
        // Frequencies for d=4: 1 and 1/100. Position 1 rotates pair (x0,x1) by 1 rad.
        let out = rotate(RopeLayout::Interleaved, vec![1.0, 0.0, 1.0, 0.0], 1);
        let expect = [1f32.cos(), 1f32.sin(), 0.01f32.cos(), 0.01f32.sin()];
        for (a, b) in out.iter().zip(expect) {
            assert!((a - b).abs() < 1e-6, "{out:?}");
        }
    }

    #[test]
    fn half_split_rotates_i_with_i_plus_half() {
        let out = rotate(RopeLayout::HalfSplit, vec![1.0, 1.0, 0.0, 0.0], 1);
        let expect = [1f32.cos(), 0.01f32.cos(), 1f32.sin(), 0.01f32.sin()];
        for (a, b) in out.iter().zip(expect) {
            assert!((a - b).abs() < 1e-6, "{out:?}");
        }
    }

    #[test]
    fn cached_tables_rotate_like_fresh_ones() {
        let rope = Rope { theta: 10000.0, d_head: 4, rot_dims: 4, layout: RopeLayout::Interleaved, yarn: None, freq_factors: None };
        let x = Tensor::from_vec((0..12).map(|v| v as f32 * 0.1).collect::<Vec<_>>(), (1, 3, 4), &Device::Cpu).unwrap();
        let mut table = RopeTable::empty(4).unwrap();
        for positions in [vec![0, 1, 2], vec![5, 9, 200]] {
            let fresh: Vec<f32> = rope.rotate(&x, &positions).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let cached: Vec<f32> = rope.rotate_cached(&x, &positions, &mut table).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            assert_eq!(fresh, cached);
        }
    }

    #[test]
    fn position_zero_is_identity() {
        let x = vec![0.3, -1.2, 2.0, 0.5];
        assert_eq!(rotate(RopeLayout::Interleaved, x.clone(), 0), x);
    }
}
