//! Qwen2: Llama's block with q/k/v biases (read wherever a file has them), and a sliding window
//! that only `use_sliding_window` turns on.

use std::path::Path;

use serde_json::{Map, Value as Json};

use super::spec::{FamilySpec, BASE};
use crate::error::{Error, Result};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec =
    FamilySpec { name: "qwen2", hf_types: &["qwen2"], gguf_archs: &["qwen2"], gguf_rope: RopeLayout::HalfSplit, hf_config: qwen_window, ..BASE };

/// Qwen2/3 configs carry a `sliding_window` that applies only with `use_sliding_window`, and then
/// from `max_window_layers` on, which sinkscope does not lay out for them yet: refused; unused, it
/// is dropped so the reader does not window every layer.
pub fn qwen_window(json: &mut Map<String, Json>, path: &Path) -> Result<()> {
    let context = json.get("max_position_embeddings").and_then(Json::as_u64).unwrap_or(u64::MAX);
    let Some(w) = json.get("sliding_window").and_then(Json::as_u64).filter(|&w| w < context) else { return Ok(()) };
    if json.get("use_sliding_window").and_then(Json::as_bool).unwrap_or(false) {
        return Err(Error::file(
            path,
            format!("sets use_sliding_window with sliding_window = {w}: its layers from max_window_layers on never see keys more than {w} back, which sinkscope does not compute for this family yet; the numbers would be another model's"),
        ));
    }
    json.remove("sliding_window");
    Ok(())
}
