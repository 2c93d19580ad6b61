//! `sinkscope info MODEL [--json]`.

use clap::Args;

use super::format::format_info;
use crate::error::Result;
use crate::model::load::{load, LoadOptions};

#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Model path, hub id or alias (see `capture --help`).
    #[arg(default_value = crate::model::source::DEFAULT_MODEL)]
    pub model: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: InfoArgs) -> Result<()> {
    let lm = load(&args.model, &LoadOptions::default())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&lm.info)?);
    } else {
        print!("{}", format_info(&lm.info));
    }
    Ok(())
}
