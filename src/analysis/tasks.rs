//! `tasks`'s record (tasks.json): the RULER-style prompts a sweep ran (their tokens, truths and
//! evidence), every press arm's outcome on each — the truth's rank among the candidates, greedy
//! exact match, the truth's NLL, the share of the evidence kept — beside the prompt uncompressed,
//! and the per (arm, task) summaries the printout, tables and Markdown show.

use serde::{Deserialize, Serialize};

use crate::kv::press::Press;
use crate::kv::retrieval::tasks::{Task, TaskPrompt, TaskSpec};
use crate::model::info::ModelInfo;

/// One arm of the sweep; `press` is `None` for the prompt run uncompressed ("none").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArmRecord {
    pub label: String,
    pub press: Option<Press>,
    pub query_aware: bool,
    /// Seconds this arm took over every prompt (prefills shared with other arms not counted).
    pub seconds: f64,
}

/// One arm on one prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskOutcome {
    /// Indices into the record's `arms` and `prompts`.
    pub arm: usize,
    pub prompt: usize,
    /// The truth's rank among the candidates (1: none as likely).
    pub rank: usize,
    /// Greedy decoding reproduces the truth.
    pub exact: bool,
    /// The truth's NLL summed over its tokens (nats).
    pub answer_nll: f64,
    /// The share of the evidence's positions kept over every (layer, KV head) (1 uncompressed).
    pub evidence_kept: f64,
}

/// The whole record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TasksReport {
    pub sinkscope_version: String,
    pub model: ModelInfo,
    /// The text the haystacks and cwe's words come from.
    pub text: String,
    pub spec: TaskSpec,
    pub prompts: Vec<TaskPrompt>,
    pub arms: Vec<ArmRecord>,
    pub outcomes: Vec<TaskOutcome>,
    pub wall_seconds: f64,
}

/// One arm on one task, over its prompts.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskCell {
    pub prompts: usize,
    /// Shares of prompts whose truth ranked first, and that greedy decoding reproduced.
    pub first: f64,
    pub exact: f64,
    /// Means over the prompts.
    pub answer_nll: f64,
    pub evidence_kept: f64,
}

impl TasksReport {
    /// The tasks the record holds, in the order first run.
    pub fn tasks(&self) -> Vec<Task> {
        let mut out: Vec<Task> = Vec::new();
        for p in &self.prompts {
            if !out.contains(&p.task) {
                out.push(p.task);
            }
        }
        out
    }

    /// Arm `arm`'s summary on `task` (`None`: no prompt of it).
    pub fn cell(&self, arm: usize, task: Task) -> Option<TaskCell> {
        let of: Vec<&TaskOutcome> = self.outcomes.iter().filter(|o| o.arm == arm && self.prompts[o.prompt].task == task).collect();
        let n = of.len();
        let mean = |f: &dyn Fn(&TaskOutcome) -> f64| of.iter().map(|o| f(o)).sum::<f64>() / n as f64;
        (n > 0).then(|| TaskCell {
            prompts: n,
            first: mean(&|o| (o.rank == 1) as u8 as f64),
            exact: mean(&|o| o.exact as u8 as f64),
            answer_nll: mean(&|o| o.answer_nll),
            evidence_kept: mean(&|o| o.evidence_kept),
        })
    }

    /// What a record read back must hold: arms and prompts that its outcomes index, one outcome
    /// per (arm, prompt), ranks within the candidates, finite NLLs ≥ 0, evidence shares in [0, 1].
    /// The first violation, named.
    pub fn check(&self) -> Result<(), String> {
        for (i, p) in self.prompts.iter().enumerate() {
            let m = p.candidates.first().map_or(0, Vec::len);
            if p.context.is_empty() || p.question.is_empty() || m == 0 || p.candidates.iter().any(|c| c.len() != m) {
                return Err(format!("prompts[{i}]: a context, a question and candidates of one non-zero length are needed"));
            }
            if p.evidence.iter().any(|&(a, b)| a >= b || b > p.context.len()) {
                return Err(format!("prompts[{i}]: an evidence span lies outside the context"));
            }
        }
        if self.outcomes.len() != self.arms.len() * self.prompts.len() {
            return Err(format!("holds {} outcomes for {} arms × {} prompts", self.outcomes.len(), self.arms.len(), self.prompts.len()));
        }
        let mut seen = std::collections::HashSet::new();
        for (i, o) in self.outcomes.iter().enumerate() {
            if !seen.insert((o.arm, o.prompt)) {
                return Err(format!("outcomes[{i}] repeats arm {} on prompt {}", o.arm, o.prompt));
            }
            let Some(p) = self.prompts.get(o.prompt).filter(|_| o.arm < self.arms.len()) else {
                return Err(format!("outcomes[{i}] names an arm or prompt the record does not hold"));
            };
            if o.rank == 0
                || o.rank > p.candidates.len()
                || !o.answer_nll.is_finite()
                || o.answer_nll < 0.0
                || !(0.0..=1.0).contains(&o.evidence_kept)
            {
                return Err(format!("outcomes[{i}]: a rank within the candidates, a finite NLL ≥ 0 and an evidence share in [0, 1] are needed"));
            }
        }
        Ok(())
    }
}
