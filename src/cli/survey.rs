//! `sinkscope survey`: several models side by side — probe-set diagnosis and sink-count sweeps per
//! model (resumable), then one comparison table, page and figures; or one shard of such a survey
//! (`--shard K/N`), or the merge of the shards' parts (`--merge DIR…`). Parses and prints only.

use std::path::PathBuf;

use clap::Args;

use super::session::Session;
use crate::analysis::survey::SurveyRow;
use crate::error::Result;
use crate::model::decoder::WeightDtype;
use crate::model::load::LoadOptions;
use crate::pipeline::survey::{survey_into, SurveyOptions, SURVEY_MD};
use crate::pipeline::survey_parts::{merge_parts, survey_shard, Shard};

#[derive(Args, Debug)]
pub struct SurveyArgs {
    /// A model (repeat for each): a file, a directory, a hub id or an alias. Shards of one survey
    /// take the same models in the same order.
    #[arg(short = 'm', long = "model", required_unless_present = "merge")]
    pub models: Vec<String>,
    /// A sweep text (repeat for several) [default: chapters I–III of Pride and Prejudice]. Its path,
    /// as given, labels the rows: shards of one survey must be given the same -f paths.
    #[arg(short = 'f', long = "file")]
    pub files: Vec<PathBuf>,
    /// Cache budgets W of the sink-count sweeps.
    #[arg(long, value_delimiter = ',', default_value = "128")]
    pub cache: Vec<usize>,
    /// Tokens per sweep.
    #[arg(long, default_value_t = 768, value_parser = super::counts::at_least_one)]
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
    /// Run only shard K of N (1 ≤ K ≤ N): the models at 0-based index i with i mod N = K − 1, into
    /// DIR/models/ as usual, plus the part record DIR/survey-parts/part-K-of-N.json (no
    /// comparison: `--merge` writes it once every shard is done).
    #[arg(long, value_name = "K/N", value_parser = parse_shard, conflicts_with = "merge")]
    pub shard: Option<Shard>,
    /// Merge the parts the shards wrote into these directories (their -o; one shared directory or
    /// several): checks they are one whole survey, copies each model's run directory into -o and
    /// writes the comparison. The settings come from the parts.
    #[arg(long, value_name = "DIR", num_args = 1.., conflicts_with_all = ["models", "files", "cache", "tokens", "sinks", "ablation", "quantized", "dtype"])]
    pub merge: Vec<PathBuf>,
    /// The survey directory (models/<name>/ per model, survey.json, survey.md, tables/, figures/;
    /// survey-parts/ for a shard).
    #[arg(short = 'o', long)]
    pub out: PathBuf,
}

/// `--shard`'s values: K/N with 1 ≤ K ≤ N.
fn parse_shard(s: &str) -> std::result::Result<Shard, String> {
    let usage = format!("'{s}' is not K/N (shard K of N, 1 ≤ K ≤ N, e.g. 2/4)");
    let (k, n) = s.split_once('/').ok_or_else(|| usage.clone())?;
    let (Ok(k), Ok(n)) = (k.trim().parse::<usize>(), n.trim().parse::<usize>()) else { return Err(usage) };
    Shard::new(k, n).map_err(|e| e.to_string())
}

pub fn run(args: SurveyArgs, session: &mut Session) -> Result<()> {
    let print = session.prints();
    let progress = session.progress();
    if !args.merge.is_empty() {
        let s = merge_parts(&args.merge, &args.out, progress)?;
        if !print {
            return Ok(());
        }
        print_rows(&s.rows);
        print_done(&args.out);
        return Ok(());
    }
    let opts = SurveyOptions {
        models: args.models,
        texts: args.files,
        caches: args.cache,
        tokens: args.tokens,
        sinks: args.sinks,
        ablation: args.ablation,
        load: LoadOptions { quantized: args.quantized, tokenizer: None, dtype: args.dtype, scan_weights: false, report_unread: false },
    };
    if let Some(shard) = args.shard {
        let (path, part) = survey_shard(&opts, shard, &args.out, progress)?;
        if !print {
            return Ok(());
        }
        let rows: Vec<SurveyRow> = part.rows.into_iter().map(|r| r.row).collect();
        print_rows(&rows);
        println!(
            "shard {shard}: {} of {} models, part in {}; once every shard is done: sinkscope survey --merge DIR… -o OUT",
            rows.len(),
            opts.models.len(),
            path.display()
        );
        return Ok(());
    }
    let s = survey_into(&opts, &args.out, progress)?;
    if !print {
        return Ok(());
    }
    print_rows(&s.rows);
    print_done(&args.out);
    Ok(())
}

fn print_rows(rows: &[SurveyRow]) {
    println!("{:<40} {:>9} {:>8} {:>14} {:>10}  verdict", "model", "Sink_0^ε", "F-Attn", "window/best", "max |h|");
    for r in rows {
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
}

fn print_done(out: &std::path::Path) {
    println!(
        "comparison in {}; `sinkscope dash {}` browses it (the Survey view, 7, compares the models; Enter opens one's run)",
        out.join(SURVEY_MD).display(),
        out.display()
    );
}
