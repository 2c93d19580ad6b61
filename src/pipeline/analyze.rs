//! Analyze into a run: build the probes (a probe set, or one text), capture and reduce each, run
//! the causal sweep, aggregate the diagnosis, and write `report.json` and the first probe's
//! heatmaps (unless a capture in the same directory owns them).

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::progress::Progress;
use crate::analysis::{aggregate, analyze_probe, AblationSummary, AnalysisReport, AnalysisSettings, ProbeCapture};
use crate::capture::ablation::{run_ablation, AblationPlan};
use crate::capture::heatmaps::Heatmaps;
use crate::capture::run::{capture, CaptureOptions};
use crate::error::{Error, Result};
use crate::io::staging::Staging;
use crate::io::write_json_atomic;
use crate::model::load::LoadedModel;
use crate::probe::{BuiltProbe, ProbeSet};
use crate::report::run::{ANALYSIS_FILE, CAPTURE_FILE, HEATMAPS_FILE};

/// What `analyze` measures and how.
#[derive(Debug, Clone)]
pub struct AnalyzeOptions {
    /// The text analyzed as one probe (and for the causal sweep), with its contents.
    pub file: Option<(PathBuf, String)>,
    /// Keep only the first T tokens of `file`.
    pub max_tokens: Option<usize>,
    /// ε of Sink_k^ε and sink-position discovery.
    pub epsilon: f64,
    /// α_k is reported for k < K.
    pub first_keys: usize,
    /// Key positions hidden in the causal sweep (default: the probe set's, or 0–3 for a file).
    pub ablate_keys: Option<Vec<usize>>,
    /// Tokens of the sweep's text at most.
    pub ablation_tokens: usize,
    /// Run the causal sweep.
    pub ablation: bool,
    /// Pool the first probe's maps onto at most N×N bins (0 = none).
    pub heatmap_bins: usize,
}

impl Default for AnalyzeOptions {
    fn default() -> Self {
        AnalyzeOptions {
            file: None,
            max_tokens: None,
            epsilon: 0.3,
            first_keys: 16,
            ablate_keys: None,
            ablation_tokens: 256,
            ablation: true,
            heatmap_bins: 128,
        }
    }
}

impl AnalyzeOptions {
    /// Refuses settings no analysis can use.
    pub fn validate(&self) -> Result<()> {
        if !(self.epsilon > 0.0 && self.epsilon < 1.0) {
            return Err(Error::input("--epsilon must be between 0 and 1"));
        }
        Ok(())
    }
}

/// Builds the probes, analyzes them, and writes report.json (and the first probe's heatmaps) into `out`.
pub fn analyze_into(
    lm: &mut LoadedModel,
    opts: &AnalyzeOptions,
    set: Option<&ProbeSet>,
    out: &Path,
    progress: &mut dyn Progress,
) -> Result<AnalysisReport> {
    opts.validate()?;
    let mut probes: Vec<BuiltProbe> = Vec::new();
    let mut skipped = Vec::new();
    let mut ablation_input: Option<(Vec<u32>, Vec<usize>)> = None;
    if let Some((path, text)) = &opts.file {
        let (ids, _) = lm.tokenize_within_context(text, opts.max_tokens)?;
        let name = path.file_name().map_or("file".into(), |n| n.to_string_lossy().into_owned());
        ablation_input = Some((ids[..ids.len().min(opts.ablation_tokens.max(2))].to_vec(), vec![0, 1, 2, 3]));
        probes.push(BuiltProbe {
            name,
            kind: "file".into(),
            bos: lm.tokenizer.bos().is_some_and(|b| ids.first() == Some(&b)),
            ids,
            replaced: vec![],
        });
    }
    if let Some(set) = set {
        probes.extend(set.build(&lm.tokenizer)?);
        skipped = set.skipped(&lm.tokenizer);
        if ablation_input.is_none() {
            ablation_input = set.build_ablation(&lm.tokenizer)?.map(|(mut ids, keys)| {
                ids.truncate(opts.ablation_tokens.max(2));
                (ids, keys)
            });
        }
    }
    let context = lm.model.cfg.context_len;
    if let Some(p) = probes.iter().find(|p| p.ids.len() > context) {
        return Err(Error::input(format!("probe {} has {} tokens, more than the model's context of {context}", p.name, p.ids.len())));
    }
    super::claim_out(lm, Some(out))?;
    let (mut report, heatmaps) = analyze(lm, opts, &probes, ablation_input, progress)?;
    report.skipped_probes = skipped;
    let stage = Staging::begin(out)?;
    // A capture in the same run directory owns heatmaps.safetensors (its tokens index them).
    let captured = out.join(CAPTURE_FILE).exists();
    if let Some(maps) = heatmaps.filter(|_| !captured) {
        let meta = [("model".to_string(), lm.info.source.clone()), ("probe".to_string(), probes[0].name.clone())].into_iter().collect();
        maps.save(&stage.path(HEATMAPS_FILE)?, meta)?;
    }
    write_json_atomic(&stage.path(ANALYSIS_FILE)?, &report)?;
    stage.commit()?;
    Ok(report)
}

fn analyze(
    lm: &LoadedModel,
    opts: &AnalyzeOptions,
    probes: &[BuiltProbe],
    ablation_input: Option<(Vec<u32>, Vec<usize>)>,
    progress: &mut dyn Progress,
) -> Result<(AnalysisReport, Option<Heatmaps>)> {
    let start = Instant::now();
    let settings = AnalysisSettings { epsilon: opts.epsilon, first_keys: opts.first_keys.max(1), ..AnalysisSettings::default() };
    let mut reports = Vec::with_capacity(probes.len());
    let mut heatmaps = None;
    for (i, probe) in probes.iter().enumerate() {
        progress.status(&format!("probe {}/{}: {} ({} tokens)", i + 1, probes.len(), probe.name, probe.ids.len()));
        // The first probe's attention maps are kept for the figures and the dashboard.
        let heatmap_bins = (i == 0 && opts.heatmap_bins > 0).then_some(opts.heatmap_bins);
        let capture_opts = CaptureOptions {
            first_keys: settings.first_keys,
            weight_bytes: lm.weight_bytes(),
            quant_risk: true,
            heatmap_bins,
            ..CaptureOptions::default()
        };
        let mut out = capture(&lm.model, &probe.ids, &capture_opts)?;
        if i == 0 {
            heatmaps = out.heatmaps.take();
        }
        let pieces = probe.ids.iter().map(|&id| lm.tokenizer.token_str(id)).collect();
        let quant_risk = out.reducers.quant.layers.clone();
        reports.push(analyze_probe(&ProbeCapture { probe, pieces, reducers: &out.reducers, quant_risk, nll: out.nll }, &settings));
    }
    let ablation = match ablation_input.filter(|_| opts.ablation) {
        Some((ids, set_keys)) => {
            let keys = opts.ablate_keys.clone().unwrap_or(set_keys);
            let t0 = Instant::now();
            let plan = AblationPlan { keys: keys.clone(), per_head: true, per_layer: true };
            let results = run_ablation(&lm.model, &ids, &plan, &mut |done, total| {
                if done % 10 == 0 || done == total {
                    progress.status(&format!("causal sweep: {done}/{total} masked variants"));
                }
            })?;
            let mut top_heads: Vec<_> = results.iter().filter(|r| r.head.is_some()).cloned().collect();
            top_heads.sort_by(|a, b| b.delta_nll.total_cmp(&a.delta_nll));
            top_heads.truncate(10);
            Some(AblationSummary { n_tokens: ids.len(), keys, wall_seconds: t0.elapsed().as_secs_f64(), results, top_heads })
        }
        None => None,
    };
    progress.status("");
    Ok((aggregate(lm.info.clone(), settings, reports, ablation, start.elapsed().as_secs_f64()), heatmaps))
}
