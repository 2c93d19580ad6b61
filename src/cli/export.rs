//! `sinkscope export RUN_DIR`: the run's Parquet tables, PNG/SVG figures and index.md.

use std::path::PathBuf;

use clap::Args;

use super::format::format_exported;
use super::session::Session;
use crate::error::{Error, Result};
use crate::report::bundle::ExportOptions;
use crate::report::export::export;
use crate::report::run::Run;

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// A run directory written by `demo`, `capture`, `analyze` or `recommend -o`.
    pub run_dir: PathBuf,
    /// Parquet tables under RUN_DIR/tables/.
    #[arg(long)]
    pub parquet: bool,
    /// PNG figures under RUN_DIR/figures/.
    #[arg(long)]
    pub png: bool,
    /// SVG figures under RUN_DIR/figures/.
    #[arg(long)]
    pub svg: bool,
    /// RUN_DIR/index.md, the findings with links to every figure and table.
    #[arg(long)]
    pub md: bool,
    /// Heads that get heatmaps, as LAYER:HEAD pairs (default: the strongest sinks, the most
    /// depended-on head, and a contrast head).
    #[arg(long, value_delimiter = ',')]
    pub heads: Option<Vec<String>>,
    /// Key positions that get a layer × head grid of α_k (default: 0 and the discovered sink
    /// positions below 16).
    #[arg(long, value_delimiter = ',')]
    pub alpha_keys: Option<Vec<usize>>,
}

fn parse_head(s: &str) -> Result<(usize, usize)> {
    let bad = || Error::input(format!("--heads expects LAYER:HEAD pairs such as 18:8, got `{s}`"));
    let (l, h) = s.split_once(':').ok_or_else(bad)?;
    Ok((l.trim().parse().map_err(|_| bad())?, h.trim().parse().map_err(|_| bad())?))
}

pub fn run(args: ExportArgs, s: &mut Session) -> Result<()> {
    let heads = args.heads.as_ref().map(|v| v.iter().map(|s| parse_head(s)).collect::<Result<Vec<_>>>()).transpose()?;
    let all = !(args.parquet || args.png || args.svg || args.md);
    let opts = ExportOptions {
        parquet: all || args.parquet,
        png: all || args.png,
        svg: all || args.svg,
        md: all || args.md,
        heads,
        grid_keys: args.alpha_keys.clone(),
    };
    let run = Run::open(&args.run_dir)?;
    let first_keys = run.capture.as_ref().map(|c| c.summary.first_keys).or(run.analysis.as_ref().map(|a| a.settings.first_keys)).unwrap_or(0);
    if let Some(k) = opts.grid_keys.iter().flatten().find(|&&k| k >= first_keys) {
        return Err(Error::input(format!("--alpha-keys {k}: this run has α_k for k < {first_keys} only (capture/analyze --first-keys)")));
    }
    if let Some(maps) = &run.heatmaps {
        for &(l, h) in opts.heads.iter().flatten() {
            if l >= maps.n_layers || h >= maps.n_heads {
                return Err(Error::input(format!("--heads {l}:{h} is outside this model's {} layers × {} heads", maps.n_layers, maps.n_heads)));
            }
        }
    }
    let done = export(&run, &opts)?;
    if s.prints() {
        print!("{}", format_exported(&done));
    }
    Ok(())
}
