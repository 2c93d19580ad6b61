//! Multi-head latent attention (DeepSeek-V2/V3's MLA) in its absorbed form, as llama.cpp runs
//! it: what a layer caches per token is one row [k_rope | latent] shared by every head (one KV
//! head of `qk_rope + kv_lora_rank`, RoPE on its leading `qk_rope`), each head's query is
//! [q_rope | q_nope · W_UK] so that its dot product with that row is the expanded key's, the
//! values are the latent, and each head's output is brought up to `v_head` by W_UV before
//! `o_proj`. Equal to transformers' expanded form up to float rounding (held in
//! tests/architectures.rs); the cache a policy evicts is the latent row itself.

use candle_core::{Device, Tensor};

use super::config::{take_opt, take_req, DecoderConfig, Mla, ParamSource};
use super::linear::Linear;
use crate::error::Result;

/// The two latent norms' ε: transformers builds `q_a_layernorm` and `kv_a_layernorm` with their
/// default 1e-6 whatever `rms_norm_eps` says.
const LATENT_NORM_EPS: f32 = 1e-6;

/// How a layer's queries are made: one projection, or DeepSeek-V2's low-rank path.
enum QueryPath {
    Direct(Linear),
    LowRank { down: Linear, norm: Tensor, up: Linear },
}

/// One layer's MLA weights.
pub(crate) struct LatentAttention {
    mla: Mla,
    heads: usize,
    query: QueryPath,
    /// x → [latent | k_rope] (`kv_a_proj_with_mqa`).
    kv_down: Linear,
    kv_norm: Tensor,
    /// Per head, the latent → k_nope map, (heads, qk_nope, kv_lora_rank): absorbed into queries.
    w_uk: Tensor,
    /// Per head, the latent → value map transposed, (heads, kv_lora_rank, v_head).
    w_uv: Tensor,
}

impl LatentAttention {
    /// Reads layer `l`'s MLA weights under llama.cpp's names (`attn_q` or `attn_q_a`,
    /// `attn_q_a_norm`, `attn_q_b`; `attn_kv_a_mqa`, `attn_kv_a_norm`, `attn_kv_b` or its two
    /// halves `attn_k_b` / `attn_v_b`).
    pub(crate) fn load(cfg: &DecoderConfig, mla: Mla, l: usize, path: &std::path::Path, get: &mut ParamSource<'_>) -> Result<Self> {
        let (d, h) = (cfg.d_model, cfg.n_heads);
        let n = |s: &str| format!("blk.{l}.{s}");
        let q_width = h * (mla.qk_nope + mla.qk_rope);
        let query = match mla.q_lora_rank {
            0 => QueryPath::Direct(Linear::new(take_req(get, path, &n("attn_q.weight"), &[q_width, d])?, None)?),
            r => QueryPath::LowRank {
                down: Linear::new(take_req(get, path, &n("attn_q_a.weight"), &[r, d])?, None)?,
                norm: take_req(get, path, &n("attn_q_a_norm.weight"), &[r])?.dequantize()?,
                up: Linear::new(take_req(get, path, &n("attn_q_b.weight"), &[q_width, r])?, None)?,
            },
        };
        let c = mla.kv_lora_rank;
        let kv_down = Linear::new(take_req(get, path, &n("attn_kv_a_mqa.weight"), &[c + mla.qk_rope, d])?, None)?;
        let kv_norm = take_req(get, path, &n("attn_kv_a_norm.weight"), &[c])?.dequantize()?;
        let (w_uk, w_uv) = match take_opt(get, path, &n("attn_kv_b.weight"), &[h * (mla.qk_nope + mla.v_head), c])? {
            // transformers' kv_b_proj, (heads · (qk_nope + v_head), latent): per head, k_nope's
            // rows then the value's.
            Some(kv_up) => {
                let kv_up = kv_up.dequantize()?.reshape((h, mla.qk_nope + mla.v_head, c))?;
                (kv_up.narrow(1, 0, mla.qk_nope)?.contiguous()?, kv_up.narrow(1, mla.qk_nope, mla.v_head)?.transpose(1, 2)?.contiguous()?)
            }
            // llama.cpp's converter splits it: attn_k_b (heads, latent, qk_nope), attn_v_b
            // (heads, v_head, latent).
            None => {
                let k_b = take_req(get, path, &n("attn_k_b.weight"), &[h, c, mla.qk_nope])?.dequantize()?;
                let v_b = take_req(get, path, &n("attn_v_b.weight"), &[h, mla.v_head, c])?.dequantize()?;
                (k_b.transpose(1, 2)?.contiguous()?, v_b.transpose(1, 2)?.contiguous()?)
            }
        };
        Ok(LatentAttention { mla, heads: h, query, kv_down, kv_norm, w_uk, w_uv })
    }

    /// The absorbed queries (rows, heads, qk_rope + kv_lora_rank), the cached rows (rows, 1, same)
    /// and the values (rows, 1, same: zeros where the RoPE key sits, then the latent), before RoPE.
    pub(crate) fn qkv(&self, x: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let (rows, m) = (x.dim(0)?, &self.mla);
        let q = match &self.query {
            QueryPath::Direct(q) => q.forward(x)?,
            QueryPath::LowRank { down, norm, up } => {
                up.forward(&candle_nn::ops::rms_norm(&down.forward(x)?.contiguous()?, norm, LATENT_NORM_EPS)?)?
            }
        };
        let q = q.reshape((rows, self.heads, m.qk_nope + m.qk_rope))?;
        let q_nope = q.narrow(2, 0, m.qk_nope)?.transpose(0, 1)?.contiguous()?;
        // (heads, rows, qk_nope) · (heads, qk_nope, latent): q_nope · W_UK per head.
        let q_latent = q_nope.matmul(&self.w_uk)?.transpose(0, 1)?;
        let q = Tensor::cat(&[&q.narrow(2, m.qk_nope, m.qk_rope)?, &q_latent], 2)?.contiguous()?;
        let kv = self.kv_down.forward(x)?;
        let latent = candle_nn::ops::rms_norm(&kv.narrow(1, 0, m.kv_lora_rank)?.contiguous()?, &self.kv_norm, LATENT_NORM_EPS)?;
        let k_rope = kv.narrow(1, m.kv_lora_rank, m.qk_rope)?;
        let k = Tensor::cat(&[&k_rope, &latent], 1)?.reshape((rows, 1, m.cached_width()))?;
        let v = Tensor::cat(&[&Tensor::zeros((rows, m.qk_rope), latent.dtype(), &Device::Cpu)?, &latent], 1)?;
        Ok((q, k, v.reshape((rows, 1, m.cached_width()))?))
    }

    /// The heads' outputs as `o_proj` reads them, (rows, heads · v_head), from attention's
    /// (rows, heads · (qk_rope + kv_lora_rank)): each head's latent part times its W_UV.
    pub(crate) fn up(&self, z: &Tensor) -> Result<Tensor> {
        let (rows, m) = (z.dim(0)?, &self.mla);
        let z = z.reshape((rows, self.heads, m.cached_width()))?.narrow(2, m.qk_rope, m.kv_lora_rank)?.transpose(0, 1)?.contiguous()?;
        let out = z.matmul(&self.w_uv)?.transpose(0, 1)?.contiguous()?;
        Ok(out.reshape((rows, self.heads * m.v_head))?)
    }
}
