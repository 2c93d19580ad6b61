//! `sinkscope analyze`: run the probes (or one text), reduce each, and write the diagnosis —
//! sink positions, Sink_k^ε, F-Attn, massive activations, head classes, causal head dependency,
//! quantization risk — as `report.json`.

use std::path::PathBuf;

use clap::Args;

use super::format::format_summary;
use super::model_args::ModelArgs;
use super::session::Session;
use crate::error::Result;
use crate::io::finite_json::to_pretty;
use crate::io::staging::check_out_dir;
use crate::io::text::read_input;
use crate::pipeline::analyze::{analyze_into, AnalyzeOptions};
use crate::probe::ProbeSet;
use crate::report::run::ANALYSIS_FILE;

#[derive(Args, Debug)]
pub struct AnalyzeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Probe set: `default` (built in; see probes/default.toml) or a TOML file. With -f and no
    /// --probes, only the file is analyzed.
    #[arg(long)]
    pub probes: Option<String>,
    /// Analyze exactly this text file (as one probe, and for the causal sweep).
    #[arg(short = 'f', long)]
    pub file: Option<PathBuf>,
    /// Keep only the first T tokens of -f.
    #[arg(long, value_parser = super::counts::at_least_one)]
    pub max_tokens: Option<usize>,
    /// Output directory for report.json.
    #[arg(short = 'o', long)]
    pub out: PathBuf,
    /// ε for Sink_k^ε and sink-position discovery.
    #[arg(long, default_value_t = 0.3, value_parser = super::counts::open_fraction)]
    pub epsilon: f64,
    /// Report α_k for k < K.
    #[arg(long, default_value_t = 16, value_parser = super::counts::at_least_one)]
    pub first_keys: usize,
    /// Key positions hidden in the causal sweep (default: the probe set's, 0,1,2,3).
    #[arg(long, value_delimiter = ',')]
    pub ablate_keys: Option<Vec<usize>>,
    /// Tokens used for the causal sweep (of -f, or at most this many of the probe set's text).
    #[arg(long, default_value_t = 256, value_parser = super::counts::at_least_one)]
    pub ablation_tokens: usize,
    /// Skip the causal sweep.
    #[arg(long)]
    pub no_ablation: bool,
    /// Keep the first probe's attention maps pooled onto at most N×N bins (0 = none; never
    /// written over the heatmaps of a capture in the same directory).
    #[arg(long, default_value_t = 128)]
    pub heatmap_bins: usize,
    /// Print report.json to stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: AnalyzeArgs, s: &mut Session) -> Result<()> {
    let mut opts = AnalyzeOptions {
        file: None,
        max_tokens: args.max_tokens,
        epsilon: args.epsilon,
        first_keys: args.first_keys,
        ablate_keys: args.ablate_keys.clone(),
        ablation_tokens: args.ablation_tokens,
        ablation: !args.no_ablation,
        heatmap_bins: args.heatmap_bins,
    };
    opts.validate()?;
    check_out_dir(&args.out)?;
    if let Some(f) = &args.file {
        opts.file = Some((f.clone(), read_input(None, Some(f))?.0));
    }
    let set = match (&args.probes, &opts.file) {
        (Some(name), _) => Some(ProbeSet::load(name)?),
        (None, None) => Some(ProbeSet::load("default")?),
        (None, Some(_)) => None,
    };
    let (lm, progress) = s.model(&args.model)?;
    let report = analyze_into(lm, &opts, set.as_ref(), &args.out, progress)?;
    if !s.prints() {
        return Ok(());
    }
    if args.json {
        println!("{}", to_pretty(&report, "the JSON printed")?);
    } else {
        print!("{}", format_summary(&report));
        println!("report: {}", args.out.join(ANALYSIS_FILE).display());
    }
    Ok(())
}
