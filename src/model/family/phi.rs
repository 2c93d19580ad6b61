//! Phi (Phi-1/1.5/2): one LayerNorm (with bias) read by attention and MLP in parallel, RoPE on a
//! fraction of each head (from the file), biases on q/k/v, the output projection, the MLP and the
//! output head, GELU (tanh) MLP.

use super::spec::{FamilySpec, HfNames, BASE};
use crate::model::decoder::config::{ArchSwitches, MlpKind, NormKind, NormPlacement, LLAMA};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "phi",
    hf_types: &["phi"],
    gguf_archs: &["phi2"],
    gguf_rope: RopeLayout::HalfSplit,
    switches: ArchSwitches { norm: NormKind::Layer, norm_placement: NormPlacement::Shared, mlp: MlpKind::GeluTanh, parallel_residual: true, ..LLAMA },
    hf_names: HfNames {
        fixed: &[
            ("token_embd.weight", "model.embed_tokens.weight"),
            ("output_norm.weight", "model.final_layernorm.weight"),
            ("output_norm.bias", "model.final_layernorm.bias"),
            ("output.weight", "lm_head.weight"),
            ("output.bias", "lm_head.bias"),
        ],
        layer_prefix: "model.layers.",
        tails: &[],
        modules: &[&[
            ("attn_norm", "input_layernorm"),
            ("attn_q", "self_attn.q_proj"),
            ("attn_k", "self_attn.k_proj"),
            ("attn_v", "self_attn.v_proj"),
            ("attn_output", "self_attn.dense"),
            ("ffn_up", "mlp.fc1"),
            ("ffn_down", "mlp.fc2"),
        ]],
        experts: &[],
    },
    ..BASE
};
