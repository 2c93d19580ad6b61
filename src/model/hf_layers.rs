//! How each layer of an HF checkpoint attends, from its config.json: windowed or global (and
//! with which RoPE base), unrotated (NoPE), or linear attention (a hybrid's Gated DeltaNet layers).

use std::path::Path;

use serde_json::Value as Json;

use super::decoder::LayerAttn;
use crate::error::{Error, Result};

/// How each layer attends. A `sliding_window` shorter than the context applies to the layers
/// `layer_types` calls `sliding_attention` (any pattern), or to every layer when the config has no
/// `layer_types` (Mistral); windowed layers rotate with their own base where the config gives one
/// (`rope_parameters.sliding_attention`, `rope_local_base_freq`), without the model's RoPE scaling.
/// `linear_attention` layers (Gated DeltaNet) are read where the family has them (`linear`).
pub(crate) fn layer_attention(json: &Json, n_layers: usize, rope_theta: f64, linear: bool, path: &Path) -> Result<Vec<LayerAttn>> {
    let context = json.get("max_position_embeddings").and_then(Json::as_u64).unwrap_or(u64::MAX);
    let Some(w) = json.get("sliding_window").and_then(Json::as_u64).filter(|&w| w < context) else {
        if linear {
            return linear_layer_types(json, n_layers, rope_theta, path);
        }
        return Ok(vec![LayerAttn::global(rope_theta); n_layers]);
    };
    let local_theta = json
        .pointer("/rope_parameters/sliding_attention/rope_theta")
        .or_else(|| json.get("rope_local_base_freq"))
        .and_then(Json::as_f64)
        .unwrap_or(rope_theta);
    // Windowed layers with RoPE parameters of their own (transformers' per-layer-type
    // `rope_parameters`, Gemma 3's older `rope_local_base_freq`) rotate without the model's
    // scaling: a scaling of theirs is refused in `rope_scaling`.
    let own_rope = json.pointer("/rope_parameters/sliding_attention").is_some_and(Json::is_object) || json.get("rope_local_base_freq").is_some();
    let windowed = LayerAttn { window: Some(w as usize), rope_theta: local_theta, nope: false, unscaled: own_rope, linear: false };
    let Some(types) = json.get("layer_types").filter(|v| !v.is_null()) else { return Ok(vec![windowed; n_layers]) };
    typed_layers(types, n_layers, &[("full_attention", LayerAttn::global(rope_theta)), ("sliding_attention", windowed)], path)
}

/// A hybrid's layers from `layer_types`: `linear_attention` (Gated DeltaNet) or `full_attention`.
fn linear_layer_types(json: &Json, n_layers: usize, rope_theta: f64, path: &Path) -> Result<Vec<LayerAttn>> {
    let types =
        json.get("layer_types").filter(|v| !v.is_null()).ok_or_else(|| Error::file(path, "has no layer_types list; config.json is incomplete"))?;
    typed_layers(types, n_layers, &[("full_attention", LayerAttn::global(rope_theta)), ("linear_attention", LayerAttn::linear(rope_theta))], path)
}

/// `layer_types`, one of `kinds` (its name, how such a layer attends) per layer; any other kind is
/// refused.
fn typed_layers(types: &Json, n_layers: usize, kinds: &[(&str, LayerAttn)], path: &Path) -> Result<Vec<LayerAttn>> {
    let types = types.as_array().ok_or_else(|| Error::file(path, "has layer_types that is not a list; config.json is corrupt"))?;
    if types.len() != n_layers {
        return Err(Error::file(path, format!("lists {} layer_types for {n_layers} layers; config.json is inconsistent", types.len())));
    }
    let known = kinds.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(" and ");
    types
        .iter()
        .map(|t| {
            let kind = kinds.iter().find(|(name, _)| Some(*name) == t.as_str());
            kind.map(|(_, layer)| *layer).ok_or_else(|| {
                Error::file(
                    path,
                    format!(
                        "has a layer of type {:?}, which sinkscope does not compute here (it knows {known}); the numbers would be another model's",
                        t.as_str()
                    ),
                )
            })
        })
        .collect()
}

/// Marks the layers `no_rope_layers` (one flag per layer, SmolLM3's: 1 rotates, 0 does not)
/// leaves unrotated.
pub(crate) fn mark_nope_layers(json: &Json, layers: &mut [LayerAttn], path: &Path) -> Result<()> {
    let Some(flags) = json.get("no_rope_layers").filter(|v| !v.is_null()) else { return Ok(()) };
    let flags: Option<Vec<u64>> = flags.as_array().and_then(|a| a.iter().map(Json::as_u64).collect());
    let flags = flags.filter(|f| f.len() == layers.len() && f.iter().all(|&x| x <= 1)).ok_or_else(|| {
        Error::file(path, format!("has no_rope_layers that is not one 0/1 flag per layer ({}); config.json is corrupt", layers.len()))
    })?;
    layers.iter_mut().zip(flags).for_each(|(layer, rotates)| layer.nope = rotates == 0);
    Ok(())
}
