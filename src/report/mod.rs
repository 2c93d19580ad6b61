//! Results as data: the serde records commands write, and atomic file output (temp file in the
//! same directory, then rename), so an interrupted run never leaves a half-written file.

pub mod arrays;
pub mod export;
pub mod figures;
pub mod heatmaps;
pub mod markdown;
#[cfg(feature = "parquet")]
pub mod parquet;
#[cfg(feature = "plots")]
pub mod plot;
pub mod run;
pub mod tables;
pub mod tokens;

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::capture::memory::MemoryEstimate;
use crate::capture::CaptureSummary;
use crate::error::{Error, Result};
use crate::model::ModelInfo;

/// Writes `bytes` to `path` via a temporary file and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| Error::file(path, "is not a file path"))?;
    let tmp = dir.join(format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id()));
    let result = std::fs::write(&tmp, bytes).and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::file(path, format!("cannot write ({e})")));
    }
    Ok(())
}

pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value)?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// One token of the captured text.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenInfo {
    pub pos: usize,
    pub id: u32,
    /// The vocabulary entry (e.g. "Ġthe", "▁Once", "<s>").
    pub piece: String,
}

/// Next-token loss of the captured text under the model.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NllSummary {
    /// Mean negative log-likelihood in nats over `scored` predictions (each token from its prefix).
    pub mean_nll: f64,
    pub perplexity: f64,
    pub scored: usize,
}

/// What `sinkscope capture` writes as `capture.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaptureReport {
    pub sinkscope_version: String,
    pub model: ModelInfo,
    /// Where the text came from: a file path, or "prompt".
    pub text_source: String,
    pub n_tokens: usize,
    /// Tokens that did not fit `--max-tokens` and were dropped.
    pub truncated_tokens: usize,
    pub tokens: Vec<TokenInfo>,
    /// Absent with `--no-nll`.
    pub nll: Option<NllSummary>,
    pub summary: CaptureSummary,
    pub memory_estimate: MemoryEstimate,
    pub wall_seconds: f64,
    /// Peak resident memory of the process up to the end of the capture (model load included).
    pub peak_rss_bytes: Option<u64>,
    /// Files written beside capture.json.
    pub files: Vec<String>,
}

/// What `sinkscope stream` / `recommend` write as `stream.json` with `-o`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StreamReport {
    pub sinkscope_version: String,
    pub model: ModelInfo,
    /// The text file streamed.
    pub text_source: String,
    /// The character of the file the stream starts at.
    pub start_char: usize,
    pub tokens: Vec<TokenInfo>,
    /// One per policy, with per-step NLL and cache length.
    pub outcomes: Vec<crate::kv::StreamOutcome>,
    /// Present for `recommend`.
    pub recommendation: Option<crate::kv::recommend::Recommendation>,
    pub wall_seconds: f64,
}
