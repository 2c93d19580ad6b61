//! Qwen3: Llama's block with an RMSNorm of each head's query and key before RoPE (one weight
//! shared by the heads); its window rule is Qwen2's.

use super::qwen2::qwen_window;
use super::spec::{FamilySpec, BASE};
use crate::model::decoder::config::{ArchSwitches, QkNorm, LLAMA};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "qwen3",
    hf_types: &["qwen3"],
    gguf_archs: &["qwen3"],
    gguf_rope: RopeLayout::HalfSplit,
    switches: ArchSwitches { qk_norm: QkNorm::PerHead, ..LLAMA },
    hf_config: qwen_window,
    ..BASE
};
