//! Granite (IBM Granite 3.x dense): Llama's block with four scalings — embeddings ×
//! `embedding_multiplier`, each attention and MLP output × `residual_multiplier` before the
//! residual add, attention scores × `attention_multiplier` (instead of 1/√d_head) and logits ÷
//! `logits_scaling`; llama.cpp writes them as `embedding_scale`, `residual_scale`,
//! `attention.scale` and `logit_scale`.

use super::spec::{keep, no_rewrite, FamilySpec, Multipliers, LLAMA_NAMES};
use crate::model::decoder::config::LLAMA;
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "granite",
    hf_types: &["granite"],
    gguf_archs: &["granite"],
    // The converter is Llama's: q/k rows permuted to adjacent pairs.
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
    multipliers: Some(Multipliers::Granite),
};
