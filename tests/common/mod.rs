//! Shared test helpers: locating `../shared/models` (tests that need a model skip loudly only when
//! it is absent), temporary directories, fixture loading and running the binary.
#![allow(dead_code)]

pub mod engine;
pub mod parity;

use std::path::{Path, PathBuf};
use std::process::Output;

/// Whether a test that cannot run must fail instead of skipping: in CI (`CI=true`) and whenever
/// `SINKSCOPE_REQUIRE_MODELS=1`.
pub fn skips_are_failures() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") || std::env::var("SINKSCOPE_REQUIRE_MODELS").is_ok_and(|v| v == "1")
}

/// Skips the calling test with one line `cargo test` shows (written straight to stderr, past the
/// test harness's capture), or fails it where skips are failures.
pub fn skip(why: &str) {
    if skips_are_failures() {
        panic!("cannot test: {why} (CI=true or SINKSCOPE_REQUIRE_MODELS=1 makes this a failure)");
    }
    // libtest names each test's thread after the test; one line per test, however often it asks.
    thread_local!(static SAID: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    if SAID.with(|s| s.replace(true)) {
        return;
    }
    let test = std::thread::current().name().unwrap_or("a test").to_string();
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// Whether the slow references run at full length (`SINKSCOPE_LONG_TESTS=1`): by default they
/// run on the smallest inputs that still show what they test, so the suite fits its time.
pub fn long_tests() -> bool {
    std::env::var("SINKSCOPE_LONG_TESTS").is_ok_and(|v| v == "1")
}

/// Where the real data is: `$SINKSCOPE_SHARED`, else `../shared` beside the repository when it
/// holds the models (the developers' and CI's folder), else the repository's own `tests/data`
/// (stories260K in its three layouts and the texts the tests read;
/// see tests/data/SOURCES.md). SmolLM2 and Gemma 3 are not committed: [`model`] fetches them.
pub fn data_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SINKSCOPE_SHARED") {
        return PathBuf::from(dir);
    }
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared");
    if shared.join("models/stories260K.gguf").is_file() {
        shared
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
    }
}

/// [`data_dir`]`/models`, or `None` after skipping (failing where skips are failures) when it
/// does not hold stories260K. A test that gets it is counted as a test on real weights
/// (`tests/zz_real_weights.rs` prints the count).
pub fn models_dir() -> Option<PathBuf> {
    let dir = data_dir().join("models");
    if dir.join("stories260K.gguf").is_file() {
        count_real_weights();
        Some(dir)
    } else {
        skip(&format!("needs {} (SINKSCOPE_SHARED=DIR must hold models/ and corpora/)", dir.join("stories260K.gguf").display()));
        None
    }
}

/// The model file or directory `name`: under [`models_dir`], else (a catalog model such as
/// SmolLM2) where the product finds it — the model path and the user cache, SHA-256 verified —
/// fetched there on first use. `None` after skipping (failing where skips are failures) when it
/// can be neither found nor downloaded.
pub fn model(name: &str) -> Option<PathBuf> {
    let path = models_dir()?.join(name);
    if path.exists() {
        Some(path)
    } else if let Some(entry) = sinkscope::model::catalog::CATALOG.iter().find(|e| e.file == name) {
        fetched(entry)
    } else {
        skip(&format!("{} is missing; this test needs it", path.display()));
        None
    }
}

/// The catalog model `entry` from the model path or the user cache (`fetch` finds it there,
/// verified), else downloaded there, once per test process (later test binaries find it).
fn fetched(entry: &'static sinkscope::model::catalog::CatalogEntry) -> Option<PathBuf> {
    static FETCHING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = FETCHING.lock().unwrap_or_else(|e| e.into_inner());
    let mut announce = Announce { entry, started: None };
    match sinkscope::model::fetch::fetch(entry, false, &mut announce) {
        Ok(path) => {
            if let Some(start) = announce.started {
                use std::io::Write;
                let _ = writeln!(std::io::stderr(), "fetched {} in {:.1} s", path.display(), start.elapsed().as_secs_f64());
            }
            Some(path)
        }
        Err(e) => {
            skip(&format!("{} is not on the model path and could not be downloaded: {e}", entry.file));
            None
        }
    }
}

/// Says, in one line past the test harness's capture, that a download begins (fetch plans one
/// only when the model is nowhere on the model path).
struct Announce {
    entry: &'static sinkscope::model::catalog::CatalogEntry,
    started: Option<std::time::Instant>,
}

impl sinkscope::model::fetch::FetchProgress for Announce {
    fn plan(&mut self, _message: &str) {
        use std::io::Write;
        let e = self.entry;
        let _ = writeln!(std::io::stderr(), "fetching {} ({} bytes) for the tests, once: `sinkscope fetch {}`", e.file, e.bytes, e.alias);
        self.started = Some(std::time::Instant::now());
    }
}

/// Notes that the calling test runs on real weights: one empty file per test under
/// `$CARGO_TARGET_TMPDIR/real-weights/` (`tests/aa_real_weights.rs` clears it when a run begins).
fn count_real_weights() {
    let exe = std::env::current_exe().ok().and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned())).unwrap_or_default();
    let binary = exe.rsplit_once('-').map_or(exe.as_str(), |(name, _hash)| name).to_string();
    let test = std::thread::current().name().unwrap_or("main").to_string();
    let dir = real_weights_dir().join(binary);
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join(test), "");
}

/// Where [`model`] marks the tests that ran on real weights.
pub fn real_weights_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("real-weights")
}

/// The shared model file `name`, or skip the calling test (loudly) when the models are absent.
#[macro_export]
macro_rules! model_or_skip {
    ($name:expr) => {
        match common::model($name) {
            Some(path) => path,
            None => return,
        }
    };
}

/// [`data_dir`]`/corpora`: the long texts.
pub fn corpora_dir() -> PathBuf {
    data_dir().join("corpora")
}

pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(rel)
}

/// A fresh, empty directory under the system temp dir, unique to this test; removed with everything
/// in it when dropped, so also when the test fails (a panic unwinds through the drop).
pub fn temp_dir(tag: &str) -> TempDir {
    let dir = std::env::temp_dir().join(format!("sinkscope-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    TempDir { path: dir.clone(), root: dir }
}

/// `child` (not created) inside a fresh [`temp_dir`]: for a run directory whose name matters, or
/// one a command must create itself; dropping it removes the whole temporary directory.
pub fn temp_child(tag: &str, child: &str) -> TempDir {
    let mut dir = temp_dir(tag);
    dir.path = dir.root.join(child);
    dir
}

/// A test's temporary directory (see [`temp_dir`]); reads as the `Path` it holds.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
    /// What dropping it removes: the path itself, or the temporary directory holding it.
    root: PathBuf,
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<std::ffi::OsStr> for TempDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.path.as_os_str()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Copies an HF fixture directory, letting `edit` change its config.json.
pub fn edited_hf(src: &Path, dst: &Path, edit: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) {
    let _ = std::fs::remove_dir_all(dst);
    std::fs::create_dir_all(dst).unwrap();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e != "gguf") {
            std::fs::copy(&path, dst.join(path.file_name().unwrap())).unwrap();
        }
    }
    let mut config: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(dst.join("config.json"), serde_json::to_string_pretty(&config).unwrap()).unwrap();
}

/// `SINKSCOPE_MODELS` for the binary: the test models, then the user cache where [`model`]
/// fetches (the product leaves the cache out of its search path when this variable is set).
/// Not counted as using real weights: the binary may be run on anything.
pub fn model_path() -> std::ffi::OsString {
    let dirs = [data_dir().join("models")].into_iter().chain(sinkscope::model::source::user_cache_dir());
    std::env::join_paths(dirs).unwrap_or_default()
}

/// Runs the sinkscope binary with `args` (cwd = repository root).
pub fn sinkscope(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sinkscope"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("SINKSCOPE_MODELS", model_path())
        .output()
        .expect("run sinkscope binary")
}

/// A fixture tensor from a safetensors file as (shape, f32 or i64-as-f64 values).
pub struct Fixture {
    bytes: Vec<u8>,
}

impl Fixture {
    pub fn open(path: &Path) -> Self {
        Fixture { bytes: std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())) }
    }

    pub fn f32(&self, name: &str) -> (Vec<usize>, Vec<f32>) {
        let st = safetensors::SafeTensors::deserialize(&self.bytes).unwrap();
        let t = st.tensor(name).unwrap_or_else(|_| panic!("fixture tensor {name}"));
        assert_eq!(t.dtype(), safetensors::Dtype::F32, "{name}");
        (t.shape().to_vec(), t.data().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect())
    }

    pub fn f64(&self, name: &str) -> Vec<f64> {
        let st = safetensors::SafeTensors::deserialize(&self.bytes).unwrap();
        let t = st.tensor(name).unwrap_or_else(|_| panic!("fixture tensor {name}"));
        assert_eq!(t.dtype(), safetensors::Dtype::F64, "{name}");
        t.data().chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect()
    }

    pub fn i64(&self, name: &str) -> Vec<i64> {
        let st = safetensors::SafeTensors::deserialize(&self.bytes).unwrap();
        let t = st.tensor(name).unwrap_or_else(|_| panic!("fixture tensor {name}"));
        assert_eq!(t.dtype(), safetensors::Dtype::I64, "{name}");
        t.data().chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap())).collect()
    }
}

/// Fields that differ between two identical runs: wall-clock time, memory, speed.
pub const CLOCK_FIELDS: [&str; 3] = ["wall_seconds", "peak_rss_bytes", "tokens_per_s"];

/// Removes [`CLOCK_FIELDS`] at every depth, so two identical runs compare equal.
pub fn without_clock(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            for f in CLOCK_FIELDS {
                map.remove(f);
            }
            map.values_mut().for_each(without_clock);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(without_clock),
        _ => {}
    }
}

/// A float the comparison helpers take.
pub trait Real: Copy {
    fn to_f64(self) -> f64;
}

impl Real for f32 {
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl Real for f64 {
    fn to_f64(self) -> f64 {
        self
    }
}

/// The largest |got − want| over two lists of equal length. Fails, naming `what` and the first bad
/// index, when the lengths differ or either side holds NaN or ±∞ — a fold with `f32::max` drops
/// NaN, so an all-NaN result would otherwise compare as "no difference" and pass any tolerance.
#[track_caller]
pub fn max_abs_diff<T: Real>(what: &str, got: &[T], want: &[T]) -> f64 {
    worst_abs_diff(what, got, want).0
}

/// [`max_abs_diff`] and the index where it is reached (0 for empty lists).
#[track_caller]
pub fn worst_abs_diff<T: Real>(what: &str, got: &[T], want: &[T]) -> (f64, usize) {
    assert_eq!(got.len(), want.len(), "{what}: {} values against {} in the reference", got.len(), want.len());
    let mut worst = (0.0f64, 0);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (g.to_f64(), w.to_f64());
        assert!(g.is_finite() && w.is_finite(), "{what}: value {i} is not finite ({g} against {w} in the reference)");
        let d = (g - w).abs();
        if d > worst.0 {
            worst = (d, i);
        }
    }
    worst
}

/// The largest of `values`, failing (naming `what` and the index) on an empty list or a NaN or ±∞
/// value — where a fold with `f32::max` would skip a NaN silently.
#[track_caller]
pub fn finite_max<T: Real>(what: &str, values: &[T]) -> f64 {
    assert!(!values.is_empty(), "{what}: no values");
    let mut top = f64::NEG_INFINITY;
    for (i, v) in values.iter().enumerate() {
        let v = v.to_f64();
        assert!(v.is_finite(), "{what}: value {i} is not finite ({v})");
        if v > top {
            top = v;
        }
    }
    top
}

/// Asserts the largest |got − want| (see [`max_abs_diff`]) is at most `tol`, naming where it is
/// reached; returns it.
#[track_caller]
pub fn assert_close<T: Real>(what: &str, got: &[T], want: &[T], tol: f64) -> f64 {
    let (worst, at) = worst_abs_diff(what, got, want);
    assert!(worst <= tol, "{what}: differs by {worst:e} > {tol:e} at index {at}");
    worst
}

/// The llama.cpp reference engine built by `scripts/llama-cpp/build.sh` (its cache directory:
/// venv, libllama, llama-server), or `None` after skipping (failing where skips are failures).
pub fn llama_cpp() -> Option<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/llama-cpp/build.sh");
    let out = std::process::Command::new("bash").arg(&script).arg("--check").output().expect("bash runs");
    if !out.status.success() {
        skip(String::from_utf8_lossy(&out.stderr).trim());
        return None;
    }
    Some(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}
