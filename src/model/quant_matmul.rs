//! `--quantized` matrix products: x · Wᵀ with W kept as 8-bit integers and x quantized to 8 bits,
//! multiplied with integer dot products (AVX-512 VNNI where the CPU has it).
//!
//! Every GGUF block type packed here (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) stores a
//! run of 32 (Q6_K: 16) weights as `scale · w + offset` with w a small signed integer centred on
//! zero (offset 0 for the symmetric types); packing recovers (w, scale, offset) from the file's
//! bits (tested against candle's dequantized values), so the weights are the file's own and the
//! approximation is the activations': each run of 32 values of a row of x becomes `d · q` with q
//! an i8 and d = max|x| / 127, what llama.cpp does — its error meets `scale · w`, as llama.cpp's
//! meets the weight — while the offset term uses the exact f32 sum of x over the run. Per run,
//! Σ w·q is exact in i32 (`vpdpbusd` takes q + 128 as its unsigned operand; the run's −128·Σw
//! starts the sum); the runs are summed in f32 in order, one output column per vector lane, so a
//! result does not depend on the thread count, and the scalar fallback gives the same bits.
//!
//! Layout: output rows in groups of 8, and per run the 8 rows' bytes interleaved in steps of 4
//! (one 32-byte vector per step: 4 bytes of each row), which is what a `vpdpbusd` against 4
//! broadcast activation bytes consumes.

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use rayon::prelude::*;

use super::matmul::SendPtr;
use super::quant_blocks::{block_layout, unpack_block};
use crate::error::{Error, Result};
use crate::numerics::tensor::with_f32;

/// Output rows per group (lanes of one f32 vector).
const GROUP: usize = 8;
/// Activation values per quantization scale.
const X_RUN: usize = 32;
/// Rows of x multiplied against one group's packed runs while they are in registers.
const ROW_TILE: usize = 8;
/// Groups per parallel task: a task's packed weights (≤ 8 × 64 rows × k bytes) stay in cache
/// while every row of x passes over them.
const GROUPS_PER_TASK: usize = 8;

/// A weight matrix (n, k) in the packed 8-bit layout above.
pub struct PackedWeight {
    n: usize,
    k: usize,
    /// Weights per run (32, or 16 for Q6_K).
    run: usize,
    /// [group][run][step][row in group][4 bytes]
    values: Vec<i8>,
    /// −128 · Σ w per [group][run][row in group]: the bias of the unsigned activations, removed.
    bias: Vec<i32>,
    /// [group][run][row in group]
    scales: Vec<f32>,
    offsets: Vec<f32>,
}

impl PackedWeight {
    /// Packs a quantized (n, k) matrix; `None` for a block type not listed above.
    pub fn new(q: &QTensor) -> Result<Option<Self>> {
        let (n, k) = q.shape().dims2()?;
        let Some((run, block_bytes, per_block)) = block_layout(q.dtype()) else { return Ok(None) };
        if k % per_block != 0 {
            return Err(Error::Internal(format!("a {:?} matrix of {k} columns", q.dtype())));
        }
        let data = q.data()?;
        let row_bytes = k / per_block * block_bytes;
        if data.len() != n * row_bytes {
            return Err(Error::Internal(format!("a {:?} matrix ({n}, {k}) of {} bytes", q.dtype(), data.len())));
        }
        let runs = k / run;
        let groups = n.div_ceil(GROUP);
        let mut packed = PackedWeight {
            n,
            k,
            run,
            values: vec![0; groups * GROUP * k],
            bias: vec![0; groups * runs * GROUP],
            scales: vec![0.0; groups * runs * GROUP],
            offsets: vec![0.0; groups * runs * GROUP],
        };
        let mut u = [0i8; 256];
        let mut affine = [(0f32, 0f32); 16];
        for row in 0..n {
            let bytes = &data[row * row_bytes..(row + 1) * row_bytes];
            for (b, block) in bytes.chunks_exact(block_bytes).enumerate() {
                unpack_block(q.dtype(), block, &mut u, &mut affine);
                for (i, (u, &(scale, offset))) in u[..per_block].chunks(run).zip(&affine).enumerate() {
                    packed.put(row, b * per_block / run + i, u, scale, offset);
                }
            }
        }
        Ok(Some(packed))
    }

    /// The parts' output rows stacked in order (q|k|v, gate|up), so one product quantizes x once
    /// and writes one output: parts of any types with the same run length and columns, every part
    /// but the last a whole number of groups. `Err` gives the parts back otherwise.
    pub fn stack(parts: Vec<PackedWeight>) -> std::result::Result<PackedWeight, Vec<PackedWeight>> {
        let fits = parts
            .split_last()
            .is_some_and(|(last, rest)| rest.iter().all(|p| p.n % GROUP == 0) && parts.iter().all(|p| p.k == last.k && p.run == last.run));
        if !fits {
            return Err(parts);
        }
        let mut parts = parts.into_iter();
        let Some(mut stacked) = parts.next() else { return Err(Vec::new()) };
        for p in parts {
            stacked.n += p.n;
            stacked.values.extend(p.values);
            stacked.bias.extend(p.bias);
            stacked.scales.extend(p.scales);
            stacked.offsets.extend(p.offsets);
        }
        Ok(stacked)
    }

    /// Stores run `run_index` of output row `row`: weights `scale · w + offset`.
    fn put(&mut self, row: usize, run_index: usize, u: &[i8], scale: f32, offset: f32) {
        let (g, lane) = (row / GROUP, row % GROUP);
        let runs = self.k / self.run;
        let at = (g * runs + run_index) * GROUP + lane;
        self.scales[at] = scale;
        self.offsets[at] = offset;
        self.bias[at] = -128 * u.iter().map(|&w| w as i32).sum::<i32>();
        let base = (g * runs + run_index) * GROUP * self.run;
        for (step, four) in u.chunks_exact(4).enumerate() {
            let o = base + (step * GROUP + lane) * 4;
            self.values[o..o + 4].copy_from_slice(four);
        }
    }

    /// Bytes this matrix occupies.
    pub fn bytes(&self) -> u64 {
        (self.values.len() + 4 * (self.scales.len() + self.offsets.len() + self.bias.len())) as u64
    }

    /// (n, k).
    pub fn shape(&self) -> (usize, usize) {
        (self.n, self.k)
    }

    /// The weights as f32 (n, k): scale · w + offset, the values the products use.
    pub fn dequantize(&self) -> Vec<f32> {
        self.rows(&(0..self.n as u32).collect::<Vec<_>>())
    }

    /// Rows `ids` as f32 (ids.len(), k), each weight scale · w + offset: embedding lookups in a
    /// packed tied head. Ids must be below n.
    pub fn rows(&self, ids: &[u32]) -> Vec<f32> {
        let mut out = Vec::with_capacity(ids.len() * self.k);
        for &id in ids {
            out.extend((0..self.k).map(|col| {
                let (w, scale, offset) = self.entry(id as usize, col);
                scale * w as f32 + offset
            }));
        }
        out
    }

    /// (w, scale, offset) of the weight at (row, col).
    fn entry(&self, row: usize, col: usize) -> (i8, f32, f32) {
        let (g, lane, ri, i) = (row / GROUP, row % GROUP, col / self.run, col % self.run);
        let runs = self.k / self.run;
        let at = (g * runs + ri) * GROUP + lane;
        let base = (g * runs + ri) * GROUP * self.run;
        (self.values[base + (i / 4 * GROUP + lane) * 4 + i % 4], self.scales[at], self.offsets[at])
    }

    /// x (m, k) · Wᵀ → (m, n).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (m, k) = x.dims2()?;
        if k != self.k {
            return Err(Error::Internal(format!("quantized product of ({m}, {k}) by a ({}, {}) weight", self.n, self.k)));
        }
        let x = x.contiguous()?;
        let y = with_f32(&x, |x| self.product(x, m))?;
        Ok(Tensor::from_vec(y, (m, self.n), &Device::Cpu)?)
    }

    fn product(&self, x: &[f32], m: usize) -> Vec<f32> {
        let xq = QuantizedRows::new(x, m, self.k, self.run);
        let mut y = vec![0f32; m * self.n];
        let dst = SendPtr(y.as_mut_ptr());
        let groups = self.n.div_ceil(GROUP);
        let vnni = has_vnni();
        let whole = m - m % ROW_TILE;
        (0..groups.div_ceil(GROUPS_PER_TASK)).into_par_iter().for_each(|t| {
            let (g0, g1) = (t * GROUPS_PER_TASK, groups.min((t + 1) * GROUPS_PER_TASK));
            // SAFETY (stores): every (row, column) written lies inside y, and this task alone
            // owns the columns of groups g0..g1.
            let store = |g: usize, row: usize, out: &[f32; GROUP]| {
                for (c, &v) in out.iter().take(GROUP.min(self.n - g * GROUP)).enumerate() {
                    unsafe { *dst.at(row * self.n + g * GROUP + c) = v };
                }
            };
            let mut tile = [[0f32; GROUP]; ROW_TILE];
            for g in g0..g1 {
                for r0 in (0..whole).step_by(ROW_TILE) {
                    if vnni {
                        // SAFETY: the CPU has the features (checked above).
                        unsafe { self.group_vnni(g, &xq, r0, &mut tile) };
                    } else {
                        self.group_scalar(g, &xq, r0, ROW_TILE, &mut tile);
                    }
                    tile.iter().enumerate().for_each(|(r, out)| store(g, r0 + r, out));
                }
            }
            // Rows past the last whole tile (every row when decoding): one row against the task's
            // groups, several groups at a time.
            let mut wide = [[0f32; GROUP]; GROUPS_PER_TASK];
            for row in whole..m {
                if vnni {
                    // SAFETY: as above.
                    unsafe { self.row_vnni(g0, g1, &xq, row, &mut wide) };
                } else {
                    for (g, out) in (g0..g1).zip(wide.iter_mut()) {
                        self.group_scalar(g, &xq, row, 1, &mut tile);
                        *out = tile[0];
                    }
                }
                (g0..g1).zip(&wide).for_each(|(g, out)| store(g, row, out));
            }
        });
        y
    }

    /// The same arithmetic as [`Self::group_vnni`], one lane at a time: runs summed in order, each
    /// with one fused multiply-add for the integer dot and one for the offset.
    fn group_scalar(&self, g: usize, xq: &QuantizedRows, r0: usize, rows: usize, tile: &mut [[f32; GROUP]; ROW_TILE]) {
        let runs = self.k / self.run;
        for (r, out) in tile.iter_mut().take(rows).enumerate() {
            let row = r0 + r;
            for (lane, acc) in out.iter_mut().enumerate() {
                let mut sum = 0f32;
                for ri in 0..runs {
                    let base = (g * runs + ri) * GROUP * self.run;
                    let q = &xq.q[row * self.k + ri * self.run..][..self.run];
                    let at = (g * runs + ri) * GROUP + lane;
                    let dot: i32 = self.bias[at]
                        + (0..self.run).map(|i| self.values[base + (i / 4 * GROUP + lane) * 4 + i % 4] as i32 * q[i] as i32).sum::<i32>();
                    let (x_scale, x_sum) = xq.run(row, ri);
                    sum = (dot as f32).mul_add(self.scales[at] * x_scale, sum);
                    sum = self.offsets[at].mul_add(x_sum, sum);
                }
                *acc = sum;
            }
        }
    }

    /// One group of 8 output columns for [`ROW_TILE`] rows of x, with `vpdpbusd` on 256-bit vectors.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,avx512f,avx512vl,avx512vnni")]
    unsafe fn group_vnni(&self, g: usize, xq: &QuantizedRows, r0: usize, tile: &mut [[f32; GROUP]; ROW_TILE]) {
        // SAFETY: the caller checked the CPU features; rows r0..r0 + ROW_TILE exist.
        unsafe {
            match self.run {
                32 => self.tile_vnni::<ROW_TILE, 8>(g, xq, r0, tile),
                _ => self.tile_vnni::<ROW_TILE, 4>(g, xq, r0, tile),
            }
        }
    }

    /// One row of x against groups g0..g1 (at most [`GROUPS_PER_TASK`]), four at a time.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,avx512f,avx512vl,avx512vnni")]
    unsafe fn row_vnni(&self, g0: usize, g1: usize, xq: &QuantizedRows, row: usize, out: &mut [[f32; GROUP]; GROUPS_PER_TASK]) {
        let mut g = g0;
        // SAFETY: the caller checked the CPU features; groups g..g + G exist.
        unsafe {
            while g < g1 {
                let o = &mut out[g - g0..];
                g += match (g1 - g >= 4, self.run) {
                    (true, 32) => self.groups_vnni::<4, 8>(g, xq, row, o),
                    (true, _) => self.groups_vnni::<4, 4>(g, xq, row, o),
                    (false, 32) => self.groups_vnni::<1, 8>(g, xq, row, o),
                    (false, _) => self.groups_vnni::<1, 4>(g, xq, row, o),
                };
            }
        }
    }

    /// One row of x against G groups from `g` (G independent accumulators, as
    /// [`Self::tile_vnni`]'s rows); returns G.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,avx512f,avx512vl,avx512vnni")]
    unsafe fn groups_vnni<const G: usize, const S: usize>(&self, g: usize, xq: &QuantizedRows, row: usize, out: &mut [[f32; GROUP]]) -> usize {
        use std::arch::x86_64::*;
        let runs = self.k / self.run;
        let q = &xq.q[row * self.k..(row + 1) * self.k];
        let mut acc = [_mm256_setzero_ps(); G];
        for ri in 0..runs {
            // SAFETY: each group's runs hold 8 biases.
            let mut dot: [__m256i; G] =
                std::array::from_fn(|gi| unsafe { _mm256_loadu_si256(self.bias.as_ptr().add(((g + gi) * runs + ri) * GROUP) as *const __m256i) });
            for step in 0..S {
                // SAFETY: a run holds S steps of 32 bytes per group; the row's run S × 4 bytes.
                unsafe {
                    let xs = _mm256_set1_epi32((q.as_ptr().add(ri * self.run + step * 4) as *const i32).read_unaligned());
                    for (gi, dot) in dot.iter_mut().enumerate() {
                        let base = ((g + gi) * runs + ri) * GROUP * self.run;
                        let w = _mm256_loadu_si256(self.values.as_ptr().add(base + step * GROUP * 4) as *const __m256i);
                        *dot = _mm256_dpbusd_epi32(*dot, xs, w);
                    }
                }
            }
            let (x_scale, x_sum) = xq.run(row, ri);
            for (gi, (acc, dot)) in acc.iter_mut().zip(dot).enumerate() {
                let at = ((g + gi) * runs + ri) * GROUP;
                // SAFETY: each group's runs hold 8 scales and 8 offsets.
                let (scale, offset) = unsafe { (_mm256_loadu_ps(self.scales.as_ptr().add(at)), _mm256_loadu_ps(self.offsets.as_ptr().add(at))) };
                let d = _mm256_mul_ps(scale, _mm256_set1_ps(x_scale));
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), d, *acc);
                *acc = _mm256_fmadd_ps(offset, _mm256_set1_ps(x_sum), *acc);
            }
        }
        for (out, acc) in out.iter_mut().zip(acc) {
            // SAFETY: out holds 8 floats.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
        }
        G
    }

    /// R rows of x against one group, runs of 4·S weights: each step's weight vector is loaded
    /// once and meets every row (R independent integer accumulators keep `vpdpbusd`'s latency
    /// hidden).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,avx512f,avx512vl,avx512vnni")]
    unsafe fn tile_vnni<const R: usize, const S: usize>(&self, g: usize, xq: &QuantizedRows, r0: usize, out: &mut [[f32; GROUP]]) {
        use std::arch::x86_64::*;
        let runs = self.k / self.run;
        let rows: [&[u8]; R] = std::array::from_fn(|r| &xq.q[(r0 + r) * self.k..(r0 + r + 1) * self.k]);
        let mut acc = [_mm256_setzero_ps(); R];
        for ri in 0..runs {
            let base = (g * runs + ri) * GROUP * self.run;
            let at = (g * runs + ri) * GROUP;
            // SAFETY: each group's runs hold 8 biases.
            let mut dot = [unsafe { _mm256_loadu_si256(self.bias.as_ptr().add(at) as *const __m256i) }; R];
            for step in 0..S {
                // SAFETY: a run holds S steps of 32 bytes; each row's run holds S × 4 bytes.
                unsafe {
                    let w = _mm256_loadu_si256(self.values.as_ptr().add(base + step * GROUP * 4) as *const __m256i);
                    for (dot, row) in dot.iter_mut().zip(&rows) {
                        let xs = _mm256_set1_epi32((row.as_ptr().add(ri * self.run + step * 4) as *const i32).read_unaligned());
                        *dot = _mm256_dpbusd_epi32(*dot, xs, w);
                    }
                }
            }
            // SAFETY: each group's runs hold 8 scales and 8 offsets.
            let (scale, offset) = unsafe { (_mm256_loadu_ps(self.scales.as_ptr().add(at)), _mm256_loadu_ps(self.offsets.as_ptr().add(at))) };
            for (r, (acc, dot)) in acc.iter_mut().zip(dot).enumerate() {
                let (x_scale, x_sum) = xq.run(r0 + r, ri);
                let d = _mm256_mul_ps(scale, _mm256_set1_ps(x_scale));
                *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), d, *acc);
                *acc = _mm256_fmadd_ps(offset, _mm256_set1_ps(x_sum), *acc);
            }
        }
        for (out, acc) in out.iter_mut().zip(acc) {
            // SAFETY: out holds 8 floats.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn group_vnni(&self, g: usize, xq: &QuantizedRows, r0: usize, tile: &mut [[f32; GROUP]; ROW_TILE]) {
        self.group_scalar(g, xq, r0, ROW_TILE, tile)
    }

    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn row_vnni(&self, g0: usize, g1: usize, xq: &QuantizedRows, row: usize, out: &mut [[f32; GROUP]; GROUPS_PER_TASK]) {
        let mut tile = [[0f32; GROUP]; ROW_TILE];
        for (g, out) in (g0..g1).zip(out.iter_mut()) {
            self.group_scalar(g, xq, row, 1, &mut tile);
            *out = tile[0];
        }
    }
}

/// Bytes a packed (n, k) matrix of `dtype` occupies (one byte per weight; an f32 scale, an f32
/// offset and an i32 bias per run), or `None` for a type kept as candle's blocks.
pub fn packed_bytes(dtype: GgmlDType, n: usize, k: usize) -> Option<u64> {
    let (run, _, _) = block_layout(dtype)?;
    let rows = n.div_ceil(GROUP) * GROUP;
    Some((rows * k + 12 * rows * (k / run)) as u64)
}

/// Whether the integer-dot kernel can run here (otherwise the scalar one does, with the same bits).
fn has_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::env::var_os("SINKSCOPE_NO_VNNI").is_none()
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Rows of x quantized for the products: q + 128 as a byte (q the i8 value), and per run of the
/// weight's length (16 or 32) the scale of the 32 values it lies in and its exact f32 sum (for the
/// offset term).
struct QuantizedRows {
    runs_per_row: usize,
    q: Vec<u8>,
    scales: Vec<f32>,
    sums: Vec<f32>,
}

impl QuantizedRows {
    fn new(x: &[f32], m: usize, k: usize, run: usize) -> Self {
        debug_assert!(k.is_multiple_of(X_RUN) && X_RUN.is_multiple_of(run));
        let runs_per_row = k / run;
        let mut xq = QuantizedRows { runs_per_row, q: vec![0; m * k], scales: vec![0.0; m * runs_per_row], sums: vec![0.0; m * runs_per_row] };
        let per_x_run = X_RUN / run;
        xq.q.par_chunks_mut(k).zip(xq.scales.par_chunks_mut(runs_per_row)).zip(xq.sums.par_chunks_mut(runs_per_row)).zip(x.par_chunks(k)).for_each(
            |(((q, scales), sums), x)| {
                for (((q, d), s), x) in q.chunks_mut(X_RUN).zip(scales.chunks_mut(per_x_run)).zip(sums.chunks_mut(per_x_run)).zip(x.chunks(X_RUN)) {
                    let mut lanes = [0f32; 8];
                    for c in x.chunks_exact(8) {
                        for (l, &v) in lanes.iter_mut().zip(c) {
                            *l = if v.abs() > *l { v.abs() } else { *l };
                        }
                    }
                    let amax = lanes.iter().fold(0f32, |a, &l| if l > a { l } else { a });
                    d.fill(amax / 127.0);
                    let inv = if amax > 0.0 { 127.0 / amax } else { 0.0 };
                    for (q, &v) in q.iter_mut().zip(x) {
                        // Rounds half away from zero, as f32::round (LLVM's own lowering of it:
                        // 0.49999997 is the float below one half), without a libm call per value.
                        let y = v * inv;
                        *q = ((y + 0.49999997f32.copysign(y)) as i32 + 128) as u8;
                    }
                    for (s, x) in s.iter_mut().zip(x.chunks(run)) {
                        *s = x.iter().sum();
                    }
                }
            },
        );
        xq
    }

    /// (scale, sum) of run `ri` of `row`.
    fn run(&self, row: usize, ri: usize) -> (f32, f32) {
        let at = row * self.runs_per_row + ri;
        (self.scales[at], self.sums[at])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TYPES: [GgmlDType; 8] =
        [GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q5_0, GgmlDType::Q5_1, GgmlDType::Q8_0, GgmlDType::Q4K, GgmlDType::Q5K, GgmlDType::Q6K];

    fn matrix(n: usize, k: usize, seed: f32) -> Tensor {
        let w: Vec<f32> = (0..n * k).map(|i| ((i as f32 + seed) * 0.7548).sin() * (1.0 + (i % 7) as f32 * 0.3) * 0.05).collect();
        Tensor::from_vec(w, (n, k), &Device::Cpu).unwrap()
    }

    #[test]
    fn packing_keeps_every_type_exactly() {
        // 13 rows: one group and a short one.
        for dtype in TYPES {
            let q = QTensor::quantize(&matrix(13, 512, 1.0), dtype).unwrap();
            let want: Vec<f32> = q.dequantize(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let packed = PackedWeight::new(&q).unwrap().unwrap();
            assert_eq!(Some(packed.bytes()), packed_bytes(dtype, 13, 512), "{dtype:?}");
            let got = packed.dequantize();
            assert_eq!(got.len(), want.len());
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                // scale · w + offset against candle's formula (d·sc·u − dmin·m): the same value to
                // within a few roundings of its terms (the centred offset is one sum in f32).
                let (wq, scale, offset) = packed.entry(i / 512, i % 512);
                let size = (scale * wq as f32).abs() + offset.abs();
                assert!((g - w).abs() <= 4.0 * f32::EPSILON * size.max(1e-30), "{dtype:?} [{i}]: {g} vs {w}");
            }
        }
    }

    #[test]
    fn products_follow_the_dequantized_f32_product() {
        for dtype in TYPES {
            for (m, n) in [(1, 24), (7, 13), (9, 40)] {
                let k = 512;
                let packed = PackedWeight::new(&QTensor::quantize(&matrix(n, k, 2.0), dtype).unwrap()).unwrap().unwrap();
                let x: Vec<f32> = matrix(m, k, 5.0).flatten_all().unwrap().to_vec1().unwrap();
                let got = packed.product(&x, m);
                assert_eq!(got.len(), m * n);
                for r in 0..m {
                    let xr = &x[r * k..(r + 1) * k];
                    for c in 0..n {
                        let (mut exact, mut bound, mut size) = (0f64, 0f64, 0f64);
                        for (i, &xi) in xr.iter().enumerate() {
                            let (wq, scale, offset) = packed.entry(c, i);
                            let w = (scale * wq as f32 + offset) as f64;
                            exact += w * xi as f64;
                            size += (w * xi as f64).abs();
                            // x rounds to steps of max|x| / 127 over its run of 32; only the
                            // scale · w part meets the rounded x (the offset meets the exact sum).
                            let amax = xr[i / 32 * 32..][..32].iter().fold(0f64, |a, v| a.max(v.abs() as f64));
                            bound += (scale as f64 * wq as f64).abs() * amax / 254.0;
                        }
                        let g = got[r * n + c] as f64;
                        let tolerance = bound * 1.001 + 1e-5 * size;
                        assert!(g.is_finite() && (g - exact).abs() <= tolerance, "{dtype:?} ({r}, {c}): {g} vs {exact} (±{tolerance})");
                    }
                }
            }
        }
    }

    #[test]
    fn integer_kernel_equals_the_scalar_one_on_any_thread_count() {
        // Whole row tiles and a tail, decoding's single row; 5 groups (4 + 1 at a time) and 13
        // (two tasks).
        for dtype in TYPES {
            for (m, n) in [(11, 37), (1, 100), (17, 100)] {
                let k = 256;
                let packed = PackedWeight::new(&QTensor::quantize(&matrix(n, k, 3.0), dtype).unwrap()).unwrap().unwrap();
                let x: Vec<f32> = matrix(m, k, 7.0).flatten_all().unwrap().to_vec1().unwrap();
                let xq = QuantizedRows::new(&x, m, k, packed.run);
                let bits = |threads: usize| -> Vec<u32> {
                    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                    pool.install(|| packed.product(&x, m)).iter().map(|v| v.to_bits()).collect()
                };
                let one = bits(1);
                for threads in [2, 3, 8] {
                    assert!(one == bits(threads), "{dtype:?} ({m}, {n}) on {threads} threads");
                }
                let mut scalar = vec![0u32; m * n];
                let mut tile = [[0f32; GROUP]; ROW_TILE];
                for g in 0..n.div_ceil(GROUP) {
                    for row in 0..m {
                        packed.group_scalar(g, &xq, row, 1, &mut tile);
                        for (c, &v) in tile[0].iter().take(GROUP.min(n - g * GROUP)).enumerate() {
                            scalar[row * n + g * GROUP + c] = v.to_bits();
                        }
                    }
                }
                assert!(one == scalar, "{dtype:?} ({m}, {n}): the integer kernel and the scalar one differ");
            }
        }
    }

    #[test]
    fn stacked_parts_give_the_parts_products_side_by_side() {
        // Q8_0 | Q5_0 | Q4_1 (runs of 32), the last part not a whole group.
        let k = 256;
        let parts: Vec<PackedWeight> = [(GgmlDType::Q8_0, 16), (GgmlDType::Q5_0, 8), (GgmlDType::Q4_1, 13)]
            .iter()
            .map(|&(t, n)| PackedWeight::new(&QTensor::quantize(&matrix(n, k, n as f32), t).unwrap()).unwrap().unwrap())
            .collect();
        let x = matrix(5, k, 9.0);
        let x: Vec<f32> = x.flatten_all().unwrap().to_vec1().unwrap();
        let each: Vec<Vec<f32>> = parts.iter().map(|p| p.product(&x, 5)).collect();
        let stacked = PackedWeight::stack(parts).ok().unwrap();
        assert_eq!(stacked.shape(), (37, k));
        let got = stacked.product(&x, 5);
        for r in 0..5 {
            let want: Vec<u32> =
                [(0, 16), (1, 8), (2, 13)].iter().flat_map(|&(i, n)| each[i][r * n..(r + 1) * n].iter().map(|v| v.to_bits())).collect();
            let row: Vec<u32> = got[r * 37..(r + 1) * 37].iter().map(|v| v.to_bits()).collect();
            assert_eq!(row, want, "row {r}");
        }
        // A Q6_K part (runs of 16) does not stack with runs of 32.
        let mixed = vec![
            PackedWeight::new(&QTensor::quantize(&matrix(8, k, 1.0), GgmlDType::Q6K).unwrap()).unwrap().unwrap(),
            PackedWeight::new(&QTensor::quantize(&matrix(8, k, 2.0), GgmlDType::Q8_0).unwrap()).unwrap().unwrap(),
        ];
        assert!(PackedWeight::stack(mixed).is_err());
    }
}
