//! `sinkscope watch TRACE`: sink loss in a serving log — steps down in the rolling token logprob
//! that start just after an eviction — as a summary, JSON, figures, and an exit status for alerting.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::session::Session;
use crate::analysis::sink_loss::{WatchOptions, WatchReport};
use crate::error::Result;
use crate::io::finite_json::to_pretty;
use crate::metrics::changepoint::StepOptions;
use crate::pipeline::watch::{follow, watch_file, Follow};

/// Exit status of `watch` when it finds sink loss (0: none; 2 stays bad input).
pub const SINK_LOSS_EXIT: u8 = 3;

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// The trace: JSONL (`logprob` per line, optional `token`, `cache_len`, `request`, eviction
    /// events), an OpenAI-compatible completion/chat response with logprobs (vLLM, llama.cpp
    /// server) or a list of them, llama.cpp's `completion_probabilities`, sinkscope's
    /// stream.json, or CSV with a `logprob` column.
    pub trace: PathBuf,
    /// The cache budget W, when the trace has no cache events: the token that takes the context
    /// past W is an eviction.
    #[arg(long)]
    pub budget: Option<usize>,
    /// Context tokens before the trace's first token (a prompt it does not list), for --budget.
    #[arg(long, default_value_t = 0)]
    pub prompt_tokens: usize,
    /// Smallest drop of the mean logprob worth an alarm (nats).
    #[arg(long, default_value_t = StepOptions::default().min_step, value_parser = super::counts::positive)]
    pub min_step: f64,
    /// Target false alarms per 10,000 tokens of a steady trace (sets the CUSUM threshold).
    #[arg(long, default_value_t = StepOptions::default().false_alarms_per_10k, value_parser = super::counts::positive)]
    pub false_alarms: f64,
    /// Tokens in the baseline each token is compared with.
    #[arg(long, default_value_t = StepOptions::default().baseline)]
    pub baseline: usize,
    /// A step is sink loss when it starts at most this many tokens after an eviction.
    #[arg(long, default_value_t = WatchOptions::default().max_lag)]
    pub max_lag: usize,
    #[arg(long)]
    pub json: bool,
    /// Write watch.json and a figure per request (PNG and SVG) into this directory.
    #[arg(short = 'o', long)]
    pub out: Option<PathBuf>,
    /// Keep watching the file as it grows, printing new steps as they are found.
    #[arg(long)]
    pub follow: bool,
    /// With --follow: stop after the file has not grown for this many seconds (default: never).
    #[arg(long, value_parser = super::counts::non_negative)]
    pub idle_exit: Option<f64>,
}

pub fn run(args: WatchArgs, s: &mut Session) -> Result<u8> {
    let opts = WatchOptions {
        steps: StepOptions { min_step: args.min_step, baseline: args.baseline, false_alarms_per_10k: args.false_alarms },
        budget: args.budget,
        prompt_tokens: args.prompt_tokens,
        max_lag: args.max_lag,
        ..WatchOptions::default()
    };
    let report = if args.follow {
        s.needs_terminal("watch --follow")?;
        let idle = match args.idle_exit {
            Some(s) if !(s.is_finite() && s >= 0.0) => return Err(crate::error::Error::input("--idle-exit must be a number of seconds ≥ 0")),
            s => s.map(Duration::from_secs_f64),
        };
        let mut printed = 0;
        let on_report = &mut |r: &WatchReport| {
            // Only what is new since the last read.
            let lines: Vec<String> = step_lines(r);
            for l in lines.iter().skip(printed) {
                println!("{l}");
            }
            printed = printed.max(lines.len());
        };
        follow(&args.trace, &opts, Follow { poll: Duration::from_millis(250), idle }, args.out.as_deref(), on_report)?
    } else {
        Some(watch_file(&args.trace, &opts, args.out.as_deref())?)
    };
    let Some(report) = report else { return Ok(0) };
    if s.prints() {
        if args.json {
            println!("{}", to_pretty(&report, "the JSON printed")?);
        } else if !args.follow {
            print!("{}", summary(&report));
        } else {
            println!("{}", report.verdict);
        }
    }
    Ok(if report.sink_loss { SINK_LOSS_EXIT } else { 0 })
}

/// One line per step found, in request order.
fn step_lines(r: &WatchReport) -> Vec<String> {
    r.requests
        .iter()
        .flat_map(|q| {
            q.steps.iter().map(move |s| {
                let when = match (s.eviction, s.lag) {
                    (Some(e), Some(l)) if l < 0 => format!("dated {} tokens before the eviction at token {e}", -l),
                    (Some(e), Some(l)) => format!("{l} tokens after the eviction at token {e}"),
                    _ => "no eviction before it".into(),
                };
                format!(
                    "{} request {:?}: step −{:.2} nats at token {} (alarm at {}; mean logprob {:.2} → {:.2}), {when}",
                    if s.sink_loss { "SINK LOSS" } else { "step     " },
                    q.id,
                    s.step.size,
                    s.step.start,
                    s.step.alarm,
                    s.step.mean_before,
                    s.step.mean_after
                )
            })
        })
        .collect()
}

fn summary(r: &WatchReport) -> String {
    let tokens: usize = r.requests.iter().map(|q| q.tokens).sum();
    let mut s = format!(
        "sinkscope watch — {} request{} ({tokens} tokens, read as {})\n",
        r.requests.len(),
        if r.requests.len() == 1 { "" } else { "s" },
        r.format
    );
    for q in &r.requests {
        s.push_str(&format!(
            "  {:?}: {} tokens, mean logprob {:.3}, {} eviction{} ({}), {} step{}\n",
            q.id,
            q.tokens,
            q.mean_logprob,
            q.evictions.len(),
            if q.evictions.len() == 1 { "" } else { "s" },
            q.eviction_source,
            q.steps.len(),
            if q.steps.len() == 1 { "" } else { "s" }
        ));
    }
    for l in step_lines(r) {
        s.push_str(&format!("{l}\n"));
    }
    for q in &r.requests {
        for t in &q.eviction_tests {
            s.push_str(&format!(
                "{} request {:?}: across the eviction at token {} the mean logprob goes {:.2} → {:.2} (drop {:.2} nats, z = {:.1})\n",
                if t.sink_loss { "SINK LOSS" } else { "eviction " },
                q.id,
                t.eviction,
                t.mean_before,
                t.mean_after,
                t.drop,
                t.z
            ));
        }
    }
    if let Some(p) = &r.pooled {
        s.push_str(&format!(
            "all {} requests' first evictions together: mean drop {:.2} ± {:.2} nats (z = {:.1})\n",
            p.requests, p.mean_drop, p.standard_error, p.z
        ));
    }
    s.push_str(&r.verdict);
    s.push('\n');
    s
}
