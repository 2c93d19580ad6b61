//! `sinkscope heads`: which KV heads need the whole cache (retrieval) and which do with sinks and
//! a recent window (streaming), written as DuoAttention-format gates.

use std::path::PathBuf;

use clap::Args;

use super::model_args::ModelArgs;
use super::session::Session;
use super::stream::StreamText;
use crate::error::Result;
use crate::kv::per_head::GateEvidence;
use crate::pipeline::heads::{heads_into, GateOptions, CAUSAL_TOKENS, GATES_FILE, HEADS_FILE};

#[derive(Args, Debug)]
pub struct HeadsArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub text: StreamText,
    /// The S first keys a streaming head keeps.
    #[arg(long, default_value_t = 4)]
    pub sinks: usize,
    /// The R most recent keys (its own included) a streaming head keeps.
    #[arg(long, default_value_t = 252, value_parser = super::counts::at_least_one)]
    pub recent: usize,
    /// Share of KV heads marked retrieval (1 in the gates): those paying most attention outside
    /// the sinks and the recent window (with --causal: losing most when restricted to them).
    #[arg(long, default_value_t = 0.25, value_parser = super::counts::share)]
    pub retrieval_share: f64,
    /// Also measure each KV head's causal need: the ΔNLL when it alone keeps only the sinks and
    /// the recent window (one partial forward per KV head), and rank by it.
    #[arg(long)]
    pub causal: bool,
    /// Tokens the causal evidence is measured on.
    #[arg(long, default_value_t = CAUSAL_TOKENS, value_parser = super::counts::at_least_one)]
    pub causal_tokens: usize,
    /// Directory for head_gates.tsv and heads.json.
    #[arg(short = 'o', long)]
    pub out: PathBuf,
}

pub fn run(args: HeadsArgs, s: &mut Session) -> Result<()> {
    let (lm, progress) = s.model(&args.model)?;
    let opts = GateOptions {
        sinks: args.sinks,
        recent: args.recent,
        share: args.retrieval_share,
        causal_tokens: args.causal.then_some(args.causal_tokens),
        calibration: None,
    };
    let gates = heads_into(lm, &args.text.source(), &opts, Some(&args.out), progress)?;
    if !s.prints() {
        return Ok(());
    }
    let causal = gates.ranked_by == GateEvidence::Causal;
    println!(
        "KV heads by {} {} sinks + {} recent keys ({} tokens); α0 = mean attention on key 0; * = retrieval (whole cache)",
        if causal { "ΔNLL (nats) when restricted to" } else { "attention outside" },
        gates.sinks,
        gates.recent,
        if causal { gates.causal_tokens } else { gates.tokens }
    );
    for (l, ((scores, alpha0), full)) in gates.ranking().iter().zip(&gates.alpha0).zip(&gates.full).enumerate() {
        let cells: Vec<String> =
            scores.iter().zip(alpha0).zip(full).map(|((s, a), &f)| format!("{s:>7.4}{} α0 {a:.2}", if f { "*" } else { " " })).collect();
        println!("layer {l:>3}  {}", cells.join("   "));
    }
    let n = gates.full.iter().flatten().filter(|&&f| f).count();
    println!(
        "{n} of {} KV heads retrieval; gates in {} (DuoAttention format), scores in {}",
        gates.full.iter().flatten().count(),
        args.out.join(GATES_FILE).display(),
        args.out.join(HEADS_FILE).display()
    );
    Ok(())
}
