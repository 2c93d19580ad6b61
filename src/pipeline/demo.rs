//! Bundles of jobs into one run directory: the demo (capture of a default text with heatmaps, the
//! probe-set diagnosis with a light causal sweep, a sink-count sweep on a longer text, then the
//! Parquet tables, figures and index.md), and the dashboard's capture + analysis of one text.

use std::path::{Path, PathBuf};

use super::analyze::{analyze_into, AnalyzeOptions};
use super::capture::capture_to_dir;
use super::progress::{Finished, Progress};
use super::stream::{sink_sweep, sweep_into, StreamSource, SweepOptions};
use crate::capture::run::CaptureOptions;
use crate::error::Result;
use crate::io::write_atomic;
use crate::kv::policy::{Eviction, Policy, PositionMode};
use crate::model::load::LoadedModel;
use crate::probe::ProbeSet;
use crate::report::bundle::{ExportOptions, INDEX_FILE};
use crate::report::export::export;
use crate::report::run::{Run, ANALYSIS_FILE, STREAM_FILE};

/// A public-domain passage (the opening of Pride and Prejudice, Project Gutenberg #1342).
pub const DEMO_TEXT: &str = include_str!("../../probes/texts/demo.txt");

/// Chapters I–III of Pride and Prejudice (public domain), for the streaming sweep; the demo
/// writes it into the run directory so the run records its own input.
pub const STREAM_TEXT: &str = include_str!("../../probes/texts/stream.txt");

/// The sweep's text, written into the run directory.
const STREAM_TEXT_FILE: &str = "stream-text.txt";

/// What the demo runs.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Only the capture and its table: no diagnosis, no streaming.
    pub quick: bool,
    /// Tokens streamed in the sink-count sweep.
    pub stream_tokens: usize,
    /// Cache budget W of the sweep.
    pub cache: usize,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions { quick: false, stream_tokens: 768, cache: 128 }
    }
}

/// Runs the demo into `out` and returns the path of its index.md; each stage's result goes to
/// `progress` as it finishes.
pub fn run_demo(lm: &mut LoadedModel, opts: &DemoOptions, out: &Path, progress: &mut dyn Progress) -> Result<PathBuf> {
    super::claim_out(lm, Some(out))?;
    // A fresh bundle: files of an earlier demo (other heads' figures, a stale stream.json) go.
    for stale in ["figures", "tables"] {
        let _ = std::fs::remove_dir_all(out.join(stale));
    }
    let capture_opts = CaptureOptions { weight_bytes: lm.weight_bytes(), ..CaptureOptions::default() };
    progress.stage("[1/4] capture of the demo text");
    let report = capture_to_dir(lm, DEMO_TEXT, "built-in demo text (Pride and Prejudice, opening)", None, &capture_opts, out, None)?;
    progress.finished(Finished::Capture(&report));
    if !opts.quick {
        progress.stage("[2/4] sink diagnosis over the default probes, causal sweep on key 0");
        let analyze = AnalyzeOptions { ablate_keys: Some(vec![0]), ablation_tokens: 96, heatmap_bins: 0, ..AnalyzeOptions::default() };
        let analysis = analyze_into(lm, &analyze, Some(&ProbeSet::load("default")?), out, progress)?;
        progress.finished(Finished::Analysis(&analysis));
        progress.stage(&format!("[3/4] sink-count sweep: {} tokens at W = {}", opts.stream_tokens, opts.cache));
        let text = out.join(STREAM_TEXT_FILE);
        write_atomic(&text, STREAM_TEXT.as_bytes())?;
        let source = StreamSource { file: text, start_char: 0, tokens: opts.stream_tokens, token_by_token: false, token_ids: false, inline: false };
        let sweep = SweepOptions {
            recompute: Some(Policy::new(Eviction::Recompute, opts.cache, PositionMode::Slot)),
            ..sink_sweep(source, &[0, 1, 2, 4, 8], opts.cache)?
        };
        let rec = sweep_into(lm, &sweep, Some(out), progress)?;
        progress.finished(Finished::Sweep(&rec));
    } else {
        let _ = std::fs::remove_file(out.join(ANALYSIS_FILE));
        let _ = std::fs::remove_file(out.join(STREAM_FILE));
        let _ = std::fs::remove_file(out.join(STREAM_TEXT_FILE));
    }
    progress.stage("[4/4] tables, figures and report");
    let run = Run::open(out)?;
    let all = ExportOptions {
        parquet: cfg!(feature = "parquet"),
        png: cfg!(feature = "plots"),
        svg: cfg!(feature = "plots"),
        md: true,
        heads: None,
        grid_keys: None,
    };
    let done = export(&run, &all)?;
    progress.finished(Finished::Export(&done));
    Ok(out.join(INDEX_FILE))
}

/// Captures and analyzes the text of `file` into `out` (what `dash -f` opens).
pub fn capture_and_analyze(
    lm: &mut LoadedModel,
    file: &Path,
    text: &str,
    max_tokens: Option<usize>,
    ablation: bool,
    out: &Path,
    progress: &mut dyn Progress,
) -> Result<()> {
    super::claim_out(lm, Some(out))?;
    progress.stage(&format!("capturing {} …", file.display()));
    let capture_opts = CaptureOptions { weight_bytes: lm.weight_bytes(), ..CaptureOptions::default() };
    capture_to_dir(lm, text, &file.display().to_string(), max_tokens, &capture_opts, out, None)?;
    progress.stage(&format!("analyzing{} …", if ablation { " (with the causal sweep; --no-ablation skips it)" } else { "" }));
    // The capture already wrote this text's heatmaps.
    let analyze =
        AnalyzeOptions { file: Some((file.to_path_buf(), text.to_string())), max_tokens, ablation, heatmap_bins: 0, ..AnalyzeOptions::default() };
    analyze_into(lm, &analyze, None, out, progress)?;
    Ok(())
}
