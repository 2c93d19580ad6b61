//! `sinkscope stream` and `sinkscope recommend`: what a cache policy does to perplexity over a long
//! stream, and how many sink tokens this model needs pinned.

use std::path::PathBuf;

use clap::Args;

use super::format::{format_frontier, format_outcome, format_recommendation};
use super::model_args::ModelArgs;
use super::session::Session;
use crate::error::Result;
use crate::io::staging::check_out_dir;
use crate::kv::policy::{Policy, PolicyKind, PolicyRequest, PositionMode};
use crate::pipeline::heads::{per_head_sweep, PerHeadSweep, CAUSAL_TOKENS, GATE_TOKENS};
use crate::pipeline::stream::{stream_into, sweep_into, StreamSource, SweepOptions, RECOMPUTE_BUDGET};

/// The text a stream runs over.
#[derive(Args, Debug)]
pub struct StreamText {
    /// A UTF-8 text file, tokenized as a whole (BOS only if the model's tokenizer adds one).
    #[arg(short = 'f', long, required_unless_present = "ids", conflicts_with = "ids")]
    pub file: Option<PathBuf>,
    /// The stream as token ids instead of a text (a JSON list, `{"ids": […]}`, llama.cpp's
    /// `/tokenize` answer, or whitespace-separated integers), used as they are: no BOS is added.
    #[arg(long, value_name = "FILE")]
    pub ids: Option<PathBuf>,
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
    /// S for `sink` (kept inside the budget), N for `keep`, the pinned first tokens for `h2o`,
    /// `tova` and `snapkv` [default: 4 for sink and keep, 0 for the score-based policies].
    #[arg(long)]
    pub sinks: Option<usize>,
    /// R for `h2o`: the most recent positions every query sees [default: W/2].
    #[arg(long)]
    pub recent: Option<usize>,
    /// The observation window of `snapkv`: its last N queries score the keys, its last N keys
    /// are kept [default: 32].
    #[arg(long)]
    pub observe: Option<usize>,
    /// The cache budget W: every key a query can see, its own included.
    #[arg(long, default_value_t = 256)]
    pub cache: usize,
    #[arg(long, value_enum, default_value_t = PositionMode::Slot)]
    pub positions: PositionMode,
    /// Also print the perplexity of every N-token segment of the stream (0: not).
    #[arg(long, default_value_t = 0)]
    pub segment: usize,
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
    /// Sink counts to sweep (0 = a plain window, or the score-based policy unpinned).
    #[arg(long, value_delimiter = ',', default_value = "0,1,2,4,8,16")]
    pub sinks: Vec<usize>,
    /// The policy whose pinned first tokens are swept: sink (S = 0 is window), h2o, tova or snapkv.
    #[arg(long, value_enum, default_value_t = PolicyKind::Sink)]
    pub policy: PolicyKind,
    /// R for `--policy h2o` [default: W/2].
    #[arg(long)]
    pub recent: Option<usize>,
    /// The observation window of `--policy snapkv` [default: 32].
    #[arg(long)]
    pub observe: Option<usize>,
    /// Recommend the smallest S within this fraction of the best post-eviction perplexity.
    #[arg(long, default_value_t = 0.02)]
    pub delta: f64,
    #[arg(long, value_enum, default_value_t = PositionMode::Slot)]
    pub positions: PositionMode,
    /// Skip the `recompute` reference (it re-runs W tokens per step).
    #[arg(long)]
    pub no_recompute: bool,
    /// Score `recompute` on every K-th step after the first eviction only (its perplexity is then
    /// an estimate over those steps, with a 95% interval; each scored step re-runs W tokens).
    /// Default: every step when that fits --recompute-budget, else the smallest K that does.
    #[arg(long)]
    pub recompute_every: Option<usize>,
    /// Window tokens `recompute` may run when K is chosen for you.
    #[arg(long, default_value_t = RECOMPUTE_BUDGET)]
    pub recompute_budget: usize,
    #[arg(long)]
    pub json: bool,
    /// Also write the sweep (every policy's per-token NLL) as stream.json into this run directory.
    #[arg(short = 'o', long)]
    pub out: Option<PathBuf>,
    /// Sweep per-head policies instead: the share of KV heads keeping the whole cache (the rest
    /// keep --head-sinks sinks + W − S recent), against KV memory, beside `sink` at equal memory.
    #[arg(long)]
    pub per_head: bool,
    /// S of the streaming heads under --per-head.
    #[arg(long, default_value_t = 4)]
    pub head_sinks: usize,
    /// Shares of retrieval heads swept under --per-head.
    #[arg(long, value_delimiter = ',', default_value = "0,0.125,0.25,0.5,1")]
    pub shares: Vec<f64>,
    /// Under --per-head, rank KV heads by the ΔNLL when each alone keeps only the sinks and the
    /// recent window (measured on --causal-tokens tokens) instead of the attention outside them.
    #[arg(long)]
    pub causal: bool,
    /// Tokens the causal ranking is measured on.
    #[arg(long, default_value_t = CAUSAL_TOKENS)]
    pub causal_tokens: usize,
    /// Under --per-head, rank the heads on this text (its first tokens) instead of the one the
    /// policies are evaluated on.
    #[arg(long)]
    pub calibrate: Option<PathBuf>,
    /// Start the calibration text at this character (past a licence header, say).
    #[arg(long, default_value_t = 0)]
    pub calibrate_start_char: usize,
}

impl StreamText {
    pub(super) fn source(&self) -> StreamSource {
        StreamSource {
            file: self.ids.clone().or_else(|| self.file.clone()).unwrap_or_default(),
            start_char: self.start_char,
            tokens: self.tokens,
            token_by_token: self.token_by_token,
            token_ids: self.ids.is_some(),
        }
    }
}

pub fn run_stream(args: StreamArgs, s: &mut Session) -> Result<()> {
    if let Some(out) = &args.out {
        check_out_dir(out)?;
    }
    let policy = Policy::try_from(PolicyRequest {
        kind: args.policy,
        sinks: args.sinks,
        recent: args.recent,
        observe: args.observe,
        cache: args.cache,
        positions: args.positions,
    })?;
    let (lm, progress) = s.model(&args.model)?;
    let outcome = stream_into(lm, &args.text.source(), policy, args.out.as_deref(), progress)?;
    if !s.prints() {
        return Ok(());
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&outcome)?);
    } else {
        print!("{}", format_outcome(&outcome));
        if args.segment > 0 {
            for (start, n, p) in crate::kv::simulate::segment_ppl(&outcome.nll, args.segment) {
                println!("  tokens {:>7}–{:<7} perplexity {p:.3}", start, start + n);
            }
        }
    }
    Ok(())
}

pub fn run_recommend(args: RecommendArgs, s: &mut Session) -> Result<()> {
    if !args.per_head && (args.causal || args.calibrate.is_some()) {
        return Err(crate::error::Error::input("--causal and --calibrate choose the heads of --per-head; add --per-head"));
    }
    if args.per_head {
        if let Some(out) = &args.out {
            check_out_dir(out)?;
        }
        let (lm, progress) = s.model(&args.model)?;
        let sweep = PerHeadSweep {
            cache: args.cache,
            sinks: args.head_sinks,
            shares: args.shares.clone(),
            causal_tokens: args.causal.then_some(args.causal_tokens),
            calibration: args.calibrate.clone().map(|file| StreamSource {
                file,
                start_char: args.calibrate_start_char,
                tokens: GATE_TOKENS,
                token_by_token: false,
                token_ids: false,
            }),
        };
        let f = per_head_sweep(lm, &args.text.source(), &sweep, args.out.as_deref(), progress)?;
        if !s.prints() {
            return Ok(());
        }
        if args.json {
            println!("{}", serde_json::to_string_pretty(&f)?);
        } else {
            print!("{}", format_frontier(&f));
        }
        return Ok(());
    }
    let opts = SweepOptions {
        source: args.text.source(),
        cache: args.cache,
        sinks: args.sinks.clone(),
        policy: args.policy,
        recent: args.recent,
        observe: args.observe,
        delta: args.delta,
        positions: args.positions,
        recompute: !args.no_recompute,
        recompute_every: args.recompute_every,
        recompute_budget: args.recompute_budget,
    };
    opts.validate()?;
    if let Some(out) = &args.out {
        check_out_dir(out)?;
    }
    let (lm, progress) = s.model(&args.model)?;
    let rec = sweep_into(lm, &opts, args.out.as_deref(), progress)?;
    if !s.prints() {
        return Ok(());
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rec)?);
    } else {
        print!("{}", format_recommendation(&rec));
    }
    Ok(())
}
