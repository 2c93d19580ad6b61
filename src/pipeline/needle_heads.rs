//! `needle --retrieval-heads` as a job step: which KV heads retrieve (`kv::retrieval::heads` on
//! calibration prompts whose keys are drawn apart from the sweep's), the heads `heads` would keep
//! whole (attention outside S + R on a calibration prompt), and the arms that put both to the
//! test — the per-head mixed policy with either evidence's heads whole, and `sink` S at the same
//! memory. The measurement is saved as a part and reused like the sweep's.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::progress::Progress;
use crate::analysis::needle::{NeedleHeads, NeedleSettings};
use crate::error::{Error, Result};
use crate::io::write_part_json;
use crate::kv::per_head::{measure, mixed_policy};
use crate::kv::policy::{Eviction, Policy, PositionMode};
use crate::kv::retrieval::haystack::{draw_trials, Haystack};
use crate::kv::retrieval::heads::{head_effects, HeadEffects};
use crate::kv::retrieval::Compression;
use crate::model::load::LoadedModel;

/// Where the measurement waits for a rerun.
const HEADS_PART: &str = "heads.json";
/// Calibration keys come from the sweep's seed mixed with this, so they differ from its keys.
const CALIBRATION_SEED: u64 = 0xCA11_B2A7;

/// What `--retrieval-heads` measures and runs.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadsOptions {
    /// The share of KV heads kept whole by the mixed policies.
    pub share: f64,
    /// Trials per depth of the calibration prompts.
    pub trials: usize,
    /// The streaming heads' S and W (the sweep's --sinks and --cache).
    pub sinks: usize,
    pub cache: usize,
}

/// The saved measurement (the share only picks heads from it).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct HeadsPart {
    model_sha256: String,
    settings: NeedleSettings,
    length: usize,
    trials: usize,
    sinks: usize,
    recent: usize,
    effects: HeadEffects,
    outside: Vec<Vec<f64>>,
    outside_tokens: usize,
}

/// One stream of the sweep: a policy, when it compresses, the KV heads it keeps whole (the mixed
/// policy), and the budget its trials are judged against.
#[derive(Debug, Clone, PartialEq)]
pub struct Arm {
    pub label: String,
    pub policy: Policy,
    pub compression: Compression,
    pub full_heads: Option<Vec<Vec<bool>>>,
    pub budget: Option<usize>,
}

/// Measures (or reuses) which heads retrieve: effects on prompts of `length` tokens at the
/// sweep's depths, attention outside S + R on the first calibration prompt of `outside_length`.
#[allow(clippy::too_many_arguments)]
pub fn measure_heads(
    lm: &LoadedModel,
    opts: &HeadsOptions,
    settings: &NeedleSettings,
    same_prompts: &dyn Fn(&NeedleSettings) -> bool,
    filler: &str,
    length: usize,
    outside_length: usize,
    parts_dir: &Path,
    progress: &mut dyn Progress,
) -> Result<NeedleHeads> {
    // Before any calibration pass: measure_heads ends with `per_head::measure`, which refuses it.
    lm.model.cfg.refuse_linear_layers(crate::kv::per_head::HEAD_CLASSIFICATION)?;
    if !(opts.share > 0.0 && opts.share < 1.0) || opts.trials == 0 || opts.sinks >= opts.cache {
        return Err(Error::input(format!(
            "finding retrieval heads needs a share of KV heads kept whole between 0 and 1 (got {}), at least one calibration trial, and fewer pinned tokens S than the budget W",
            opts.share
        )));
    }
    let recent = opts.cache - opts.sinks;
    let sha = lm.info.sha256.clone().unwrap_or_default();
    let file = parts_dir.join(HEADS_PART);
    let done = std::fs::read(&file).ok().and_then(|b| serde_json::from_slice::<HeadsPart>(&b).ok()).filter(|p| {
        p.model_sha256 == sha && same_prompts(&p.settings) && (p.length, p.trials, p.sinks, p.recent) == (length, opts.trials, opts.sinks, recent)
    });
    let part = match done {
        Some(part) => {
            progress.stage("which heads retrieve: already measured");
            part
        }
        None => {
            let trials = draw_trials(&lm.tokenizer, opts.trials, settings.distractors, settings.seed ^ CALIBRATION_SEED)?;
            let needle_len = trials[0].needle.len();
            let haystack = Haystack::new(&lm.tokenizer, filler, length, needle_len)?;
            let insertions: Vec<usize> = settings.depths.iter().map(|&d| haystack.insertion(d)).collect();
            let label = format!(
                "which heads retrieve: each head's needle hidden from the answer, {} prompts of {length} tokens",
                insertions.len() * trials.len()
            );
            progress.stage(&label);
            let effects = head_effects(&lm.model, &haystack, &insertions, &trials, &mut |done, total| progress.steps(&label, done, total))?;
            let long = Haystack::new(&lm.tokenizer, filler, outside_length, needle_len)?;
            let ids = long.prompt(long.insertion(0.5), &trials[0].needle);
            progress.stage(&format!("attention outside {} sinks + {recent} recent keys over {} tokens", opts.sinks, ids.len()));
            let evidence = measure(&lm.model, &ids, opts.sinks, recent)?;
            let part = HeadsPart {
                model_sha256: sha,
                settings: settings.clone(),
                length,
                trials: opts.trials,
                sinks: opts.sinks,
                recent,
                effects,
                outside: evidence.outside,
                outside_tokens: ids.len(),
            };
            write_part_json(&file, &part)?;
            part
        }
    };
    Ok(NeedleHeads::new(part.length, part.trials, part.effects, part.outside, part.outside_tokens, part.sinks, part.recent, opts.share))
}

/// The per-head arms at prompts of `prompt_len` tokens: the mixed policy with the needle's heads
/// whole, with the heads attention outside S + R picks, and `sink` S with the budget that holds as
/// many entries over every (layer, KV head) as the mixed policy does when the answer starts
/// (full heads hold the prompt; every layer counted, as in `stream --per-head`).
pub fn per_head_arms(heads: &NeedleHeads, opts: &HeadsOptions, prompt_len: usize) -> Result<Vec<Arm>> {
    let kv_heads = heads.full_by_needle.iter().flatten().count();
    let whole = heads.kept();
    let (s, w) = (opts.sinks, opts.cache);
    let mixed = |evidence: &str, full: &[Vec<bool>]| Arm {
        label: format!("per-head, {evidence} heads whole ({whole} of {kv_heads}) + sink S={s}, W={w}"),
        policy: mixed_policy(s, w),
        compression: Compression::Streamed,
        full_heads: Some(full.to_vec()),
        budget: Some(w),
    };
    let entries = whole * prompt_len + (kv_heads - whole) * w;
    let equal = entries.div_ceil(kv_heads.max(1));
    let sink = Policy::new(Eviction::Sink { sinks: s }, equal, PositionMode::Slot);
    sink.check()?;
    Ok(vec![
        mixed("needle", &heads.full_by_needle),
        mixed("attention", &heads.full_by_outside),
        Arm {
            label: format!("sink S={s} at per-head memory"),
            policy: sink,
            compression: Compression::Streamed,
            full_heads: None,
            budget: Some(equal),
        },
    ])
}
