//! Qwen3-Next: a hybrid of Gated DeltaNet layers (linear attention with a recurrent state, no KV
//! cache) and gated attention layers (Qwen3's per-head q/k norms, partial RoPE, each head's output
//! × σ(gate) with the gate computed beside its query), three linear layers per attention layer
//! (`layer_types`, or every `full_attention_interval`-th layer attending); every RMSNorm but the
//! DeltaNet's gated one multiplies by 1 + w; Qwen2-MoE's experts (normalised top-k, gated shared
//! expert).

use std::path::Path;

use candle_core::{DType, Tensor};
use serde_json::{Map, Value as Json};

use super::qwen2_moe::qwen_moe_config;
use super::spec::{FamilySpec, HfNames, TensorContext, BASE, LLAMA_FIXED, LLAMA_MODULES, QWEN_MOE_EXPERTS, QWEN_MOE_MODULES};
use crate::error::{Error, Result};
use crate::model::decoder::config::{ArchSwitches, DeltaNetShape, ExpertAct, MlpKind, Moe, QkNorm, LLAMA};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "qwen3_next",
    hf_types: &["qwen3_next"],
    gguf_archs: &["qwen3next"],
    gguf_rope: RopeLayout::HalfSplit,
    // The linear layers' shape and the experts' counts come from the file.
    switches: ArchSwitches {
        qk_norm: QkNorm::PerHead,
        mlp: MlpKind::Moe(Moe::plain(0, 0, true, ExpertAct::SwiGlu)),
        gated_attention: true,
        delta_net: Some(DeltaNetShape { k_heads: 0, v_heads: 0, k_dim: 0, v_dim: 0, conv_kernel: 0 }),
        ..LLAMA
    },
    hf_names: HfNames {
        fixed: LLAMA_FIXED,
        layer_prefix: "model.layers.",
        tails: &[&[("ssm_dt.bias", "linear_attn.dt_bias"), ("ssm_a", "linear_attn.A_log")]],
        modules: &[DELTA_NET_MODULES, QWEN_MOE_MODULES, LLAMA_MODULES],
        experts: QWEN_MOE_EXPERTS,
    },
    hf_config: qwen3_next_config,
    hf_tensor: qwen3_next_tensor,
    gguf_renames: &[("ffn_norm", "post_attention_norm")],
    ..BASE
};

/// The Gated DeltaNet's modules under llama.cpp's names: q|k|v and z both come out of
/// `in_proj_qkvz` (split by [`qwen3_next_tensor`]).
const DELTA_NET_MODULES: &[(&str, &str)] = &[
    ("attn_qkv", "linear_attn.in_proj_qkvz"),
    ("attn_gate", "linear_attn.in_proj_qkvz"),
    ("ssm_ba", "linear_attn.in_proj_ba"),
    ("ssm_conv1d", "linear_attn.conv1d"),
    ("ssm_norm", "linear_attn.norm"),
    ("ssm_out", "linear_attn.out_proj"),
];

/// Qwen-MoE's dense-layer refusals; `layer_types` spelled out from `full_attention_interval`
/// where a config gives only that (as transformers does).
fn qwen3_next_config(json: &mut Map<String, Json>, path: &Path) -> Result<()> {
    let interval = json.remove("full_attention_interval").map(|v| v.as_u64().filter(|&n| n > 0)).unwrap_or(Some(4));
    if json.get("layer_types").is_none_or(Json::is_null) {
        let interval =
            interval.ok_or_else(|| Error::file(path, "has a full_attention_interval that is not a positive integer; config.json is corrupt"))?;
        let layers = json.get("num_hidden_layers").and_then(Json::as_u64).unwrap_or(0).min(crate::model::decoder::config::MAX_SIZE as u64);
        let types = (0..layers).map(|l| Json::from(if (l + 1) % interval == 0 { "full_attention" } else { "linear_attention" })).collect();
        json.insert("layer_types".into(), Json::Array(types));
    }
    qwen_moe_config(json, path)
}

/// transformers' layout → the decoder's (llama.cpp's converter makes the same changes): norms
/// stored as w for 1 + w (all but the DeltaNet's gated norm), `A_log` → −exp(A_log), the
/// convolution's (channels, 1, kernel) → (channels, kernel), and `in_proj_qkvz`'s rows per key
/// head [q | k | v | z] → all q, all k, all v (`attn_qkv`) and all z (`attn_gate`).
fn qwen3_next_tensor(canonical: &str, t: Tensor, cx: &TensorContext) -> Result<Tensor> {
    let kind = canonical.rsplit_once('.').map_or(canonical, |(head, last)| if last == "weight" || last == "bias" { head } else { canonical });
    let kind = kind.rsplit('.').next().unwrap_or(kind);
    Ok(match kind {
        "ssm_norm" => t,
        k if k.ends_with("norm") => (t.to_dtype(DType::F32)? + 1.0)?,
        "ssm_a" => t.to_dtype(DType::F32)?.exp()?.neg()?,
        "ssm_conv1d" => t.squeeze(1)?,
        "attn_qkv" | "attn_gate" => {
            let s = cx.delta_net.ok_or_else(|| Error::Internal("a DeltaNet tensor without the layers' shape".into()))?;
            let (dk, rv) = (s.k_dim, s.v_heads / s.k_heads * s.v_dim);
            let group = 2 * dk + 2 * rv;
            let parts: &[(usize, usize)] = if kind == "attn_qkv" { &[(0, dk), (dk, dk), (2 * dk, rv)] } else { &[(2 * dk + rv, rv)] };
            let rows: Vec<u32> =
                parts.iter().flat_map(|&(at, len)| (0..s.k_heads).flat_map(move |g| (0..len).map(move |i| (g * group + at + i) as u32))).collect();
            t.index_select(&Tensor::new(rows.as_slice(), t.device())?, 0)?.contiguous()?
        }
        _ => t,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_types_are_spelled_out_from_the_attention_interval_as_transformers_does() {
        let path = Path::new("config.json");
        let types = |json: &str| -> Result<Json> {
            let Json::Object(mut map) = serde_json::from_str(json).unwrap() else { unreachable!() };
            qwen3_next_config(&mut map, path)?;
            assert!(!map.contains_key("full_attention_interval"));
            Ok(map["layer_types"].clone())
        };
        let full = |l: &[usize], n: usize| -> Json {
            (0..n).map(|i| Json::from(if l.contains(&i) { "full_attention" } else { "linear_attention" })).collect()
        };
        assert_eq!(types(r#"{"num_hidden_layers": 8}"#).unwrap(), full(&[3, 7], 8));
        assert_eq!(types(r#"{"num_hidden_layers": 4, "full_attention_interval": 2}"#).unwrap(), full(&[1, 3], 4));
        // A config's own list wins.
        assert_eq!(
            types(r#"{"num_hidden_layers": 2, "full_attention_interval": 2, "layer_types": ["full_attention", "linear_attention"]}"#).unwrap(),
            full(&[0], 2)
        );
        let e = types(r#"{"num_hidden_layers": 4, "full_attention_interval": 0}"#).unwrap_err().to_string();
        assert!(e.contains("full_attention_interval"), "{e}");
        // Dense layers among the experts stay refused.
        assert!(types(r#"{"num_hidden_layers": 4, "mlp_only_layers": [0]}"#).is_err());
    }
}
