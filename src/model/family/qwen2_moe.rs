//! Qwen2-MoE: Qwen2's block (q/k/v biases) with a mixture of SwiGLU experts, each token's k
//! experts keeping their softmax over all experts (`norm_topk_prob`, false in its configs and
//! fixed so in llama.cpp), beside a shared SwiGLU expert gated by σ(x · g).

use std::path::Path;

use serde_json::{Map, Value as Json};

use super::qwen2::qwen_window;
use super::spec::{FamilySpec, BASE, QWEN_MOE_NAMES};
use crate::error::{Error, Result};
use crate::model::decoder::config::{ArchSwitches, ExpertAct, MlpKind, Moe, LLAMA};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "qwen2_moe",
    hf_types: &["qwen2_moe"],
    gguf_archs: &["qwen2moe"],
    gguf_rope: RopeLayout::HalfSplit,
    // The counts and the shared expert's width come from the file.
    switches: ArchSwitches { mlp: MlpKind::Moe(Moe::plain(0, 0, false, ExpertAct::SwiGlu)), ..LLAMA },
    hf_names: QWEN_MOE_NAMES,
    hf_config: qwen_moe_config,
    ..BASE
};

/// Qwen-MoE configs may keep some layers dense (`mlp_only_layers`, `decoder_sparse_step`),
/// which sinkscope does not lay out: refused; otherwise the window rule is Qwen2's.
pub fn qwen_moe_config(json: &mut Map<String, Json>, path: &Path) -> Result<()> {
    let dense_layers = json.get("mlp_only_layers").and_then(Json::as_array).is_some_and(|l| !l.is_empty());
    let step = json.get("decoder_sparse_step").and_then(Json::as_u64).unwrap_or(1);
    if dense_layers || step != 1 {
        return Err(Error::file(
            path,
            "sets mlp_only_layers or decoder_sparse_step (some layers with a dense MLP instead of experts), which sinkscope does not compute yet; the numbers would be another model's",
        ));
    }
    json.remove("mlp_only_layers");
    json.remove("decoder_sparse_step");
    qwen_window(json, path)
}
