//! Where a command runs: the model it works on (loaded from its flags, or one the caller already
//! holds), where its progress goes, and whether it prints its result. The terminal session is the
//! `sinkscope` binary; an embedded session (the Python package) keeps one model loaded across
//! calls, reports progress to its caller and prints nothing — the command's files are its result.

use super::model_args::ModelArgs;
use super::progress::TerminalProgress;
use crate::error::{Error, Result};
use crate::model::load::LoadedModel;
use crate::pipeline::progress::Progress;

pub struct Session<'a> {
    /// The caller's model; `None` in the terminal, where each command loads its own.
    held: Option<&'a mut LoadedModel>,
    loaded: Option<LoadedModel>,
    progress: Box<dyn Progress + 'a>,
    print: bool,
}

impl<'a> Session<'a> {
    /// The binary's session: models from the flags, progress on stderr, results on stdout.
    pub fn terminal() -> Session<'a> {
        Session { held: None, loaded: None, progress: Box::new(TerminalProgress::new()), print: true }
    }

    /// A caller's session: commands run on `model` (their `-m` flags are not loaded), report to
    /// `progress` and print nothing.
    pub fn embedded(model: Option<&'a mut LoadedModel>, progress: Box<dyn Progress + 'a>) -> Session<'a> {
        Session { held: model, loaded: None, progress, print: false }
    }

    /// Whether the command prints its result (the terminal) or only writes its files.
    pub fn prints(&self) -> bool {
        self.print
    }

    pub fn progress(&mut self) -> &mut (dyn Progress + 'a) {
        self.progress.as_mut()
    }

    /// The model the command works on, with the progress sink (both borrowed at once).
    pub fn model(&mut self, args: &ModelArgs) -> Result<(&mut LoadedModel, &mut (dyn Progress + 'a))> {
        let model = match (&mut self.held, &mut self.loaded) {
            (Some(m), _) => &mut **m,
            (None, Some(m)) => m,
            (None, slot @ None) => slot.insert(args.load()?),
        };
        Ok((model, self.progress.as_mut()))
    }

    /// Refuses a command an embedded session cannot run (it needs the terminal or its own model).
    pub fn needs_terminal(&self, command: &str) -> Result<()> {
        match self.print {
            true => Ok(()),
            false => Err(Error::input(format!("`{command}` runs only from the command line (`sinkscope {command} …`)"))),
        }
    }
}

/// The model flags alone, as every command takes them.
#[derive(clap::Parser, Debug)]
#[command(name = "sinkscope load")]
struct ModelFlags {
    #[command(flatten)]
    model: ModelArgs,
}

/// Loads the model that the model flags `argv` (`-m`, `--dtype`, `--quantized`, `--tokenizer`,
/// `--offline`) name, as a command would: an alias not on the model path is fetched and verified
/// first. For a caller that keeps the model across commands ([`Session::embedded`]).
pub fn load_model<I: IntoIterator<Item = String>>(argv: I) -> Result<LoadedModel> {
    let flags: ModelFlags = super::usage::parse_from(argv)?;
    let mut lm = flags.model.load()?;
    lm.fingerprint()?;
    Ok(lm)
}
