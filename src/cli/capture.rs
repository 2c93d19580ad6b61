//! `sinkscope capture`: run a text through the model with streaming reducers and write
//! `capture.json` + `reductions.safetensors` (+ full tensors with --save-tensors).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Args;

use super::text::{read_input, tokenize_within_context};
use super::ModelArgs;
use crate::capture::run::{capture, CaptureOptions, CaptureOutput};
use crate::capture::HookFilter;
use crate::error::{Error, Result};
use crate::model::LoadedModel;
use crate::report::run::{CAPTURE_FILE, HEATMAPS_FILE, REDUCTIONS_FILE};
use crate::report::{write_json_atomic, CaptureReport, TokenInfo};

#[derive(Args, Debug)]
pub struct CaptureArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The text to capture.
    #[arg(short = 'p', long)]
    pub prompt: Option<String>,
    /// A UTF-8 text file to capture.
    #[arg(short = 'f', long)]
    pub file: Option<PathBuf>,
    /// Keep only the first T tokens of the text.
    #[arg(long)]
    pub max_tokens: Option<usize>,
    /// Output directory (created if missing).
    #[arg(short = 'o', long)]
    pub out: PathBuf,
    /// Hooks whose full tensors go to --save-tensors: comma-separated TransformerLens names or
    /// patterns (`blocks.*.attn.hook_pattern`, `hook_resid_post`, `blocks.3.*`). Default: hook_pattern.
    #[arg(long)]
    pub hooks: Option<String>,
    /// Save the full tensors of the selected hooks to this .safetensors file, keyed by hook name.
    #[arg(long)]
    pub save_tensors: Option<PathBuf>,
    /// Early key positions that get a per-head α_k in the summary.
    #[arg(long, default_value_t = 16)]
    pub first_keys: usize,
    /// Largest activations kept per layer.
    #[arg(long, default_value_t = 16)]
    pub top_k: usize,
    /// Refuse captures whose memory estimate exceeds this many MiB (default: available memory).
    #[arg(long)]
    pub memory_limit_mb: Option<u64>,
    /// Skip scoring the text's next-token loss (saves the T×vocab logits matmul).
    #[arg(long)]
    pub no_nll: bool,
    /// Keep every head's attention map pooled onto at most N×N bins in heatmaps.safetensors
    /// (exact when the text has at most N tokens; 0 = none).
    #[arg(long, default_value_t = 128)]
    pub heatmap_bins: usize,
    /// Print capture.json to stdout as well.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: CaptureArgs) -> Result<()> {
    let (text, text_source) = read_input(args.prompt.as_deref(), args.file.as_deref())?;
    if args.hooks.is_some() && args.save_tensors.is_none() {
        return Err(Error::input("--hooks selects the tensors written by --save-tensors; add --save-tensors FILE.safetensors"));
    }
    prepare_out_dir(&args.out)?;
    let mut lm = args.model.load()?;
    lm.fingerprint()?;
    let save = match &args.save_tensors {
        Some(_) => Some(HookFilter::parse(args.hooks.as_deref().unwrap_or("hook_pattern"), lm.model.cfg.n_layers)?),
        None => None,
    };
    let opts = CaptureOptions {
        first_keys: args.first_keys,
        top_k: args.top_k.max(1),
        save,
        memory_limit: args.memory_limit_mb.map(|mb| mb << 20),
        weight_bytes: weight_bytes(&lm),
        score: !args.no_nll,
        quant_risk: false,
        heatmap_bins: Some(args.heatmap_bins).filter(|&n| n > 0),
    };
    let report = capture_to_dir(&lm, &text, &text_source, args.max_tokens, &opts, &args.out, args.save_tensors.as_deref())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let ppl = report.nll.as_ref().map(|n| format!(" (perplexity {:.3})", n.perplexity)).unwrap_or_default();
        let rss = report.peak_rss_bytes.map(|b| format!(", peak RSS {}", crate::capture::memory::human(b))).unwrap_or_default();
        eprintln!("captured {} tokens in {:.2}s{ppl}{rss}; wrote {}", report.n_tokens, report.wall_seconds, report.files.join(", "));
    }
    Ok(())
}

/// Checks `-o` can be a directory; it is created only once there is something to write.
pub fn prepare_out_dir(out: &Path) -> Result<()> {
    if out.exists() && !out.is_dir() {
        return Err(Error::file(out, "exists and is not a directory; -o needs a directory"));
    }
    Ok(())
}

/// Creates `-o` (and its parents) right before the first file is written.
pub fn create_out_dir(out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).map_err(|e| Error::file(out, format!("cannot create the output directory ({e})")))
}

/// Bytes the loaded weights occupy: f32 unless kept quantized (then roughly their file size).
pub fn weight_bytes(lm: &LoadedModel) -> u64 {
    if lm.info.compute.starts_with("quantized") {
        std::fs::metadata(&lm.info.source).map(|m| m.len()).unwrap_or(0)
    } else {
        lm.info.n_params as u64 * 4
    }
}

/// Tokenizes, captures, and writes every output file into `out`; capture.json is written last.
pub fn capture_to_dir(
    lm: &LoadedModel,
    text: &str,
    text_source: &str,
    max_tokens: Option<usize>,
    opts: &CaptureOptions,
    out: &Path,
    save_tensors: Option<&Path>,
) -> Result<CaptureReport> {
    let (ids, dropped) = tokenize_within_context(lm, text, max_tokens)?;
    let result: CaptureOutput = capture(&lm.model, &ids, opts)?;
    let mut meta = BTreeMap::new();
    meta.insert("model".to_string(), lm.info.source.clone());
    meta.insert("text".to_string(), text_source.to_string());
    meta.insert("n_tokens".to_string(), ids.len().to_string());
    meta.insert("sinkscope_version".to_string(), env!("CARGO_PKG_VERSION").to_string());
    create_out_dir(out)?;
    let mut files = Vec::new();
    result.reducers.save_arrays(&out.join(REDUCTIONS_FILE), meta.clone())?;
    files.push(REDUCTIONS_FILE.to_string());
    match &result.heatmaps {
        Some(maps) => {
            maps.save(&out.join(HEATMAPS_FILE), meta.clone())?;
            files.push(HEATMAPS_FILE.to_string());
        }
        // Maps of an earlier capture in this directory would describe other tokens.
        None => {
            let _ = std::fs::remove_file(out.join(HEATMAPS_FILE));
        }
    }
    if let (Some(path), Some(tensors)) = (save_tensors, &result.tensors) {
        tensors.save(path, meta)?;
        files.push(path.display().to_string());
    }
    let summary_path = out.join(CAPTURE_FILE);
    files.push(CAPTURE_FILE.to_string());
    let report = CaptureReport {
        sinkscope_version: env!("CARGO_PKG_VERSION").to_string(),
        model: lm.info.clone(),
        text_source: text_source.to_string(),
        n_tokens: ids.len(),
        truncated_tokens: dropped,
        tokens: ids.iter().enumerate().map(|(pos, &id)| TokenInfo { pos, id, piece: lm.tokenizer.token_str(id) }).collect(),
        nll: result.nll,
        summary: result.reducers.summarize(),
        memory_estimate: result.estimate,
        wall_seconds: result.wall_seconds,
        peak_rss_bytes: crate::capture::memory::peak_rss_bytes(),
        files,
    };
    write_json_atomic(&summary_path, &report)?;
    Ok(report)
}
