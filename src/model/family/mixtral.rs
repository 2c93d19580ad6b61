//! Mixtral: Llama's block with a mixture of SwiGLU experts in place of the MLP — a router picks
//! each token's top-k experts and weighs them by a softmax over their k logits. llama.cpp writes
//! it as a `llama` GGUF with `llama.expert_count` and stacked `ffn_*_exps` tensors (see
//! [`super::llama`]).

use std::path::Path;

use serde_json::{Map, Value as Json};

use super::spec::{FamilySpec, HfNames, BASE, LLAMA_FIXED, LLAMA_MODULES};
use crate::error::Result;
use crate::model::decoder::config::{ArchSwitches, ExpertAct, MlpKind, Moe, LLAMA};

pub const SPEC: FamilySpec = FamilySpec {
    name: "mixtral",
    hf_types: &["mixtral"],
    gguf_archs: &[],
    // The number of experts and how many a token uses come from the file.
    switches: ArchSwitches { mlp: MlpKind::Moe(Moe::plain(0, 0, true, ExpertAct::SwiGlu)), ..LLAMA },
    hf_names: HfNames {
        fixed: LLAMA_FIXED,
        layer_prefix: "model.layers.",
        tails: &[],
        modules: &[&[("ffn_gate_inp", "block_sparse_moe.gate")], LLAMA_MODULES],
        experts: &[
            ("ffn_gate_exps", "block_sparse_moe.experts.{x}.w1"),
            ("ffn_up_exps", "block_sparse_moe.experts.{x}.w3"),
            ("ffn_down_exps", "block_sparse_moe.experts.{x}.w2"),
        ],
    },
    hf_config: renormalised_always,
    ..BASE
};

/// transformers' Mixtral always renormalises the chosen experts' weights: a `norm_topk_prob` in
/// its config is inert, not read.
fn renormalised_always(json: &mut Map<String, Json>, _: &Path) -> Result<()> {
    json.remove("norm_topk_prob");
    Ok(())
}
