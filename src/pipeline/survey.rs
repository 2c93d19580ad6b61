//! `survey` as a job: for each model, the probe-set diagnosis (Gu et al.'s protocol) and a
//! sink-count sweep and the share of streaming heads per text and budget, each into its own run
//! directory under `DIR/models/` (reused when already there for the same weights and settings: a
//! survey resumes), then the comparison — survey.json, the Parquet table `survey`, survey.md and
//! its figures. `survey_models` runs any subset of the models (a shard: see `survey_parts`).

use std::path::{Path, PathBuf};

use super::analyze::{analyze_into, AnalyzeOptions};
use super::demo::STREAM_TEXT;
use super::progress::Progress;
use super::stream::{sink_sweep, stream_tokens, sweep_into, StreamSource, SweepOptions};
use crate::analysis::survey::{StreamingHeads, Survey, SurveyRow, SurveySweep};
use crate::analysis::AnalysisReport;
use crate::error::{Error, Result};
use crate::io::staging::{create_out_dir, Staging};
use crate::io::{write_atomic, write_json_atomic, write_part_json};
use crate::kv::per_head::measure;
use crate::model::load::{load_source, LoadOptions, LoadedModel};
use crate::model::source::{resolve, ModelSource};
use crate::model::verified::weights_sha256;
use crate::probe::ProbeSet;
use crate::report::records::StreamReport;
use crate::report::run::{ANALYSIS_FILE, STREAM_FILE, SURVEY_FILE};

pub const SURVEY_MD: &str = "survey.md";
/// Per model directory: the load options its results were made with.
const LOAD_FILE: &str = "load-options.json";

/// How a model was loaded for the survey (a directory without one was made with the defaults).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoadRecord {
    pub dtype: String,
    pub quantized: bool,
}

impl LoadRecord {
    pub fn of(load: &LoadOptions) -> Self {
        LoadRecord { dtype: format!("{:?}", load.dtype).to_lowercase(), quantized: load.quantized }
    }
}

impl Default for LoadRecord {
    fn default() -> Self {
        LoadRecord { dtype: "auto".into(), quantized: false }
    }
}

/// Per sweep directory: the streaming-head measurement at that budget.
pub const STREAMING_HEADS_FILE: &str = "streaming-heads.json";
/// The built-in sweep text (chapters I–III of Pride and Prejudice), written into the survey; its
/// file name is also its label (the same in every survey directory, so shards agree).
pub const DEFAULT_TEXT_FILE: &str = "stream-text.txt";

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
pub fn slug(spec: &str) -> String {
    let base = Path::new(spec).file_name().map_or(spec.to_string(), |s| s.to_string_lossy().into_owned());
    base.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect()
}

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Whether two files both exist and hold the same bytes.
fn same_bytes(a: &Path, b: &Path) -> bool {
    a.is_file() && matches!((std::fs::read(a), std::fs::read(b)), (Ok(x), Ok(y)) if x == y)
}

/// Runs the survey into `out`, reusing each model's finished stages.
pub fn survey_into(opts: &SurveyOptions, out: &Path, progress: &mut dyn Progress) -> Result<Survey> {
    let rows = survey_models(opts, &|_| true, out, progress)?;
    let rows = rows.into_iter().map(|(_, r)| r).collect();
    let survey = Survey { sinkscope_version: env!("CARGO_PKG_VERSION").to_string(), epsilon: epsilon(), rows };
    write_survey(&survey, out)?;
    Ok(survey)
}

/// ε of Sink_0^ε in every survey's diagnosis.
pub fn epsilon() -> f64 {
    AnalyzeOptions::default().epsilon
}

/// Runs the models whose 0-based index `pick` accepts into `out/models/<slug>/` (reusing their
/// finished stages) and returns each one's index and row, in order; writes no comparison.
pub fn survey_models(opts: &SurveyOptions, pick: &dyn Fn(usize) -> bool, out: &Path, progress: &mut dyn Progress) -> Result<Vec<(usize, SurveyRow)>> {
    let slugs = slugs(opts)?;
    let picked: Vec<usize> = (0..opts.models.len()).filter(|&i| pick(i)).collect();
    let sources = check_inputs(opts, &picked)?;
    // Removed again while empty if the first model fails.
    create_out_dir(out)?;
    // (the path read, the label rows and records carry)
    let texts: Vec<(PathBuf, String)> = if opts.texts.is_empty() {
        let t = out.join(DEFAULT_TEXT_FILE);
        write_atomic(&t, STREAM_TEXT.as_bytes())?;
        vec![(t, DEFAULT_TEXT_FILE.to_string())]
    } else {
        opts.texts.iter().cloned().zip(text_labels(opts)).collect()
    };
    let n = opts.models.len();
    let mut rows = Vec::with_capacity(picked.len());
    for (i, source) in picked.into_iter().zip(sources) {
        let slug = &slugs[i];
        let mut job = ModelJob::new(opts, source, slug, out, format!("[{}/{n}] {slug}", i + 1))?;
        let analysis = job.analysis(progress)?;
        let mut sweeps = Vec::new();
        for (t, (text, label)) in texts.iter().enumerate() {
            for &cache in &opts.caches {
                sweeps.push(job.sweep(t, text, label, cache, progress)?);
            }
        }
        write_part_json(&job.dir.join(LOAD_FILE), &job.load)?;
        rows.push((i, SurveyRow::new(&analysis.model.display_name(), &format!("models/{slug}"), &analysis, sweeps)));
    }
    Ok(rows)
}

/// Each model's run-directory name, in order; two models sharing one are refused.
pub fn slugs(opts: &SurveyOptions) -> Result<Vec<String>> {
    if opts.models.is_empty() {
        return Err(Error::input("survey needs at least one -m MODEL"));
    }
    let mut slugs: Vec<String> = Vec::new();
    for m in &opts.models {
        let s = slug(m);
        if slugs.contains(&s) {
            return Err(Error::input(format!("two models would share the directory models/{s}; give each model once")));
        }
        slugs.push(s);
    }
    Ok(slugs)
}

/// The label of each sweep text in rows and records: a given text's path as given, the built-in
/// one's file name (not its path, which includes the survey directory).
pub fn text_labels(opts: &SurveyOptions) -> Vec<String> {
    if opts.texts.is_empty() {
        vec![DEFAULT_TEXT_FILE.to_string()]
    } else {
        opts.texts.iter().map(|t| t.display().to_string()).collect()
    }
}

/// The picked models found, every text readable, the sweep settings checked — before anything is
/// written. Returns each picked model's source.
fn check_inputs(opts: &SurveyOptions, picked: &[usize]) -> Result<Vec<ModelSource>> {
    if opts.caches.is_empty() || opts.caches.iter().any(|&w| w < 2) {
        return Err(Error::input("a survey needs cache budgets of at least 2 tokens"));
    }
    let sources = picked.iter().map(|&i| resolve(&opts.models[i])).collect::<Result<Vec<_>>>()?;
    for text in &opts.texts {
        crate::io::text::read_text_file(text)?;
    }
    sweep_options(opts, PathBuf::new(), opts.caches[0])?;
    Ok(sources)
}

/// One model's stages, each reused when its run files were made from the same weights and
/// settings; the model is loaded the first time a stage has to run.
struct ModelJob<'o> {
    opts: &'o SurveyOptions,
    source: ModelSource,
    /// "[i/n] slug", heading the progress lines.
    tag: String,
    sha: String,
    dir: PathBuf,
    load: LoadRecord,
    /// Whether the directory's results were made under the same load options (`--dtype`,
    /// `--quantized`: other numbers otherwise).
    same_load: bool,
    model: Option<LoadedModel>,
}

impl<'o> ModelJob<'o> {
    fn new(opts: &'o SurveyOptions, source: ModelSource, slug: &str, out: &Path, tag: String) -> Result<Self> {
        let sha = weights_sha256(source.path())?;
        let dir = out.join("models").join(slug);
        let load = LoadRecord::of(&opts.load);
        let same_load = read::<LoadRecord>(&dir.join(LOAD_FILE)).unwrap_or_default() == load;
        Ok(ModelJob { opts, source, tag, sha, dir, load, same_load, model: None })
    }

    fn model(&mut self, progress: &mut dyn Progress) -> Result<&mut LoadedModel> {
        if self.model.is_none() {
            progress.stage(&format!("{}: loading", self.tag));
            let mut lm = load_source(&self.source, &self.opts.load)?;
            lm.fingerprint()?;
            self.model = Some(lm);
        }
        self.model.as_mut().ok_or_else(|| Error::Internal("the survey's model went missing".into()))
    }

    /// The probe-set diagnosis (with the causal sweep when asked for).
    fn analysis(&mut self, progress: &mut dyn Progress) -> Result<AnalysisReport> {
        let (sha, ablation) = (self.sha.as_str(), self.opts.ablation);
        let done = read::<AnalysisReport>(&self.dir.join(ANALYSIS_FILE))
            .filter(|a| self.same_load && a.model.sha256.as_deref() == Some(sha) && (a.ablation.is_some() || !ablation));
        if let Some(a) = done {
            progress.stage(&format!("{}: probe diagnosis already done", self.tag));
            return Ok(a);
        }
        let (tag, dir) = (self.tag.clone(), self.dir.clone());
        let lm = self.model(progress)?;
        progress.stage(&format!("{tag}: probe diagnosis (default probes, T = 64, ε = 0.3)"));
        let analyze = AnalyzeOptions { ablation, ablate_keys: Some(vec![0]), ablation_tokens: 96, heatmap_bins: 0, ..AnalyzeOptions::default() };
        analyze_into(lm, &analyze, Some(&ProbeSet::load("default")?), &dir, progress)
    }

    /// The sink-count sweep and the streaming heads of text `t` (read from `text`, labelled
    /// `label`) at budget `cache`.
    fn sweep(&mut self, t: usize, text: &Path, label: &str, cache: usize, progress: &mut dyn Progress) -> Result<SurveySweep> {
        let (opts, tag) = (self.opts, self.tag.clone());
        let sweep_dir = self.dir.join(format!("text{t}-w{cache}"));
        let read_from = text.display().to_string();
        // Reused only when made from the same weights, text, length, budget and sink counts
        // (a text shorter than --tokens is therefore swept again each time). stream.json names
        // the path it read: that path, or another file with the same bytes (the survey directory
        // moved, or a merge gathered the run from a shard's); streaming-heads.json and the row
        // carry the label.
        let done = read::<StreamReport>(&sweep_dir.join(STREAM_FILE)).filter(|s| {
            let same_sweep = s
                .recommendation
                .as_ref()
                .is_some_and(|r| r.cache == cache && r.table.iter().filter_map(|row| row.sinks).eq(opts.sinks.iter().copied()));
            self.same_load
                && s.model.sha256.as_deref() == Some(self.sha.as_str())
                && (s.text_source == read_from || same_bytes(Path::new(&s.text_source), text))
                && s.tokens.len() == opts.tokens
                && same_sweep
        });
        let rec = match done.and_then(|s| s.recommendation) {
            Some(r) => {
                progress.stage(&format!("{tag}: sweep of {} at W = {cache} already done", text.display()));
                r
            }
            None => {
                let lm = self.model(progress)?;
                progress.stage(&format!("{tag}: sink-count sweep, {} tokens of {} at W = {cache}", opts.tokens, text.display()));
                sweep_into(lm, &sweep_options(opts, text.to_path_buf(), cache)?, Some(&sweep_dir), progress)?
            }
        };
        let (sinks, recent) = StreamingHeads::keys_for(cache);
        let same = |h: &StreamingHeads| {
            self.same_load && h.sha256 == self.sha && h.text == label && h.requested_tokens == opts.tokens && (h.sinks, h.recent) == (sinks, recent)
        };
        let streaming = match read::<StreamingHeads>(&sweep_dir.join(STREAMING_HEADS_FILE)).filter(same) {
            Some(h) => Some(h),
            None => {
                let sha = self.sha.clone();
                let lm = self.model(progress)?;
                progress.stage(&format!("{tag}: streaming heads (S = {sinks} + {recent} recent) on {}", text.display()));
                streaming_heads(lm, &sha, text, label, cache, opts.tokens, &sweep_dir, progress)?
            }
        };
        Ok(SurveySweep::of(label, &rec, streaming.as_ref()))
    }
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
    if lm.model.cfg.attention_layers().len() < lm.model.cfg.n_layers {
        progress.warning(&format!("{label}: streaming heads not measured: a hybrid's linear-attention layers have no KV heads to classify"));
        return Ok(None);
    }
    let source = StreamSource { file: text.to_path_buf(), start_char: 0, tokens, token_by_token: false, token_ids: false, inline: false };
    let mut ids = stream_tokens(lm, &source, progress)?;
    ids.truncate(lm.model.cfg.context_len);
    if ids.len() <= cache {
        return Ok(None);
    }
    let evidence = measure(&lm.model, &ids, sinks, recent)?;
    let heads = StreamingHeads::new(sha, label, (tokens, ids.len()), (sinks, recent), evidence.outside);
    create_out_dir(dir)?;
    write_part_json(&dir.join(STREAMING_HEADS_FILE), &heads)?;
    Ok(Some(heads))
}

/// One sink-count sweep of `sink S` over `file` at budget `cache`.
fn sweep_options(opts: &SurveyOptions, file: PathBuf, cache: usize) -> Result<SweepOptions> {
    sink_sweep(StreamSource { file, start_char: 0, tokens: opts.tokens, token_by_token: false, token_ids: false, inline: false }, &opts.sinks, cache)
}

/// survey.json, tables/survey.parquet, survey.md and the figures, landing together.
pub fn write_survey(s: &Survey, out: &Path) -> Result<()> {
    let stage = Staging::begin(out)?;
    write_json_atomic(&stage.path(SURVEY_FILE)?, s)?;
    #[cfg(feature = "parquet")]
    {
        crate::report::parquet::write_table(&crate::report::tables::survey_table(s), &stage.path("tables/survey.parquet")?)?;
        let census = crate::report::survey::census_entries(s);
        crate::report::parquet::write_table(&crate::report::census::table(&census), &stage.path("tables/census.parquet")?)?;
    }
    #[cfg(feature = "plots")]
    for (stem, fig) in crate::report::survey::figures(s) {
        for ext in ["png", "svg"] {
            crate::report::plot::save(&fig, &stage.path(format!("figures/{stem}.{ext}"))?)?;
        }
    }
    write_atomic(&stage.path(SURVEY_MD)?, crate::report::survey::markdown(s).as_bytes())?;
    stage.commit()
}
