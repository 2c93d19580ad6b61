//! Cohere (Command R, Aya 23): one LayerNorm without bias read by attention and MLP in parallel,
//! RoPE on interleaved pairs (in the HF checkpoint too), SwiGLU, logits × `logit_scale`, the
//! head tied to the embeddings. Command R+'s per-head q/k LayerNorms (`use_qk_norm`) are refused.

use std::path::Path;

use serde_json::{Map, Value as Json};

use super::spec::{FamilySpec, Multipliers, BASE};
use crate::error::{Error, Result};
use crate::model::decoder::config::{ArchSwitches, NormKind, NormPlacement, LLAMA};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "cohere",
    hf_types: &["cohere"],
    gguf_archs: &["command-r"],
    hf_rope: RopeLayout::Interleaved,
    switches: ArchSwitches { norm: NormKind::LayerNoBias, norm_placement: NormPlacement::Shared, parallel_residual: true, ..LLAMA },
    hf_config: refuse_qk_norm,
    multipliers: Some(Multipliers::LogitScale),
    ..BASE
};

/// Command R+'s q/k LayerNorms (one weight row per head) are not computed; `use_qk_norm` false
/// is Command R's block.
fn refuse_qk_norm(json: &mut Map<String, Json>, path: &Path) -> Result<()> {
    match json.remove("use_qk_norm") {
        None | Some(Json::Null) | Some(Json::Bool(false)) => Ok(()),
        Some(v) => Err(Error::file(
            path,
            format!("sets use_qk_norm = {v} (Command R+'s per-head LayerNorms on queries and keys), which sinkscope does not compute yet; the numbers would be another model's"),
        )),
    }
}
