//! The serde records of a run directory that commands write whole: `capture.json` and
//! `stream.json` (`report.json` is [`crate::analysis::AnalysisReport`]).

use serde::{Deserialize, Serialize};

use crate::capture::memory::MemoryEstimate;
use crate::capture::summary::CaptureSummary;
use crate::kv::cache_frontier::CacheFrontier;
use crate::kv::divergence::CacheErrorByHead;
use crate::kv::recommend::Recommendation;
use crate::kv::simulate::StreamOutcome;
use crate::model::cache_rounding::CacheRounding;
use crate::model::info::{ModelInfo, NllSummary, TokenInfo};

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
    pub outcomes: Vec<StreamOutcome>,
    /// Present for `recommend`.
    pub recommendation: Option<Recommendation>,
    pub wall_seconds: f64,
    /// The cache's storage formats when they round (`--cache-type-k/v`); absent: exact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_rounding: Option<CacheRounding>,
    /// With `stream --kl`: KL(P_exact ‖ P_rounded) of each step's next-token distribution (nats).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kl_from_exact: Option<Vec<f64>>,
    /// With `stream --kl`: where the rounding error lands, per head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_error_by_head: Option<CacheErrorByHead>,
    /// With `recommend --cache-types`: the frontier over cache type × exact first tokens × policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_frontier: Option<CacheFrontier>,
}
