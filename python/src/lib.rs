//! `sinkscope._native`: the sinkscope library under Python. Thin by design: a command runs as the
//! binary runs it (the same clap flags, defaults and checks, the same pipeline job) inside an
//! embedded session that keeps one model loaded across calls, reports progress to a Python
//! callable and releases the GIL while it works; a run directory comes back as the Parquet bytes
//! and SVG figures the exporter writes. The `sinkscope` Python package wraps this in keyword
//! arguments, polars frames and notebook display.

use std::path::Path;
use std::time::{Duration, Instant};

use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use sinkscope::cli::session::{load_model, Session};
use sinkscope::model::load::LoadedModel;
use sinkscope::pipeline::progress::Progress;
use sinkscope::report::bundle::{figure_specs, ExportOptions};
use sinkscope::report::export::{figure_svgs, run_tables};
use sinkscope::report::run::Run;
use sinkscope::report::tables::survey_table;

create_exception!(sinkscope, SinkscopeError, PyRuntimeError, "An internal sinkscope failure (a bug: please report it).");
create_exception!(sinkscope, InputError, PyValueError, "Bad input: the one-line message the command line prints, naming the file and the fix.");

/// A sinkscope error as the Python exception with the command line's message.
fn py_err(e: sinkscope::Error) -> PyErr {
    match e.exit_code() {
        2 => InputError::new_err(e.to_string()),
        _ => SinkscopeError::new_err(e.to_string()),
    }
}

/// Progress to a Python callable `(kind, message, done, total)`, kind one of "stage", "status",
/// "warning", "steps"; step reports at most every 100 ms (and the last one), so a long stream
/// does not spend its time in Python.
struct PyProgress {
    callback: Option<Py<PyAny>>,
    last_steps: Option<Instant>,
}

impl PyProgress {
    fn send(&self, kind: &str, message: &str, done: usize, total: usize) {
        if let Some(cb) = &self.callback {
            Python::attach(|py| {
                // A failing callback must not stop the job; Python prints what it raised.
                if let Err(e) = cb.call1(py, (kind, message, done, total)) {
                    e.print(py);
                }
            });
        }
    }
}

impl Progress for PyProgress {
    fn stage(&mut self, message: &str) {
        self.send("stage", message, 0, 0);
    }
    fn status(&mut self, message: &str) {
        self.send("status", message, 0, 0);
    }
    fn warning(&mut self, message: &str) {
        self.send("warning", message, 0, 0);
    }
    fn steps(&mut self, label: &str, done: usize, total: usize) {
        let due = self.last_steps.is_none_or(|t| t.elapsed() >= Duration::from_millis(100));
        if due || done >= total {
            self.last_steps = Some(Instant::now());
            self.send("steps", label, done, total);
        }
    }
}

fn progress(callback: Option<Py<PyAny>>) -> Box<PyProgress> {
    Box::new(PyProgress { callback, last_steps: None })
}

/// Runs one command line in an embedded session on `model` (or on the model its flags name).
fn run_command(model: Option<&mut LoadedModel>, argv: Vec<String>, callback: Option<Py<PyAny>>) -> sinkscope::Result<u8> {
    let cli = sinkscope::cli::parse(argv)?;
    let mut session = Session::embedded(model, progress(callback));
    sinkscope::cli::run_in(cli, &mut session)
}

/// A model loaded once, for many commands.
#[pyclass(module = "sinkscope._native")]
struct Model {
    lm: LoadedModel,
}

#[pymethods]
impl Model {
    /// Loads the model the model flags name (`["-m", "SmolLM2-135M", "--dtype", "f32"]`), as
    /// every command does; the GIL is released while it loads.
    #[new]
    fn new(py: Python<'_>, argv: Vec<String>) -> PyResult<Self> {
        let lm = py.detach(|| load_model(argv)).map_err(py_err)?;
        Ok(Model { lm })
    }

    /// Runs a command line (`["capture", "-p", "…", "-o", DIR]`) on this model, without its
    /// model flags; returns the exit status the binary would (3: `watch`/`verify` alert).
    #[pyo3(signature = (argv, progress=None))]
    fn run(&mut self, py: Python<'_>, argv: Vec<String>, progress: Option<Py<PyAny>>) -> PyResult<u8> {
        let lm = &mut self.lm;
        py.detach(|| run_command(Some(lm), argv, progress)).map_err(py_err)
    }

    /// The model's description (`sinkscope info --json`'s model part) as JSON.
    fn info_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.lm.info).map_err(|e| SinkscopeError::new_err(e.to_string()))
    }

    /// The name the reports use.
    fn name(&self) -> String {
        self.lm.info.display_name()
    }
}

/// Runs a command line that loads nothing, or loads its own model (`survey`, `watch`, `export`).
#[pyfunction]
#[pyo3(signature = (argv, progress=None))]
fn run(py: Python<'_>, argv: Vec<String>, progress: Option<Py<PyAny>>) -> PyResult<u8> {
    py.detach(|| run_command(None, argv, progress)).map_err(py_err)
}

fn open_run(dir: &str) -> PyResult<Run> {
    Run::open(Path::new(dir)).map_err(py_err)
}

/// Every table of the run directory `dir` as (name, Parquet bytes) — the files `export --parquet`
/// writes, byte for byte; a survey directory adds its `survey` table.
#[pyfunction]
fn run_tables_parquet<'py>(py: Python<'py>, dir: &str) -> PyResult<Vec<(String, Bound<'py, PyBytes>)>> {
    let run = open_run(dir)?;
    let survey = run.survey.as_ref().map(survey_table);
    let tables = run_tables(&run).into_iter().chain(survey);
    let mut out = Vec::new();
    for t in tables {
        let bytes = py.detach(|| sinkscope::report::parquet::table_bytes(&t)).map_err(py_err)?;
        out.push((t.name.to_string(), PyBytes::new(py, &bytes)));
    }
    Ok(out)
}

/// The run's figures `export` draws by default, as (file stem, caption), without drawing them.
#[pyfunction]
fn run_figure_list(dir: &str) -> PyResult<Vec<(String, String)>> {
    let run = open_run(dir)?;
    Ok(figure_specs(&run, &ExportOptions::default()).into_iter().map(|s| (s.stem, s.caption)).collect())
}

/// The figures with these stems (all when `None`) as (stem, caption, SVG text).
#[pyfunction]
#[pyo3(signature = (dir, stems=None))]
fn run_figures_svg(py: Python<'_>, dir: &str, stems: Option<Vec<String>>) -> PyResult<Vec<(String, String, String)>> {
    let run = open_run(dir)?;
    py.detach(|| figure_svgs(&run, &ExportOptions::default(), stems.as_deref())).map_err(py_err)
}

/// The sinkscope version the module was built from.
#[pyfunction]
fn version() -> &'static str {
    sinkscope::VERSION
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Model>()?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(run_tables_parquet, m)?)?;
    m.add_function(wrap_pyfunction!(run_figure_list, m)?)?;
    m.add_function(wrap_pyfunction!(run_figures_svg, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add("SinkscopeError", m.py().get_type::<SinkscopeError>())?;
    m.add("InputError", m.py().get_type::<InputError>())?;
    Ok(())
}
