//! `watch` end to end: read a serving trace, find and date its sink-loss steps, write `watch.json`
//! and a figure per request into a directory when asked, and follow a file that is still growing.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::analysis::sink_loss::{watch, WatchOptions, WatchReport};
use crate::error::{Error, Result};
use crate::io::trace::{parse_trace, read_trace};
use crate::io::write_json_atomic;

/// The report file in `watch -o DIR`.
pub const WATCH_FILE: &str = "watch.json";
/// Requests drawn at most (those with steps first).
pub const MAX_FIGURES: usize = 16;

/// Reads `trace`, watches it, and writes the report (and figures) into `out` when given.
pub fn watch_file(trace: &Path, opts: &WatchOptions, out: Option<&Path>) -> Result<WatchReport> {
    check(opts)?;
    let report = watch(&read_trace(trace)?, opts);
    if let Some(dir) = out {
        write_outputs(&report, dir)?;
    }
    Ok(report)
}

fn check(opts: &WatchOptions) -> Result<()> {
    let s = &opts.steps;
    if !(s.min_step > 0.0 && s.min_step.is_finite()) {
        return Err(Error::input("--min-step must be a positive number of nats"));
    }
    if !(s.false_alarms_per_10k > 0.0 && s.false_alarms_per_10k.is_finite()) {
        return Err(Error::input("--false-alarms must be a positive rate per 10,000 tokens"));
    }
    if s.baseline < 8 {
        return Err(Error::input("--baseline must be at least 8 tokens"));
    }
    if opts.budget == Some(0) {
        return Err(Error::input("--budget must be at least 1 token"));
    }
    Ok(())
}

/// `watch.json`, and `watch-<n>.png` + `.svg` for up to [`MAX_FIGURES`] requests (those with
/// steps first, then in order).
pub fn write_outputs(report: &WatchReport, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::file(dir, format!("cannot create the output directory ({e})")))?;
    write_json_atomic(&dir.join(WATCH_FILE), report)?;
    #[cfg(feature = "plots")]
    {
        let mut order: Vec<usize> = (0..report.requests.len()).collect();
        order.sort_by_key(|&i| (report.requests[i].steps.is_empty(), i));
        for &i in order.iter().take(MAX_FIGURES) {
            let chart = crate::report::figures::watch_chart(&report.requests[i], report.options.rolling, report.options.steps.baseline);
            for ext in ["png", "svg"] {
                crate::report::plot::save(&chart, &dir.join(format!("watch-{i}.{ext}")))?;
            }
        }
    }
    Ok(())
}

/// How `follow` polls and when it stops.
#[derive(Debug, Clone, Copy)]
pub struct Follow {
    pub poll: Duration,
    /// Stop after the file has not grown for this long (`None`: never).
    pub idle: Option<Duration>,
}

/// Watches a growing trace: re-reads it whenever it grows (up to its last complete line, so a
/// line being written is not an error) and calls `on_report` with each new report. Returns the
/// last report when the file has been idle for `follow.idle`.
pub fn follow(
    trace: &Path,
    opts: &WatchOptions,
    follow: Follow,
    out: Option<&Path>,
    on_report: &mut dyn FnMut(&WatchReport),
) -> Result<Option<WatchReport>> {
    check(opts)?;
    // A FIFO's length never grows: it would be watched until the idle limit for nothing.
    crate::io::regular::check(trace).map_err(|e| Error::file(trace, format!("cannot watch ({e})")))?;
    let mut seen = 0u64;
    let mut last_growth = Instant::now();
    let mut last = None;
    loop {
        let len = std::fs::metadata(trace).map_err(|e| Error::file(trace, format!("cannot watch ({e})")))?.len();
        if len != seen {
            seen = len;
            last_growth = Instant::now();
            let bytes = crate::io::regular::read(trace).map_err(|e| Error::file(trace, format!("cannot read ({e})")))?;
            // Up to the last complete line: the writer may be in the middle of one.
            let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(&bytes[..0], |i| &bytes[..=i]);
            let text = std::str::from_utf8(complete).map_err(|_| Error::file(trace, "is not UTF-8 text; a trace is JSON, JSONL or CSV"))?;
            if !text.trim().is_empty() {
                match parse_trace(text) {
                    Ok(t) => {
                        let report = watch(&t, opts);
                        if let Some(dir) = out {
                            write_outputs(&report, dir)?;
                        }
                        on_report(&report);
                        last = Some(report);
                    }
                    // Records without logprobs yet (only events) are not an error while following.
                    Err(why) if why.contains("holds no token logprobs") => {}
                    Err(why) => return Err(Error::file(trace, why)),
                }
            }
        }
        if let Some(idle) = follow.idle.filter(|&idle| last_growth.elapsed() >= idle) {
            if last.is_none() {
                return Err(Error::file(
                    trace,
                    format!("gave no token logprobs in {:.1} s of watching; nothing to judge (is the engine writing this file?)", idle.as_secs_f64()),
                ));
            }
            return Ok(last);
        }
        std::thread::sleep(follow.poll);
    }
}
