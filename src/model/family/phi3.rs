//! Phi-3 / 3.5 / 4-mini: Llama's block with q|k|v in one matrix and gate|up in one matrix (gates
//! first), RoPE on a fraction of each head (from the file), a sliding window over every layer
//! where the config sets one shorter than the context (Phi-3-mini-4k's 2,047 keys).

use super::spec::{FamilySpec, GgufWindows, HfNames, BASE, LLAMA_FIXED, LLAMA_MODULES};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "phi3",
    hf_types: &["phi3"],
    gguf_archs: &["phi3"],
    gguf_rope: RopeLayout::HalfSplit,
    // The fused matrices under the canonical names llama.cpp gives them (`attn_qkv`; `ffn_up`
    // with 2·d_ff rows): the block splits them.
    hf_names: HfNames {
        fixed: LLAMA_FIXED,
        layer_prefix: "model.layers.",
        tails: &[],
        modules: &[&[("attn_qkv", "self_attn.qkv_proj"), ("ffn_up", "mlp.gate_up_proj")], LLAMA_MODULES],
        experts: &[],
    },
    // transformers windows every layer by `sliding_window`; so does sinkscope for a GGUF that
    // states one (llama.cpp 0.3.36 turns Phi-3's window off and warns that results may suffer).
    gguf_windows: Some(GgufWindows { global_every: 0, local_rope_theta: None, default_window: None, local_scaled: false }),
    ..BASE
};
