//! What a model is made of, as loaders hand it over: the configuration (shapes, numerics and the
//! family's switches, checked before any tensor is read) and each weight (f32, a bf16/f16
//! matrix, or still quantized), fetched by name with its shape checked.

use std::sync::Arc;

use candle_core::quantized::QTensor;
use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};

pub use super::experts::{ExpertAct, Moe};
pub use super::mixers::{DeltaNetShape, Mla};
use crate::error::{Error, Result};
use crate::model::quant_matmul::packed_bytes;
use crate::model::rope::{FreqFactors, RopeLayout, Yarn};

/// Shape and numerics of a decoder-only transformer, and the switches that make it one family.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DecoderConfig {
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
    /// RoPE frequencies divided by a factor each (Llama 3's scaling, linear interpolation, a
    /// GGUF's `rope_freqs.weight`), for the layers rotated with `rope_theta`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_freq_factors: Option<FreqFactors>,
    pub rms_eps: f64,
    /// Where the family departs from Llama (all off: Llama).
    #[serde(default)]
    pub arch: ArchSwitches,
    /// How each layer attends, one entry per layer (absent from run files written before it was
    /// recorded: `model::info` rebuilds it from their flat fields).
    #[serde(default)]
    pub layers: Vec<LayerAttn>,
}

/// How one layer attends: over every earlier key or through a sliding window, rotated with which
/// RoPE base, or not rotated at all.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LayerAttn {
    /// Keys a query sees at most, its own included (sliding-window attention: Mistral's
    /// `sliding_window`, Gemma 3's local layers); `None`: every earlier key.
    pub window: Option<usize>,
    /// This layer's RoPE base (Gemma 3's local layers rotate with their own).
    pub rope_theta: f64,
    /// The layer rotates neither queries nor keys (SmolLM3's NoPE layers): its scores see content
    /// only, so where a cache puts a key changes nothing there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nope: bool,
    /// The layer rotates without the model's RoPE scaling (YaRN, linear, Llama 3's factors), as
    /// the windowed layers of OLMo 3 and Gemma 3 do: their own RoPE parameters are plain.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unscaled: bool,
    /// The layer is linear attention (Gated DeltaNet, [`DeltaNetShape`]): no keys, no values, no
    /// pattern; a recurrent state no cache policy evicts.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub linear: bool,
}

impl LayerAttn {
    /// A layer that sees every earlier key, rotated with base `rope_theta`.
    pub fn global(rope_theta: f64) -> LayerAttn {
        LayerAttn { window: None, rope_theta, nope: false, unscaled: false, linear: false }
    }

    /// A Gated DeltaNet layer (its RoPE base is never used).
    pub fn linear(rope_theta: f64) -> LayerAttn {
        LayerAttn { linear: true, ..LayerAttn::global(rope_theta) }
    }

    /// `n` layers of which every `every`th (`every` − 1, 2·`every` − 1, …) is global with base
    /// `theta` and the others see `window` keys, rotated with base `local_theta` without the
    /// model's RoPE scaling.
    pub fn every_nth_global(n: usize, every: usize, window: usize, theta: f64, local_theta: f64) -> Vec<LayerAttn> {
        (0..n)
            .map(|l| {
                if (l + 1) % every.max(1) == 0 {
                    LayerAttn::global(theta)
                } else {
                    LayerAttn { window: Some(window), rope_theta: local_theta, nope: false, unscaled: true, linear: false }
                }
            })
            .collect()
    }
}

/// The normalisation a family uses everywhere (blocks and the final norm).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormKind {
    #[default]
    Rms,
    /// (x − mean) / √(var + ε) · w + b.
    Layer,
    /// (x − mean) / √(var + ε) · w: LayerNorm without a bias (Cohere's).
    LayerNoBias,
}

/// The feed-forward block.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MlpKind {
    /// down(silu(gate(x)) · up(x)): Llama, Qwen, OLMo.
    #[default]
    SwiGlu,
    /// down(gelu(up(x) + b) + b) with the exact (erf) GELU: GPT-NeoX.
    Gelu,
    /// down(gelu_tanh(gate(x)) · up(x)): Gemma.
    GeGluTanh,
    /// down(gelu_tanh(up(x) + b) + b), GELU's tanh approximation (`gelu_new`): GPT-2, Phi.
    GeluTanh,
    /// A mixture of experts: a router picks the top-k experts per token and weighs them by a
    /// softmax over the experts' logits ([`Moe`]).
    Moe(Moe),
}

impl ArchSwitches {
    /// Switches to latent attention of shape `mla`: RoPE on the cached row's leading `qk_rope`,
    /// scores scaled as the expanded keys' width says, (qk_nope + qk_rope)^−½ (the model then has
    /// one KV head of [`Mla::cached_width`]).
    pub fn set_latent(&mut self, mla: Mla) {
        (self.mla, self.rotary_dims) = (Some(mla), Some(mla.qk_rope));
        self.attn_scale = Some(1.0 / ((mla.qk_nope + mla.qk_rope) as f64).sqrt());
    }
}

/// How a family normalises queries and keys before RoPE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QkNorm {
    #[default]
    None,
    /// Over each head's d_head, one weight shared by the heads (Qwen3).
    PerHead,
    /// Over the whole projection, all heads at once (OLMo 2).
    AcrossHeads,
}

/// Where a block's RMSNorms sit. `hook_attn_out` and `hook_mlp_out`-style contributions are
/// what is added to the residual stream, after a post-norm where there is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormPlacement {
    /// Normalise each sublayer's input (`attn_norm`, `ffn_norm`): Llama, Qwen.
    #[default]
    Pre,
    /// Normalise each sublayer's output before it joins the residual stream
    /// (`post_attention_norm`, `post_ffw_norm`), inputs left as they are: OLMo 2.
    Post,
    /// Both: input and output of each sublayer (Gemma 2/3's "sandwich").
    Sandwich,
    /// One norm of the block's input read by attention and MLP alike (`attn_norm`; Phi, GPT-J:
    /// always with a parallel residual).
    Shared,
}

/// The switches that make the one decoder another family (TransformerLens-style: one
/// configurable model, a weight map per family in `model::family`). `Default` is [`LLAMA`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ArchSwitches {
    /// RMSNorm of queries and keys before RoPE (the blocks carry `attn_q_norm` / `attn_k_norm`).
    pub qk_norm: QkNorm,
    /// Where each block normalises around its attention and MLP.
    pub norm_placement: NormPlacement,
    /// RMSNorm, or LayerNorm with a bias (GPT-NeoX, GPT-2, Phi).
    pub norm: NormKind,
    /// The feed-forward block.
    pub mlp: MlpKind,
    /// Leading dimensions of each head that RoPE rotates (`None`: all of them).
    pub rotary_dims: Option<usize>,
    /// Attention and MLP both read the block's input and add to it together
    /// (x + attn(ln1(x)) + mlp(ln2(x)): GPT-NeoX); `hook_resid_mid` is then x + attn, which the
    /// MLP does not read.
    pub parallel_residual: bool,
    /// Embeddings multiplied by √d_model on the way in (Gemma; the tied output head is not).
    pub embed_scale: bool,
    /// Attention scores scaled by this instead of 1/√d_head (Gemma's query_pre_attn_scalar^−½).
    pub attn_scale: Option<f64>,
    /// Positions enter as a learned table added to the embeddings (`position_embd`: GPT-2), and
    /// nothing is rotated (`rotary_dims` = 0).
    pub learned_positions: bool,
    /// A learned logit per head that joins every softmax row's denominator and attends to
    /// nothing (`attn_sinks`: gpt-oss); the mass it takes is `hook_sink_prob`.
    pub learned_sinks: bool,
    /// YaRN context extension of RoPE (gpt-oss), as transformers computes it.
    pub rope_yarn: Option<Yarn>,
    /// Logits squashed to c · tanh(logits / c) (Gemma 2's `final_logit_softcapping`).
    pub final_logit_softcap: Option<f64>,
    /// Scaled attention scores squashed to c · tanh(s / c) before the softmax (Gemma 2's
    /// `attn_logit_softcapping`).
    pub attn_logit_softcap: Option<f64>,
    /// Embeddings multiplied by this on the way in (Granite's `embedding_multiplier`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embed_multiplier: Option<f64>,
    /// Each attention and MLP output multiplied by this before it joins the residual stream
    /// (Granite's `residual_multiplier`; `hook_attn_out` is the scaled contribution).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub residual_multiplier: Option<f64>,
    /// Logits divided by this (Granite's `logits_scaling`, llama.cpp's `logit_scale` for it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logit_divisor: Option<f64>,
    /// Multi-head latent attention ([`Mla`]): `d_head` is then its cached width and the model
    /// has one KV head.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mla: Option<Mla>,
    /// Each head's output multiplied by σ(gate) before o_proj, the gate computed beside the query
    /// (`q_proj` gives [query | gate] per head: Qwen3-Next's gated attention); `hook_gate` is σ(gate).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub gated_attention: bool,
    /// The shape of the model's Gated DeltaNet layers ([`LayerAttn::linear`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta_net: Option<DeltaNetShape>,
}

/// Sliding windows as a phrase: "512", "512 and 4096", "128, 512 and 4096".
pub fn describe_windows(windows: &[usize]) -> String {
    let text: Vec<String> = windows.iter().map(usize::to_string).collect();
    match text.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => text.join(""),
    }
}

/// The largest count (layers, heads, widths, vocabulary) a configuration may give: larger ones are
/// refused before anything is allocated for them.
pub const MAX_SIZE: usize = 1 << 24;

/// Llama's switches: every other family's starting point.
pub const LLAMA: ArchSwitches = ArchSwitches {
    qk_norm: QkNorm::None,
    norm_placement: NormPlacement::Pre,
    norm: NormKind::Rms,
    mlp: MlpKind::SwiGlu,
    rotary_dims: None,
    parallel_residual: false,
    embed_scale: false,
    attn_scale: None,
    learned_positions: false,
    learned_sinks: false,
    rope_yarn: None,
    final_logit_softcap: None,
    attn_logit_softcap: None,
    embed_multiplier: None,
    residual_multiplier: None,
    logit_divisor: None,
    mla: None,
    gated_attention: false,
    delta_net: None,
};

impl Default for ArchSwitches {
    fn default() -> Self {
        LLAMA
    }
}

impl DecoderConfig {
    /// A tiny configuration for unit tests: 4 heads sharing 1 KV head of 16 dimensions, Llama's
    /// switches, RoPE base `rope_theta`, one layer per entry of `layers`.
    #[cfg(test)]
    pub(crate) fn tiny(rope_theta: f64, layers: Vec<LayerAttn>) -> DecoderConfig {
        DecoderConfig {
            n_layers: layers.len(),
            n_heads: 4,
            n_kv_heads: 1,
            d_model: 64,
            d_head: 16,
            d_ff: 128,
            vocab_size: 10,
            context_len: 4096,
            rope_theta,
            rope_layout: RopeLayout::HalfSplit,
            rope_freq_factors: None,
            rms_eps: 1e-6,
            arch: LLAMA,
            layers,
        }
    }

    /// Elements one token stores per layer in an engine's cache, (keys, values): a latent-attention
    /// model stores one [RoPE key | latent] row and reads its values from it (llama.cpp's V is a
    /// view of K), so it has no values of its own.
    pub fn cached_elements(&self) -> (usize, usize) {
        let keys = self.n_kv_heads * self.d_head;
        (keys, if self.arch.mla.is_some() { 0 } else { keys })
    }

    /// The layers that attend (softmax over keys): all but the Gated DeltaNet ones.
    pub fn attention_layers(&self) -> Vec<usize> {
        (0..self.n_layers).filter(|&l| !self.is_linear(l)).collect()
    }

    /// The linear-attention layers (a hybrid's Gated DeltaNet ones; none in other models).
    pub fn linear_layers(&self) -> Vec<usize> {
        (0..self.n_layers).filter(|&l| self.is_linear(l)).collect()
    }

    /// Whether layer `l` is linear attention (a recurrent state, no KV cache).
    pub fn is_linear(&self, l: usize) -> bool {
        self.layers.get(l).is_some_and(|a| a.linear)
    }

    /// Refuses a hybrid (linear-attention layers) for `what`, a computation that reads every
    /// layer's keys and values.
    pub fn refuse_linear_layers(&self, what: &str) -> Result<()> {
        let linear = self.linear_layers();
        match linear.is_empty() {
            true => Ok(()),
            false => Err(Error::input(format!(
                "{what} reads every layer's keys and values, and layers {linear:?} of this model are linear attention (Gated DeltaNet), which have none; not supported for hybrids yet"
            ))),
        }
    }

    /// Elements of the recurrent state one sequence carries through all linear-attention layers
    /// (the convolution windows included); 0 without such layers.
    pub fn recurrent_elements(&self) -> usize {
        self.arch.delta_net.map_or(0, |s| self.linear_layers().len() * s.carried_elements())
    }

    /// Layer `l`'s own sliding window, if it attends through one.
    pub fn layer_window(&self, l: usize) -> Option<usize> {
        self.layers.get(l).and_then(|a| a.window)
    }

    /// Every layer's own sliding window.
    pub fn layer_windows(&self) -> Vec<Option<usize>> {
        (0..self.n_layers).map(|l| self.layer_window(l)).collect()
    }

    /// The layers that attend through a sliding window.
    pub fn windowed_layers(&self) -> Vec<usize> {
        (0..self.n_layers).filter(|&l| self.layer_window(l).is_some()).collect()
    }

    /// Layers that rotate neither queries nor keys (SmolLM3's NoPE layers).
    pub fn nope_layers(&self) -> Vec<usize> {
        (0..self.n_layers).filter(|&l| self.layers.get(l).is_some_and(|a| a.nope)).collect()
    }

    /// The distinct sliding windows of the windowed layers, smallest first (empty: none).
    pub fn windows(&self) -> Vec<usize> {
        let mut windows: Vec<usize> = self.layers.iter().filter_map(|a| a.window).collect();
        windows.sort_unstable();
        windows.dedup();
        windows
    }

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
            ("context length", self.context_len),
        ] {
            if v == 0 || v > MAX_SIZE {
                return Err(bad(format!("{name} = {v}")));
            }
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return Err(bad(format!("{} heads are not a multiple of {} kv heads", self.n_heads, self.n_kv_heads)));
        }
        if !self.d_head.is_multiple_of(2) {
            return Err(bad(format!("head size {} is odd (RoPE needs pairs)", self.d_head)));
        }
        for (what, cap) in [("final logit", self.arch.final_logit_softcap), ("attention score", self.arch.attn_logit_softcap)] {
            if cap.is_some_and(|c| !(c > 0.0 && c.is_finite())) {
                return Err(bad(format!("{what} soft-cap {cap:?}")));
            }
        }
        let factors = [
            ("embedding multiplier", self.arch.embed_multiplier),
            ("residual multiplier", self.arch.residual_multiplier),
            ("logit divisor", self.arch.logit_divisor),
        ];
        for (what, factor) in factors {
            if factor.is_some_and(|f| !(f.is_finite() && f != 0.0)) {
                return Err(bad(format!("{what} {factor:?}")));
            }
        }
        if self.layers.len() != self.n_layers {
            return Err(bad(format!("{} layers but attention settings for {}", self.n_layers, self.layers.len())));
        }
        if self.layers.iter().any(|a| a.window == Some(0)) {
            return Err(bad("a sliding window of 0 keys".into()));
        }
        if self.layers.iter().any(|a| !(a.rope_theta.is_finite() && a.rope_theta > 0.0)) {
            return Err(bad("a layer's rope theta is not positive".into()));
        }
        if let MlpKind::Moe(m) = self.arch.mlp {
            if m.experts == 0 || m.top_k == 0 || m.top_k > m.experts || m.experts > 1 << 16 || m.shared_ff > MAX_SIZE {
                return Err(bad(format!("{} of {} experts per token", m.top_k, m.experts)));
            }
            let grouped = m.groups > 1 && (!m.experts.is_multiple_of(m.groups) || m.top_groups == 0 || m.top_groups > m.groups);
            if grouped || (m.groups > 1 && m.top_k > m.top_groups * (m.experts / m.groups)) {
                return Err(bad(format!("{} of {} experts per token from {} of {} groups", m.top_k, m.experts, m.top_groups, m.groups)));
            }
            if m.dense_layers > 0 && (m.dense_ff == 0 || m.dense_ff > MAX_SIZE) || m.routed_scale.is_some_and(|f| !(f.is_finite() && f > 0.0)) {
                return Err(bad(format!("dense layers of width {} / routed scaling {:?}", m.dense_ff, m.routed_scale)));
            }
        }
        if let Some(m) = self.arch.mla {
            let sizes = [m.kv_lora_rank, m.qk_nope, m.qk_rope, m.v_head];
            let shaped = self.n_kv_heads == 1 && self.d_head == m.cached_width() && self.arch.rotary_dims == Some(m.qk_rope);
            if !shaped || sizes.iter().any(|&s| s == 0 || s > MAX_SIZE) || m.q_lora_rank > MAX_SIZE {
                return Err(bad(format!(
                    "latent attention of rank {} with keys {} + {} and values {}",
                    m.kv_lora_rank, m.qk_nope, m.qk_rope, m.v_head
                )));
            }
        }
        let linear = self.layers.iter().any(|a| a.linear);
        match self.arch.delta_net {
            Some(s)
                if [s.k_heads, s.v_heads, s.k_dim, s.v_dim, s.conv_kernel].iter().any(|&x| x == 0 || x > MAX_SIZE)
                    || !s.v_heads.is_multiple_of(s.k_heads) =>
            {
                return Err(bad(format!(
                    "linear attention of {} key and {} value heads ({} / {} wide), convolution {}",
                    s.k_heads, s.v_heads, s.k_dim, s.v_dim, s.conv_kernel
                )));
            }
            None if linear => return Err(bad("linear-attention layers without their shape".into())),
            _ => {}
        }
        if self.arch.norm_placement == NormPlacement::Shared && !self.arch.parallel_residual {
            return Err(bad("one shared block norm without a parallel residual".into()));
        }
        let unrotated_ok = self.arch.learned_positions;
        if let Some(r) = self.arch.rotary_dims.filter(|&r| (r == 0 && !unrotated_ok) || r > self.d_head || !r.is_multiple_of(2)) {
            return Err(bad(format!("{r} rotary dimensions for a head of {} (RoPE needs an even count up to the head size)", self.d_head)));
        }
        if let Some(f) = &self.rope_freq_factors {
            let pairs = self.arch.rotary_dims.unwrap_or(self.d_head) / 2;
            if f.factors.len() != pairs || f.factors.iter().any(|&x| !(x.is_finite() && x > 0.0)) {
                return Err(bad(format!(
                    "{} RoPE frequency factors ({}) for {pairs} rotated pairs, or one not finite and positive",
                    f.factors.len(),
                    f.source
                )));
            }
            if self.arch.rope_yarn.is_some() {
                return Err(bad("both YaRN and RoPE frequency factors".into()));
            }
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0 && self.rms_eps.is_finite() && self.rms_eps >= 0.0) {
            return Err(bad(format!("rope theta {} / rms eps {}", self.rope_theta, self.rms_eps)));
        }
        Ok(())
    }
}

/// A weight as a loader hands it over: dense (f32, or a matrix kept in bf16/f16), or still
/// quantized (for `--quantized`).
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

    /// The weight as f32 (a widened copy of a half matrix, a dequantized copy of a quantized one).
    pub fn dequantize(&self) -> Result<Tensor> {
        Ok(match self {
            Param::Dense(t) => t.to_dtype(DType::F32)?,
            Param::Quant(q) => q.dequantize(&Device::Cpu)?,
        })
    }

    /// A dense weight in the type it is stored in; a quantized one dequantized to f32.
    pub(crate) fn stored(&self) -> Result<Tensor> {
        Ok(match self {
            Param::Dense(t) => t.clone(),
            Param::Quant(q) => q.dequantize(&Device::Cpu)?,
        })
    }

    /// The weight as `dtype` says to keep it: matrices in the chosen type, everything else
    /// (norms, biases, stacked experts) in f32; quantized weights untouched.
    pub(crate) fn store_as(self, dtype: WeightDtype) -> Result<Param> {
        Ok(match self {
            Param::Dense(t) => {
                let target = if t.rank() == 2 { dtype.target(t.dtype()) } else { DType::F32 };
                Param::Dense(if t.dtype() == target { t } else { t.to_dtype(target)? })
            }
            quant => quant,
        })
    }

    /// Bytes the weight occupies in memory.
    pub(crate) fn bytes(&self) -> u64 {
        match self {
            Param::Dense(t) => (t.elem_count() * t.dtype().size_in_bytes()) as u64,
            // Packed for the integer products where the type allows (see `quant_matmul`).
            Param::Quant(q) => match q.shape().dims2() {
                Ok((n, k)) => packed_bytes(q.dtype(), n, k).unwrap_or(q.storage_size_in_bytes() as u64),
                Err(_) => q.storage_size_in_bytes() as u64,
            },
        }
    }
}

/// How the loader keeps dense weight matrices in memory; arithmetic is f32 whichever is chosen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WeightDtype {
    /// As the file stores them: bf16/f16 matrices stay half (half the memory, same values),
    /// everything else (f32, dequantized GGUF blocks) f32.
    #[default]
    Auto,
    F32,
    Bf16,
    F16,
}

impl WeightDtype {
    pub const NAMES: &'static str = "auto, f32, bf16, f16";

    pub fn parse(s: &str) -> Option<WeightDtype> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Some(WeightDtype::Auto),
            "f32" | "float32" => Some(WeightDtype::F32),
            "bf16" | "bfloat16" => Some(WeightDtype::Bf16),
            "f16" | "float16" | "half" => Some(WeightDtype::F16),
            _ => None,
        }
    }

    /// The type a matrix stored as `stored` is kept in.
    fn target(self, stored: DType) -> DType {
        match self {
            WeightDtype::Auto if matches!(stored, DType::BF16 | DType::F16) => stored,
            WeightDtype::Auto | WeightDtype::F32 => DType::F32,
            WeightDtype::Bf16 => DType::BF16,
            WeightDtype::F16 => DType::F16,
        }
    }
}

/// Fetches a weight by its GGUF-style name (`token_embd.weight`, `blk.3.attn_q.weight`, …);
/// `None` when the file has no such tensor.
pub type ParamSource<'a> = dyn FnMut(&str) -> Result<Option<Param>> + 'a;

/// Fetches a required weight and checks its shape.
pub(crate) fn take_req(get: &mut ParamSource<'_>, path: &std::path::Path, name: &str, shape: &[usize]) -> Result<Param> {
    take_opt(get, path, name, shape)?
        .ok_or_else(|| Error::file(path, format!("tensor {name} is missing; the file is incomplete or not a model of its family")))
}

/// Fetches an optional weight and checks its shape.
pub(crate) fn take_opt(get: &mut ParamSource<'_>, path: &std::path::Path, name: &str, shape: &[usize]) -> Result<Option<Param>> {
    match get(name)? {
        Some(p) => {
            check_shape(path, name, &p.shape(), shape)?;
            Ok(Some(p))
        }
        None => Ok(None),
    }
}

/// Fetches an optional vector of `width` (a bias), as f32.
pub(crate) fn take_opt_vector(get: &mut ParamSource<'_>, path: &std::path::Path, name: &str, width: usize) -> Result<Option<Tensor>> {
    take_opt(get, path, name, &[width])?.map(|p| p.dequantize()).transpose()
}

fn check_shape(path: &std::path::Path, name: &str, got: &[usize], want: &[usize]) -> Result<()> {
    if got != want {
        return Err(Error::file(
            path,
            format!("tensor {name} has shape {got:?} but the model configuration implies {want:?}; the file's metadata and weights disagree"),
        ));
    }
    Ok(())
}
