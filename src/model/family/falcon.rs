//! Falcon (7B, Falcon2 11B): attention and MLP in parallel off one shared LayerNorm, q|k|v fused
//! per key-value group in the HF checkpoint, exact-GELU MLP, RoPE (half-split), the head tied to
//! the embeddings. Falcon-40B/180B's two norms per block, ALiBi (Falcon-RW) and a sequential
//! block are refused by name.

use std::path::Path;

use candle_core::Tensor;
use serde_json::{Map, Value as Json};

use super::spec::{FamilySpec, HfNames, TensorContext, BASE};
use crate::error::{Error, Result};
use crate::model::decoder::config::{ArchSwitches, MlpKind, NormKind, NormPlacement, LLAMA};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "falcon",
    hf_types: &["falcon"],
    gguf_archs: &["falcon"],
    gguf_rope: RopeLayout::HalfSplit,
    switches: ArchSwitches { norm: NormKind::Layer, norm_placement: NormPlacement::Shared, mlp: MlpKind::Gelu, parallel_residual: true, ..LLAMA },
    hf_names: HfNames {
        fixed: &[
            ("token_embd.weight", "transformer.word_embeddings.weight"),
            ("output_norm.weight", "transformer.ln_f.weight"),
            ("output_norm.bias", "transformer.ln_f.bias"),
            ("output.weight", "lm_head.weight"),
        ],
        layer_prefix: "transformer.h.",
        tails: &[],
        modules: &[&[
            ("attn_norm", "input_layernorm"),
            ("attn_qkv", "self_attention.query_key_value"),
            ("attn_output", "self_attention.dense"),
            ("ffn_up", "mlp.dense_h_to_4h"),
            ("ffn_down", "mlp.dense_4h_to_h"),
        ]],
        experts: &[],
    },
    hf_config: falcon_config,
    hf_tensor: ungroup_qkv,
    ..BASE
};

/// Falcon's own config fields, read and removed: the block it describes (refused unless parallel
/// with one norm and rotary; its `activation` is checked by the reader), its key-value heads (`multi_query`: one; the new decoder
/// architecture: `num_kv_heads`; else one per head) and its MLP width (`ffn_hidden_size`, else
/// 4 × hidden).
fn falcon_config(json: &mut Map<String, Json>, path: &Path) -> Result<()> {
    let mut flag = |k: &str, default: bool| json.remove(k).and_then(|v| v.as_bool()).unwrap_or(default);
    let (alibi, parallel, new_arch, multi_query) =
        (flag("alibi", false), flag("parallel_attn", true), flag("new_decoder_architecture", false), flag("multi_query", true));
    let refuse = |what: &str| Err(Error::file(path, format!("{what}, which sinkscope does not compute yet; the numbers would be another model's")));
    if alibi {
        return refuse("sets alibi = true (ALiBi position biases instead of RoPE, Falcon-RW's)");
    }
    if !parallel {
        return refuse("sets parallel_attn = false (attention, then MLP, each with its own norm)");
    }
    let norms = json.remove("num_ln_in_parallel_attn").and_then(|v| v.as_u64()).unwrap_or(if new_arch { 2 } else { 1 });
    if norms != 1 {
        return refuse(&format!("has {norms} LayerNorms per block (num_ln_in_parallel_attn: Falcon-40B/180B's ln_attn and ln_mlp)"));
    }
    let heads = json.get("num_attention_heads").cloned().unwrap_or(Json::Null);
    let kv_heads = json.remove("num_kv_heads");
    let kv = match (new_arch, multi_query) {
        (true, _) => kv_heads.unwrap_or_else(|| heads.clone()),
        (false, true) => Json::from(1),
        (false, false) => heads.clone(),
    };
    json.insert("num_key_value_heads".into(), kv);
    if let Some(ff) = json.remove("ffn_hidden_size").filter(|v| !v.is_null()) {
        json.insert("intermediate_size".into(), ff);
    } else if let Some(d) = json.get("hidden_size").and_then(Json::as_u64) {
        json.insert("intermediate_size".into(), Json::from(4 * d));
    }
    // Read where the tensors are: a bias is computed where the file has one.
    json.remove("bias");
    // Fields of Falcon's original code that transformers' model never reads.
    json.remove("apply_residual_connection_post_layernorm");
    json.remove("ff_factor");
    if json.get("max_position_embeddings").is_none_or(Json::is_null) {
        // FalconConfig's default (Falcon 7B's config states none).
        json.insert("max_position_embeddings".into(), Json::from(2048));
    }
    json.entry("tie_word_embeddings").or_insert(Json::Bool(true));
    Ok(())
}

/// Falcon fuses q|k|v per key-value group (each group's queries, then its key, then its value);
/// the decoder reads all queries, then all keys, then all values, as llama.cpp's converter
/// reorders them. A shape that cannot be regrouped is left as it is: the loader's shape check
/// names it.
fn ungroup_qkv(canonical: &str, t: Tensor, cx: &TensorContext) -> Result<Tensor> {
    let &[rows, cols] = t.dims() else { return Ok(t) };
    if !canonical.ends_with("attn_qkv.weight") || cx.n_kv_heads == 0 || !cx.n_heads.is_multiple_of(cx.n_kv_heads) {
        return Ok(t);
    }
    let per_group = cx.n_heads / cx.n_kv_heads + 2;
    if !rows.is_multiple_of(cx.n_kv_heads * per_group) {
        return Ok(t);
    }
    let d_head = rows / (cx.n_kv_heads * per_group);
    let grouped = t.reshape((cx.n_kv_heads, per_group, d_head, cols))?;
    let q = grouped.narrow(1, 0, per_group - 2)?.contiguous()?.reshape((cx.n_heads * d_head, cols))?;
    let k = grouped.narrow(1, per_group - 2, 1)?.contiguous()?.reshape((cx.n_kv_heads * d_head, cols))?;
    let v = grouped.narrow(1, per_group - 1, 1)?.contiguous()?.reshape((cx.n_kv_heads * d_head, cols))?;
    Ok(Tensor::cat(&[q, k, v], 0)?)
}
