//! `sinkscope capture`: run a text through the model with streaming reducers and write
//! `capture.json` + `reductions.safetensors` (+ full tensors with --save-tensors).

use std::path::PathBuf;

use clap::Args;

use super::model_args::ModelArgs;
use super::session::Session;
use crate::capture::memory::human;
use crate::capture::run::CaptureOptions;
use crate::error::Result;
use crate::io::finite_json::to_pretty;
use crate::io::staging::check_out_dir;
use crate::io::text::read_input;
use crate::pipeline::capture::{capture_into, CaptureJob};

#[derive(Args, Debug)]
pub struct CaptureArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The text to capture.
    #[arg(short = 'p', long)]
    pub prompt: Option<String>,
    /// A UTF-8 text file to capture.
    #[arg(short = 'f', long)]
    pub file: Option<PathBuf>,
    /// Keep only the first T tokens of the text.
    #[arg(long, value_parser = super::counts::at_least_one)]
    pub max_tokens: Option<usize>,
    /// Output directory (created if missing).
    #[arg(short = 'o', long)]
    pub out: PathBuf,
    /// Hooks whose full tensors go to --save-tensors: comma-separated TransformerLens names or
    /// patterns (`blocks.*.attn.hook_pattern`, `hook_resid_post`, `blocks.3.*`). Default: hook_pattern.
    #[arg(long)]
    pub hooks: Option<String>,
    /// Save the full tensors of the selected hooks to this .safetensors file, keyed by hook name.
    #[arg(long)]
    pub save_tensors: Option<PathBuf>,
    /// Early key positions that get a per-head α_k in the summary.
    #[arg(long, default_value_t = 16, value_parser = super::counts::at_least_one)]
    pub first_keys: usize,
    /// Largest activations kept per layer.
    #[arg(long, default_value_t = 16, value_parser = super::counts::at_least_one)]
    pub top_k: usize,
    /// Refuse captures whose memory estimate exceeds this many MiB (default: available memory).
    #[arg(long)]
    pub memory_limit_mb: Option<u64>,
    /// Skip scoring the text's next-token loss (saves the T×vocab logits matmul).
    #[arg(long)]
    pub no_nll: bool,
    /// Keep every head's attention map pooled onto at most N×N bins in heatmaps.safetensors
    /// (exact when the text has at most N tokens; 0 = none).
    #[arg(long, default_value_t = 128)]
    pub heatmap_bins: usize,
    /// Print capture.json to stdout as well.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: CaptureArgs, s: &mut Session) -> Result<()> {
    let (text, text_source) = read_input(args.prompt.as_deref(), args.file.as_deref())?;
    let options = CaptureOptions {
        first_keys: args.first_keys,
        top_k: args.top_k,
        memory_limit: args.memory_limit_mb.map(|mb| mb << 20),
        score: !args.no_nll,
        heatmap_bins: Some(args.heatmap_bins).filter(|&n| n > 0),
        ..CaptureOptions::default()
    };
    let job = CaptureJob {
        text: &text,
        text_source: &text_source,
        max_tokens: args.max_tokens,
        hooks: args.hooks.as_deref(),
        save_tensors: args.save_tensors.as_deref(),
        options,
    };
    // Before minutes of loading, not after.
    job.validate(&args.out)?;
    check_out_dir(&args.out)?;
    let (lm, _) = s.model(&args.model)?;
    let report = capture_into(lm, &job, &args.out)?;
    if !s.prints() {
        return Ok(());
    }
    if args.json {
        println!("{}", to_pretty(&report, "the JSON printed")?);
    } else {
        let ppl = report.nll.as_ref().map(|n| format!(" (perplexity {:.3})", n.perplexity)).unwrap_or_default();
        let rss = report.peak_rss_bytes.map(|b| format!(", peak RSS {}", human(b))).unwrap_or_default();
        eprintln!("captured {} tokens in {:.2}s{ppl}{rss}; wrote {}", report.n_tokens, report.wall_seconds, report.files.join(", "));
    }
    Ok(())
}
