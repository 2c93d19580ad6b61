//! What a Llama-family model is made of, as loaders hand it over: the configuration (checked
//! before any tensor is read) and each weight, plain f32 or still quantized.

use std::sync::Arc;

use candle_core::quantized::QTensor;
use candle_core::{Device, Tensor};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::model::rope::RopeLayout;

/// Shape and numerics of a Llama-family model.
#[derive(Debug, Clone, Serialize)]
pub struct LlamaConfig {
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub d_model: usize,
    pub d_head: usize,
    pub d_ff: usize,
    pub vocab_size: usize,
    /// The context length the model was trained for.
    pub context_len: usize,
    pub rope_theta: f64,
    pub rope_layout: RopeLayout,
    pub rms_eps: f64,
    /// RMSNorm of each head's query and key (over d_head, before RoPE; Qwen3): the blocks carry
    /// `attn_q_norm` / `attn_k_norm` weights.
    #[serde(default)]
    pub qk_norm: bool,
}

impl LlamaConfig {
    /// Checks the numbers are usable before any tensor is read.
    pub fn validate(&self, source: &std::path::Path) -> Result<()> {
        let bad = |what: String| Error::file(source, format!("model configuration is impossible: {what}"));
        for (name, v) in [
            ("layers", self.n_layers),
            ("heads", self.n_heads),
            ("kv heads", self.n_kv_heads),
            ("d_model", self.d_model),
            ("d_head", self.d_head),
            ("d_ff", self.d_ff),
            ("vocab", self.vocab_size),
        ] {
            if v == 0 || v > 1 << 24 {
                return Err(bad(format!("{name} = {v}")));
            }
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return Err(bad(format!("{} heads are not a multiple of {} kv heads", self.n_heads, self.n_kv_heads)));
        }
        if !self.d_head.is_multiple_of(2) {
            return Err(bad(format!("head size {} is odd (RoPE needs pairs)", self.d_head)));
        }
        if !(self.rope_theta > 0.0 && self.rms_eps >= 0.0) {
            return Err(bad(format!("rope theta {} / rms eps {}", self.rope_theta, self.rms_eps)));
        }
        Ok(())
    }
}

/// A weight as a loader hands it over: plain f32, or still quantized (for `--quantized`).
pub enum Param {
    Dense(Tensor),
    Quant(Arc<QTensor>),
}

impl Param {
    pub fn shape(&self) -> Vec<usize> {
        match self {
            Param::Dense(t) => t.dims().to_vec(),
            Param::Quant(q) => q.shape().dims().to_vec(),
        }
    }

    pub fn dequantize(&self) -> Result<Tensor> {
        Ok(match self {
            Param::Dense(t) => t.clone(),
            Param::Quant(q) => q.dequantize(&Device::Cpu)?,
        })
    }
}
