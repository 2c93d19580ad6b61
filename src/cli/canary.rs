//! `sinkscope canary`: generate under a cache policy and log, per step, the attention on the first
//! four cache slots of every layer (the mid-depth one watched) and the token's log-probability;
//! flag where the mass collapses; write a trace `watch` reads.

use std::path::PathBuf;

use clap::Args;

use super::cache_format_args::CacheFormatArgs;
use super::model_args::ModelArgs;
use super::policy_args::PolicyArgs;
use super::session::Session;
use crate::error::Result;
use crate::io::finite_json::to_pretty;
use crate::kv::canary::FIRST_SLOTS;
use crate::kv::policy::Policy;
use crate::pipeline::canary::{canary_into, CanaryJob, CANARY_TRACE};

#[derive(Args, Debug)]
#[command(mut_arg("policy", |a| a.required(false).default_value("sink").help("The cache policy: dense, window, sink or keep")))]
pub struct CanaryArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt (scored token by token, never flagged).
    #[arg(short = 'p', long, default_value = "")]
    pub prompt: String,
    /// Tokens to generate (or, with --force, to score).
    #[arg(short = 'n', long, default_value_t = 512, value_parser = super::counts::at_least_one)]
    pub steps: usize,
    /// Score this text as the continuation instead of generating one (log-probabilities of real
    /// text: a sharper canary than a model's own greedy choices).
    #[arg(long)]
    pub force: Option<PathBuf>,
    /// Start the forced text at this character.
    #[arg(long, default_value_t = 0)]
    pub start_char: usize,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub formats: CacheFormatArgs,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0, value_parser = super::counts::non_negative)]
    pub temperature: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The watched layer [default: mid-depth].
    #[arg(long)]
    pub layer: Option<usize>,
    /// Flag a step when the watched layer's mass falls below this fraction of its level before
    /// the first eviction.
    #[arg(long, default_value_t = 0.25, value_parser = super::counts::open_fraction)]
    pub collapse: f64,
    /// Print canary.json instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// Write canary.json, canary-trace.jsonl and the figures here.
    #[arg(short = 'o', long)]
    pub out: Option<PathBuf>,
}

pub fn run(args: CanaryArgs, s: &mut Session) -> Result<()> {
    let policy = Policy::try_from(&args.policy)?;
    let rounding = args.formats.row_rounding(policy.positions, "`canary`")?;
    let job = CanaryJob {
        prompt: args.prompt,
        force: args.force,
        start_char: args.start_char,
        steps: args.steps,
        policy,
        temperature: args.temperature,
        seed: args.seed,
        layer: args.layer,
        collapse: args.collapse,
        rounding,
    };
    let (lm, progress) = s.model(&args.model)?;
    let r = canary_into(lm, &job, args.out.as_deref(), progress)?;
    if !s.prints() {
        return Ok(());
    }
    if args.json {
        println!("{}", to_pretty(&r, "the JSON printed")?);
        return Ok(());
    }
    let run = &r.run;
    let at = |i: Option<usize>| i.and_then(|i| run.steps.get(i)).map_or("never".to_string(), |s| format!("token {}", s.index));
    println!(
        "{} under {}: {} steps, watched layer {} of {}",
        r.model.display_name(),
        policy.label(),
        run.steps.len(),
        run.layer,
        r.model.config.n_layers
    );
    if let Some(rounding) = run.cache_rounding {
        println!("cache: {}", rounding.describe());
    }
    println!(
        "attention on the first {FIRST_SLOTS} cache slots, watched layer: baseline {} before the first eviction; flagged below {:.0}% of it",
        run.baseline_mass.map_or("-".into(), |b| format!("{b:.3}")),
        100.0 * run.collapse
    );
    println!("first eviction: {}; first token evicted: {}; collapse flagged: {}", at(run.first_eviction), at(run.sink_evicted), at(run.collapse_at));
    let lp = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.3}"));
    println!("mean token logprob: {} before the first eviction, {} after", lp(r.mean_logprob_before), lp(r.mean_logprob_after));
    println!("{:>7} {:>6} {:>9} {:>9} {:>10}  first slots", "token", "keys", "watched", "all (mean)", "logprob");
    let every = (run.steps.len() / 24).max(1);
    let landmarks = [run.first_eviction, run.sink_evicted, run.collapse_at];
    for (_, s) in run.steps.iter().enumerate().filter(|(i, _)| i % every == 0 || landmarks.contains(&Some(*i))) {
        let all = s.mean_mass();
        let mark = if s.flagged { " !" } else { "" };
        println!(
            "{:>7} {:>6} {:>9.3} {:>9.3} {:>10.3}  {:?}{mark}",
            s.index,
            s.keys,
            s.first_slot_mass.get(run.layer).copied().unwrap_or(0.0),
            all,
            s.logprob,
            s.first_slots
        );
    }
    if r.forced.is_none() {
        println!("continuation: {}", r.continuation.replace('\n', " "));
    }
    if let Some(dir) = &args.out {
        println!("canary.json, {CANARY_TRACE} (read it with `sinkscope watch`) and figures in {}", dir.display());
    }
    Ok(())
}
