//! HF-layout models: `config.json` → [`DecoderConfig`] (through the family's config rewrite), and
//! weights from `model.safetensors` or a sharded `model.safetensors.index.json`, read tensor by
//! tensor under the family's names and fixed into the decoder's layout.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use safetensors::{Dtype, SafeTensors};
use serde_json::Value as Json;

use super::decoder::config::MAX_SIZE;
use super::decoder::config::{ArchSwitches, DeltaNetShape, ExpertAct, Mla};
use super::decoder::{DecoderConfig, MlpKind, Moe, Param};
use super::family::{beyond, Family, Multipliers, TensorContext};
use super::hf_fields::check_fields;
use super::hf_layers::{layer_attention, mark_nope_layers};
use super::rope::{FreqFactors, Yarn};
use super::source::shard_names;
use super::unread::{self, Unread};
use crate::error::{Error, IoContext, Result};

/// What `config.json` says of a model.
pub struct HfConfig {
    pub cfg: DecoderConfig,
    /// Whether the output head is the embedding matrix.
    pub tied: bool,
    pub family: Family,
    /// The `model_type` as written.
    pub model_type: String,
    /// The fields sinkscope neither reads nor knows to be inert.
    pub unread: Vec<Unread>,
}

/// Reads `config.json`: the configuration, refusing what sinkscope does not compute by name.
pub fn read_config(dir: &Path) -> Result<HfConfig> {
    let path = dir.join("config.json");
    let text = crate::io::regular::read_to_string(&path).with_file(&path)?;
    let parsed: Json = serde_json::from_str(&text).map_err(|e| Error::file(&path, format!("not valid JSON ({e})")))?;
    let Json::Object(mut map) = parsed else { return Err(Error::file(&path, "is not a JSON object; config.json is corrupt")) };
    let model_type = map.get("model_type").and_then(Json::as_str).unwrap_or("").to_owned();
    let family = Family::from_hf(&model_type).ok_or_else(|| match beyond::hf(&model_type) {
        Some(missing) => Error::file(
            &path,
            format!(
                "model_type '{model_type}' has {missing}, which sinkscope does not compute yet; it reads the model_types {}",
                Family::hf_supported()
            ),
        ),
        None => {
            Error::file(&path, format!("unknown architecture model_type '{model_type}'; sinkscope reads the model_types {}", Family::hf_supported()))
        }
    })?;
    (family.hf_config)(&mut map, &path)?;
    // After the family's rewrite: a field it consumed (checked and removed) has been read.
    let unread = unread::hf_fields(map.iter().filter(|(_, v)| !v.is_null()).map(|(k, _)| k.as_str()), family.multipliers);
    let json = Json::Object(map);
    check_activation(&json, &family, &path)?;
    check_fields(&json).map_err(|why| Error::file(&path, format!("{why}; config.json is corrupt, or not of a kind sinkscope reads")))?;
    let field = |key: &str| -> Option<&Json> { json.get(key).filter(|v| !v.is_null()) };
    let req = |key: &str| -> Result<usize> {
        field(key)
            .and_then(Json::as_u64)
            .map(|v| v as usize)
            .ok_or_else(|| Error::file(&path, format!("missing or non-integer field \"{key}\"; config.json is incomplete")))
    };
    refuse_attention_switches(&json, &path)?;
    let scaling = rope_scaling(&json, &path)?;
    let d_model = req("hidden_size")?;
    let n_heads = req("num_attention_heads")?;
    let n_layers = req("num_hidden_layers")?;
    if n_layers == 0 || n_layers > MAX_SIZE {
        return Err(Error::file(&path, format!("model configuration is impossible: layers = {n_layers}")));
    }
    let rope_theta = json
        .get("rope_theta")
        .or_else(|| json.pointer("/rope_parameters/rope_theta"))
        .or_else(|| json.pointer("/rope_parameters/full_attention/rope_theta"))
        .or_else(|| json.get("rotary_emb_base"))
        .and_then(Json::as_f64)
        .unwrap_or(10000.0);
    let mut layers = layer_attention(&json, n_layers, rope_theta, family.switches.delta_net.is_some(), &path)?;
    mark_nope_layers(&json, &mut layers, &path)?;
    let mut d_head = json.get("head_dim").and_then(Json::as_u64).map_or(d_model / n_heads.max(1), |v| v as usize);
    let mut n_kv_heads = json.get("num_key_value_heads").and_then(Json::as_u64).map_or(n_heads, |v| v as usize);
    let mut arch = family.switches;
    if let Some(f) = json
        .pointer("/rope_parameters/partial_rotary_factor")
        .or_else(|| json.get("rotary_pct"))
        .or_else(|| json.get("partial_rotary_factor"))
        .and_then(Json::as_f64)
    {
        // As transformers rounds it: int(head_dim × factor).
        arch.rotary_dims = Some((d_head as f64 * f) as usize).filter(|&r| r != d_head);
    }
    if let Some(parallel) = json.get("use_parallel_residual").and_then(Json::as_bool) {
        arch.parallel_residual = parallel;
    }
    let rope_freq_factors = match scaling {
        Some(RopeScaling::Yarn(yarn)) => {
            arch.rope_yarn = Some(yarn);
            None
        }
        Some(RopeScaling::Interpolated(interpolation)) => Some(interpolation.factors(rope_theta, arch.rotary_dims.unwrap_or(d_head))),
        None => None,
    };
    let mut d_ff = req("intermediate_size");
    if let MlpKind::Moe(defaults) = arch.mlp {
        let moe = read_experts(&json, defaults, &req)?;
        arch.mlp = MlpKind::Moe(moe);
        // The experts' width; `intermediate_size` is then the dense layers' (Qwen-MoE).
        if let Some(ff) = json.get("moe_intermediate_size").and_then(Json::as_u64) {
            d_ff = Ok(ff as usize);
        }
    }
    if arch.mla.is_some() {
        let mla = read_mla(&json, &req)?;
        (d_head, n_kv_heads) = (mla.cached_width(), 1);
        arch.set_latent(mla);
    }
    if arch.delta_net.is_some() {
        arch.delta_net = Some(DeltaNetShape {
            k_heads: req("linear_num_key_heads")?,
            v_heads: req("linear_num_value_heads")?,
            k_dim: req("linear_key_head_dim")?,
            v_dim: req("linear_value_head_dim")?,
            conv_kernel: req("linear_conv_kernel_dim")?,
        });
    }
    if let Some(s) = json.get("query_pre_attn_scalar").and_then(Json::as_f64).filter(|&s| s != d_head as f64) {
        arch.attn_scale = Some(1.0 / s.sqrt());
    }
    match family.multipliers {
        Some(Multipliers::Granite) => read_multipliers(&json, &mut arch, d_head, &path)?,
        // Logits × logit_scale, as a divisor (exact for the powers of two Cohere ships).
        Some(Multipliers::LogitScale) => arch.logit_divisor = scale_factor(&json, "logit_scale", &path)?.filter(|&s| s != 1.0).map(|s| 1.0 / s),
        None => {}
    }
    arch.attn_logit_softcap = json.get("attn_logit_softcapping").and_then(Json::as_f64);
    arch.final_logit_softcap = json.get("final_logit_softcapping").and_then(Json::as_f64);
    let eps = json.get("rms_norm_eps").or_else(|| json.get("layer_norm_eps")).or_else(|| json.get("layer_norm_epsilon")).and_then(Json::as_f64);
    let cfg = DecoderConfig {
        n_layers,
        n_heads,
        n_kv_heads,
        d_model,
        d_head,
        d_ff: d_ff?,
        vocab_size: req("vocab_size")?,
        context_len: req("max_position_embeddings")?,
        rope_theta,
        rope_layout: family.hf_rope,
        rope_freq_factors,
        rms_eps: eps.unwrap_or(1e-6),
        arch,
        layers,
    };
    let tied = json.get("tie_word_embeddings").and_then(Json::as_bool).unwrap_or(false);
    Ok(HfConfig { cfg, tied, family, model_type, unread })
}

/// Refuses attention switches some configs set that sinkscope does not compute.
fn refuse_attention_switches(json: &Json, path: &Path) -> Result<()> {
    for (flag, set_means) in [
        ("qk_layernorm", "LayerNorms of queries and keys"),
        ("scale_attn_by_inverse_layer_idx", "attention scores divided by the layer number"),
        ("use_bidirectional_attention", "queries that see later keys"),
    ] {
        if json.get(flag).and_then(Json::as_bool) == Some(true) {
            return Err(Error::file(
                path,
                format!("sets {flag} ({set_means}), which sinkscope does not compute yet; the numbers would be another model's"),
            ));
        }
    }
    if json.get("scale_attn_weights").and_then(Json::as_bool) == Some(false) {
        return Err(Error::file(path, "sets scale_attn_weights = false (unscaled attention scores), which sinkscope does not compute yet"));
    }
    Ok(())
}

/// A mixture of experts as the config states it, the family's `defaults` where it is silent.
fn read_experts(json: &Json, defaults: Moe, req: &dyn Fn(&str) -> Result<usize>) -> Result<Moe> {
    let num = |k: &str| json.get(k).and_then(Json::as_u64).map(|v| v as usize);
    let expert = match defaults.expert {
        ExpertAct::ClampedSwiGlu { alpha, limit } => ExpertAct::ClampedSwiGlu {
            alpha: json.get("swiglu_alpha").and_then(Json::as_f64).unwrap_or(alpha),
            limit: json.get("swiglu_limit").and_then(Json::as_f64).unwrap_or(limit),
        },
        ExpertAct::SwiGlu => ExpertAct::SwiGlu,
    };
    Ok(Moe {
        experts: num("num_local_experts").or_else(|| num("num_experts")).map_or_else(|| req("num_local_experts"), Ok)?,
        top_k: req("num_experts_per_tok")?,
        norm_top_k: json.get("norm_topk_prob").and_then(Json::as_bool).unwrap_or(defaults.norm_top_k),
        expert,
        shared_ff: num("shared_expert_intermediate_size").unwrap_or(0),
        // DeepSeek's: dense first layers of `intermediate_size`, grouped routing, scaled weights.
        dense_layers: num("first_k_dense_replace").unwrap_or(0),
        dense_ff: num("first_k_dense_replace").filter(|&n| n > 0).map_or(Ok(0), |_| req("intermediate_size"))?,
        groups: num("n_group").unwrap_or(0),
        top_groups: num("topk_group").unwrap_or(0),
        routed_scale: json.get("routed_scaling_factor").and_then(Json::as_f64).filter(|&f| f != 1.0),
        ..defaults
    })
}

/// Multi-head latent attention's shape, from DeepSeek's fields (no `q_lora_rank`: one `q_proj`).
fn read_mla(json: &Json, req: &dyn Fn(&str) -> Result<usize>) -> Result<Mla> {
    Ok(Mla {
        q_lora_rank: json.get("q_lora_rank").and_then(Json::as_u64).map_or(0, |r| r as usize),
        kv_lora_rank: req("kv_lora_rank")?,
        qk_nope: req("qk_nope_head_dim")?,
        qk_rope: req("qk_rope_head_dim")?,
        v_head: req("v_head_dim")?,
    })
}

/// Granite's multipliers ([`Multipliers::hf_fields`]); transformers' default for each,
/// `attention_multiplier` included, is 1.0.
fn read_multipliers(json: &Json, arch: &mut ArchSwitches, d_head: usize, path: &Path) -> Result<()> {
    let factor = |k: &str| -> Result<f64> { Ok(scale_factor(json, k, path)?.unwrap_or(1.0)) };
    let attention = factor("attention_multiplier")?;
    arch.attn_scale = Some(attention).filter(|&m| m != 1.0 / (d_head as f64).sqrt());
    arch.embed_multiplier = Some(factor("embedding_multiplier")?).filter(|&m| m != 1.0);
    arch.residual_multiplier = Some(factor("residual_multiplier")?).filter(|&m| m != 1.0);
    arch.logit_divisor = Some(factor("logits_scaling")?).filter(|&d| d != 1.0);
    Ok(())
}

/// A scaling field of config.json: absent (or null), or a finite non-zero number.
fn scale_factor(json: &Json, k: &str, path: &Path) -> Result<Option<f64>> {
    match json.get(k).filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|f| f.is_finite() && *f != 0.0)
            .map(Some)
            .ok_or_else(|| Error::file(path, format!("has {k} = {v}, not a non-zero number; config.json is corrupt"))),
    }
}

/// Refuses an activation other than the one the family's MLP computes (`hidden_act`,
/// Gemma's `hidden_activation`, GPT-2's `activation_function`, Falcon's `activation`).
fn check_activation(json: &Json, family: &Family, path: &Path) -> Result<()> {
    let accepted: &[&str] = match family.switches.mlp {
        MlpKind::SwiGlu | MlpKind::Moe(_) => &["silu", "swish"],
        MlpKind::Gelu => &["gelu"],
        MlpKind::GeGluTanh | MlpKind::GeluTanh => &["gelu_pytorch_tanh", "gelu_new"],
    };
    for field in ["hidden_act", "hidden_activation", "activation_function", "activation"] {
        match json.get(field) {
            None | Some(Json::Null) => {}
            Some(Json::String(act)) if accepted.contains(&act.as_str()) => {}
            Some(other) => {
                return Err(Error::file(
                    path,
                    format!(
                        "sets {field} = {other}, but sinkscope computes {} for {} models ({}); the numbers would be another model's",
                        accepted[0],
                        family.name,
                        accepted.join(" or ")
                    ),
                ))
            }
        }
    }
    Ok(())
}

/// A RoPE scaling transformers defines and sinkscope computes.
enum RopeScaling {
    Yarn(Yarn),
    Interpolated(Interpolation),
}

/// The scalings that divide each frequency by a factor (see [`FreqFactors`]).
enum Interpolation {
    Linear(f64),
    Llama3 { factor: f64, low_freq_factor: f64, high_freq_factor: f64, original: f64 },
}

impl Interpolation {
    fn factors(&self, theta: f64, rot_dims: usize) -> FreqFactors {
        match *self {
            Interpolation::Linear(factor) => FreqFactors::linear(factor, rot_dims / 2),
            Interpolation::Llama3 { factor, low_freq_factor, high_freq_factor, original } => {
                FreqFactors::llama3(theta, rot_dims, factor, low_freq_factor, high_freq_factor, original)
            }
        }
    }
}

/// The RoPE scaling a config asks for, in transformers 4's `rope_scaling` or 5's `rope_parameters`
/// (per layer type too): none, YaRN, linear or Llama 3's for the model's own base; any other
/// kind, or a scaling of Gemma-style local layers, is refused rather than run as plain RoPE.
fn rope_scaling(json: &Json, path: &Path) -> Result<Option<RopeScaling>> {
    let mut scaling = None;
    for at in ["/rope_scaling", "/rope_parameters", "/rope_parameters/full_attention", "/rope_parameters/sliding_attention"] {
        let Some(p) = json.pointer(at).filter(|v| v.is_object()) else { continue };
        let num = |k: &str| p.get(k).and_then(Json::as_f64);
        let incomplete = |what: &str| Error::file(path, format!("sets RoPE scaling ({}) without {what}; config.json is incomplete", &at[1..]));
        let kind = p.get("rope_type").or_else(|| p.get("type")).and_then(Json::as_str);
        // transformers' order: a top-level value (Phi-3 keeps it there), the scaling's own, the
        // context.
        let original = json.get("original_max_position_embeddings").and_then(Json::as_f64).or_else(|| num("original_max_position_embeddings"));
        let original = original.or_else(|| json.get("max_position_embeddings").and_then(Json::as_f64)).filter(|f| f.is_finite() && *f > 0.0);
        let local = at.ends_with("sliding_attention");
        scaling = match kind {
            None | Some("default") => continue,
            Some("yarn") if !local => {
                let context = json.get("max_position_embeddings").and_then(Json::as_f64);
                let original = original.ok_or_else(|| incomplete("a positive original_max_position_embeddings"))?;
                let factor = num("factor").or_else(|| context.map(|c| c / original)).ok_or_else(|| incomplete("a factor"))?;
                Some(RopeScaling::Yarn(yarn(p, factor, original)))
            }
            Some("linear") if !local => {
                let factor = num("factor").filter(|f| f.is_finite() && *f > 0.0).ok_or_else(|| incomplete("a positive factor"))?;
                Some(RopeScaling::Interpolated(Interpolation::Linear(factor)))
            }
            Some("llama3") if !local => {
                let need = |k: &str| num(k).filter(|f| f.is_finite() && *f > 0.0).ok_or_else(|| incomplete(&format!("a positive {k}")));
                let (low_freq_factor, high_freq_factor) = (need("low_freq_factor")?, need("high_freq_factor")?);
                if high_freq_factor <= low_freq_factor {
                    return Err(Error::file(path, format!("sets llama3 RoPE scaling with high_freq_factor {high_freq_factor} not above low_freq_factor {low_freq_factor}; config.json is corrupt")));
                }
                let original = original.ok_or_else(|| incomplete("a positive original_max_position_embeddings"))?;
                Some(RopeScaling::Interpolated(Interpolation::Llama3 { factor: need("factor")?, low_freq_factor, high_freq_factor, original }))
            }
            Some(kind) => {
                let what = match kind {
                    "dynamic" => "NTK scaling whose base changes with the sequence length",
                    "longrope" | "su" => "Phi-3's long/short factors chosen by the sequence length",
                    _ if local => "a scaling of the sliding-window layers",
                    _ => "a scaling transformers defines",
                };
                return Err(Error::file(
                    path,
                    format!(
                        "sets RoPE scaling '{kind}' ({}: {what}), which sinkscope does not compute yet; the numbers would be another model's",
                        &at[1..]
                    ),
                ));
            }
        };
    }
    Ok(scaling)
}

/// YaRN's parameters as transformers reads them.
fn yarn(p: &Json, factor: f64, original: f64) -> Yarn {
    let num = |k: &str| p.get(k).and_then(Json::as_f64);
    // transformers' get_mscale: 0.1 · m · ln(s) + 1 above a scale of 1.
    let mscale = |m: f64| if factor <= 1.0 { 1.0 } else { 0.1 * m * factor.ln() + 1.0 };
    let attention_factor =
        num("attention_factor").unwrap_or_else(|| match (num("mscale").filter(|&m| m != 0.0), num("mscale_all_dim").filter(|&m| m != 0.0)) {
            (Some(m), Some(all)) => mscale(m) / mscale(all),
            _ => mscale(1.0),
        });
    Yarn {
        factor,
        original_context: original,
        beta_fast: num("beta_fast").filter(|&b| b != 0.0).unwrap_or(32.0),
        beta_slow: num("beta_slow").filter(|&b| b != 0.0).unwrap_or(1.0),
        truncate: p.get("truncate").and_then(Json::as_bool).unwrap_or(true),
        attention_factor,
    }
}

/// Safetensors shards of one model: each file open, its header read through a map.
pub struct HfWeights {
    shards: Vec<(PathBuf, std::fs::File, memmap2::Mmap)>,
    /// tensor name → shard index
    index: HashMap<String, usize>,
    /// Whose names and tensor fixes apply, and what the fixes need to know.
    family: Family,
    context: TensorContext,
}

impl HfWeights {
    pub fn open(dir: &Path, family: Family, context: TensorContext) -> Result<Self> {
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
            let file = crate::io::regular::open(&path).with_file(&path)?;
            // SAFETY: read-only map; see GgufFile::open.
            let mmap = unsafe { memmap2::Mmap::map(&file) }.with_file(&path)?;
            let st = SafeTensors::deserialize(&mmap)
                .map_err(|e| Error::file(&path, format!("safetensors header is invalid ({e}); the file is truncated or corrupt — re-download it")))?;
            for name in st.names() {
                index.insert(name.to_owned(), i);
            }
            shards.push((path, file, mmap));
        }
        Ok(HfWeights { shards, index, family, context })
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
            Dtype::F32 => Tensor::from_vec(
                bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect::<Vec<f32>>(),
                shape,
                &Device::Cpu,
            )?,
            Dtype::F16 => {
                Tensor::from_vec(bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]])).collect::<Vec<_>>(), shape, &Device::Cpu)?
            }
            Dtype::BF16 => {
                Tensor::from_vec(bytes.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]])).collect::<Vec<_>>(), shape, &Device::Cpu)?
            }
            other => return Err(Error::file(path, format!("tensor {name} has dtype {other:?}; only F32, F16 and BF16 are supported"))),
        };
        Ok(Some(tensor))
    }

    /// Whether the file has the tensor a canonical name maps to (without reading it).
    pub fn has_param(&self, canonical: &str) -> bool {
        self.family.hf_names.name(canonical).is_some_and(|name| self.index.contains_key(&name))
    }

    /// Every tensor's storage type (read from the headers only).
    pub fn dtypes(&self) -> Vec<Dtype> {
        let headers = self.shards.iter().filter_map(|(_, _, mmap)| SafeTensors::deserialize(mmap).ok());
        headers.flat_map(|st| st.tensors().into_iter().map(|(_, view)| view.dtype())).collect()
    }

    /// Looks up a weight by its GGUF-style canonical name.
    pub fn param(&self, canonical: &str, tied: bool) -> Result<Option<Param>> {
        let Some(name) = self.family.hf_names.name(canonical) else { return Ok(None) };
        if canonical == "output.weight" && tied {
            return Ok(None);
        }
        let Some(t) = self.get(&name)? else { return Ok(None) };
        Ok(Some(Param::Dense((self.family.hf_tensor)(canonical, t, &self.context)?)))
    }

    /// Every tensor name the files hold.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.index.keys().map(String::as_str)
    }

    pub fn n_tensors(&self) -> usize {
        self.index.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::decoder::LayerAttn;

    fn config(json: &str) -> Result<DecoderConfig> {
        // One directory per call: tests run in parallel threads of one process.
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("sinkscope-hf-config-{}-{call}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.json"), json).unwrap();
        let cfg = read_config(&dir).map(|c| c.cfg);
        std::fs::remove_dir_all(&dir).unwrap();
        cfg
    }

    const SHAPE: &str = r#""hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 96, "vocab_size": 512, "max_position_embeddings": 256"#;

    #[test]
    fn any_layer_pattern_is_read_from_layer_types() {
        // Not "one global layer every N": windowed, windowed, global, windowed, global.
        let types = r#"["sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention"]"#;
        let cfg = config(&format!(r#"{{"model_type": "gemma3_text", {SHAPE}, "num_hidden_layers": 5, "sliding_window": 16, "layer_types": {types}, "rope_theta": 1e6, "rope_local_base_freq": 1e4}}"#)).unwrap();
        assert_eq!(cfg.windowed_layers(), [0, 1, 3]);
        assert_eq!(cfg.layers[0], LayerAttn { window: Some(16), rope_theta: 1e4, nope: false, unscaled: true, linear: false });
        assert_eq!(cfg.layers[2], LayerAttn::global(1e6));
        // Mistral: no layer_types, every layer windowed; Qwen ignores an unused window.
        let mistral = config(&format!(r#"{{"model_type": "mistral", {SHAPE}, "num_hidden_layers": 3, "sliding_window": 8}}"#)).unwrap();
        assert_eq!(mistral.windowed_layers(), [0, 1, 2]);
        let qwen =
            config(&format!(r#"{{"model_type": "qwen2", {SHAPE}, "num_hidden_layers": 3, "sliding_window": 8, "use_sliding_window": false}}"#))
                .unwrap();
        assert!(qwen.windowed_layers().is_empty());
        // An older Gemma 3 config gives the pattern as a number; an unknown layer type is refused.
        let gemma = config(&format!(
            r#"{{"model_type": "gemma3_text", {SHAPE}, "num_hidden_layers": 7, "sliding_window": 16, "sliding_window_pattern": 3}}"#
        ))
        .unwrap();
        assert_eq!(gemma.windowed_layers(), [0, 1, 3, 4, 6]);
        let chunked = config(&format!(
            r#"{{"model_type": "llama", {SHAPE}, "num_hidden_layers": 2, "sliding_window": 8, "layer_types": ["chunked_attention", "full_attention"]}}"#
        ));
        assert!(chunked.is_err_and(|e| e.to_string().contains("chunked_attention")));
    }

    #[test]
    fn an_impossible_layer_count_is_refused_before_anything_is_allocated() {
        for family in ["llama", "gemma3_text", "gpt_oss"] {
            let huge = config(&format!(r#"{{"model_type": "{family}", {SHAPE}, "num_hidden_layers": 1000000000000, "sliding_window": 16}}"#));
            assert!(huge.is_err_and(|e| e.to_string().contains("num_hidden_layers = 1000000000000 is not a whole number")), "{family}");
        }
    }

    #[test]
    fn granite_multipliers_default_to_one_and_must_be_numbers() {
        // transformers' GraniteConfig: every multiplier 1.0, attention_multiplier included (a
        // score scale of 1, not 1/√d_head).
        let plain = config(&format!(r#"{{"model_type": "granite", {SHAPE}, "num_hidden_layers": 2}}"#)).unwrap();
        assert_eq!(plain.arch.attn_scale, Some(1.0));
        assert_eq!((plain.arch.embed_multiplier, plain.arch.residual_multiplier, plain.arch.logit_divisor), (None, None, None));
        let zero = config(&format!(r#"{{"model_type": "granite", {SHAPE}, "num_hidden_layers": 2, "logits_scaling": 0}}"#));
        assert!(zero.is_err_and(|e| e.to_string().contains("logits_scaling = 0")));
    }

    #[test]
    fn stablelm_2_12b_parallel_block_is_refused() {
        let parallel = config(&format!(r#"{{"model_type": "stablelm", {SHAPE}, "num_hidden_layers": 2, "use_parallel_residual": true}}"#));
        assert!(parallel.is_err_and(|e| e.to_string().contains("use_parallel_residual")));
    }
}
