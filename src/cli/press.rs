//! `sinkscope press -m MODEL --press P --ratio R -o DIR`: one prompt's context compressed once as
//! kvpress compresses it (its presses by name, its wrappers as flags), the question and answer
//! appended, and the answer's NLL beside the uncompressed one's; what each (layer, KV head) kept.

use std::path::PathBuf;

use clap::Args;

use super::model_args::ModelArgs;
use super::session::Session;
use crate::error::{Error, Result};
use crate::io::finite_json::to_pretty;
use crate::io::staging::check_out_dir;
use crate::kv::press::scores::PressKind;
use crate::kv::press::select::{Budget, ADAPTIVE_ALPHA, PYRAMID_BETA, PYRAMID_WINDOW};
use crate::kv::press::Press;
use crate::pipeline::press::{press_into, PartSource, PressOptions};

/// Context tokens of a text when --tokens is not given.
const DEFAULT_TOKENS: usize = 512;

/// kvpress's names `--press` takes: the scorers, and `pyramidkv` (SnapKV with PyramidKV's
/// per-layer budgets).
const PRESS_NAMES: &str = "knorm, streaming_llm, snapkv, tova, observed_attention, keydiff, expected_attention, pyramidkv";

/// Which presses at which ratios (`press` and `tasks`).
#[derive(Args, Debug)]
pub struct PressList {
    /// Presses by kvpress's names, comma-separated: knorm, streaming_llm, snapkv, tova,
    /// observed_attention, keydiff, expected_attention, pyramidkv.
    #[arg(long = "press", value_delimiter = ',', required = true)]
    pub presses: Vec<String>,
    /// Compression ratios (kvpress's `compression_ratio`: the share of the context's keys
    /// removed), comma-separated, each in [0, 1).
    #[arg(long = "ratio", value_delimiter = ',', required = true)]
    pub ratios: Vec<f64>,
}

impl PressList {
    /// The scorers and budgets `--press` names (`pyramidkv` is SnapKV with PyramidKV's
    /// per-layer budgets).
    pub(super) fn kinds(&self) -> Result<Vec<(PressKind, Budget)>> {
        self.presses
            .iter()
            .map(|name| match name.trim() {
                "pyramidkv" => Ok((PressKind::Snapkv, Budget::Pyramid { window: PYRAMID_WINDOW, beta: PYRAMID_BETA })),
                other => PressKind::parse(other)
                    .map(|kind| (kind, Budget::Uniform))
                    .ok_or_else(|| Error::input(format!("--press {other}: no such press (expected {PRESS_NAMES})"))),
            })
            .collect()
    }
}

#[derive(Args, Debug)]
pub struct PressArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The context as a UTF-8 text (its first --tokens tokens from --start-char).
    #[arg(short = 'f', long, value_name = "FILE", required_unless_present = "context_ids", conflicts_with = "context_ids")]
    pub file: Option<PathBuf>,
    /// The context as token ids (a JSON list, as `stream --ids` reads), used as they are.
    #[arg(long, value_name = "FILE")]
    pub context_ids: Option<PathBuf>,
    /// Start the context at this character of --file [default: 0].
    #[arg(long)]
    pub start_char: Option<usize>,
    /// Tokens of --file in the context [default: 512].
    #[arg(long, value_parser = super::counts::at_least_one)]
    pub tokens: Option<usize>,
    /// The question, as text (tokenized without BOS).
    #[arg(long, required_unless_present = "question_ids", conflicts_with = "question_ids")]
    pub question: Option<String>,
    #[arg(long, value_name = "FILE")]
    pub question_ids: Option<PathBuf>,
    /// The answer scored after the question, as text (tokenized without BOS).
    #[arg(long, required_unless_present = "answer_ids", conflicts_with = "answer_ids")]
    pub answer: Option<String>,
    #[arg(long, value_name = "FILE")]
    pub answer_ids: Option<PathBuf>,
    #[command(flatten)]
    pub list: PressList,
    /// First positions every press keeps whatever their score [default: the press's own —
    /// 4 for streaming_llm and expected_attention, 0 for the rest, as in kvpress].
    #[arg(long)]
    pub sinks: Option<usize>,
    /// Keep whole blocks of B positions from position 0, one choice per layer for all its KV
    /// heads (kvpress's ChunkKV with chunk_length B; vLLM's pages hold 16).
    #[arg(long, value_name = "B", value_parser = super::counts::at_least_one)]
    pub block: Option<usize>,
    /// AdaKV: each layer chooses its keys across its KV heads by score (its total budget as
    /// before), each head keeping at least --alpha of its share.
    #[arg(long)]
    pub adaptive: bool,
    /// AdaKV's safeguard: the least share of its uniform budget a head keeps.
    #[arg(long, default_value_t = ADAPTIVE_ALPHA, requires = "adaptive")]
    pub alpha: f64,
    /// Re-rotate the kept keys to slots 0… and run the question after them (kvpress's
    /// KeyRerotationPress) instead of leaving every key at its original position.
    #[arg(long)]
    pub rerotate: bool,
    /// Compress the question with the context (the press sees it; SnapKV's setting) and append
    /// only the answer.
    #[arg(long)]
    pub query_aware: bool,
    /// Print the record as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// The run directory (press.json, press.md, tables/press*.parquet).
    #[arg(short = 'o', long)]
    pub out: PathBuf,
}

impl PressArgs {
    /// Every press × ratio the flags name, wrapped as they say.
    fn presses(&self) -> Result<Vec<Press>> {
        let mut out = Vec::new();
        for (kind, budget) in self.list.kinds()? {
            let budget = match (self.adaptive, budget) {
                (true, Budget::Pyramid { .. }) => {
                    return Err(Error::input(
                        "--adaptive with pyramidkv: a budget is per layer (PyramidKV) or across a layer's heads (AdaKV), not both",
                    ))
                }
                (true, _) => Budget::Adaptive { alpha: self.alpha },
                (false, b) => b,
            };
            for &ratio in &self.list.ratios {
                let press = Press {
                    sinks: self.sinks.unwrap_or(kind.default_sinks()),
                    budget,
                    block: self.block,
                    rerotate: self.rerotate,
                    ..Press::new(kind, ratio)
                };
                if !out.contains(&press) {
                    out.push(press);
                }
            }
        }
        Ok(out)
    }

    fn options(&self) -> Result<PressOptions> {
        let context = match (&self.file, &self.context_ids) {
            (_, Some(_)) if self.tokens.is_some() || self.start_char.is_some() => {
                return Err(Error::input("--tokens and --start-char cut a text (-f); --context-ids are used as they are"))
            }
            (_, Some(ids)) => PartSource::Ids(ids.clone()),
            (Some(path), None) => {
                PartSource::TextFile { path: path.clone(), start_char: self.start_char.unwrap_or(0), tokens: self.tokens.unwrap_or(DEFAULT_TOKENS) }
            }
            (None, None) => return Err(Error::input("give the context: -f FILE or --context-ids FILE")),
        };
        let part = |text: &Option<String>, ids: &Option<PathBuf>, flag: &'static str| match (text, ids) {
            (_, Some(ids)) => PartSource::Ids(ids.clone()),
            (Some(text), None) => PartSource::Inline { flag, text: text.clone() },
            (None, None) => PartSource::Inline { flag, text: String::new() },
        };
        Ok(PressOptions {
            context,
            question: part(&self.question, &self.question_ids, "--question"),
            answer: part(&self.answer, &self.answer_ids, "--answer"),
            presses: self.presses()?,
            query_aware: self.query_aware,
        })
    }
}

pub fn run(args: PressArgs, s: &mut Session) -> Result<()> {
    check_out_dir(&args.out)?;
    let opts = args.options()?;
    let (lm, progress) = s.model(&args.model)?;
    let report = press_into(lm, &opts, &args.out, progress)?;
    if !s.prints() {
        return Ok(());
    }
    if args.json {
        println!("{}", to_pretty(&report, "the JSON printed")?);
        return Ok(());
    }
    let n = report.compressed();
    let base = report.uncompressed_mean_nll();
    println!(
        "context {} tokens, question {}, answer {}; {n} compressed{}; attention kept: the share of what the uncompressed run's later queries paid the prefix that a press kept",
        report.context.ids.len(),
        report.question.ids.len(),
        report.answer.ids.len(),
        if report.query_aware { " (query-aware)" } else { "" }
    );
    println!(
        "{:<30} {:>5} {:>7} {:>9} {:>11} {:>9} {:>10} {:>8}  most starved head",
        "press", "ratio", "keys", "attention", "answer NLL", "Δ NLL", "worst tok", "seconds"
    );
    println!("{:<30} {:>5} {:>7} {:>9} {base:>11.4}", "none", 0, "100.0%", "100.0%");
    for r in &report.runs {
        let starved = r.most_starved().map_or("-".to_string(), |(l, h, share)| format!("L{l} H{h} {:.0}%", 100.0 * share));
        println!(
            "{:<30} {:>5} {:>6.1}% {:>8.1}% {:>11.4} {:>+9.4} {:>+10.3} {:>8.1}  {starved}",
            r.label,
            r.press.ratio,
            100.0 * r.kept_share(n),
            100.0 * r.mean_attention_kept(),
            r.mean_nll(),
            r.mean_nll() - base,
            r.max_increase(&report.uncompressed_nll),
            r.seconds
        );
    }
    println!("press.json, press.md and tables/ in {}", args.out.display());
    Ok(())
}
