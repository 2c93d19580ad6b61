//! StableLM (StableLM 2 1.6B, StableLM-3B-4E1T, Zephyr): LayerNorm with biases, RoPE on a
//! fraction of each head (half-split, from the file), q/k/v biases where the file has them
//! (`use_qkv_bias`), SwiGLU, attention then MLP. StableLM 2 12B's shape — attention and MLP in
//! parallel off one norm, per-head q/k LayerNorms — is refused by name.

use std::path::Path;

use serde_json::{Map, Value as Json};

use super::spec::{FamilySpec, HfNames, BASE, LLAMA_MODULES};
use crate::error::{Error, Result};
use crate::model::decoder::config::{ArchSwitches, NormKind, LLAMA};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "stablelm",
    hf_types: &["stablelm"],
    gguf_archs: &["stablelm"],
    // llama.cpp's NEOX rope type: the converter keeps HF's half-split rows.
    gguf_rope: RopeLayout::HalfSplit,
    switches: ArchSwitches { norm: NormKind::Layer, ..LLAMA },
    hf_names: HfNames {
        fixed: &[
            ("token_embd.weight", "model.embed_tokens.weight"),
            ("output_norm.weight", "model.norm.weight"),
            ("output_norm.bias", "model.norm.bias"),
            ("output.weight", "lm_head.weight"),
        ],
        layer_prefix: "model.layers.",
        tails: &[],
        modules: &[LLAMA_MODULES],
        experts: &[],
    },
    hf_config: one_norm_per_sublayer,
    ..BASE
};

/// Refuses StableLM 2 12B's parallel block: there the MLP reads the attention's own norm (no
/// `post_attention_layernorm`), which differs from GPT-NeoX's parallel residual with two norms.
fn one_norm_per_sublayer(json: &mut Map<String, Json>, path: &Path) -> Result<()> {
    if json.get("use_parallel_residual").and_then(Json::as_bool) == Some(true) {
        return Err(Error::file(
            path,
            "sets use_parallel_residual (attention and MLP in parallel off one shared LayerNorm, StableLM 2 12B's block), which sinkscope does not compute for stablelm yet; the numbers would be another model's",
        ));
    }
    Ok(())
}
