//! A run directory as one value: whichever of capture.json, report.json (analysis), stream.json,
//! per_head.json, quant.json, needle.json, heatmaps.safetensors and reductions.safetensors a command wrote
//! there, loaded and checked. The exporters and the dashboard read runs only through this.

use crate::kv::per_head::Frontier;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use super::records::{CaptureReport, StreamReport};
use super::tokens::is_byte_level;
use crate::analysis::needle::NeedleReport;
use crate::analysis::press::PressReport;
use crate::analysis::quant::QuantReport;
use crate::analysis::sinks::Alphas;
use crate::analysis::survey::Survey;
use crate::analysis::tasks::TasksReport;
use crate::analysis::AnalysisReport;
use crate::capture::heatmaps::Heatmaps;
use crate::error::{Error, Result};
use crate::io::arrays::Arrays;
use crate::model::info::{ModelInfo, TokenInfo};

pub const CAPTURE_FILE: &str = "capture.json";
pub const ANALYSIS_FILE: &str = "report.json";
pub const STREAM_FILE: &str = "stream.json";
/// `recommend --per-head`'s frontier (beside its stream.json).
pub const PER_HEAD_FILE: &str = "per_head.json";
/// `quant`'s fake-quantization sweep.
pub const QUANT_FILE: &str = "quant.json";
/// `needle`'s pass-key sweep.
pub const NEEDLE_FILE: &str = "needle.json";
/// `press`'s compressions of one prompt.
pub const PRESS_FILE: &str = "press.json";
/// `tasks`'s RULER-style prompts under presses.
pub const TASKS_FILE: &str = "tasks.json";
/// `survey`'s comparison (a survey directory opens as its first model's run, with the survey).
pub const SURVEY_FILE: &str = "survey.json";
pub const HEATMAPS_FILE: &str = "heatmaps.safetensors";
pub const REDUCTIONS_FILE: &str = "reductions.safetensors";

/// Everything a run directory holds.
#[derive(Debug, Clone)]
pub struct Run {
    pub dir: PathBuf,
    pub capture: Option<CaptureReport>,
    pub analysis: Option<AnalysisReport>,
    pub stream: Option<StreamReport>,
    /// `recommend --per-head`'s sweep, when the run has one.
    pub per_head: Option<Frontier>,
    /// `quant`'s sweep, when the run has one.
    pub quant: Option<QuantReport>,
    /// `needle`'s sweep, when the run has one.
    pub needle: Option<NeedleReport>,
    /// `press`'s compressions, when the run has them.
    pub press: Option<PressReport>,
    /// `tasks`'s sweep, when the run has one.
    pub tasks: Option<TasksReport>,
    /// The survey this run was opened through (a survey directory opens as its first model's run).
    pub survey: Option<Survey>,
    /// The survey directory (its models' run directories are relative to it).
    pub survey_dir: Option<PathBuf>,
    pub heatmaps: Option<Heatmaps>,
    /// Per-position arrays of the capture (see reports/README.md).
    pub reductions: Option<Arrays>,
}

fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    if !path.exists() {
        return Ok(None);
    }
    let bytes = crate::io::regular::read(path).map_err(|e| Error::file(path, format!("cannot read ({e})")))?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| Error::file(path, format!("is not a file this sinkscope can read ({e}); re-run the command that made it")))
}

/// Sanity bounds on a run's model shape (the largest open models have ~100 layers × ~100 heads).
const MAX_LAYERS_OR_HEADS: usize = 1 << 12;
const MAX_LAYER_HEADS: usize = 1 << 18;

impl Run {
    pub fn open(dir: &Path) -> Result<Run> {
        if !dir.is_dir() {
            return Err(Error::file(dir, "is not a directory; give the -o directory of `sinkscope capture`, `analyze`, `recommend` or `demo`"));
        }
        let heatmaps_path = dir.join(HEATMAPS_FILE);
        let reductions_path = dir.join(REDUCTIONS_FILE);
        let run = Run {
            dir: dir.to_path_buf(),
            capture: read_json(&dir.join(CAPTURE_FILE))?,
            analysis: read_json(&dir.join(ANALYSIS_FILE))?,
            stream: read_json(&dir.join(STREAM_FILE))?,
            per_head: read_json(&dir.join(PER_HEAD_FILE))?,
            quant: read_json(&dir.join(QUANT_FILE))?,
            needle: read_json(&dir.join(NEEDLE_FILE))?,
            press: read_json(&dir.join(PRESS_FILE))?,
            tasks: read_json(&dir.join(TASKS_FILE))?,
            survey: None,
            survey_dir: None,
            heatmaps: if heatmaps_path.exists() { Some(Heatmaps::load(&heatmaps_path)?) } else { None },
            reductions: if reductions_path.exists() { Some(Arrays::read(&reductions_path, "capture")?) } else { None },
        };
        // Tables and views are sized by the model's layers × heads: a corrupt count must not
        // become gigabytes (found by fuzzing: n_heads = 7,747,748 allocated 0.9 GB).
        for (file, m) in [
            (CAPTURE_FILE, run.capture.as_ref().map(|c| &c.model)),
            (ANALYSIS_FILE, run.analysis.as_ref().map(|a| &a.model)),
            (STREAM_FILE, run.stream.as_ref().map(|s| &s.model)),
            (QUANT_FILE, run.quant.as_ref().map(|q| &q.model)),
            (NEEDLE_FILE, run.needle.as_ref().map(|n| &n.model)),
            (PRESS_FILE, run.press.as_ref().map(|p| &p.model)),
            (TASKS_FILE, run.tasks.as_ref().map(|t| &t.model)),
        ] {
            if let Some(m) = m {
                if m.config.n_layers > MAX_LAYERS_OR_HEADS
                    || m.config.n_heads > MAX_LAYERS_OR_HEADS
                    || m.config.n_layers * m.config.n_heads > MAX_LAYER_HEADS
                {
                    return Err(Error::file(
                        &dir.join(file),
                        format!(
                            "describes {} layers × {} heads, which no model has; the file is corrupt — re-run the command that made it",
                            m.config.n_layers, m.config.n_heads
                        ),
                    ));
                }
            }
        }
        if run.capture.is_none()
            && run.analysis.is_none()
            && run.stream.is_none()
            && run.quant.is_none()
            && run.needle.is_none()
            && run.press.is_none()
            && run.tasks.is_none()
        {
            if let Some(survey) = read_json::<Survey>(&dir.join(SURVEY_FILE))? {
                // The first model's run holds its report.json (so opening it cannot come back here).
                let Some(first) = survey.rows.first().filter(|r| dir.join(&r.run_dir).join(ANALYSIS_FILE).is_file()) else {
                    return Err(Error::file(&dir.join(SURVEY_FILE), "lists no model run directories; re-run `sinkscope survey`"));
                };
                let mut run = Run::open(&dir.join(&first.run_dir))?;
                run.survey = Some(survey);
                run.survey_dir = Some(dir.to_path_buf());
                return Ok(run);
            }
            return Err(Error::file(dir, format!("holds no sinkscope results (none of {CAPTURE_FILE}, {ANALYSIS_FILE}, {STREAM_FILE}, {QUANT_FILE}, {NEEDLE_FILE}, {PRESS_FILE}, {TASKS_FILE}); run `sinkscope demo` or `capture`/`analyze`/`recommend`/`quant`/`needle`/`press`/`tasks` with -o first")));
        }
        check_ranges(&run, dir)?;
        if let (Some(maps), Some(tokens)) = (&run.heatmaps, run.tokens()) {
            if maps.n_tokens != tokens.len() {
                return Err(Error::file(
                    &heatmaps_path,
                    format!("covers {} tokens but the run has {}; re-run the capture", maps.n_tokens, tokens.len()),
                ));
            }
        }
        Ok(run)
    }

    pub fn model(&self) -> &ModelInfo {
        [
            self.capture.as_ref().map(|c| &c.model),
            self.analysis.as_ref().map(|a| &a.model),
            self.stream.as_ref().map(|s| &s.model),
            self.quant.as_ref().map(|q| &q.model),
            self.needle.as_ref().map(|n| &n.model),
            self.press.as_ref().map(|p| &p.model),
            self.tasks.as_ref().map(|t| &t.model),
        ]
        .into_iter()
        .flatten()
        .next()
        .expect("Run::open requires one of the reports")
    }

    /// The sinkscope version that wrote the run (its first report's).
    pub fn sinkscope_version(&self) -> &str {
        [
            self.capture.as_ref().map(|c| &c.sinkscope_version),
            self.analysis.as_ref().map(|a| &a.sinkscope_version),
            self.stream.as_ref().map(|s| &s.sinkscope_version),
            self.quant.as_ref().map(|q| &q.sinkscope_version),
            self.needle.as_ref().map(|n| &n.sinkscope_version),
            self.press.as_ref().map(|p| &p.sinkscope_version),
            self.tasks.as_ref().map(|t| &t.sinkscope_version),
        ]
        .into_iter()
        .flatten()
        .next()
        .map_or("", String::as_str)
    }

    /// α_k per [layer][head] on the captured text (capture.json).
    pub fn capture_alphas(&self) -> Option<Alphas> {
        let c = self.capture.as_ref()?;
        Some(self.by_head(c.summary.heads.iter().map(|h| (h.layer, h.head, &h.alpha))))
    }

    /// α_k per [layer][head] of the analysis: the mean over its probes (none without heads).
    pub fn analysis_alphas(&self) -> Option<Alphas> {
        let a = self.analysis.as_ref().filter(|a| !a.heads.is_empty())?;
        Some(self.by_head(a.heads.iter().map(|h| (h.layer, h.head, &h.alpha))))
    }

    /// A [layer][head] table sized by the model; heads outside it are ignored.
    fn by_head<'a>(&self, heads: impl Iterator<Item = (usize, usize, &'a Vec<f64>)>) -> Alphas {
        let m = self.model();
        let mut table = vec![vec![Vec::new(); m.config.n_heads]; m.config.n_layers];
        for (layer, head, alpha) in heads {
            if let Some(slot) = table.get_mut(layer).and_then(|row| row.get_mut(head)) {
                *slot = alpha.clone();
            }
        }
        table
    }

    /// The model's display name ([`ModelInfo::display_name`]).
    pub fn model_name(&self) -> String {
        self.model().display_name()
    }

    /// The tokens the heatmaps and per-position arrays are indexed by: the capture's text, else the
    /// analysis's first probe.
    pub fn tokens(&self) -> Option<&[TokenInfo]> {
        if let Some(c) = &self.capture {
            return Some(&c.tokens);
        }
        self.analysis.as_ref().and_then(|a| a.probes.first()).map(|p| p.tokens.as_slice())
    }

    /// Whether the tokens are GPT-2-style byte-level pieces (decoded for display).
    pub fn byte_level(&self) -> bool {
        self.tokens().is_some_and(|t| is_byte_level(&t.iter().map(|t| t.piece.as_str()).collect::<Vec<_>>()))
    }

    /// Name of the text the heatmaps belong to.
    pub fn text_name(&self) -> String {
        match (&self.capture, &self.analysis) {
            (Some(c), _) => c.text_source.clone(),
            (_, Some(a)) => a.probes.first().map_or("-".into(), |p| format!("probe {}", p.name)),
            _ => "-".into(),
        }
    }

    /// The run's id: its directory name.
    pub fn id(&self) -> String {
        self.dir.file_name().map_or("run".into(), |n| n.to_string_lossy().into_owned())
    }
}

// Records are checked on reading back, before anything is shown, exported or merged from them:
// each value that has a range (a perplexity is at least 1, attention shares lie in [0, 1],
// Sink_k^ε in [0, 100]) must lie in it, or the file is refused by name — a `capture.json` edited
// to perplexity −5 or an α of 7.5 is never published (`export`, `dash` and the Python package's
// `read_run` all open runs here).

/// Floating-point slack on a share's bounds (sums of weights land a few ulps past 1).
const SLACK: f64 = 1e-6;

/// Perplexities are at least 1; shares (of attention, of trials) lie in [0, 1].
const PERPLEXITY: (f64, f64) = (1.0, f64::INFINITY);
const SHARE: (f64, f64) = (0.0, 1.0);
/// A negative log-likelihood (or a KL divergence) is at least 0.
const NLL: (f64, f64) = (0.0, f64::INFINITY);

/// Refuses the first value of `run`'s records outside its range.
fn check_ranges(run: &Run, dir: &Path) -> Result<()> {
    if let Some(c) = &run.capture {
        if let Some(n) = &c.nll {
            within(dir, CAPTURE_FILE, n.perplexity, PERPLEXITY, || "nll.perplexity".into())?;
        }
        for h in &c.summary.heads {
            let at = || format!("layer {} head {}", h.layer, h.head);
            for (k, &a) in h.alpha.iter().enumerate() {
                within(dir, CAPTURE_FILE, a, SHARE, || format!("α_{k} of {}", at()))?;
            }
            within(dir, CAPTURE_FILE, h.prev_token_mass, SHARE, || format!("prev_token_mass of {}", at()))?;
            within(dir, CAPTURE_FILE, h.self_mass, SHARE, || format!("self_mass of {}", at()))?;
        }
    }
    if let Some(a) = &run.analysis {
        within(dir, ANALYSIS_FILE, a.f_attn, SHARE, || "f_attn".into())?;
        for (k, &v) in &a.sink_score {
            within(dir, ANALYSIS_FILE, v, (0.0, 100.0), || format!("sink_score[{k}]"))?;
        }
        for h in &a.heads {
            for (k, &v) in h.alpha.iter().enumerate() {
                within(dir, ANALYSIS_FILE, v, SHARE, || format!("α_{k} of layer {} head {}", h.layer, h.head))?;
            }
        }
    }
    if let Some(s) = &run.stream {
        for o in &s.outcomes {
            within(dir, STREAM_FILE, o.ppl, PERPLEXITY, || format!("ppl of {}", o.label))?;
        }
        for (t, &kl) in s.kl_from_exact.iter().flatten().enumerate() {
            within(dir, STREAM_FILE, kl, NLL, || format!("kl_from_exact[{t}]"))?;
        }
        for h in s.cache_error_by_head.iter().flat_map(|c| &c.heads) {
            let at = |what: &str| format!("cache_error_by_head: {what} of layer {} head {}", h.layer, h.head);
            within(dir, STREAM_FILE, h.sink_mass_exact, SHARE, || at("sink_mass_exact"))?;
            within(dir, STREAM_FILE, h.sink_mass_rounded, SHARE, || at("sink_mass_rounded"))?;
        }
    }
    if let Some(q) = &run.quant {
        within(dir, QUANT_FILE, q.baseline.ppl, PERPLEXITY, || "baseline.ppl".into())?;
        for c in &q.cases {
            within(dir, QUANT_FILE, c.nll.ppl, PERPLEXITY, || format!("nll.ppl of {}", c.label))?;
        }
    }
    if let Some(n) = &run.needle {
        check_needle_ranges(n, dir)?;
    }
    if let Some(p) = &run.press {
        p.check()
            .map_err(|why| Error::file(&dir.join(PRESS_FILE), format!("{why}; the file is corrupt or was edited — re-run `sinkscope press`")))?;
    }
    if let Some(t) = &run.tasks {
        t.check()
            .map_err(|why| Error::file(&dir.join(TASKS_FILE), format!("{why}; the file is corrupt or was edited — re-run `sinkscope tasks`")))?;
    }
    Ok(())
}

/// A needle sweep's shares, ranks and answer NLLs.
fn check_needle_ranges(n: &crate::analysis::needle::NeedleReport, dir: &Path) -> Result<()> {
    for (i, t) in n.trials.iter().enumerate() {
        let at = |what: &str| format!("trials[{i}].{what}");
        for (what, v) in [("depth", t.depth), ("depth_actual", t.depth_actual), ("needle_kept", t.needle_kept)] {
            within(dir, NEEDLE_FILE, v, SHARE, || at(what))?;
        }
        within(dir, NEEDLE_FILE, t.answer_nll, NLL, || at("answer_nll"))?;
        within(dir, NEEDLE_FILE, t.kl_from_exact.unwrap_or(0.0), NLL, || at("kl_from_exact"))?;
        within(dir, NEEDLE_FILE, t.rank as f64, (1.0, t.candidates as f64), || at("rank"))?;
    }
    for (i, c) in n.cells.iter().enumerate() {
        let at = |what: &str| format!("cells[{i}].{what}");
        let shares = [("depth", c.depth), ("rank_accuracy", c.rank_accuracy), ("exact_accuracy", c.exact_accuracy), ("needle_kept", c.needle_kept)];
        for (what, v) in shares.into_iter().chain(c.rank_ci.map(|v| ("rank_ci", v))).chain(c.exact_ci.map(|v| ("exact_ci", v))) {
            within(dir, NEEDLE_FILE, v, SHARE, || at(what))?;
        }
        within(dir, NEEDLE_FILE, c.mean_rank, (1.0, f64::INFINITY), || at("mean_rank"))?;
        within(dir, NEEDLE_FILE, c.answer_nll, NLL, || at("answer_nll"))?;
    }
    Ok(())
}

/// Refuses `file` when `value` lies outside `range`, naming it as `what` says (built only then:
/// a run is opened with thousands of values to check). NaN stands for "not measured" in these
/// records (JSON null: a stream too short to score).
fn within(dir: &Path, file: &str, value: f64, (lo, hi): (f64, f64), what: impl FnOnce() -> String) -> Result<()> {
    if value.is_nan() || (lo - SLACK..=hi + SLACK).contains(&value) {
        return Ok(());
    }
    Err(Error::file(
        &dir.join(file),
        format!("holds {} = {value}, outside [{lo}, {hi}]; the file is corrupt or was edited — re-run the command that made it", what()),
    ))
}
