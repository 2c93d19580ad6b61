//! A mixture-of-experts feed-forward block (gpt-oss): a router picks each token's top-k experts
//! and weighs them by a softmax over their k logits; each expert is a SwiGLU with biases whose
//! gate and up are clamped, (up + 1) · gate · σ(α · gate).

use candle_core::{Device, Tensor};

use super::config::{take_req, DecoderConfig, Moe, Param, ParamSource};
use super::linear::Linear;
use crate::error::Result;
use crate::numerics::tensor::with_f32;

pub(crate) struct MoeMlp {
    shape: Moe,
    d_ff: usize,
    router: Linear,
    /// Per expert: gate | up (2·d_ff outputs, gates first) and down.
    gate_up: Vec<Linear>,
    down: Vec<Linear>,
}

impl MoeMlp {
    /// Reads layer `l`'s router (`ffn_gate_inp`) and experts. The experts keep transformers'
    /// layout, (experts, in, out) with gate and up interleaved along `out` (`ffn_gate_up_exps`,
    /// `ffn_down_exps`); they are split per expert here.
    pub(crate) fn load(cfg: &DecoderConfig, shape: Moe, l: usize, path: &std::path::Path, get: &mut ParamSource<'_>) -> Result<MoeMlp> {
        let (d, ff, e) = (cfg.d_model, cfg.d_ff, shape.experts);
        let n = |s: &str| format!("blk.{l}.{s}");
        let dense = |p: Param| p.dequantize();
        let router_bias = dense(take_req(get, path, &n("ffn_gate_inp.bias"), &[e])?)?;
        let router = Linear::new(take_req(get, path, &n("ffn_gate_inp.weight"), &[e, d])?, Some(router_bias))?;
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
        Ok(MoeMlp { shape, d_ff: ff, router, gate_up, down: downs })
    }

    /// The block's output for x (T, d_model). Experts run on the rows routed to them, in expert
    /// order, so each row's sum has a fixed order.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (t, d) = x.dims2()?;
        let x = x.contiguous()?;
        let logits = self.router.forward(&x)?;
        let k = self.shape.top_k;
        // routed[e] = (row, weight) pairs.
        let mut routed: Vec<Vec<(u32, f32)>> = vec![Vec::new(); self.shape.experts];
        with_f32(&logits.contiguous()?, |z| {
            for (row, r) in z.chunks(self.shape.experts).enumerate() {
                let mut order: Vec<usize> = (0..r.len()).collect();
                // Highest logit first; ties to the lower expert.
                order.sort_by(|&a, &b| r[b].total_cmp(&r[a]).then(a.cmp(&b)));
                let top = &order[..k];
                let max = r[top[0]];
                let exps: Vec<f32> = top.iter().map(|&e| (r[e] - max).exp()).collect();
                let sum: f32 = exps.iter().sum();
                for (&e, w) in top.iter().zip(exps) {
                    routed[e].push((row as u32, w / sum));
                }
            }
        })?;
        let mut out = vec![0f32; t * d];
        let (alpha, limit, ff) = (self.shape.alpha as f32, self.shape.limit as f32, self.d_ff);
        for (e, rows) in routed.iter().enumerate().filter(|(_, r)| !r.is_empty()) {
            let ids: Vec<u32> = rows.iter().map(|&(r, _)| r).collect();
            let xe = x.index_select(&Tensor::new(ids.as_slice(), &Device::Cpu)?, 0)?;
            let gu = self.gate_up[e].forward(&xe)?.contiguous()?;
            let act = with_f32(&gu, |g| {
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
            let y = self.down[e].forward(&Tensor::from_vec(act, (rows.len(), ff), &Device::Cpu)?)?.contiguous()?;
            with_f32(&y, |y| {
                for (&(row, w), yr) in rows.iter().zip(y.chunks(d)) {
                    let dst = &mut out[row as usize * d..][..d];
                    dst.iter_mut().zip(yr).for_each(|(o, &v)| *o += w * v);
                }
            })?;
        }
        Ok(Tensor::from_vec(out, (t, d), &Device::Cpu)?)
    }
}
