//! `sinkscope dash`: open the terminal dashboard on a run directory, or first compute one
//! (capture + analyze of a text) and open that.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Args;

use super::model_args::ModelArgs;
use super::progress::TerminalProgress;
use crate::error::{Error, Result};
use crate::io::staging::check_out_dir;
use crate::io::text::read_input;
use crate::pipeline::claim_out;
use crate::pipeline::demo::capture_and_analyze;
use crate::report::run::Run;

#[derive(Args, Debug)]
pub struct DashArgs {
    /// A run directory written by `capture`, `analyze`, `recommend`/`stream` or `demo` (with -o).
    pub run: Option<PathBuf>,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Instead of a run: capture and analyze this text with -m, then open the result.
    #[arg(short = 'f', long, conflicts_with = "run")]
    pub file: Option<PathBuf>,
    /// With -f: keep only the first T tokens.
    #[arg(long, requires = "file", value_parser = super::counts::at_least_one)]
    pub max_tokens: Option<usize>,
    /// With -f: where the computed run goes (default reports/dash-<file stem>).
    #[arg(short = 'o', long, requires = "file")]
    pub out: Option<PathBuf>,
    /// With -f: skip the causal key-masking sweep (faster; the Overview then has no ΔNLL).
    #[arg(long, requires = "file")]
    pub no_ablation: bool,
}

pub fn run(args: DashArgs) -> Result<()> {
    // What was given is checked first (a bad run or model says so when piped too); the terminal
    // is checked before minutes of computing with -f, not after.
    match (&args.run, &args.file) {
        (Some(dir), None) => {
            let run = Run::open(dir)?;
            needs_terminal()?;
            crate::tui::run(run)
        }
        (None, Some(file)) => {
            let out = args.out.clone().unwrap_or_else(|| {
                let stem = file.file_stem().map_or("text".into(), |s| s.to_string_lossy().into_owned());
                PathBuf::from("reports").join(format!("dash-{stem}"))
            });
            check_out_dir(&out)?;
            let (text, _) = read_input(None, Some(file))?;
            let mut lm = args.model.load()?;
            claim_out(&mut lm, Some(&out))?;
            needs_terminal()?;
            capture_and_analyze(&mut lm, file, &text, args.max_tokens, !args.no_ablation, &out, &mut TerminalProgress::new())?;
            eprintln!("wrote {}", out.display());
            crate::tui::run(Run::open(&out)?)
        }
        _ => Err(Error::input("give a run directory (`sinkscope dash RUN_DIR`) or a text to compute one (`sinkscope dash -m MODEL -f TEXT`)")),
    }
}

fn needs_terminal() -> Result<()> {
    if std::io::stdout().is_terminal() {
        Ok(())
    } else {
        Err(Error::input("`sinkscope dash` needs an interactive terminal (stdout is not a TTY); for files, use `capture`/`analyze` with -o"))
    }
}
