//! `sinkscope survey`: several models side by side — probe-set diagnosis and sink-count sweeps per
//! model (resumable), then one comparison table, page and figures.

use std::path::PathBuf;

use clap::Args;

use super::progress::TerminalProgress;
use crate::error::Result;
use crate::model::decoder::WeightDtype;
use crate::model::load::LoadOptions;
use crate::pipeline::survey::{survey_into, SurveyOptions, SURVEY_MD};

#[derive(Args, Debug)]
pub struct SurveyArgs {
    /// A model (repeat for each): a file, a directory, a hub id or an alias.
    #[arg(short = 'm', long = "model", required = true)]
    pub models: Vec<String>,
    /// A sweep text (repeat for several) [default: chapters I–III of Pride and Prejudice].
    #[arg(short = 'f', long = "file")]
    pub files: Vec<PathBuf>,
    /// Cache budgets W of the sink-count sweeps.
    #[arg(long, value_delimiter = ',', default_value = "128")]
    pub cache: Vec<usize>,
    /// Tokens per sweep.
    #[arg(long, default_value_t = 768)]
    pub tokens: usize,
    /// Sink counts of each sweep (0 = a plain window).
    #[arg(long, value_delimiter = ',', default_value = "0,1,2,4,8")]
    pub sinks: Vec<usize>,
    /// Also run the diagnosis's causal sweep on key 0 (slow).
    #[arg(long)]
    pub ablation: bool,
    /// Keep GGUF weights quantized for matmuls (faster, not exact).
    #[arg(long)]
    pub quantized: bool,
    /// How weight matrices are kept: auto (as stored), f32, bf16 or f16.
    #[arg(long, default_value = "auto", value_parser = super::model_args::parse_dtype)]
    pub dtype: WeightDtype,
    /// The survey directory (models/<name>/ per model, survey.json, survey.md, tables/, figures/).
    #[arg(short = 'o', long)]
    pub out: PathBuf,
}

pub fn run(args: SurveyArgs) -> Result<()> {
    let opts = SurveyOptions {
        models: args.models,
        texts: args.files,
        caches: args.cache,
        tokens: args.tokens,
        sinks: args.sinks,
        ablation: args.ablation,
        load: LoadOptions { quantized: args.quantized, tokenizer: None, dtype: args.dtype, scan_weights: false },
    };
    let s = survey_into(&opts, &args.out, &mut TerminalProgress::new())?;
    println!("{:<40} {:>9} {:>8} {:>14} {:>10}  verdict", "model", "Sink_0^ε", "F-Attn", "window/best", "max |h|");
    for r in &s.rows {
        println!(
            "{:<40} {:>8.1}% {:>8.3} {:>14} {:>10.1}  {}",
            r.model,
            r.sink_0,
            r.f_attn,
            r.worst_window_ratio().map_or("-".into(), |x| format!("{x:.2}×")),
            r.max_activation,
            r.verdict()
        );
    }
    println!(
        "comparison in {}; `sinkscope dash {}` browses it (the Survey view, 7, compares the models; Enter opens one's run)",
        args.out.join(SURVEY_MD).display(),
        args.out.display()
    );
    Ok(())
}
