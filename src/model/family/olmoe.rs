//! OLMoE: Llama's pre-norm block with q/k RMSNorm across all heads at once (as OLMo 2) and a
//! mixture of SwiGLU experts keeping their softmax over all experts (`norm_topk_prob` false, fixed
//! so in llama.cpp).

use super::spec::{keep, no_rewrite, FamilySpec, QWEN_MOE_NAMES};
use crate::model::decoder::config::{ArchSwitches, ExpertAct, MlpKind, Moe, QkNorm, LLAMA};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "olmoe",
    hf_types: &["olmoe"],
    gguf_archs: &["olmoe"],
    gguf_rope: RopeLayout::HalfSplit,
    hf_rope: RopeLayout::HalfSplit,
    switches: ArchSwitches {
        qk_norm: QkNorm::AcrossHeads,
        mlp: MlpKind::Moe(Moe { experts: 0, top_k: 0, norm_top_k: false, expert: ExpertAct::SwiGlu, shared_ff: 0 }),
        ..LLAMA
    },
    hf_names: QWEN_MOE_NAMES,
    hf_config: no_rewrite,
    hf_tensor: keep,
    gguf_windows: None,
    gguf_attn_scale_layers: &[],
    gguf_experts: None,
    gguf_nope_every: 0,
    multipliers: None,
};
