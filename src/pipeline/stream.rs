//! Streaming into a run: tokenize a long text, replay one cache policy (`stream`) or sweep the
//! number of pinned sinks at a fixed budget (`recommend`), and write `stream.json`.

use crate::kv::memory::model_windows_note;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::progress::Progress;
use crate::error::{Error, Result};
use crate::io::staging::Staging;
use crate::io::write_json_atomic;
use crate::kv::policy::{Eviction, Policy, PolicyKind, PolicyRequest, PositionMode};
use crate::kv::recommend::{cliffs_against_best, recommend, Recommendation};
use crate::kv::simulate::{recompute_stride, simulate_with, SimOptions, StreamOutcome};
use crate::model::info::TokenInfo;
use crate::model::load::LoadedModel;
use crate::report::records::StreamReport;
use crate::report::run::STREAM_FILE;

/// The text a stream runs over.
#[derive(Debug, Clone)]
pub struct StreamSource {
    /// A UTF-8 text file, tokenized as a whole (BOS only if the model's tokenizer adds one).
    pub file: PathBuf,
    /// Start at this character of the file.
    pub start_char: usize,
    /// Tokens in the stream.
    pub tokens: usize,
    /// Decode one token per step instead of replaying cached policies a block of queries at a time.
    pub token_by_token: bool,
    /// `file` holds token ids (`io::token_ids`), streamed as they are, not a text.
    pub token_ids: bool,
}

/// A sink-count sweep at one cache budget.
#[derive(Debug, Clone)]
pub struct SweepOptions {
    pub source: StreamSource,
    /// The cache budget W.
    pub cache: usize,
    /// Sink counts to sweep (0 = a plain window, or the score-based policy unpinned).
    pub sinks: Vec<usize>,
    /// The policy whose S is swept: `sink` (S = 0 is `window`), `h2o`, `tova` or `snapkv`.
    pub policy: PolicyKind,
    /// R for `h2o` (`None`: W/2).
    pub recent: Option<usize>,
    /// The observation window of `snapkv` (`None`: its default).
    pub observe: Option<usize>,
    /// Recommend the smallest S within this fraction of the best post-eviction perplexity.
    pub delta: f64,
    pub positions: PositionMode,
    /// Add the `recompute` reference.
    pub recompute: bool,
    /// Score `recompute` on every K-th step after the first eviction only; `None`: every step
    /// when that fits [`SweepOptions::recompute_budget`], else the smallest K that does.
    pub recompute_every: Option<usize>,
    /// Window tokens `recompute` may run when K is chosen automatically (each scored step
    /// re-runs W tokens).
    pub recompute_budget: usize,
}

/// Default [`SweepOptions::recompute_budget`]: 65,536 window tokens — about 1.5 min for a
/// 135M-parameter model on two CPU cores (batched; `cargo bench --bench recompute`).
pub const RECOMPUTE_BUDGET: usize = 1 << 16;

impl SweepOptions {
    /// Refuses settings no sweep can use; the swept policies are checked as a command's policy is.
    pub fn validate(&self) -> Result<()> {
        self.policies().map(|_| ())
    }

    /// The swept policies (S = 0 of `sink` is `window`), then `recompute` when asked for.
    pub fn policies(&self) -> Result<Vec<Policy>> {
        if !(self.delta >= 0.0 && self.delta.is_finite()) {
            return Err(Error::input("--delta must be a finite number ≥ 0"));
        }
        if self.sinks.is_empty() {
            return Err(Error::input("--sinks needs at least one value"));
        }
        if !matches!(self.policy, PolicyKind::Sink | PolicyKind::Window | PolicyKind::H2o | PolicyKind::Tova | PolicyKind::Snapkv) {
            return Err(Error::input(format!("recommend sweeps the S of sink, h2o, tova or snapkv; --policy {} has none", self.policy.name())));
        }
        if self.recompute_every == Some(0) {
            return Err(Error::input("--recompute-every must be at least 1"));
        }
        if self.recompute_budget == 0 {
            return Err(Error::input("--recompute-budget must be at least 1 token"));
        }
        let mut sinks = self.sinks.clone();
        sinks.sort_unstable();
        sinks.dedup();
        let request = |kind: PolicyKind, sinks: Option<usize>| PolicyRequest {
            kind,
            sinks,
            recent: self.recent,
            observe: self.observe,
            cache: self.cache,
            positions: self.positions,
        };
        let mut policies = sinks
            .into_iter()
            .map(|s| {
                Policy::try_from(match self.policy {
                    PolicyKind::Sink | PolicyKind::Window if s == 0 => request(PolicyKind::Window, None),
                    PolicyKind::Sink | PolicyKind::Window => request(PolicyKind::Sink, Some(s)),
                    kind => request(kind, Some(s)),
                })
            })
            .collect::<Result<Vec<Policy>>>()?;
        if self.recompute {
            policies.push(Policy::new(Eviction::Recompute, self.cache, self.positions));
        }
        Ok(policies)
    }
}

/// Tokenizes the stream text from `start_char`, keeping `tokens` tokens.
pub fn stream_tokens(lm: &LoadedModel, t: &StreamSource, progress: &mut dyn Progress) -> Result<Vec<u32>> {
    if t.token_ids {
        return stream_ids(lm, t, progress);
    }
    let text = crate::io::text::read_text_file(&t.file)?;
    let from = crate::io::text::from_char(&text, t.start_char)
        .ok_or_else(|| Error::file(&t.file, format!("has only {} characters, fewer than --start-char {}", text.chars().count(), t.start_char)))?;
    if t.tokens < 2 {
        return Err(Error::input("--tokens must be at least 2"));
    }
    // Only as much of the file as the stream needs is tokenized (a 4 MB book whole costs ~0.4 GB).
    let ids = lm.tokenizer.encode_prefix(from, t.tokens)?;
    if ids.len() < t.tokens {
        progress.warning(&format!("{} gives only {} tokens from character {}; streaming all of them", t.file.display(), ids.len(), t.start_char));
    }
    if ids.len() < 2 {
        return Err(Error::file(&t.file, "gives fewer than 2 tokens; nothing to stream"));
    }
    Ok(ids)
}

/// The first `tokens` ids of a token-id file, each checked against the model's vocabulary.
fn stream_ids(lm: &LoadedModel, t: &StreamSource, progress: &mut dyn Progress) -> Result<Vec<u32>> {
    if t.start_char != 0 {
        return Err(Error::input("--start-char applies to a text (-f), not to token ids (--ids)"));
    }
    if t.tokens < 2 {
        return Err(Error::input("--tokens must be at least 2"));
    }
    let mut ids = crate::io::token_ids::read_token_ids(&t.file)?;
    let vocab = lm.model.cfg.vocab_size;
    if let Some((i, id)) = ids.iter().enumerate().find(|(_, &id)| id as usize >= vocab) {
        return Err(Error::file(&t.file, format!("token {i} is id {id}, outside the model's vocabulary of {vocab}: ids from another tokenizer?")));
    }
    if ids.len() < t.tokens {
        progress.warning(&format!("{} holds only {} token ids; streaming all of them", t.file.display(), ids.len()));
    }
    ids.truncate(t.tokens);
    if ids.len() < 2 {
        return Err(Error::file(&t.file, "holds fewer than 2 token ids; nothing to stream"));
    }
    Ok(ids)
}

/// Streams `source` under one policy; writes stream.json
/// into `out` when given.
pub fn stream_into(
    lm: &mut LoadedModel,
    source: &StreamSource,
    policy: Policy,
    out: Option<&Path>,
    progress: &mut dyn Progress,
) -> Result<StreamOutcome> {
    let start = Instant::now();
    let ids = stream_tokens(lm, source, progress)?;
    for w in policy.validate(ids.len(), lm.model.cfg.context_len)? {
        progress.warning(&w);
    }
    let opts = SimOptions { token_by_token: source.token_by_token, ..SimOptions::default() };
    let label = policy.label();
    let outcome = simulate_with(&lm.model, &ids, &[policy], opts, &mut |done, total| progress.steps(&label, done, total))?.remove(0);
    if outcome.first_eviction_step.is_none() && policy.eviction != Eviction::Dense {
        progress.warning("the stream ended before the first eviction; ppl_after_eviction is undefined");
    }
    if let Some(dir) = out {
        write_stream_report(lm, source, &ids, vec![outcome.clone()], None, start, dir)?;
    }
    Ok(outcome)
}

/// Runs the sink-count sweep (of `sink`, or of a score-based policy's pinned keys) on a loaded model (writing stream.json into `out` when given).
pub fn sweep_into(lm: &mut LoadedModel, opts: &SweepOptions, out: Option<&Path>, progress: &mut dyn Progress) -> Result<Recommendation> {
    let policies = opts.policies()?;
    let start = Instant::now();
    let ids = stream_tokens(lm, &opts.source, progress)?;
    let mut warnings = Vec::new();
    for p in &policies {
        for w in p.validate(ids.len(), lm.model.cfg.context_len)? {
            if !warnings.contains(&w) {
                warnings.push(w);
            }
        }
    }
    if ids.len() <= opts.cache + 1 {
        return Err(Error::input(format!(
            "the stream has {} tokens, too few for --cache {}: nothing would be evicted; use more --tokens or a smaller --cache",
            ids.len(),
            opts.cache
        )));
    }
    for w in &warnings {
        progress.warning(w);
    }
    let every = opts.recompute_every.unwrap_or_else(|| recompute_stride(ids.len(), opts.cache, opts.recompute_budget));
    if opts.recompute && every > 1 && opts.recompute_every.is_none() {
        progress.warning(&format!(
            "recompute is scored on 1 step in {every} after the first eviction: every step would run {} window tokens, over the budget of {} (`recommend --recompute-budget`); its perplexity comes with a 95% interval, and `recommend --recompute-every 1` scores every step",
            (ids.len() - 1 - opts.cache.min(ids.len() - 1)) * opts.cache,
            opts.recompute_budget
        ));
    }
    let sim = SimOptions { recompute_every: every, token_by_token: opts.source.token_by_token };
    let label = format!("sweep of {} policies", policies.len());
    let mut outcomes = simulate_with(&lm.model, &ids, &policies, sim, &mut |done, total| progress.steps(&label, done, total))?;
    let recompute = if opts.recompute { outcomes.pop() } else { None };
    cliffs_against_best(&mut outcomes);
    let mut rec = recommend(&outcomes, recompute.as_ref(), opts.cache, opts.delta);
    rec.model_windows = model_windows_note(&lm.model.cfg);
    if let Some(dir) = out {
        outcomes.extend(recompute);
        write_stream_report(lm, &opts.source, &ids, outcomes, Some(rec.clone()), start, dir)?;
    }
    Ok(rec)
}

/// Writes `stream.json` into the run directory `dir`.
pub fn write_stream_report(
    lm: &mut LoadedModel,
    source: &StreamSource,
    ids: &[u32],
    outcomes: Vec<StreamOutcome>,
    recommendation: Option<Recommendation>,
    start: Instant,
    dir: &Path,
) -> Result<PathBuf> {
    lm.fingerprint()?;
    let report = StreamReport {
        sinkscope_version: env!("CARGO_PKG_VERSION").to_string(),
        model: lm.info.clone(),
        text_source: source.file.display().to_string(),
        start_char: source.start_char,
        tokens: ids.iter().enumerate().map(|(pos, &id)| TokenInfo { pos, id, piece: lm.tokenizer.token_str(id) }).collect(),
        outcomes,
        recommendation,
        wall_seconds: start.elapsed().as_secs_f64(),
    };
    let stage = Staging::begin(dir)?;
    write_json_atomic(&stage.path(STREAM_FILE)?, &report)?;
    stage.commit()?;
    Ok(dir.join(STREAM_FILE))
}
