//! `sinkscope press` as a job: read the context, question and answer (texts or token ids), run the
//! answer uncompressed and after each press × ratio, and write press.json, the tables and
//! press.md into a run directory, landing together.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::progress::Progress;
use crate::analysis::press::{PressReport, PressRun, PromptPart};
use crate::error::{Error, Result};
use crate::io::staging::Staging;
use crate::io::{write_atomic, write_json_atomic};
use crate::kv::press::{answer_uncompressed, run_press, Press, PressTokens};
use crate::model::load::LoadedModel;

pub use crate::report::run::PRESS_FILE;
pub const PRESS_MD: &str = "press.md";

/// Where one part of the prompt comes from.
#[derive(Debug, Clone)]
pub enum PartSource {
    /// A UTF-8 text file: its first `tokens` tokens from character `start_char`, with BOS when
    /// the tokenizer adds one (the context's source).
    TextFile { path: PathBuf, start_char: usize, tokens: usize },
    /// Token ids (`io::token_ids`), used as they are.
    Ids(PathBuf),
    /// A text given on the command line (`flag` names it), tokenized without BOS.
    Inline { flag: &'static str, text: String },
}

#[derive(Debug, Clone)]
pub struct PressOptions {
    pub context: PartSource,
    pub question: PartSource,
    pub answer: PartSource,
    pub presses: Vec<Press>,
    pub query_aware: bool,
}

fn read_part(lm: &LoadedModel, source: &PartSource) -> Result<PromptPart> {
    let (label, ids) = match source {
        PartSource::TextFile { path, start_char, tokens } => {
            let text = crate::io::text::read_text_file(path)?;
            let from = text.char_indices().nth(*start_char).map(|(i, _)| i);
            let Some(from) = from else {
                return Err(Error::file(path, format!("has fewer than {start_char} characters; lower --start-char")));
            };
            (path.display().to_string(), lm.tokenizer.encode_prefix(&text[from..], *tokens)?)
        }
        PartSource::Ids(path) => (path.display().to_string(), crate::io::token_ids::read_token_ids(path)?),
        PartSource::Inline { flag, text } => (flag.to_string(), lm.tokenizer.encode_plain(text)?),
    };
    if ids.is_empty() {
        return Err(Error::input(format!("{label} gives no tokens; a press needs a context, a question and an answer, each at least one token")));
    }
    Ok(PromptPart { source: label, ids })
}

/// Runs every press of `opts` and writes the run into `out`.
pub fn press_into(lm: &mut LoadedModel, opts: &PressOptions, out: &Path, progress: &mut dyn Progress) -> Result<PressReport> {
    if opts.presses.is_empty() {
        return Err(Error::input("no press to run: give --press and --ratio"));
    }
    let context = read_part(lm, &opts.context)?;
    let question = read_part(lm, &opts.question)?;
    let answer = read_part(lm, &opts.answer)?;
    let tokens = PressTokens { context: &context.ids, question: &question.ids, answer: &answer.ids, query_aware: opts.query_aware };
    let prompt = context.ids.len() + question.ids.len() + answer.ids.len();
    if prompt > lm.model.cfg.context_len {
        return Err(Error::input(format!("the prompt's {prompt} tokens exceed the model's context of {}", lm.model.cfg.context_len)));
    }
    tokens.check(&lm.model)?;
    for p in &opts.presses {
        p.check(tokens.prefix_len())?;
    }
    super::claim_out(lm, Some(out))?;
    progress.status("the answer with nothing compressed");
    let uncompressed = answer_uncompressed(&lm.model, tokens)?;
    let mut runs = Vec::with_capacity(opts.presses.len());
    for (i, &press) in opts.presses.iter().enumerate() {
        progress.status(&format!("[{}/{}] {} at ratio {}", i + 1, opts.presses.len(), press.label(), press.ratio));
        let started = Instant::now();
        let outcome = run_press(&lm.model, press, tokens)?;
        let seconds = started.elapsed().as_secs_f64();
        let attention_kept = uncompressed.attention_kept(&outcome.kept);
        runs.push(PressRun { label: press.label(), press, kept: outcome.kept, answer_nll: outcome.answer_nll, attention_kept, seconds });
    }
    progress.status("");
    lm.fingerprint()?;
    let report = PressReport {
        sinkscope_version: env!("CARGO_PKG_VERSION").to_string(),
        model: lm.info.clone(),
        context,
        question,
        answer,
        query_aware: opts.query_aware,
        uncompressed_nll: uncompressed.answer_nll,
        runs,
    };
    write_report(&report, out)?;
    Ok(report)
}

/// press.json, the tables and press.md, landing together.
fn write_report(r: &PressReport, out: &Path) -> Result<()> {
    let stage = Staging::begin(out)?;
    write_json_atomic(&stage.path(PRESS_FILE)?, r)?;
    #[cfg(feature = "parquet")]
    super::stage_tables(&stage, crate::report::press::tables(r))?;
    write_atomic(&stage.path(PRESS_MD)?, crate::report::press::markdown(r).as_bytes())?;
    stage.commit()
}
