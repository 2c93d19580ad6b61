//! A fuzzer for every parser of untrusted input, on stable Rust (cargo-fuzz needs a nightly
//! toolchain this project does not have): each target starts from small valid seeds and its
//! committed corpus (`fuzz/corpus/<target>/`), mutates them (bit flips, byte sets, inserts,
//! deletes, truncation, chunk copies, and "lying" lengths: 0, 1, −1, 2³¹, 2⁶³ written over 4- and
//! 8-byte fields), writes the input where the parser reads it, and calls the real entry point.
//! Built with coverage instrumentation (`scripts/fuzz.sh`, see [`coverage`]) it keeps every input
//! that reaches new code and mutates from those too. A panic, an allocation over [`MAX_ALLOC`] or
//! an input slower than [`HANG`] is a failure, saved with its input; an execution still running
//! after [`WATCHDOG`] is a hang the watchdog thread saves before ending the process.
//!
//! Used by `tests/fuzz_smoke.rs` (a few thousand inputs per target, in the test command) and by
//! `examples/fuzz.rs` (millions).
#![allow(dead_code)]

pub mod coverage;

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sinkscope::capture::heatmaps::Heatmaps;
use sinkscope::io::arrays::write_safetensors_f32;
use sinkscope::model::family::{Family, TensorContext};
use sinkscope::model::gguf::GgufFile;
use sinkscope::model::hf::{read_config, HfWeights};
use sinkscope::model::llama2c::Llama2cFile;
use sinkscope::model::tokenizer::Tokenizer;
use sinkscope::probe::ProbeSet;
use sinkscope::report::run::Run;

/// No single allocation may be larger: a lying length must be refused, not believed.
pub const MAX_ALLOC: usize = 1 << 30;
/// An input that takes longer is a hang.
pub const HANG: Duration = Duration::from_secs(2);

/// The system allocator, refusing any single allocation over [`MAX_ALLOC`]: the process then
/// aborts (allocation failure), and the input that did it is the target's file in the work
/// directory.
pub struct Capped;

// SAFETY: forwards to the system allocator unchanged; only refuses oversized requests.
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOC {
            return std::ptr::null_mut();
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > MAX_ALLOC {
            return std::ptr::null_mut();
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// One parser under test: its seeds, the file name it reads, and the call.
pub struct Target {
    pub name: &'static str,
    /// The file the input is written to, inside the target's work directory.
    pub file: &'static str,
    pub seeds: Vec<Vec<u8>>,
    /// Returns whether the parser accepted the input.
    pub run: fn(&Path, &Path) -> bool,
}

/// xorshift64*: reproducible from the seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One to four random edits of `input`.
pub fn mutate(input: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = v.len();
        match rng.below(10) {
            0 if len > 0 => {
                let i = rng.below(len);
                v[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                v[i] = rng.next() as u8;
            }
            2 => {
                let i = rng.below(len + 1);
                v.insert(i, rng.next() as u8);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below(16.min(len - i));
                v.drain(i..i + n);
            }
            4 if len > 0 => v.truncate(rng.below(len)),
            5 if len > 8 => {
                let (a, b) = (rng.below(len - 8), rng.below(len - 8));
                let n = 1 + rng.below(8);
                let chunk: Vec<u8> = v[a..a + n].to_vec();
                v.splice(b..b, chunk);
            }
            6 | 7 if len >= 8 => {
                // A lying length or count.
                let values: [u64; 7] = [0, 1, u64::MAX, 1 << 31, 1 << 63, 0xFFFF_FFFF, 1 << 40];
                let x = values[rng.below(values.len())];
                let i = rng.below(len - 7) & !3;
                if rng.below(2) == 0 {
                    v[i..i + 4].copy_from_slice(&(x as u32).to_le_bytes());
                } else {
                    v[i..i + 8].copy_from_slice(&x.to_le_bytes());
                }
            }
            8 if len > 0 => {
                // A value out of its range where a number stands (config.json settings, record
                // fields): the readers must refuse it by name, never compute with it.
                let values: [&[u8]; 12] =
                    [b"0", b"-1", b"1e309", b"-1e309", b"3.5e38", b"1e-320", b"18446744073709551616", b"\"7\"", b"true", b"null", b"[]", b"7.5"];
                if let Some((start, end)) = number_at(&v, rng.below(len)) {
                    v.splice(start..end, values[rng.below(values.len())].iter().copied());
                }
            }
            _ if len > 0 => {
                // A digit or a JSON/TOML delimiter: text formats.
                let i = rng.below(len);
                let bytes = b"0123456789-.e\"{}[],:=\n ";
                v[i] = bytes[rng.below(bytes.len())];
            }
            _ => v.push(rng.next() as u8),
        }
    }
    v
}

/// The bytes of the first number token (JSON/TOML text) at or after `from`: its start and end.
fn number_at(v: &[u8], from: usize) -> Option<(usize, usize)> {
    let is_num = |b: u8| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E');
    let start = (from..v.len()).find(|&i| v[i].is_ascii_digit() && (i == 0 || !v[i - 1].is_ascii_alphanumeric() || is_num(v[i - 1])))?;
    let start = (0..start).rev().take_while(|&i| is_num(v[i])).last().unwrap_or(start);
    let end = (start..v.len()).find(|&i| !is_num(v[i])).unwrap_or(v.len());
    Some((start, end))
}

/// What a fuzz run found.
#[derive(Debug, Default)]
pub struct Report {
    pub executions: u64,
    pub accepted: u64,
    pub failures: Vec<String>,
    pub slowest: Duration,
    /// (edge, hit-count bucket) features reached (0 without coverage instrumentation).
    pub features: usize,
    /// Inputs kept because they reached new features (the corpus grew by these).
    pub kept: usize,
}

/// An execution still running after this long is a hang: the watchdog saves its input and ends
/// the process (a parser that never returns cannot be caught by a check after it returns).
pub const WATCHDOG: Duration = Duration::from_secs(10);

/// Watches the running execution from another thread.
struct Watchdog {
    /// Milliseconds since `epoch` when the running execution started, plus one; 0 when idle.
    started: std::sync::Arc<std::sync::atomic::AtomicU64>,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    epoch: Instant,
}

impl Watchdog {
    fn start(input: PathBuf, saved: PathBuf) -> Watchdog {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let started = std::sync::Arc::new(AtomicU64::new(0));
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let epoch = Instant::now();
        let (s, d) = (started.clone(), done.clone());
        std::thread::spawn(move || {
            while !d.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
                let at = s.load(Ordering::SeqCst);
                if at > 0 && epoch.elapsed().as_millis() as u64 > at - 1 + WATCHDOG.as_millis() as u64 {
                    let _ = std::fs::create_dir_all(saved.parent().unwrap_or(Path::new(".")));
                    let _ = std::fs::copy(&input, &saved);
                    eprintln!("hang: an execution ran past {WATCHDOG:?}; its input is saved to {}", saved.display());
                    std::process::exit(3);
                }
            }
        });
        Watchdog { started, done, epoch }
    }

    fn running(&self) {
        self.started.store(self.epoch.elapsed().as_millis() as u64 + 1, std::sync::atomic::Ordering::SeqCst);
    }

    fn idle(&self) {
        self.started.store(0, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The inputs kept in `dir` (a target's corpus), in name order.
pub fn read_corpus(dir: &Path) -> Vec<Vec<u8>> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect()).unwrap_or_default();
    names.sort();
    names.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// Runs `target` on `executions` inputs in `work`: its seeds and the inputs of `corpus` (a
/// directory, when given) first, then mutations of them. With coverage instrumentation
/// ([`coverage`]) a mutated input that reaches a new (edge, hit-count bucket) joins the inputs
/// mutated from, and is written into `corpus`; without it every mutation starts from a seed.
pub fn fuzz(target: &Target, executions: u64, seed: u64, work: &Path, crashes: &Path, corpus: Option<&Path>) -> Report {
    std::fs::create_dir_all(work).expect("fuzz work directory");
    let file = work.join(target.file);
    let mut rng = Rng(seed | 1);
    let mut report = Report::default();
    let mut inputs: Vec<Vec<u8>> = target.seeds.clone();
    inputs.extend(corpus.map(read_corpus).unwrap_or_default());
    let replayed = inputs.len();
    let mut features = coverage::Features::default();
    let watchdog = Watchdog::start(file.clone(), crashes.join(format!("{}-hang", target.name)));
    let previous = std::panic::take_hook();
    // Panics are counted, not printed (a parser panicking is what the fuzzer looks for).
    if std::env::var_os("SINKSCOPE_FUZZ_VERBOSE").is_none() {
        std::panic::set_hook(Box::new(|_| {}));
    }
    for n in 0..executions {
        let input = match inputs.get(n as usize).filter(|_| (n as usize) < replayed) {
            Some(s) => s.clone(),
            None => mutate(&inputs[rng.below(inputs.len())], &mut rng),
        };
        std::fs::write(&file, &input).expect("write fuzz input");
        coverage::reset();
        watchdog.running();
        let start = Instant::now();
        let outcome = std::panic::catch_unwind(|| (target.run)(work, &file));
        let took = start.elapsed();
        watchdog.idle();
        let new = features.absorb();
        if new > 0 && n as usize >= replayed {
            if let Some(dir) = corpus {
                let _ = std::fs::create_dir_all(dir);
                let _ = std::fs::write(dir.join(format!("{:016x}", fingerprint(&input))), &input);
            }
            inputs.push(input.clone());
            report.kept += 1;
        }
        report.accepted += u64::from(matches!(outcome, Ok(true)));
        report.slowest = report.slowest.max(took);
        report.executions += 1;
        let failure = match outcome {
            Err(e) => Some(format!(
                "panic: {}",
                e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
            )),
            Ok(_) if took > HANG => Some(format!("hang: {took:?}")),
            Ok(_) => None,
        };
        if let Some(why) = failure {
            std::fs::create_dir_all(crashes).expect("crash directory");
            let saved = crashes.join(format!("{}-{n}", target.name));
            let _ = std::fs::write(&saved, &input);
            report.failures.push(format!("{why} (input saved to {})", saved.display()));
            if report.failures.len() >= 10 {
                break;
            }
        }
    }
    std::panic::set_hook(previous);
    report.features = features.count();
    report
}

/// Shrinks `corpus` (a target's directory) to the inputs that reach code nothing smaller reaches:
/// the seeds run first, then the corpus smallest first, each kept only if it reaches an edge not
/// reached before (hit counts aside), and of those the most new edges per byte within
/// [`CORPUS_BYTES`]; the others are deleted. Returns the inputs (before, after). Needs coverage
/// instrumentation (without it every input would be deleted, so nothing is).
pub fn minimize(target: &Target, work: &Path, corpus: &Path) -> (usize, usize) {
    let mut files: Vec<(u64, PathBuf)> =
        std::fs::read_dir(corpus).map(|d| d.flatten().filter_map(|e| Some((e.metadata().ok()?.len(), e.path()))).collect()).unwrap_or_default();
    if coverage::edges() == 0 {
        return (files.len(), files.len());
    }
    files.sort();
    std::fs::create_dir_all(work).expect("fuzz work directory");
    let file = work.join(target.file);
    let mut features = coverage::Features::edges_only();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut run = |input: &[u8]| {
        std::fs::write(&file, input).expect("write fuzz input");
        coverage::reset();
        let _ = std::panic::catch_unwind(|| (target.run)(work, &file));
        features.absorb()
    };
    for s in &target.seeds {
        run(s);
    }
    // (new edges, bytes, path) of each input that reached new code.
    let mut useful: Vec<(usize, u64, &PathBuf)> = Vec::new();
    for (bytes, path) in &files {
        match std::fs::read(path) {
            Ok(input) => match run(&input) {
                0 => {
                    let _ = std::fs::remove_file(path);
                }
                new => useful.push((new, *bytes, path)),
            },
            Err(_) => {
                let _ = std::fs::remove_file(path);
            }
        }
    }
    std::panic::set_hook(previous);
    // Within CORPUS_BYTES: the inputs that bring the most new edges per byte.
    useful.sort_by(|a, b| (b.0 as f64 / b.1.max(1) as f64).total_cmp(&(a.0 as f64 / a.1.max(1) as f64)).then(a.2.cmp(b.2)));
    let mut total = 0;
    let mut kept = 0;
    for (_, bytes, path) in useful {
        if total + bytes <= CORPUS_BYTES {
            total += bytes;
            kept += 1;
        } else {
            let _ = std::fs::remove_file(path);
        }
    }
    (files.len(), kept)
}

/// The most a target's committed corpus may hold.
pub const CORPUS_BYTES: u64 = 192 << 10;

/// FNV-1a of an input: its file name in the corpus.
fn fingerprint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// The repository's own copies of the real files the seeds start from (tests/data/SOURCES.md).
fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(rel)
}

/// Every array longer than `keep` cut to `keep` elements: a small JSON of the same shape.
fn shrink(v: &mut serde_json::Value, keep: usize) {
    match v {
        serde_json::Value::Array(a) => {
            a.truncate(keep);
            a.iter_mut().for_each(|x| shrink(x, keep));
        }
        serde_json::Value::Object(m) => m.values_mut().for_each(|x| shrink(x, keep)),
        _ => {}
    }
}

fn small_json(path: &Path) -> Vec<u8> {
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).expect("seed JSON")).expect("seed JSON parses");
    shrink(&mut v, 6);
    serde_json::to_vec(&v).expect("seed JSON")
}

fn safetensors_bytes(tensors: &[(String, &[usize], &[f32])], meta: &[(&str, &str)]) -> Vec<u8> {
    let dir = std::env::temp_dir().join(format!("sinkscope-fuzz-seed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("seed dir");
    let path = dir.join("seed.safetensors");
    write_safetensors_f32(&path, tensors, meta.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()).expect("seed safetensors");
    let bytes = std::fs::read(&path).expect("seed safetensors");
    let _ = std::fs::remove_dir_all(&dir);
    bytes
}

/// A llama2.c checkpoint of a tiny model (dim 8, 1 layer, vocab 4), exactly as long as its
/// header says (the parser tells the length).
fn tiny_llama2c() -> Vec<u8> {
    let header: [i32; 7] = [8, 8, 1, 2, 2, 4, 4];
    let mut bytes: Vec<u8> = header.iter().flat_map(|v| v.to_le_bytes()).collect();
    let dir = std::env::temp_dir().join(format!("sinkscope-fuzz-l2c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("seed dir");
    let path = dir.join("m.bin");
    std::fs::write(&path, &bytes).expect("seed");
    let implied = match Llama2cFile::open(&path) {
        Err(e) => e.to_string().split("implies ").nth(1).and_then(|s| s.split(' ').next()).and_then(|n| n.parse::<usize>().ok()).unwrap_or(28),
        Ok(_) => 28,
    };
    let _ = std::fs::remove_dir_all(&dir);
    let mut i = 0u32;
    while bytes.len() < implied {
        bytes.extend_from_slice(&((i % 17) as f32 * 0.01).to_le_bytes());
        i += 1;
    }
    bytes
}

/// Every target with its seeds; `None` when the shared models are missing.
pub fn targets() -> Option<Vec<Target>> {
    let models = data().join("models");
    let gguf = std::fs::read(models.join("stories260K.gguf")).ok()?;
    let tok = std::fs::read(models.join("tok512.bin")).ok()?;
    let tokenizer_json = std::fs::read(models.join("stories260K-hf/tokenizer.json")).ok()?;
    let config_json = std::fs::read(models.join("stories260K-hf/config.json")).ok()?;
    let probes = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("probes/default.toml")).ok()?;
    let run = fixture("run-stories260k");
    let weights = safetensors_bytes(
        &[("model.embed_tokens.weight".into(), &[4, 2], &[0.5; 8]), ("model.norm.weight".into(), &[2], &[1.0, 1.0])],
        &[("format", "pt")],
    );
    let maps = {
        let h = Heatmaps { n_layers: 1, n_heads: 2, n_tokens: 3, edges: vec![0, 1, 2, 3], first_keys: 2, grid: vec![0.25; 18], early: vec![0.5; 12] };
        let dir = std::env::temp_dir().join(format!("sinkscope-fuzz-maps-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        h.save(&dir.join("h.safetensors"), [("model".to_string(), "m".to_string())].into_iter().collect()).ok()?;
        let b = std::fs::read(dir.join("h.safetensors")).ok()?;
        let _ = std::fs::remove_dir_all(&dir);
        b
    };
    // A real GGUF cut after its header, metadata and tensor table (the tensor-data bounds checks
    // see it as cut), and a complete tiny one (`tests/fixtures/fuzz/make_gguf_seed.py`) whose
    // mutations reach the embedded tokenizer and the tensor reads.
    let gguf_head = gguf[..gguf.len().min(24 << 10)].to_vec();
    Some(vec![
        Target {
            name: "gguf",
            file: "model.gguf",
            seeds: vec![gguf_head, std::fs::read(fixture("fuzz/seed.gguf")).ok()?],
            run: |_, f| {
                let Ok(g) = GgufFile::open(f) else { return false };
                let _ = g.architecture();
                let _ = Tokenizer::from_gguf(&g).map(|t| t.encode("Once upon a time"));
                for name in g.tensors.keys().take(4) {
                    let _ = g.qtensor(name);
                }
                true
            },
        },
        Target {
            name: "safetensors",
            file: "model.safetensors",
            seeds: vec![weights],
            run: |dir, _| {
                // GPT-NeoX's weight map reorders a fused q|k|v: both maps read the same bytes.
                let (Some(neox), Some(llama)) = (Family::from_hf("gpt_neox"), Family::from_hf("llama")) else { return false };
                if let Ok(neox) = HfWeights::open(dir, neox, TensorContext { n_heads: 4, n_kv_heads: 4, delta_net: None }) {
                    let _ = neox.param("blk.0.attn_qkv.weight", false);
                }
                let Ok(w) = HfWeights::open(dir, llama, TensorContext { n_heads: 4, n_kv_heads: 4, delta_net: None }) else { return false };
                let _ = w.get("model.embed_tokens.weight");
                w.param("token_embd.weight", true).is_ok()
            },
        },
        Target { name: "llama2c", file: "model.bin", seeds: vec![tiny_llama2c()], run: |_, f| Llama2cFile::open(f).is_ok() },
        Target {
            name: "tok-bin",
            file: "tok512.bin",
            seeds: vec![tok],
            run: |_, f| Tokenizer::from_llama2c(f, 512).map(|t| t.encode("Once upon a time")).is_ok(),
        },
        Target {
            name: "tokenizer-json",
            file: "tokenizer.json",
            seeds: vec![tokenizer_json],
            run: |_, f| Tokenizer::from_json_file(f).map(|t| t.encode("Once upon a time")).is_ok(),
        },
        Target { name: "config-json", file: "config.json", seeds: vec![config_json], run: |dir, _| read_config(dir).is_ok() },
        Target { name: "probe-toml", file: "probes.toml", seeds: vec![probes], run: |_, f| ProbeSet::load(f.to_str().unwrap_or("")).is_ok() },
        Target { name: "capture-json", file: "capture.json", seeds: vec![small_json(&run.join("capture.json"))], run: open_run },
        Target { name: "report-json", file: "report.json", seeds: vec![small_json(&run.join("report.json"))], run: open_run },
        Target { name: "stream-json", file: "stream.json", seeds: vec![small_json(&run.join("stream.json"))], run: open_run },
        Target { name: "per-head-json", file: "per_head.json", seeds: vec![std::fs::read(fixture("fuzz/per_head.json")).ok()?], run: open_run },
        Target { name: "quant-json", file: "quant.json", seeds: vec![std::fs::read(fixture("fuzz/quant.json")).ok()?], run: open_run },
        Target { name: "needle-json", file: "needle.json", seeds: vec![std::fs::read(fixture("fuzz/needle.json")).ok()?], run: open_run },
        Target {
            name: "survey-json",
            file: "survey.json",
            seeds: vec![small_json(&Path::new(env!("CARGO_MANIFEST_DIR")).join("notebooks-data/survey/survey.json"))],
            run: open_run,
        },
        Target {
            name: "reductions",
            file: "reductions.safetensors",
            seeds: vec![std::fs::read(run.join("reductions.safetensors")).ok()?],
            run: open_run,
        },
        // Serving traces `watch` reads from the outside world (one seed per format it accepts),
        // parsed and then analysed as `watch` does.
        Target {
            name: "trace",
            file: "trace.txt",
            seeds: [
                "server_log.jsonl",
                "server_log.csv",
                "openai_chat.json",
                "openai_chat_stream.sse",
                "openai_completions.json",
                "llamacpp_completion.json",
                "llamacpp_completion_old.json",
            ]
            .iter()
            .map(|f| std::fs::read(fixture(&format!("traces/{f}"))).ok())
            .collect::<Option<Vec<_>>>()?,
            run: |_, f| sinkscope::pipeline::watch::watch_file(f, &Default::default(), None).is_ok(),
        },
        Target {
            name: "heatmaps",
            file: "heatmaps.safetensors",
            seeds: vec![maps],
            run: |dir, f| {
                let parsed = Heatmaps::load(f).is_ok();
                open_run(dir, f) || parsed
            },
        },
    ])
}

/// A run directory holding only the mutated file: opened, then turned into its tables.
fn open_run(dir: &Path, _: &Path) -> bool {
    let Ok(run) = Run::open(dir) else { return false };
    // What a run accepted holds values in range (a mutated perplexity of 0.5 or -1 is refused).
    if let Some(nll) = run.capture.as_ref().and_then(|c| c.nll.as_ref()) {
        assert!(nll.perplexity.is_nan() || nll.perplexity >= 1.0, "accepted a perplexity of {}", nll.perplexity);
    }
    if let Some(n) = &run.needle {
        for t in &n.trials {
            assert!((1..=t.candidates).contains(&t.rank), "accepted a rank of {} among {}", t.rank, t.candidates);
        }
    }
    let _ = sinkscope::report::tables::tables(&run);
    let _ = run.capture_alphas();
    let _ = run.analysis_alphas();
    true
}
