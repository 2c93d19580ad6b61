//! The streaming simulator (StreamingLLM protocol, DESIGN §7): for t = 0…N−2 feed token t, record
//! the NLL of token t+1, then let the policy evict.
//!
//! The tokens are known in advance (teacher forcing), and keys and values never change once
//! computed, so a cached policy is replayed a block of queries at a time: each query sees exactly
//! the keys the policy would hold at its step ([`PolicyTrace`] → `model::policy_forward`), which is the
//! arithmetic of decoding token by token, run at matrix-multiply speed. Policies are identical
//! until their first eviction, so that prefix runs once. `delta` positions (whose point is the
//! rounding of re-rotated keys) decode through the policy's own cache (`kv::cache_decode`: the
//! tokens between two evictions as one block), [`SimOptions::token_by_token`] one token per step;
//! `recompute` re-runs the last W tokens from scratch at each step.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::cache::{prefill_windows, PolicyCache};
use super::cache_decode::decode_through_caches;
pub(super) use super::cache_decode::Track;
use super::memory::{kv_memory_stored, KvMemory};
use super::policy::{Eviction, Policy, PositionMode};
use super::scored::{KeptStats, ScoredCache, StepAttention};
use super::trace::PolicyTrace;
use crate::error::{Error, Result};
use crate::model::cache_rounding::CacheRounding;
use crate::model::decoder::config::describe_windows;
use crate::model::decoder::{Decoder, DecoderConfig};
use crate::model::policy_forward::{QueryView, StreamKv};
use crate::model::receiver::NoCapture;
use crate::numerics::kivi::KiviWindow;

/// Queries per block when replaying a policy (the window's keys are re-read once per block).
pub(super) const STREAM_BLOCK: usize = 128;

/// Steps averaged when looking for the perplexity cliff.
pub const CLIFF_WINDOW: usize = 32;
/// Steps before the first eviction that set the baseline NLL.
const CLIFF_BASELINE: usize = 64;

/// One policy's stream.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StreamOutcome {
    pub policy: Policy,
    pub label: String,
    /// NLL (nats) of token t+1 at step t.
    #[serde(serialize_with = "crate::io::serde_nan::nans_as_null", deserialize_with = "crate::io::serde_nan::nans_if_null")]
    pub nll: Vec<f64>,
    /// Entries the query of step t could see (the cache's length, its own entry included).
    pub cache_len: Vec<usize>,
    pub tokens: usize,
    pub ppl: f64,
    /// Perplexity over the steps that ran on an evicted cache (none: never evicted).
    pub ppl_after_eviction: Option<f64>,
    /// First step whose query saw an evicted cache.
    pub first_eviction_step: Option<usize>,
    /// First step at or after the first eviction where the rolling NLL jumps (see [`find_cliff`]).
    pub cliff_step: Option<usize>,
    pub tokens_per_s: f64,
    /// The cache's memory at its longest, with the model's own windows capping its windowed layers.
    #[serde(default)]
    pub kv_memory: KvMemory,
    /// What a score-based policy kept (`kept_first_share`, mean age); `None` for the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<KeptStats>,
}

/// How the simulator runs (the numbers do not depend on it beyond float rounding).
#[derive(Debug, Clone, Copy)]
pub struct SimOptions {
    /// `recompute` scores only every k-th step after the shared prefix (the others are NaN and
    /// left out of its perplexities): each of its steps re-runs W tokens.
    pub recompute_every: usize,
    /// Decode every cached policy one token per step, prefix included (the reference the block
    /// replay is tested against, and the honest baseline for speed comparisons).
    pub token_by_token: bool,
    /// The cache's storage formats (exact f32 by default); the same for every policy of the run.
    pub rounding: CacheRounding,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions { recompute_every: 1, token_by_token: false, rounding: CacheRounding::default() }
    }
}

/// Runs every policy over `ids`; `progress(done, total)` counts policy-steps.
pub fn simulate(model: &Decoder, ids: &[u32], policies: &[Policy], progress: &mut dyn FnMut(usize, usize)) -> Result<Vec<StreamOutcome>> {
    simulate_with(model, ids, policies, SimOptions::default(), progress)
}

/// Counts policy-steps done for a progress callback.
struct Steps<'p> {
    done: usize,
    total: usize,
    progress: &'p mut dyn FnMut(usize, usize),
}

impl Steps<'_> {
    fn add(&mut self, n: usize) {
        self.done += n;
        (self.progress)(self.done, self.total);
    }
}

/// As [`simulate`], with options: the positional policies share one prefix (every policy sees the
/// same cache until the smallest budget fills), then each is replayed block by block or decoded
/// token by token; score-based policies run on their own.
pub fn simulate_with(
    model: &Decoder,
    ids: &[u32],
    policies: &[Policy],
    opts: SimOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<StreamOutcome>> {
    let n = ids.len();
    if n < 2 {
        return Err(Error::input("the stream needs at least 2 tokens"));
    }
    refuse_unmodelled_rounding(model, policies, opts.rounding)?;
    // Without RoPE (learned positions) a key is the same before and after it: store it as the
    // slot mode's engine does, which the policy caches decoded under `slot` need.
    let opts = SimOptions {
        rounding: CacheRounding { before_rope: opts.rounding.before_rope || model.cfg.arch.learned_positions, ..opts.rounding },
        ..opts
    };
    if policies.iter().any(Policy::is_scored) {
        return with_scored_apart(model, ids, policies, opts, progress);
    }
    refuse_unmodelled_windows(model, policies, opts)?;
    let steps = n - 1;
    let every = opts.recompute_every.max(1);
    let shared = policies.iter().filter(|p| p.eviction != Eviction::Dense).map(|p| p.cache).min().unwrap_or(steps).min(steps);
    let decoded: Vec<bool> = policies.iter().map(|p| decodes_through_cache(model, p, opts)).collect();
    let mut counter = Steps { done: 0, total: shared + (steps - shared) * policies.len(), progress };
    let prefix = Prefix::run(model, &ids[..shared + 1], (opts.token_by_token, opts.rounding), decoded.contains(&true), &mut counter)?;
    let mut tracks: Vec<Track> = policies.iter().map(|_| prefix.track(steps)).collect();
    for (i, p) in policies.iter().enumerate().filter(|&(i, p)| p.is_cached() && !decoded[i]) {
        replay_blocks(model, ids, *p, &prefix, &mut tracks[i], &mut counter)?;
    }
    if let Some(cache) = &prefix.cache {
        let chosen = policies.iter().copied().zip(tracks.iter_mut()).zip(&decoded).filter(|(_, &d)| d).map(|(pt, _)| pt).collect();
        decode_through_caches(model, ids, chosen, cache, shared, (STREAM_BLOCK, opts.token_by_token), &mut |k| counter.add(k))?;
    }
    for (i, p) in policies.iter().enumerate().filter(|(_, p)| !p.is_cached()) {
        recompute(model, ids, (p.cache.max(1), opts.rounding), (shared, every), &mut tracks[i], &mut |k| counter.add(k))?;
    }
    Ok(outcomes(&model.cfg, policies, tracks, (n, shared, every), &opts.rounding))
}

/// Score-based policies decode on their own (a key's fate depends on every step's attention); the
/// others run together; outcomes come back in the order of `policies`.
fn with_scored_apart(
    model: &Decoder,
    ids: &[u32],
    policies: &[Policy],
    opts: SimOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<StreamOutcome>> {
    let rest: Vec<Policy> = policies.iter().filter(|p| !p.is_scored()).copied().collect();
    let mut others = if rest.is_empty() { Vec::new() } else { simulate_with(model, ids, &rest, opts, progress)? }.into_iter();
    policies
        .iter()
        .map(|p| {
            if p.is_scored() {
                scored(model, ids, *p, opts, progress)
            } else {
                others.next().ok_or_else(|| Error::Internal("a policy went missing".into()))
            }
        })
        .collect()
}

/// Decoding through a policy cache measures a layer's own window in cache slots: the policy's
/// positions under `slot` and `delta`, not under `original` (the block replay composes both).
fn refuse_unmodelled_windows(model: &Decoder, policies: &[Policy], opts: SimOptions) -> Result<()> {
    if model.has_sliding_window() && opts.token_by_token && policies.iter().any(|p| p.is_cached() && p.positions == PositionMode::Original) {
        return Err(Error::input(format!(
            "this model attends through a sliding window of {} keys on some layers, which token-by-token decoding at original positions does not model (it measures the window in cache slots); replay the stream instead of decoding token by token, or use slot positions",
            describe_windows(&model.cfg.windows())
        )));
    }
    Ok(())
}

/// A quantized cache is modelled for heads whose size its blocks divide, and under score-based
/// policies with keys stored before RoPE (`ScoredCache::with_rounding`).
pub fn refuse_unmodelled_rounding(model: &Decoder, policies: &[Policy], rounding: CacheRounding) -> Result<()> {
    if rounding.is_exact() {
        return Ok(());
    }
    rounding.check_for(&model.cfg)?;
    for p in policies.iter().filter(|p| p.is_scored()) {
        ScoredCache::refuse_unmodelled(p, &rounding, model.cfg.d_head)?;
    }
    if let Some(window) = rounding.kivi_window() {
        policies.iter().try_for_each(|p| refuse_unmodelled_kivi(p, &window))?;
    }
    Ok(())
}

/// KIVI is modelled in the block replay, where keys keep the angles of their stream positions:
/// for policies that evict, at `original` positions, and with the recent window KIVI quantizes.
fn refuse_unmodelled_kivi(p: &Policy, window: &KiviWindow) -> Result<()> {
    let label = p.label();
    match p.eviction {
        Eviction::Dense => Ok(()),
        _ if p.page.is_some() => Err(Error::input(format!(
            "a KIVI cache is not modelled on a paged cache ({label}): KIVI quantizes its recent keys in chunks of R that pages leaving whole would cut"
        ))),
        Eviction::Recompute => Err(Error::input(format!("a KIVI cache is not modelled under {label}, which re-runs its window from scratch at every step"))),
        _ if p.positions != PositionMode::Original => Err(Error::input(format!(
            "a KIVI cache under {label} is modelled at original positions (KIVI quantizes keys as rotated at their stream positions, which a cache that re-rotates them does not keep): give --positions original"
        ))),
        Eviction::Window | Eviction::Sink { .. } if p.cache - p.pinned().min(p.cache) < window.residual => Err(Error::input(format!(
            "a KIVI cache quantizes its recent window's R = {} keys together once it fills, and {label} holds fewer recent keys: keep W − S ≥ R or give a smaller --kivi-residual",
            window.residual
        ))),
        _ => Ok(()),
    }
}

/// Whether `p` is decoded through its own cache (`kv::cache_decode`) rather than replayed from
/// stream keys: when asked, under `delta` (rounding accumulates per eviction), and with learned
/// absolute positions under `slot` (a key then carries the slot it entered at, which the
/// replay's stream positions cannot give it; under `original` the replay is exact).
fn decodes_through_cache(model: &Decoder, p: &Policy, opts: SimOptions) -> bool {
    let learned = model.cfg.arch.learned_positions;
    p.is_cached() && (opts.token_by_token || p.positions == PositionMode::Delta || (learned && p.positions != PositionMode::Original))
}

/// The shared prefix, run once: its per-token NLL and the keys every policy starts from.
struct Prefix {
    nll: Vec<f64>,
    /// Keys in stream positions, for the block replay.
    kv: StreamKv,
    /// The prefix in a policy cache, for the policies decoded token by token.
    cache: Option<PolicyCache>,
    wall: f64,
}

impl Prefix {
    /// Runs `ids[..shared]` (scoring each next token, `ids` holds one more): in blocks, or token by
    /// token into a dense policy cache; `need_cache` keeps a policy cache after a block run too.
    fn run(model: &Decoder, ids: &[u32], (token_by_token, rounding): (bool, CacheRounding), need_cache: bool, counter: &mut Steps) -> Result<Prefix> {
        let start = Instant::now();
        let shared = ids.len() - 1;
        let kv = StreamKv::new(0).with_rounding(rounding);
        let mut prefix = Prefix { nll: Vec::with_capacity(shared), kv, cache: None, wall: 0.0 };
        let dense_cache = || -> Result<PolicyCache> { PolicyCache::new(dense(), model.cfg.d_head)?.keeping_rotated().with_rounding(rounding) };
        if token_by_token {
            let mut cache = dense_cache()?;
            for t in 0..shared {
                let h = model.decode_step(&ids[t..t + 1], &mut [&mut cache])?;
                prefix.nll.extend(model.next_token_nll(&h, &ids[t + 1..t + 2])?);
                counter.add(1);
            }
            prefix.cache = Some(cache);
        } else {
            for b0 in (0..shared).step_by(STREAM_BLOCK) {
                let b = STREAM_BLOCK.min(shared - b0);
                let views: Vec<QueryView> = (b0..b0 + b).map(QueryView::dense).collect();
                let h = model.forward_windowed(&ids[b0..b0 + b], &views, &mut prefix.kv)?;
                prefix.nll.extend(model.next_token_nll(&h, &ids[b0 + 1..b0 + b + 1])?);
                counter.add(b);
            }
            if need_cache {
                let mut cache = dense_cache()?;
                model.forward_with(&ids[..shared], Some(&mut cache), &mut NoCapture)?;
                prefix.cache = Some(cache);
            }
        }
        prefix.wall = start.elapsed().as_secs_f64();
        Ok(prefix)
    }

    /// A policy's track of a `steps`-step stream, holding the prefix.
    fn track(&self, steps: usize) -> Track {
        let mut lens = Vec::with_capacity(steps);
        lens.extend(1..=self.nll.len());
        let mut nll = Vec::with_capacity(steps);
        nll.extend_from_slice(&self.nll);
        Track { nll, lens, wall: self.wall }
    }
}

/// One cached policy after the prefix, replayed block by block.
fn replay_blocks(model: &Decoder, ids: &[u32], p: Policy, prefix: &Prefix, track: &mut Track, counter: &mut Steps) -> Result<()> {
    let (shared, steps) = (prefix.nll.len(), ids.len() - 1);
    let t0 = Instant::now();
    let mut trace = PolicyTrace::after_prefix(p, shared);
    let mut kv = prefix.kv.pinning(p.pinned_slots())?;
    for b0 in (shared..steps).step_by(STREAM_BLOCK) {
        let b = STREAM_BLOCK.min(steps - b0);
        let mut views = Vec::with_capacity(b);
        for t in b0..b0 + b {
            let (view, held) = trace.step(t)?;
            views.push(view);
            track.lens.push(held);
        }
        let h = model.forward_windowed(&ids[b0..b0 + b], &views, &mut kv)?;
        track.nll.extend(model.next_token_nll(&h, &ids[b0 + 1..b0 + b + 1])?);
        counter.add(b);
    }
    track.wall += t0.elapsed().as_secs_f64();
    Ok(())
}

/// One score-based policy through its [`ScoredCache`], each step's attention weights scoring the
/// keys before the eviction: a block of tokens at a time (the same arithmetic), or decoded token
/// by token when asked.
fn scored(model: &Decoder, ids: &[u32], policy: Policy, opts: SimOptions, progress: &mut dyn FnMut(usize, usize)) -> Result<StreamOutcome> {
    let cfg = &model.cfg;
    if model.has_sliding_window() && policy.positions == PositionMode::Original {
        return Err(Error::input(
            "score-based policies on a model with its own sliding windows measure the window in cache slots; use slot positions",
        ));
    }
    let (n, steps) = (ids.len(), ids.len() - 1);
    let mut cache = ScoredCache::new(policy, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.d_head)?.with_rounding(opts.rounding)?;
    let track = if opts.token_by_token {
        let mut track = Track { nll: Vec::with_capacity(steps), lens: Vec::with_capacity(steps), wall: 0.0 };
        let start = Instant::now();
        for t in 0..steps {
            let mut attention = StepAttention::new(cfg.n_layers);
            let h = model.forward_with(&ids[t..t + 1], Some(&mut cache), &mut attention)?;
            track.nll.extend(model.next_token_nll(&h, &ids[t + 1..t + 2])?);
            track.lens.push(cache.len());
            cache.observe_and_evict(&attention.rows)?;
            progress(t + 1, steps);
        }
        track.wall = start.elapsed().as_secs_f64();
        track
    } else {
        replay_scored(model, ids, &mut cache, progress)?
    };
    let mut outcome = outcomes(cfg, &[policy], vec![track], (n, steps, 1), &opts.rounding).remove(0);
    outcome.kept = cache.stats();
    Ok(outcome)
}

/// Streams `ids` through a scored cache a block of [`STREAM_BLOCK`] tokens at a time (the
/// arithmetic of decoding them one by one; see `kv::scored_replay`).
pub(super) fn replay_scored(model: &Decoder, ids: &[u32], cache: &mut ScoredCache, progress: &mut dyn FnMut(usize, usize)) -> Result<Track> {
    let steps = ids.len().saturating_sub(1);
    let mut track = Track { nll: Vec::with_capacity(steps), lens: Vec::with_capacity(steps), wall: 0.0 };
    let start = Instant::now();
    for b0 in (0..steps).step_by(STREAM_BLOCK) {
        let b = STREAM_BLOCK.min(steps - b0);
        let (h, lens) = cache.forward_block(model, &ids[b0..b0 + b])?;
        track.nll.extend(model.next_token_nll(&h, &ids[b0 + 1..b0 + b + 1])?);
        track.lens.extend(lens);
        progress(b0 + b, steps);
    }
    track.wall = start.elapsed().as_secs_f64();
    Ok(track)
}

/// Token rows per batch of `recompute` windows: enough that the projections run at full
/// matrix-multiply speed (a 128-token window alone runs ~1.3× slower per token, a 64-token one
/// ~2.2×); each window still attends only within itself.
const RECOMPUTE_BATCH_ROWS: usize = 1024;

/// `recompute W` after the shared prefix: at each scored step t, the last W tokens (t included)
/// run from scratch at positions 0…W−1 and the NLL of token t+1 is read from the last row.
/// Windows of equal length run as batches; `progress(n)` reports n more steps done.
fn recompute(
    model: &Decoder,
    ids: &[u32],
    (w, rounding): (usize, CacheRounding),
    (shared, every): (usize, usize),
    track: &mut Track,
    progress: &mut dyn FnMut(usize),
) -> Result<()> {
    let steps = ids.len() - 1;
    let batch = (RECOMPUTE_BATCH_ROWS / w).max(1);
    let window = |t: usize| (t + 1).saturating_sub(w)..t + 1;
    let first = track.nll.len();
    for t in shared..steps {
        track.lens.push(window(t).len());
        track.nll.push(f64::NAN);
    }
    let scored: Vec<usize> = (shared..steps).filter(|t| (t - shared).is_multiple_of(every)).collect();
    let mut at = 0;
    while at < scored.len() {
        let len = window(scored[at]).len();
        let group: Vec<usize> = scored[at..].iter().copied().take(batch).take_while(|&t| window(t).len() == len).collect();
        let t0 = Instant::now();
        let windows: Vec<&[u32]> = group.iter().map(|&t| &ids[window(t)]).collect();
        let hidden = prefill_windows(model, &windows, rounding)?;
        let last_rows: Vec<u32> = (0..group.len()).map(|g| (g * len + len - 1) as u32).collect();
        let last = hidden.index_select(&candle_core::Tensor::new(last_rows.as_slice(), hidden.device())?, 0)?;
        let targets: Vec<u32> = group.iter().map(|&t| ids[t + 1]).collect();
        for (&t, nll) in group.iter().zip(model.next_token_nll(&last, &targets)?) {
            track.nll[first + t - shared] = nll;
        }
        track.wall += t0.elapsed().as_secs_f64();
        // Progress counts every step, scored or skipped, up to the last one of this batch.
        let reached = scored.get(at + group.len()).copied().unwrap_or(steps);
        progress(reached - scored[at]);
        at += group.len();
    }
    Ok(())
}

/// The smallest K such that scoring `recompute W` on every K-th step after the budget fills runs
/// at most `budget` window tokens over a stream of `tokens` (1 when every step fits).
pub fn recompute_stride(tokens: usize, cache: usize, budget: usize) -> usize {
    let steps = tokens.saturating_sub(1);
    let after = steps - cache.min(steps);
    let per_step = cache.max(1);
    // Scored steps at stride K: ceil(after / K); the largest count the budget allows:
    let affordable = (budget / per_step).max(1);
    after.div_ceil(affordable).max(1)
}

fn dense() -> Policy {
    Policy::new(Eviction::Dense, 0, PositionMode::Slot)
}

/// Perplexities, first eviction, cliff and speed of each policy's gathered stream: `n` tokens,
/// the first `shared` steps common, a sampled policy scored on 1 step in `every`; memory as
/// `rounding` stores the cache.
fn outcomes(
    cfg: &DecoderConfig,
    policies: &[Policy],
    tracks: Vec<Track>,
    (n, shared, every): (usize, usize, usize),
    rounding: &CacheRounding,
) -> Vec<StreamOutcome> {
    let steps = n - 1;
    policies
        .iter()
        .zip(tracks)
        .map(|(p, tr)| {
            let first_eviction_step = tr.lens.iter().enumerate().find(|&(t, &len)| len < t + 1).map(|(t, _)| t);
            let scored = if p.is_cached() { steps } else { shared + (steps - shared).div_ceil(every) };
            StreamOutcome {
                policy: *p,
                label: if !p.is_cached() && every > 1 { format!("{} (1 step in {every} scored)", p.label()) } else { p.label() },
                ppl: ppl(&tr.nll),
                ppl_after_eviction: first_eviction_step.map(|s| ppl(&tr.nll[s..])),
                cliff_step: first_eviction_step.and_then(|s| find_cliff(&tr.nll, s, p.cache)),
                first_eviction_step,
                tokens: n,
                tokens_per_s: scored as f64 / tr.wall.max(1e-9),
                kv_memory: kv_memory_stored(cfg, tr.lens.iter().copied().max().unwrap_or(0), rounding),
                kept: None,
                nll: tr.nll,
                cache_len: tr.lens,
            }
        })
        .collect()
}

/// Perplexity of each consecutive `len`-step segment: (first step, steps, perplexity); the last
/// segment may be shorter.
pub fn segment_ppl(nll: &[f64], len: usize) -> Vec<(usize, usize, f64)> {
    nll.chunks(len.max(1)).enumerate().map(|(i, c)| (i * len.max(1), c.len(), ppl(c))).collect()
}

/// exp(mean NLL) over the scored (non-NaN) steps.
pub fn ppl(nll: &[f64]) -> f64 {
    let scored: Vec<f64> = nll.iter().copied().filter(|v| !v.is_nan()).collect();
    if scored.is_empty() {
        return f64::NAN;
    }
    (scored.iter().sum::<f64>() / scored.len() as f64).exp()
}

/// The first step s in [`first_eviction`, `first_eviction` + `horizon`] where the mean NLL over
/// [s, s+32) exceeds the mean over the (up to) 64 steps before the first eviction by more than
/// max(1.5 nats, 50%): where perplexity falls off a cliff as the evictions begin rather than
/// wobbling with the text. `horizon` is the cache size: one cache length after the first eviction,
/// everything the stream held then is gone, and a later rise has no reference here to tell a hard
/// passage from a collapse (`recommend` dates cliffs against the best policy instead). `None` when
/// it never does (or the stream is too short to tell).
pub fn find_cliff(nll: &[f64], first_eviction: usize, horizon: usize) -> Option<usize> {
    let w = CLIFF_WINDOW;
    let base = CLIFF_BASELINE.min(first_eviction);
    if base < w / 2 || nll.len() < first_eviction + w {
        return None;
    }
    let before = nll[first_eviction - base..first_eviction].iter().sum::<f64>() / base as f64;
    let threshold = before + (0.5 * before).max(1.5);
    let last = (nll.len() - w).min(first_eviction + horizon);
    (first_eviction..=last).find(|&s| nll[s..s + w].iter().sum::<f64>() / w as f64 > threshold)
}

/// Mean per-step NLL excess over a reference stream (the same tokens under another policy) that
/// marks a cliff: over 32 steps the policy is 1.65× as perplexed as the reference.
pub const RELATIVE_CLIFF_NATS: f64 = 0.5;

/// The first step s ≥ `first_eviction` where the policy's NLL over [s, s+32) exceeds
/// `reference`'s on the same steps by more than [`RELATIVE_CLIFF_NATS`] on average. Text
/// difficulty cancels, so a hard passage that raises every policy alike is not a cliff. Steps
/// either side left unscored (NaN) are skipped; a window needs half its steps scored.
pub fn find_cliff_against(nll: &[f64], reference: &[f64], first_eviction: usize) -> Option<usize> {
    let w = CLIFF_WINDOW;
    let n = nll.len().min(reference.len());
    if n < first_eviction + w {
        return None;
    }
    (first_eviction..=n - w).find(|&s| {
        let diffs: Vec<f64> = (s..s + w).map(|t| nll[t] - reference[t]).filter(|d| !d.is_nan()).collect();
        diffs.len() >= w / 2 && diffs.iter().sum::<f64>() / diffs.len() as f64 > RELATIVE_CLIFF_NATS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cliff_is_where_rolling_nll_jumps() {
        let mut nll = vec![2.0; 70];
        nll.extend(vec![8.0; 60]);
        // Evictions start at step 64; the jump at 70 is found once the rolling window tips.
        let c = find_cliff(&nll, 64, 64).unwrap();
        assert!((64..=70).contains(&c), "{c}");
        assert_eq!(find_cliff(&vec![2.0; 130], 64, 64), None);
        assert_eq!(find_cliff(&nll, 4, 64), None);
        // A short wobble (8 tokens at +4 nats) is not a cliff.
        let mut wobble = vec![2.0; 130];
        wobble[80..88].iter_mut().for_each(|v| *v = 6.0);
        assert_eq!(find_cliff(&wobble, 64, 64), None);
    }

    #[test]
    fn a_rise_beyond_one_cache_length_after_the_first_eviction_is_no_cliff() {
        // Cache 64, first eviction at 64: a long hard passage from step 400 is the text's.
        let mut nll = vec![2.0; 600];
        nll[400..500].iter_mut().for_each(|v| *v = 8.0);
        assert_eq!(find_cliff(&nll, 64, 64), None);
        // The same jump inside the horizon is a cliff.
        nll[100..200].iter_mut().for_each(|v| *v = 8.0);
        let c = find_cliff(&nll, 64, 64).unwrap();
        assert!((69..=100).contains(&c), "{c}");
    }

    #[test]
    fn a_hard_passage_is_no_cliff_against_a_reference() {
        // Both streams get 2 nats harder over steps 80..120; only the second one then stays
        // 1 nat above the reference from step 150 on.
        let reference: Vec<f64> = (0..260).map(|t| if (80..120).contains(&t) { 4.5 } else { 2.5 }).collect();
        let same = reference.clone();
        assert_eq!(find_cliff_against(&same, &reference, 64), None);
        let collapsing: Vec<f64> = reference.iter().enumerate().map(|(t, v)| if t >= 150 { v + 1.0 } else { *v }).collect();
        let c = find_cliff_against(&collapsing, &reference, 64).unwrap();
        assert!((134..=150).contains(&c), "{c}");
        // The self-baseline rule flags the shared hard passage.
        assert!(find_cliff(&same, 64, 64).is_some());
    }

    #[test]
    fn recompute_stride_fits_the_budget() {
        // 640 steps after a budget of 128: 81,920 window tokens.
        assert_eq!(recompute_stride(769, 128, 81_920), 1);
        assert_eq!(recompute_stride(769, 128, 81_919), 2);
        assert_eq!(recompute_stride(769, 128, 65_536), 2);
        for (tokens, cache, budget) in [(4000, 256, 65_536), (1500, 64, 1000), (300, 500, 10), (50, 8, 1)] {
            let k = recompute_stride(tokens, cache, budget);
            let after = (tokens - 1).saturating_sub(cache);
            let scored = after.div_ceil(k);
            assert!(scored * cache <= budget.max(cache), "{tokens}/{cache}/{budget}: K = {k} runs {} tokens", scored * cache);
            assert!(k == 1 || after.div_ceil(k - 1) * cache > budget, "{tokens}/{cache}/{budget}: K = {k} is not the smallest");
        }
    }

    #[test]
    fn perplexity_of_constant_nll() {
        assert!((ppl(&[2f64.ln(); 5]) - 2.0).abs() < 1e-12);
    }
}
