//! GPT-NeoX (Pythia): LayerNorm with biases, RoPE on a fraction of each head (from the file),
//! attention and MLP in parallel off the block input, exact-GELU MLP with biases, and one fused
//! q|k|v matrix stored per head.

use candle_core::Tensor;

use super::spec::{FamilySpec, HfNames, TensorContext, BASE};
use crate::error::Result;
use crate::model::decoder::config::{ArchSwitches, MlpKind, NormKind, LLAMA};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "gpt_neox",
    hf_types: &["gpt_neox"],
    gguf_archs: &["gptneox"],
    gguf_rope: RopeLayout::HalfSplit,
    switches: ArchSwitches { norm: NormKind::Layer, mlp: MlpKind::Gelu, parallel_residual: true, ..LLAMA },
    hf_names: HfNames {
        fixed: &[
            ("token_embd.weight", "gpt_neox.embed_in.weight"),
            ("output_norm.weight", "gpt_neox.final_layer_norm.weight"),
            ("output_norm.bias", "gpt_neox.final_layer_norm.bias"),
            ("output.weight", "embed_out.weight"),
        ],
        layer_prefix: "gpt_neox.layers.",
        tails: &[],
        modules: &[&[
            ("attn_norm", "input_layernorm"),
            ("ffn_norm", "post_attention_layernorm"),
            ("attn_qkv", "attention.query_key_value"),
            ("attn_output", "attention.dense"),
            ("ffn_up", "mlp.dense_h_to_4h"),
            ("ffn_down", "mlp.dense_4h_to_h"),
        ]],
        experts: &[],
    },
    hf_tensor: regroup_qkv,
    ..BASE
};

/// NeoX fuses q|k|v per head ((head, q|k|v, d_head) rows); the decoder reads all queries, then all
/// keys, then all values (as llama.cpp's converter reorders them). A shape that cannot be
/// regrouped is left as it is: the loader's shape check names it.
fn regroup_qkv(canonical: &str, t: Tensor, cx: &TensorContext) -> Result<Tensor> {
    if !(canonical.ends_with("attn_qkv.weight") || canonical.ends_with("attn_qkv.bias")) {
        return Ok(t);
    }
    let dims = t.dims().to_vec();
    let per_head = 3 * cx.n_heads.max(1);
    Ok(match dims.first() {
        Some(&rows) if rows > 0 && rows.is_multiple_of(per_head) => {
            let rest: usize = dims[1..].iter().product();
            t.reshape((cx.n_heads, 3, rows / per_head, rest))?.transpose(0, 1)?.contiguous()?.reshape(dims)?
        }
        _ => t,
    })
}
