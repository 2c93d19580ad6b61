//! `sinkscope demo`: the whole bundle for the default model with no flags (see
//! [`crate::pipeline::demo`]), each stage's table printed as it finishes.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;

use super::model_args::ModelArgs;
use super::progress::TerminalProgress;
use crate::error::Result;
use crate::io::staging::check_out_dir;
use crate::pipeline::demo::{run_demo, DemoOptions};

#[derive(Args, Debug)]
pub struct DemoArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The run directory (default reports/demo, or reports/demo-quick with --quick).
    #[arg(short = 'o', long)]
    pub out: Option<PathBuf>,
    /// Only the capture, its table and its report (seconds instead of minutes): no diagnosis, no
    /// streaming.
    #[arg(long)]
    pub quick: bool,
    /// Tokens streamed in the sink-count sweep.
    #[arg(long, default_value_t = 768, value_parser = super::counts::at_least_one)]
    pub stream_tokens: usize,
    /// Cache budget W of the sweep.
    #[arg(long, default_value_t = 128)]
    pub cache: usize,
}

pub fn run(args: DemoArgs) -> Result<()> {
    // A quick run never replaces a full one unless asked to.
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from(if args.quick { "reports/demo-quick" } else { "reports/demo" }));
    check_out_dir(&out)?;
    let start = Instant::now();
    let mut lm = args.model.load()?;
    let opts = DemoOptions { quick: args.quick, stream_tokens: args.stream_tokens, cache: args.cache };
    let index = run_demo(&mut lm, &opts, &out, &mut TerminalProgress::with_results())?;
    println!("open {} — done in {:.0}s", index.display(), start.elapsed().as_secs_f64());
    Ok(())
}
