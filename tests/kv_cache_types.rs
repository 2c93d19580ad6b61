//! Quantized KV caches (issue 44): the cache formats' round trips held exactly (every value equal,
//! a zero's sign aside: ggml writes an all-zero iq4_nl block's codes from scratch memory) against
//! llama.cpp's own library (`scripts/llama-cpp/cache_formats.py` wrote the fixtures).

use std::path::PathBuf;

use sinkscope::numerics::cache_formats::CacheFormat;

fn fixture(name: &str) -> Vec<f32> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cache_formats").join(format!("{name}.f32"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

#[test]
fn every_cache_format_rounds_as_llama_cpp_and_ml_dtypes_do() {
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cache_formats/meta.json")).unwrap())
            .unwrap();
    let dim = meta["dim"].as_u64().unwrap() as usize;
    let input = fixture("input");
    let formats = meta["formats"].as_array().unwrap();
    assert_eq!(formats.len(), CacheFormat::ALL.len() - 1, "every format but f32 has a reference");
    for name in formats {
        let name = name.as_str().unwrap();
        let format = CacheFormat::parse(name).unwrap_or_else(|| panic!("unknown format {name}"));
        let want = fixture(name);
        assert_eq!(want.len(), input.len(), "{name}: length");
        let mut got = input.clone();
        got.chunks_exact_mut(dim).for_each(|row| format.round_trip(row));
        let mismatches: Vec<(usize, f32, f32)> =
            got.iter().zip(&want).enumerate().filter(|(_, (g, w))| g != w).map(|(i, (g, w))| (i, *g, *w)).take(5).collect();
        assert!(want.iter().all(|w| w.is_finite()), "{name}: the reference holds a non-finite value");
        assert!(mismatches.is_empty(), "{name}: not exact (up to the sign of zero) at (index, sinkscope, reference) {mismatches:?}");
    }
}

mod common;

use sinkscope::kv::{simulate_with, Eviction, Policy, PositionMode, SimOptions};
use sinkscope::model::cache_rounding::CacheRounding;
use sinkscope::model::{load, LoadOptions, LoadedModel};

fn smollm2() -> Option<LoadedModel> {
    let path = common::model("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    Some(load(path.to_str().unwrap(), &LoadOptions::default()).unwrap())
}

fn book_ids(lm: &LoadedModel, n: usize) -> Vec<u32> {
    let text = std::fs::read_to_string(common::corpora_dir().join("pg1342_pride_and_prejudice.txt")).unwrap();
    lm.tokenizer.encode(&text[30_000..60_000]).unwrap()[..n].to_vec()
}

fn nll(lm: &LoadedModel, ids: &[u32], policy: Policy, rounding: CacheRounding, token_by_token: bool) -> Vec<f64> {
    let opts = SimOptions { rounding, token_by_token, ..SimOptions::default() };
    let o = simulate_with(&lm.model, ids, &[policy], opts, &mut |_, _| {}).unwrap().remove(0);
    assert!(o.nll.iter().all(|x| x.is_finite()), "{}: a non-finite NLL", o.label);
    o.nll
}

fn mean_gap(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum::<f64>() / a.len() as f64
}

/// Keys and values the cache keeps exact are the exact simulator's, bit for bit, on both of its
/// paths (the block replay, and decoding through the policy's cache); an fp8 key cache (whose
/// query is not rounded) with every position exact is the f32 cache.
#[test]
fn every_position_exact_is_the_exact_simulator() {
    let Some(lm) = smollm2() else { return };
    let ids = book_ids(&lm, 160);
    let fp8 = CacheRounding { keys: CacheFormat::Fp8E4m3, values: CacheFormat::Fp8E5m2, exact_first: 1000, ..CacheRounding::default() };
    for policy in
        [Policy::new(Eviction::Sink { sinks: 4 }, 64, PositionMode::Original), Policy::new(Eviction::Keep { n_keep: 4 }, 64, PositionMode::Delta)]
    {
        for tbt in [false, true] {
            let exact = nll(&lm, &ids, policy, CacheRounding::default(), tbt);
            assert_eq!(nll(&lm, &ids, policy, fp8, tbt), exact, "{} (token by token: {tbt})", policy.label());
            let rounded = nll(&lm, &ids, policy, CacheRounding { exact_first: 0, ..fp8 }, tbt);
            assert!(mean_gap(&rounded, &exact) > 1e-3, "fp8 changes nothing?");
        }
    }
}

/// The block replay and the policy's own cache round the same keys, values and queries at the
/// same places. Their per-token difference is not small: float order differs between the paths,
/// and a value a hair from a rounding boundary lands on either side (the change then travels
/// through later layers and tokens), so two correct paths differ per token nearly as much as the
/// format changes the model. A path that skipped a rounding would sit nearer the unrounded
/// simulator than the other path: the decoded path must be no nearer the exact one than to the
/// replay (a value cache left unrounded on one path fails the q4_1 row: 0.054 vs 0.000).
#[test]
fn both_simulator_paths_round_the_same_places() {
    let Some(lm) = smollm2() else { return };
    let ids = book_ids(&lm, 320);
    let formats = [
        CacheRounding { keys: CacheFormat::Fp8E5m2, values: CacheFormat::Fp8E5m2, ..CacheRounding::default() },
        CacheRounding { keys: CacheFormat::Q4_0, exact_first: 4, ..CacheRounding::default() },
        CacheRounding { values: CacheFormat::Q4_1, ..CacheRounding::default() },
    ];
    for positions in [PositionMode::Slot, PositionMode::Original, PositionMode::Delta] {
        let policy = match positions {
            PositionMode::Delta => Policy::new(Eviction::Keep { n_keep: 4 }, 128, positions),
            _ => Policy::new(Eviction::Sink { sinks: 4 }, 128, positions),
        };
        let exact = nll(&lm, &ids, policy, CacheRounding::default(), true);
        for f in formats {
            let r = CacheRounding { before_rope: positions == PositionMode::Slot, ..f };
            let (replay, decoded) = (nll(&lm, &ids, policy, r, false), nll(&lm, &ids, policy, r, true));
            let (paths, unrounded) = (mean_gap(&decoded, &replay), mean_gap(&decoded, &exact));
            eprintln!("{} {}: decoded vs replay {paths:.4}, vs the exact cache {unrounded:.4} nats per token", policy.label(), r.label());
            assert!(
                paths < unrounded,
                "{} {}: the decoded path is nearer the exact cache ({unrounded:.4}) than the replay ({paths:.4})",
                policy.label(),
                r.label()
            );
        }
    }
}

/// The KL divergence from the exact cache: exactly 0 at every step where nothing is rounded (the
/// lockstep replays run the same arithmetic), above 0 where a q4_0 cache rounds.
#[test]
fn kl_from_the_exact_cache_is_zero_when_nothing_rounds() {
    use sinkscope::kv::divergence::divergence_from_exact;
    let Some(lm) = smollm2() else { return };
    let ids = book_ids(&lm, 200);
    let policy = Policy::new(Eviction::Sink { sinks: 4 }, 96, PositionMode::Slot);
    let exact_all = CacheRounding { keys: CacheFormat::Fp8E4m3, exact_first: 1000, before_rope: true, ..CacheRounding::default() };
    let kl = divergence_from_exact(&lm.model, &ids, policy, exact_all, &mut |_, _| {}).unwrap();
    assert_eq!(kl.len(), ids.len() - 1);
    assert!(kl.iter().all(|&x| x == 0.0), "{:?}", &kl[..8]);
    let q4 = CacheRounding { keys: CacheFormat::Q4_0, values: CacheFormat::Q4_0, before_rope: true, ..CacheRounding::default() };
    let kl = divergence_from_exact(&lm.model, &ids, policy, q4, &mut |_, _| {}).unwrap();
    let mean = kl.iter().sum::<f64>() / kl.len() as f64;
    assert!(kl.iter().all(|x| x.is_finite() && *x >= 0.0) && mean > 1e-3, "mean KL {mean}");
}

/// A model without RoPE (GPT-2's learned positions) keeps the same key before and after RoPE: its
/// slot policies decode through their own cache under a rounding declared after RoPE too.
#[test]
fn a_model_without_rope_rounds_its_slot_caches() {
    let path = common::fixture("arch/gpt2");
    let lm = load(path.to_str().unwrap(), &LoadOptions::default()).unwrap();
    let ids: Vec<u32> = (0..80u32).map(|i| (i * 7 + 3) % lm.model.cfg.vocab_size as u32).collect();
    let fp8 = CacheRounding { keys: CacheFormat::Fp8E5m2, values: CacheFormat::Fp8E5m2, ..CacheRounding::default() };
    let policy = Policy::new(Eviction::Sink { sinks: 2 }, 24, PositionMode::Slot);
    let (replay, decoded) = (nll(&lm, &ids, policy, fp8, false), nll(&lm, &ids, policy, fp8, true));
    let exact = nll(&lm, &ids, policy, CacheRounding::default(), true);
    assert!(mean_gap(&decoded, &exact) > 0.0 && mean_gap(&replay, &exact) > 0.0);
}

/// The flags: what a run recorded, and each flag that cannot apply refused by name (one line,
/// exit 2, nothing written).
#[test]
fn cache_type_flags_are_recorded_and_refused_where_they_cannot_apply() {
    let Some(model) = common::model("SmolLM2-135M-Instruct.Q4_1.gguf") else { return };
    let Some(dir) = common::models_dir() else { return };
    let stories = dir.join("stories260K.gguf");
    let text = common::corpora_dir().join("pg1342_pride_and_prejudice.txt");
    let (m, f) = (model.to_str().unwrap(), text.to_str().unwrap());
    let tmp = common::temp_dir("kv-cache-types-cli");
    let out = tmp.join("run");
    let ok = common::sinkscope(&[
        "stream",
        "-m",
        m,
        "-f",
        f,
        "--tokens",
        "200",
        "--policy",
        "sink",
        "--cache",
        "64",
        "--cache-type-k",
        "q4_0",
        "--cache-type-v",
        "q8_0",
        "--unquantized-first",
        "4",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(
        stdout.contains("cache: K q4_0 · V q8_0 · 4 exact; keys rounded before RoPE (slot positions), block formats Hadamard-rotated"),
        "{stdout}"
    );
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("stream.json")).unwrap()).unwrap();
    let r = &report["cache_rounding"];
    assert_eq!((r["keys"].as_str(), r["values"].as_str(), r["exact_first"].as_u64()), (Some("q4_0"), Some("q8_0"), Some(4)));
    // canary decodes through the same cache: its steps see the rounded keys and values.
    let canary = |extra: &[&str]| -> serde_json::Value {
        let mut args =
            vec!["canary", "-m", m, "-p", "It is a truth universally acknowledged", "-n", "48", "--policy", "sink", "--cache", "24", "--json"];
        args.extend_from_slice(extra);
        let o = common::sinkscope(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let (exact, q4) = (canary(&[]), canary(&["--cache-type-k", "q4_0", "--cache-type-v", "q4_0"]));
    assert!(exact["run"].get("cache_rounding").is_none());
    assert_eq!(q4["run"]["cache_rounding"]["keys"], "q4_0");
    let logprobs =
        |r: &serde_json::Value| -> Vec<f64> { r["run"]["steps"].as_array().unwrap().iter().map(|s| s["logprob"].as_f64().unwrap()).collect() };
    assert_ne!(logprobs(&exact), logprobs(&q4), "the q4_0 cache changes nothing in canary");
    // needle streams its positional arms through the same rounded cache.
    let needle = |policies: &'static str, formats: &[&'static str]| -> Vec<&str> {
        let base = ["needle", "-m", m, "--lengths", "300", "--depths", "0.5", "--trials", "2", "--policy", policies, "--cache", "128"];
        base.into_iter().chain(formats.iter().copied()).collect()
    };
    let nd = tmp.join("needle");
    let mut args = needle("dense,sink", &["--cache-type-k", "q4_0", "--unquantized-first", "4", "-o"]);
    args.push(nd.to_str().unwrap());
    let o = common::sinkscope(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("cache: K q4_0 · V f32 · 4 exact"));
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(nd.join("needle.json")).unwrap()).unwrap();
    assert_eq!(report["settings"]["cache_rounding"]["exact_first"], 4);
    let refused = |args: &[&str], says: &str| {
        let dest = tmp.join("refused");
        let mut all = args.to_vec();
        all.extend_from_slice(&["-o", dest.to_str().unwrap()]);
        let o = common::sinkscope(&all);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says) && err.trim().lines().count() == 1, "{args:?}: {err}");
        assert!(!dest.exists(), "{args:?} left {}", dest.display());
    };
    let base = ["stream", "-m", m, "-f", f, "--tokens", "200", "--policy", "sink", "--cache", "64"];
    let with = |extra: &[&'static str]| -> Vec<&str> { base.iter().copied().chain(extra.iter().copied()).collect() };
    refused(&with(&["--unquantized-first", "4"]), "--unquantized-first keeps tokens exact in a rounded cache");
    refused(&with(&["--kl"]), "--kl measures a rounding cache against the exact one");
    let keep_delta = [
        "stream",
        "-m",
        m,
        "-f",
        f,
        "--tokens",
        "200",
        "--policy",
        "keep",
        "--cache",
        "64",
        "--positions",
        "delta",
        "--cache-type-k",
        "q8_0",
        "--kl",
    ];
    refused(&keep_delta, "not for keep N=4");
    refused(&with(&["--cache-type-k", "f16", "--no-attn-rot"]), "--no-attn-rot is for block formats");
    refused(&with(&["--cache-type-k", "q3_k"]), "not a cache type; one of f32, f16, bf16, q8_0");
    let h2o: Vec<&str> = ["stream", "-m", m, "-f", f, "--tokens", "200", "--policy", "h2o", "--cache", "64", "--cache-type-k", "q8_0"].to_vec();
    refused(&h2o, "not yet for h2o");
    let rec = ["recommend", "-m", m, "-f", f, "--tokens", "200", "--cache", "64", "--cache-type-k", "q8_0"];
    refused(&rec, "add --no-recompute");
    let tiny = ["stream", "-m", stories.to_str().unwrap(), "-f", f, "--tokens", "100", "--policy", "sink", "--cache", "32", "--cache-type-k", "q4_0"];
    refused(&tiny, "a q4_0 key cache stores blocks of 32 values, and this model's heads hold 8");
    let needle_h2o = needle("sink,h2o", &["--cache-type-k", "q8_0"]);
    refused(&needle_h2o, "not yet for h2o");
}
