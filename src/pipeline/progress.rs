//! How a long job tells its caller what it is doing, without printing anything itself: the CLI
//! turns these calls into terminal output; tests and library users may stay silent.

use crate::analysis::AnalysisReport;
use crate::kv::recommend::Recommendation;
use crate::report::export::Exported;
use crate::report::records::CaptureReport;

/// A result a multi-stage job has just finished (the demo prints each as it comes).
pub enum Finished<'a> {
    Capture(&'a CaptureReport),
    Analysis(&'a AnalysisReport),
    Sweep(&'a Recommendation),
    Export(&'a Exported),
}

/// Callbacks of a running job; every method does nothing unless overridden.
pub trait Progress {
    /// A stage of a multi-stage job begins ("[1/4] capture of the demo text").
    fn stage(&mut self, _message: &str) {}
    /// A transient status line (probe i of n, masked variants done); "" clears it.
    fn status(&mut self, _message: &str) {}
    /// Something the user should know that does not stop the job.
    fn warning(&mut self, _message: &str) {}
    /// `done` of `total` policy-steps of the streamed run `label`.
    fn steps(&mut self, _label: &str, _done: usize, _total: usize) {}
    /// A stage's result is ready.
    fn finished(&mut self, _result: Finished<'_>) {}
}

/// Reports nothing.
pub struct Silent;

impl Progress for Silent {}
