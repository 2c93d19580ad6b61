//! Gated DeltaNet, the linear-attention layers of Qwen3-Next (Yang et al. 2024), as transformers
//! defines them: per token, q|k|v through a causal depthwise convolution and SiLU, q and k
//! L2-normalised (q × d_k^−½), then per value head a d_k × d_v state S decays by e^g, is corrected
//! towards v along k (the delta rule, step size β) and read by q; the reading goes through an
//! RMSNorm gated by silu(z) before `out_proj`. The state replaces a KV cache: it has a fixed size,
//! and no eviction can touch it. A prefill runs the chunked (WY) form, a decode step the
//! recurrence; they are equal up to float rounding (tested here).

use candle_core::{Device, Tensor};
use rayon::prelude::*;

use super::config::{take_req, DecoderConfig, DeltaNetShape, Param, ParamSource};
use super::linear::{Linear, Projection};
use crate::error::{Error, Result};
use crate::numerics::tensor::with_f32;

/// Tokens per chunk of the chunked form (transformers' and fla's 64).
const CHUNK: usize = 64;
/// ε of the L2 norm of q and k (fla's, transformers' `l2norm`).
const L2_EPS: f32 = 1e-6;

/// What one sequence carries through a linear-attention layer between calls: the convolution's
/// last `kernel − 1` inputs and the state S of every value head.
#[derive(Clone, Debug)]
pub struct DeltaState {
    /// (kernel − 1) rows of conv_dim channels, oldest first.
    conv: Vec<f32>,
    /// (v_heads, d_k, d_v).
    s: Vec<f32>,
}

impl DeltaState {
    pub fn new(shape: &DeltaNetShape) -> Self {
        DeltaState { conv: vec![0.0; (shape.conv_kernel - 1) * shape.conv_dim()], s: vec![0.0; shape.state_elements()] }
    }

    /// The state S, (v_heads, d_k, d_v) row-major.
    pub fn matrix(&self) -> &[f32] {
        &self.s
    }
}

/// The states one sequence carries through a hybrid model's linear-attention layers, by layer.
#[derive(Clone, Debug, Default)]
pub struct RecurrentStates {
    layers: std::collections::BTreeMap<usize, DeltaState>,
}

impl RecurrentStates {
    /// Layer `l`'s state (zeros before the first token).
    pub(crate) fn layer(&mut self, l: usize, shape: &DeltaNetShape) -> &mut DeltaState {
        self.layers.entry(l).or_insert_with(|| DeltaState::new(shape))
    }

    /// Layer `l`'s state, if the layer has seen a token.
    pub fn get(&self, l: usize) -> Option<&DeltaState> {
        self.layers.get(&l)
    }
}

/// One layer's Gated DeltaNet weights.
pub(crate) struct GatedDeltaNet {
    shape: DeltaNetShape,
    /// x → [q | k | v | z].
    in_qkvz: Projection,
    /// x → [b | a].
    in_ba: Linear,
    /// Depthwise convolution weights, (conv_dim, kernel).
    conv: Vec<f32>,
    dt_bias: Vec<f32>,
    /// −exp(A_log) per value head.
    decay_rate: Vec<f32>,
    /// The gated RMSNorm's weight (d_v), shared by the heads.
    norm: Tensor,
}

impl GatedDeltaNet {
    /// Reads layer `l`'s weights under llama.cpp's names (`attn_qkv`: q|k|v of every head, grouped
    /// by kind; `attn_gate`: z; `ssm_ba`; `ssm_conv1d`; `ssm_dt.bias`; `ssm_a` = −exp(A_log);
    /// `ssm_norm`; the output projection is the block's `ssm_out`).
    pub(crate) fn load(cfg: &DecoderConfig, shape: DeltaNetShape, l: usize, path: &std::path::Path, get: &mut ParamSource<'_>) -> Result<Self> {
        let d = cfg.d_model;
        let n = |s: &str| format!("blk.{l}.{s}");
        let (kh, r) = (shape.k_heads, shape.v_heads / shape.k_heads);
        let qkv = take_req(get, path, &n("attn_qkv.weight"), &[shape.conv_dim(), d])?;
        let z = take_req(get, path, &n("attn_gate.weight"), &[shape.value_width(), d])?;
        let in_qkvz = Projection::new(vec![(qkv, None), (z, None)])?;
        // Per key head [b | a] of its r value heads (both formats) → all b, then all a.
        let ba = take_req(get, path, &n("ssm_ba.weight"), &[2 * shape.v_heads, d])?;
        let order: Vec<u32> = [0, r].iter().flat_map(|&at| (0..kh).flat_map(move |g| (0..r).map(move |i| (g * 2 * r + at + i) as u32))).collect();
        let in_ba = Linear::new(regroup(ba, &order)?, None)?;
        let conv = take_req(get, path, &n("ssm_conv1d.weight"), &[shape.conv_dim(), shape.conv_kernel])?.dequantize()?;
        let vector = |name: &str, get: &mut ParamSource<'_>| -> Result<Vec<f32>> {
            Ok(take_req(get, path, &n(name), &[shape.v_heads])?.dequantize()?.to_vec1::<f32>()?)
        };
        let dt_bias = vector("ssm_dt.bias", get)?;
        let decay_rate = vector("ssm_a", get)?;
        let norm = take_req(get, path, &n("ssm_norm.weight"), &[shape.v_dim])?.dequantize()?;
        Ok(GatedDeltaNet { shape, in_qkvz, in_ba, conv: conv.flatten_all()?.to_vec1()?, dt_bias, decay_rate, norm })
    }

    pub(crate) fn shape(&self) -> &DeltaNetShape {
        &self.shape
    }

    /// The projections of normalised rows `x`: (q|k|v before the convolution (rows, conv_dim),
    /// z (rows, v_heads · d_v), b|a (rows, 2 · v_heads)).
    pub(crate) fn project(&self, x: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let qkvz = self.in_qkvz.forward(x)?;
        let conv_dim = self.shape.conv_dim();
        let z = qkvz.narrow(1, conv_dim, self.shape.value_width())?.contiguous()?;
        Ok((qkvz.narrow(1, 0, conv_dim)?.contiguous()?, z, self.in_ba.forward(x)?.contiguous()?))
    }

    /// The heads' readings (rows, v_heads · d_v) for one sequence's rows continuing `state`, which
    /// is advanced past them: the chunked form for several rows, the recurrence for one.
    pub(crate) fn mix(&self, qkv: &Tensor, ba: &Tensor, state: &mut DeltaState) -> Result<Tensor> {
        let rows = qkv.dim(0)?;
        let out = with_f32(qkv, |qkv| with_f32(ba, |ba| self.mix_rows(qkv, ba, rows, state, rows > 1)))???;
        Ok(Tensor::from_vec(out, (rows, self.shape.value_width()), &Device::Cpu)?)
    }

    /// RMSNorm of each head's reading (ε `eps`) × weight × silu(z): what `out_proj` reads.
    pub(crate) fn gated_norm(&self, core: &Tensor, z: &Tensor, eps: f32) -> Result<Tensor> {
        let (rows, vh, dv) = (core.dim(0)?, self.shape.v_heads, self.shape.v_dim);
        let normed = candle_nn::ops::rms_norm(&core.reshape((rows * vh, dv))?, &self.norm, eps)?;
        Ok((normed.reshape((rows, vh * dv))? * candle_nn::ops::silu(z)?)?)
    }

    fn mix_rows(&self, qkv: &[f32], ba: &[f32], rows: usize, state: &mut DeltaState, chunked: bool) -> Result<Vec<f32>> {
        let s = &self.shape;
        let (kw, vh, dk, dv) = (s.k_heads * s.k_dim, s.v_heads, s.k_dim, s.v_dim);
        let mixed = self.convolve(qkv, rows, &mut state.conv);
        // Per value head: its key head's q, k (normalised), its v, β and g, by row.
        let r = vh / s.k_heads;
        let scale = 1.0 / (dk as f32).sqrt();
        let heads: Vec<HeadInputs> = (0..vh)
            .map(|h| {
                let kh = h / r;
                let take =
                    |from: usize, len: usize| -> Vec<f32> { (0..rows).flat_map(|t| mixed[t * s.conv_dim() + from..][..len].to_vec()).collect() };
                let mut q = take(kh * dk, dk);
                let mut k = take(kw + kh * dk, dk);
                l2_normalise(&mut q, dk, scale);
                l2_normalise(&mut k, dk, 1.0);
                let v = take(2 * kw + h * dv, dv);
                let beta = (0..rows).map(|t| sigmoid(ba[t * 2 * vh + h])).collect();
                let g = (0..rows).map(|t| self.decay_rate[h] * softplus(ba[t * 2 * vh + vh + h] + self.dt_bias[h])).collect();
                HeadInputs { q, k, v, beta, g }
            })
            .collect();
        let outs: Vec<Vec<f32>> = heads
            .par_iter()
            .zip(state.s.par_chunks_mut(dk * dv))
            .map(|(x, st)| if chunked { chunked_rule(x, st, dk, dv) } else { recurrent_rule(x, st, dk, dv) })
            .collect();
        if outs.iter().flatten().any(|x| !x.is_finite()) {
            return Err(Error::input(
                "a linear-attention layer's state overflowed (a value is not finite); the weights or the input are out of range",
            ));
        }
        Ok((0..rows).flat_map(|t| outs.iter().flat_map(move |o| o[t * dv..][..dv].iter().copied())).collect())
    }

    /// The causal depthwise convolution of `qkv` (rows, conv_dim) after the `window` of earlier
    /// inputs, then SiLU; `window` moves on to the last kernel − 1 inputs.
    fn convolve(&self, qkv: &[f32], rows: usize, window: &mut [f32]) -> Vec<f32> {
        let (c, kernel) = (self.shape.conv_dim(), self.shape.conv_kernel);
        let past = kernel - 1;
        let mut seq = window.to_vec();
        seq.extend_from_slice(qkv);
        let mut out = vec![0f32; rows * c];
        out.par_chunks_mut(c).enumerate().for_each(|(t, row)| {
            for (ch, o) in row.iter_mut().enumerate() {
                let w = &self.conv[ch * kernel..][..kernel];
                let sum: f32 = (0..kernel).map(|j| w[j] * seq[(t + j) * c + ch]).sum();
                *o = sum / (1.0 + (-sum).exp());
            }
        });
        window.copy_from_slice(&seq[rows * c..][..past * c]);
        out
    }
}

/// One value head's inputs over a sequence's rows: q, k (rows × d_k), v (rows × d_v), β, g.
struct HeadInputs {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    beta: Vec<f32>,
    g: Vec<f32>,
}

/// The recurrence, one row at a time: S ← S·e^g; δ = (v − Sᵀk)·β; S ← S + k δᵀ; o = Sᵀq.
fn recurrent_rule(x: &HeadInputs, s: &mut [f32], dk: usize, dv: usize) -> Vec<f32> {
    let rows = x.beta.len();
    let mut out = vec![0f32; rows * dv];
    for t in 0..rows {
        let (q, k, v) = (&x.q[t * dk..][..dk], &x.k[t * dk..][..dk], &x.v[t * dv..][..dv]);
        let decay = x.g[t].exp();
        s.iter_mut().for_each(|e| *e *= decay);
        let mut delta: Vec<f32> = v.to_vec();
        for (i, &ki) in k.iter().enumerate() {
            delta.iter_mut().zip(&s[i * dv..][..dv]).for_each(|(d, &e)| *d -= e * ki);
        }
        delta.iter_mut().for_each(|d| *d *= x.beta[t]);
        let o = &mut out[t * dv..][..dv];
        for i in 0..dk {
            let row = &mut s[i * dv..][..dv];
            row.iter_mut().zip(&delta).for_each(|(e, &d)| *e += k[i] * d);
            row.iter().zip(o.iter_mut()).for_each(|(&e, o)| *o += e * q[i]);
        }
    }
    out
}

/// The chunked (WY) form of the same rule, chunk by chunk of [`CHUNK`] rows: within a chunk the
/// delta rule's corrections are solved as one lower-triangular system, across chunks the state
/// carries what came before.
fn chunked_rule(x: &HeadInputs, s: &mut [f32], dk: usize, dv: usize) -> Vec<f32> {
    let rows = x.beta.len();
    let mut out = vec![0f32; rows * dv];
    for c0 in (0..rows).step_by(CHUNK) {
        let n = CHUNK.min(rows - c0);
        let at = |m: &[f32], t: usize, w: usize| -> Vec<f32> { m[(c0 + t) * w..][..w].to_vec() };
        let rows_of = |m: &[f32], w: usize| -> Vec<Vec<f32>> { (0..n).map(|t| at(m, t, w)).collect() };
        let (q, k, v) = (rows_of(&x.q, dk), rows_of(&x.k, dk), rows_of(&x.v, dv));
        let beta = &x.beta[c0..c0 + n];
        // Cumulative log-decay within the chunk.
        let mut acc = 0f32;
        let cum: Vec<f32> = x.g[c0..c0 + n]
            .iter()
            .map(|&g| {
                acc += g;
                acc
            })
            .collect();
        let decay = |i: usize, j: usize| (cum[i] - cum[j]).exp();
        // T = (I + strictly-lower(diag(β) K Kᵀ ∘ decay))⁻¹ by forward substitution.
        let mut t_mat = vec![0f32; n * n];
        for i in 0..n {
            for j in 0..i {
                t_mat[i * n + j] = -beta[i] * dot(&k[i], &k[j]) * decay(i, j);
            }
        }
        for i in 1..n {
            let row: Vec<f32> = t_mat[i * n..i * n + i].to_vec();
            for j in 0..i {
                let sum: f32 = (0..i).map(|m| row[m] * t_mat[m * n + j]).sum();
                t_mat[i * n + j] = row[j] + sum;
            }
        }
        (0..n).for_each(|i| t_mat[i * n + i] = 1.0);
        // U = T·diag(β)·V and W = T·diag(β·e^cum)·K; the corrections still owed by the state: V' = U − W·S.
        let mut v_new = vec![0f32; n * dv];
        for i in 0..n {
            let mut w = vec![0f32; dk];
            for j in 0..=i {
                let tij = t_mat[i * n + j] * beta[j];
                v_new[i * dv..][..dv].iter_mut().zip(&v[j]).for_each(|(u, &vj)| *u += tij * vj);
                let e = cum[j].exp();
                w.iter_mut().zip(&k[j]).for_each(|(w, &kj)| *w += tij * e * kj);
            }
            for (a, &wa) in w.iter().enumerate() {
                v_new[i * dv..][..dv].iter_mut().zip(&s[a * dv..][..dv]).for_each(|(u, &e)| *u -= wa * e);
            }
        }
        // o_i = (q_i e^cum_i)·S + Σ_{j ≤ i} (q_i·k_j) decay(i, j) V'_j.
        for i in 0..n {
            let o = &mut out[(c0 + i) * dv..][..dv];
            let e = cum[i].exp();
            for (a, &qa) in q[i].iter().enumerate() {
                o.iter_mut().zip(&s[a * dv..][..dv]).for_each(|(o, &sv)| *o += qa * e * sv);
            }
            for j in 0..=i {
                let wgt = dot(&q[i], &k[j]) * decay(i, j);
                o.iter_mut().zip(&v_new[j * dv..][..dv]).for_each(|(o, &u)| *o += wgt * u);
            }
        }
        // S ← S·e^cum_last + Σ_j (k_j e^(cum_last − cum_j)) V'_jᵀ.
        let last = cum[n - 1];
        s.iter_mut().for_each(|e| *e *= last.exp());
        for j in 0..n {
            let e = (last - cum[j]).exp();
            for a in 0..dk {
                let f = k[j][a] * e;
                s[a * dv..][..dv].iter_mut().zip(&v_new[j * dv..][..dv]).for_each(|(sv, &u)| *sv += f * u);
            }
        }
    }
    out
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Each `width`-wide row scaled to unit L2 norm (ε inside the root, as fla does), times `scale`.
fn l2_normalise(m: &mut [f32], width: usize, scale: f32) {
    for row in m.chunks_mut(width) {
        let inv = 1.0 / (row.iter().map(|x| x * x).sum::<f32>() + L2_EPS).sqrt();
        row.iter_mut().for_each(|x| *x *= inv * scale);
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// ln(1 + eˣ), linear above 20 as torch's softplus.
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// A weight's rows in `order` (dense from here on).
fn regroup(p: Param, order: &[u32]) -> Result<Param> {
    let w = p.stored()?;
    Ok(Param::Dense(w.index_select(&Tensor::new(order, &Device::Cpu)?, 0)?.contiguous()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeded(n: usize, seed: u32) -> Vec<f32> {
        let mut x = seed.wrapping_mul(2654435761).max(1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x % 2000) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    fn inputs(rows: usize, dk: usize, dv: usize, seed: u32) -> HeadInputs {
        let mut q = seeded(rows * dk, seed);
        let mut k = seeded(rows * dk, seed + 1);
        l2_normalise(&mut q, dk, 1.0 / (dk as f32).sqrt());
        l2_normalise(&mut k, dk, 1.0);
        HeadInputs {
            q,
            k,
            v: seeded(rows * dv, seed + 2),
            beta: seeded(rows, seed + 3).iter().map(|&b| sigmoid(3.0 * b)).collect(),
            g: seeded(rows, seed + 4).iter().map(|&a| -softplus(2.0 * a)).collect(),
        }
    }

    #[test]
    fn the_chunked_form_equals_the_recurrence_across_chunks_and_calls() {
        let (dk, dv) = (8, 6);
        // 150 rows: two full chunks and a partial one, from a state left by 20 earlier rows.
        let (before, x) = (inputs(20, dk, dv, 7), inputs(150, dk, dv, 11));
        let mut s0 = vec![0f32; dk * dv];
        recurrent_rule(&before, &mut s0, dk, dv);
        let (mut s_rec, mut s_chunk) = (s0.clone(), s0);
        let rec = recurrent_rule(&x, &mut s_rec, dk, dv);
        let chunk = chunked_rule(&x, &mut s_chunk, dk, dv);
        let worst = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert_eq!(rec.len(), chunk.len());
        assert!(rec.iter().chain(&chunk).all(|x| x.is_finite()));
        assert!(worst(&rec, &chunk) < 1e-4, "outputs differ by {}", worst(&rec, &chunk));
        assert!(worst(&s_rec, &s_chunk) < 1e-4, "states differ by {}", worst(&s_rec, &s_chunk));
        // Not trivially equal: the state moved and the outputs are not all zero.
        assert!(rec.iter().any(|x| x.abs() > 1e-2) && s_rec.iter().any(|x| x.abs() > 1e-2));
    }
}
