//! One decoder block's weights as the family's switches lay them out: its norms (RMSNorm or
//! LayerNorm, before and/or after each sublayer), the q|k|v projection (separate or fused in the
//! file), the optional q/k norms, the output projection and the MLP (SwiGLU, GeGLU or GELU; gate
//! and up separate or fused).

use candle_core::Tensor;

use super::config::{take_opt, take_opt_vector, take_req, DecoderConfig, MlpKind, NormKind, NormPlacement, Param, ParamSource, QkNorm};
use super::delta_net::GatedDeltaNet;
use super::latent::LatentAttention;
use super::linear::{Linear, Projection};
use super::moe::MoeMlp;
use crate::error::Result;
use crate::numerics::kernels::{geglu, swiglu};

/// A norm's weight, and its bias for LayerNorm.
pub(crate) struct Norm {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Norm {
    /// Reads `{name}.weight` (and `{name}.bias` for LayerNorm) of width `d`.
    pub(crate) fn load(cfg: &DecoderConfig, path: &std::path::Path, get: &mut ParamSource<'_>, name: &str, d: usize) -> Result<Norm> {
        let weight = take_req(get, path, &format!("{name}.weight"), &[d])?.dequantize()?;
        let bias = match cfg.arch.norm {
            NormKind::Rms => None,
            NormKind::Layer => Some(take_req(get, path, &format!("{name}.bias"), &[d])?.dequantize()?),
            // A zero bias: adding it changes no bit.
            NormKind::LayerNoBias => Some(weight.zeros_like()?),
        };
        Ok(Norm { weight, bias })
    }

    pub(crate) fn forward(&self, x: &Tensor, eps: f32) -> Result<Tensor> {
        let x = x.contiguous()?;
        Ok(match &self.bias {
            None => candle_nn::ops::rms_norm(&x, &self.weight, eps)?,
            Some(b) => candle_nn::ops::layer_norm(&x, &self.weight, b, eps)?,
        })
    }
}

/// The feed-forward block.
pub(crate) enum Mlp {
    SwiGlu {
        gate_up: Projection,
        down: Linear,
    },
    GeGlu {
        gate_up: Projection,
        down: Linear,
    },
    /// GELU with biases, exact (erf) or its tanh approximation.
    Gelu {
        up: Linear,
        down: Linear,
        tanh: bool,
    },
    Moe(Box<MoeMlp>),
}

impl Mlp {
    /// The block's output for input `x`; `hidden` sees the activation the down projection reads
    /// (`hook_mlp_post`) and returns what it should read instead. A mixture of experts, whose
    /// tokens each have their own activation, never calls it.
    pub(crate) fn forward(&self, x: &Tensor, hidden: &mut dyn FnMut(Tensor) -> Result<Tensor>) -> Result<Tensor> {
        let (act, down) = match self {
            Mlp::Moe(moe) => return moe.forward(x),
            Mlp::SwiGlu { gate_up, down } => (swiglu(&gate_up.forward(x)?)?, down),
            Mlp::GeGlu { gate_up, down } => (geglu(&gate_up.forward(x)?)?, down),
            Mlp::Gelu { up, down, tanh: false } => (up.forward(x)?.gelu_erf()?, down),
            Mlp::Gelu { up, down, tanh: true } => (up.forward(x)?.gelu()?, down),
        };
        down.forward(&hidden(act)?)
    }
}

pub(crate) struct Block {
    /// Norms of the attention's input and output, and of the MLP's (which exist depends on
    /// [`NormPlacement`]).
    pub(crate) attn_in: Option<Norm>,
    pub(crate) attn_out: Option<Norm>,
    pub(crate) mlp_in: Option<Norm>,
    pub(crate) mlp_out: Option<Norm>,
    pub(crate) qkv: QkvSource,
    pub(crate) o_proj: Linear,
    /// Learned sink logits, one per head (gpt-oss).
    pub(crate) sinks: Option<Vec<f32>>,
    pub(crate) mlp: Mlp,
}

/// Where a block's queries, keys and values come from.
pub(crate) enum QkvSource {
    /// One projection per kind (separate or fused in the file), with the RMSNorm weights of
    /// queries and keys where the family has them ([`QkNorm`]); `gated`: the query projection
    /// gives [query | gate] per head.
    Heads { qkv: Projection, qk_norm: Option<(Tensor, Tensor)>, gated: bool },
    /// Multi-head latent attention.
    Latent(Box<LatentAttention>),
    /// No attention: a Gated DeltaNet layer (its output projection is the block's `o_proj`).
    Linear(Box<GatedDeltaNet>),
}

/// A layer's attention inputs before RoPE: queries (rows, H, dh), keys and values (rows, KVH, dh),
/// and the raw output gate (rows, H·dh) of a gated model.
pub(crate) struct Qkv {
    pub(crate) q: Tensor,
    pub(crate) k: Tensor,
    pub(crate) v: Tensor,
    pub(crate) gate: Option<Tensor>,
}

/// RMSNorm of queries and keys over their last dimension with a block's q/k norm weights
/// (unchanged when the family has none).
fn norm_qk(qk_norm: &Option<(Tensor, Tensor)>, q: &Tensor, k: &Tensor, eps: f32) -> Result<(Tensor, Tensor)> {
    Ok(match qk_norm {
        Some((q_norm, k_norm)) => {
            (candle_nn::ops::rms_norm(&q.contiguous()?, q_norm, eps)?, candle_nn::ops::rms_norm(&k.contiguous()?, k_norm, eps)?)
        }
        None => (q.clone(), k.clone()),
    })
}

impl Block {
    /// The layer's queries (rows, H, dh), keys and values (rows, KVH, dh) before RoPE, from its
    /// normalised input: queries and keys normalised (over the whole projection, or over each head
    /// once split into heads) where the family does.
    pub(crate) fn qkv(&self, cfg: &DecoderConfig, x: &Tensor) -> Result<Qkv> {
        let (qkv, qk_norm, gated) = match &self.qkv {
            QkvSource::Latent(latent) => {
                let (q, k, v) = latent.qkv(x)?;
                return Ok(Qkv { q, k, v, gate: None });
            }
            QkvSource::Heads { qkv, qk_norm, gated } => (qkv.forward(x)?, qk_norm, *gated),
            QkvSource::Linear(_) => return Err(crate::error::Error::Internal("a linear-attention layer has no queries".into())),
        };
        let (total, h, kvh, dh, eps) = (x.dim(0)?, cfg.n_heads, cfg.n_kv_heads, cfg.d_head, cfg.rms_eps as f32);
        let (nq, nkv) = (h * dh * if gated { 2 } else { 1 }, kvh * dh);
        let across_heads = cfg.arch.qk_norm == QkNorm::AcrossHeads;
        let (mut q, mut k) = (qkv.narrow(1, 0, nq)?, qkv.narrow(1, nq, nkv)?);
        let mut gate = None;
        if gated {
            // Per head [query | gate] (transformers' chunk of each head's 2·d_head).
            let both = q.reshape((total, h, 2 * dh))?;
            gate = Some(both.narrow(2, dh, dh)?.contiguous()?.reshape((total, h * dh))?);
            q = both.narrow(2, 0, dh)?.contiguous()?.reshape((total, h * dh))?;
        }
        if across_heads {
            (q, k) = norm_qk(qk_norm, &q, &k, eps)?;
        }
        let (mut q, mut k) = (q.reshape((total, h, dh))?, k.reshape((total, kvh, dh))?);
        if !across_heads {
            (q, k) = norm_qk(qk_norm, &q, &k, eps)?;
        }
        let v = qkv.narrow(1, nq + nkv, nkv)?.reshape((total, kvh, dh))?;
        Ok(Qkv { q, k, v, gate })
    }

    /// What `o_proj` reads from the heads' outputs `z` (latent attention brings each head's up to
    /// its value width first; gated attention multiplies by `gate`, σ already applied).
    pub(crate) fn o_proj_input(&self, z: &Tensor, gate: Option<&Tensor>) -> Result<Tensor> {
        match (&self.qkv, gate) {
            (QkvSource::Latent(latent), _) => latent.up(z),
            (_, Some(g)) => Ok((z * g)?),
            _ => Ok(z.clone()),
        }
    }

    /// Reads layer `l`'s weights under their GGUF-style names, checking every shape.
    pub(crate) fn load(cfg: &DecoderConfig, l: usize, path: &std::path::Path, get: &mut ParamSource<'_>) -> Result<Block> {
        let (d, h, mut ff) = (cfg.d_model, cfg.n_heads, cfg.d_ff);
        let mut mlp_kind = cfg.arch.mlp;
        if let MlpKind::Moe(shape) = mlp_kind {
            if l < shape.dense_layers {
                // DeepSeek's first layers: a dense SwiGLU of their own width.
                (mlp_kind, ff) = (MlpKind::SwiGlu, shape.dense_ff);
            }
        }
        let n = |s: &str| format!("blk.{l}.{s}");
        let (attn_in, attn_out, mlp_in, mlp_out) = match cfg.arch.norm_placement {
            NormPlacement::Pre => {
                (Some(Norm::load(cfg, path, get, &n("attn_norm"), d)?), None, Some(Norm::load(cfg, path, get, &n("ffn_norm"), d)?), None)
            }
            // The MLP reads the attention's normalised input (see `Decoder::run_blocks`).
            NormPlacement::Shared => (Some(Norm::load(cfg, path, get, &n("attn_norm"), d)?), None, None, None),
            NormPlacement::Post => (
                None,
                Some(Norm::load(cfg, path, get, &n("post_attention_norm"), d)?),
                None,
                Some(Norm::load(cfg, path, get, &n("post_ffw_norm"), d)?),
            ),
            NormPlacement::Sandwich => (
                Some(Norm::load(cfg, path, get, &n("attn_norm"), d)?),
                Some(Norm::load(cfg, path, get, &n("post_attention_norm"), d)?),
                Some(Norm::load(cfg, path, get, &n("ffn_norm"), d)?),
                Some(Norm::load(cfg, path, get, &n("post_ffw_norm"), d)?),
            ),
        };
        let mut bias = |name: &str, width: usize| take_opt_vector(get, path, &n(name), width);
        let (o_bias, up_bias, down_bias) = (bias("attn_output.bias", d)?, bias("ffn_up.bias", ff)?, bias("ffn_down.bias", d)?);
        let (qkv, o_name, o_width) = match (cfg.arch.mla, cfg.arch.delta_net) {
            (_, Some(shape)) if cfg.is_linear(l) => {
                (QkvSource::Linear(Box::new(GatedDeltaNet::load(cfg, shape, l, path, get)?)), "ssm_out.weight", shape.value_width())
            }
            (Some(mla), _) => (QkvSource::Latent(Box::new(LatentAttention::load(cfg, mla, l, path, get)?)), "attn_output.weight", h * mla.v_head),
            _ => (Self::load_heads(cfg, l, path, get)?, "attn_output.weight", h * cfg.d_head),
        };
        let o_proj = Linear::new(take_req(get, path, &n(o_name), &[d, o_width])?, o_bias)?;
        let sinks = match cfg.arch.learned_sinks {
            true => Some(take_req(get, path, &n("attn_sinks.weight"), &[h])?.dequantize()?.to_vec1::<f32>()?),
            false => None,
        };
        if let MlpKind::Moe(shape) = mlp_kind {
            let mlp = Mlp::Moe(Box::new(MoeMlp::load(cfg, shape, l, path, get)?));
            return Ok(Block { attn_in, attn_out, mlp_in, mlp_out, qkv, o_proj, sinks, mlp });
        }
        let down = Linear::new(take_req(get, path, &n("ffn_down.weight"), &[d, ff])?, down_bias)?;
        let mlp = match mlp_kind {
            MlpKind::SwiGlu | MlpKind::GeGluTanh => {
                let gate_up = match take_opt(get, path, &n("ffn_gate.weight"), &[ff, d])? {
                    Some(gate) => Projection::new(vec![(gate, None), (take_req(get, path, &n("ffn_up.weight"), &[ff, d])?, up_bias)])?,
                    // One matrix in the file, gate rows first (Phi-3's `gate_up_proj`, llama.cpp's
                    // `ffn_up` of 2·d_ff rows).
                    None => {
                        let fused = take_req(get, path, &n("ffn_up.weight"), &[2 * ff, d])?.stored()?;
                        let half =
                            |from: usize| -> Result<(Param, Option<Tensor>)> { Ok((Param::Dense(fused.narrow(0, from, ff)?.contiguous()?), None)) };
                        Projection::new(vec![half(0)?, half(ff)?])?
                    }
                };
                if mlp_kind == MlpKind::GeGluTanh {
                    Mlp::GeGlu { gate_up, down }
                } else {
                    Mlp::SwiGlu { gate_up, down }
                }
            }
            MlpKind::Moe(_) => return Err(crate::error::Error::Internal("a mixture of experts reached the dense MLP".into())),
            MlpKind::Gelu | MlpKind::GeluTanh => Mlp::Gelu {
                up: Linear::new(take_req(get, path, &n("ffn_up.weight"), &[ff, d])?, up_bias)?,
                down,
                tanh: mlp_kind == MlpKind::GeluTanh,
            },
        };
        Ok(Block { attn_in, attn_out, mlp_in, mlp_out, qkv, o_proj, sinks, mlp })
    }

    /// Reads layer `l`'s q|k|v projection (separate or fused) and q/k norms.
    fn load_heads(cfg: &DecoderConfig, l: usize, path: &std::path::Path, get: &mut ParamSource<'_>) -> Result<QkvSource> {
        let (d, dh, h, kv) = (cfg.d_model, cfg.d_head, cfg.n_heads, cfg.n_kv_heads);
        let n = |s: &str| format!("blk.{l}.{s}");
        let gated = cfg.arch.gated_attention;
        // A gated model's query projection gives a gate beside each head's query.
        let q_width = h * dh * if gated { 2 } else { 1 };
        let mut bias = |name: &str, width: usize| take_opt_vector(get, path, &n(name), width);
        let qkv_biases =
            (bias("attn_q.bias", q_width)?, bias("attn_k.bias", kv * dh)?, bias("attn_v.bias", kv * dh)?, bias("attn_qkv.bias", (h + 2 * kv) * dh)?);
        let fused = if gated { None } else { take_opt(get, path, &n("attn_qkv.weight"), &[(h + 2 * kv) * dh, d])? };
        let qkv = match fused {
            // One fused matrix in the file (GPT-NeoX, Phi, GPT-2), rows q | k | v.
            Some(fused) => {
                let w = fused.stored()?;
                let split = |t: &Tensor, from: usize, len: usize| -> Result<Tensor> { Ok(t.narrow(0, from, len)?.contiguous()?) };
                let b = qkv_biases.3.as_ref();
                let part = |from: usize, len: usize| -> Result<(Param, Option<Tensor>)> {
                    Ok((Param::Dense(split(&w, from, len)?), b.map(|b| split(b, from, len)).transpose()?))
                };
                Projection::new(vec![part(0, h * dh)?, part(h * dh, kv * dh)?, part((h + kv) * dh, kv * dh)?])?
            }
            None => {
                let q = take_req(get, path, &n("attn_q.weight"), &[q_width, d])?;
                let k = take_req(get, path, &n("attn_k.weight"), &[kv * dh, d])?;
                let v = take_req(get, path, &n("attn_v.weight"), &[kv * dh, d])?;
                Projection::new(vec![(q, qkv_biases.0), (k, qkv_biases.1), (v, qkv_biases.2)])?
            }
        };
        let qk_widths = match cfg.arch.qk_norm {
            QkNorm::None => None,
            QkNorm::PerHead => Some((dh, dh)),
            QkNorm::AcrossHeads => Some((h * dh, kv * dh)),
        };
        let qk_norm = match qk_widths {
            Some((qw, kw)) => {
                let q_norm = take_req(get, path, &n("attn_q_norm.weight"), &[qw])?.dequantize()?;
                Some((q_norm, take_req(get, path, &n("attn_k_norm.weight"), &[kw])?.dequantize()?))
            }
            None => None,
        };
        Ok(QkvSource::Heads { qkv, qk_norm, gated })
    }
}
