//! `sinkscope stream` and `sinkscope recommend`: what a cache policy does to perplexity over a long
//! stream, and how many sink tokens this model needs pinned.

use std::path::PathBuf;

use clap::Args;

use super::cache_format_args::{frontier_roundings, parse_format_pair, parse_memory_budget, CacheFormatArgs};
use super::format::{format_cache_error, format_cache_frontier, format_divergence, format_frontier, format_outcome, format_recommendation};
use super::model_args::ModelArgs;
use super::policy_args::{CacheArgs, PolicyArgs};
use super::session::Session;
use crate::error::{Error, Result};
use crate::io::finite_json::{check, to_pretty};
use crate::io::staging::check_out_dir;
use crate::kv::cache_frontier::MemoryBudget;
use crate::kv::divergence::SINK_POSITIONS;
use crate::kv::policy::{Eviction, Policy, PolicyKind, PositionMode};
use crate::numerics::cache_formats::CacheFormat;
use crate::pipeline::cache_frontier::{frontier_into, FrontierOptions};
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
    #[arg(long, default_value_t = 2000, value_parser = super::counts::at_least_one)]
    pub tokens: usize,
    /// Decode one token per step (as a serving loop does) instead of replaying the cached
    /// policies a block of queries at a time; the numbers agree to float rounding, this is slower.
    #[arg(long)]
    pub token_by_token: bool,
    /// The file is a text the caller was given inline and wrote for this run (the Python
    /// package does): the records name it by its length and SHA-256, not by its path.
    #[arg(long, hide = true, requires = "file")]
    pub inline_text: bool,
}

#[derive(Args, Debug)]
pub struct StreamArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub text: StreamText,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub formats: CacheFormatArgs,
    /// With a rounding cache: also each step's KL divergence of the next-token distribution from
    /// the exact cache's (the stream runs twice more, exact and rounded in lockstep).
    #[arg(long)]
    pub kl: bool,
    /// Under --kl, the first this many stream positions count as the sinks when saying where
    /// the error lands per head (attention moved off them, their keys' rounding error).
    #[arg(long, default_value_t = SINK_POSITIONS, requires = "kl", value_parser = super::counts::at_least_one)]
    pub sink_positions: usize,
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

/// `recommend`: a sweep of the pinned first tokens at one budget, or with `--per-head` a sweep of
/// the share of KV heads keeping the whole cache (its own flags; clap refuses the other mode's).
#[derive(Args, Debug)]
#[command(mut_arg("cache", |a| a.required(true).default_value(None).help("The cache budget W")))]
pub struct RecommendArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub text: StreamText,
    #[command(flatten)]
    pub cache: CacheArgs,
    #[command(flatten)]
    pub formats: CacheFormatArgs,
    /// Sink counts to sweep (0 = a plain window, or the score-based policy unpinned)
    /// [default: 0,1,2,4,8,16; 4 with --cache-types].
    #[arg(long, value_delimiter = ',')]
    pub sinks: Option<Vec<usize>>,
    /// The policy whose pinned first tokens are swept: sink (S = 0 is window), h2o, tova or snapkv.
    #[arg(long, value_enum, default_value_t = PolicyKind::Sink)]
    pub policy: PolicyKind,
    /// Recommend the smallest S within this fraction of the best post-eviction perplexity.
    #[arg(long, default_value_t = 0.02, value_parser = super::counts::non_negative)]
    pub delta: f64,
    /// Skip the `recompute` reference (it re-runs W tokens per step).
    #[arg(long)]
    pub no_recompute: bool,
    /// Score `recompute` on every K-th step after the first eviction only (its perplexity is then
    /// an estimate over those steps, with a 95% interval; each scored step re-runs W tokens).
    /// Default: every step when that fits --recompute-budget, else the smallest K that does.
    #[arg(long)]
    pub recompute_every: Option<usize>,
    /// Window tokens `recompute` may run when K is chosen for you.
    #[arg(long, default_value_t = RECOMPUTE_BUDGET, value_parser = super::counts::at_least_one)]
    pub recompute_budget: usize,
    #[arg(long)]
    pub json: bool,
    /// Also write the sweep (every policy's per-token NLL) as stream.json into this run directory.
    #[arg(short = 'o', long)]
    pub out: Option<PathBuf>,
    /// Sweep per-head policies instead: the share of KV heads keeping the whole cache (the rest
    /// keep --head-sinks sinks + W − S recent), against KV memory, beside `sink` at equal memory.
    #[arg(long, conflicts_with_all = ["sinks", "policy", "recent", "observe", "positions", "page", "delta", "no_recompute", "recompute_every", "recompute_budget"])]
    pub per_head: bool,
    /// Sweep cache types instead: the frontier over these (`q4_0` for keys and values, `q8_0/q4_0`
    /// for K/V) × --unquantized-firsts × `sink` at each S of --sinks and each W of --cache and
    /// --windows, with the full cache, against the exact full cache's perplexity on the same
    /// steps and the f16 full cache's memory.
    #[arg(long, value_delimiter = ',', value_parser = parse_format_pair, conflicts_with_all = ["per_head", "cache_type_k", "cache_type_v", "unquantized_first", "policy", "no_recompute", "recompute_every", "recompute_budget"])]
    pub cache_types: Vec<(CacheFormat, CacheFormat)>,
    /// Under --cache-types, the numbers of first tokens kept exact.
    #[arg(long, value_delimiter = ',', default_value = "0,4", requires = "cache_types")]
    pub unquantized_firsts: Vec<usize>,
    /// Under --cache-types, more budgets W beside --cache.
    #[arg(long, value_delimiter = ',', requires = "cache_types", value_parser = super::counts::at_least_one)]
    pub windows: Vec<usize>,
    /// Under --cache-types, choose the lowest perplexity within this memory: a share of the f16
    /// full cache (`40%`) or a size (`12MiB`) [default: the least memory within --delta].
    #[arg(long, requires = "cache_types", value_parser = parse_memory_budget)]
    pub memory_budget: Option<MemoryBudget>,
    /// S of the streaming heads under --per-head.
    #[arg(long, default_value_t = 4, requires = "per_head")]
    pub head_sinks: usize,
    /// Shares of retrieval heads swept under --per-head.
    #[arg(long, value_delimiter = ',', default_value = "0,0.125,0.25,0.5,1", requires = "per_head", value_parser = super::counts::share)]
    pub shares: Vec<f64>,
    /// Under --per-head, rank KV heads by the ΔNLL when each alone keeps only the sinks and the
    /// recent window (measured on --causal-tokens tokens) instead of the attention outside them.
    #[arg(long, requires = "per_head")]
    pub causal: bool,
    /// Tokens the causal ranking is measured on.
    #[arg(long, default_value_t = CAUSAL_TOKENS, requires = "causal", value_parser = super::counts::at_least_one)]
    pub causal_tokens: usize,
    /// Under --per-head, rank the heads on this text (its first tokens) instead of the one the
    /// policies are evaluated on.
    #[arg(long, requires = "per_head")]
    pub calibrate: Option<PathBuf>,
    /// Start the calibration text at this character (past a licence header, say).
    #[arg(long, default_value_t = 0, requires = "calibrate")]
    pub calibrate_start_char: usize,
}

/// What `recommend` runs, its flags checked: one mode or the other.
enum Recommend {
    Sinks(SweepOptions),
    PerHead(PerHeadSweep),
    Frontier(FrontierOptions),
}

impl RecommendArgs {
    fn mode(&self) -> Result<Recommend> {
        if !self.cache_types.is_empty() {
            return self.frontier().map(Recommend::Frontier);
        }
        if self.per_head {
            return Ok(Recommend::PerHead(PerHeadSweep {
                // Every cache of the sweep runs at slot positions.
                rounding: self.formats.rounding(PositionMode::Slot)?,
                cache: self.cache.cache,
                sinks: self.head_sinks,
                shares: self.shares.clone(),
                causal_tokens: self.causal.then_some(self.causal_tokens),
                calibration: self.calibrate.clone().map(|file| StreamSource {
                    file,
                    start_char: self.calibrate_start_char,
                    tokens: GATE_TOKENS,
                    token_by_token: false,
                    token_ids: false,
                    inline: false,
                }),
            }));
        }
        let rounding = self.formats.rounding(self.cache.positions)?;
        if !(self.delta >= 0.0 && self.delta.is_finite()) {
            return Err(Error::input("--delta must be a finite number ≥ 0"));
        }
        if self.recompute_every == Some(0) {
            return Err(Error::input("--recompute-every must be at least 1"));
        }
        if self.recompute_budget == 0 {
            return Err(Error::input("--recompute-budget must be at least 1 token"));
        }
        Ok(Recommend::Sinks(SweepOptions {
            source: self.text.source(),
            policies: self.swept_policies()?,
            recompute: (!self.no_recompute).then(|| Policy::new(Eviction::Recompute, self.cache.cache, self.cache.positions)),
            delta: self.delta,
            recompute_every: self.recompute_every,
            recompute_budget: self.recompute_budget,
            rounding,
        }))
    }

    /// The cache-type frontier: every rounding × `sink` at each S and W, and the full cache.
    fn frontier(&self) -> Result<FrontierOptions> {
        let roundings = frontier_roundings(
            &self.cache_types,
            &self.unquantized_firsts,
            self.formats.no_attn_rot,
            self.cache.positions,
            self.formats.kivi_residual,
        )?;
        let mut windows: Vec<usize> = std::iter::once(self.cache.cache).chain(self.windows.iter().copied()).collect();
        windows.sort_unstable();
        windows.dedup();
        let mut sinks = self.sinks.clone().unwrap_or_else(|| vec![4]);
        sinks.sort_unstable();
        sinks.dedup();
        let mut policies = Vec::new();
        for &w in &windows {
            let budget = CacheArgs { cache: w, ..self.cache.clone() };
            for &s in &sinks {
                let rule = Eviction::sink_or_window(s).kind();
                policies.push(budget.policy(rule, rule.pins().then_some(s))?);
            }
        }
        policies.push(Policy::new(Eviction::Dense, self.cache.cache, self.cache.positions));
        Ok(FrontierOptions { source: self.text.source(), roundings, policies, delta: self.delta, memory_budget: self.memory_budget })
    }

    /// The rule at each asked S, in increasing S (S = 0 of `sink` is `window`).
    fn swept_policies(&self) -> Result<Vec<Policy>> {
        let sinks = self.sinks.clone().unwrap_or_else(|| vec![0, 1, 2, 4, 8, 16]);
        if sinks.is_empty() {
            return Err(Error::input("--sinks needs at least one value"));
        }
        if !matches!(self.policy, PolicyKind::Sink | PolicyKind::Window | PolicyKind::H2o | PolicyKind::Tova | PolicyKind::Snapkv) {
            return Err(Error::input(format!("recommend sweeps the S of sink, h2o, tova or snapkv; --policy {} has none", self.policy.name())));
        }
        let mut sinks = sinks;
        sinks.sort_unstable();
        sinks.dedup();
        sinks
            .into_iter()
            .map(|s| match self.policy {
                PolicyKind::Sink | PolicyKind::Window => {
                    let rule = Eviction::sink_or_window(s).kind();
                    self.cache.policy(rule, rule.pins().then_some(s))
                }
                kind => self.cache.policy(kind, Some(s)),
            })
            .collect()
    }
}

impl StreamText {
    pub(super) fn source(&self) -> StreamSource {
        StreamSource {
            file: self.ids.clone().or_else(|| self.file.clone()).unwrap_or_default(),
            start_char: self.start_char,
            tokens: self.tokens,
            token_by_token: self.token_by_token,
            token_ids: self.ids.is_some(),
            inline: self.inline_text,
        }
    }
}

pub fn run_stream(args: StreamArgs, s: &mut Session) -> Result<()> {
    if let Some(out) = &args.out {
        check_out_dir(out)?;
    }
    let policy = Policy::try_from(&args.policy)?;
    let rounding = args.formats.rounding(policy.positions)?;
    let (lm, progress) = s.model(&args.model)?;
    let (outcome, kl) =
        stream_into(lm, &args.text.source(), (policy, rounding, args.kl.then_some(args.sink_positions)), args.out.as_deref(), progress)?;
    if !s.prints() {
        return Ok(());
    }
    if !rounding.is_exact() && !args.json {
        println!("cache: {}", rounding.describe());
    }
    if args.json {
        // to_value turns a NaN into null before to_pretty could see it: check the parts first.
        check(&outcome, "the JSON printed")?;
        check(&kl.as_ref().map(|d| (&d.kl, &d.by_head)), "the JSON printed")?;
        let mut value = serde_json::to_value(&outcome)?;
        if let (Some(d), Some(map)) = (kl, value.as_object_mut()) {
            map.insert("kl_from_exact".into(), serde_json::to_value(&d.kl)?);
            map.insert("cache_error_by_head".into(), serde_json::to_value(&d.by_head)?);
        }
        println!("{}", to_pretty(&value, "the JSON printed")?);
    } else {
        print!("{}", format_outcome(&outcome));
        if let Some(d) = &kl {
            println!("{}", format_divergence(&d.kl, outcome.first_eviction_step));
            print!("{}", format_cache_error(&d.by_head));
        }
        if args.segment > 0 {
            for (start, n, p) in crate::kv::simulate::segment_ppl(&outcome.nll, args.segment) {
                println!("  tokens {:>7}–{:<7} perplexity {p:.3}", start, start + n);
            }
        }
    }
    Ok(())
}

pub fn run_recommend(args: RecommendArgs, s: &mut Session) -> Result<()> {
    let mode = args.mode()?;
    if let Some(out) = &args.out {
        check_out_dir(out)?;
    }
    let (lm, progress) = s.model(&args.model)?;
    match mode {
        Recommend::PerHead(sweep) => {
            let f = per_head_sweep(lm, &args.text.source(), &sweep, args.out.as_deref(), progress)?;
            if s.prints() {
                match args.json {
                    true => println!("{}", to_pretty(&f, "the JSON printed")?),
                    false => print!("{}", format_frontier(&f)),
                }
            }
        }
        Recommend::Frontier(opts) => {
            let f = frontier_into(lm, &opts, args.out.as_deref(), progress)?;
            if s.prints() {
                match args.json {
                    true => println!("{}", to_pretty(&f, "the JSON printed")?),
                    false => print!("{}", format_cache_frontier(&f)),
                }
            }
        }
        Recommend::Sinks(opts) => {
            let rec = sweep_into(lm, &opts, args.out.as_deref(), progress)?;
            if s.prints() && !opts.rounding.is_exact() && !args.json {
                println!("cache: {}", opts.rounding.describe());
            }
            if s.prints() {
                match args.json {
                    true => println!("{}", to_pretty(&rec, "the JSON printed")?),
                    false => print!("{}", format_recommendation(&rec)),
                }
            }
        }
    }
    Ok(())
}
