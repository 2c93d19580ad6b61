//! `sinkscope generate`: continue a prompt with a KV cache, greedy unless a temperature is given.

use std::io::Write;

use clap::Args;

use super::model_args::ModelArgs;
use crate::error::{Error, Result};
use crate::pipeline::generate::generate;

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt; without one, generation starts from BOS.
    #[arg(short = 'p', long)]
    pub prompt: Option<String>,
    /// Tokens to generate.
    #[arg(short = 'n', long, default_value_t = 64, value_parser = super::counts::at_least_one)]
    pub n: usize,
    /// Sampling temperature; 0 means greedy (argmax).
    #[arg(short = 't', long, default_value_t = 0.0, value_parser = super::counts::non_negative)]
    pub temperature: f64,
    /// Seed for sampling.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

pub fn run(args: GenerateArgs) -> Result<()> {
    if !(args.temperature >= 0.0 && args.temperature.is_finite()) {
        return Err(Error::input("--temperature must be a finite number ≥ 0"));
    }
    let lm = args.model.load()?;
    let prompt = args.prompt.as_deref().unwrap_or("");
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    generate(&lm, prompt, args.n, args.temperature, args.seed, &mut |piece| {
        let _ = out.write_all(piece.as_bytes());
        let _ = out.flush();
    })?;
    let _ = writeln!(out);
    Ok(())
}
