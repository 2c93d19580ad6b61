//! Qwen3-MoE: Qwen3's block (q/k RMSNorm per head) with a mixture of SwiGLU experts, no shared
//! expert; the chosen experts' weights are renormalised (`norm_topk_prob`: true in its configs,
//! fixed so in llama.cpp).

use super::qwen2_moe::qwen_moe_config;
use super::spec::{FamilySpec, BASE, QWEN_MOE_NAMES};
use crate::model::decoder::config::{ArchSwitches, ExpertAct, MlpKind, Moe, QkNorm, LLAMA};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "qwen3_moe",
    hf_types: &["qwen3_moe"],
    gguf_archs: &["qwen3moe"],
    gguf_rope: RopeLayout::HalfSplit,
    switches: ArchSwitches { qk_norm: QkNorm::PerHead, mlp: MlpKind::Moe(Moe::plain(0, 0, true, ExpertAct::SwiGlu)), ..LLAMA },
    hf_names: QWEN_MOE_NAMES,
    hf_config: qwen_moe_config,
    ..BASE
};
