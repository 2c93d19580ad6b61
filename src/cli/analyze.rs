//! `sinkscope analyze`: run the probes (or one text), reduce each, and write the diagnosis —
//! sink positions, Sink_k^ε, F-Attn, massive activations, head classes, causal head dependency,
//! quantization risk — as `report.json`.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;

use super::capture::{create_out_dir, prepare_out_dir, weight_bytes};
use super::text::{read_input, tokenize_within_context};
use super::ModelArgs;
use crate::analysis::{aggregate, analyze_probe, AblationSummary, AnalysisReport, AnalysisSettings, ProbeCapture};
use crate::capture::ablation::{run_ablation, AblationPlan};
use crate::capture::run::{capture, CaptureOptions};
use crate::error::{Error, Result};
use crate::model::LoadedModel;
use crate::probe::{BuiltProbe, ProbeSet};
use crate::report::heatmaps::Heatmaps;
use crate::report::run::{ANALYSIS_FILE, HEATMAPS_FILE};
use crate::report::write_json_atomic;

#[derive(Args, Debug)]
pub struct AnalyzeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Probe set: `default` (built in; see probes/default.toml) or a TOML file. With -f and no
    /// --probes, only the file is analyzed.
    #[arg(long)]
    pub probes: Option<String>,
    /// Analyze exactly this text file (as one probe, and for the causal sweep).
    #[arg(short = 'f', long)]
    pub file: Option<PathBuf>,
    /// Keep only the first T tokens of -f.
    #[arg(long)]
    pub max_tokens: Option<usize>,
    /// Output directory for report.json.
    #[arg(short = 'o', long)]
    pub out: PathBuf,
    /// ε for Sink_k^ε and sink-position discovery.
    #[arg(long, default_value_t = 0.3)]
    pub epsilon: f64,
    /// Report α_k for k < K.
    #[arg(long, default_value_t = 16)]
    pub first_keys: usize,
    /// Key positions hidden in the causal sweep (default: the probe set's, 0,1,2,3).
    #[arg(long, value_delimiter = ',')]
    pub ablate_keys: Option<Vec<usize>>,
    /// Tokens used for the causal sweep (of -f, or at most this many of the probe set's text).
    #[arg(long, default_value_t = 256)]
    pub ablation_tokens: usize,
    /// Skip the causal sweep.
    #[arg(long)]
    pub no_ablation: bool,
    /// Keep the first probe's attention maps pooled onto at most N×N bins (0 = none; never
    /// written over the heatmaps of a capture in the same directory).
    #[arg(long, default_value_t = 128)]
    pub heatmap_bins: usize,
    /// Print report.json to stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: AnalyzeArgs) -> Result<()> {
    if !(args.epsilon > 0.0 && args.epsilon < 1.0) {
        return Err(Error::input("--epsilon must be between 0 and 1"));
    }
    prepare_out_dir(&args.out)?;
    let file_text = match &args.file {
        Some(f) => Some(read_input(None, Some(f))?.0),
        None => None,
    };
    let set = match (&args.probes, &file_text) {
        (Some(name), _) => Some(ProbeSet::load(name)?),
        (None, None) => Some(ProbeSet::load("default")?),
        (None, Some(_)) => None,
    };
    let mut lm = args.model.load()?;
    let report = analyze_into(&mut lm, &args, file_text, set)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", format_summary(&report));
        println!("report: {}", args.out.join(ANALYSIS_FILE).display());
    }
    Ok(())
}

/// Builds the probes, analyzes them, and writes report.json and the first probe's heatmaps into
/// `args.out`.
pub fn analyze_into(lm: &mut LoadedModel, args: &AnalyzeArgs, file_text: Option<String>, set: Option<ProbeSet>) -> Result<AnalysisReport> {
    let mut probes: Vec<BuiltProbe> = Vec::new();
    let mut ablation_input: Option<(Vec<u32>, Vec<usize>)> = None;
    if let (Some(text), Some(path)) = (&file_text, &args.file) {
        let (ids, _) = tokenize_within_context(&lm, text, args.max_tokens)?;
        let name = path.file_name().map_or("file".into(), |n| n.to_string_lossy().into_owned());
        ablation_input = Some((ids[..ids.len().min(args.ablation_tokens.max(2))].to_vec(), vec![0, 1, 2, 3]));
        probes.push(BuiltProbe { name, kind: "file".into(), bos: lm.tokenizer.bos().is_some_and(|b| ids.first() == Some(&b)), ids, replaced: vec![] });
    }
    if let Some(set) = &set {
        probes.extend(set.build(&lm.tokenizer)?);
        if ablation_input.is_none() {
            ablation_input = set.build_ablation(&lm.tokenizer)?.map(|(mut ids, keys)| {
                ids.truncate(args.ablation_tokens.max(2));
                (ids, keys)
            });
        }
    }
    let context = lm.model.cfg.context_len;
    if let Some(p) = probes.iter().find(|p| p.ids.len() > context) {
        return Err(Error::input(format!("probe {} has {} tokens, more than the model's context of {context}", p.name, p.ids.len())));
    }
    lm.fingerprint()?;
    let (report, heatmaps) = analyze(lm, args, &probes, ablation_input)?;
    create_out_dir(&args.out)?;
    // A capture in the same run directory owns heatmaps.safetensors (its tokens index them).
    let captured = args.out.join(crate::report::run::CAPTURE_FILE).exists();
    if let Some(maps) = heatmaps.filter(|_| !captured) {
        let meta = [("model".to_string(), lm.info.source.clone()), ("probe".to_string(), probes[0].name.clone())].into_iter().collect();
        maps.save(&args.out.join(HEATMAPS_FILE), meta)?;
    }
    write_json_atomic(&args.out.join(ANALYSIS_FILE), &report)?;
    Ok(report)
}

fn analyze(lm: &LoadedModel, args: &AnalyzeArgs, probes: &[BuiltProbe], ablation_input: Option<(Vec<u32>, Vec<usize>)>) -> Result<(AnalysisReport, Option<Heatmaps>)> {
    let start = Instant::now();
    let settings = AnalysisSettings { epsilon: args.epsilon, first_keys: args.first_keys.max(1), ..AnalysisSettings::default() };
    let mut reports = Vec::with_capacity(probes.len());
    let mut heatmaps = None;
    for (i, probe) in probes.iter().enumerate() {
        status(&format!("probe {}/{}: {} ({} tokens)", i + 1, probes.len(), probe.name, probe.ids.len()));
        // The first probe's attention maps are kept for the figures and the dashboard.
        let heatmap_bins = (i == 0 && args.heatmap_bins > 0).then_some(args.heatmap_bins);
        let opts = CaptureOptions { first_keys: settings.first_keys, top_k: 16, save: None, memory_limit: None, weight_bytes: weight_bytes(lm), score: true, quant_risk: true, heatmap_bins };
        let mut out = capture(&lm.model, &probe.ids, &opts)?;
        if i == 0 {
            heatmaps = out.heatmaps.take();
        }
        let pieces = probe.ids.iter().map(|&id| lm.tokenizer.token_str(id)).collect();
        let quant_risk = out.reducers.quant.layers.clone();
        reports.push(analyze_probe(&ProbeCapture { probe, pieces, reducers: &out.reducers, quant_risk, nll: out.nll }, &settings));
    }
    let ablation = match ablation_input.filter(|_| !args.no_ablation) {
        Some((ids, set_keys)) => {
            let keys = args.ablate_keys.clone().unwrap_or(set_keys);
            let t0 = Instant::now();
            let plan = AblationPlan { keys: keys.clone(), per_head: true, per_layer: true };
            let results = run_ablation(&lm.model, &ids, &plan, &mut |done, total| {
                if done % 10 == 0 || done == total {
                    status(&format!("causal sweep: {done}/{total} masked variants"));
                }
            })?;
            let mut top_heads: Vec<_> = results.iter().filter(|r| r.head.is_some()).cloned().collect();
            top_heads.sort_by(|a, b| b.delta_nll.total_cmp(&a.delta_nll));
            top_heads.truncate(10);
            Some(AblationSummary { n_tokens: ids.len(), keys, wall_seconds: t0.elapsed().as_secs_f64(), results, top_heads })
        }
        None => None,
    };
    status("");
    Ok((aggregate(lm.info.clone(), settings, reports, ablation, start.elapsed().as_secs_f64()), heatmaps))
}

/// One progress line on stderr, overwritten in place on a terminal; silent otherwise.
fn status(msg: &str) {
    let mut err = std::io::stderr();
    if err.is_terminal() {
        let _ = write!(err, "\r\x1b[2K{msg}");
        let _ = err.flush();
    }
}

pub fn format_summary(r: &AnalysisReport) -> String {
    let name = r.model.name.clone().unwrap_or_else(|| r.model.source.clone());
    let mut s = format!("sinkscope analyze — {name}: {} probes, ε = {}\n\n", r.probes.len(), r.settings.epsilon);
    s.push_str(&format!("sink positions: {:?}\n", r.sink_positions));
    let ts: Vec<String> = r.probes.iter().map(|p| p.n_tokens.to_string()).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    s.push_str(&format!("Sink_k^ε (% of probe·layer·head with α_k > ε; T = {}):", ts.join("/")));
    for k in 0..r.sink_score.len().min(8) {
        s.push_str(&format!("  k={k}: {:.1}", r.sink_score[&k]));
    }
    s.push_str(&format!("\nF-Attn (mean attention on position 0): {:.3}\n", r.f_attn));
    match r.massive.first_layer {
        Some(l) => s.push_str(&format!(
            "massive activations: from layer {l}, dims {:?}, positions {:?}\n",
            &r.massive.dims[..r.massive.dims.len().min(8)],
            &r.massive.positions[..r.massive.positions.len().min(8)]
        )),
        None => s.push_str("massive activations: none (no |h| > 100 and ≥ 1000× the layer median)\n"),
    }
    let mut counts = std::collections::BTreeMap::new();
    for h in &r.heads {
        *counts.entry(h.class.to_string()).or_insert(0) += 1;
    }
    s.push_str(&format!("head classes: {}\n", counts.iter().map(|(c, n)| format!("{c} {n}")).collect::<Vec<_>>().join(", ")));
    s.push_str("\nper probe:  name                    T   F-Attn  sinks        perplexity\n");
    for p in &r.probes {
        let sinks: Vec<usize> = p.sink_positions.iter().map(|s| s.pos).take(4).collect();
        let ppl = p.nll.as_ref().map_or("-".into(), |n| format!("{:.2}", n.perplexity));
        s.push_str(&format!("            {:<22} {:>4}  {:>6.3}  {:<12} {ppl}\n", p.name, p.n_tokens, p.f_attn, format!("{sinks:?}")));
    }
    if let Some(a) = &r.ablation {
        s.push_str(&format!("\ncausal dependency ({} tokens, keys {:?}, {:.0}s): heads whose masking hurts most\n", a.n_tokens, a.keys, a.wall_seconds));
        for t in &a.top_heads {
            s.push_str(&format!("  L{}H{} without key {}: ΔNLL {:+.4} nats, KL {:.4}\n", t.layer, t.head.unwrap_or(0), t.key_pos, t.delta_nll, t.kl));
        }
    }
    s
}
