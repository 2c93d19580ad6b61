//! RULER-style synthetic tasks (Hsieh et al. 2024), generated from a text so presses are compared
//! on more than one pass key: `passkey` (one key in the haystack), `multikey` (four keys for four
//! names, one asked for: the others are in-context distractors), `multivalue` (four keys for one
//! name, all asked for in order), `vartrack` (a chain of five variable assignments beside a
//! distractor chain; the value of the chain's last variable asked for) and `cwe` (a numbered list
//! of the text's words, the three most frequent asked for). Each prompt is a context (BOS, an intro, the
//! haystack), a question, and candidate answers of one token length (`candidates[0]` the truth),
//! scored as `needle` scores them. Only tokens are built here; RULER's own data is not used.

use serde::{Deserialize, Serialize};

use super::haystack::{nearest_start, random_key, sentence_starts};
use crate::error::{Error, Result};
use crate::model::tokenizer::Tokenizer;
use crate::numerics::sampling::XorShift;

/// Attempts at drawing a key (or a distractor answer) of the truth's token shape.
const DRAWS: usize = 1000;
/// Needles of the multi-key and multi-value tasks; hops of the variable chain.
const NEEDLES: usize = 4;
const CHAIN: usize = 5;
/// Names the multi-key and multi-value needles file their keys under.
const NAMES: [&str; 12] = ["apple", "river", "garden", "window", "silver", "forest", "candle", "harbor", "meadow", "lantern", "marble", "thunder"];

/// A task, by RULER's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Task {
    Passkey,
    Multikey,
    Multivalue,
    Vartrack,
    Cwe,
}

impl Task {
    pub const ALL: [Task; 5] = [Task::Passkey, Task::Multikey, Task::Multivalue, Task::Vartrack, Task::Cwe];

    pub fn name(self) -> &'static str {
        match self {
            Task::Passkey => "passkey",
            Task::Multikey => "multikey",
            Task::Multivalue => "multivalue",
            Task::Vartrack => "vartrack",
            Task::Cwe => "cwe",
        }
    }

    pub fn parse(s: &str) -> Option<Task> {
        Task::ALL.into_iter().find(|t| t.name() == s)
    }
}

/// One prompt of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskPrompt {
    pub task: Task,
    pub trial: usize,
    /// BOS, the intro and the haystack with the needles in it.
    pub context: Vec<u32>,
    pub question: Vec<u32>,
    /// The candidate answers, all of one token length; `[0]` is the truth.
    pub candidates: Vec<Vec<u32>>,
    /// The true answer's text.
    pub truth: String,
    /// Context spans `[start, end)` that state the answer (the needles the question needs).
    pub evidence: Vec<(usize, usize)>,
}

/// How many prompts of what size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// Tokens of context and question together (cwe's list stops at the last whole entry).
    pub length: usize,
    pub trials: usize,
    /// Wrong candidates each truth is ranked against.
    pub distractors: usize,
    pub seed: u64,
}

/// `spec.trials` prompts of `task` with haystacks cut from `text` (repeated if short).
pub fn task_prompts(tok: &Tokenizer, text: &str, task: Task, spec: TaskSpec) -> Result<Vec<TaskPrompt>> {
    let mut rng = XorShift((spec.seed ^ (task as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03)).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let filler = Filler::new(tok, text, spec.length.saturating_mul(spec.trials.max(1)))?;
    let mut out = Vec::with_capacity(spec.trials);
    for trial in 0..spec.trials {
        let mut p = match task {
            Task::Cwe => cwe(tok, &filler, spec, &mut rng)?,
            _ => needles(tok, &filler, task, (spec, trial), &mut rng)?,
        };
        p.trial = trial;
        out.push(p);
    }
    Ok(out)
}

/// The text's tokens (enough for every trial's haystack) and its distinct single-token words.
struct Filler {
    tokens: Vec<u32>,
    words: Vec<(String, u32)>,
}

impl Filler {
    fn new(tok: &Tokenizer, text: &str, want: usize) -> Result<Self> {
        let text = text.trim();
        if text.is_empty() {
            return Err(Error::input("the task's text is empty"));
        }
        let mut tokens = tok.encode_prefix(text, want)?;
        if let Some(b) = tok.bos().filter(|b| tokens.first() == Some(b)) {
            tokens.retain(|&t| t != b);
        }
        if tokens.is_empty() {
            return Err(Error::input("the task's text gives no tokens"));
        }
        while tokens.len() < want {
            tokens.extend(tokens.clone());
        }
        let mut words: Vec<(String, u32)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for w in text.split(|c: char| !c.is_ascii_alphabetic()).take(200_000) {
            let w = w.to_ascii_lowercase();
            if (4..=10).contains(&w.len()) && seen.insert(w.clone()) {
                if let [id] = tok.encode_plain(&format!(" {w}"))?[..] {
                    words.push((w, id));
                }
            }
            if words.len() >= 400 {
                break;
            }
        }
        Ok(Filler { tokens, words })
    }

    /// `n` filler tokens for one trial, from a place that differs per trial.
    fn window(&self, n: usize, rng: &mut XorShift) -> Vec<u32> {
        let start = (rng.next_f64() * self.tokens.len() as f64) as usize % self.tokens.len();
        self.tokens.iter().cycle().skip(start).take(n).copied().collect()
    }
}

/// Draws 5-digit keys whose " {key}" has the first drawn key's token count.
struct Keys<'a> {
    tok: &'a Tokenizer,
    shape: Option<usize>,
}

impl Keys<'_> {
    fn draw(&mut self, rng: &mut XorShift, taken: &[u32]) -> Result<u32> {
        for _ in 0..DRAWS {
            let k = random_key(rng);
            let len = self.tok.encode_plain(&format!(" {k}"))?.len();
            if !taken.contains(&k) && *self.shape.get_or_insert(len) == len {
                return Ok(k);
            }
        }
        Err(Error::input("this tokenizer splits 5-digit numbers into varying token counts: no keys of one shape were found for the task"))
    }

    /// `n` distinct keys, none in `taken`.
    fn draw_many(&mut self, rng: &mut XorShift, n: usize, taken: &[u32]) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let all: Vec<u32> = taken.iter().chain(&out).copied().collect();
            out.push(self.draw(rng, &all)?);
        }
        Ok(out)
    }
}

/// What a needle task says: the intro, the needles in the order they appear, the question, the
/// true answer, the wrong answers to rank it against, and which needles state the answer.
struct NeedleTask {
    intro: &'static str,
    needles: Vec<String>,
    question: String,
    truth: String,
    wrong: Vec<String>,
    evidence: Vec<usize>,
}

fn needles(tok: &Tokenizer, filler: &Filler, task: Task, (spec, trial): (TaskSpec, usize), rng: &mut XorShift) -> Result<TaskPrompt> {
    let mut keys = Keys { tok, shape: None };
    let d = spec.distractors;
    let key_text = |k: u32| format!(" {k}");
    let t = match task {
        Task::Passkey => {
            let k = keys.draw_many(rng, 1 + d, &[])?;
            NeedleTask {
                intro: "There is a pass key hidden inside a lot of irrelevant text. Find it and remember it.\n\n",
                needles: vec![format!(" The pass key is {}. Remember it. {} is the pass key.", k[0], k[0])],
                question: "\n\nWhat is the pass key? The pass key is".into(),
                truth: key_text(k[0]),
                wrong: k[1..].iter().map(|&k| key_text(k)).collect(),
                evidence: vec![0],
            }
        }
        Task::Multikey => {
            let names = pick(rng, &NAMES, NEEDLES);
            let k = keys.draw_many(rng, NEEDLES.max(1 + d), &[])?;
            let q = (rng.next_f64() * NEEDLES as f64) as usize % NEEDLES;
            // The other needles' keys first: the hardest distractors are in the context.
            let wrong = (0..NEEDLES).filter(|&i| i != q).chain(NEEDLES..k.len()).take(d).map(|i| key_text(k[i])).collect();
            NeedleTask {
                intro: "Some special pass keys are hidden inside a lot of irrelevant text. Find them and remember them.\n\n",
                needles: (0..NEEDLES).map(|i| format!(" The pass key for {} is {}.", names[i], k[i])).collect(),
                question: format!("\n\nWhat is the pass key for {}? The pass key for {} is", names[q], names[q]),
                truth: key_text(k[q]),
                wrong,
                evidence: vec![q],
            }
        }
        Task::Multivalue => {
            let name = pick(rng, &NAMES, 1)[0];
            let k = keys.draw_many(rng, NEEDLES, &[])?;
            let list = |k: &[u32]| format!(" {}, {}, {} and {}", k[0], k[1], k[2], k[3]);
            // Each wrong answer replaces one of the values with a key the context does not hold.
            let extra = keys.draw_many(rng, d, &k)?;
            let wrong = extra
                .iter()
                .enumerate()
                .map(|(i, &e)| {
                    let mut w = k.clone();
                    w[i % NEEDLES] = e;
                    list(&w)
                })
                .collect();
            NeedleTask {
                intro: "Some special pass keys are hidden inside a lot of irrelevant text. Find them and remember them.\n\n",
                needles: k.iter().map(|k| format!(" One of the pass keys for {name} is {k}.")).collect(),
                question: format!("\n\nWhat are all the pass keys for {name}? The pass keys for {name} are"),
                truth: list(&k),
                wrong,
                evidence: (0..NEEDLES).collect(),
            }
        }
        Task::Vartrack => vartrack(&mut keys, rng, d)?,
        Task::Cwe => return Err(Error::Internal("cwe is not a needle task".into())),
    };
    assemble(tok, filler, t, (task, spec, trial), rng)
}

/// Two chains of `CHAIN` assignments (" VAR ABCDE = 12345." then " VAR FGHIJ = VAR ABCDE." …),
/// interleaved; the value of the first chain's last variable is asked for.
fn vartrack(keys: &mut Keys, rng: &mut XorShift, d: usize) -> Result<NeedleTask> {
    let k = keys.draw_many(rng, 1 + d.max(1), &[])?;
    let mut names: Vec<String> = Vec::with_capacity(2 * CHAIN);
    while names.len() < 2 * CHAIN {
        let n: String = (0..5).map(|_| (b'A' + ((rng.next_f64() * 26.0) as u8).min(25)) as char).collect();
        if !names.contains(&n) {
            names.push(n);
        }
    }
    let statement = |chain: usize, hop: usize| match hop {
        0 => format!(" VAR {} = {}.", names[chain * CHAIN], k[chain]),
        _ => format!(" VAR {} = VAR {}.", names[chain * CHAIN + hop], names[chain * CHAIN + hop - 1]),
    };
    // A random interleaving that keeps each chain in order.
    let mut order: Vec<usize> = [0; CHAIN].into_iter().chain([1; CHAIN]).collect();
    shuffle(rng, &mut order);
    let mut hops = [0usize; 2];
    let (mut needles, mut evidence) = (Vec::new(), Vec::new());
    for (i, &chain) in order.iter().enumerate() {
        needles.push(statement(chain, hops[chain]));
        hops[chain] += 1;
        if chain == 0 {
            evidence.push(i);
        }
    }
    let last = &names[CHAIN - 1];
    Ok(NeedleTask {
        intro: "Memorize and track the chains of variable assignments hidden in the following text.\n\n",
        needles,
        question: format!("\n\nWhat is the value of VAR {last}? The value of VAR {last} is"),
        truth: format!(" {}", k[0]),
        wrong: k[1..].iter().take(d).map(|k| format!(" {k}")).collect(),
        evidence,
    })
}

/// The context: BOS and the intro, then the filler with the needles at random sentence starts in
/// their order; the prompt (context and question) is `spec.length` tokens.
fn assemble(tok: &Tokenizer, filler: &Filler, t: NeedleTask, (task, spec, trial): (Task, TaskSpec, usize), rng: &mut XorShift) -> Result<TaskPrompt> {
    let head = tok.encode(t.intro)?;
    let question = tok.encode_plain(&t.question)?;
    let needles: Vec<Vec<u32>> = t.needles.iter().map(|n| tok.encode_plain(n)).collect::<Result<_>>()?;
    let fixed = head.len() + question.len() + needles.iter().map(Vec::len).sum::<usize>();
    if spec.length < fixed + 32 {
        return Err(Error::input(format!(
            "a {} prompt of {} tokens leaves no room for its haystack: the intro, needles and question take {fixed}; use a length of at least {}",
            task.name(),
            spec.length,
            fixed + 64
        )));
    }
    let hay = filler.window(spec.length - fixed, rng);
    let starts = sentence_starts(tok, &hay);
    let mut at: Vec<usize> = (0..needles.len()).map(|_| nearest_start(&starts, rng.next_f64() * hay.len() as f64)).collect();
    at.sort_unstable();
    let mut context = head;
    let mut evidence = Vec::new();
    let mut from = 0;
    for (i, (needle, &a)) in needles.iter().zip(&at).enumerate() {
        context.extend_from_slice(&hay[from..a]);
        from = a;
        if t.evidence.contains(&i) {
            evidence.push((context.len(), context.len() + needle.len()));
        }
        context.extend_from_slice(needle);
    }
    context.extend_from_slice(&hay[from..]);
    let candidates = shaped(tok, &t.truth, &t.wrong)?;
    Ok(TaskPrompt { task, trial, context, question, candidates, truth: t.truth, evidence })
}

/// The truth's and the wrong answers' tokens; each must have the truth's token count.
fn shaped(tok: &Tokenizer, truth: &str, wrong: &[String]) -> Result<Vec<Vec<u32>>> {
    let mut out = vec![tok.encode_plain(truth)?];
    for w in wrong {
        let ids = tok.encode_plain(w)?;
        if ids.len() != out[0].len() {
            return Err(Error::input(format!(
                "this tokenizer gives \"{}\" and \"{}\" different token counts; the candidates of a task must be of one length",
                truth.trim(),
                w.trim()
            )));
        }
        out.push(ids);
    }
    Ok(out)
}

/// How often the three most common words of cwe's list appear, against 1 for each other word.
const CWE_WEIGHTS: [usize; 3] = [4, 3, 2];

/// Common-word extraction: a numbered list of the text's words (" 1. word 2. word …"), three
/// appearing 4, 3 and 2 times as often as each of the others; the answer names those three, most
/// common first (" w1, w2 and w3"). Wrong answers swap two of them or put another of the list's
/// words in one's place. Candidates are joined from the words' single tokens.
fn cwe(tok: &Tokenizer, filler: &Filler, spec: TaskSpec, rng: &mut XorShift) -> Result<TaskPrompt> {
    let kinds = 3 + spec.distractors.max(1);
    if filler.words.len() < kinds {
        return Err(Error::input(format!(
            "cwe draws {kinds} distinct single-token words from the text, which has only {}: give a longer text (-f) or fewer --distractors",
            filler.words.len()
        )));
    }
    let words = pick(rng, &filler.words, kinds);
    let mut context =
        tok.encode("Below is a numbered list of words. Some of them appear more often than others. Memorize the ones that appear most often.\n")?;
    let question = tok.encode_plain(
        "\n\nQuestion: What are the three most common words in the list above, most common first? Answer: The three most common words in the list are",
    )?;
    // Entries that fit: each is its number's tokens and the word's one.
    let mut numbers = Vec::new();
    let mut used = context.len() + question.len();
    loop {
        let number = tok.encode_plain(&format!(" {}.", numbers.len() + 1))?;
        if used + number.len() + 1 > spec.length {
            break;
        }
        used += number.len() + 1;
        numbers.push(number);
    }
    let e = numbers.len();
    let units = CWE_WEIGHTS.iter().sum::<usize>() + kinds - 3;
    if e < 2 * units {
        return Err(Error::input(format!(
            "a cwe prompt of {} tokens holds {e} entries, too few for {kinds} words; give a longer --length",
            spec.length
        )));
    }
    // Word i of the top three takes its weight's share of the entries; the rest share what is left.
    let unit = e / units;
    let mut entries: Vec<usize> = CWE_WEIGHTS.iter().enumerate().flat_map(|(i, &w)| std::iter::repeat_n(i, w * unit)).collect();
    let top = entries.len();
    entries.extend((0..e - top).map(|i| 3 + i % (kinds - 3)));
    shuffle(rng, &mut entries);
    let mut evidence = Vec::new();
    for (number, &w) in numbers.iter().zip(&entries) {
        context.extend_from_slice(number);
        if w < 3 {
            evidence.push((context.len(), context.len() + 1));
        }
        context.push(words[w].1);
    }
    let (comma, and) = (tok.encode_plain(",")?, tok.encode_plain(" and")?);
    let answer = |w: [usize; 3]| -> Vec<u32> { [&[words[w[0]].1][..], &comma, &[words[w[1]].1], &and, &[words[w[2]].1]].concat() };
    let mut candidates = vec![answer([0, 1, 2])];
    for i in 0..spec.distractors {
        let wrong = match i {
            0 => [1, 0, 2],
            1 => [0, 2, 1],
            2 => [2, 1, 0],
            _ => {
                let mut w = [0, 1, 2];
                w[(i - 3) % 3] = 3 + (i - 3) % (kinds - 3);
                w
            }
        };
        candidates.push(answer(wrong));
    }
    let truth = format!(" {}, {} and {}", words[0].0, words[1].0, words[2].0);
    Ok(TaskPrompt { task: Task::Cwe, trial: 0, context, question, candidates, truth, evidence })
}

/// `n` distinct items of `from` in a random order.
fn pick<T: Clone>(rng: &mut XorShift, from: &[T], n: usize) -> Vec<T> {
    let mut idx: Vec<usize> = (0..from.len()).collect();
    shuffle(rng, &mut idx);
    idx.into_iter().take(n).map(|i| from[i].clone()).collect()
}

fn shuffle<T>(rng: &mut XorShift, v: &mut [T]) {
    for i in (1..v.len()).rev() {
        let j = (rng.next_f64() * (i + 1) as f64) as usize % (i + 1);
        v.swap(i, j);
    }
}
