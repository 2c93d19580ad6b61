//! The pass-key task's prompts (Mohtashami & Jaggi 2023, the test kvpress and RULER run with
//! generation): a haystack of filler tokens, a needle stating a random 5-digit key inserted at a
//! relative depth, the question, and for scoring the true answer beside distractor keys of the
//! same shape. Only tokens are built here; `kv::retrieval` runs them through a cache.

use crate::error::{Error, Result};
use crate::model::tokenizer::Tokenizer;
use crate::numerics::sampling::XorShift;

/// What the prompt says before the haystack.
const INTRO: &str = "There is a pass key hidden inside a lot of irrelevant text. Find it and remember it.\n\n";
/// The classic filler of the pass-key test, repeated (when no book is given).
pub const REPEATED_FILLER: &str = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
/// The question that ends every prompt; the answer follows it.
const QUESTION: &str = "\n\nWhat is the pass key? The pass key is";
/// Attempts at drawing a key whose needle and answer tokenize like the first trial's.
const DRAWS: usize = 1000;

fn needle_text(key: u32) -> String {
    format!(" The pass key is {key}. Remember it. {key} is the pass key.")
}

fn answer_text(key: u32) -> String {
    format!(" {key}")
}

/// One trial: a key, its needle's tokens, and the candidate answers (`candidates[0]` is the key;
/// all candidates have as many tokens).
#[derive(Debug, Clone, PartialEq)]
pub struct Trial {
    pub key: u32,
    pub needle: Vec<u32>,
    pub candidates: Vec<Vec<u32>>,
    pub distractor_keys: Vec<u32>,
}

/// The parts every prompt of one length shares: `head` (BOS and the intro), the `filler` the
/// needle goes into, and the `question`.
#[derive(Debug, Clone, PartialEq)]
pub struct Haystack {
    pub head: Vec<u32>,
    pub filler: Vec<u32>,
    pub question: Vec<u32>,
    /// Filler indices the needle may go before: 0, the end, and each sentence's start.
    pub boundaries: Vec<usize>,
}

impl Haystack {
    /// The haystack of prompts `length` tokens long with needles of `needle_len` tokens; `filler`
    /// is the filler's text (repeated if it runs short).
    pub fn new(tok: &Tokenizer, filler: &str, length: usize, needle_len: usize) -> Result<Self> {
        let head = tok.encode(INTRO)?;
        let question = tok.encode_plain(QUESTION)?;
        let fixed = head.len() + needle_len + question.len();
        if length <= fixed + 16 {
            return Err(Error::input(format!(
                "a pass-key prompt of {length} tokens leaves no room for filler: the intro, needle and question take {fixed}; use lengths of at least {}",
                fixed + 64
            )));
        }
        let want = length - fixed;
        let text = filler.trim();
        if text.is_empty() {
            return Err(Error::input("the filler text is empty"));
        }
        let mut tokens = tok.encode_plain(&format!(" {text}"))?;
        if tokens.is_empty() {
            return Err(Error::input("the filler text gives no tokens"));
        }
        // A short text (the repeated filler, a small file) is repeated up to the length.
        while tokens.len() < want {
            let again = tokens.clone();
            tokens.extend(again);
        }
        tokens.truncate(want);
        let boundaries = sentence_starts(tok, &tokens);
        Ok(Haystack { head, filler: tokens, question, boundaries })
    }

    /// The filler index nearest to relative `depth` (0: first, 1: last) where a sentence starts.
    pub fn insertion(&self, depth: f64) -> usize {
        // Boundaries hold 0 and the end, so one is always found.
        nearest_start(&self.boundaries, depth.clamp(0.0, 1.0) * self.filler.len() as f64)
    }

    /// Tokens in every prompt with a needle of `needle_len` tokens.
    pub fn prompt_len(&self, needle_len: usize) -> usize {
        self.head.len() + self.filler.len() + needle_len + self.question.len()
    }

    /// The whole prompt with `needle` before filler index `at`.
    pub fn prompt(&self, at: usize, needle: &[u32]) -> Vec<u32> {
        let mut ids = Vec::with_capacity(self.prompt_len(needle.len()));
        ids.extend_from_slice(&self.head);
        ids.extend_from_slice(&self.filler[..at]);
        ids.extend_from_slice(needle);
        ids.extend_from_slice(&self.filler[at..]);
        ids.extend_from_slice(&self.question);
        ids
    }
}

/// The sentence start nearest `target` (ties to the earlier; 0 when there is none).
pub(super) fn nearest_start(starts: &[usize], target: f64) -> usize {
    starts.iter().copied().min_by(|&a, &b| (a as f64 - target).abs().total_cmp(&(b as f64 - target).abs()).then(a.cmp(&b))).unwrap_or(0)
}

/// A random 5-digit key.
pub(super) fn random_key(rng: &mut XorShift) -> u32 {
    10_000 + (rng.next_f64() * 90_000.0) as u32 % 90_000
}

/// Indices i where token i starts a sentence (token i − 1 ends with . ! ? or a line break), with
/// 0 and the end.
pub(super) fn sentence_starts(tok: &Tokenizer, ids: &[u32]) -> Vec<usize> {
    let mut out = vec![0];
    for i in 1..ids.len() {
        let piece = tok.decode(&ids[i - 1..i]);
        let closed = piece.trim_end_matches(['"', '\'', ')', '\u{201d}', '\u{2019}']);
        if piece.ends_with('\n') || closed.ends_with(['.', '!', '?']) {
            out.push(i);
        }
    }
    out.push(ids.len());
    out
}

/// `trials` keys with `distractors` distractor keys each, drawn from `seed`: every needle and
/// every candidate answer has the token count of the first trial's, so all prompts of a length
/// are equally long and candidates differ only in their digits.
pub fn draw_trials(tok: &Tokenizer, trials: usize, distractors: usize, seed: u64) -> Result<Vec<Trial>> {
    let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut key = || random_key(&mut rng);
    let first = key();
    let (needle_len, answer_len) = (tok.encode_plain(&needle_text(first))?.len(), tok.encode_plain(&answer_text(first))?.len());
    let mut shaped = |taken: &[u32]| -> Result<(u32, Vec<u32>)> {
        for _ in 0..DRAWS {
            let k = key();
            let answer = tok.encode_plain(&answer_text(k))?;
            if answer.len() == answer_len && tok.encode_plain(&needle_text(k))?.len() == needle_len && !taken.contains(&k) {
                return Ok((k, answer));
            }
        }
        Err(Error::input("this tokenizer splits 5-digit numbers into varying token counts: no keys of one shape were found for the pass-key test"))
    };
    let mut out = Vec::with_capacity(trials);
    for t in 0..trials {
        let (k, answer) = if t == 0 { (first, tok.encode_plain(&answer_text(first))?) } else { shaped(&[])? };
        let mut candidates = vec![answer];
        let mut distractor_keys = Vec::with_capacity(distractors);
        for _ in 0..distractors {
            let mut taken = distractor_keys.clone();
            taken.push(k);
            let (d, ids) = shaped(&taken)?;
            distractor_keys.push(d);
            candidates.push(ids);
        }
        out.push(Trial { key: k, needle: tok.encode_plain(&needle_text(k))?, candidates, distractor_keys });
    }
    Ok(out)
}
