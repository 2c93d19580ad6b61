//! Presses on the RULER-style task prompts (`retrieval::tasks`): each prompt's context (with the
//! question when query-aware) prefilled once per kind of prefill the presses read, each press's
//! compression of it, and the candidate answers scored after it as `needle` scores them (the
//! truth's rank among the candidates, greedy exact match, the truth's NLL) — beside the prompt run
//! with nothing compressed.

use super::{compress, filled_cache, Prefill, Press, PressTokens};
use crate::error::{Error, Result};
use crate::kv::policy::{Eviction, Policy, PositionMode};
use crate::kv::retrieval::tasks::TaskPrompt;
use crate::kv::retrieval::{score_candidates, CacheStream, CandidateScores};
use crate::model::decoder::Decoder;

/// One press as a task sweep runs it: query-agnostic (the question appended after the
/// compression, kvpress's default) or query-aware (compressed with the context).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskArm {
    pub press: Press,
    pub query_aware: bool,
}

impl TaskArm {
    /// The press's label, "+aware" when query-aware.
    pub fn label(&self) -> String {
        format!("{}{}", self.press.label(), if self.query_aware { "+aware" } else { "" })
    }
}

/// One arm's outcome on one prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct ArmOutcome {
    pub scores: CandidateScores,
    /// The share of the evidence's positions kept, over every (layer, KV head).
    pub evidence_kept: f64,
}

/// The prompt's tokens as a press runs them, the truth as the answer.
fn press_tokens(prompt: &TaskPrompt, query_aware: bool) -> Result<PressTokens<'_>> {
    let answer = prompt.candidates.first().ok_or_else(|| Error::Internal("a task prompt without candidates".into()))?;
    Ok(PressTokens { context: &prompt.context, question: &prompt.question, answer, query_aware })
}

/// Refuses a prompt the model cannot run or an arm that cannot compress it.
pub fn check_arms(model: &Decoder, prompt: &TaskPrompt, arms: &[TaskArm]) -> Result<()> {
    for mode in [false, true] {
        let tokens = press_tokens(prompt, mode)?;
        tokens.check(model)?;
        for arm in arms.iter().filter(|a| a.query_aware == mode) {
            arm.press.check(tokens.prefix_len())?;
        }
    }
    Ok(())
}

/// The candidates scored after the whole prompt, nothing compressed.
pub fn uncompressed(model: &Decoder, prompt: &TaskPrompt) -> Result<CandidateScores> {
    press_tokens(prompt, false)?.check(model)?;
    let mut stream = CacheStream::new(model, Policy::new(Eviction::Dense, 0, PositionMode::Original))?;
    let hidden = stream.run(model, &[&prompt.context[..], &prompt.question[..]].concat())?;
    let last = hidden.narrow(0, hidden.dim(0)? - 1, 1)?;
    score_candidates(model, &stream, &last, &prompt.candidates)
}

/// Every arm on `prompt`, in the order given; `progress(i)` after arm i.
pub fn run_arms(model: &Decoder, prompt: &TaskPrompt, arms: &[TaskArm], progress: &mut dyn FnMut(usize)) -> Result<Vec<ArmOutcome>> {
    check_arms(model, prompt, arms)?;
    let mut out: Vec<Option<ArmOutcome>> = vec![None; arms.len()];
    for mode in [false, true] {
        let tokens = press_tokens(prompt, mode)?;
        let prefix = tokens.prefix();
        let mut todo: Vec<usize> = (0..arms.len()).filter(|&i| arms[i].query_aware == mode).collect();
        // One prefill per kind the presses read, in the order the arms first need it.
        while let Some(&first) = todo.first() {
            let key = arms[first].press.kind.capture_key(prefix.len());
            let prefill = Prefill::new(model, arms[first].press.kind, &prefix)?;
            for i in todo.iter().copied().filter(|&i| arms[i].press.kind.capture_key(prefix.len()) == key) {
                out[i] = Some(one_arm(model, arms[i].press, &prefill, (tokens, prompt))?);
                progress(i);
            }
            todo.retain(|&i| arms[i].press.kind.capture_key(prefix.len()) != key);
        }
    }
    out.into_iter().map(|o| o.ok_or_else(|| Error::Internal("an arm was not run".into()))).collect()
}

fn one_arm(model: &Decoder, press: Press, prefill: &Prefill, (tokens, prompt): (PressTokens, &TaskPrompt)) -> Result<ArmOutcome> {
    let kept = compress(model, press, prefill)?;
    let appended = tokens.appended();
    let m = prompt.candidates[0].len();
    let mut stream = CacheStream::Scored(filled_cache(model, prefill, &kept, press.rerotate, appended.len() + m)?);
    let last = match appended.is_empty() {
        true => prefill.last().clone(),
        false => {
            let hidden = stream.run(model, appended)?;
            hidden.narrow(0, hidden.dim(0)? - 1, 1)?
        }
    };
    let scores = score_candidates(model, &stream, &last, &prompt.candidates)?;
    Ok(ArmOutcome { scores, evidence_kept: evidence_kept(&kept, &prompt.evidence) })
}

/// The share of the evidence's positions kept, over every (layer, KV head).
fn evidence_kept(kept: &[Vec<Vec<usize>>], evidence: &[(usize, usize)]) -> f64 {
    let positions: Vec<usize> = evidence.iter().flat_map(|&(a, b)| a..b).collect();
    let heads: Vec<&Vec<usize>> = kept.iter().flatten().collect();
    if positions.is_empty() || heads.is_empty() {
        return 1.0;
    }
    let held: usize = heads.iter().map(|h| positions.iter().filter(|p| h.binary_search(p).is_ok()).count()).sum();
    held as f64 / (positions.len() * heads.len()) as f64
}
