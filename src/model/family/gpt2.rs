//! GPT-2: learned absolute positions added to the embeddings (nothing rotated), LayerNorm with
//! biases, Conv1D weights stored (in, out), fused q|k|v, GELU (tanh) MLP, and its own config
//! key names.

use std::path::Path;

use candle_core::Tensor;
use serde_json::{Map, Value as Json};

use super::spec::{alias_keys, FamilySpec, HfNames, TensorContext, BASE};
use crate::error::Result;
use crate::model::decoder::config::{ArchSwitches, MlpKind, NormKind, LLAMA};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "gpt2",
    hf_types: &["gpt2"],
    gguf_archs: &["gpt2"],
    // Nothing rotates; the layout is never used.
    gguf_rope: RopeLayout::HalfSplit,
    switches: ArchSwitches { norm: NormKind::Layer, mlp: MlpKind::GeluTanh, learned_positions: true, rotary_dims: Some(0), ..LLAMA },
    // The output head is tied to `wte`.
    hf_names: HfNames {
        fixed: &[
            ("token_embd.weight", "transformer.wte.weight"),
            ("position_embd.weight", "transformer.wpe.weight"),
            ("output_norm.weight", "transformer.ln_f.weight"),
            ("output_norm.bias", "transformer.ln_f.bias"),
            ("output.weight", "lm_head.weight"),
        ],
        layer_prefix: "transformer.h.",
        tails: &[],
        modules: &[&[
            ("attn_norm", "ln_1"),
            ("ffn_norm", "ln_2"),
            ("attn_qkv", "attn.c_attn"),
            ("attn_output", "attn.c_proj"),
            ("ffn_up", "mlp.c_fc"),
            ("ffn_down", "mlp.c_proj"),
        ]],
        experts: &[],
    },
    hf_config: standard_keys,
    hf_tensor: conv1d_transposed,
    ..BASE
};

/// GPT-2's config keys for what the other families call `hidden_size` and so on; `n_inner` null
/// means 4 × the residual width.
fn standard_keys(json: &mut Map<String, Json>, _: &Path) -> Result<()> {
    alias_keys(
        json,
        &[
            ("hidden_size", "n_embd"),
            ("num_hidden_layers", "n_layer"),
            ("num_attention_heads", "n_head"),
            ("max_position_embeddings", "n_positions"),
            ("intermediate_size", "n_inner"),
        ],
    );
    if json.get("intermediate_size").is_none_or(Json::is_null) {
        if let Some(d) = json.get("hidden_size").and_then(Json::as_u64) {
            json.insert("intermediate_size".into(), Json::from(4 * d));
        }
    }
    Ok(())
}

/// GPT-2's Conv1D stores (in, out); the decoder reads (out, in), as llama.cpp's converter also
/// transposes them.
fn conv1d_transposed(canonical: &str, t: Tensor, _: &TensorContext) -> Result<Tensor> {
    let conv1d = ["attn_qkv.weight", "attn_output.weight", "ffn_up.weight", "ffn_down.weight"].iter().any(|m| canonical.ends_with(m));
    Ok(if conv1d && t.rank() == 2 { t.t()?.contiguous()? } else { t })
}
