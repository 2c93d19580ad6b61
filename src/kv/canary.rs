//! The live canary: run a prompt and then generate (or score a given continuation) one token at a
//! time under a cache policy, as a server does, recording per step the token's log-probability
//! and each layer's attention mass on the first four cache slots; flag the steps where the
//! watched layer's mass collapses against its level before the first eviction.

use std::ops::Range;

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use super::cache::PolicyCache;
use super::policy::{Eviction, Policy};
use crate::error::{Error, Result};
use crate::model::cache_rounding::CacheRounding;
use crate::model::decoder::Decoder;
use crate::model::hook::HookPoint;
use crate::model::receiver::HookReceiver;
use crate::model::scoring::token_nll;
use crate::numerics::sampling::{argmax, sample, XorShift};
use crate::numerics::tensor::with_f32;

/// The cache slots whose attention mass the canary logs (the articles' "first four cache slots").
pub const FIRST_SLOTS: usize = 4;
/// Steps whose cache holds fewer keys than this say nothing about a sink (a handful of keys
/// share the mass anyway) and are left out of the baseline.
pub const MIN_BASELINE_KEYS: usize = 16;

/// What to run.
#[derive(Debug, Clone)]
pub struct CanaryOptions {
    pub policy: Policy,
    /// The prompt's tokens (scored, never flagged).
    pub prompt: Vec<u32>,
    /// Tokens to generate; with `forced`, its length.
    pub steps: usize,
    /// Score these tokens as the continuation instead of generating one.
    pub forced: Option<Vec<u32>>,
    /// 0: greedy.
    pub temperature: f64,
    pub seed: u64,
    /// The layer whose mass is watched (default: mid-depth).
    pub layer: usize,
    /// A step is flagged when the watched mass falls below this fraction of its baseline.
    pub collapse: f64,
    /// The cache's storage formats (exact by default).
    pub rounding: CacheRounding,
}

/// One decoded token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CanaryStep {
    /// The token's index in the sequence (the prompt's first is 0).
    pub index: usize,
    pub token: u32,
    /// Whether the token belongs to the prompt.
    pub prompt: bool,
    /// log p(token | what the cache held), natural log.
    pub logprob: f64,
    /// Entries evicted just before this token's query ran.
    pub evicted: usize,
    /// Keys the query saw (its own included).
    pub keys: usize,
    /// Per layer: the query's attention on cache slots 0..4, averaged over heads (NaN, `null` in
    /// the JSON, on a hybrid's linear-attention layer, which attends to nothing).
    #[serde(serialize_with = "crate::io::serde_nan::nans_as_null", deserialize_with = "crate::io::serde_nan::nans_if_null")]
    pub first_slot_mass: Vec<f64>,
    /// Sequence indices of the tokens in those slots.
    pub first_slots: Vec<usize>,
    pub flagged: bool,
}

/// The whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CanaryRun {
    pub policy: Policy,
    pub layer: usize,
    pub collapse: f64,
    pub steps: Vec<CanaryStep>,
    /// The watched layer's mean mass over the steps before the first eviction (with at least
    /// [`MIN_BASELINE_KEYS`] keys).
    pub baseline_mass: Option<f64>,
    /// Index into `steps` of the first step whose query ran after an eviction.
    pub first_eviction: Option<usize>,
    /// Index into `steps` of the first step whose first slot no longer holds the sequence's
    /// first token.
    pub sink_evicted: Option<usize>,
    /// Index into `steps` of the first flagged step.
    pub collapse_at: Option<usize>,
    /// The cache's storage formats when they round (absent: exact).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_rounding: Option<CacheRounding>,
}

impl CanaryStep {
    /// The mass on the first slots averaged over the layers that attend.
    pub fn mean_mass(&self) -> f64 {
        let attending: Vec<f64> = self.first_slot_mass.iter().copied().filter(|m| m.is_finite()).collect();
        attending.iter().sum::<f64>() / attending.len().max(1) as f64
    }
}

/// Mean attention on the first cache slots per layer for a one-query step.
struct SlotMass {
    mass: Vec<f64>,
}

impl HookReceiver for SlotMass {
    fn wants(&self, hook: &HookPoint) -> bool {
        matches!(hook, HookPoint::Pattern(_))
    }

    fn record(&mut self, hook: &HookPoint, _rows: Range<usize>, value: &Tensor) -> Result<()> {
        let HookPoint::Pattern(l) = *hook else { return Ok(()) };
        let (h, q, keys) = value.dims3()?;
        let take = FIRST_SLOTS.min(keys);
        let total = with_f32(value, |p| p.chunks(keys).map(|row| row[..take].iter().map(|&v| v as f64).sum::<f64>()).sum::<f64>())?;
        if let Some(m) = self.mass.get_mut(l) {
            *m = total / (h * q).max(1) as f64;
        }
        Ok(())
    }
}

/// The most steps one canary runs (each is a decode step whose record stays in memory).
pub const MAX_CANARY_STEPS: usize = 1 << 20;

/// Runs the canary: the prompt token by token, then `steps` generated (or forced) tokens, the
/// policy evicting before each query as a serving loop does. `progress(done, total)`.
pub fn run_canary(model: &Decoder, opts: &CanaryOptions, progress: &mut dyn FnMut(usize, usize)) -> Result<CanaryRun> {
    let policy = opts.policy;
    if policy.is_scored() || policy.eviction == Eviction::Recompute {
        return Err(Error::input("canary runs dense, window, sink and keep caches (a score-based policy's per-head sets have no common first slots); use `stream` for the others"));
    }
    if opts.prompt.is_empty() {
        return Err(Error::input("the canary needs a prompt of at least one token"));
    }
    if opts.layer >= model.cfg.n_layers {
        return Err(Error::input(format!("the canary's layer {} is past the model's {} layers", opts.layer, model.cfg.n_layers)));
    }
    if model.cfg.is_linear(opts.layer) {
        return Err(Error::input(format!(
            "the canary's layer {} is linear attention (Gated DeltaNet), which attends to no cache slot; watch one of the layers {:?}",
            opts.layer,
            model.cfg.attention_layers()
        )));
    }
    let steps = opts.forced.as_ref().map_or(opts.steps, Vec::len).max(opts.steps);
    if steps > MAX_CANARY_STEPS {
        return Err(Error::input(format!(
            "-n {steps} is more steps than a canary takes (at most {MAX_CANARY_STEPS}: each is one decode step, logged in memory)"
        )));
    }
    let total = opts.prompt.len() + opts.forced.as_ref().map_or(opts.steps, Vec::len);
    if policy.eviction == Eviction::Dense && total > model.cfg.context_len {
        return Err(Error::input(format!(
            "{total} tokens exceed the model's context of {}; use a cache policy or fewer steps",
            model.cfg.context_len
        )));
    }
    let rope_of = |l: usize| model.layer_rope(l);
    opts.rounding.check_for(&model.cfg)?;
    let mut cache = PolicyCache::new(policy, model.cfg.d_head)?.with_rounding(opts.rounding)?;
    let mut rng = XorShift(opts.seed.max(1));
    let mut tokens = opts.prompt.clone();
    let mut steps: Vec<CanaryStep> = Vec::with_capacity(total);
    // Query i reads token i and predicts token i + 1; its row records token i + 1.
    let mut i = 0;
    while i + 1 < total {
        let evicted = cache.evict(&rope_of)?;
        // A linear-attention layer records no pattern: its mass stays undefined.
        let mut sink = SlotMass { mass: (0..model.cfg.n_layers).map(|l| if model.cfg.is_linear(l) { f64::NAN } else { 0.0 }).collect() };
        let hidden = model.forward_with(&tokens[i..=i], Some(&mut cache), &mut sink)?;
        let logits: Vec<f32> = model.logits(&hidden)?.flatten_all()?.to_vec1()?;
        let prompt = i + 1 < opts.prompt.len();
        let next = match (prompt, &opts.forced) {
            (true, _) => tokens[i + 1],
            (false, Some(forced)) => forced[i + 1 - opts.prompt.len()],
            (false, None) if opts.temperature == 0.0 => argmax(&logits),
            (false, None) => sample(&logits, opts.temperature, &mut rng),
        };
        if next as usize >= logits.len() {
            return Err(Error::input(format!("token id {next} is outside the model's vocabulary of {}", logits.len())));
        }
        if tokens.len() == i + 1 {
            tokens.push(next);
        }
        steps.push(CanaryStep {
            index: i + 1,
            token: next,
            prompt,
            logprob: -token_nll(&logits, next as usize),
            evicted,
            keys: cache.len(),
            first_slot_mass: sink.mass,
            first_slots: cache.stream_pos.iter().take(FIRST_SLOTS).copied().collect(),
            flagged: false,
        });
        i += 1;
        progress(i, total - 1);
    }
    Ok(flag(CanaryRun {
        policy,
        layer: opts.layer,
        collapse: opts.collapse,
        steps,
        baseline_mass: None,
        first_eviction: None,
        sink_evicted: None,
        collapse_at: None,
        cache_rounding: (!opts.rounding.is_exact()).then_some(opts.rounding),
    }))
}

/// Sets the baseline, the eviction landmarks and the flags of a run's steps.
pub fn flag(mut run: CanaryRun) -> CanaryRun {
    let first_eviction = run.steps.iter().position(|s| s.evicted > 0);
    let before = &run.steps[..first_eviction.unwrap_or(run.steps.len())];
    let base: Vec<f64> = before.iter().filter(|s| s.keys >= MIN_BASELINE_KEYS).filter_map(|s| s.first_slot_mass.get(run.layer).copied()).collect();
    run.baseline_mass = (!base.is_empty()).then(|| base.iter().sum::<f64>() / base.len() as f64);
    run.first_eviction = first_eviction;
    run.sink_evicted = run.steps.iter().position(|s| s.first_slots.first().is_some_and(|&p| p != 0));
    if let Some(b) = run.baseline_mass {
        for s in run.steps.iter_mut().filter(|s| !s.prompt) {
            s.flagged = s.first_slot_mass.get(run.layer).is_some_and(|&m| m < run.collapse * b);
        }
    }
    run.collapse_at = run.steps.iter().position(|s| s.flagged);
    run
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::policy::PositionMode;

    #[test]
    fn flags_follow_the_baseline_before_the_first_eviction() {
        let step = |i: usize, evicted: usize, keys: usize, mass: f64, first: usize| CanaryStep {
            index: i,
            token: 0,
            prompt: false,
            logprob: -1.0,
            evicted,
            keys,
            first_slot_mass: vec![0.9, mass],
            first_slots: vec![first, first + 1],
            flagged: false,
        };
        let steps = vec![step(1, 0, 2, 1.0, 0), step(2, 0, 20, 0.6, 0), step(3, 0, 21, 0.4, 0), step(4, 1, 21, 0.3, 1), step(5, 1, 21, 0.05, 2)];
        let policy = Policy::new(Eviction::Window, 21, PositionMode::Slot);
        let run = flag(CanaryRun {
            policy,
            layer: 1,
            collapse: 0.25,
            steps,
            baseline_mass: None,
            first_eviction: None,
            sink_evicted: None,
            collapse_at: None,
            cache_rounding: None,
        });
        // The 2-key step is left out of the baseline: (0.6 + 0.4) / 2.
        assert!((run.baseline_mass.unwrap() - 0.5).abs() < 1e-12);
        assert_eq!((run.first_eviction, run.sink_evicted, run.collapse_at), (Some(3), Some(3), Some(4)));
        assert_eq!(run.steps.iter().filter(|s| s.flagged).count(), 1);
        assert!((-token_nll(&[0.0, 0.0], 1) - 0.5f64.ln()).abs() < 1e-12);
    }
}
