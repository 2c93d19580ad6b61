//! `sinkscope info MODEL [--json]`.

use clap::Args;

use super::format::format_info;
use super::progress::TerminalProgress;
use crate::error::Result;
use crate::io::finite_json::to_pretty;
use crate::model::decoder::WeightDtype;
use crate::model::fetch::{ensure, offline_from_env};
use crate::model::load::{load, LoadOptions};

#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Model path, hub id or alias (see `capture --help`).
    #[arg(default_value = crate::model::catalog::DEFAULT_MODEL)]
    pub model: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// How weight matrices are kept: auto (as stored), f32, bf16 or f16.
    #[arg(long, default_value = "auto", value_parser = super::model_args::parse_dtype)]
    pub dtype: WeightDtype,
    /// Never download an alias that is not on the model path.
    #[arg(long)]
    pub offline: bool,
}

pub fn run(args: InfoArgs) -> Result<()> {
    ensure(&args.model, args.offline || offline_from_env(), &mut TerminalProgress::new())?;
    let lm = load(&args.model, &LoadOptions { dtype: args.dtype, scan_weights: true, report_unread: true, ..LoadOptions::default() })?;
    if args.json {
        println!("{}", to_pretty(&lm.info, "the JSON printed")?);
    } else {
        print!("{}", format_info(&lm.info));
    }
    Ok(())
}
