//! `sinkscope tasks` as a job: generate the RULER-style prompts from a text, run each
//! uncompressed and under every press arm, and write tasks.json, the table and tasks.md into a run
//! directory, landing together.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::progress::Progress;
use crate::analysis::tasks::{ArmRecord, TaskOutcome, TasksReport};
use crate::error::{Error, Result};
use crate::io::staging::Staging;
use crate::io::{write_atomic, write_json_atomic};
use crate::kv::press::tasks::{check_arms, run_arms, uncompressed, TaskArm};
use crate::kv::retrieval::tasks::{task_prompts, Task, TaskPrompt, TaskSpec};
use crate::kv::retrieval::CandidateScores;
use crate::model::load::LoadedModel;

pub use crate::report::run::TASKS_FILE;
pub const TASKS_MD: &str = "tasks.md";

#[derive(Debug, Clone)]
pub struct TasksOptions {
    /// The text the haystacks and cwe's words come from.
    pub text: PathBuf,
    pub tasks: Vec<Task>,
    pub spec: TaskSpec,
    pub arms: Vec<TaskArm>,
}

fn outcome(arm: usize, prompt: usize, s: &CandidateScores, evidence_kept: f64) -> TaskOutcome {
    TaskOutcome { arm, prompt, rank: s.rank(), exact: s.first_wrong.is_none(), answer_nll: s.nll[0], evidence_kept }
}

/// Every task's prompts, checked against the model and every arm.
fn prompts(lm: &LoadedModel, opts: &TasksOptions) -> Result<Vec<TaskPrompt>> {
    if opts.tasks.is_empty() || opts.arms.is_empty() {
        return Err(Error::input("no task or no press to run: give --task, --press and --ratio"));
    }
    let text = crate::io::text::read_text_file(&opts.text)?;
    let mut out = Vec::new();
    for &task in &opts.tasks {
        out.extend(task_prompts(&lm.tokenizer, &text, task, opts.spec)?);
    }
    for p in &out {
        let tokens = p.context.len() + p.question.len() + p.candidates[0].len();
        if tokens > lm.model.cfg.context_len {
            return Err(Error::input(format!(
                "a {} prompt's {tokens} tokens exceed the model's context of {}; give a shorter --length",
                p.task.name(),
                lm.model.cfg.context_len
            )));
        }
        check_arms(&lm.model, p, &opts.arms)?;
    }
    Ok(out)
}

/// Runs every task prompt uncompressed and under every arm, and writes the run into `out`.
pub fn tasks_into(lm: &mut LoadedModel, opts: &TasksOptions, out: &Path, progress: &mut dyn Progress) -> Result<TasksReport> {
    let started = Instant::now();
    let prompts = prompts(lm, opts)?;
    super::claim_out(lm, Some(out))?;
    let mut seconds = vec![0.0; opts.arms.len() + 1];
    let mut outcomes = Vec::with_capacity(prompts.len() * seconds.len());
    for (i, p) in prompts.iter().enumerate() {
        progress.status(&format!("[{}/{}] {} trial {}", i + 1, prompts.len(), p.task.name(), p.trial));
        let mut clock = Instant::now();
        outcomes.push(outcome(0, i, &uncompressed(&lm.model, p)?, 1.0));
        seconds[0] += clock.elapsed().as_secs_f64();
        clock = Instant::now();
        // An arm's time runs from the previous arm's end: a shared prefill counts with the first
        // arm that reads it.
        let ran = run_arms(&lm.model, p, &opts.arms, &mut |a| {
            seconds[a + 1] += clock.elapsed().as_secs_f64();
            clock = Instant::now();
        })?;
        outcomes.extend(ran.iter().enumerate().map(|(a, o)| outcome(a + 1, i, &o.scores, o.evidence_kept)));
    }
    progress.status("");
    lm.fingerprint()?;
    let none = ArmRecord { label: "none".into(), press: None, query_aware: false, seconds: seconds[0] };
    let arms = std::iter::once(none)
        .chain(opts.arms.iter().zip(&seconds[1..]).map(|(a, &s)| ArmRecord {
            label: a.label(),
            press: Some(a.press),
            query_aware: a.query_aware,
            seconds: s,
        }))
        .collect();
    let report = TasksReport {
        sinkscope_version: env!("CARGO_PKG_VERSION").to_string(),
        model: lm.info.clone(),
        text: opts.text.display().to_string(),
        spec: opts.spec,
        prompts,
        arms,
        outcomes,
        wall_seconds: started.elapsed().as_secs_f64(),
    };
    let stage = Staging::begin(out)?;
    write_json_atomic(&stage.path(TASKS_FILE)?, &report)?;
    #[cfg(feature = "parquet")]
    super::stage_tables(&stage, crate::report::tasks::tables(&report))?;
    write_atomic(&stage.path(TASKS_MD)?, crate::report::tasks::markdown(&report).as_bytes())?;
    stage.commit()?;
    Ok(report)
}
