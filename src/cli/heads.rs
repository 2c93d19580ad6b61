//! `sinkscope heads`: which KV heads need the whole cache (retrieval) and which do with sinks and
//! a recent window (streaming), written as DuoAttention-format gates.

use std::path::PathBuf;

use clap::Args;

use super::model_args::ModelArgs;
use super::progress::TerminalProgress;
use super::stream::StreamText;
use crate::error::Result;
use crate::pipeline::heads::{heads_into, GateOptions, GATES_FILE, HEADS_FILE};

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
    #[arg(long, default_value_t = 252)]
    pub recent: usize,
    /// Share of KV heads marked retrieval (1 in the gates): those paying most attention outside
    /// the sinks and the recent window.
    #[arg(long, default_value_t = 0.25)]
    pub retrieval_share: f64,
    /// Directory for head_gates.tsv and heads.json.
    #[arg(short = 'o', long)]
    pub out: PathBuf,
}

pub fn run(args: HeadsArgs) -> Result<()> {
    let lm = args.model.load()?;
    let opts = GateOptions { sinks: args.sinks, recent: args.recent, share: args.retrieval_share };
    let gates = heads_into(&lm, &args.text.source(), opts, Some(&args.out), &mut TerminalProgress::new())?;
    println!("KV heads by attention outside {} sinks + {} recent keys ({} tokens); * = retrieval (whole cache)", gates.sinks, gates.recent, gates.tokens);
    for (l, (scores, full)) in gates.score.iter().zip(&gates.full).enumerate() {
        let cells: Vec<String> = scores.iter().zip(full).map(|(s, &f)| format!("{s:.3}{}", if f { "*" } else { " " })).collect();
        println!("layer {l:>3}  {}", cells.join("  "));
    }
    let n = gates.full.iter().flatten().filter(|&&f| f).count();
    println!("{n} of {} KV heads retrieval; gates in {} (DuoAttention format), scores in {}", gates.full.iter().flatten().count(), args.out.join(GATES_FILE).display(), args.out.join(HEADS_FILE).display());
    Ok(())
}
