//! HF-layout models: `config.json` → [`LlamaConfig`], and weights from `model.safetensors` or a
//! sharded `model.safetensors.index.json`, memory-mapped and converted to f32 tensor by tensor.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use safetensors::{Dtype, SafeTensors};
use serde_json::Value as Json;

use super::llama::{switches, LlamaConfig, MlpKind, Moe, Param};
use super::rope::{RopeLayout, Yarn};
use super::source::shard_names;
use crate::error::{Error, IoContext, Result};

/// The `model_type`s whose weights follow the Llama layout (Qwen2 adds q/k/v biases, Qwen3
/// per-head q/k RMSNorm, OLMo 2 q/k RMSNorm across heads and post-norms instead of pre-norms),
/// GPT-NeoX (Pythia: LayerNorm, partial rotary, parallel residual, GELU MLP, fused q|k|v) and
/// Gemma 3 (sandwich norms stored as w − 1, GeGLU, √d embedding scale, windowed local layers),
/// Phi (one LayerNorm shared by parallel attention and MLP, partial rotary, biases everywhere)
/// and GPT-2 (learned absolute positions, Conv1D weights stored input-major).
/// and gpt-oss (a learned sink logit per head, a mixture of clamped-SwiGLU experts, windowed
/// layers between global ones, YaRN RoPE).
const SUPPORTED: [&str; 12] = ["gemma3", "gemma3_text", "gpt2", "gpt_neox", "gpt_oss", "llama", "mistral", "olmo2", "phi", "qwen2", "qwen3", "smollm"];

/// GPT-2's config keys for what the other families call `hidden_size` and so on.
const GPT2_KEYS: [(&str, &str); 5] =
    [("hidden_size", "n_embd"), ("num_hidden_layers", "n_layer"), ("num_attention_heads", "n_head"), ("max_position_embeddings", "n_positions"), ("intermediate_size", "n_inner")];

pub fn read_config(dir: &Path) -> Result<(LlamaConfig, bool, String)> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).with_file(&path)?;
    let json: Json = serde_json::from_str(&text).map_err(|e| Error::file(&path, format!("not valid JSON ({e})")))?;
    let model_type = json.get("model_type").and_then(Json::as_str).unwrap_or("");
    if !SUPPORTED.contains(&model_type) {
        return Err(Error::file(
            &path,
            format!("unknown architecture model_type '{model_type}'; sinkscope supports Llama-family models ({})", SUPPORTED.join(", ")),
        ));
    }
    let field = |key: &str| -> Option<&Json> {
        json.get(key).filter(|v| !v.is_null()).or_else(|| GPT2_KEYS.iter().find(|(k, _)| *k == key).and_then(|(_, alias)| json.get(*alias)).filter(|v| !v.is_null()))
    };
    let req = |key: &str| -> Result<usize> {
        field(key).and_then(Json::as_u64).map(|v| v as usize).ok_or_else(|| Error::file(&path, format!("missing or non-integer field \"{key}\"; config.json is incomplete")))
    };
    for (flag, set_means) in [
        ("qk_layernorm", "LayerNorms of queries and keys"),
        ("scale_attn_by_inverse_layer_idx", "attention scores divided by the layer number"),
    ] {
        if json.get(flag).and_then(Json::as_bool) == Some(true) {
            return Err(Error::file(&path, format!("sets {flag} ({set_means}), which sinkscope does not compute yet; the numbers would be another model's")));
        }
    }
    if json.get("scale_attn_weights").and_then(Json::as_bool) == Some(false) {
        return Err(Error::file(&path, "sets scale_attn_weights = false (unscaled attention scores), which sinkscope does not compute yet"));
    }
    let yarn = rope_scaling(&json, &path)?;
    let d_model = req("hidden_size")?;
    let n_heads = req("num_attention_heads")?;
    let (window, global_every) = windows(&json, model_type, &path)?;
    let rope_theta = json
        .get("rope_theta")
        .or_else(|| json.pointer("/rope_parameters/rope_theta"))
        .or_else(|| json.pointer("/rope_parameters/full_attention/rope_theta"))
        .or_else(|| json.get("rotary_emb_base"))
        .and_then(Json::as_f64)
        .unwrap_or(10000.0);
    let d_head = json.get("head_dim").and_then(Json::as_u64).map_or(d_model / n_heads.max(1), |v| v as usize);
    let mut arch = switches(model_type);
    if let Some(f) = json.pointer("/rope_parameters/partial_rotary_factor").or_else(|| json.get("rotary_pct")).or_else(|| json.get("partial_rotary_factor")).and_then(Json::as_f64) {
        // As transformers rounds it: int(head_dim × factor).
        arch.rotary_dims = Some((d_head as f64 * f) as usize).filter(|&r| r != d_head);
    }
    if let Some(parallel) = json.get("use_parallel_residual").and_then(Json::as_bool) {
        arch.parallel_residual = parallel;
    }
    (arch.window, arch.global_every) = (window, global_every);
    arch.rope_yarn = yarn;
    if arch.mlp == MlpKind::Moe {
        arch.moe = Some(Moe {
            experts: req("num_local_experts")?,
            top_k: req("num_experts_per_tok")?,
            alpha: json.get("swiglu_alpha").and_then(Json::as_f64).unwrap_or(1.702),
            limit: json.get("swiglu_limit").and_then(Json::as_f64).unwrap_or(7.0),
        });
    }
    arch.rope_local_theta = json.pointer("/rope_parameters/sliding_attention/rope_theta").or_else(|| json.get("rope_local_base_freq")).and_then(Json::as_f64);
    if let Some(s) = json.get("query_pre_attn_scalar").and_then(Json::as_f64).filter(|&s| s != d_head as f64) {
        arch.attn_scale = Some(1.0 / s.sqrt());
    }
    if json.get("attn_logit_softcapping").is_some_and(|v| !v.is_null()) {
        return Err(Error::file(&path, "sets attn_logit_softcapping, which sinkscope does not compute yet; the numbers would be another model's"));
    }
    arch.final_logit_softcap = json.get("final_logit_softcapping").and_then(Json::as_f64);
    let eps = json.get("rms_norm_eps").or_else(|| json.get("layer_norm_eps")).or_else(|| json.get("layer_norm_epsilon")).and_then(Json::as_f64);
    let cfg = LlamaConfig {
        n_layers: req("num_hidden_layers")?,
        n_heads,
        n_kv_heads: json.get("num_key_value_heads").and_then(Json::as_u64).map_or(n_heads, |v| v as usize),
        d_model,
        d_head,
        // GPT-2 leaves n_inner null for 4 × the residual width.
        d_ff: if model_type == "gpt2" && field("intermediate_size").is_none() { 4 * d_model } else { req("intermediate_size")? },
        vocab_size: req("vocab_size")?,
        context_len: req("max_position_embeddings")?,
        rope_theta,
        rope_layout: RopeLayout::HalfSplit,
        rms_eps: eps.unwrap_or(1e-6),
        arch,
    };
    let tied = json.get("tie_word_embeddings").and_then(Json::as_bool).unwrap_or(false);
    Ok((cfg, tied, model_type.to_owned()))
}

/// The sliding window a config sets and which layers it applies to: (keys a query sees, every
/// Nth layer global). Mistral's `sliding_window` covers every layer; Gemma 3 lists each layer's
/// type; a Qwen2/3 window (`use_sliding_window`, applied from `max_window_layers` on) is refused.
fn windows(json: &Json, model_type: &str, path: &Path) -> Result<(Option<usize>, Option<usize>)> {
    let context = json.get("max_position_embeddings").and_then(Json::as_u64).unwrap_or(u64::MAX);
    let Some(w) = json.get("sliding_window").and_then(Json::as_u64).filter(|&w| w < context) else { return Ok((None, None)) };
    match model_type {
        "qwen2" | "qwen3" if json.get("use_sliding_window").and_then(Json::as_bool).unwrap_or(false) => Err(Error::file(
            path,
            format!("sets use_sliding_window with sliding_window = {w}: its layers from max_window_layers on never see keys more than {w} back, which sinkscope does not compute for this family yet; the numbers would be another model's"),
        )),
        "qwen2" | "qwen3" => Ok((None, None)),
        "gemma3" | "gemma3_text" | "gpt_oss" => {
            let types: Vec<&str> = json.get("layer_types").and_then(Json::as_array).map(|a| a.iter().filter_map(Json::as_str).collect()).unwrap_or_default();
            let every = types.iter().position(|t| *t == "full_attention").map(|i| i + 1);
            let fits = every.is_some_and(|n| types.iter().enumerate().all(|(l, t)| (*t == "full_attention") == (l + 1).is_multiple_of(n)));
            if !fits {
                return Err(Error::file(path, "has layer_types that are not one global layer every N (what Gemma 3 and gpt-oss use); sinkscope cannot place its windows"));
            }
            Ok((Some(w as usize), every))
        }
        _ => Ok((Some(w as usize), None)),
    }
}

/// The RoPE scaling a config asks for, in transformers 4's `rope_scaling` or 5's `rope_parameters`
/// (per layer type too): none, or YaRN at the top level; any other kind is refused rather than
/// run as plain RoPE.
fn rope_scaling(json: &Json, path: &Path) -> Result<Option<Yarn>> {
    let mut yarn = None;
    for at in ["/rope_scaling", "/rope_parameters", "/rope_parameters/full_attention", "/rope_parameters/sliding_attention"] {
        let Some(p) = json.pointer(at).filter(|v| v.is_object()) else { continue };
        match p.get("rope_type").or_else(|| p.get("type")).and_then(Json::as_str) {
            None | Some("default") => {}
            Some("yarn") if !at.ends_with("attention") => {
                let num = |k: &str| p.get(k).and_then(Json::as_f64);
                let context = json.get("max_position_embeddings").and_then(Json::as_f64);
                let Some(original) = num("original_max_position_embeddings") else {
                    return Err(Error::file(path, "sets YaRN RoPE scaling without original_max_position_embeddings; config.json is incomplete"));
                };
                let Some(factor) = num("factor").or_else(|| context.map(|c| c / original)) else {
                    return Err(Error::file(path, "sets YaRN RoPE scaling without a factor; config.json is incomplete"));
                };
                // transformers' get_mscale: 0.1 · m · ln(s) + 1 above a scale of 1.
                let mscale = |m: f64| if factor <= 1.0 { 1.0 } else { 0.1 * m * factor.ln() + 1.0 };
                let attention_factor = num("attention_factor").unwrap_or_else(|| match (num("mscale").filter(|&m| m != 0.0), num("mscale_all_dim").filter(|&m| m != 0.0)) {
                    (Some(m), Some(all)) => mscale(m) / mscale(all),
                    _ => mscale(1.0),
                });
                yarn = Some(Yarn {
                    factor,
                    original_context: original,
                    beta_fast: num("beta_fast").filter(|&b| b != 0.0).unwrap_or(32.0),
                    beta_slow: num("beta_slow").filter(|&b| b != 0.0).unwrap_or(1.0),
                    truncate: p.get("truncate").and_then(Json::as_bool).unwrap_or(true),
                    attention_factor,
                });
            }
            Some(kind) => return Err(Error::file(path, format!("sets RoPE scaling '{kind}' ({}), which sinkscope does not compute yet; the numbers would be another model's", &at[1..]))),
        }
    }
    Ok(yarn)
}

/// Safetensors shards of one model: each file open, its header read through a map.
pub struct HfWeights {
    shards: Vec<(PathBuf, std::fs::File, memmap2::Mmap)>,
    /// tensor name → shard index
    index: HashMap<String, usize>,
    /// The `model_type`, whose weight names [`hf_name`] maps to, and its head count (to reorder
    /// a fused q|k|v).
    family: String,
    n_heads: usize,
}

impl HfWeights {
    pub fn open(dir: &Path, family: &str, n_heads: usize) -> Result<Self> {
        let single = dir.join("model.safetensors");
        let files = if single.is_file() {
            vec![single]
        } else {
            let index = dir.join("model.safetensors.index.json");
            if !index.is_file() {
                return Err(Error::file(dir, "has neither model.safetensors nor model.safetensors.index.json"));
            }
            shard_names(&index)?.into_iter().map(|s| dir.join(s)).collect()
        };
        let mut shards = Vec::new();
        let mut index = HashMap::new();
        for (i, path) in files.into_iter().enumerate() {
            let file = std::fs::File::open(&path).with_file(&path)?;
            // SAFETY: read-only map; see GgufFile::open.
            let mmap = unsafe { memmap2::Mmap::map(&file) }.with_file(&path)?;
            let st = SafeTensors::deserialize(&mmap).map_err(|e| {
                Error::file(&path, format!("safetensors header is invalid ({e}); the file is truncated or corrupt — re-download it"))
            })?;
            for name in st.names() {
                index.insert(name.to_owned(), i);
            }
            shards.push((path, file, mmap));
        }
        Ok(HfWeights { shards, index, family: family.to_owned(), n_heads })
    }

    /// The tensor `name` in the type the file stores it (f32, f16 or bf16). Its bytes are read
    /// from the file rather than through the map, so the mapped pages never count toward this
    /// process's memory on top of the copy.
    pub fn get(&self, name: &str) -> Result<Option<Tensor>> {
        let Some(&i) = self.index.get(name) else { return Ok(None) };
        let (path, file, mmap) = &self.shards[i];
        let st = SafeTensors::deserialize(mmap).map_err(|e| Error::file(path, format!("safetensors header is invalid ({e})")))?;
        let view = st.tensor(name).map_err(|e| Error::file(path, format!("tensor {name}: {e}")))?;
        // Where the tensor's bytes lie in the file (the header check above bounded them).
        let offset = view.data().as_ptr() as usize - mmap.as_ptr() as usize;
        let mut bytes = vec![0u8; view.data().len()];
        {
            use std::io::{Read, Seek, SeekFrom};
            let mut file = file;
            file.seek(SeekFrom::Start(offset as u64)).with_file(path)?;
            file.read_exact(&mut bytes).with_file(path)?;
        }
        let shape = view.shape().to_vec();
        let tensor = match view.dtype() {
            Dtype::F32 => Tensor::from_vec(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect::<Vec<f32>>(), shape, &Device::Cpu)?,
            Dtype::F16 => Tensor::from_vec(bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]])).collect::<Vec<_>>(), shape, &Device::Cpu)?,
            Dtype::BF16 => Tensor::from_vec(bytes.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]])).collect::<Vec<_>>(), shape, &Device::Cpu)?,
            other => return Err(Error::file(path, format!("tensor {name} has dtype {other:?}; only F32, F16 and BF16 are supported"))),
        };
        Ok(Some(tensor))
    }

    /// Whether the file has the tensor a canonical name maps to (without reading it).
    pub fn has_param(&self, canonical: &str) -> bool {
        hf_name(&self.family, canonical).is_some_and(|name| self.index.contains_key(&name))
    }

    /// Every tensor's storage type (read from the headers only).
    pub fn dtypes(&self) -> Vec<Dtype> {
        let headers = self.shards.iter().filter_map(|(_, _, mmap)| SafeTensors::deserialize(mmap).ok());
        headers.flat_map(|st| st.tensors().into_iter().map(|(_, view)| view.dtype())).collect()
    }

    /// Looks up a weight by its GGUF-style canonical name.
    pub fn param(&self, canonical: &str, tied: bool) -> Result<Option<Param>> {
        let Some(name) = hf_name(&self.family, canonical) else { return Ok(None) };
        if canonical == "output.weight" && tied {
            return Ok(None);
        }
        let Some(t) = self.get(&name)? else { return Ok(None) };
        if self.family == "gpt2" && t.rank() == 2 && GPT2_CONV1D.iter().any(|m| canonical.ends_with(m)) {
            // GPT-2's Conv1D stores (in, out); the decoder reads (out, in), as llama.cpp's
            // converter also transposes them.
            return Ok(Some(Param::Dense(t.t()?.contiguous()?)));
        }
        if self.family.starts_with("gemma") && canonical.ends_with("norm.weight") {
            // Gemma stores RMSNorm weights as w − 1 (its norm multiplies by 1 + w); the decoder's
            // norm multiplies by w, as llama.cpp's converter also arranges.
            return Ok(Some(Param::Dense((t.to_dtype(candle_core::DType::F32)? + 1.0)?)));
        }
        // GPT-NeoX fuses q|k|v per head ((head, q|k|v, d_head) rows); the decoder reads all
        // queries, then all keys, then all values (as llama.cpp's converter reorders them).
        let fused_qkv = self.family == "gpt_neox" && (canonical.ends_with("attn_qkv.weight") || canonical.ends_with("attn_qkv.bias"));
        Ok(Some(Param::Dense(if fused_qkv { self.regroup_qkv(t)? } else { t })))
    }

    /// NeoX's (head, q|k|v, d_head) rows as q | k | v. A shape that cannot be regrouped is left as
    /// it is: the loader's shape check names it.
    fn regroup_qkv(&self, t: Tensor) -> Result<Tensor> {
        let dims = t.dims().to_vec();
        let per_head = 3 * self.n_heads.max(1);
        Ok(match dims.first() {
            Some(&rows) if rows > 0 && rows.is_multiple_of(per_head) => {
                let rest: usize = dims[1..].iter().product();
                t.reshape((self.n_heads, 3, rows / per_head, rest))?.transpose(0, 1)?.contiguous()?.reshape(dims)?
            }
            _ => t,
        })
    }

    pub fn n_tensors(&self) -> usize {
        self.index.len()
    }
}

/// GPT-2's Conv1D weights, by canonical name.
const GPT2_CONV1D: [&str; 4] = ["attn_qkv.weight", "attn_output.weight", "ffn_up.weight", "ffn_down.weight"];

/// GGUF-style canonical names (what [`super::llama::Llama::load`] asks for) → a family's HF names.
fn hf_name(family: &str, canonical: &str) -> Option<String> {
    match family {
        "gpt_neox" => return NEOX.name(canonical),
        "gpt2" => return GPT2.name(canonical),
        "gpt_oss" => {
            if let Some(name) = gpt_oss_name(canonical) {
                return Some(name);
            }
        }
        "phi" => return PHI.name(canonical),
        _ => {}
    }
    let fixed = match canonical {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Some(f.to_owned());
    }
    let rest = canonical.strip_prefix("blk.")?;
    let (layer, tail) = rest.split_once('.')?;
    let mapped = match tail {
        "attn_norm.weight" => "input_layernorm.weight",
        // Gemma's sandwich: the MLP's input norm has its own name.
        "ffn_norm.weight" if family.starts_with("gemma") => "pre_feedforward_layernorm.weight",
        "ffn_norm.weight" => "post_attention_layernorm.weight",
        "attn_q.weight" => "self_attn.q_proj.weight",
        "attn_k.weight" => "self_attn.k_proj.weight",
        "attn_v.weight" => "self_attn.v_proj.weight",
        "attn_q.bias" => "self_attn.q_proj.bias",
        "attn_k.bias" => "self_attn.k_proj.bias",
        "attn_v.bias" => "self_attn.v_proj.bias",
        "attn_output.weight" => "self_attn.o_proj.weight",
        "attn_output.bias" => "self_attn.o_proj.bias",
        "attn_q_norm.weight" => "self_attn.q_norm.weight",
        "post_attention_norm.weight" => "post_attention_layernorm.weight",
        "post_ffw_norm.weight" => "post_feedforward_layernorm.weight",
        "attn_k_norm.weight" => "self_attn.k_norm.weight",
        "ffn_gate.weight" => "mlp.gate_proj.weight",
        "ffn_up.weight" => "mlp.up_proj.weight",
        "ffn_down.weight" => "mlp.down_proj.weight",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{mapped}"))
}

/// A family whose HF names are `{layer_prefix}{layer}.{module}.{weight|bias}`: fixed names for
/// the embeddings, final norm and head, and a map of each block's modules.
struct NameMap {
    fixed: &'static [(&'static str, &'static str)],
    layer_prefix: &'static str,
    modules: &'static [(&'static str, &'static str)],
}

impl NameMap {
    fn name(&self, canonical: &str) -> Option<String> {
        if let Some((_, hf)) = self.fixed.iter().find(|(c, _)| *c == canonical) {
            return Some((*hf).to_owned());
        }
        let (layer, tail) = canonical.strip_prefix("blk.")?.split_once('.')?;
        let (module, kind) = tail.rsplit_once('.')?;
        let (_, mapped) = self.modules.iter().find(|(c, _)| *c == module)?;
        Some(format!("{}{layer}.{mapped}.{kind}", self.layer_prefix))
    }
}

/// GPT-NeoX's (Pythia's) names.
const NEOX: NameMap = NameMap {
    fixed: &[
        ("token_embd.weight", "gpt_neox.embed_in.weight"),
        ("output_norm.weight", "gpt_neox.final_layer_norm.weight"),
        ("output_norm.bias", "gpt_neox.final_layer_norm.bias"),
        ("output.weight", "embed_out.weight"),
    ],
    layer_prefix: "gpt_neox.layers.",
    modules: &[
        ("attn_norm", "input_layernorm"),
        ("ffn_norm", "post_attention_layernorm"),
        ("attn_qkv", "attention.query_key_value"),
        ("attn_output", "attention.dense"),
        ("ffn_up", "mlp.dense_h_to_4h"),
        ("ffn_down", "mlp.dense_4h_to_h"),
    ],
};

/// GPT-2's names (the output head is tied to `wte`).
const GPT2: NameMap = NameMap {
    fixed: &[
        ("token_embd.weight", "transformer.wte.weight"),
        ("position_embd.weight", "transformer.wpe.weight"),
        ("output_norm.weight", "transformer.ln_f.weight"),
        ("output_norm.bias", "transformer.ln_f.bias"),
        ("output.weight", "lm_head.weight"),
    ],
    layer_prefix: "transformer.h.",
    modules: &[("attn_norm", "ln_1"), ("ffn_norm", "ln_2"), ("attn_qkv", "attn.c_attn"), ("attn_output", "attn.c_proj"), ("ffn_up", "mlp.c_fc"), ("ffn_down", "mlp.c_proj")],
};

/// Phi's (Phi-1/1.5/2) names.
const PHI: NameMap = NameMap {
    fixed: &[
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("output_norm.weight", "model.final_layernorm.weight"),
        ("output_norm.bias", "model.final_layernorm.bias"),
        ("output.weight", "lm_head.weight"),
        ("output.bias", "lm_head.bias"),
    ],
    layer_prefix: "model.layers.",
    modules: &[
        ("attn_norm", "input_layernorm"),
        ("attn_q", "self_attn.q_proj"),
        ("attn_k", "self_attn.k_proj"),
        ("attn_v", "self_attn.v_proj"),
        ("attn_output", "self_attn.dense"),
        ("ffn_up", "mlp.fc1"),
        ("ffn_down", "mlp.fc2"),
    ],
};

/// gpt-oss's names beyond Llama's: the sink logits, the router and the experts (kept in
/// transformers' layout, see `MoeMlp::load`).
fn gpt_oss_name(canonical: &str) -> Option<String> {
    let (layer, tail) = canonical.strip_prefix("blk.")?.split_once('.')?;
    let mapped = match tail {
        "attn_sinks.weight" => "self_attn.sinks",
        "ffn_gate_inp.weight" => "mlp.router.weight",
        "ffn_gate_inp.bias" => "mlp.router.bias",
        "ffn_gate_up_exps.weight" => "mlp.experts.gate_up_proj",
        "ffn_gate_up_exps.bias" => "mlp.experts.gate_up_proj_bias",
        "ffn_down_exps.weight" => "mlp.experts.down_proj",
        "ffn_down_exps.bias" => "mlp.experts.down_proj_bias",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{mapped}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_names_map_to_hf() {
        assert_eq!(hf_name("llama", "blk.3.attn_q.weight").as_deref(), Some("model.layers.3.self_attn.q_proj.weight"));
        assert_eq!(hf_name("llama", "token_embd.weight").as_deref(), Some("model.embed_tokens.weight"));
        assert_eq!(hf_name("llama", "blk.0.nope"), None);
        assert_eq!(hf_name("gpt_neox", "blk.1.attn_qkv.bias").as_deref(), Some("gpt_neox.layers.1.attention.query_key_value.bias"));
    }
}
