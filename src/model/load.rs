//! Loading: a `-m MODEL` argument → a [`LoadedModel`] (the network, its tokenizer and the facts
//! `sinkscope info` shows), from GGUF, llama2.c or an HF directory, and the weights' fingerprint.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::quantized::GgmlDType;
use candle_core::DType;

use super::decoder::config::ParamSource;
use super::decoder::finite::scan_param;
use super::decoder::{Decoder, DecoderConfig, Param, WeightDtype};
use super::family::{Family, TensorContext};
use super::fit;
use super::gguf;
use super::gguf_config::{self, GgufModel};
use super::hf;
use super::info::ModelInfo;
use super::llama2c;
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
    let GgufModel { arch, cfg, unread: unread_keys } = gguf_config::read_config(&file)?;
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
    // The RoPE factors were read with the configuration; every other tensor is read by the
    // decoder or unread.
    let mut read: BTreeSet<String> = ["rope_freqs.weight".to_owned()].into();
    // The family is known: `read_config` found it.
    let family = Family::from_gguf(&info.architecture);
    let model = load_decoder(cfg, path, opts, &mut info, &mut |canonical| {
        let name = &family.map_or_else(|| canonical.to_owned(), |f| f.gguf_name(canonical));
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
    let weights =
        hf::HfWeights::open(dir, family, TensorContext { n_heads: cfg.n_heads, n_kv_heads: cfg.n_kv_heads, delta_net: cfg.arch.delta_net })?;
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
