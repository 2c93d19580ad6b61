//! `sinkscope tasks -m MODEL -f TEXT --press P --ratio R -o DIR`: RULER-style tasks (pass key,
//! several keys, several values, variable tracking, common words) generated from a text, every
//! prompt run uncompressed and under each press arm, scored as `needle` scores.

use std::path::PathBuf;

use clap::Args;

use super::model_args::ModelArgs;
use super::press::PressList;
use super::session::Session;
use crate::analysis::tasks::TasksReport;
use crate::error::{Error, Result};
use crate::io::finite_json::to_pretty;
use crate::io::staging::check_out_dir;
use crate::kv::press::select::{Budget, ADAPTIVE_ALPHA};
use crate::kv::press::tasks::TaskArm;
use crate::kv::press::Press;
use crate::kv::retrieval::tasks::{Task, TaskSpec};
use crate::pipeline::tasks::{tasks_into, TasksOptions, TASKS_MD};

#[derive(Args, Debug)]
pub struct TasksArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The text the haystacks are cut from and cwe's words drawn from (a book; repeated if short).
    #[arg(short = 'f', long, value_name = "FILE")]
    pub file: PathBuf,
    /// Tasks, comma-separated: passkey, multikey, multivalue, vartrack, cwe.
    #[arg(long = "task", value_delimiter = ',', default_value = "passkey,multikey,multivalue,vartrack,cwe")]
    pub tasks: Vec<String>,
    /// Tokens of each prompt's context and question.
    #[arg(long, default_value_t = 1024, value_parser = super::counts::at_least_one)]
    pub length: usize,
    /// Prompts per task.
    #[arg(long, default_value_t = 3, value_parser = super::counts::at_least_one)]
    pub trials: usize,
    /// Wrong answers each truth is ranked against.
    #[arg(long, default_value_t = 9)]
    pub distractors: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub list: PressList,
    /// Also run each press with this many first positions pinned (beside its own: 4 for
    /// streaming_llm and expected_attention, 0 for the rest).
    #[arg(long)]
    pub sinks: Option<usize>,
    /// Also run each uniform-budget press in whole blocks of B positions (ChunkKV; vLLM's 16).
    #[arg(long, value_name = "B", value_parser = super::counts::at_least_one)]
    pub block: Option<usize>,
    /// Also run each uniform-budget press under AdaKV's head-adaptive budgets (α = 0.2).
    #[arg(long)]
    pub adaptive: bool,
    /// Also run each arm query-aware (the question compressed with the context).
    #[arg(long)]
    pub query_aware: bool,
    /// Print the record as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// The run directory (tasks.json, tasks.md, tables/task_trials.parquet).
    #[arg(short = 'o', long)]
    pub out: PathBuf,
}

impl TasksArgs {
    fn tasks(&self) -> Result<Vec<Task>> {
        let mut out = Vec::new();
        for name in &self.tasks {
            let t = Task::parse(name.trim())
                .ok_or_else(|| Error::input(format!("--task {name}: no such task (expected passkey, multikey, multivalue, vartrack, cwe)")))?;
            if !out.contains(&t) {
                out.push(t);
            }
        }
        Ok(out)
    }

    /// Each press × ratio, with its own sinks and --sinks, token by token and in --block
    /// blocks, uniform and --adaptive, query-agnostic and --query-aware.
    fn arms(&self) -> Result<Vec<TaskArm>> {
        let mut out = Vec::new();
        for (kind, budget) in self.list.kinds()? {
            for &ratio in &self.list.ratios {
                let base = Press { budget, ..Press::new(kind, ratio) };
                let sinks = std::iter::once(base.sinks).chain(self.sinks.filter(|&s| s != base.sinks));
                for sinks in sinks {
                    let mut variants = vec![Press { sinks, ..base }];
                    if budget == Budget::Uniform {
                        variants.extend(self.block.map(|b| Press { sinks, block: Some(b), ..base }));
                        if self.adaptive {
                            variants.push(Press { sinks, budget: Budget::Adaptive { alpha: ADAPTIVE_ALPHA }, ..base });
                        }
                    }
                    for press in variants {
                        for query_aware in std::iter::once(false).chain(self.query_aware.then_some(true)) {
                            let arm = TaskArm { press, query_aware };
                            if !out.contains(&arm) {
                                out.push(arm);
                            }
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}

pub fn run(args: TasksArgs, s: &mut Session) -> Result<()> {
    check_out_dir(&args.out)?;
    let opts = TasksOptions {
        text: args.file.clone(),
        tasks: args.tasks()?,
        spec: TaskSpec { length: args.length, trials: args.trials, distractors: args.distractors, seed: args.seed },
        arms: args.arms()?,
    };
    let (lm, progress) = s.model(&args.model)?;
    let report = tasks_into(lm, &opts, &args.out, progress)?;
    if !s.prints() {
        return Ok(());
    }
    if args.json {
        println!("{}", to_pretty(&report, "the JSON printed")?);
        return Ok(());
    }
    print!("{}", summary(&report));
    println!("per-task tables in {}; one row per arm and prompt in tables/task_trials.parquet", args.out.join(TASKS_MD).display());
    Ok(())
}

/// Per arm: each task's "first/exact" shares and the mean NLL change over every prompt.
fn summary(r: &TasksReport) -> String {
    let tasks = r.tasks();
    let width = r.arms.iter().map(|a| a.label.chars().count()).max().unwrap_or(4).max(4);
    let mut out = format!(
        "sinkscope tasks — {}: {} prompts of {} tokens per task, truth ranked among {}; per task: ranked first / reproduced exactly\n",
        r.model.display_name(),
        r.spec.trials,
        r.spec.length,
        r.spec.distractors + 1
    );
    out += &format!("  {:<width$} {:>5}", "arm", "ratio");
    for t in &tasks {
        out += &format!(" {:>12}", t.name());
    }
    out += &format!(" {:>8} {:>9} {:>8}\n", "Δ NLL", "evidence", "seconds");
    let base: Vec<_> = tasks.iter().map(|&t| r.cell(0, t)).collect();
    for (a, arm) in r.arms.iter().enumerate() {
        out += &format!("  {:<width$} {:>5}", arm.label, arm.press.map_or("-".to_string(), |p| p.ratio.to_string()));
        let (mut delta, mut kept, mut n) = (0.0, 0.0, 0usize);
        for (&t, base) in tasks.iter().zip(&base) {
            let (Some(c), Some(base)) = (r.cell(a, t), base) else { continue };
            out += &format!(" {:>12}", format!("{:.0}%/{:.0}%", 100.0 * c.first, 100.0 * c.exact));
            delta += (c.answer_nll - base.answer_nll) * c.prompts as f64;
            kept += c.evidence_kept * c.prompts as f64;
            n += c.prompts;
        }
        let n = n.max(1) as f64;
        out += &format!(" {:>+8.3} {:>8.0}% {:>8.1}\n", delta / n, 100.0 * kept / n, arm.seconds);
    }
    out
}
