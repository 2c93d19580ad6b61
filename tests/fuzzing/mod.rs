//! A mutation fuzzer for every parser of untrusted input, on stable Rust (cargo-fuzz needs a
//! nightly toolchain this project does not have): each target starts from small valid seeds,
//! mutates them (bit flips, byte sets, inserts, deletes, truncation, chunk copies, and "lying"
//! lengths: 0, 1, −1, 2³¹, 2⁶³ written over 4- and 8-byte fields), writes the input where the
//! parser reads it, and calls the real entry point. A panic, an allocation over [`MAX_ALLOC`] or
//! an input slower than [`HANG`] is a failure, saved with its input.
//!
//! Used by `tests/fuzz_smoke.rs` (a few thousand inputs per target, in the test command) and by
//! `examples/fuzz.rs` (millions).
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sinkscope::capture::heatmaps::Heatmaps;
use sinkscope::io::arrays::write_safetensors_f32;
use sinkscope::model::family::Family;
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
        match rng.below(9) {
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

/// What a fuzz run found.
#[derive(Debug, Default)]
pub struct Report {
    pub executions: u64,
    pub accepted: u64,
    pub failures: Vec<String>,
    pub slowest: Duration,
}

/// Runs `target` on `executions` mutated inputs (the seeds themselves first) in `work`.
pub fn fuzz(target: &Target, executions: u64, seed: u64, work: &Path, crashes: &Path) -> Report {
    std::fs::create_dir_all(work).expect("fuzz work directory");
    let file = work.join(target.file);
    let mut rng = Rng(seed | 1);
    let mut report = Report::default();
    let previous = std::panic::take_hook();
    // Panics are counted, not printed (a parser panicking is what the fuzzer looks for).
    if std::env::var_os("SINKSCOPE_FUZZ_VERBOSE").is_none() {
        std::panic::set_hook(Box::new(|_| {}));
    }
    for n in 0..executions {
        let input = match target.seeds.get(n as usize) {
            Some(s) => s.clone(),
            None => mutate(&target.seeds[rng.below(target.seeds.len())], &mut rng),
        };
        std::fs::write(&file, &input).expect("write fuzz input");
        let start = Instant::now();
        let outcome = std::panic::catch_unwind(|| (target.run)(work, &file));
        report.accepted += u64::from(matches!(outcome, Ok(true)));
        let took = start.elapsed();
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
    report
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
                if let Ok(neox) = HfWeights::open(dir, neox, 4) {
                    let _ = neox.param("blk.0.attn_qkv.weight", false);
                }
                let Ok(w) = HfWeights::open(dir, llama, 4) else { return false };
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
    let _ = sinkscope::report::tables::tables(&run);
    let _ = run.capture_alphas();
    let _ = run.analysis_alphas();
    true
}
