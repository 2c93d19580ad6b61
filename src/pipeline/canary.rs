//! `canary` as a job: tokenize the prompt (and a forced continuation), run the canary under a
//! policy, and write canary.json, a trace `watch` reads (one JSONL line per generated token) and
//! the mass and log-probability figures into a directory.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::progress::Progress;
use crate::error::{Error, Result};
use crate::io::staging::Staging;
use crate::io::{write_atomic, write_json_atomic};
use crate::kv::canary::{run_canary, CanaryOptions, CanaryRun};
use crate::kv::policy::Policy;
use crate::model::cache_rounding::CacheRounding;
use crate::model::info::ModelInfo;
use crate::model::load::LoadedModel;

pub const CANARY_FILE: &str = "canary.json";
pub const CANARY_TRACE: &str = "canary-trace.jsonl";
/// Rolling window of the log-probability figure (as `watch` draws it).
pub const CANARY_ROLLING: usize = 32;

/// What the canary runs.
#[derive(Debug, Clone)]
pub struct CanaryJob {
    pub prompt: String,
    /// Score this file's text (from `start_char`) as the continuation instead of generating.
    pub force: Option<PathBuf>,
    pub start_char: usize,
    pub steps: usize,
    pub policy: Policy,
    pub temperature: f64,
    pub seed: u64,
    /// The watched layer; `None`: mid-depth.
    pub layer: Option<usize>,
    pub collapse: f64,
    /// The cache's storage formats.
    pub rounding: CacheRounding,
}

/// canary.json.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CanaryReport {
    pub sinkscope_version: String,
    pub model: ModelInfo,
    pub prompt: String,
    /// The continuation's text (generated, or the forced file's).
    pub continuation: String,
    pub forced: Option<String>,
    /// Each step's token as text.
    pub pieces: Vec<String>,
    pub run: CanaryRun,
    /// Mean log-probability of the continuation before and after the first eviction.
    pub mean_logprob_before: Option<f64>,
    pub mean_logprob_after: Option<f64>,
}

/// Runs the canary and writes its files into `out` when given.
pub fn canary_into(lm: &mut LoadedModel, job: &CanaryJob, out: Option<&Path>, progress: &mut dyn Progress) -> Result<CanaryReport> {
    if !(job.collapse > 0.0 && job.collapse < 1.0) {
        return Err(Error::input("--collapse is a fraction of the baseline mass, between 0 and 1 (e.g. 0.25)"));
    }
    if !(job.temperature >= 0.0 && job.temperature.is_finite()) {
        return Err(Error::input("--temperature must be a finite number ≥ 0"));
    }
    super::claim_out(lm, out)?;
    let mut prompt = lm.tokenizer.encode(&job.prompt)?;
    if prompt.is_empty() {
        prompt.extend(lm.tokenizer.bos());
    }
    if prompt.is_empty() {
        return Err(Error::input("the prompt gives no tokens and this tokenizer has no BOS to start from; give a prompt with -p"));
    }
    let forced = match &job.force {
        Some(file) => {
            let text = crate::io::text::read_text_file(file)?;
            let from = crate::io::text::from_char(&text, job.start_char)
                .ok_or_else(|| Error::file(file, format!("has fewer than --start-char {} characters", job.start_char)))?;
            let mut ids = lm.tokenizer.encode(from)?;
            // A forced continuation is mid-text: no second BOS.
            if lm.tokenizer.bos().is_some() && ids.first() == lm.tokenizer.bos().as_ref() {
                ids.remove(0);
            }
            ids.truncate(job.steps);
            if ids.is_empty() {
                return Err(Error::file(file, "gives no tokens to score"));
            }
            Some(ids)
        }
        None => None,
    };
    for w in job.policy.validate(prompt.len() + job.steps, lm.model.cfg.context_len)? {
        progress.warning(&w);
    }
    // Mid-depth among the layers that attend (every layer but a hybrid's linear ones).
    let attending = lm.model.cfg.attention_layers();
    let layer = job.layer.unwrap_or_else(|| attending.get(attending.len() / 2).copied().unwrap_or(0));
    let opts = CanaryOptions {
        policy: job.policy,
        prompt: prompt.clone(),
        steps: job.steps,
        forced,
        temperature: job.temperature,
        seed: job.seed,
        layer,
        collapse: job.collapse,
        rounding: job.rounding,
    };
    let label = job.policy.label();
    let run = run_canary(&lm.model, &opts, &mut |done, total| progress.steps(&label, done, total))?;
    let pieces: Vec<String> = run.steps.iter().map(|s| lm.tokenizer.token_str(s.token)).collect();
    let generated: Vec<u32> = run.steps.iter().filter(|s| !s.prompt).map(|s| s.token).collect();
    let mean = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let split = run.first_eviction.unwrap_or(run.steps.len());
    let lp = |range: &[crate::kv::canary::CanaryStep]| mean(range.iter().filter(|s| !s.prompt).map(|s| s.logprob).collect());
    lm.fingerprint()?;
    let report = CanaryReport {
        sinkscope_version: env!("CARGO_PKG_VERSION").to_string(),
        model: lm.info.clone(),
        prompt: job.prompt.clone(),
        continuation: lm.tokenizer.decode(&generated),
        forced: job.force.as_ref().map(|f| f.display().to_string()),
        mean_logprob_before: lp(&run.steps[..split]),
        mean_logprob_after: lp(&run.steps[split..]),
        pieces,
        run,
    };
    if let Some(dir) = out {
        write_outputs(&report, dir)?;
    }
    Ok(report)
}

/// One JSONL line per continuation token — the fields `watch` reads (`request`, `token`,
/// `logprob`, `cache_len`, `evicted`) plus the watched layer's first-slot mass.
pub fn trace_lines(r: &CanaryReport) -> String {
    let mut s = String::new();
    for (step, piece) in r.run.steps.iter().zip(&r.pieces).filter(|(s, _)| !s.prompt) {
        let line = serde_json::json!({
            "request": "canary",
            "index": step.index,
            "token": piece,
            "logprob": step.logprob,
            "cache_len": step.keys,
            "evicted": step.evicted,
            "first_slot_mass": step.first_slot_mass.get(r.run.layer),
            "flagged": step.flagged,
        });
        let _ = writeln!(s, "{line}");
    }
    s
}

/// canary.json, canary-trace.jsonl and the two figures (PNG and SVG), landing together.
fn write_outputs(r: &CanaryReport, dir: &Path) -> Result<()> {
    let stage = Staging::begin(dir)?;
    write_json_atomic(&stage.path(CANARY_FILE)?, r)?;
    write_atomic(&stage.path(CANARY_TRACE)?, trace_lines(r).as_bytes())?;
    #[cfg(feature = "plots")]
    {
        use crate::report::figures::{canary_logprob, canary_mass};
        let name = r.model.display_name();
        for ext in ["png", "svg"] {
            crate::report::plot::save(&canary_mass(&name, &r.run), &stage.path(format!("canary-mass.{ext}"))?)?;
            crate::report::plot::save(&canary_logprob(&name, &r.run, CANARY_ROLLING), &stage.path(format!("canary-logprob.{ext}"))?)?;
        }
    }
    stage.commit()
}
