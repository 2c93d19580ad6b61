//! Driving llama.cpp (built by `scripts/llama-cpp/build.sh`) from the tests: its forced-ids
//! context-shift driver, the book ids it reads, `sinkscope verify` on what it wrote, and the one
//! engine run at a time its spinning workers need.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Each engine run and each `verify` keeps both of the test machine's cores busy (llama.cpp's
/// workers spin while they wait), so the tests take turns: the file ran in 764 s with two at
/// once, 371 s one at a time.
pub fn one_test_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ENGINE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ENGINE.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the driver wrote: the trace (JSONL) and its summary.
pub struct EngineRun {
    pub trace: PathBuf,
    pub summary: Value,
}

/// Runs llama.cpp over `ids` with n_ctx `ctx` and the server's `--keep keep` (or dense), broken
/// as `brk` says ("none" for the real thing).
pub fn run_engine(cache: &Path, model: &Path, ids: &Path, ctx: usize, keep: Option<usize>, brk: &str, dir: &Path) -> EngineRun {
    run_engine_with(cache, model, ids, ctx, keep, brk, dir, &[])
}

/// [`run_engine`] with more of the driver's flags (`--kv-type f32`).
#[allow(clippy::too_many_arguments)]
pub fn run_engine_with(cache: &Path, model: &Path, ids: &Path, ctx: usize, keep: Option<usize>, brk: &str, dir: &Path, extra: &[&str]) -> EngineRun {
    let tag = match keep {
        Some(k) => format!("ctx{ctx}-keep{k}-{brk}"),
        None => "dense".into(),
    };
    let (trace, summary) = (dir.join(format!("{tag}.jsonl")), dir.join(format!("{tag}.json")));
    let mut cmd = driver(cache, model, ids);
    cmd.args(["--ctx", &ctx.to_string(), "--break", brk, "--threads", "2"]).args(extra).arg("--out").arg(&trace).arg("--summary").arg(&summary);
    match keep {
        Some(k) => cmd.args(["--keep", &k.to_string()]),
        None => cmd.arg("--dense"),
    };
    let out = cmd.output().expect("the engine's python runs");
    assert!(out.status.success(), "llama.cpp driver {tag}: {}", String::from_utf8_lossy(&out.stderr));
    let summary = serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    EngineRun { trace, summary }
}

/// The forced-ids driver (`scripts/llama-cpp/context_shift.py`) on `model` and `ids`, through the
/// built engine in `cache`; the caller adds the run's flags.
pub fn driver(cache: &Path, model: &Path, ids: &Path) -> Command {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/llama-cpp/context_shift.py");
    let mut cmd = Command::new(cache.join("venv/bin/python"));
    cmd.env("LLAMA_CPP_LIB_PATH", cache.join("build/bin")).arg(script).arg("--model").arg(model).arg("--ids").arg(ids);
    cmd
}

/// `n` token ids of a book under `model`'s tokenizer, written where the engine reads them.
pub fn book_ids(model: &Path, n: usize, dir: &Path) -> PathBuf {
    let run = dir.join("ids-run");
    let book = super::corpora_dir().join("pg84_frankenstein.txt");
    let out = super::sinkscope(
        &["stream", "-m", model.to_str().unwrap(), "-f", book.to_str().unwrap(), "--start-char", "2000"]
            .into_iter()
            .chain(["--tokens", &n.to_string(), "--policy", "dense", "-o", run.to_str().unwrap()])
            .collect::<Vec<_>>(),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&std::fs::read(run.join("stream.json")).unwrap()).unwrap();
    let ids: Vec<u64> = report["tokens"].as_array().unwrap().iter().map(|t| t["id"].as_u64().unwrap()).collect();
    assert_eq!(ids.len(), n);
    let path = dir.join("ids.json");
    std::fs::write(&path, serde_json::to_vec(&ids).unwrap()).unwrap();
    path
}

/// `sinkscope verify` on a trace: (exit code, report).
pub fn verify(trace: &Path, model: &Path, cache: usize, n_keep: usize) -> (i32, Value) {
    let out = super::sinkscope(&[
        "verify",
        trace.to_str().unwrap(),
        "-m",
        model.to_str().unwrap(),
        "--policy",
        "keep",
        "--sinks",
        &n_keep.to_string(),
        "--cache",
        &cache.to_string(),
        "--positions",
        "delta",
        "--json",
    ]);
    let code = out.status.code().unwrap_or(-1);
    assert!(code == 0 || code == 3, "verify failed ({code}): {}", String::from_utf8_lossy(&out.stderr));
    (code, serde_json::from_slice(&out.stdout).unwrap())
}

/// The per-token log-probabilities of a driver trace (index = sequence position).
pub fn logprobs(trace: &Path) -> Vec<Option<f64>> {
    std::fs::read_to_string(trace).unwrap().lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["logprob"].as_f64()).collect()
}

/// The sinkscope mapping of a llama.cpp server setting: W = n_ctx − 1 (the server shifts before
/// decoding when n_past + 1 ≥ n_ctx, so a query sees at most n_ctx − 1 entries, its own
/// included), N = --keep + 1 when the model adds BOS.
pub fn mapping(summary: &Value) -> (usize, usize) {
    (summary["n_ctx"].as_u64().unwrap() as usize - 1, summary["n_keep"].as_u64().unwrap() as usize)
}

/// Each token's log-probability under the model at `path` (the first token's is `None`).
pub fn sinkscope_logprobs(path: &Path, tokens: &[u32]) -> Vec<Option<f64>> {
    use sinkscope::model::receiver::NoCapture;
    let lm = sinkscope::model::load(path.to_str().unwrap(), &sinkscope::model::LoadOptions::default()).unwrap();
    let hidden = lm.model.forward(tokens, None, &mut NoCapture).unwrap();
    let logits: Vec<Vec<f32>> = lm.model.logits(&hidden).unwrap().to_vec2().unwrap();
    let mut out = vec![None];
    for (row, &next) in logits.iter().zip(&tokens[1..]) {
        let max = super::finite_max("logits", row);
        let lse = max + row.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln();
        out.push(Some(row[next as usize] as f64 - lse));
    }
    out
}

/// The largest |a − b| over the scored tokens (failing on a length mismatch or a non-finite value).
pub fn worst_logprob_gap(what: &str, a: &[Option<f64>], b: &[Option<f64>]) -> f64 {
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    let gaps: Vec<f64> = a.iter().zip(b).filter_map(|(x, y)| Some((x.as_ref()? - y.as_ref()?).abs())).collect();
    assert_eq!(gaps.len(), a.len() - 1, "{what}: a token is missing its log-probability");
    super::finite_max(what, &gaps)
}
