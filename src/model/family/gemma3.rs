//! Gemma 3 (text): RMSNorm before *and* after attention and MLP with weights stored as w − 1,
//! q/k RMSNorm per head, GeGLU (tanh), embeddings × √d_model, and local layers with a sliding
//! window and their own RoPE base between global ones.

use std::path::Path;

use candle_core::{DType, Tensor};
use serde_json::{Map, Value as Json};

use super::spec::{FamilySpec, GgufWindows, HfNames, TensorContext, BASE, LLAMA_FIXED, LLAMA_MODULES};
use crate::error::Result;
use crate::model::decoder::config::{ArchSwitches, MlpKind, NormPlacement, QkNorm, LLAMA, MAX_SIZE};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "gemma3",
    hf_types: &["gemma3", "gemma3_text"],
    gguf_archs: &["gemma3"],
    gguf_rope: RopeLayout::HalfSplit,
    switches: ArchSwitches { qk_norm: QkNorm::PerHead, norm_placement: NormPlacement::Sandwich, mlp: MlpKind::GeGluTanh, embed_scale: true, ..LLAMA },
    hf_names: GEMMA_NAMES,
    hf_config: layer_types_from_pattern,
    hf_tensor: norm_plus_one,
    // What llama.cpp fixes for `gemma3` instead of storing it: every 6th layer global, the local
    // layers rotated with base 10,000.
    gguf_windows: Some(GgufWindows { global_every: 6, local_rope_theta: Some(10_000.0), default_window: None, local_scaled: false }),
    // Gemma 3 27B.
    gguf_attn_scale_layers: &[62],
    ..BASE
};

/// Gemma's HF names: Llama's, with the MLP's input norm named for its place in the sandwich.
pub(super) const GEMMA_NAMES: HfNames = HfNames {
    fixed: LLAMA_FIXED,
    layer_prefix: "model.layers.",
    tails: &[],
    modules: &[&[("ffn_norm", "pre_feedforward_layernorm")], LLAMA_MODULES],
    experts: &[],
};

/// Configs written before `layer_types` give the pattern as `sliding_window_pattern` (every Nth
/// layer global; transformers' default 6): spelled out per layer, as transformers does.
fn layer_types_from_pattern(json: &mut Map<String, Json>, _: &Path) -> Result<()> {
    if json.get("layer_types").is_none_or(Json::is_null) {
        let every = json.get("sliding_window_pattern").or_else(|| json.get("_sliding_window_pattern")).and_then(Json::as_u64).unwrap_or(6).max(1);
        // An impossible count is refused by the reader; nothing is spelled out for it here.
        let layers = json.get("num_hidden_layers").and_then(Json::as_u64).filter(|&n| n <= MAX_SIZE as u64).unwrap_or(0);
        let types = (0..layers).map(|l| Json::from(if (l + 1) % every == 0 { "full_attention" } else { "sliding_attention" })).collect();
        json.insert("layer_types".into(), Json::Array(types));
    }
    Ok(())
}

/// Gemma stores RMSNorm weights as w − 1 (its norm multiplies by 1 + w); the decoder's norm
/// multiplies by w, as llama.cpp's converter also arranges.
pub(super) fn norm_plus_one(canonical: &str, t: Tensor, _: &TensorContext) -> Result<Tensor> {
    Ok(if canonical.ends_with("norm.weight") { (t.to_dtype(DType::F32)? + 1.0)? } else { t })
}
