//! Mistral: Llama's block with a sliding window on every layer (`sliding_window`, which the
//! generic reader applies to every layer when no `layer_types` say otherwise).

use super::spec::{keep, no_rewrite, FamilySpec, LLAMA_NAMES};
use crate::model::decoder::config::LLAMA;
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "mistral",
    hf_types: &["mistral"],
    gguf_archs: &["mistral"],
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
};
