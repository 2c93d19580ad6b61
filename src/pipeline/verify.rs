//! `verify` end to end: read an engine's trace (token ids and each token's log-probability),
//! replay its tokens through the exact simulator under the declared cache policy and its near
//! misses, hold the engine against them (`analysis::conformance`) — and, when the engine declares
//! its cache format, against that format's near misses (`analysis::format_check`) — and write
//! `verify.json` and a figure into a run directory when asked.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::progress::Progress;
use crate::analysis::conformance::{conformance, Conformance, Replay, Verdict};
use crate::analysis::format_check::{format_check, FormatCheck, FormatReplay, FormatVerdict};
use crate::error::{Error, Result};
use crate::io::staging::Staging;
use crate::io::token_ids::read_token_ids;
use crate::io::trace::{evictions_from_lengths, read_trace, TraceRequest};
use crate::io::write_json_atomic;
use crate::kv::alternatives::{format_near_misses, near_misses};
use crate::kv::{simulate_with, Policy, PositionMode, SimOptions};
use crate::model::cache_rounding::CacheRounding;
use crate::model::info::ModelInfo;
use crate::model::load::LoadedModel;

/// The report file in `verify -o DIR`.
pub const VERIFY_FILE: &str = "verify.json";

#[derive(Debug, Clone)]
pub struct VerifyOptions {
    pub trace: PathBuf,
    /// The prompt's token ids, when the trace scores only what was generated after it.
    pub prompt_ids: Option<PathBuf>,
    /// Which request of a multi-request trace (`None`: the only one).
    pub request: Option<String>,
    /// The policy the engine says it runs.
    pub policy: Policy,
    /// The cache format it says it stores (`None`: not declared; replayed exactly, unchecked).
    pub rounding: Option<CacheRounding>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VerifyReport {
    pub sinkscope_version: String,
    pub model: ModelInfo,
    pub trace: String,
    pub request: String,
    pub policy: Policy,
    pub policy_label: String,
    /// Tokens in the replayed sequence (prompt included), of them in the prompt, and scored.
    pub tokens: usize,
    pub prompt_tokens: usize,
    pub scored_tokens: usize,
    /// Sequence indices whose query first saw a cache the declared policy had just evicted from.
    pub evictions: Vec<usize>,
    pub conformance: Conformance,
    /// The declared cache format held against its near misses (when one was declared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<FormatCheck>,
    pub wall_seconds: f64,
}

impl VerifyReport {
    /// Whether the engine departs from what it declared: its policy or its cache format.
    pub fn diverges(&self) -> bool {
        matches!(self.conformance.verdict, Verdict::Diverges { .. }) || self.format.as_ref().is_some_and(|f| f.verdict == FormatVerdict::Diverges)
    }
}

/// Replays `opts.trace` under the declared policy and its near misses; writes `verify.json`
/// (and a figure) into `out` when given.
pub fn verify_into(lm: &mut LoadedModel, opts: &VerifyOptions, out: Option<&Path>, progress: &mut dyn Progress) -> Result<VerifyReport> {
    let start = Instant::now();
    opts.policy.check()?;
    let trace = read_trace(&opts.trace)?;
    let request = pick_request(&trace.requests, opts.request.as_deref()).map_err(|why| Error::file(&opts.trace, why))?;
    let prompt = match &opts.prompt_ids {
        Some(path) => {
            let ids = read_token_ids(path)?;
            if !request.prompt_ids.is_empty() && request.prompt_ids != ids {
                return Err(Error::file(path, format!("differs from the prompt the trace {} itself gives", opts.trace.display())));
            }
            ids
        }
        None => request.prompt_ids.clone(),
    };
    super::claim_out(lm, out)?;
    let (ids, engine) = sequence(&prompt, request).map_err(|why| Error::file(&opts.trace, why))?;
    let vocab = lm.model.cfg.vocab_size;
    if let Some((i, id)) = ids.iter().enumerate().find(|(_, &id)| id as usize >= vocab) {
        return Err(Error::file(&opts.trace, format!("token {i} is id {id}, outside the model's vocabulary of {vocab}: a trace of another model?")));
    }
    for w in opts.policy.validate(ids.len(), lm.model.cfg.context_len)? {
        progress.warning(&w);
    }
    let rounding = opts.rounding.unwrap_or_default();
    let mut alternatives = near_misses(&opts.policy);
    // The declared policy is replayed exactly as declared. Its near misses under `delta` replay
    // with `slot` positions (the block replay; `delta` decodes each evicting step on its own):
    // they differ only by the re-rotation's f32 rounding, far below any engine's noise floor
    // (SmolLM2, keep N=4, W=255, 1,024 tokens: equal perplexity to 5 digits; llama.cpp's floor is
    // ~0.06 nats per token). The positions candidate itself stays as it is.
    for a in alternatives.iter_mut().skip(1) {
        if a.policy.positions == PositionMode::Delta && opts.policy.positions == PositionMode::Delta {
            a.policy.positions = PositionMode::Slot;
        }
    }
    let policies: Vec<Policy> = alternatives.iter().map(|a| a.policy).collect();
    let label = format!("{} + {} near misses", opts.policy.label(), policies.len() - 1);
    let sim = SimOptions { rounding, ..SimOptions::default() };
    let outcomes = simulate_with(&lm.model, &ids, &policies, sim, &mut |done, total| progress.steps(&label, done, total))?;
    let replays: Vec<Replay> = alternatives
        .iter()
        .zip(&outcomes)
        .map(|(a, o)| Replay {
            label: a.policy.label(),
            cause: a.cause.clone(),
            // nll[t] scores token t + 1.
            logprob: std::iter::once(f64::NAN).chain(o.nll.iter().map(|x| -x)).collect(),
            first_eviction: o.first_eviction_step.map(|t| t + 1),
        })
        .collect();
    let conformance = conformance(&engine, &replays).map_err(|why| Error::file(&opts.trace, why))?;
    let format = match opts.rounding {
        Some(declared) => Some(check_format(lm, (&ids, &engine), opts, (declared, &replays[0].logprob), progress)?),
        None => None,
    };
    let lens: Vec<Option<usize>> = outcomes[0].cache_len.iter().map(|&l| Some(l)).collect();
    lm.fingerprint()?;
    let report = VerifyReport {
        sinkscope_version: env!("CARGO_PKG_VERSION").to_string(),
        model: lm.info.clone(),
        trace: opts.trace.display().to_string(),
        request: request.id.clone(),
        policy: opts.policy,
        policy_label: opts.policy.label(),
        tokens: ids.len(),
        prompt_tokens: prompt.len(),
        scored_tokens: request.logprobs.len(),
        evictions: evictions_from_lengths(&lens).into_iter().map(|t| t + 1).collect(),
        conformance,
        format,
        wall_seconds: start.elapsed().as_secs_f64(),
    };
    if let Some(dir) = out {
        write_outputs(&report, dir)?;
    }
    Ok(report)
}

/// Replays the declared policy under each near miss of the declared format (`declared`'s own
/// replay is given) and holds the trace against them all.
fn check_format(
    lm: &LoadedModel,
    (ids, engine): (&[u32], &[Option<f64>]),
    opts: &VerifyOptions,
    (declared, declared_lp): (CacheRounding, &[f64]),
    progress: &mut dyn Progress,
) -> Result<FormatCheck> {
    let mut replays: Vec<FormatReplay> = vec![(declared.name(), "as declared".into(), declared_lp.to_vec())];
    for (rounding, cause) in format_near_misses(declared).into_iter().skip(1) {
        let name = rounding.name();
        let label = format!("{} with {name}", opts.policy.label());
        let sim = SimOptions { rounding, ..SimOptions::default() };
        let o = simulate_with(&lm.model, ids, &[opts.policy], sim, &mut |done, total| progress.steps(&label, done, total))?.remove(0);
        let lp = std::iter::once(f64::NAN).chain(o.nll.iter().map(|x| -x)).collect();
        replays.push((name, cause, lp));
    }
    format_check(engine, &replays).map_err(|why| Error::file(&opts.trace, why))
}

fn pick_request<'a>(requests: &'a [TraceRequest], wanted: Option<&str>) -> std::result::Result<&'a TraceRequest, String> {
    let names = || requests.iter().map(|r| format!("{:?}", r.id)).collect::<Vec<_>>().join(", ");
    match wanted {
        Some(id) => requests.iter().find(|r| r.id == id).ok_or_else(|| format!("has no request {id:?} (it has {})", names())),
        None if requests.len() == 1 => Ok(&requests[0]),
        None => Err(format!("holds {} requests ({}); choose one with --request", requests.len(), names())),
    }
}

/// The token sequence (prompt, then the scored tokens) and the engine's log-probability per
/// sequence index.
fn sequence(prompt: &[u32], r: &TraceRequest) -> std::result::Result<(Vec<u32>, Vec<Option<f64>>), String> {
    if r.token_ids.len() != r.logprobs.len() {
        return Err(format!("request {}: {} token ids for {} logprobs", r.id, r.token_ids.len(), r.logprobs.len()));
    }
    if let Some(i) = r.token_ids.iter().position(Option::is_none) {
        return Err(format!(
            "request {}: scored token {i} has no token id; verify replays the ids the engine saw (llama.cpp's `n_probs` gives each token's `id`, vLLM's `return_tokens_as_token_ids`, JSONL `id` or `token_id`)",
            r.id
        ));
    }
    if prompt.is_empty() {
        return Err(format!(
            "request {}: its first token is scored, but nothing before it is known; give the prompt's token ids with --prompt-ids FILE",
            r.id
        ));
    }
    if r.generated_ids.is_empty() {
        let ids: Vec<u32> = prompt.iter().copied().chain(r.token_ids.iter().flatten().copied()).collect();
        let engine = std::iter::repeat_n(None, prompt.len()).chain(r.logprobs.iter().map(|&l| Some(l))).collect();
        return Ok((ids, engine));
    }
    // The generated tokens as listed; each scored one is placed on the next token with its id.
    let ids: Vec<u32> = prompt.iter().copied().chain(r.generated_ids.iter().copied()).collect();
    let mut engine = vec![None; ids.len()];
    let mut scored = r.token_ids.iter().flatten().zip(&r.logprobs).peekable();
    for (k, &id) in r.generated_ids.iter().enumerate() {
        if let Some((_, &lp)) = scored.next_if(|(&want, _)| want == id) {
            engine[prompt.len() + k] = Some(lp);
        }
    }
    if let Some((id, _)) = scored.next() {
        return Err(format!("request {}: its scored token {id} is not among its `tokens` in order; the response is inconsistent", r.id));
    }
    Ok((ids, engine))
}

/// `verify.json`, and `verify.png` + `.svg` (Δ per token, evictions marked).
pub fn write_outputs(report: &VerifyReport, dir: &Path) -> Result<()> {
    let stage = Staging::begin(dir)?;
    write_json_atomic(&stage.path(VERIFY_FILE)?, report)?;
    #[cfg(feature = "plots")]
    {
        let chart = crate::report::verify_figure::verify_chart(
            &report.conformance,
            &report.evictions,
            &report.policy_label,
            report.model.name.as_deref().unwrap_or(&report.model.source),
        );
        for ext in ["png", "svg"] {
            crate::report::plot::save(&chart, &stage.path(format!("verify.{ext}"))?)?;
        }
    }
    stage.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scored_tokens_are_placed_among_the_generated_ones() {
        // llama.cpp scored 7 and 9 but not 8 (it ended inside a UTF-8 character).
        let r =
            TraceRequest { token_ids: vec![Some(7), Some(9)], logprobs: vec![-1.0, -2.0], generated_ids: vec![7, 8, 9], ..TraceRequest::default() };
        let (ids, engine) = sequence(&[1, 2], &r).unwrap();
        assert_eq!(ids, vec![1, 2, 7, 8, 9]);
        assert_eq!(engine, vec![None, None, Some(-1.0), None, Some(-2.0)]);
        let bad =
            TraceRequest { token_ids: vec![Some(9), Some(7)], logprobs: vec![-1.0, -2.0], generated_ids: vec![7, 8, 9], ..TraceRequest::default() };
        assert!(sequence(&[1], &bad).unwrap_err().contains("not among its `tokens`"));
    }
}
