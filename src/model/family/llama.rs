//! Llama (and the `model_type`s that are Llama under another name: SmolLM; TinyLlama and
//! llama2.c checkpoints are `llama` too): the decoder's defaults, nothing to set apart.

use super::spec::{keep, no_rewrite, FamilySpec, LLAMA_NAMES};
use crate::model::decoder::config::LLAMA;
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "llama",
    hf_types: &["llama", "smollm"],
    gguf_archs: &["llama"],
    // llama.cpp's converter permutes q/k rows to adjacent pairs (`LLAMA_ROPE_TYPE_NORM`).
    gguf_rope: RopeLayout::Interleaved,
    hf_rope: RopeLayout::HalfSplit,
    switches: LLAMA,
    hf_names: LLAMA_NAMES,
    hf_config: no_rewrite,
    hf_tensor: keep,
    gguf_windows: None,
    gguf_attn_scale_layers: &[],
    // A `llama` GGUF with experts is Mixtral (llama.cpp's converter writes it so).
    gguf_experts: Some(&super::mixtral::SPEC),
    gguf_nope_every: 0,
    multipliers: None,
};
