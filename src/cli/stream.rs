//! `sinkscope stream` and `sinkscope recommend`: what a cache policy does to perplexity over a long
//! stream, and how many sink tokens this model needs pinned.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;

use super::capture::{create_out_dir, prepare_out_dir};
use super::ModelArgs;
use crate::error::{Error, Result};
use crate::kv::recommend::{recommend, Recommendation};
use crate::kv::{simulate_with, Policy, PolicyKind, PositionMode, SimOptions, StreamOutcome};
use crate::model::LoadedModel;
use crate::report::run::STREAM_FILE;
use crate::report::{write_json_atomic, StreamReport, TokenInfo};

/// The text a stream runs over.
#[derive(Args, Debug)]
pub struct StreamText {
    /// A UTF-8 text file, tokenized as a whole (BOS only if the model's tokenizer adds one).
    #[arg(short = 'f', long)]
    pub file: PathBuf,
    /// Start at this character of the file.
    #[arg(long, default_value_t = 0)]
    pub start_char: usize,
    /// Tokens in the stream.
    #[arg(long, default_value_t = 2000)]
    pub tokens: usize,
    /// Decode one token per step (as a serving loop does) instead of replaying the cached
    /// policies a block of queries at a time; the numbers agree to float rounding, this is slower.
    #[arg(long)]
    pub token_by_token: bool,
}

#[derive(Args, Debug)]
pub struct StreamArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub text: StreamText,
    #[arg(long, value_enum)]
    pub policy: PolicyKind,
    /// S for `sink` (kept inside the budget), N for `keep`.
    #[arg(long, default_value_t = 4)]
    pub sinks: usize,
    /// The cache budget W: every key a query can see, its own included.
    #[arg(long, default_value_t = 256)]
    pub cache: usize,
    #[arg(long, value_enum, default_value_t = PositionMode::Slot)]
    pub positions: PositionMode,
    /// Print the outcome (with per-token NLL and cache length) as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the outcome as stream.json into this run directory (for `export` and `dash`).
    #[arg(short = 'o', long)]
    pub out: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct RecommendArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub text: StreamText,
    /// The cache budget W.
    #[arg(long)]
    pub cache: usize,
    /// Sink counts to sweep (0 = a plain window).
    #[arg(long, value_delimiter = ',', default_value = "0,1,2,4,8,16")]
    pub sinks: Vec<usize>,
    /// Recommend the smallest S within this fraction of the best post-eviction perplexity.
    #[arg(long, default_value_t = 0.02)]
    pub delta: f64,
    #[arg(long, value_enum, default_value_t = PositionMode::Slot)]
    pub positions: PositionMode,
    /// Skip the `recompute` reference (it re-runs W tokens per step).
    #[arg(long)]
    pub no_recompute: bool,
    /// Score `recompute` on every K-th step after the first eviction only (its perplexity is then
    /// an estimate over those steps; it costs W tokens of compute per scored step).
    #[arg(long, default_value_t = 1)]
    pub recompute_every: usize,
    #[arg(long)]
    pub json: bool,
    /// Also write the sweep (every policy's per-token NLL) as stream.json into this run directory.
    #[arg(short = 'o', long)]
    pub out: Option<PathBuf>,
}

/// Tokenizes the stream text from `start_char`, keeping `tokens` tokens.
pub fn stream_tokens(lm: &LoadedModel, t: &StreamText) -> Result<Vec<u32>> {
    let text = crate::textfile::read_text_file(&t.file)?;
    let start = text.char_indices().nth(t.start_char).map(|(i, _)| i).ok_or_else(|| {
        Error::file(&t.file, format!("has only {} characters, fewer than --start-char {}", text.chars().count(), t.start_char))
    })?;
    let mut ids = lm.tokenizer.encode(&text[start..])?;
    if t.tokens < 2 {
        return Err(Error::input("--tokens must be at least 2"));
    }
    if ids.len() < t.tokens {
        eprintln!("warning: {} gives only {} tokens from character {}; streaming all of them", t.file.display(), ids.len(), t.start_char);
    }
    ids.truncate(t.tokens);
    if ids.len() < 2 {
        return Err(Error::file(&t.file, "gives fewer than 2 tokens; nothing to stream"));
    }
    Ok(ids)
}

fn progress_bar(label: &str) -> impl FnMut(usize, usize) {
    let start = Instant::now();
    let tty = std::io::stderr().is_terminal();
    let label = label.to_string();
    move |done, total| {
        if tty && (done % 8 == 0 || done == total) {
            let rate = done as f64 / start.elapsed().as_secs_f64().max(1e-9);
            let width = 30;
            let filled = width * done / total.max(1);
            let _ = write!(std::io::stderr(), "\r\x1b[2K{label} [{}{}] {done}/{total} policy-steps, {rate:.1}/s", "#".repeat(filled), "-".repeat(width - filled));
            if done == total {
                let _ = writeln!(std::io::stderr());
            }
        }
    }
}

pub fn run_stream(args: StreamArgs) -> Result<()> {
    if let Some(out) = &args.out {
        prepare_out_dir(out)?;
    }
    let mut lm = args.model.load()?;
    let start = Instant::now();
    let ids = stream_tokens(&lm, &args.text)?;
    let policy = Policy { kind: args.policy, sinks: if matches!(args.policy, PolicyKind::Sink | PolicyKind::Keep) { args.sinks } else { 0 }, cache: args.cache, positions: args.positions };
    for w in policy.validate(ids.len(), lm.model.cfg.context_len)? {
        eprintln!("warning: {w}");
    }
    let opts = SimOptions { token_by_token: args.text.token_by_token, ..SimOptions::default() };
    let out = simulate_with(&lm.model, &ids, &[policy], opts, &mut progress_bar(&policy.label()))?.remove(0);
    if out.first_eviction_step.is_none() && policy.kind != PolicyKind::Dense {
        eprintln!("warning: the stream ended before the first eviction; ppl_after_eviction is undefined");
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", format_outcome(&out));
    }
    if let Some(dir) = &args.out {
        write_stream_report(&mut lm, &args.text, &ids, vec![out], None, start, dir)?;
    }
    Ok(())
}

pub fn format_outcome(o: &StreamOutcome) -> String {
    let opt = |v: Option<f64>| v.map_or("-".into(), |p| format!("{p:.3}"));
    format!(
        "{}: {} tokens, perplexity {:.3}, after first eviction {} (first eviction at step {}), cliff {}, max cache {} entries, {:.1} tokens/s\n",
        o.label,
        o.tokens,
        o.ppl,
        opt(o.ppl_after_eviction),
        o.first_eviction_step.map_or("-".into(), |s| s.to_string()),
        o.cliff_step.map_or("none".into(), |s| format!("at step {s}")),
        o.cache_len.iter().max().copied().unwrap_or(0),
        o.tokens_per_s
    )
}

pub fn run_recommend(args: RecommendArgs) -> Result<()> {
    if !(args.delta >= 0.0 && args.delta.is_finite()) {
        return Err(Error::input("--delta must be a finite number ≥ 0"));
    }
    if args.sinks.is_empty() {
        return Err(Error::input("--sinks needs at least one value"));
    }
    if let Some(out) = &args.out {
        prepare_out_dir(out)?;
    }
    let mut lm = args.model.load()?;
    let rec = sweep_into(&mut lm, &args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rec)?);
    } else {
        print!("{}", format_recommendation(&rec));
    }
    Ok(())
}

/// Runs the sink-count sweep on a loaded model (writing stream.json when `args.out` is set).
pub fn sweep_into(lm: &mut LoadedModel, args: &RecommendArgs) -> Result<Recommendation> {
    let start = Instant::now();
    let ids = stream_tokens(lm, &args.text)?;
    let mut sinks = args.sinks.clone();
    sinks.sort_unstable();
    sinks.dedup();
    let mut policies: Vec<Policy> = sinks
        .iter()
        .map(|&s| Policy { kind: if s == 0 { PolicyKind::Window } else { PolicyKind::Sink }, sinks: s, cache: args.cache, positions: args.positions })
        .collect();
    if !args.no_recompute {
        policies.push(Policy { kind: PolicyKind::Recompute, sinks: 0, cache: args.cache, positions: args.positions });
    }
    let mut warnings = Vec::new();
    for p in &policies {
        for w in p.validate(ids.len(), lm.model.cfg.context_len)? {
            if !warnings.contains(&w) {
                warnings.push(w);
            }
        }
    }
    if ids.len() <= args.cache + 1 {
        return Err(Error::input(format!(
            "the stream has {} tokens, too few for --cache {}: nothing would be evicted; use more --tokens or a smaller --cache",
            ids.len(),
            args.cache
        )));
    }
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let opts = SimOptions { recompute_every: args.recompute_every, token_by_token: args.text.token_by_token };
    let mut outcomes = simulate_with(&lm.model, &ids, &policies, opts, &mut progress_bar(&format!("sweep of {} policies", policies.len())))?;
    let recompute = if args.no_recompute { None } else { outcomes.pop() };
    crate::kv::recommend::cliffs_against_best(&mut outcomes);
    let rec = recommend(&outcomes, recompute.as_ref(), args.cache, args.delta);
    if let Some(dir) = &args.out {
        outcomes.extend(recompute);
        write_stream_report(lm, &args.text, &ids, outcomes, Some(rec.clone()), start, dir)?;
    }
    Ok(rec)
}

/// Writes `stream.json` into the run directory `dir`.
pub fn write_stream_report(lm: &mut LoadedModel, text: &StreamText, ids: &[u32], outcomes: Vec<StreamOutcome>, recommendation: Option<Recommendation>, start: Instant, dir: &Path) -> Result<PathBuf> {
    lm.fingerprint()?;
    let report = StreamReport {
        sinkscope_version: env!("CARGO_PKG_VERSION").to_string(),
        model: lm.info.clone(),
        text_source: text.file.display().to_string(),
        start_char: text.start_char,
        tokens: ids.iter().enumerate().map(|(pos, &id)| TokenInfo { pos, id, piece: lm.tokenizer.token_str(id) }).collect(),
        outcomes,
        recommendation,
        wall_seconds: start.elapsed().as_secs_f64(),
    };
    create_out_dir(dir)?;
    let path = dir.join(STREAM_FILE);
    write_json_atomic(&path, &report)?;
    Ok(path)
}

pub fn format_recommendation(r: &Recommendation) -> String {
    let mut s = format!("sink-count sweep at a budget of W = {} entries (S sinks inside it), {} tokens\n\n", r.cache, r.tokens);
    s.push_str("policy                                        ppl      ppl after eviction   ×best   cliff\n");
    for row in &r.table {
        s.push_str(&format!(
            "{:<44} {:>8.3}  {:>18}  {:>6}  {}\n",
            row.label,
            row.ppl,
            row.ppl_after_eviction.map_or("-".into(), |p| format!("{p:.3}")),
            row.ratio_to_best.map_or("-".into(), |x| format!("{x:.3}")),
            row.cliff_step.map_or("none".into(), |c| format!("step {c}"))
        ));
    }
    s.push_str(&format!("\nrecommended sinks: {}\n{}\n", r.recommended_sinks.map_or("-".into(), |v| v.to_string()), r.verdict));
    s
}
