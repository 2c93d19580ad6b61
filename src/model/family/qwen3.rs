//! Qwen3: Llama's block with an RMSNorm of each head's query and key before RoPE (one weight
//! shared by the heads); its window rule is Qwen2's.

use super::qwen2::qwen_window;
use super::spec::{keep, FamilySpec, LLAMA_NAMES};
use crate::model::decoder::config::{ArchSwitches, QkNorm, LLAMA};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "qwen3",
    hf_types: &["qwen3"],
    gguf_archs: &["qwen3"],
    gguf_rope: RopeLayout::HalfSplit,
    hf_rope: RopeLayout::HalfSplit,
    switches: ArchSwitches { qk_norm: QkNorm::PerHead, ..LLAMA },
    hf_names: LLAMA_NAMES,
    hf_config: qwen_window,
    hf_tensor: keep,
    gguf_windows: None,
    gguf_attn_scale_layers: &[],
    gguf_experts: None,
    gguf_nope_every: 0,
    multipliers: None,
};
