//! DeepSeek-V2 / V2-Lite as transformers defines them (`deepseek_v2`): multi-head latent attention
//! ([`Mla`]: queries direct or through a low-rank path, one cached latent and RoPE key per token,
//! RoPE on adjacent pairs as `view_as_complex` pairs them) and DeepSeek's mixture of experts — a
//! softmax over every expert, the top k kept unnormalised (greedy, or within the best groups),
//! scaled by `routed_scaling_factor`, beside ungated shared experts, the first
//! `first_k_dense_replace` layers dense.

use std::path::Path;

use serde_json::{Map, Value as Json};

use super::spec::{FamilySpec, HfNames, BASE, LLAMA_FIXED, LLAMA_MODULES};
use crate::error::{Error, Result};
use crate::model::decoder::config::{ArchSwitches, ExpertAct, Mla, MlpKind, Moe, LLAMA};
use crate::model::rope::RopeLayout;

pub const SPEC: FamilySpec = FamilySpec {
    name: "deepseek_v2",
    hf_types: &["deepseek_v2"],
    // llama.cpp's converter splits kv_b_proj into attn_k_b (transposed) and attn_v_b, and keeps
    // the RoPE key's adjacent pairs (llama.cpp's NORM type).
    gguf_archs: &["deepseek2"],
    hf_rope: RopeLayout::Interleaved,
    // The shapes come from the config (`read_config`).
    switches: ArchSwitches {
        mlp: MlpKind::Moe(Moe { ungated_shared: true, ..Moe::plain(0, 0, false, ExpertAct::SwiGlu) }),
        mla: Some(Mla { q_lora_rank: 0, kv_lora_rank: 0, qk_nope: 0, qk_rope: 0, v_head: 0 }),
        ..LLAMA
    },
    hf_names: HfNames {
        fixed: LLAMA_FIXED,
        layer_prefix: "model.layers.",
        tails: &[],
        modules: &[DEEPSEEK_MODULES, LLAMA_MODULES],
        experts: &[
            ("ffn_gate_exps", "mlp.experts.{x}.gate_proj"),
            ("ffn_up_exps", "mlp.experts.{x}.up_proj"),
            ("ffn_down_exps", "mlp.experts.{x}.down_proj"),
        ],
    },
    hf_config: deepseek_config,
    ..BASE
};

/// The latent attention's and the mixture's modules under llama.cpp's names.
const DEEPSEEK_MODULES: &[(&str, &str)] = &[
    ("attn_q_a", "self_attn.q_a_proj"),
    ("attn_q_a_norm", "self_attn.q_a_layernorm"),
    ("attn_q_b", "self_attn.q_b_proj"),
    ("attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa"),
    ("attn_kv_a_norm", "self_attn.kv_a_layernorm"),
    ("attn_kv_b", "self_attn.kv_b_proj"),
    ("ffn_gate_inp", "mlp.gate"),
    ("ffn_gate_shexp", "mlp.shared_experts.gate_proj"),
    ("ffn_up_shexp", "mlp.shared_experts.up_proj"),
    ("ffn_down_shexp", "mlp.shared_experts.down_proj"),
];

/// DeepSeek's mixture fields as the reader knows them (`num_experts`, the shared experts' summed
/// width), refusing what transformers' DeepSeek-V2 computes differently from what the config
/// says or what sinkscope does not compute; fields of training only are dropped.
pub fn deepseek_config(json: &mut Map<String, Json>, path: &Path) -> Result<()> {
    let refuse = |what: String| -> Result<()> {
        Err(Error::file(path, format!("{what}, which sinkscope does not compute for DeepSeek-V2 yet; the numbers would be another model's")))
    };
    let text = |json: &Map<String, Json>, k: &str| json.get(k).and_then(Json::as_str).map(str::to_owned);
    // YaRN on the decoupled RoPE key as transformers' DeepSeek-V2 computes it (cos/sin × the
    // mscale ratio; the softmax scale left at (qk_nope + qk_rope)^−½, where llama.cpp and DeepSeek's
    // own code multiply it by mscale²: a GGUF runs llama.cpp's); another scaling is refused.
    if let Some(s) = json.get("rope_scaling").filter(|v| !v.is_null()) {
        let kind = s.get("type").or_else(|| s.get("rope_type")).and_then(Json::as_str);
        if kind != Some("yarn") {
            refuse(format!("sets rope_scaling {s} (a RoPE scaling other than YaRN on the decoupled RoPE key)"))?;
        }
    }
    match text(json, "topk_method").as_deref() {
        None | Some("greedy") => ["n_group", "topk_group"].iter().for_each(|k| drop(json.remove(*k))),
        Some("group_limited_greedy") => {}
        Some(other) => refuse(format!("routes experts by topk_method '{other}'"))?,
    }
    if let Some(other) = text(json, "scoring_func").filter(|s| s != "softmax") {
        refuse(format!("scores experts by '{other}'"))?;
    }
    if json.get("moe_layer_freq").and_then(Json::as_u64).is_some_and(|f| f != 1) {
        refuse("sets moe_layer_freq ≠ 1 (experts every few layers; transformers ignores it, llama.cpp does not)".into())?;
    }
    if json.get("norm_topk_prob").and_then(Json::as_bool) == Some(true) {
        refuse("sets norm_topk_prob (transformers' DeepSeek-V2 stores it without applying it, llama.cpp applies it)".into())?;
    }
    let count = |json: &Map<String, Json>, k: &str| json.get(k).and_then(Json::as_u64);
    if let Some(e) = count(json, "n_routed_experts") {
        json.insert("num_experts".into(), e.into());
    }
    let shared = count(json, "n_shared_experts").unwrap_or(0) * count(json, "moe_intermediate_size").unwrap_or(0);
    json.insert("shared_expert_intermediate_size".into(), shared.into());
    // The loss's settings and the expert-parallel layout: nothing the forward computes.
    for k in ["n_routed_experts", "n_shared_experts", "topk_method", "scoring_func", "moe_layer_freq", "aux_loss_alpha", "seq_aux", "ep_size"] {
        json.remove(k);
    }
    Ok(())
}
