//! Capture into a run directory: tokenize within the model's context, run the reducers (and the
//! tensor collector), and write `reductions.safetensors`, `heatmaps.safetensors`, any saved
//! tensors, then `capture.json` last.

use std::collections::BTreeMap;
use std::path::Path;

use crate::capture::run::{capture, CaptureOptions, CaptureOutput};
use crate::error::{Error, Result};
use crate::io::staging::Staging;
use crate::io::write_json_atomic;
use crate::model::hook::HookFilter;
use crate::model::info::TokenInfo;
use crate::model::load::LoadedModel;
use crate::report::records::CaptureReport;
use crate::report::run::{CAPTURE_FILE, HEATMAPS_FILE, REDUCTIONS_FILE};

/// A text to capture and what to keep of it.
pub struct CaptureJob<'a> {
    pub text: &'a str,
    /// Where the text came from (a path, or "prompt"), recorded in capture.json.
    pub text_source: &'a str,
    pub max_tokens: Option<usize>,
    /// Hooks whose full tensors go to `save_tensors` (default: every attention pattern).
    pub hooks: Option<&'a str>,
    pub save_tensors: Option<&'a Path>,
    /// Reducer settings; `weight_bytes` and `save` are filled in from the model and `hooks`.
    pub options: CaptureOptions,
}

impl CaptureJob<'_> {
    /// Refuses settings no capture into `out` can use (callers may check before loading a model).
    pub fn validate(&self, out: &Path) -> Result<()> {
        if self.hooks.is_some() && self.save_tensors.is_none() {
            return Err(Error::input("--hooks selects the tensors written by --save-tensors; add --save-tensors FILE.safetensors"));
        }
        if let Some(path) = self.save_tensors {
            // Checked before minutes of capture, not when the file is written.
            if path.is_dir() {
                return Err(Error::file(path, "is a directory; --save-tensors needs a file path (FILE.safetensors)"));
            }
            let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            // The output directory itself is created by the capture.
            if !parent.is_dir() && parent != out {
                return Err(Error::file(path, "is in a directory that does not exist; create it or pick another --save-tensors path"));
            }
        }
        Ok(())
    }
}

/// Runs `job` on a loaded model and writes the run into `out`.
pub fn capture_into(lm: &mut LoadedModel, job: &CaptureJob, out: &Path) -> Result<CaptureReport> {
    job.validate(out)?;
    super::claim_out(lm, Some(out))?;
    let save = match job.save_tensors {
        Some(_) => Some(HookFilter::parse(job.hooks.unwrap_or("hook_pattern"), lm.model.cfg.n_layers)?),
        None => None,
    };
    let opts = CaptureOptions { save, weight_bytes: lm.weight_bytes(), top_k: job.options.top_k.max(1), ..job.options.clone() };
    capture_to_dir(lm, job.text, job.text_source, job.max_tokens, &opts, out, job.save_tensors)
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
    let (ids, dropped) = lm.tokenize_within_context(text, max_tokens)?;
    let result: CaptureOutput = capture(&lm.model, &ids, opts)?;
    let mut meta = BTreeMap::new();
    meta.insert("model".to_string(), lm.info.source.clone());
    meta.insert("text".to_string(), text_source.to_string());
    meta.insert("n_tokens".to_string(), ids.len().to_string());
    meta.insert("sinkscope_version".to_string(), env!("CARGO_PKG_VERSION").to_string());
    // The run's files land together at the commit, or not at all.
    let mut stage = Staging::begin(out)?;
    let mut files = Vec::new();
    result.reducers.save_arrays(&stage.path(REDUCTIONS_FILE)?, meta.clone())?;
    files.push(REDUCTIONS_FILE.to_string());
    match &result.heatmaps {
        Some(maps) => {
            maps.save(&stage.path(HEATMAPS_FILE)?, meta.clone())?;
            files.push(HEATMAPS_FILE.to_string());
        }
        // Maps of an earlier capture in this directory would describe other tokens.
        None => stage.remove_on_commit(HEATMAPS_FILE),
    }
    if let (Some(path), Some(tensors)) = (save_tensors, &result.tensors) {
        tensors.save(&stage.path_beside(path)?, meta)?;
        files.push(path.display().to_string());
    }
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
    write_json_atomic(&stage.path(CAPTURE_FILE)?, &report)?;
    stage.commit()?;
    Ok(report)
}
