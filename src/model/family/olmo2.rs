//! OLMo 2 and OLMo 3: q/k RMSNorm across all heads at once, and RMSNorm after attention and MLP
//! (before each joins the residual stream) instead of before them. OLMo 3 adds a sliding window
//! on three layers of four (`layer_types`), whose RoPE is plain while the global layers carry the
//! model's scaling (YaRN on OLMo 3 7B); llama.cpp's converter writes OLMo 3 as `olmo2` with
//! `attention.sliding_window` and one flag per layer.

use serde_json::{json, Map, Value as Json};

use super::spec::{FamilySpec, GgufWindows, BASE};
use crate::error::Result;
use crate::model::decoder::config::{ArchSwitches, NormPlacement, QkNorm, LLAMA};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "olmo2",
    hf_types: &["olmo2", "olmo3"],
    gguf_archs: &["olmo2"],
    gguf_rope: RopeLayout::HalfSplit,
    switches: ArchSwitches { qk_norm: QkNorm::AcrossHeads, norm_placement: NormPlacement::Post, ..LLAMA },
    hf_config: olmo3_rope_per_layer_type,
    // What llama.cpp fixes for `olmo2` with a window: every 4th layer global unless the file
    // lists them, the windowed layers rotated without the scaling.
    gguf_windows: Some(GgufWindows { global_every: 4, local_rope_theta: None, default_window: None, local_scaled: false }),
    ..BASE
};

/// OLMo 3's configs written by transformers 4 give one `rope_scaling` (and `rope_theta`), which
/// its model applies to the global layers only: spelled out per layer type, as transformers 5
/// reads them (the windowed layers plain, with the same base; 500,000 unless stated).
fn olmo3_rope_per_layer_type(json: &mut Map<String, Json>, _: &std::path::Path) -> Result<()> {
    let nested = |v: &Json| v.get("full_attention").is_some() || v.get("sliding_attention").is_some();
    if json.get("model_type").and_then(Json::as_str) != Some("olmo3") || json.get("rope_parameters").is_some_and(nested) {
        return Ok(());
    }
    let flat = json.remove("rope_parameters").filter(Json::is_object).or_else(|| json.remove("rope_scaling").filter(Json::is_object));
    let mut full = flat.unwrap_or_else(|| json!({"rope_type": "default"}));
    let theta = json.remove("rope_theta").or_else(|| full.get("rope_theta").cloned()).unwrap_or(json!(500_000.0));
    full["rope_theta"] = theta.clone();
    json.insert("rope_parameters".into(), json!({"full_attention": full, "sliding_attention": {"rope_type": "default", "rope_theta": theta}}));
    Ok(())
}
