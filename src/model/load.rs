//! Loading: a `-m MODEL` argument → a [`LoadedModel`] (the network, its tokenizer and the facts
//! `sinkscope info` shows), from GGUF, llama2.c or an HF directory, and the weights' fingerprint.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::quantized::GgmlDType;
use candle_core::DType;

use super::decoder::config::{ParamSource, MAX_SIZE};
use super::decoder::finite::scan_param;
use super::decoder::{Decoder, DecoderConfig, LayerAttn, MlpKind, Param, WeightDtype};
use super::family::{Family, Multipliers, TensorContext};
use super::fit;
use super::gguf;
use super::hf;
use super::info::ModelInfo;
use super::llama2c;
use super::rope::{FreqFactors, Yarn};
use super::source::{resolve, ModelSource};
use super::tokenizer::Tokenizer;
use super::unread::{self, Unread};
use super::verified::weights_sha256;
use crate::error::{Error, Result};

/// How to load a model.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Keep GGUF quantized matmul weights quantized (faster load, less memory, inexact analysis).
    /// By default every tensor is dequantized to f32 so analysis is exact.
    pub quantized: bool,
    /// A tokenizer.json (or llama2.c tok.bin) to use instead of the model's own.
    pub tokenizer: Option<PathBuf>,
    /// How dense weight matrices are kept (`--dtype`): by default as the file stores them.
    pub dtype: WeightDtype,
    /// Search every weight for NaN and ∞ as it is read (`info`), into
    /// [`ModelInfo::non_finite_weights`].
    pub scan_weights: bool,
    /// List what the file holds that sinkscope does not read in [`ModelInfo::unread`] instead
    /// of refusing the file (`info`).
    pub report_unread: bool,
}

impl LoadOptions {
    /// How these options keep the weights.
    pub fn keep(&self) -> fit::Keep {
        fit::Keep { quantized: self.quantized, dtype: self.dtype }
    }
}

pub struct LoadedModel {
    pub model: Decoder,
    pub tokenizer: Tokenizer,
    pub info: ModelInfo,
}

impl LoadedModel {
    /// Records the SHA-256 of the weight files in `info.sha256` (hashing a 100 MB file takes about
    /// a third of a second, so only commands that write a run pay for it).
    pub fn fingerprint(&mut self) -> Result<()> {
        if self.info.sha256.is_none() {
            self.info.sha256 = Some(weights_sha256(Path::new(&self.info.source))?);
        }
        Ok(())
    }
}

pub fn load(spec: &str, opts: &LoadOptions) -> Result<LoadedModel> {
    let source = resolve(spec)?;
    load_source(&source, opts)
}

/// Loads a resolved model; weights that do not fit in memory as asked are kept as
/// [`fit::plan`] decides (its note in [`ModelInfo::memory_note`]) or refused with the numbers.
pub fn load_source(source: &ModelSource, opts: &LoadOptions) -> Result<LoadedModel> {
    let (keep, memory_note) = fit::plan(source, &opts.keep(), fit::available_memory())?;
    let mut lm = load_kept(source, &LoadOptions { quantized: keep.quantized, dtype: keep.dtype, ..opts.clone() })?;
    lm.info.memory_note = memory_note;
    Ok(lm)
}

/// Loads a resolved model keeping its weights as `opts` say, with no memory plan: for callers
/// that made one with [`fit::plan`] already (to say so before the load).
pub fn load_kept(source: &ModelSource, opts: &LoadOptions) -> Result<LoadedModel> {
    let (model, own_tokenizer, mut info) = match source {
        ModelSource::Gguf(path) => load_gguf(path, opts)?,
        ModelSource::Llama2c { model } => load_llama2c(model, opts)?,
        ModelSource::HfDir(dir) => load_hf(dir, opts)?,
    };
    if let (false, Some(refusal)) = (opts.report_unread, Unread::refusal(&info.unread)) {
        return Err(Error::file(source.path(), refusal));
    }
    let tokenizer = match &opts.tokenizer {
        Some(path) if path.extension().is_some_and(|e| e == "bin") => Tokenizer::from_llama2c(path, model.cfg.vocab_size)?,
        Some(path) => Tokenizer::from_json_file(path)?,
        None => own_tokenizer.ok_or_else(|| Error::Internal("loader returned no tokenizer".into()))?,
    };
    if tokenizer.vocab_size() > model.cfg.vocab_size {
        return Err(Error::file(
            source.path(),
            format!(
                "the tokenizer has {} tokens but the model's vocabulary is {}; they do not belong together",
                tokenizer.vocab_size(),
                model.cfg.vocab_size
            ),
        ));
    }
    info.tokenizer = tokenizer.kind().to_owned();
    info.adds_bos = tokenizer.adds_bos();
    info.weight_bytes = model.weight_bytes();
    if !info.compute.starts_with("quantized") && model.matrix_dtype() != DType::F32 {
        info.compute = format!("f32 over {} weight matrices", format!("{:?}", model.matrix_dtype()).to_lowercase());
    }
    Ok(LoadedModel { model, tokenizer, info })
}

fn base_info(source: &ModelSource, cfg: &DecoderConfig, architecture: String) -> ModelInfo {
    ModelInfo::new(source.path().display().to_string(), source.format().to_string(), architecture, cfg.clone())
}

fn load_gguf(path: &std::path::Path, opts: &LoadOptions) -> Result<(Decoder, Option<Tokenizer>, ModelInfo)> {
    let file = gguf::GgufFile::open(path)?;
    let arch = file.architecture()?.to_owned();
    let family = Family::from_gguf(&arch).ok_or_else(|| {
        Error::file(path, format!("unknown architecture '{arch}'; sinkscope supports GGUF models of the architectures {}", Family::gguf_supported()))
    })?;
    let key = |k: &str| format!("{arch}.{k}");
    let experts = file.get(&key("expert_count")).and_then(gguf::Value::as_u64).unwrap_or(0);
    let family = family.with_gguf_experts(experts);
    // Experts without a count (what loading them as a dense block would call a missing MLP).
    if let Some(t) = file.tensors.keys().find(|n| n.contains("_exps.")).filter(|_| !family.is_moe()) {
        return Err(Error::file(
            path,
            format!(
                "holds {t} (a mixture of experts) but no {} > 0, which sinkscope needs to compute it; the file is incomplete",
                key("expert_count")
            ),
        ));
    }
    let unread_keys = unread::gguf_keys(
        &arch,
        family.is_moe(),
        family.multipliers,
        file.metadata.keys().map(String::as_str),
        |k| file.get(k).and_then(gguf::Value::as_u64),
        |k| file.get(k).and_then(gguf::Value::as_bool),
    );
    let n_heads = file.req_u64(&key("attention.head_count"))? as usize;
    let d_model = file.req_u64(&key("embedding_length"))? as usize;
    let vocab_size = file
        .tensors
        .get("token_embd.weight")
        .map(|t| t.shape[0])
        .ok_or_else(|| Error::file(path, "tensor token_embd.weight is missing; the GGUF file is incomplete"))?;
    let d_head = file.get(&key("attention.key_length")).and_then(gguf::Value::as_u64).map_or(d_model / n_heads.max(1), |v| v as usize);
    if let Some(v) = file.get(&key("attention.value_length")).and_then(gguf::Value::as_u64).filter(|&v| v as usize != d_head) {
        return Err(Error::file(
            path,
            format!(
                "{} = {v} differs from the key length {d_head}, which sinkscope does not compute yet; the numbers would be another model's",
                key("attention.value_length")
            ),
        ));
    }
    if let Some(v) = file.get(&key("vocab_size")).and_then(gguf::Value::as_u64).filter(|&v| v as usize != vocab_size) {
        return Err(Error::file(path, format!("{} = {v} but token_embd.weight has {vocab_size} rows; the file is inconsistent", key("vocab_size"))));
    }
    let mut switches = family.switches;
    if let Some(r) = file.get(&key("rope.dimension_count")).and_then(gguf::Value::as_u64) {
        switches.rotary_dims = Some(r as usize).filter(|&r| r != d_head);
    }
    if let Some(parallel) = file.get(&key("use_parallel_residual")).and_then(gguf::Value::as_bool) {
        switches.parallel_residual = parallel;
    }
    let n_layers = file.req_u64(&key("block_count"))? as usize;
    if n_layers == 0 || n_layers > MAX_SIZE {
        return Err(Error::file(path, format!("model configuration is impossible: layers = {n_layers}")));
    }
    let rope_theta = file.opt_f64(&key("rope.freq_base")).unwrap_or(10000.0);
    let mut layers = gguf_layers(&file, &arch, family, n_layers, rope_theta)?;
    if family.gguf_nope_every > 0 {
        layers.iter_mut().skip(family.gguf_nope_every - 1).step_by(family.gguf_nope_every).for_each(|layer| layer.nope = true);
    }
    // llama.cpp's rule for some sizes of a family (Gemma's 27B): queries scaled by
    // (d_model / heads)^−½ instead of d_head^−½, as the HF configs' query_pre_attn_scalar says.
    if family.gguf_attn_scale_layers.contains(&n_layers) && d_model / n_heads.max(1) != d_head {
        switches.attn_scale = Some(1.0 / ((d_model / n_heads.max(1)) as f64).sqrt());
    }
    // llama.cpp's reading: 0 or absent means "not scaled" (the attention's 1/√d_head).
    let factor = |k: &str| file.opt_f64(&key(k)).filter(|&f| f != 0.0 && f != 1.0);
    match family.multipliers {
        Some(Multipliers::Granite) => {
            switches.attn_scale = file.opt_f64(&key("attention.scale")).filter(|&s| s != 0.0 && s != 1.0 / (d_head as f64).sqrt());
            switches.embed_multiplier = factor("embedding_scale");
            switches.residual_multiplier = factor("residual_scale");
            switches.logit_divisor = factor("logit_scale");
        }
        Some(Multipliers::LogitScale) => switches.logit_divisor = factor("logit_scale").map(|s| 1.0 / s),
        None => {}
    }
    switches.attn_logit_softcap = file.opt_f64(&key("attn_logit_softcapping")).filter(|&c| c != 0.0);
    switches.final_logit_softcap = file.opt_f64(&key("final_logit_softcapping")).filter(|&c| c != 0.0);
    let rope_freq_factors = gguf_freq_factors(&file, &arch, switches.rotary_dims.unwrap_or(d_head))?;
    let context_len = file.req_u64(&key("context_length"))? as usize;
    switches.rope_yarn = gguf_yarn(&file, &arch, context_len)?;
    let mut d_ff = file.req_u64(&key("feed_forward_length"))? as usize;
    if let MlpKind::Moe(moe) = &mut switches.mlp {
        let count = |k: &str| -> Result<Option<usize>> {
            match file.get(&key(k)) {
                None => Ok(None),
                Some(v) => v
                    .as_u64()
                    .map(|n| Some(n as usize))
                    .ok_or_else(|| Error::file(path, format!("{} is not one count (a count per layer is not computed yet)", key(k)))),
            }
        };
        moe.experts = experts as usize;
        moe.top_k = file.req_u64(&key("expert_used_count"))? as usize;
        moe.shared_ff = count("expert_shared_feed_forward_length")?.unwrap_or(0);
        d_ff = count("expert_feed_forward_length")?.unwrap_or(d_ff);
    }
    let cfg = DecoderConfig {
        n_layers,
        n_heads,
        n_kv_heads: file.get(&key("attention.head_count_kv")).and_then(gguf::Value::as_u64).map_or(n_heads, |v| v as usize),
        d_model,
        d_head,
        d_ff,
        vocab_size,
        context_len,
        rope_theta,
        rope_layout: family.gguf_rope,
        rope_freq_factors,
        rms_eps: file
            .opt_f64(&key("attention.layer_norm_rms_epsilon"))
            .or_else(|| file.opt_f64(&key("attention.layer_norm_epsilon")))
            .unwrap_or(1e-5),
        arch: switches,
        layers,
    };
    let tokenizer = match &opts.tokenizer {
        Some(_) => None,
        None => Some(Tokenizer::from_gguf(&file)?),
    };
    let mut info = base_info(&ModelSource::Gguf(path.to_path_buf()), &cfg, arch);
    info.name = file.get("general.name").and_then(gguf::Value::as_str).map(str::to_owned);
    info.tied_embeddings = !file.has_tensor("output.weight");
    info.quantization = dtype_summary(file.tensors.values().map(|t| t.dtype));
    info.n_params = file.tensors.values().map(|t| t.shape.iter().product::<usize>()).sum();
    if opts.quantized {
        info.compute = "quantized matmuls (--quantized)".into();
    }
    let quantized = opts.quantized;
    // The factors were read above; every other tensor is read by the decoder or unread.
    let mut read: BTreeSet<String> = ["rope_freqs.weight".to_owned()].into();
    let model = load_decoder(cfg, path, opts, &mut info, &mut |name| {
        if !file.has_tensor(name) {
            return Ok(None);
        }
        read.insert(name.to_owned());
        let qt = file.qtensor(name)?;
        let keep_quantized = quantized && qt.rank() == 2 && !matches!(qt.dtype(), GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16);
        if keep_quantized {
            return Ok(Some(Param::Quant(Arc::new(qt))));
        }
        let dense = qt.dequantize(&candle_core::Device::Cpu)?;
        // Half tensors go back to their own type (exactly), so `--dtype auto` keeps them half.
        Ok(Some(Param::Dense(match qt.dtype() {
            GgmlDType::F16 => dense.to_dtype(DType::F16)?,
            GgmlDType::BF16 => dense.to_dtype(DType::BF16)?,
            _ => dense,
        })))
    })?;
    info.unread = unread_keys;
    info.unread.extend(unread::gguf_tensors(file.tensors.keys().map(String::as_str), &read));
    Ok((model, tokenizer, info))
}

/// How each layer of a GGUF file attends: through `{arch}.attention.sliding_window` keys (or the
/// window llama.cpp assumes for the family) on the layers `attention.sliding_window_pattern` says
/// (every Nth layer global, or one flag per layer) or the family fixes, rotated with
/// `rope.freq_base_swa` or the family's local base; every layer global otherwise.
fn gguf_layers(file: &gguf::GgufFile, arch: &str, family: Family, n_layers: usize, theta: f64) -> Result<Vec<LayerAttn>> {
    let key = |k: &str| format!("{arch}.{k}");
    // llama.cpp's converter writes 0 for "no window" (Phi-3's config without one).
    let window = file.get(&key("attention.sliding_window")).and_then(gguf::Value::as_u64).filter(|&w| w > 0).map(|w| w as usize);
    let layout = match (window, family.gguf_windows) {
        (Some(w), None) => {
            return Err(Error::file(
                &file.path,
                format!("the model attends through a sliding window of {w} keys ({}), which sinkscope computes for {} only so far; the numbers would be another model's", key("attention.sliding_window"), Family::gguf_windowed_supported()),
            ))
        }
        (_, None) => return Ok(vec![LayerAttn::global(theta); n_layers]),
        (_, Some(layout)) => layout,
    };
    let Some(window) = window.or(layout.default_window) else { return Ok(vec![LayerAttn::global(theta); n_layers]) };
    let local = LayerAttn {
        window: Some(window),
        rope_theta: file.opt_f64(&key("rope.freq_base_swa")).or(layout.local_rope_theta).unwrap_or(theta),
        nope: false,
        unscaled: !layout.local_scaled,
    };
    let pattern_key = key("attention.sliding_window_pattern");
    let windowed: Vec<bool> = match file.get(&pattern_key) {
        Some(gguf::Value::Array(flags)) => {
            let flags: Option<Vec<bool>> = flags.iter().map(gguf::Value::as_bool).collect();
            flags
                .filter(|f| f.len() == n_layers)
                .ok_or_else(|| Error::file(&file.path, format!("{pattern_key} is not one flag per layer ({n_layers}); the file is corrupt")))?
        }
        Some(v) => {
            let every = v
                .as_u64()
                .filter(|&n| n > 0)
                .ok_or_else(|| Error::file(&file.path, format!("{pattern_key} is not a positive count; the file is corrupt")))?;
            (0..n_layers as u64).map(|l| l % every < every - 1).collect()
        }
        None => (0..n_layers).map(|l| layout.global_every == 0 || (l + 1) % layout.global_every != 0).collect(),
    };
    Ok(windowed.into_iter().map(|w| if w { local } else { LayerAttn::global(theta) }).collect())
}

/// YaRN as a GGUF file states it (`rope.scaling.type` yarn): `rope.scaling.factor`, the
/// original context (`rope.scaling.original_context_length`, else the training context, as
/// llama.cpp reads it), the ramp's betas (`yarn_beta_fast`, `yarn_beta_slow`: 32 and 1 unless
/// stated) and the attention factor the converter copies from the HF config
/// (`yarn_attn_factor`; else 1 + 0.1·ln(factor), which llama.cpp computes in any case).
fn gguf_yarn(file: &gguf::GgufFile, arch: &str, context_len: usize) -> Result<Option<Yarn>> {
    let key = |k: &str| format!("{arch}.rope.scaling.{k}");
    if file.get(&key("type")).and_then(gguf::Value::as_str) != Some("yarn") {
        return Ok(None);
    }
    let positive = |k: &str| -> Result<Option<f64>> {
        match file.opt_f64(&key(k)) {
            None => Ok(None),
            Some(v) if v.is_finite() && v > 0.0 => Ok(Some(v)),
            Some(v) => Err(Error::file(&file.path, format!("{} = {v} is not a positive number; the file is corrupt", key(k)))),
        }
    };
    let factor = positive("factor")?
        .ok_or_else(|| Error::file(&file.path, format!("{} is yarn but {} is missing; the file is incomplete", key("type"), key("factor"))))?;
    Ok(Some(Yarn {
        factor,
        original_context: positive("original_context_length")?.unwrap_or(context_len as f64),
        beta_fast: positive("yarn_beta_fast")?.unwrap_or(32.0),
        beta_slow: positive("yarn_beta_slow")?.unwrap_or(1.0),
        truncate: true,
        attention_factor: positive("yarn_attn_factor")?.unwrap_or(if factor <= 1.0 { 1.0 } else { 1.0 + 0.1 * factor.ln() }),
    }))
}

/// The RoPE frequency factors of a GGUF file: llama.cpp's `rope_freqs.weight` (what its
/// converter writes for Llama 3's scaling) and a linear `rope.scaling.type`, which llama.cpp
/// applies together; YaRN is [`gguf_yarn`]'s, any other scaling type is refused by name.
fn gguf_freq_factors(file: &gguf::GgufFile, arch: &str, rot_dims: usize) -> Result<Option<FreqFactors>> {
    let path = &file.path;
    let scaling_key = format!("{arch}.rope.scaling.type");
    let linear = match file.get(&scaling_key).and_then(gguf::Value::as_str) {
        None | Some("none") | Some("yarn") => None,
        Some("linear") => {
            let key = format!("{arch}.rope.scaling.factor");
            let factor = file.opt_f64(&key).filter(|f| f.is_finite() && *f > 0.0);
            Some(factor.ok_or_else(|| Error::file(path, format!("{scaling_key} is linear but {key} is missing or not positive; the file is incomplete")))?)
        }
        Some(kind) => {
            return Err(Error::file(path, format!("{scaling_key} = {kind}: RoPE scaling '{kind}', which sinkscope does not compute for GGUF files yet; the numbers would be another model's")))
        }
    };
    let tensor = match file.tensors.get("rope_freqs.weight") {
        None => None,
        Some(t) if t.shape.iter().product::<usize>() == rot_dims / 2 => {
            let values = file.qtensor("rope_freqs.weight")?.dequantize(&candle_core::Device::Cpu)?.flatten_all()?.to_vec1::<f32>()?;
            Some(values.into_iter().map(f64::from).collect::<Vec<_>>())
        }
        Some(t) => {
            return Err(Error::file(
                path,
                format!(
                    "tensor rope_freqs.weight has shape {:?} but the model rotates {} pairs of dimensions; the file is inconsistent",
                    t.shape,
                    rot_dims / 2
                ),
            ))
        }
    };
    Ok(match (tensor, linear) {
        (None, None) => None,
        (None, Some(f)) => Some(FreqFactors::linear(f, rot_dims / 2)),
        (Some(factors), None) => Some(FreqFactors { source: "rope_freqs.weight".into(), factors }),
        (Some(factors), Some(f)) => {
            Some(FreqFactors { source: format!("rope_freqs.weight, linear ×{f}"), factors: factors.iter().map(|x| x * f).collect() })
        }
    })
}

/// Builds the decoder from a loader's tensor getter; with `opts.scan_weights`, every tensor is
/// searched for NaN and ∞ as it is read, into `info.non_finite_weights`.
fn load_decoder(cfg: DecoderConfig, path: &std::path::Path, opts: &LoadOptions, info: &mut ModelInfo, get: &mut ParamSource<'_>) -> Result<Decoder> {
    if !opts.scan_weights {
        return Decoder::load(cfg, path, opts.dtype, get);
    }
    let mut found = Vec::new();
    let model = Decoder::load(cfg, path, opts.dtype, &mut |name| {
        let p = get(name)?;
        if let Some(p) = &p {
            found.extend(scan_param(name, p)?);
        }
        Ok(p)
    })?;
    info.non_finite_weights = Some(found);
    Ok(model)
}

/// Storage types and how many tensors use each, most common first: "Q4_1 ×210, F32 ×61".
fn dtype_summary<D: std::fmt::Debug>(dtypes: impl Iterator<Item = D>) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for d in dtypes {
        *counts.entry(format!("{d:?}")).or_default() += 1;
    }
    let mut v: Vec<(String, usize)> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.iter().map(|(d, n)| format!("{d} ×{n}")).collect::<Vec<_>>().join(", ")
}

fn load_llama2c(path: &std::path::Path, opts: &LoadOptions) -> Result<(Decoder, Option<Tokenizer>, ModelInfo)> {
    let mut file = llama2c::Llama2cFile::open(path)?;
    let cfg = file.cfg.clone();
    let tokenizer = match &opts.tokenizer {
        Some(_) => None,
        None => Some(Tokenizer::from_llama2c(&file.find_tokenizer(path)?, cfg.vocab_size)?),
    };
    let mut info = base_info(&ModelSource::Llama2c { model: path.to_path_buf() }, &cfg, "llama (llama2.c)".into());
    info.tied_embeddings = file.shared_classifier;
    info.quantization = "F32".into();
    let l = cfg.n_layers;
    let (d, ff, v, kv) = (cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.n_kv_heads * cfg.d_head);
    info.n_params = v * d * if file.shared_classifier { 1 } else { 2 } + d + l * (2 * d + 2 * d * d + 2 * kv * d + 3 * ff * d);
    let model = load_decoder(cfg, path, opts, &mut info, &mut |name| Ok(file.param(name)))?;
    Ok((model, tokenizer, info))
}

fn load_hf(dir: &std::path::Path, opts: &LoadOptions) -> Result<(Decoder, Option<Tokenizer>, ModelInfo)> {
    let hf::HfConfig { cfg, tied, family, model_type, unread } = hf::read_config(dir)?;
    let tokenizer = match &opts.tokenizer {
        Some(_) => None,
        None => Some(Tokenizer::from_json_file(&dir.join("tokenizer.json"))?),
    };
    let weights = hf::HfWeights::open(dir, family, TensorContext { n_heads: cfg.n_heads, n_kv_heads: cfg.n_kv_heads })?;
    let mut info = base_info(&ModelSource::HfDir(dir.to_path_buf()), &cfg, model_type);
    info.unread = unread;
    info.tied_embeddings = tied || !weights.has_param("output.weight");
    info.quantization = dtype_summary(weights.dtypes().into_iter());
    let tied = info.tied_embeddings;
    let mut n_params = 0usize;
    let mut read = BTreeSet::new();
    let model = load_decoder(cfg, dir, opts, &mut info, &mut |name| {
        let p = weights.param(name, tied)?;
        if let Some(p) = &p {
            n_params += p.shape().iter().product::<usize>();
            read.extend(family.hf_names.name(name));
        }
        Ok(p)
    })?;
    info.n_params = n_params;
    info.unread.extend(unread::hf_tensors(weights.names(), &read, tied));
    Ok((model, tokenizer, info))
}

impl LoadedModel {
    /// Tokenizes `text`, keeping at most `max_tokens`, and refuses more tokens than the model's
    /// context. Returns the ids and how many tokens were dropped.
    pub fn tokenize_within_context(&self, text: &str, max_tokens: Option<usize>) -> Result<(Vec<u32>, usize)> {
        let mut ids = self.tokenizer.encode(text)?;
        if ids.is_empty() {
            return Err(Error::input("the text gives no tokens"));
        }
        if max_tokens == Some(0) {
            return Err(Error::input("--max-tokens must be at least 1"));
        }
        let context = self.model.cfg.context_len;
        let limit = max_tokens.unwrap_or(usize::MAX);
        let dropped = ids.len().saturating_sub(limit);
        ids.truncate(limit);
        if ids.len() > context {
            return Err(Error::input(format!(
                "the text is {} tokens, longer than the model's context of {context}; pass --max-tokens {context} (or fewer) to use its first tokens",
                ids.len()
            )));
        }
        Ok((ids, dropped))
    }

    /// Bytes the loaded weights occupy as kept (f32, half matrices, or quantized blocks).
    pub fn weight_bytes(&self) -> u64 {
        self.model.weight_bytes()
    }
}
