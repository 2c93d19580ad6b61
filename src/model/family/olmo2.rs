//! OLMo 2: q/k RMSNorm across all heads at once, and RMSNorm after attention and MLP (before
//! each joins the residual stream) instead of before them.

use super::spec::{keep, no_rewrite, FamilySpec, LLAMA_NAMES};
use crate::model::decoder::config::{ArchSwitches, NormPlacement, QkNorm, LLAMA};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "olmo2",
    hf_types: &["olmo2"],
    gguf_archs: &["olmo2"],
    gguf_rope: RopeLayout::HalfSplit,
    switches: ArchSwitches { qk_norm: QkNorm::AcrossHeads, norm_placement: NormPlacement::Post, ..LLAMA },
    hf_names: LLAMA_NAMES,
    hf_config: no_rewrite,
    hf_tensor: keep,
    gguf_windows: None,
    gguf_attn_scale_layers: &[],
    gguf_experts: None,
    gguf_nope_every: 0,
    multipliers: false,
};
