//! Retrieval under a cache policy (this folder: the pass-key prompts, `haystack`; the prompt
//! compressed once when the question is known, `compress`; one arm's sweep, `arms`; which heads
//! retrieve, `heads`; RULER-style task prompts, `tasks`): each pass-key prompt streams through the policy's cache as a
//! serving engine streams a long prompt into a bounded cache (the simulator's exact arithmetic,
//! a block of queries at a time), then every candidate answer is scored teacher-forced from the
//! state the prompt left (`recompute`, which keeps no cache, predicts each answer token from a
//! fresh run of the last W tokens instead). Prompts of one length share their computation up to
//! the needle: the head and the filler before each insertion run once, and each (depth, trial)
//! branches off.
//!
//! Greedy decoding reproduces the answer exactly when, at every answer token, the most likely
//! token given the prompt and the answer's earlier tokens is the answer's own; so the exact match
//! of greedy decoding is read from the true answer's teacher-forced pass (no second decode).

pub mod arms;
pub mod compress;
pub mod haystack;
pub mod heads;
pub mod tasks;

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use self::haystack::{Haystack, Trial};
use super::policy::{Eviction, Policy, PositionMode};
use super::scored::ScoredCache;
use super::trace::PolicyTrace;
use crate::error::{Error, Result};
use crate::metrics::divergence::{kl_rows, log_softmax_rows};
use crate::model::cache_rounding::CacheRounding;
use crate::model::decoder::Decoder;
use crate::model::policy_forward::{QueryView, StreamKv};
use crate::model::scoring::token_nll;
use crate::numerics::sampling::argmax;
use crate::numerics::tensor::with_f32;

/// Queries per block (as in the simulator's replay).
const BLOCK: usize = 128;

/// A stream's state under one policy; a clone is where prompts part ways.
#[derive(Clone)]
pub enum CacheStream {
    /// Positional policies (dense, window, sink, keep): kept keys in stream positions, and which
    /// of them each query sees.
    Positional { kv: StreamKv, trace: Option<PolicyTrace> },
    /// Score-based policies (h2o, tova, snapkv): per (layer, KV head) kept sets.
    Scored(ScoredCache),
}

impl CacheStream {
    /// An empty stream under `policy`: any positional or score-based policy at slot or original
    /// positions (`delta` decodes token by token, too slow for a sweep; `recompute` keeps no
    /// cache: [`arms::sweep`] runs its windows).
    pub fn new(model: &Decoder, policy: Policy) -> Result<Self> {
        policy.check()?;
        if policy.positions == PositionMode::Delta {
            return Err(Error::input("retrieval streams prompts at slot or original positions; delta positions (the same angles as slot, with rounding) are decoded token by token, which is too slow for a sweep: use slot positions"));
        }
        let cfg = &model.cfg;
        match policy.eviction {
            Eviction::Recompute => Err(Error::Internal("recompute keeps no cache to stream; its sweep runs windows".into())),
            Eviction::Dense => Ok(CacheStream::Positional { kv: StreamKv::new(0), trace: None }),
            Eviction::Window | Eviction::Sink { .. } | Eviction::Keep { .. } => {
                Ok(CacheStream::Positional { kv: StreamKv::new(policy.pinned_slots()), trace: Some(PolicyTrace::after_prefix(policy, 0)) })
            }
            Eviction::Scored { .. } => {
                if model.has_sliding_window() && policy.positions == PositionMode::Original {
                    return Err(Error::input(
                        "score-based policies on a model with its own sliding windows run at slot positions; use slot positions",
                    ));
                }
                Ok(CacheStream::Scored(ScoredCache::new(policy, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.d_head)?))
            }
        }
    }

    /// The per-head mixed policy's stream: the KV heads `full` marks keep every key, the others
    /// what this score-based cache keeps (`kv::per_head::mixed_policy`).
    pub fn with_full_heads(self, full: &[Vec<bool>]) -> Result<Self> {
        match self {
            CacheStream::Scored(c) => Ok(CacheStream::Scored(c.with_full_heads(full)?)),
            CacheStream::Positional { .. } => Err(Error::Internal("only a score-based cache keeps some heads whole".into())),
        }
    }

    /// The same (empty) stream with its cache storing keys and values as `rounding` says.
    pub fn rounded(self, rounding: CacheRounding) -> Result<Self> {
        match self {
            _ if rounding.is_exact() => Ok(self),
            CacheStream::Positional { kv, trace } => Ok(CacheStream::Positional { kv: kv.with_rounding(rounding), trace }),
            CacheStream::Scored(c) => Ok(CacheStream::Scored(c.with_rounding(rounding)?)),
        }
    }

    /// Tokens run so far.
    pub fn len(&self) -> usize {
        match self {
            CacheStream::Positional { kv, .. } => kv.len(),
            CacheStream::Scored(c) => c.next_stream,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs the stream's next tokens, a block at a time, and returns the final-norm hidden
    /// states of the last block (its last row is the last token's).
    pub fn run(&mut self, model: &Decoder, tokens: &[u32]) -> Result<Tensor> {
        let mut last = None;
        for chunk in tokens.chunks(BLOCK) {
            last = Some(match self {
                CacheStream::Positional { kv, trace } => {
                    let start = kv.len();
                    let views = (start..start + chunk.len())
                        .map(|t| match trace {
                            Some(tr) => tr.step(t).map(|(v, _)| v),
                            None => Ok(QueryView::dense(t)),
                        })
                        .collect::<Result<Vec<_>>>()?;
                    model.forward_windowed(chunk, &views, kv)?
                }
                CacheStream::Scored(cache) => cache.forward_block(model, chunk)?.0,
            });
        }
        last.ok_or_else(|| Error::Internal("no tokens to stream".into()))
    }

    /// The share of the stream positions in `span` the cache holds now (for a score-based policy,
    /// over every (layer, KV head)).
    pub fn held_share(&self, span: std::ops::Range<usize>) -> f64 {
        match self {
            CacheStream::Positional { trace: None, kv } => (span.end <= kv.len()) as u8 as f64,
            CacheStream::Positional { trace: Some(tr), .. } => tr.held_share(span),
            CacheStream::Scored(c) => c.held_share(span),
        }
    }
}

/// Every candidate answer scored after one prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateScores {
    /// Per candidate, −log p(answer | prompt) in nats (summed over its tokens); `[0]` is the truth.
    pub nll: Vec<f64>,
    /// The true answer's NLL token by token.
    pub truth_tokens: Vec<f64>,
    /// The first answer token greedy decoding gets wrong (`None`: it reproduces the answer) and
    /// what it picks there.
    pub first_wrong: Option<usize>,
    pub predicted: Option<u32>,
}

impl CandidateScores {
    /// The truth's rank among the candidates (1: no distractor is as likely; ties count against it).
    pub fn rank(&self) -> usize {
        let truth = self.nll[0];
        1 + self.nll[1..].iter().filter(|&&d| d <= truth).count()
    }
}

/// Scores `candidates` (all of one length; `[0]` the truth) after the prompt `stream` has run,
/// `last` being the final-norm hidden row of the prompt's last token: each candidate continues a
/// copy of the stream, so its later tokens see what the policy keeps as the answer goes in.
pub fn score_candidates(model: &Decoder, stream: &CacheStream, last: &Tensor, candidates: &[Vec<u32>]) -> Result<CandidateScores> {
    scores_from_rows(model, &candidate_rows(model, stream, last, candidates)?, candidates)
}

/// The final-norm hidden rows that predict the candidates' tokens (see [`scores_from_rows`]);
/// rows 0…m−1 predict the truth's m tokens.
fn candidate_rows(model: &Decoder, stream: &CacheStream, last: &Tensor, candidates: &[Vec<u32>]) -> Result<Tensor> {
    let m = answer_len(candidates)?;
    let mut rows = vec![last.clone()];
    if m > 1 {
        let heads: Vec<&[u32]> = candidates.iter().map(|c| &c[..m - 1]).collect();
        match stream {
            // Every candidate in one batch: the policy's views of the answer's positions do not
            // depend on the tokens.
            CacheStream::Positional { kv, trace } => {
                let mut trace = trace.clone();
                let views = (kv.len()..kv.len() + m - 1)
                    .map(|t| match &mut trace {
                        Some(tr) => tr.step(t).map(|(v, _)| v),
                        None => Ok(QueryView::dense(t)),
                    })
                    .collect::<Result<Vec<_>>>()?;
                match kv.rounding().is_kivi() {
                    // KIVI's copies are made as keys join the store, a group at a time (and a
                    // chunk may close inside the answer): each candidate on its own copy.
                    true => {
                        for c in &heads {
                            rows.push(model.forward_windowed(c, &views, &mut kv.clone())?);
                        }
                    }
                    false => rows.push(model.forward_branches(&heads, &views, kv)?),
                }
            }
            // Each (layer, KV head) keeps its own keys, chosen by the candidate's own attention.
            CacheStream::Scored(_) => {
                for c in &heads {
                    rows.push(stream.clone().run(model, c)?);
                }
            }
        }
    }
    Ok(Tensor::cat(&rows, 0)?)
}

/// Mean over the truth's tokens of KL(P_exact ‖ P) between the next-token distributions the two
/// sets of hidden rows give (teacher-forced on the truth: rows 0…m−1 of each).
fn truth_kl(model: &Decoder, exact: &Tensor, rows: &Tensor, m: usize) -> Result<f64> {
    let vocab = model.cfg.vocab_size;
    let logp = |h: &Tensor| -> Result<Vec<f32>> {
        let logits = model.logits(&h.narrow(0, 0, m)?)?;
        Ok(log_softmax_rows(&logits.flatten_all()?.to_vec1::<f32>()?, vocab))
    };
    let kl = kl_rows(&logp(exact)?, &logp(rows)?, vocab);
    Ok(kl.iter().sum::<f64>() / kl.len().max(1) as f64)
}

/// The candidates' scores from final-norm hidden rows: row 0 predicts every candidate's first
/// token, row 1 + c·(m−1) + j − 1 candidate c's token j ≥ 1.
fn scores_from_rows(model: &Decoder, hidden: &Tensor, candidates: &[Vec<u32>]) -> Result<CandidateScores> {
    let m = candidates.first().map_or(0, Vec::len);
    if m == 0 || hidden.dim(0)? != 1 + candidates.len() * (m - 1) {
        return Err(Error::Internal("candidate rows do not match the candidates".into()));
    }
    let logits = model.logits(hidden)?;
    let vocab = model.cfg.vocab_size;
    with_f32(&logits.contiguous()?, |all| {
        let row = |r: usize| &all[r * vocab..(r + 1) * vocab];
        // Row 0 predicts every candidate's first token; candidate c's token j ≥ 1 comes from row
        // 1 + c·(m−1) + j − 1.
        let at = |c: usize, j: usize| if j == 0 { 0 } else { 1 + c * (m - 1) + j - 1 };
        let nll: Vec<f64> = candidates
            .iter()
            .enumerate()
            .map(|(c, ids)| ids.iter().enumerate().map(|(j, &id)| token_nll(row(at(c, j)), id as usize)).sum())
            .collect();
        let truth = &candidates[0];
        let truth_tokens: Vec<f64> = truth.iter().enumerate().map(|(j, &id)| token_nll(row(at(0, j)), id as usize)).collect();
        let wrong = truth.iter().enumerate().map(|(j, &id)| (j, argmax(row(at(0, j))), id)).find(|&(_, best, id)| best != id);
        CandidateScores { nll, truth_tokens, first_wrong: wrong.map(|w| w.0), predicted: wrong.map(|w| w.1) }
    })
}

/// One (depth, trial) prompt's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialOutcome {
    pub scores: CandidateScores,
    /// Tokens in the prompt; where the needle starts in it.
    pub prompt_len: usize,
    pub needle_start: usize,
    /// The share of the needle's tokens the cache held when the answer began.
    pub needle_kept: f64,
    /// Against the same policy with an exact cache ([`sweep_against_exact`]): the mean over the
    /// answer's tokens of KL(P_exact ‖ P) of the next-token distribution.
    pub kl_from_exact: Option<f64>,
}

/// When a policy compresses the prompt relative to the question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// The prompt, question last, streams through the bounded cache: what the policy evicted
    /// before the question arrived is gone (query-agnostic).
    Streamed,
    /// The prompt is prefilled whole and then compressed once, scored by its own queries' attention
    /// — the question's (SnapKV's setting; `kv::retrieval::compress`); score-based policies only.
    QuestionKnown,
}

impl Compression {
    pub fn name(self) -> &'static str {
        match self {
            Compression::Streamed => "streamed",
            Compression::QuestionKnown => "question_known",
        }
    }
}

/// Refuses the question-known mode for a policy that keeps keys by position (nothing the question
/// attends to can change what it keeps).
pub fn compression_applies(policy: &Policy, compression: Compression) -> Result<()> {
    if compression == Compression::QuestionKnown && !policy.is_scored() {
        return Err(Error::input(format!("{} keeps keys by position: only score-based policies compress with the question known", policy.label())));
    }
    if compression == Compression::QuestionKnown && policy.page.is_some() {
        return Err(Error::input(format!(
            "{}: the question-known arm compresses each KV head's keys at once, not whole pages; run it without --page (`press --block` chooses blocks at once)",
            policy.label()
        )));
    }
    Ok(())
}

fn check_insertions(haystack: &Haystack, insertions: &[usize]) -> Result<()> {
    match insertions.iter().find(|&&i| i > haystack.filler.len()) {
        Some(bad) => Err(Error::Internal(format!("insertion {bad} lies past the filler's {} tokens", haystack.filler.len()))),
        None => Ok(()),
    }
}

/// The candidates' common length (they must be non-empty and of one length).
fn answer_len(candidates: &[Vec<u32>]) -> Result<usize> {
    let m = candidates.first().map_or(0, Vec::len);
    if m == 0 || candidates.iter().any(|c| c.len() != m) {
        return Err(Error::Internal("candidate answers must be non-empty and of one length".into()));
    }
    Ok(m)
}

/// [`arms::sweep`] streamed from `trunk`, an empty stream of any cache (a mixed policy's, with
/// [`CacheStream::with_full_heads`]).
pub fn sweep_from(
    model: &Decoder,
    trunk: CacheStream,
    haystack: &Haystack,
    insertions: &[usize],
    trials: &[Trial],
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<Vec<TrialOutcome>>> {
    sweep_streams(model, (trunk, None), haystack, insertions, trials, progress)
}

/// `one(insertion, trial)` for every (insertion, trial) prompt, as `[insertion][trial]`.
fn each_prompt(insertions: &[usize], trials: &[Trial], mut one: impl FnMut(usize, &Trial) -> Result<TrialOutcome>) -> Result<Vec<Vec<TrialOutcome>>> {
    let mut out = Vec::with_capacity(insertions.len());
    for &at in insertions {
        out.push(trials.iter().map(|trial| one(at, trial)).collect::<Result<Vec<_>>>()?);
    }
    Ok(out)
}

/// [`sweep_from`] on `rounded` (a rounding cache's stream) with `exact` (the same policy's, exact)
/// in lockstep: each outcome also holds the answer's KL divergence from the exact cache's.
pub fn sweep_against_exact(
    model: &Decoder,
    (rounded, exact): (CacheStream, CacheStream),
    haystack: &Haystack,
    insertions: &[usize],
    trials: &[Trial],
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<Vec<TrialOutcome>>> {
    sweep_streams(model, (rounded, Some(exact)), haystack, insertions, trials, progress)
}

fn sweep_streams(
    model: &Decoder,
    (mut trunk, mut twin): (CacheStream, Option<CacheStream>),
    haystack: &Haystack,
    insertions: &[usize],
    trials: &[Trial],
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<Vec<TrialOutcome>>> {
    check_insertions(haystack, insertions)?;
    let filler = &haystack.filler;
    if !trunk.is_empty() || twin.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(Error::Internal("a sweep starts from an empty stream".into()));
    }
    let mut order: Vec<usize> = (0..insertions.len()).collect();
    order.sort_by_key(|&i| (insertions[i], i));
    let mut out: Vec<Vec<TrialOutcome>> = vec![Vec::new(); insertions.len()];
    let advance = |trunk: &mut CacheStream, twin: &mut Option<CacheStream>, tokens: &[u32]| -> Result<()> {
        trunk.run(model, tokens)?;
        if let Some(t) = twin.as_mut() {
            t.run(model, tokens)?;
        }
        Ok(())
    };
    advance(&mut trunk, &mut twin, &haystack.head)?;
    progress(haystack.head.len());
    for i in order {
        let at = insertions[i];
        let reached = trunk.len() - haystack.head.len();
        if at > reached {
            advance(&mut trunk, &mut twin, &filler[reached..at])?;
            progress(at - reached);
        }
        let needle_start = haystack.head.len() + at;
        for trial in trials {
            let rest = [&trial.needle[..], &filler[at..], &haystack.question[..]].concat();
            // The prompt's end through a copy of a trunk: the cache, its last hidden row.
            let prompt = |trunk: &CacheStream| -> Result<(CacheStream, Tensor)> {
                let mut stream = trunk.clone();
                let hidden = stream.run(model, &rest)?;
                let last = hidden.narrow(0, hidden.dim(0)? - 1, 1)?;
                Ok((stream, last))
            };
            let (stream, last) = prompt(&trunk)?;
            let needle_kept = stream.held_share(needle_start..needle_start + trial.needle.len());
            let rows = candidate_rows(model, &stream, &last, &trial.candidates)?;
            let scores = scores_from_rows(model, &rows, &trial.candidates)?;
            let kl_from_exact = match &twin {
                Some(t) => {
                    let (exact, exact_last) = prompt(t)?;
                    let exact_rows = candidate_rows(model, &exact, &exact_last, &trial.candidates[..1])?;
                    Some(truth_kl(model, &exact_rows, &rows, trial.candidates[0].len())?)
                }
                None => None,
            };
            out[i].push(TrialOutcome { scores, prompt_len: stream.len(), needle_start, needle_kept, kl_from_exact });
            progress(rest.len());
        }
    }
    Ok(out)
}
