//! `needle` as a job: pass-key prompts at each length and depth streamed through each policy's
//! cache and scored (`kv::retrieval`), each (policy, length) saved as a part as soon as it is done
//! (a rerun with the same model and settings resumes from them), then the findings
//! (`analysis::needle`) — needle.json, the Parquet tables `needle` and `needle_trials`, the
//! heatmaps and the accuracy-by-distance figure — landing together.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::needle_heads::{measure_heads, per_head_arms, Arm, HeadsOptions};
use super::progress::Progress;
use crate::analysis::needle::{cells, NeedlePolicy, NeedleReport, NeedleSettings, NeedleTrial};
use crate::error::{Error, Result};
use crate::io::staging::Staging;
use crate::io::text::read_text_file;
use crate::io::{write_atomic, write_json_atomic, write_part_json};
use crate::kv::memory::check_fits;
use crate::kv::policy::{Eviction, Policy};
use crate::kv::retrieval::arms::sweep;
use crate::kv::retrieval::haystack::{draw_trials, Haystack, Trial, REPEATED_FILLER};
use crate::kv::retrieval::{compression_applies, sweep_against_exact, sweep_from, CacheStream, Compression};
use crate::kv::simulate::refuse_unmodelled_rounding;
use crate::model::cache_rounding::CacheRounding;
use crate::model::fit::available_memory;
use crate::model::load::LoadedModel;

pub use crate::report::run::NEEDLE_FILE;
pub const NEEDLE_MD: &str = "needle.md";
/// Where finished (policy, length) parts wait for the rest of a sweep.
pub const PARTS_DIR: &str = "needle-parts";
/// Bytes of a filler book read per token wanted (English runs ~4–5 bytes a token).
const FILLER_BYTES_PER_TOKEN: usize = 16;

#[derive(Debug, Clone)]
pub struct NeedleOptions {
    /// The filler's text file (`None`: the repeated sentences).
    pub filler: Option<PathBuf>,
    pub lengths: Vec<usize>,
    pub depths: Vec<f64>,
    /// Each policy with when it compresses the prompt.
    pub policies: Vec<(Policy, Compression)>,
    pub trials: usize,
    pub distractors: usize,
    pub seed: u64,
    /// Measure which heads retrieve and run the per-head arms.
    pub retrieval_heads: Option<HeadsOptions>,
    /// The cache's storage formats (exact by default), for the streamed positional arms.
    pub rounding: CacheRounding,
}

/// The parts' format: a part of another format is run again (format 2 records each trial's budget).
const PART_FORMAT: u32 = 2;

/// One finished (policy, length): what a resumed sweep reuses.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Part {
    #[serde(default)]
    format: u32,
    model_sha256: String,
    settings: NeedleSettings,
    policy: String,
    length: usize,
    trials: Vec<NeedleTrial>,
    tokens_run: usize,
    tokens_separate: usize,
    seconds: f64,
}

/// Runs the sweep into `out` (created if missing; parts an earlier run there made with the same
/// model and prompts are reused, whatever its other lengths and policies).
pub fn needle_into(lm: &mut LoadedModel, opts: &NeedleOptions, out: &Path, progress: &mut dyn Progress) -> Result<NeedleReport> {
    let start = Instant::now();
    check(opts)?;
    // The formats, and each arm's policy under them (KIVI: dense, window and sink at original
    // positions only); the retrieval heads' arms are score-based caches.
    let policies: Vec<Policy> = opts.policies.iter().map(|(p, _)| *p).collect();
    refuse_unmodelled_rounding(&lm.model, &policies, opts.rounding)?;
    if opts.retrieval_heads.is_some() {
        opts.rounding.refuse_kivi("needle's per-head arms (--retrieval-heads), score-based caches")?;
    }
    super::claim_out(lm, Some(out))?;
    let sha = lm.info.sha256.clone().unwrap_or_default();
    let settings = NeedleSettings {
        filler: opts.filler.as_ref().map_or("repeated".into(), |p| p.display().to_string()),
        lengths: opts.lengths.clone(),
        depths: opts.depths.clone(),
        trials: opts.trials,
        distractors: opts.distractors,
        seed: opts.seed,
        cache_rounding: (!opts.rounding.is_exact()).then_some(opts.rounding),
    };
    let longest = opts.lengths.iter().copied().max().unwrap_or(0);
    // Every refusal before any warning (printed once the first prompt is built): a refused sweep
    // prints one line.
    let mut warnings = Vec::new();
    for (p, _) in &opts.policies {
        warnings.extend(p.validate(longest, lm.model.cfg.context_len)?);
        let peak = if p.eviction == Eviction::Dense { longest } else { p.cache.min(longest) };
        check_fits(&lm.model.cfg, peak, &format!("{} at {longest} tokens", p.label()), available_memory())?;
    }
    check_length_bound(longest, lm.model.cfg.context_len)?;
    let filler = match &opts.filler {
        Some(path) => read_text_file(path)?,
        None => REPEATED_FILLER.to_string(),
    };
    let trials = draw_trials(&lm.tokenizer, opts.trials, opts.distractors, opts.seed)?;
    let parts_dir = out.join(PARTS_DIR);
    // Removed again while empty if the sweep fails or is interrupted before its first part.
    crate::io::staging::create_out_dir(&parts_dir)?;
    let haystack_of = |length: usize, needle_len: usize| -> Result<Haystack> {
        Haystack::new(&lm.tokenizer, filler_for(&filler, length), length, needle_len).map_err(|e| match &opts.filler {
            Some(path) => Error::file(path, e.to_string()),
            None => e,
        })
    };
    let heads = match &opts.retrieval_heads {
        Some(h) => {
            let shortest = opts.lengths.iter().copied().min().unwrap_or(0);
            let same = |other: &NeedleSettings| same_prompts(other, &settings);
            Some(measure_heads(lm, h, &settings, &same, filler_for(&filler, longest), shortest, longest, &parts_dir, progress)?)
        }
        None => None,
    };
    let (mut all, mut tokens_run, mut tokens_separate) = (Vec::new(), 0, 0);
    let mut policies: Vec<NeedlePolicy> = Vec::new();
    for &length in &opts.lengths {
        let haystack = haystack_of(length, trials[0].needle.len())?;
        for w in warnings.drain(..) {
            progress.warning(&w);
        }
        let mut arms: Vec<Arm> = opts
            .policies
            .iter()
            .map(|&(p, compression)| Arm {
                label: label_of(p, compression),
                policy: p,
                compression,
                full_heads: None,
                budget: (p.eviction != Eviction::Dense).then_some(p.cache),
            })
            .collect();
        if let (Some(h), Some(found)) = (&opts.retrieval_heads, &heads) {
            arms.extend(per_head_arms(found, h, haystack.prompt_len(trials[0].needle.len()))?);
        }
        let parts = PartContext { opts, trials: &trials, sha: &sha, settings: &settings, dir: &parts_dir };
        for arm in &arms {
            let part = parts.part(lm, arm, &haystack, length, progress)?;
            tokens_run += part.tokens_run;
            tokens_separate += part.tokens_separate;
            add_seconds(&mut policies, arm, part.seconds);
            all.extend(part.trials);
        }
    }
    let report = NeedleReport {
        sinkscope_version: env!("CARGO_PKG_VERSION").to_string(),
        model: lm.info.clone(),
        settings,
        cells: cells(&all),
        policies,
        trials: all,
        heads,
        tokens_run,
        tokens_separate,
        wall_seconds: start.elapsed().as_secs_f64(),
    };
    write_report(&report, out)?;
    Ok(report)
}

/// What every part of one needle run shares: the options, the drawn trials, the model's hash, the
/// settings that decide the prompts, and the directory parts are kept in.
struct PartContext<'a> {
    opts: &'a NeedleOptions,
    trials: &'a [Trial],
    sha: &'a str,
    settings: &'a NeedleSettings,
    dir: &'a Path,
}

impl PartContext<'_> {
    /// `arm` at `length` tokens: the part an earlier run kept for the same model, prompts and
    /// arm, else run now and kept.
    fn part(&self, lm: &LoadedModel, arm: &Arm, haystack: &Haystack, length: usize, progress: &mut dyn Progress) -> Result<Part> {
        let label = &arm.label;
        let file = self.dir.join(format!("{}-L{length}.json", crate::report::needle::slug(label)));
        let done = std::fs::read(&file).ok().and_then(|b| serde_json::from_slice::<Part>(&b).ok()).filter(|part| {
            part.format == PART_FORMAT
                && part.model_sha256 == self.sha
                && same_prompts(&part.settings, self.settings)
                && &part.policy == label
                && part.length == length
        });
        if let Some(part) = done {
            progress.stage(&format!("{label} at {length} tokens: already done"));
            return Ok(part);
        }
        progress.stage(&format!("{label} at {length} tokens"));
        let part = run_part(lm, arm, haystack, self.opts, self.trials, self.sha, self.settings, progress)?;
        write_part_json(&file, &part)?;
        Ok(part)
    }
}

/// Adds one part's time to its arm's policy row (made on the arm's first part); a budget that
/// changes with the length is each trial's own.
fn add_seconds(policies: &mut Vec<NeedlePolicy>, arm: &Arm, seconds: f64) {
    let i = policies.iter().position(|p| p.label == arm.label).unwrap_or_else(|| {
        policies.push(NeedlePolicy { label: arm.label.clone(), policy: arm.policy, compression: arm.compression, budget: arm.budget, seconds: 0.0 });
        policies.len() - 1
    });
    if policies[i].budget != arm.budget {
        policies[i].budget = None;
    }
    policies[i].seconds += seconds;
}

/// A book's opening, enough for `length` tokens (and the same for this length whatever the other
/// lengths are, so parts stay reusable).
fn filler_for(filler: &str, length: usize) -> &str {
    let cut = (length * FILLER_BYTES_PER_TOKEN).max(4096).min(filler.len());
    &filler[..(0..=cut).rev().find(|&i| filler.is_char_boundary(i)).unwrap_or(0)]
}

/// Whether two sweeps make the same prompts at a length both run (the other lengths do not matter).
/// The longest prompt a sweep runs, in multiples of the model's trained context: a bounded cache
/// keeps memory small at any length, so without it a mistyped length streams until killed.
pub const MAX_CONTEXTS_PER_PROMPT: usize = 64;

fn check_length_bound(longest: usize, context: usize) -> Result<()> {
    let bound = MAX_CONTEXTS_PER_PROMPT.saturating_mul(context);
    if longest > bound {
        return Err(Error::input(format!(
            "--lengths {longest} is {:.0}× the model's trained context of {context}; needle runs prompts up to {MAX_CONTEXTS_PER_PROMPT}× it ({bound} tokens) so that a sweep ends — give shorter --lengths",
            longest as f64 / context.max(1) as f64
        )));
    }
    Ok(())
}

fn same_prompts(a: &NeedleSettings, b: &NeedleSettings) -> bool {
    NeedleSettings { lengths: Vec::new(), ..a.clone() } == NeedleSettings { lengths: Vec::new(), ..b.clone() }
}

fn check(opts: &NeedleOptions) -> Result<()> {
    if opts.lengths.is_empty() || opts.depths.is_empty() || opts.policies.is_empty() {
        return Err(Error::input("needle needs at least one length, one depth and one policy"));
    }
    if let Some(d) = opts.depths.iter().find(|d| !(0.0..=1.0).contains(*d)) {
        return Err(Error::input(format!("depth {d} is outside 0…1 (0: the needle first, 1: just before the question)")));
    }
    if opts.trials == 0 || opts.distractors == 0 {
        return Err(Error::input("needle needs at least 1 trial and 1 distractor key"));
    }
    for (p, compression) in &opts.policies {
        p.check()?;
        compression_applies(p, *compression)?;
    }
    Ok(())
}

/// A policy's label in the sweep: its own, marked when the question was known.
pub fn label_of(p: Policy, compression: Compression) -> String {
    match compression {
        Compression::Streamed => p.label(),
        Compression::QuestionKnown => format!("{} · question known", p.label()),
    }
}

/// One policy at one length: every depth and trial.
#[allow(clippy::too_many_arguments)]
fn run_part(
    lm: &LoadedModel,
    arm: &Arm,
    haystack: &Haystack,
    opts: &NeedleOptions,
    trials: &[Trial],
    sha: &str,
    settings: &NeedleSettings,
    progress: &mut dyn Progress,
) -> Result<Part> {
    let insertions: Vec<usize> = opts.depths.iter().map(|&d| haystack.insertion(d)).collect();
    let answer_len = trials[0].candidates[0].len();
    let prompt_len = haystack.prompt_len(trials[0].needle.len());
    // Tokens run: streamed, the head and filler up to the deepest insertion once, then per
    // prompt the needle onwards; with the question known, every prompt whole. Then every
    // candidate's answer tokens but the last. Each prompt alone would run it whole.
    let deepest = insertions.iter().copied().max().unwrap_or(0);
    let per_prompt: usize = insertions.iter().map(|&at| prompt_len - haystack.head.len() - at).sum::<usize>() * trials.len();
    let candidates = trials.iter().map(|t| t.candidates.len()).sum::<usize>() * insertions.len();
    let prompts = insertions.len() * trials.len();
    let recompute = arm.policy.eviction == Eviction::Recompute;
    // Recompute shares nothing: a window of W (or all there is) per answer token and candidate.
    let window = |n: usize| arm.policy.cache.min(n);
    let tokens_separate = match recompute {
        true => prompts * window(prompt_len) + candidates * (1..answer_len).map(|j| window(prompt_len + j)).sum::<usize>(),
        false => prompts * prompt_len + candidates * (answer_len - 1),
    };
    let tokens_run = match arm.compression {
        _ if recompute => tokens_separate,
        Compression::Streamed => haystack.head.len() + deepest + per_prompt + candidates * (answer_len - 1),
        Compression::QuestionKnown => tokens_separate,
    };
    let started = Instant::now();
    let label = arm.label.clone();
    let mut done = 0;
    let mut report = |n| {
        done += n;
        // Every token a recompute window runs is reported; elsewhere the prompts' only.
        progress.steps(&label, done, if recompute { tokens_run } else { tokens_run - candidates * (answer_len - 1) });
    };
    // The arm's empty stream (its whole heads kept whole) under `rounding`.
    let stream = |rounding: CacheRounding| -> Result<CacheStream> {
        let s = CacheStream::new(&lm.model, arm.policy)?;
        let s = match &arm.full_heads {
            Some(full) => s.with_full_heads(full)?,
            None => s,
        };
        s.rounded(rounding)
    };
    // A rounding cache runs beside the same arm's exact one: the answer's KL from it.
    let outcomes = match (&arm.full_heads, opts.rounding.is_exact()) {
        (Some(_), false) => {
            let streams = (stream(opts.rounding)?, stream(CacheRounding::default())?);
            sweep_against_exact(&lm.model, streams, haystack, &insertions, trials, &mut report)?
        }
        (Some(_), true) => sweep_from(&lm.model, stream(opts.rounding)?, haystack, &insertions, trials, &mut report)?,
        (None, _) => sweep(&lm.model, (arm.policy, arm.compression, opts.rounding), haystack, &insertions, trials, &mut report)?,
    };
    let mut rows = Vec::new();
    for ((&depth, &at), per_trial) in opts.depths.iter().zip(&insertions).zip(&outcomes) {
        for (i, (trial, o)) in trials.iter().zip(per_trial).enumerate() {
            rows.push(NeedleTrial {
                policy: label.clone(),
                length: o.prompt_len,
                depth,
                depth_actual: at as f64 / haystack.filler.len() as f64,
                trial: i,
                key: trial.key,
                answer_nll: o.scores.nll[0],
                rank: o.scores.rank(),
                candidates: trial.candidates.len(),
                exact: o.scores.first_wrong.is_none(),
                first_wrong: o.scores.first_wrong,
                predicted: o.scores.predicted.map(|id| lm.tokenizer.decode(&[id])),
                distance: o.prompt_len - o.needle_start,
                needle_kept: o.needle_kept,
                budget: arm.budget,
                kl_from_exact: o.kl_from_exact,
            });
        }
    }
    Ok(Part {
        format: PART_FORMAT,
        model_sha256: sha.to_string(),
        settings: settings.clone(),
        policy: label,
        length: prompt_len,
        trials: rows,
        tokens_run,
        tokens_separate,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// needle.json, the tables and the figures, landing together (the parts stay: a later sweep
/// with more policies reuses them).
fn write_report(r: &NeedleReport, out: &Path) -> Result<()> {
    let stage = Staging::begin(out)?;
    write_json_atomic(&stage.path(NEEDLE_FILE)?, r)?;
    #[cfg(feature = "parquet")]
    super::stage_tables(&stage, crate::report::needle::tables(r))?;
    #[cfg(feature = "plots")]
    for (stem, fig) in crate::report::needle::heatmaps(r) {
        for ext in ["png", "svg"] {
            crate::report::plot::save(&fig, &stage.path(format!("figures/{stem}.{ext}"))?)?;
        }
    }
    #[cfg(feature = "plots")]
    for ext in ["png", "svg"] {
        crate::report::plot::save(&crate::report::needle::accuracy_by_distance(r), &stage.path(format!("figures/needle-distance.{ext}"))?)?;
        if let Some(grid) = crate::report::needle::heads_grid(r) {
            crate::report::plot::save(&grid, &stage.path(format!("figures/needle-heads.{ext}"))?)?;
        }
    }
    write_atomic(&stage.path(NEEDLE_MD)?, crate::report::needle::markdown(r).as_bytes())?;
    stage.commit()
}
