//! What a family file declares: the [`FamilySpec`] every family fills in, and the pieces it is made
//! of (tensor-name tables, config rewrites, tensor fixes, GGUF window layouts).

use std::path::Path;

use candle_core::Tensor;
use serde_json::{Map, Value as Json};

use crate::error::Result;
use crate::model::decoder::config::{ArchSwitches, DeltaNetShape, LLAMA, MAX_SIZE};
use crate::model::rope::RopeLayout;

/// Everything that sets one family apart from Llama, in one value.
pub struct FamilySpec {
    /// The family's name in messages (its HF `model_type`).
    pub name: &'static str,
    /// HF `model_type`s that mean this family.
    pub hf_types: &'static [&'static str],
    /// GGUF `general.architecture`s that mean it (empty: no GGUF layout is defined).
    pub gguf_archs: &'static [&'static str],
    /// How GGUF files pair each head's dimensions for RoPE (llama.cpp permutes Llama's q/k rows
    /// to adjacent pairs; the NEOX-type families keep HF's half-split).
    pub gguf_rope: RopeLayout,
    /// How the HF checkpoint pairs them: half-split (`rotate_half`) but for Cohere's interleaved
    /// pairs (`repeat_interleave`).
    pub hf_rope: RopeLayout,
    /// The decoder's switches (shape-dependent ones, such as rotary dims, come from the file).
    pub switches: ArchSwitches,
    /// Canonical (GGUF-style) tensor names → the family's HF names.
    pub hf_names: HfNames,
    /// Rewrites the family's own config.json keys into the ones the reader knows (and refuses what
    /// sinkscope does not compute for it), before anything is read.
    pub hf_config: fn(&mut Map<String, Json>, &Path) -> Result<()>,
    /// Brings an HF tensor into the decoder's layout (by canonical name); most families keep it.
    pub hf_tensor: fn(&str, Tensor, &TensorContext) -> Result<Tensor>,
    /// Which layers of a GGUF file with `{arch}.attention.sliding_window` attend through it:
    /// what llama.cpp fixes for the architecture instead of storing it. `None`: such a file is
    /// refused.
    pub gguf_windows: Option<GgufWindows>,
    /// Layer counts at which llama.cpp scales a GGUF model's queries by (d_model / heads)^−½
    /// instead of d_head^−½ (its rule for Gemma's 27B sizes, which HF states as
    /// `query_pre_attn_scalar`).
    pub gguf_attn_scale_layers: &'static [usize],
    /// The family a GGUF file of this architecture is when it has experts
    /// (`{arch}.expert_count` > 0): llama.cpp writes Mixtral as `llama`.
    pub gguf_experts: Option<&'static FamilySpec>,
    /// Every Nth layer (N−1, 2N−1, …) of a GGUF file of this architecture rotates neither
    /// queries nor keys: what llama.cpp fixes for SmolLM3 instead of storing it. 0: every layer
    /// rotates.
    pub gguf_nope_every: usize,
    /// The scalings the family reads and computes ([`Multipliers`]); in any other family their
    /// fields and keys are refused. `None`: none.
    pub multipliers: Option<Multipliers>,
    /// Block tensors a GGUF file of this family stores under another name than the canonical
    /// one, (canonical, the file's): llama.cpp's converter writes Qwen3-Next's MLP norm as
    /// `post_attention_norm`.
    pub gguf_renames: &'static [(&'static str, &'static str)],
}

impl FamilySpec {
    /// The name a GGUF file of this family stores the canonical tensor `name` under.
    pub fn gguf_name(&self, name: &str) -> String {
        let renamed = name.strip_prefix("blk.").and_then(|rest| {
            let (layer, tail) = rest.split_once('.')?;
            let (module, kind) = tail.split_once('.')?;
            let (_, theirs) = self.gguf_renames.iter().find(|(ours, _)| *ours == module)?;
            Some(format!("blk.{layer}.{theirs}.{kind}"))
        });
        renamed.unwrap_or_else(|| name.to_owned())
    }
}

/// Scalings a family's config states that others' do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Multipliers {
    /// Granite's: embeddings, each sublayer's output on its way to the residual, attention
    /// scores, and logits divided.
    Granite,
    /// Cohere's: logits multiplied by `logit_scale` (GGUF `{arch}.logit_scale`, which llama.cpp
    /// multiplies by for Command R and divides by for Granite).
    LogitScale,
}

impl Multipliers {
    /// The config.json fields these scalings are read from.
    pub fn hf_fields(self) -> &'static [&'static str] {
        match self {
            Multipliers::Granite => &["embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling"],
            Multipliers::LogitScale => &["logit_scale"],
        }
    }

    /// The GGUF `{arch}.*` keys they are read from.
    pub fn gguf_keys(self) -> &'static [&'static str] {
        match self {
            // llama.cpp's names.
            Multipliers::Granite => &["embedding_scale", "residual_scale", "attention.scale", "logit_scale"],
            Multipliers::LogitScale => &["logit_scale"],
        }
    }
}

/// What a tensor fix may need to know of the model.
pub struct TensorContext {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    /// The shape of the model's Gated DeltaNet layers, if it has them.
    pub delta_net: Option<DeltaNetShape>,
}

/// Llama's spec, the base every family starts from (`FamilySpec { name: …, ..BASE }`): a family
/// file spells out only what sets it apart. The name and the lists of HF types and GGUF
/// architectures are empty here, so a family that forgets them matches nothing.
pub const BASE: FamilySpec = FamilySpec {
    name: "",
    hf_types: &[],
    gguf_archs: &[],
    // llama.cpp's converter permutes Llama's q/k rows to adjacent pairs (`LLAMA_ROPE_TYPE_NORM`).
    gguf_rope: RopeLayout::Interleaved,
    hf_rope: RopeLayout::HalfSplit,
    switches: LLAMA,
    hf_names: LLAMA_NAMES,
    hf_config: no_rewrite,
    hf_tensor: keep,
    gguf_windows: None,
    gguf_attn_scale_layers: &[],
    gguf_experts: None,
    gguf_nope_every: 0,
    multipliers: None,
    gguf_renames: &[],
};

/// Keeps an HF tensor as it is.
pub fn keep(_: &str, t: Tensor, _: &TensorContext) -> Result<Tensor> {
    Ok(t)
}

/// Leaves config.json as it is.
pub fn no_rewrite(_: &mut Map<String, Json>, _: &Path) -> Result<()> {
    Ok(())
}

/// A GGUF architecture's window layout where the file does not state it (what llama.cpp fixes
/// for the architecture).
#[derive(Debug, Clone, Copy)]
pub struct GgufWindows {
    /// Every Nth layer (N−1, 2N−1, …) is global, the rest windowed, unless the file has
    /// `attention.sliding_window_pattern`; 0: every layer is windowed.
    pub global_every: usize,
    /// RoPE base of the windowed layers unless the file has `rope.freq_base_swa`; `None`: the
    /// model's own.
    pub local_rope_theta: Option<f64>,
    /// The window when the file has no `attention.sliding_window`; `None`: then no layer is
    /// windowed.
    pub default_window: Option<usize>,
    /// The windowed layers rotate with the file's RoPE scaling (`rope.scaling.*`, `rope_freqs`),
    /// as llama.cpp sets `rope_freq_scale_train_swa` for the architecture; `false`: plainly, its
    /// default.
    pub local_scaled: bool,
}

/// HF names of the form `{fixed}` for the embeddings, final norm and head, and
/// `{layer_prefix}{layer}.{module}.{weight|bias}` (or an exact tail) for each block's tensors.
/// Tables are searched in order; the first match wins, so a family can put its own entries before
/// a shared table.
pub struct HfNames {
    pub fixed: &'static [(&'static str, &'static str)],
    pub layer_prefix: &'static str,
    /// Canonical block-tensor names (after `blk.N.`) mapped whole: `attn_sinks.weight` → `self_attn.sinks`.
    pub tails: &'static [&'static [(&'static str, &'static str)]],
    /// Canonical module names mapped with their `.weight` / `.bias` kept.
    pub modules: &'static [&'static [(&'static str, &'static str)]],
    /// Per-expert modules: the canonical `ffn_gate_exps.{x}` (expert x of a mixture the HF
    /// checkpoint stores one matrix per expert) → the family's HF module with `{x}` in it.
    pub experts: &'static [(&'static str, &'static str)],
}

impl HfNames {
    /// The HF name of a canonical tensor name, if the family has one.
    pub fn name(&self, canonical: &str) -> Option<String> {
        if let Some((_, hf)) = self.fixed.iter().find(|(c, _)| *c == canonical) {
            return Some((*hf).to_owned());
        }
        let (layer, tail) = canonical.strip_prefix("blk.")?.split_once('.')?;
        if let Some((_, hf)) = self.tails.iter().flat_map(|t| t.iter()).find(|(c, _)| *c == tail) {
            return Some(format!("{}{layer}.{hf}", self.layer_prefix));
        }
        let (module, kind) = tail.rsplit_once('.')?;
        if let Some((module, expert)) = module.split_once('.').filter(|(_, x)| x.parse::<usize>().is_ok()) {
            let (_, mapped) = self.experts.iter().find(|(c, _)| *c == module)?;
            return Some(format!("{}{layer}.{}.{kind}", self.layer_prefix, mapped.replace("{x}", expert)));
        }
        let (_, mapped) = self.modules.iter().flat_map(|t| t.iter()).find(|(c, _)| *c == module)?;
        Some(format!("{}{layer}.{mapped}.{kind}", self.layer_prefix))
    }
}

/// The embeddings, final norm and head under Llama's HF names (most families share them).
pub const LLAMA_FIXED: &[(&str, &str)] =
    &[("token_embd.weight", "model.embed_tokens.weight"), ("output_norm.weight", "model.norm.weight"), ("output.weight", "lm_head.weight")];

/// Llama's block modules, as transformers names them (Qwen, OLMo 2, Gemma and gpt-oss add to them).
pub const LLAMA_MODULES: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    ("ffn_norm", "post_attention_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_q_norm", "self_attn.q_norm"),
    ("attn_k_norm", "self_attn.k_norm"),
    ("post_attention_norm", "post_attention_layernorm"),
    ("post_ffw_norm", "post_feedforward_layernorm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// Llama's HF names.
pub const LLAMA_NAMES: HfNames = HfNames { fixed: LLAMA_FIXED, layer_prefix: "model.layers.", tails: &[], modules: &[LLAMA_MODULES], experts: &[] };

/// The router, experts and shared expert of the Qwen-MoE and OLMoE checkpoints (`mlp.gate`,
/// `mlp.experts.{x}.*`, `mlp.shared_expert.*`), before Llama's modules.
pub const QWEN_MOE_MODULES: &[(&str, &str)] = &[
    ("ffn_gate_inp", "mlp.gate"),
    ("ffn_gate_shexp", "mlp.shared_expert.gate_proj"),
    ("ffn_up_shexp", "mlp.shared_expert.up_proj"),
    ("ffn_down_shexp", "mlp.shared_expert.down_proj"),
    ("ffn_gate_inp_shexp", "mlp.shared_expert_gate"),
];

/// Their experts, one matrix each.
pub const QWEN_MOE_EXPERTS: &[(&str, &str)] =
    &[("ffn_gate_exps", "mlp.experts.{x}.gate_proj"), ("ffn_up_exps", "mlp.experts.{x}.up_proj"), ("ffn_down_exps", "mlp.experts.{x}.down_proj")];

/// Their HF names.
pub const QWEN_MOE_NAMES: HfNames =
    HfNames { fixed: LLAMA_FIXED, layer_prefix: "model.layers.", tails: &[], modules: &[QWEN_MOE_MODULES, LLAMA_MODULES], experts: QWEN_MOE_EXPERTS };

/// Copies a family's own config keys to the names the reader looks for, where those are absent.
pub fn alias_keys(json: &mut Map<String, Json>, aliases: &[(&str, &str)]) {
    for (standard, own) in aliases {
        let missing = json.get(*standard).is_none_or(Json::is_null);
        if let (true, Some(v)) = (missing, json.get(*own).filter(|v| !v.is_null()).cloned()) {
            json.insert((*standard).to_owned(), v);
        }
    }
}

/// Without `layer_types`, transformers' Gemma 2 and gpt-oss alternate windowed and global layers,
/// windowed first.
pub fn alternating_layer_types(json: &mut Map<String, Json>, _: &Path) -> Result<()> {
    if json.get("layer_types").is_none_or(Json::is_null) {
        // An impossible count is refused by the reader; nothing is spelled out for it here.
        let layers = json.get("num_hidden_layers").and_then(Json::as_u64).filter(|&n| n <= MAX_SIZE as u64).unwrap_or(0);
        let types = (0..layers).map(|l| Json::from(if l % 2 == 1 { "full_attention" } else { "sliding_attention" })).collect();
        json.insert("layer_types".into(), Json::Array(types));
    }
    Ok(())
}
