//! gpt-oss: a learned sink logit per head that joins every softmax row's denominator and attends
//! to nothing, a mixture of clamped-SwiGLU experts with biases, q/k/v/o biases, windowed layers
//! between global ones, YaRN RoPE (read from the config by the generic reader).

use super::spec::{alternating_layer_types, FamilySpec, HfNames, BASE, LLAMA_FIXED, LLAMA_MODULES};
use crate::model::decoder::config::{ArchSwitches, ExpertAct, MlpKind, Moe, LLAMA};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "gpt_oss",
    hf_types: &["gpt_oss"],
    // llama.cpp's `gpt-oss` GGUF layout is not read yet.
    gguf_archs: &[],
    gguf_rope: RopeLayout::HalfSplit,
    // The number of experts and how many a token uses come from the config; α and the clamp are
    // transformers' defaults unless it sets `swiglu_alpha` / `swiglu_limit`.
    switches: ArchSwitches {
        mlp: MlpKind::Moe(Moe::plain(0, 0, true, ExpertAct::ClampedSwiGlu { alpha: 1.702, limit: 7.0 })),
        learned_sinks: true,
        ..LLAMA
    },
    // The sink logits, the router and the experts (kept in transformers' layout, see `MoeMlp::load`).
    hf_names: HfNames {
        fixed: LLAMA_FIXED,
        layer_prefix: "model.layers.",
        tails: &[&[
            ("attn_sinks.weight", "self_attn.sinks"),
            ("ffn_gate_inp.weight", "mlp.router.weight"),
            ("ffn_gate_inp.bias", "mlp.router.bias"),
            ("ffn_gate_up_exps.weight", "mlp.experts.gate_up_proj"),
            ("ffn_gate_up_exps.bias", "mlp.experts.gate_up_proj_bias"),
            ("ffn_down_exps.weight", "mlp.experts.down_proj"),
            ("ffn_down_exps.bias", "mlp.experts.down_proj_bias"),
        ]],
        modules: &[LLAMA_MODULES],
        experts: &[],
    },
    hf_config: alternating_layer_types,
    ..BASE
};
