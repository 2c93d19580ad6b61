//! Streaming into a run: tokenize a long text, replay one cache policy (`stream`) or sweep the
//! number of pinned sinks at a fixed budget (`recommend`), and write `stream.json`.

use crate::kv::divergence::{check_divergence, divergence_from_exact, Divergence};
use crate::kv::memory::model_windows_note;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::progress::Progress;
use crate::error::{Error, Result};
use crate::io::staging::Staging;
use crate::io::write_json_atomic;
use crate::kv::policy::{Eviction, Policy, PositionMode};
use crate::kv::recommend::{cliffs_against_best, recommend, Recommendation};
use crate::kv::simulate::{recompute_stride, refuse_unmodelled_rounding, simulate_with, SimOptions, StreamOutcome};
use crate::model::cache_rounding::CacheRounding;
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
    /// `file` holds a text given inline (written for this run by the caller): recorded by its
    /// length and SHA-256, not by its path.
    pub inline: bool,
}

impl StreamSource {
    /// How the records name the text: its path, or what an inline text is.
    pub fn recorded_as(&self) -> Result<String> {
        if self.inline {
            return Ok(crate::io::text::inline_label(&crate::io::text::read_text_file(&self.file)?));
        }
        Ok(self.file.display().to_string())
    }
}

/// A sweep of policies at one cache budget (their S, in increasing order), with the `recompute`
/// reference beside them; the policies come checked from the command line (`cli::policy_args`) or
/// from [`sink_sweep`].
#[derive(Debug, Clone)]
pub struct SweepOptions {
    pub source: StreamSource,
    /// The swept policies, in increasing S, all at one budget W.
    pub policies: Vec<Policy>,
    /// The `recompute` reference, when asked for.
    pub recompute: Option<Policy>,
    /// Recommend the smallest S within this fraction of the best post-eviction perplexity.
    pub delta: f64,
    /// Score `recompute` on every K-th step after the first eviction only; `None`: every step
    /// when that fits [`SweepOptions::recompute_budget`], else the smallest K that does.
    pub recompute_every: Option<usize>,
    /// Window tokens `recompute` may run when K is chosen automatically (each scored step
    /// re-runs W tokens).
    pub recompute_budget: usize,
    /// The cache's storage formats, for every policy of the sweep.
    pub rounding: CacheRounding,
}

/// Default [`SweepOptions::recompute_budget`]: 65,536 window tokens — about 1.5 min for a
/// 135M-parameter model on two CPU cores (batched; `cargo bench --bench recompute`).
pub const RECOMPUTE_BUDGET: usize = 1 << 16;

/// StreamingLLM's sweep: `sink S` at budget `cache` for each S in increasing order (S = 0 is
/// `window`), positions by cache slot, with the default δ and no `recompute` reference.
pub fn sink_sweep(source: StreamSource, sinks: &[usize], cache: usize) -> Result<SweepOptions> {
    if sinks.is_empty() {
        return Err(Error::input("a sink sweep needs at least one S"));
    }
    let mut sinks = sinks.to_vec();
    sinks.sort_unstable();
    sinks.dedup();
    let policies: Vec<Policy> = sinks.into_iter().map(|s| Policy::new(Eviction::sink_or_window(s), cache, PositionMode::Slot)).collect();
    for p in &policies {
        p.check()?;
    }
    Ok(SweepOptions {
        source,
        policies,
        recompute: None,
        delta: 0.02,
        recompute_every: None,
        recompute_budget: RECOMPUTE_BUDGET,
        rounding: CacheRounding::default(),
    })
}

/// Tokenizes the stream text from `start_char`, keeping `tokens` tokens.
pub fn stream_tokens(lm: &LoadedModel, t: &StreamSource, progress: &mut dyn Progress) -> Result<Vec<u32>> {
    if t.token_ids {
        return stream_ids(lm, t, progress);
    }
    let text = crate::io::text::read_text_file(&t.file)?;
    let from = crate::io::text::from_char(&text, t.start_char).ok_or_else(|| {
        Error::file(&t.file, format!("has only {} characters, fewer than the start character {}", text.chars().count(), t.start_char))
    })?;
    if t.tokens < 2 {
        return Err(Error::input("a stream needs at least 2 tokens"));
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
        return Err(Error::input("a start character applies to a text, not to a file of token ids"));
    }
    if t.tokens < 2 {
        return Err(Error::input("a stream needs at least 2 tokens"));
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

/// Streams `source` under one policy, its cache storing keys and values as `rounding` says (with
/// `kl` = Some(S), also each step's KL divergence from the exact cache's next-token distribution
/// and each head's error, the first S positions counted as the sinks); writes stream.json into
/// `out` when given.
pub fn stream_into(
    lm: &mut LoadedModel,
    source: &StreamSource,
    (policy, rounding, kl): (Policy, CacheRounding, Option<usize>),
    out: Option<&Path>,
    progress: &mut dyn Progress,
) -> Result<(StreamOutcome, Option<Divergence>)> {
    let start = Instant::now();
    let ids = stream_tokens(lm, source, progress)?;
    for w in policy.validate(ids.len(), lm.model.cfg.context_len)? {
        progress.warning(&w);
    }
    refuse_unmodelled_rounding(&lm.model, &[policy], rounding)?;
    if kl.is_some() && rounding.is_exact() {
        return Err(Error::input("--kl measures a rounding cache against the exact one; give --cache-type-k or --cache-type-v"));
    }
    if kl.is_some() {
        check_divergence(&lm.model, policy)?;
    }
    super::claim_out(lm, out)?;
    let opts = SimOptions { token_by_token: source.token_by_token, rounding, ..SimOptions::default() };
    let label = policy.label();
    let outcome = simulate_with(&lm.model, &ids, &[policy], opts, &mut |done, total| progress.steps(&label, done, total))?.remove(0);
    if outcome.first_eviction_step.is_none() && policy.eviction != Eviction::Dense {
        progress.warning("the stream ended before the first eviction; ppl_after_eviction is undefined");
    }
    let divergence = match kl {
        Some(sinks) => {
            let label = format!("KL from the exact cache, {label}");
            Some(divergence_from_exact(&lm.model, &ids, (policy, rounding), sinks, &mut |done, total| progress.steps(&label, done, total))?)
        }
        None => None,
    };
    if let Some(dir) = out {
        let mut report = stream_report(lm, source, &ids, vec![outcome.clone()], None, start)?;
        report.cache_rounding = (!rounding.is_exact()).then_some(rounding);
        report.kl_from_exact = divergence.as_ref().map(|d| d.kl.clone());
        report.cache_error_by_head = divergence.as_ref().map(|d| d.by_head.clone());
        write_stream_report(&report, dir)?;
    }
    Ok((outcome, divergence))
}

/// Runs the sink-count sweep (of `sink`, or of a score-based policy's pinned keys) on a loaded model (writing stream.json into `out` when given).
pub fn sweep_into(lm: &mut LoadedModel, opts: &SweepOptions, out: Option<&Path>, progress: &mut dyn Progress) -> Result<Recommendation> {
    if opts.policies.is_empty() {
        return Err(Error::input("a sweep needs at least one policy"));
    }
    let cache = opts.policies[0].cache;
    if opts.policies.iter().chain(&opts.recompute).any(|p| p.cache != cache) {
        return Err(Error::input("a sweep's policies share one cache budget"));
    }
    let policies: Vec<Policy> = opts.policies.iter().copied().chain(opts.recompute).collect();
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
    if ids.len() <= cache + 1 {
        return Err(Error::input(format!(
            "the stream has {} tokens, too few for the budget W = {}: nothing would be evicted; stream more tokens or use a smaller budget",
            ids.len(),
            cache
        )));
    }
    refuse_unmodelled_rounding(&lm.model, &policies, opts.rounding)?;
    super::claim_out(lm, out)?;
    for w in &warnings {
        progress.warning(w);
    }
    let every = opts.recompute_every.unwrap_or_else(|| recompute_stride(ids.len(), cache, opts.recompute_budget));
    if opts.recompute.is_some() && every > 1 && opts.recompute_every.is_none() {
        progress.warning(&format!(
            "recompute is scored on 1 step in {every} after the first eviction: every step would run {} window tokens, over the recompute budget of {}; its perplexity comes with a 95% interval, and scoring recompute on every step gives the exact value",
            (ids.len() - 1 - cache.min(ids.len() - 1)) * cache,
            opts.recompute_budget
        ));
    }
    let sim = SimOptions { recompute_every: every, token_by_token: opts.source.token_by_token, rounding: opts.rounding };
    let label = format!("sweep of {} policies", policies.len());
    let mut outcomes = simulate_with(&lm.model, &ids, &policies, sim, &mut |done, total| progress.steps(&label, done, total))?;
    let recompute = if opts.recompute.is_some() { outcomes.pop() } else { None };
    cliffs_against_best(&mut outcomes);
    let mut rec = recommend(&outcomes, recompute.as_ref(), cache, opts.delta);
    rec.model_windows = model_windows_note(&lm.model.cfg);
    if let Some(dir) = out {
        outcomes.extend(recompute);
        let mut report = stream_report(lm, &opts.source, &ids, outcomes, Some(rec.clone()), start)?;
        report.cache_rounding = (!opts.rounding.is_exact()).then_some(opts.rounding);
        write_stream_report(&report, dir)?;
    }
    Ok(rec)
}

/// Writes `report` as `dir/stream.json` and returns its path.
pub fn write_stream_report(report: &StreamReport, dir: &Path) -> Result<PathBuf> {
    let stage = Staging::begin(dir)?;
    write_json_atomic(&stage.path(STREAM_FILE)?, report)?;
    stage.commit()?;
    Ok(dir.join(STREAM_FILE))
}

/// The `stream.json` record of `outcomes` ([`write_stream_report`] writes it alone; `heads` stages
/// it with its own file).
pub fn stream_report(
    lm: &mut LoadedModel,
    source: &StreamSource,
    ids: &[u32],
    outcomes: Vec<StreamOutcome>,
    recommendation: Option<Recommendation>,
    start: Instant,
) -> Result<StreamReport> {
    lm.fingerprint()?;
    Ok(StreamReport {
        sinkscope_version: env!("CARGO_PKG_VERSION").to_string(),
        model: lm.info.clone(),
        text_source: source.recorded_as()?,
        start_char: source.start_char,
        tokens: ids.iter().enumerate().map(|(pos, &id)| TokenInfo { pos, id, piece: lm.tokenizer.token_str(id) }).collect(),
        outcomes,
        recommendation,
        wall_seconds: start.elapsed().as_secs_f64(),
        cache_rounding: None,
        kl_from_exact: None,
        cache_error_by_head: None,
        cache_frontier: None,
    })
}
