//! `sinkscope demo`: the whole bundle for the default model with no flags — capture of a default
//! text (with heatmaps), the probe-set diagnosis with a light causal sweep, a sink-count sweep on
//! a longer text, then Parquet tables, figures and index.md in one run directory.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;

use super::analyze::{analyze_into, AnalyzeArgs};
use super::capture::{capture_to_dir, prepare_out_dir, weight_bytes};
use super::stream::{format_recommendation, sweep_into, RecommendArgs, StreamText};
use super::ModelArgs;
use crate::capture::run::CaptureOptions;
use crate::error::Result;
use crate::kv::PositionMode;
use crate::probe::ProbeSet;
use crate::report::export::{export, ExportOptions};
use crate::report::run::Run;
use crate::report::CaptureReport;

/// A public-domain passage (the opening of Pride and Prejudice, Project Gutenberg #1342).
pub const DEMO_TEXT: &str = include_str!("../../probes/texts/demo.txt");

/// Chapters I–III of Pride and Prejudice (public domain), for the streaming sweep; the demo
/// writes it into the run directory so the run records its own input.
pub const STREAM_TEXT: &str = include_str!("../../probes/texts/stream.txt");

#[derive(Args, Debug)]
pub struct DemoArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The run directory.
    #[arg(short = 'o', long, default_value = "reports/demo")]
    pub out: PathBuf,
    /// Only the capture and its table (seconds instead of minutes): no diagnosis, no streaming.
    #[arg(long)]
    pub quick: bool,
    /// Tokens streamed in the sink-count sweep.
    #[arg(long, default_value_t = 768)]
    pub stream_tokens: usize,
    /// Cache budget W of the sweep.
    #[arg(long, default_value_t = 128)]
    pub cache: usize,
}

pub fn run(args: DemoArgs) -> Result<()> {
    prepare_out_dir(&args.out)?;
    let start = Instant::now();
    let mut lm = args.model.load()?;
    lm.fingerprint()?;
    // A fresh bundle: files of an earlier demo (other heads' figures, a stale stream.json) go.
    for stale in ["figures", "tables"] {
        let _ = std::fs::remove_dir_all(args.out.join(stale));
    }
    let opts = CaptureOptions { first_keys: 16, top_k: 16, save: None, memory_limit: None, weight_bytes: weight_bytes(&lm), score: true, quant_risk: false, heatmap_bins: Some(128) };
    eprintln!("[1/4] capture of the demo text");
    let report = capture_to_dir(&lm, DEMO_TEXT, "built-in demo text (Pride and Prejudice, opening)", None, &opts, &args.out, None)?;
    print!("{}", format_table(&report));
    if !args.quick {
        eprintln!("[2/4] sink diagnosis over the default probes, causal sweep on key 0");
        let analyze_args = AnalyzeArgs {
            model: args.model.clone(),
            probes: None,
            file: None,
            max_tokens: None,
            out: args.out.clone(),
            epsilon: 0.3,
            first_keys: 16,
            ablate_keys: Some(vec![0]),
            ablation_tokens: 96,
            no_ablation: false,
            heatmap_bins: 0,
            json: false,
        };
        let analysis = analyze_into(&mut lm, &analyze_args, None, Some(ProbeSet::load("default")?))?;
        print!("\n{}", super::analyze::format_summary(&analysis));
        eprintln!("[3/4] sink-count sweep: {} tokens at W = {}", args.stream_tokens, args.cache);
        let text = args.out.join("stream-text.txt");
        crate::report::write_atomic(&text, STREAM_TEXT.as_bytes())?;
        let sweep_args = RecommendArgs {
            model: args.model.clone(),
            text: StreamText { file: text, start_char: 0, tokens: args.stream_tokens, token_by_token: false },
            cache: args.cache,
            sinks: vec![0, 1, 2, 4, 8],
            delta: 0.02,
            positions: PositionMode::Slot,
            no_recompute: false,
            recompute_every: 16,
            json: false,
            out: Some(args.out.clone()),
        };
        let rec = sweep_into(&mut lm, &sweep_args)?;
        print!("\n{}", format_recommendation(&rec));
    } else {
        let _ = std::fs::remove_file(args.out.join(crate::report::run::ANALYSIS_FILE));
        let _ = std::fs::remove_file(args.out.join(crate::report::run::STREAM_FILE));
    }
    eprintln!("[4/4] tables, figures and report");
    let run = Run::open(&args.out)?;
    let done = export(&run, &ExportOptions { parquet: cfg!(feature = "parquet"), png: cfg!(feature = "plots"), svg: cfg!(feature = "plots"), md: true, heads: None, grid_keys: None })?;
    print!("\n{}", super::export::format_exported(&done));
    println!("open {} — done in {:.0}s", args.out.join(crate::report::export::INDEX_FILE).display(), start.elapsed().as_secs_f64());
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
    s
}
