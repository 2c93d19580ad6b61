//! `sinkscope demo`: capture the default model on a default text and print a compact per-layer
//! table — no flags needed on a fresh clone.

use std::path::PathBuf;

use clap::Args;

use super::capture::{capture_to_dir, prepare_out_dir, weight_bytes};
use super::ModelArgs;
use crate::capture::run::CaptureOptions;
use crate::error::Result;
use crate::report::CaptureReport;

/// A public-domain passage (the opening of Pride and Prejudice, Project Gutenberg #1342).
pub const DEMO_TEXT: &str = include_str!("../../probes/texts/demo.txt");

#[derive(Args, Debug)]
pub struct DemoArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Where the capture files go.
    #[arg(short = 'o', long, default_value = "reports/demo")]
    pub out: PathBuf,
}

pub fn run(args: DemoArgs) -> Result<()> {
    prepare_out_dir(&args.out)?;
    let mut lm = args.model.load()?;
    lm.fingerprint()?;
    let opts = CaptureOptions { first_keys: 16, top_k: 16, save: None, memory_limit: None, weight_bytes: weight_bytes(&lm), score: true, quant_risk: false, heatmap_bins: Some(128) };
    let report = capture_to_dir(&lm, DEMO_TEXT, "built-in demo text (Pride and Prejudice, opening)", None, &opts, &args.out, None)?;
    print!("{}", format_table(&report));
    Ok(())
}

pub fn format_table(r: &CaptureReport) -> String {
    let name = r.model.name.clone().unwrap_or_else(|| r.model.source.clone());
    let mut s = format!(
        "sinkscope demo — {name}: {} layers × {} heads, {} tokens of {}\nperplexity {} · capture {:.2}s\n\n",
        r.model.n_layers,
        r.model.n_heads,
        r.n_tokens,
        r.text_source,
        r.nll.as_ref().map_or("-".to_string(), |n| format!("{:.2}", n.perplexity)),
        r.wall_seconds
    );
    s.push_str("layer  attn→pos0   max|h|  at (pos, dim)    median|h|   max/median\n");
    for l in &r.summary.layers {
        let at = match (l.max_abs_pos, l.max_abs_dim) {
            (Some(p), Some(d)) => format!("({p}, {d})"),
            _ => "-".into(),
        };
        let ratio = if l.median_abs > 0.0 { l.max_abs / l.median_abs } else { f32::INFINITY };
        s.push_str(&format!(
            "{:>5}  {:>9.3}  {:>7.1}  {:<14}  {:>9.4}  {:>11.0}\n",
            l.layer, l.mean_attention_pos0, l.max_abs, at, l.median_abs, ratio
        ));
    }
    s.push_str("\nattn→pos0: mean over heads of α₀, the average attention queries pay to position 0.\n");
    s.push_str(&format!("files: {}\n", r.files.join(", ")));
    s
}
