//! StarCoder2: LayerNorm with biases, biases on q/k/v/o and both MLP layers (`use_bias`), a plain
//! c_fc → GELU (tanh) → c_proj MLP, RoPE on every dimension (half-split), and a sliding window
//! on every layer where the config sets one (llama.cpp's converter writes none: a GGUF has no
//! window, as llama.cpp computes it).

use serde_json::{Map, Value as Json};

use super::spec::{alias_keys, FamilySpec, HfNames, BASE, LLAMA_MODULES};
use crate::error::Result;
use crate::model::decoder::config::{ArchSwitches, MlpKind, NormKind, LLAMA};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "starcoder2",
    hf_types: &["starcoder2"],
    gguf_archs: &["starcoder2"],
    // llama.cpp's NEOX rope type: the converter keeps HF's half-split rows.
    gguf_rope: RopeLayout::HalfSplit,
    switches: ArchSwitches { norm: NormKind::Layer, mlp: MlpKind::GeluTanh, ..LLAMA },
    hf_names: HfNames {
        fixed: &[
            ("token_embd.weight", "model.embed_tokens.weight"),
            ("output_norm.weight", "model.norm.weight"),
            ("output_norm.bias", "model.norm.bias"),
            ("output.weight", "lm_head.weight"),
        ],
        layer_prefix: "model.layers.",
        tails: &[],
        modules: &[&[("ffn_up", "mlp.c_fc"), ("ffn_down", "mlp.c_proj")], LLAMA_MODULES],
        experts: &[],
    },
    hf_config: norm_epsilon,
    ..BASE
};

/// StarCoder2 names its LayerNorm epsilon `norm_epsilon`. Its released configs carry fields
/// from its training code that transformers' model never reads (the MLP and norm are fixed; the
/// activation is `hidden_act`): removed as read.
fn norm_epsilon(json: &mut Map<String, Json>, _: &std::path::Path) -> Result<()> {
    alias_keys(json, &[("layer_norm_eps", "norm_epsilon")]);
    json.remove("norm_epsilon");
    for unused in ["activation_function", "mlp_type", "norm_type", "attention_softmax_in_fp32", "scale_attention_softmax_in_fp32"] {
        json.remove(unused);
    }
    Ok(())
}
