//! gpt-oss: a learned sink logit per head that joins every softmax row's denominator and attends
//! to nothing, a mixture of clamped-SwiGLU experts with biases, q/k/v/o biases, windowed layers
//! between global ones, YaRN RoPE (read from the config by the generic reader).

use std::path::Path;

use serde_json::{Map, Value as Json};

use super::spec::{keep, FamilySpec, HfNames, LLAMA_FIXED, LLAMA_MODULES};
use crate::error::Result;
use crate::model::decoder::config::{ArchSwitches, MlpKind, Moe, LLAMA, MAX_SIZE};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "gpt_oss",
    hf_types: &["gpt_oss"],
    // llama.cpp's `gpt-oss` GGUF layout is not read yet.
    gguf_archs: &[],
    gguf_rope: RopeLayout::HalfSplit,
    // The number of experts and how many a token uses come from the config; α and the clamp are
    // transformers' defaults unless it sets `swiglu_alpha` / `swiglu_limit`.
    switches: ArchSwitches { mlp: MlpKind::Moe(Moe { experts: 0, top_k: 0, alpha: 1.702, limit: 7.0 }), learned_sinks: true, ..LLAMA },
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
    },
    hf_config: alternating_layer_types,
    hf_tensor: keep,
    gguf_windows: None,
};

/// Without `layer_types`, transformers' gpt-oss alternates windowed and global layers, windowed
/// first.
fn alternating_layer_types(json: &mut Map<String, Json>, _: &Path) -> Result<()> {
    if json.get("layer_types").is_none_or(Json::is_null) {
        // An impossible count is refused by the reader; nothing is spelled out for it here.
        let layers = json.get("num_hidden_layers").and_then(Json::as_u64).filter(|&n| n <= MAX_SIZE as u64).unwrap_or(0);
        let types = (0..layers).map(|l| Json::from(if l % 2 == 1 { "full_attention" } else { "sliding_attention" })).collect();
        json.insert("layer_types".into(), Json::Array(types));
    }
    Ok(())
}
