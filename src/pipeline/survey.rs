//! `survey` as a job: for each model, the probe-set diagnosis (Gu et al.'s protocol) and a
//! sink-count sweep and the share of streaming heads per text and budget, each into its own run
//! directory under `DIR/models/` (reused when already there for the same weights and settings: a
//! survey resumes), then the comparison — survey.json, the Parquet table `survey`, survey.md and
//! its figures.

use std::path::{Path, PathBuf};

use super::analyze::{analyze_into, AnalyzeOptions};
use super::demo::STREAM_TEXT;
use super::progress::Progress;
use super::stream::{stream_tokens, sweep_into, StreamSource, SweepOptions, RECOMPUTE_BUDGET};
use crate::analysis::survey::{StreamingHeads, Survey, SurveyRow, SurveySweep};
use crate::analysis::AnalysisReport;
use crate::error::{Error, Result};
use crate::io::staging::Staging;
use crate::io::{write_atomic, write_json_atomic};
use crate::kv::per_head::measure;
use crate::kv::policy::{PolicyKind, PositionMode};
use crate::model::load::{load_source, weights_sha256, LoadOptions, LoadedModel};
use crate::model::source::resolve;
use crate::probe::ProbeSet;
use crate::report::records::StreamReport;
use crate::report::run::{ANALYSIS_FILE, STREAM_FILE, SURVEY_FILE};

pub const SURVEY_MD: &str = "survey.md";
/// Per model directory: the load options its results were made with.
const LOAD_FILE: &str = "load-options.json";

/// How a model was loaded for the survey (a directory without one was made with the defaults).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct LoadRecord {
    dtype: String,
    quantized: bool,
}

impl Default for LoadRecord {
    fn default() -> Self {
        LoadRecord { dtype: "auto".into(), quantized: false }
    }
}

/// Per sweep directory: the streaming-head measurement at that budget.
pub const STREAMING_HEADS_FILE: &str = "streaming-heads.json";
/// The built-in sweep text (chapters I–III of Pride and Prejudice), written into the survey.
const DEFAULT_TEXT_FILE: &str = "stream-text.txt";

/// What the survey runs.
#[derive(Debug, Clone)]
pub struct SurveyOptions {
    pub models: Vec<String>,
    /// Sweep texts (none: the built-in chapters of Pride and Prejudice).
    pub texts: Vec<PathBuf>,
    /// Cache budgets W of the sweeps.
    pub caches: Vec<usize>,
    pub tokens: usize,
    pub sinks: Vec<usize>,
    /// Run the probe diagnosis's causal sweep too (slow: one partial forward per head and key).
    pub ablation: bool,
    pub load: LoadOptions,
}

/// A file-system-safe name for a model's run directory.
fn slug(spec: &str) -> String {
    let base = Path::new(spec).file_name().map_or(spec.to_string(), |s| s.to_string_lossy().into_owned());
    base.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect()
}

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Runs the survey into `out`, reusing each model's finished stages.
pub fn survey_into(opts: &SurveyOptions, out: &Path, progress: &mut dyn Progress) -> Result<Survey> {
    if opts.models.is_empty() {
        return Err(Error::input("survey needs at least one -m MODEL"));
    }
    if opts.caches.is_empty() || opts.caches.iter().any(|&w| w < 2) {
        return Err(Error::input("--cache needs budgets of at least 2 tokens"));
    }
    let mut slugs: Vec<String> = Vec::new();
    for m in &opts.models {
        let s = slug(m);
        if slugs.contains(&s) {
            return Err(Error::input(format!("two models would share the directory models/{s}; give each model once")));
        }
        slugs.push(s);
    }
    // Every model and text is found, and the sweep settings checked, before anything is written.
    let sources = opts.models.iter().map(|m| resolve(m)).collect::<Result<Vec<_>>>()?;
    if let Some(t) = opts.texts.iter().find(|t| !t.is_file()) {
        return Err(Error::file(t, "no such text file"));
    }
    sweep_options(opts, PathBuf::new(), opts.caches[0]).validate()?;
    std::fs::create_dir_all(out).map_err(|e| Error::file(out, format!("cannot create the output directory ({e})")))?;
    let texts: Vec<PathBuf> = if opts.texts.is_empty() {
        let t = out.join(DEFAULT_TEXT_FILE);
        write_atomic(&t, STREAM_TEXT.as_bytes())?;
        vec![t]
    } else {
        opts.texts.clone()
    };
    let n = opts.models.len();
    let mut rows = Vec::with_capacity(n);
    for (i, (source, slug)) in sources.iter().zip(&slugs).enumerate() {
        let sha = weights_sha256(source.path())?;
        let dir = out.join("models").join(slug);
        // Results made under other load options (`--dtype`, `--quantized`) are other numbers.
        let load = LoadRecord { dtype: format!("{:?}", opts.load.dtype).to_lowercase(), quantized: opts.load.quantized };
        let same_load = read::<LoadRecord>(&dir.join(LOAD_FILE)).unwrap_or_default() == load;
        let mut model: Option<LoadedModel> = None;
        let loaded = |progress: &mut dyn Progress| -> Result<LoadedModel> {
            progress.stage(&format!("[{}/{n}] {slug}: loading", i + 1));
            let mut lm = load_source(source, &opts.load)?;
            lm.fingerprint()?;
            Ok(lm)
        };
        let analysis: AnalysisReport = match read::<AnalysisReport>(&dir.join(ANALYSIS_FILE))
            .filter(|a| same_load && a.model.sha256.as_deref() == Some(sha.as_str()) && (a.ablation.is_some() || !opts.ablation))
        {
            Some(a) => {
                progress.stage(&format!("[{}/{n}] {slug}: probe diagnosis already done", i + 1));
                a
            }
            None => {
                let lm = model.insert(loaded(progress)?);
                progress.stage(&format!("[{}/{n}] {slug}: probe diagnosis (default probes, T = 64, ε = 0.3)", i + 1));
                let analyze = AnalyzeOptions {
                    ablation: opts.ablation,
                    ablate_keys: Some(vec![0]),
                    ablation_tokens: 96,
                    heatmap_bins: 0,
                    ..AnalyzeOptions::default()
                };
                analyze_into(lm, &analyze, Some(&ProbeSet::load("default")?), &dir, progress)?
            }
        };
        let mut sweeps = Vec::new();
        for (t, text) in texts.iter().enumerate() {
            for &cache in &opts.caches {
                let sweep_dir = dir.join(format!("text{t}-w{cache}"));
                let label = text.display().to_string();
                // Reused only when made from the same weights, text, length, budget and sink counts
                // (a text shorter than --tokens is therefore swept again each time).
                let done = read::<StreamReport>(&sweep_dir.join(STREAM_FILE)).filter(|s| {
                    let same_sweep = s
                        .recommendation
                        .as_ref()
                        .is_some_and(|r| r.cache == cache && r.table.iter().filter_map(|row| row.sinks).eq(opts.sinks.iter().copied()));
                    same_load
                        && s.model.sha256.as_deref() == Some(sha.as_str())
                        && s.text_source == label
                        && s.tokens.len() == opts.tokens
                        && same_sweep
                });
                let rec = match done.and_then(|s| s.recommendation) {
                    Some(r) => {
                        progress.stage(&format!("[{}/{n}] {slug}: sweep of {} at W = {cache} already done", i + 1, text.display()));
                        r
                    }
                    None => {
                        let lm = match model.as_mut() {
                            Some(lm) => lm,
                            None => model.insert(loaded(progress)?),
                        };
                        progress.stage(&format!(
                            "[{}/{n}] {slug}: sink-count sweep, {} tokens of {} at W = {cache}",
                            i + 1,
                            opts.tokens,
                            text.display()
                        ));
                        let sweep = sweep_options(opts, text.clone(), cache);
                        sweep_into(lm, &sweep, Some(&sweep_dir), progress)?
                    }
                };
                let (sinks, recent) = StreamingHeads::keys_for(cache);
                let same = |h: &StreamingHeads| {
                    same_load && h.sha256 == sha && h.text == label && h.requested_tokens == opts.tokens && (h.sinks, h.recent) == (sinks, recent)
                };
                let streaming = match read::<StreamingHeads>(&sweep_dir.join(STREAMING_HEADS_FILE)).filter(same) {
                    Some(h) => Some(h),
                    None => {
                        let lm = match model.as_mut() {
                            Some(lm) => lm,
                            None => model.insert(loaded(progress)?),
                        };
                        progress.stage(&format!("[{}/{n}] {slug}: streaming heads (S = {sinks} + {recent} recent) on {}", i + 1, text.display()));
                        streaming_heads(lm, &sha, text, &label, cache, opts.tokens, &sweep_dir, progress)?
                    }
                };
                sweeps.push(SurveySweep::of(&label, &rec, streaming.as_ref()));
            }
        }
        let name = analysis.model.display_name();
        write_json_atomic(&dir.join(LOAD_FILE), &load)?;
        rows.push(SurveyRow::new(&name, &format!("models/{slug}"), &analysis, sweeps));
    }
    let survey = Survey { sinkscope_version: env!("CARGO_PKG_VERSION").to_string(), epsilon: AnalyzeOptions::default().epsilon, rows };
    write_survey(&survey, out)?;
    Ok(survey)
}

/// Which KV heads keep S sinks + W − S recent keys at almost no loss, on the first `tokens` of
/// `text` (at most the model's context); written to `dir`. `None` when the text is too short for
/// any query to see past those keys.
#[allow(clippy::too_many_arguments)]
fn streaming_heads(
    lm: &LoadedModel,
    sha: &str,
    text: &Path,
    label: &str,
    cache: usize,
    tokens: usize,
    dir: &Path,
    progress: &mut dyn Progress,
) -> Result<Option<StreamingHeads>> {
    let (sinks, recent) = StreamingHeads::keys_for(cache);
    let source = StreamSource { file: text.to_path_buf(), start_char: 0, tokens, token_by_token: false };
    let mut ids = stream_tokens(lm, &source, progress)?;
    ids.truncate(lm.model.cfg.context_len);
    if ids.len() <= cache {
        return Ok(None);
    }
    let evidence = measure(&lm.model, &ids, sinks, recent)?;
    let heads = StreamingHeads::new(sha, label, (tokens, ids.len()), (sinks, recent), evidence.outside);
    std::fs::create_dir_all(dir).map_err(|e| Error::file(dir, format!("cannot create ({e})")))?;
    write_json_atomic(&dir.join(STREAMING_HEADS_FILE), &heads)?;
    Ok(Some(heads))
}

/// One sink-count sweep of `sink S` over `file` at budget `cache`.
fn sweep_options(opts: &SurveyOptions, file: PathBuf, cache: usize) -> SweepOptions {
    SweepOptions {
        source: StreamSource { file, start_char: 0, tokens: opts.tokens, token_by_token: false },
        cache,
        sinks: opts.sinks.clone(),
        policy: PolicyKind::Sink,
        recent: 0,
        delta: 0.02,
        positions: PositionMode::Slot,
        recompute: false,
        recompute_every: None,
        recompute_budget: RECOMPUTE_BUDGET,
    }
}

/// survey.json, tables/survey.parquet, survey.md and the figures, landing together.
pub fn write_survey(s: &Survey, out: &Path) -> Result<()> {
    let stage = Staging::begin(out)?;
    write_json_atomic(&stage.path(SURVEY_FILE)?, s)?;
    #[cfg(feature = "parquet")]
    crate::report::parquet::write_table(&crate::report::tables::survey_table(s), &stage.path("tables/survey.parquet")?)?;
    #[cfg(feature = "plots")]
    for (stem, fig) in crate::report::survey::figures(s) {
        for ext in ["png", "svg"] {
            crate::report::plot::save(&fig, &stage.path(format!("figures/{stem}.{ext}"))?)?;
        }
    }
    write_atomic(&stage.path(SURVEY_MD)?, crate::report::survey::markdown(s).as_bytes())?;
    stage.commit()
}
