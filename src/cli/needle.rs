//! `sinkscope needle -m MODEL -o DIR`: pass-key retrieval under every cache policy — accuracy by
//! prompt length and needle depth, scored by the key's rank among distractors and by greedy
//! exact match, with the needle inside and beyond each budget.

use std::path::PathBuf;

use clap::Args;

use super::cache_format_args::CacheFormatArgs;
use super::model_args::ModelArgs;
use super::policy_args::CacheArgs;
use super::session::Session;
use crate::analysis::needle::{budget_split, NeedleHeads, NeedleReport};
use crate::error::Result;
use crate::io::finite_json::to_pretty;
use crate::io::staging::check_out_dir;
use crate::kv::policy::{Policy, PolicyKind};
use crate::kv::retrieval::Compression;
use crate::pipeline::needle::{needle_into, NeedleOptions, NEEDLE_MD};
use crate::pipeline::needle_heads::HeadsOptions;

#[derive(Args, Debug)]
pub struct NeedleArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The haystack's text (a book; repeated if short) [default: the classic repeated sentences].
    #[arg(short = 'f', long = "filler")]
    pub filler: Option<PathBuf>,
    /// Prompt lengths in tokens.
    #[arg(long, value_delimiter = ',', default_value = "512,1024,2048,4096")]
    pub lengths: Vec<usize>,
    /// Needle depths: 0 puts it first, 1 just before the question.
    #[arg(long, value_delimiter = ',', default_value = "0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1")]
    pub depths: Vec<f64>,
    /// Cache policies (the score-based rules run with no pinned tokens and with --sinks;
    /// recompute re-runs the last W tokens for each answer token).
    #[arg(long = "policy", value_enum, value_delimiter = ',', default_value = "dense,window,sink,keep,h2o,tova,snapkv")]
    pub policies: Vec<PolicyKind>,
    #[command(flatten)]
    pub cache: CacheArgs,
    /// How the cache stores keys and values (the streamed dense, window, sink and keep arms).
    #[command(flatten)]
    pub formats: CacheFormatArgs,
    /// Pinned first tokens: S for sink and the score-based rules, N for keep.
    #[arg(long, default_value_t = 4)]
    pub sinks: usize,
    /// Score-based rules also with the question known: the prompt prefilled whole, then
    /// compressed once by its own queries' attention (SnapKV's setting); the streamed run is
    /// always made.
    #[arg(long)]
    pub question_known: bool,
    /// Prompts per length and depth, each with its own key.
    #[arg(long, default_value_t = 5, value_parser = super::counts::at_least_one)]
    pub trials: usize,
    /// Distractor keys each key is ranked against.
    #[arg(long, default_value_t = 9)]
    pub distractors: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Also find which heads retrieve (each KV head's and query head's effect on the answer when
    /// it alone loses the needle's keys, on calibration prompts of the shortest length), compare
    /// them with the heads `heads` keeps whole, and run the per-head mixed policy with either's
    /// heads whole against sink S at the same memory.
    #[arg(long)]
    pub retrieval_heads: bool,
    /// The share of KV heads the per-head mixed policy keeps whole.
    #[arg(long, default_value_t = 0.1)]
    pub whole_share: f64,
    /// Calibration prompts per depth for --retrieval-heads (keys drawn apart from the sweep's).
    #[arg(long, default_value_t = 2, value_parser = super::counts::at_least_one)]
    pub heads_trials: usize,
    #[arg(long)]
    pub json: bool,
    /// The run directory (needle.json, needle.md, tables/, figures/; resumes from needle-parts/).
    #[arg(short = 'o', long)]
    pub out: PathBuf,
}

/// The policies `kinds` name under `cache`: the score-based rules twice, unpinned and with
/// `sinks` pinned (once when `sinks` is 0).
pub fn policies(kinds: &[PolicyKind], cache: &CacheArgs, sinks: usize) -> Result<Vec<Policy>> {
    let mut out = Vec::new();
    for &kind in kinds {
        let pinned: Vec<Option<usize>> = match kind {
            PolicyKind::Dense | PolicyKind::Window | PolicyKind::Recompute => vec![None],
            PolicyKind::Sink | PolicyKind::Keep => vec![Some(sinks)],
            PolicyKind::H2o | PolicyKind::Tova | PolicyKind::Snapkv if sinks == 0 => vec![Some(0)],
            PolicyKind::H2o | PolicyKind::Tova | PolicyKind::Snapkv => vec![Some(0), Some(sinks)],
        };
        for s in pinned {
            let p = cache.swept_policy(kinds, kind, s)?;
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    Ok(out)
}

/// Each policy streamed; the score-based ones also with the question known when asked.
fn with_modes(policies: Vec<Policy>, question_known: bool) -> Vec<(Policy, Compression)> {
    let mut out: Vec<(Policy, Compression)> = policies.iter().map(|&p| (p, Compression::Streamed)).collect();
    if question_known {
        out.extend(policies.iter().filter(|p| p.is_scored()).map(|&p| (p, Compression::QuestionKnown)));
    }
    out
}

pub fn run(args: NeedleArgs, s: &mut Session) -> Result<()> {
    check_out_dir(&args.out)?;
    if args.retrieval_heads && args.cache.page.is_some() {
        return Err(crate::error::Error::input(
            "--page with --retrieval-heads: the per-head mixed policy keeps keys per KV head, which no page holds whole; run the paged arms without it",
        ));
    }
    let opts = NeedleOptions {
        filler: args.filler.clone(),
        lengths: args.lengths.clone(),
        depths: args.depths.clone(),
        policies: with_modes(policies(&args.policies, &args.cache, args.sinks)?, args.question_known),
        trials: args.trials,
        distractors: args.distractors,
        seed: args.seed,
        retrieval_heads: args.retrieval_heads.then_some(HeadsOptions {
            share: args.whole_share,
            trials: args.heads_trials,
            sinks: args.sinks,
            cache: args.cache.cache,
        }),
        rounding: args.formats.rounding(args.cache.positions)?,
    };
    let (lm, progress) = s.model(&args.model)?;
    let report = needle_into(lm, &opts, &args.out, progress)?;
    if !s.prints() {
        return Ok(());
    }
    if args.json {
        println!("{}", to_pretty(&report.cells, "the JSON printed")?);
    } else {
        print!("{}", summary(&report));
        println!("depth × length grids in {}; figures in {}", args.out.join(NEEDLE_MD).display(), args.out.join("figures").display());
    }
    Ok(())
}

fn summary(r: &NeedleReport) -> String {
    let s = &r.settings;
    let mut out = format!(
        "sinkscope needle — {}: {} lengths × {} depths × {} trials, key ranked among {} (chance {:.0}%); streamed unless the label says the question was known\n",
        r.model.display_name(),
        s.lengths.len(),
        s.depths.len(),
        s.trials,
        s.distractors + 1,
        100.0 / (s.distractors + 1) as f64
    );
    if let Some(rounding) = s.cache_rounding {
        out += &format!("  cache: {}\n", rounding.describe());
    }
    let width = r.policies.iter().map(|p| p.label.chars().count()).max().unwrap_or(0).max(6);
    out += &format!("  {:<width$} {:>28} {:>28} {:>8}\n", "policy", "needle within W: first/exact", "beyond W: first/exact", "seconds");
    let side =
        |v: Option<(usize, f64, f64)>| v.map_or("—".to_string(), |(n, rank, exact)| format!("{:.0}% / {:.0}% of {n}", rank * 100.0, exact * 100.0));
    for p in &r.policies {
        let split = budget_split(&r.cells, &p.label);
        out += &format!("  {:<width$} {:>28} {:>28} {:>8.0}\n", p.label, side(split.within), side(split.beyond), p.seconds);
    }
    if s.cache_rounding.is_some() {
        let kl_of = |label: &str| {
            let kl: Vec<f64> = r.trials.iter().filter(|t| t.policy == label).filter_map(|t| t.kl_from_exact).collect();
            (!kl.is_empty()).then(|| format!("{label} {:.4} nats", kl.iter().sum::<f64>() / kl.len() as f64))
        };
        let each: Vec<String> = r.policies.iter().filter_map(|p| kl_of(&p.label)).collect();
        out += &format!("  the answer's KL from the same policy's exact cache (mean over trials and answer tokens): {}\n", each.join(", "));
    }
    if let Some(h) = &r.heads {
        out += &heads_summary(h);
    }
    out += &format!(
        "  {} tokens run where prompts one by one would run {} ({:.1}× fewer: the haystack before each needle is shared); the policies took {:.0} s (parts reused from an earlier run count their first run's time), this run {:.0} s\n",
        r.tokens_run,
        r.tokens_separate,
        r.tokens_separate as f64 / r.tokens_run.max(1) as f64,
        r.policies.iter().map(|p| p.seconds).sum::<f64>(),
        r.wall_seconds
    );
    out
}

fn heads_summary(h: &NeedleHeads) -> String {
    let leaders: Vec<String> =
        h.leaders(5).iter().map(|(l, kv, d, by_outside)| format!("L{l}.kv{kv} {d:+.2} nats (attention rank {by_outside})")).collect();
    format!(
        "  heads that retrieve ({} calibration prompts of {} tokens, dense answer NLL {:.2}): {}; of the {} KV heads each evidence keeps whole, {} are the same; Spearman ρ {} against attention outside S={} + {} recent\n",
        h.effects.prompts,
        h.length,
        h.effects.answer_nll,
        leaders.join(", "),
        h.kept(),
        h.overlap,
        h.rank_correlation.map_or("—".into(), |r| format!("{r:.2}")),
        h.sinks,
        h.recent
    )
}
