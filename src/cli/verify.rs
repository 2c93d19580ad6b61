//! `sinkscope verify TRACE -m MODEL --policy P --cache W`: does a serving engine's KV cache do
//! what it says? Its trace is replayed through the exact simulator; a verdict, the near misses
//! ranked by fit, the declared cache format against its near misses, JSON, a figure, and an exit
//! status (0 conforms, 3 diverges, 2 bad input).

use std::path::PathBuf;

use clap::Args;

use super::cache_format_args::CacheFormatArgs;
use super::model_args::ModelArgs;
use super::policy_args::PolicyArgs;
use super::session::Session;
use crate::analysis::conformance::Verdict;
use crate::analysis::format_check::{FormatCheck, FormatVerdict};
use crate::error::{Error, Result};
use crate::io::finite_json::to_pretty;
use crate::io::staging::check_out_dir;
use crate::kv::policy::Policy;
use crate::pipeline::verify::{verify_into, VerifyOptions, VerifyReport};

/// Exit status of `verify` when the engine diverges from the declared policy or cache format.
pub const DIVERGES_EXIT: u8 = 3;

#[derive(Args, Debug)]
#[command(mut_arg("policy", |a| a.help("The cache policy the engine says it runs")))]
#[command(mut_arg("cache", |a| a
    .required(true)
    .default_value(None)
    .help("The cache budget W (every key a query sees, its own included): llama.cpp's n_ctx − 1")))]
#[command(mut_arg("sinks", |a| a.help("S for `sink`, N for `keep` (llama.cpp: `--keep`, plus 1 when the model adds BOS)")))]
#[command(mut_arg("positions", |a| a.default_value("delta").help("How the engine positions kept keys (llama.cpp's context shift: delta)")))]
pub struct VerifyArgs {
    /// The engine's trace with token ids and logprobs: llama.cpp server `/completion` responses
    /// (`n_probs` > 0), OpenAI-style responses whose tokens carry ids, or JSONL `{id, logprob}`
    /// (a null logprob marks a prompt token).
    pub trace: PathBuf,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// The cache format the engine says it stores (llama.cpp: its `--cache-type-k/-v`); given,
    /// the trace is replayed in it and held against its near misses.
    #[command(flatten)]
    pub formats: CacheFormatArgs,
    /// The prompt's token ids (a JSON list, llama.cpp's `/tokenize` answer, or whitespace-separated)
    /// when the trace holds only the generated tokens.
    #[arg(long, value_name = "FILE")]
    pub prompt_ids: Option<PathBuf>,
    /// The request to verify, in a trace holding several.
    #[arg(long)]
    pub request: Option<String>,
    #[arg(long)]
    pub json: bool,
    /// Write verify.json and verify.png/.svg into this run directory.
    #[arg(short = 'o', long)]
    pub out: Option<PathBuf>,
}

pub fn run(args: VerifyArgs, s: &mut Session) -> Result<u8> {
    if let Some(out) = &args.out {
        check_out_dir(out)?;
    }
    let policy = Policy::try_from(&args.policy)?;
    if policy.page.is_some() {
        return Err(Error::input(
            "--page: llama.cpp's cache evicts token by token, and verify holds its trace against that; run a paged policy with `stream`",
        ));
    }
    let formats_given = args.formats.cache_type_k.is_some() || args.formats.cache_type_v.is_some();
    let rounding = args.formats.row_rounding(policy.positions, "`verify`")?;
    let opts = VerifyOptions {
        trace: args.trace.clone(),
        prompt_ids: args.prompt_ids.clone(),
        request: args.request.clone(),
        policy,
        rounding: formats_given.then_some(rounding),
    };
    let (lm, progress) = s.model(&args.model)?;
    let report = verify_into(lm, &opts, args.out.as_deref(), progress)?;
    if s.prints() {
        match args.json {
            true => println!("{}", to_pretty(&report, "the JSON printed")?),
            false => print!("{}", summary(&report)),
        }
    }
    Ok(if report.diverges() { DIVERGES_EXIT } else { 0 })
}

fn summary(r: &VerifyReport) -> String {
    let mut s = policy_summary(r);
    if let Some(f) = &r.format {
        s += &format_summary(f);
    }
    s
}

/// The declared cache format against its near misses.
fn format_summary(f: &FormatCheck) -> String {
    let mut s = format!("  cache format, over {} scored tokens (mean engine − simulator log-probability, in standard errors):\n", f.tokens);
    for fit in &f.fits {
        s += &format!(
            "    {:<34} {:+.4} nats {:+7.1}σ  perplexity {:.3} vs {:.3}  {}\n",
            fit.label, fit.bias, fit.z, fit.engine_ppl, fit.sim_ppl, fit.cause
        );
    }
    s += &match (f.verdict, &f.best) {
        (FormatVerdict::Conforms, _) => "FORMAT: conforms".to_string(),
        (FormatVerdict::Diverges, Some(best)) => format!("FORMAT: diverges; the trace fits {best}"),
        (FormatVerdict::Diverges, None) => "FORMAT: diverges; no candidate format fits".to_string(),
    };
    if f.verdict == FormatVerdict::Conforms && !f.indistinguishable.is_empty() {
        s += &format!(" (this trace cannot tell it from {})", f.indistinguishable.join(", "));
    }
    s + "\n"
}

fn policy_summary(r: &VerifyReport) -> String {
    let c = &r.conformance;
    let mut s = format!(
        "sinkscope verify — {} under {}\n  {} tokens ({} prompt, {} scored); {} eviction{} under the declared policy\n",
        r.trace,
        r.policy_label,
        r.tokens,
        r.prompt_tokens,
        r.scored_tokens,
        r.evictions.len(),
        if r.evictions.len() == 1 { "" } else { "s" }
    );
    s += &format!(
        "  noise floor (before the first eviction, {} tokens): mean |Δ| {:.4}, max {:.4} nats; perplexity engine {:.3} vs simulator {:.3}\n",
        c.floor.steps, c.floor.mean_abs, c.floor.max_abs, c.floor.engine_ppl, c.floor.sim_ppl
    );
    match c.verdict {
        Verdict::NotEvicted => {
            s += "  nothing was evicted under the declared policy: the trace says nothing about the cache's behaviour\n";
            return s;
        }
        Verdict::Conforms | Verdict::Diverges { .. } => {}
    }
    s += &format!(
        "  after it ({} tokens): mean |Δ| {:.4} (allowed {:.4}), max {:.4} nats; perplexity engine {:.3} vs simulator {:.3}\n",
        c.after.steps, c.after.mean_abs, c.allowed_mean_abs, c.after.max_abs, c.after.engine_ppl, c.after.sim_ppl
    );
    s += &match c.verdict {
        Verdict::Diverges { from } => format!("VERDICT: diverges from token {from}\n"),
        Verdict::Conforms | Verdict::NotEvicted => "VERDICT: conforms\n".to_string(),
    };
    s += "  candidates, best explanation first (mean |Δ| after the first eviction; gain over the declared policy in standard errors):\n";
    for f in &c.ranking {
        s += &format!(
            "  {} {:<46} {:.4}  {:+7.1}σ  {}\n",
            if f.explains_better { "*" } else { " " },
            f.label,
            f.after.mean_abs,
            f.z_vs_declared,
            f.cause
        );
    }
    s
}
