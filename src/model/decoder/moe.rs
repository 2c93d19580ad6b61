//! A mixture-of-experts feed-forward block: a router picks each token's top-k experts and weighs
//! them by a softmax over the experts' logits ([`Moe`]); each expert is a SwiGLU (Mixtral,
//! Qwen-MoE, OLMoE, DeepSeek) or gpt-oss's clamped SwiGLU with biases; Qwen2-MoE adds a shared
//! expert every token goes through, gated by σ(x · g), DeepSeek one added ungated (and routes
//! within the best groups of experts, its weights scaled).

use candle_core::{Device, Tensor};

use super::config::{take_opt, take_opt_vector, take_req, DecoderConfig, ExpertAct, Moe, Param, ParamSource};
use super::linear::{Linear, Projection};
use crate::error::{Error, Result};
use crate::numerics::kernels::swiglu;
use crate::numerics::tensor::with_f32;

pub(crate) struct MoeMlp {
    shape: Moe,
    d_ff: usize,
    router: Linear,
    /// Per expert: gate | up (2·d_ff outputs, gates first) and down.
    gate_up: Vec<Linear>,
    down: Vec<Linear>,
    shared: Option<SharedExpert>,
}

/// A shared expert: a SwiGLU whose output is weighed by σ(x · gate) (Qwen2-MoE) or added as it
/// is (DeepSeek, `gate` = `None`).
struct SharedExpert {
    gate_up: Projection,
    down: Linear,
    gate: Option<Linear>,
}

impl MoeMlp {
    /// Reads layer `l`'s router (`ffn_gate_inp`), experts and shared expert.
    pub(crate) fn load(cfg: &DecoderConfig, shape: Moe, l: usize, path: &std::path::Path, get: &mut ParamSource<'_>) -> Result<MoeMlp> {
        let (d, ff, e) = (cfg.d_model, cfg.d_ff, shape.experts);
        let n = |s: &str| format!("blk.{l}.{s}");
        let router_bias = take_opt_vector(get, path, &n("ffn_gate_inp.bias"), e)?;
        let router = Linear::new(take_req(get, path, &n("ffn_gate_inp.weight"), &[e, d])?, router_bias)?;
        let (gate_up, down) = match shape.expert {
            ExpertAct::ClampedSwiGlu { .. } => interleaved_experts(d, ff, e, &n, path, get)?,
            ExpertAct::SwiGlu => {
                let (gates, ups) =
                    (expert_matrices(get, path, l, "ffn_gate_exps", e, ff, d)?, expert_matrices(get, path, l, "ffn_up_exps", e, ff, d)?);
                let downs = expert_matrices(get, path, l, "ffn_down_exps", e, d, ff)?;
                let gate_up =
                    gates.iter().zip(&ups).map(|(g, u)| Linear::new(Param::Dense(Tensor::cat(&[g, u], 0)?), None)).collect::<Result<_>>()?;
                (gate_up, downs.into_iter().map(|w| Linear::new(Param::Dense(w), None)).collect::<Result<_>>()?)
            }
        };
        let shared = match shape.shared_ff {
            0 => None,
            sff => {
                let gate_proj = take_req(get, path, &n("ffn_gate_shexp.weight"), &[sff, d])?;
                let up = take_req(get, path, &n("ffn_up_shexp.weight"), &[sff, d])?;
                let down = Linear::new(take_req(get, path, &n("ffn_down_shexp.weight"), &[d, sff])?, None)?;
                let gate = match shape.ungated_shared {
                    true => None,
                    false => Some(Linear::new(Param::Dense(shared_gate(get, path, &n("ffn_gate_inp_shexp.weight"), d)?), None)?),
                };
                Some(SharedExpert { gate_up: Projection::new(vec![(gate_proj, None), (up, None)])?, down, gate })
            }
        };
        Ok(MoeMlp { shape, d_ff: ff, router, gate_up, down, shared })
    }

    /// The block's output for x (T, d_model). Experts run on the rows routed to them, in expert
    /// order, so each row's sum has a fixed order; the shared expert is added last.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (t, d) = x.dims2()?;
        let x = x.contiguous()?;
        let logits = self.router.forward(&x)?.contiguous()?;
        let routed = with_f32(&logits, |z| route(z, &self.shape))?;
        let mut out = vec![0f32; t * d];
        for (e, rows) in routed.iter().enumerate().filter(|(_, r)| !r.is_empty()) {
            let ids: Vec<u32> = rows.iter().map(|&(r, _)| r).collect();
            let xe = x.index_select(&Tensor::new(ids.as_slice(), &Device::Cpu)?, 0)?;
            let act = self.expert_activation(&self.gate_up[e].forward(&xe)?.contiguous()?)?;
            let y = self.down[e].forward(&act)?.contiguous()?;
            with_f32(&y, |y| {
                for (&(row, w), yr) in rows.iter().zip(y.chunks(d)) {
                    let dst = &mut out[row as usize * d..][..d];
                    dst.iter_mut().zip(yr).for_each(|(o, &v)| *o += w * v);
                }
            })?;
        }
        let out = Tensor::from_vec(out, (t, d), &Device::Cpu)?;
        Ok(match &self.shared {
            None => out,
            Some(s) => {
                let y = s.down.forward(&swiglu(&s.gate_up.forward(&x)?)?)?;
                match &s.gate {
                    Some(gate) => (out + y.broadcast_mul(&candle_nn::ops::sigmoid(&gate.forward(&x)?)?)?)?,
                    None => (out + y)?,
                }
            }
        })
    }

    /// What the down projection reads, from one expert's (rows, 2·d_ff) gate|up output.
    fn expert_activation(&self, gate_up: &Tensor) -> Result<Tensor> {
        let (alpha, limit) = match self.shape.expert {
            ExpertAct::SwiGlu => return swiglu(gate_up),
            ExpertAct::ClampedSwiGlu { alpha, limit } => (alpha as f32, limit as f32),
        };
        let (rows, ff) = (gate_up.dims2()?.0, self.d_ff);
        let act = with_f32(gate_up, |g| {
            g.chunks(2 * ff)
                .flat_map(|row| {
                    let (gate, up) = row.split_at(ff);
                    gate.iter().zip(up).map(move |(&g, &u)| {
                        let (g, u) = (g.min(limit), u.clamp(-limit, limit));
                        (u + 1.0) * (g / (1.0 + (-alpha * g).exp()))
                    })
                })
                .collect::<Vec<f32>>()
        })?;
        Ok(Tensor::from_vec(act, (rows, ff), &Device::Cpu)?)
    }
}

/// Each expert's (row, weight) pairs from the router's logits, (T · experts) row-major: the k
/// highest logits (ties to the lower expert) among the experts a row may pick
/// ([`allowed_experts`]), weighed by a softmax over those k (`norm_top_k`) or over all experts,
/// times `routed_scale`.
fn route(z: &[f32], shape: &Moe) -> Vec<Vec<(u32, f32)>> {
    let mut routed: Vec<Vec<(u32, f32)>> = vec![Vec::new(); shape.experts];
    let scale = shape.routed_scale.unwrap_or(1.0) as f32;
    for (row, r) in z.chunks(shape.experts).enumerate() {
        let max = r.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let allowed = allowed_experts(r, max, shape);
        let mut order: Vec<usize> = (0..r.len()).filter(|&e| allowed[e]).collect();
        order.sort_by(|&a, &b| r[b].total_cmp(&r[a]).then(a.cmp(&b)));
        let top = &order[..shape.top_k.min(order.len())];
        let sum: f32 = match shape.norm_top_k {
            true => top.iter().map(|&e| (r[e] - max).exp()).sum(),
            false => r.iter().map(|&v| (v - max).exp()).sum(),
        };
        for &e in top {
            routed[e].push((row as u32, (r[e] - max).exp() / sum * scale));
        }
    }
    routed
}

/// Which experts a row of logits `r` (largest `max`) may pick: all, or those of the `top_groups`
/// groups whose best logit is highest (the softmax is monotone, so logits rank as its scores do)
/// or, `groups_by_top_two`, whose two best softmax scores sum highest; ties to the lower group.
fn allowed_experts(r: &[f32], max: f32, shape: &Moe) -> Vec<bool> {
    if shape.groups <= 1 {
        return vec![true; r.len()];
    }
    let size = r.len() / shape.groups;
    let best: Vec<f32> = match shape.groups_by_top_two {
        false => r.chunks(size).map(|g| g.iter().copied().fold(f32::NEG_INFINITY, f32::max)).collect(),
        true => {
            let sum: f32 = r.iter().map(|&v| (v - max).exp()).sum();
            let top_two = |g: &[f32]| -> f32 {
                let mut p: Vec<f32> = g.iter().map(|&v| (v - max).exp() / sum).collect();
                p.sort_by(|a, b| b.total_cmp(a));
                p.iter().take(2).sum()
            };
            r.chunks(size).map(top_two).collect()
        }
    };
    let mut order: Vec<usize> = (0..best.len()).collect();
    order.sort_by(|&a, &b| best[b].total_cmp(&best[a]).then(a.cmp(&b)));
    let mut allowed = vec![false; r.len()];
    for &g in &order[..shape.top_groups.min(order.len())] {
        allowed[g * size..(g + 1) * size].iter_mut().for_each(|a| *a = true);
    }
    allowed
}

/// The `e` experts' (rows, cols) matrices `name`: one stacked (experts, rows, cols) tensor (GGUF's
/// `ffn_*_exps`) or one per expert (`{name}.{x}.weight`, the HF checkpoints' `experts.{x}.*`).
fn expert_matrices(
    get: &mut ParamSource<'_>,
    path: &std::path::Path,
    l: usize,
    name: &str,
    e: usize,
    rows: usize,
    cols: usize,
) -> Result<Vec<Tensor>> {
    if let Some(stacked) = take_opt(get, path, &format!("blk.{l}.{name}.weight"), &[e, rows, cols])? {
        let t = stacked.dequantize()?;
        return (0..e).map(|x| Ok(t.get(x)?)).collect();
    }
    (0..e).map(|x| take_req(get, path, &format!("blk.{l}.{name}.{x}.weight"), &[rows, cols])?.stored()).collect()
}

/// The shared expert's gate as a (1, d) matrix: transformers and llama.cpp's converter store it
/// so; llama.cpp reads it as a d-vector, which a file may hold too.
fn shared_gate(get: &mut ParamSource<'_>, path: &std::path::Path, name: &str, d: usize) -> Result<Tensor> {
    match get(name)? {
        Some(p) if p.shape() == [d] || p.shape() == [1, d] => Ok(p.dequantize()?.reshape((1, d))?),
        Some(p) => Err(Error::file(
            path,
            format!("tensor {name} has shape {:?} but the model configuration implies [1, {d}]; the file's metadata and weights disagree", p.shape()),
        )),
        None => take_req(get, path, name, &[1, d])?.dequantize(),
    }
}

/// gpt-oss's experts in transformers' layout, (experts, in, out) with gate and up interleaved
/// along `out` (`ffn_gate_up_exps`, `ffn_down_exps`) and biases, split per expert.
fn interleaved_experts(
    d: usize,
    ff: usize,
    e: usize,
    n: &dyn Fn(&str) -> String,
    path: &std::path::Path,
    get: &mut ParamSource<'_>,
) -> Result<(Vec<Linear>, Vec<Linear>)> {
    let dense = |p: Param| p.dequantize();
    let gu = dense(take_req(get, path, &n("ffn_gate_up_exps.weight"), &[e, d, 2 * ff])?)?;
    let gu_bias = dense(take_req(get, path, &n("ffn_gate_up_exps.bias"), &[e, 2 * ff])?)?;
    let down = dense(take_req(get, path, &n("ffn_down_exps.weight"), &[e, ff, d])?)?;
    let down_bias = dense(take_req(get, path, &n("ffn_down_exps.bias"), &[e, d])?)?;
    let mut gate_up = Vec::with_capacity(e);
    let mut downs = Vec::with_capacity(e);
    for x in 0..e {
        // (in, out) with out = (ff, gate|up) → (out, in) with all gates, then all ups.
        let w = gu.get(x)?.t()?.reshape((ff, 2, d))?.transpose(0, 1)?.contiguous()?.reshape((2 * ff, d))?;
        let b = gu_bias.get(x)?.reshape((ff, 2))?.t()?.contiguous()?.reshape(2 * ff)?;
        gate_up.push(Linear::new(Param::Dense(w), Some(b))?);
        downs.push(Linear::new(Param::Dense(down.get(x)?.t()?.contiguous()?), Some(down_bias.get(x)?))?);
    }
    Ok((gate_up, downs))
}
