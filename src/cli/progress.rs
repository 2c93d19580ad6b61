//! The terminal side of [`Progress`]: stage lines and warnings on stderr, transient status lines
//! and progress bars only on a terminal, and (for the demo) each finished stage's table on stdout.

use std::io::{IsTerminal, Write};
use std::time::Instant;

use super::format;
use crate::model::catalog::human_bytes;
use crate::model::fetch::FetchProgress;
use crate::pipeline::progress::{Finished, Progress};

/// Prints a job's progress the way every command does.
pub struct TerminalProgress {
    tty: bool,
    /// Print each finished stage's result (the demo's tables) on stdout.
    show_results: bool,
    /// The current progress bar's label and start.
    bar: Option<(String, Instant)>,
    /// The current transfer: what, bytes done, start.
    transfer: Option<(String, u64, Instant)>,
    /// The warnings printed so far: each is printed once, however often its cause recurs (a
    /// sweep over nine lengths of one short text).
    warned: Vec<String>,
}

impl TerminalProgress {
    pub fn new() -> Self {
        TerminalProgress { tty: std::io::stderr().is_terminal(), show_results: false, bar: None, transfer: None, warned: Vec::new() }
    }

    /// Also prints every finished stage's table, as the demo does.
    pub fn with_results() -> Self {
        TerminalProgress { show_results: true, ..TerminalProgress::new() }
    }
}

impl Default for TerminalProgress {
    fn default() -> Self {
        TerminalProgress::new()
    }
}

impl Progress for TerminalProgress {
    fn stage(&mut self, message: &str) {
        eprintln!("{message}");
    }

    fn status(&mut self, message: &str) {
        if self.tty {
            let mut err = std::io::stderr();
            let _ = write!(err, "\r\x1b[2K{message}");
            let _ = err.flush();
        }
    }

    fn warning(&mut self, message: &str) {
        if !self.warned.iter().any(|w| w == message) {
            eprintln!("warning: {message}");
            self.warned.push(message.to_owned());
        }
    }

    fn steps(&mut self, label: &str, done: usize, total: usize) {
        if self.bar.as_ref().is_none_or(|(l, _)| l != label) {
            self.bar = Some((label.to_string(), Instant::now()));
        }
        let Some((_, start)) = &self.bar else { return };
        if self.tty && (done.is_multiple_of(8) || done == total) {
            let rate = done as f64 / start.elapsed().as_secs_f64().max(1e-9);
            let width = 30;
            let filled = width * done / total.max(1);
            let _ = write!(
                std::io::stderr(),
                "\r\x1b[2K{label} [{}{}] {done}/{total} policy-steps, {rate:.1}/s",
                "#".repeat(filled),
                "-".repeat(width - filled)
            );
            if done == total {
                let _ = writeln!(std::io::stderr());
            }
        }
    }

    fn finished(&mut self, result: Finished<'_>) {
        if !self.show_results {
            return;
        }
        match result {
            Finished::Capture(r) => print!("{}", format::format_table(r)),
            Finished::Analysis(r) => print!("\n{}", format::format_summary(r)),
            Finished::Sweep(r) => print!("\n{}", format::format_recommendation(r)),
            Finished::Export(e) => print!("\n{}", format::format_exported(e)),
        }
    }
}

impl FetchProgress for TerminalProgress {
    fn plan(&mut self, message: &str) {
        eprintln!("{message}");
    }

    fn start(&mut self, what: &str, bytes: u64, from: &str) {
        let size = if bytes > 0 { format!(" ({})", human_bytes(bytes)) } else { String::new() };
        eprintln!("fetching {what}{size} from {from}");
        self.transfer = Some((what.to_string(), 0, Instant::now()));
    }

    fn advance(&mut self, done: u64, total: u64) {
        let Some((what, seen, start)) = &mut self.transfer else { return };
        // Redraw every 1 MB at most.
        let redraw = self.tty && (done >= *seen + (1 << 20) || done == total);
        if done < *seen + (1 << 20) && done != total {
            return;
        }
        *seen = done;
        if !redraw {
            return;
        }
        let rate = done as f64 / start.elapsed().as_secs_f64().max(1e-9);
        let of = if total > 0 { format!(" of {} ({:.0}%)", human_bytes(total), 100.0 * done as f64 / total as f64) } else { String::new() };
        let _ = write!(std::io::stderr(), "\r\x1b[2K{what}: {}{of}, {}/s", human_bytes(done), human_bytes(rate as u64));
        let _ = std::io::stderr().flush();
    }

    fn end(&mut self) {
        if let Some((what, done, start)) = self.transfer.take() {
            if self.tty {
                let _ = writeln!(std::io::stderr());
            }
            let secs = start.elapsed().as_secs_f64();
            if done > 0 {
                eprintln!("{what}: {} in {secs:.1}s", human_bytes(done));
            }
        }
    }

    fn fallback(&mut self, why: &str) {
        eprintln!("warning: {why}; trying the next source");
    }
}
