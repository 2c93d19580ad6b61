//! A task sweep as files: the table `task_trials` (one row per arm and prompt) and tasks.md (per
//! arm and task the share ranked first / reproduced exactly, the answer's NLL change and the
//! evidence kept).

use super::tables::{Builder, Meta, Table};
use crate::analysis::tasks::{TaskOutcome, TasksReport};

/// `task_trials`.
pub fn tables(r: &TasksReport) -> Vec<Table> {
    let m = Meta { model: r.model.display_name(), sha256: r.model.sha256.clone().unwrap_or_default(), version: r.sinkscope_version.clone() };
    let arm = |o: &TaskOutcome| &r.arms[o.arm];
    let prompt = |o: &TaskOutcome| &r.prompts[o.prompt];
    let trials = Builder::new(&r.outcomes, &m)
        .str("arm", |o: &TaskOutcome| arm(o).label.clone())
        .str("press", |o| arm(o).press.map_or("none".to_string(), |p| p.kind.name().to_string()))
        .f64("ratio", |o| arm(o).press.map_or(0.0, |p| p.ratio))
        .u32("sinks", |o| arm(o).press.map_or(0, |p| p.sinks))
        .str("budget", |o| arm(o).press.map_or("none".to_string(), |p| p.budget.name().to_string()))
        .opt_u32("block", |o| arm(o).press.and_then(|p| p.block))
        .bool("query_aware", |o| arm(o).query_aware)
        .str("task", |o| prompt(o).task.name().to_string())
        .u32("trial", |o| prompt(o).trial)
        .u32("prompt_tokens", |o| prompt(o).context.len() + prompt(o).question.len())
        .u32("candidates", |o| prompt(o).candidates.len())
        .u32("rank", |o| o.rank)
        .bool("exact", |o| o.exact)
        .f64("answer_nll", |o| o.answer_nll)
        .f64("evidence_kept", |o| o.evidence_kept)
        .build("task_trials");
    vec![trials]
}

/// tasks.md: the prompts, then per arm and task "first / exact" and the mean NLL change.
pub fn markdown(r: &TasksReport) -> String {
    let tasks = r.tasks();
    let mut s = format!("# RULER-style tasks under presses: {}\n\n", r.model.display_name());
    s += &format!(
        "{} prompts per task of {} tokens (context and question; haystacks from {}), each truth ranked among {} candidates (chance {:.0}%). Per arm and task: the share of prompts whose truth ranked first / that greedy decoding reproduced; then the truth's NLL change against the uncompressed prompt (nats, mean over prompts) and the share of the evidence's positions kept.\n\n",
        r.spec.trials,
        r.spec.length,
        r.text,
        r.spec.distractors + 1,
        100.0 / (r.spec.distractors + 1) as f64
    );
    s += "| arm | ratio |";
    for t in &tasks {
        s += &format!(" {} first/exact | Δ NLL | evidence |", t.name());
    }
    s += "\n|---|---|";
    s += &"---|---|---|".repeat(tasks.len());
    s += "\n";
    // The uncompressed arm's cells, once: every row is measured against them.
    let base: Vec<_> = tasks.iter().map(|&t| r.cell(0, t)).collect();
    for (a, arm) in r.arms.iter().enumerate() {
        s += &format!("| {} | {} |", arm.label, arm.press.map_or("-".to_string(), |p| p.ratio.to_string()));
        for (&t, base) in tasks.iter().zip(&base) {
            match (r.cell(a, t), base) {
                (Some(c), Some(base)) => {
                    s += &format!(
                        " {:.0}% / {:.0}% | {:+.3} | {:.0}% |",
                        100.0 * c.first,
                        100.0 * c.exact,
                        c.answer_nll - base.answer_nll,
                        100.0 * c.evidence_kept
                    )
                }
                _ => s += " - | - | - |",
            }
        }
        s += "\n";
    }
    s
}
