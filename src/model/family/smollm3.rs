//! SmolLM3: Llama's block in which every 4th layer (by default) rotates neither queries nor keys
//! (NoPE: `no_rope_layers`, else `no_rope_layer_interval`), and a sliding window, when
//! `use_sliding_window` turns it on, only on those layers. llama.cpp fixes the step at 4 and
//! stores no key for it.

use std::path::Path;

use serde_json::{Map, Value as Json};

use super::spec::{FamilySpec, BASE};
use crate::error::{Error, Result};

pub const SPEC: FamilySpec = FamilySpec {
    name: "smollm3",
    hf_types: &["smollm3"],
    gguf_archs: &["smollm3"],
    hf_config: nope_layers,
    gguf_nope_every: NOPE_EVERY as usize,
    ..BASE
};

/// transformers' default `no_rope_layer_interval`, and the step llama.cpp fixes.
const NOPE_EVERY: u64 = 4;

/// Writes the per-layer `no_rope_layers` flags the reader applies (from the interval when the
/// config has no list, as transformers does) and the window's `layer_types`: a window applies
/// only with `use_sliding_window`, and then by default to the NoPE layers.
fn nope_layers(json: &mut Map<String, Json>, path: &Path) -> Result<()> {
    let n = json.get("num_hidden_layers").and_then(Json::as_u64).unwrap_or(0);
    let every = match json.remove("no_rope_layer_interval") {
        None | Some(Json::Null) => NOPE_EVERY,
        Some(v) => v
            .as_u64()
            .filter(|&e| e > 0)
            .ok_or_else(|| Error::file(path, format!("has no_rope_layer_interval = {v}, not a positive count; config.json is corrupt")))?,
    };
    if json.get("no_rope_layers").is_none_or(Json::is_null) && n <= crate::model::decoder::config::MAX_SIZE as u64 {
        let flags = (0..n).map(|l| Json::from(u64::from((l + 1) % every != 0))).collect();
        json.insert("no_rope_layers".into(), Json::Array(flags));
    }
    if !json.get("use_sliding_window").and_then(Json::as_bool).unwrap_or(false) {
        json.remove("sliding_window");
    } else if json.get("layer_types").is_none_or(Json::is_null) {
        let flags: Vec<Json> = json.get("no_rope_layers").and_then(Json::as_array).cloned().unwrap_or_default();
        let types = flags.iter().map(|f| Json::from(if f.as_u64() == Some(0) { "sliding_attention" } else { "full_attention" })).collect();
        json.insert("layer_types".into(), Json::Array(types));
    }
    Ok(())
}
