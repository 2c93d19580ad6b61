//! OLMoE: Llama's pre-norm block with q/k RMSNorm across all heads at once (as OLMo 2) and a
//! mixture of SwiGLU experts keeping their softmax over all experts (`norm_topk_prob` false, fixed
//! so in llama.cpp).

use super::spec::{FamilySpec, BASE, QWEN_MOE_NAMES};
use crate::model::decoder::config::{ArchSwitches, ExpertAct, MlpKind, Moe, QkNorm, LLAMA};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "olmoe",
    hf_types: &["olmoe"],
    gguf_archs: &["olmoe"],
    gguf_rope: RopeLayout::HalfSplit,
    switches: ArchSwitches { qk_norm: QkNorm::AcrossHeads, mlp: MlpKind::Moe(Moe::plain(0, 0, false, ExpertAct::SwiGlu)), ..LLAMA },
    hf_names: QWEN_MOE_NAMES,
    ..BASE
};
