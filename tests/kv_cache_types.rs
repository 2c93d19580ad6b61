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

#[macro_use]
mod common;
#[cfg(feature = "tui")]
mod dashboard;

mod rounding;

use rounding::{book_ids, mean_gap, nll, smollm2};
use sinkscope::kv::{Eviction, Policy, PositionMode};
use sinkscope::model::cache_rounding::CacheRounding;
use sinkscope::model::{load, LoadOptions};

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
    let kl = divergence_from_exact(&lm.model, &ids, (policy, exact_all), 4, &mut |_, _| {}).unwrap().kl;
    assert_eq!(kl.len(), ids.len() - 1);
    assert!(kl.iter().all(|&x| x == 0.0), "{:?}", &kl[..8]);
    let q4 = CacheRounding { keys: CacheFormat::Q4_0, values: CacheFormat::Q4_0, before_rope: true, ..CacheRounding::default() };
    let kl = divergence_from_exact(&lm.model, &ids, (policy, q4), 4, &mut |_, _| {}).unwrap().kl;
    let mean = kl.iter().sum::<f64>() / kl.len() as f64;
    assert!(kl.iter().all(|x| x.is_finite() && *x >= 0.0) && mean > 1e-3, "mean KL {mean}");
}

/// Keeps every layer's attention pattern of a dense forward.
#[derive(Default)]
struct Patterns(Vec<Vec<f32>>, Vec<usize>);

impl sinkscope::model::receiver::HookReceiver for Patterns {
    fn wants(&self, hook: &sinkscope::model::hook::HookPoint) -> bool {
        matches!(hook, sinkscope::model::hook::HookPoint::Pattern(_))
    }
    fn record(&mut self, hook: &sinkscope::model::hook::HookPoint, _: std::ops::Range<usize>, value: &candle_core::Tensor) -> sinkscope::Result<()> {
        let sinkscope::model::hook::HookPoint::Pattern(layer) = *hook else { return Ok(()) };
        assert_eq!(layer, self.0.len(), "one pattern per layer, in order");
        self.1 = value.dims().to_vec();
        self.0.push(value.flatten_all()?.to_vec1::<f32>()?);
        Ok(())
    }
}

/// Where the error lands, per head: the exact stream's attention on the sink positions is the
/// dense forward's own attention pattern summed over those keys (to 1e-4); a cache that keeps
/// every position exact moves nothing and stores no error; q4_0 stores one at every position
/// and moves attention.
#[test]
fn the_error_by_head_holds_the_dense_patterns_sink_mass() {
    use sinkscope::kv::divergence::divergence_from_exact;
    let Some(lm) = smollm2() else { return };
    let ids = book_ids(&lm, 120);
    let sinks = 3;
    let mut patterns = Patterns::default();
    lm.model.forward(&ids, None, &mut patterns).unwrap();
    let (heads, t) = (patterns.1[0], patterns.1[1]);
    assert_eq!((patterns.0.len(), t), (lm.model.cfg.n_layers, ids.len()));
    let dense = Policy::new(Eviction::Dense, ids.len(), PositionMode::Slot);
    let exact_all = CacheRounding { keys: CacheFormat::Fp8E4m3, exact_first: 1000, before_rope: true, ..CacheRounding::default() };
    let kept = divergence_from_exact(&lm.model, &ids, (dense, exact_all), sinks, &mut |_, _| {}).unwrap().by_head;
    assert_eq!((kept.heads.len(), kept.queries, kept.sink_positions), (lm.model.cfg.n_layers * heads, ids.len() - 1 - sinks, sinks));
    for h in &kept.heads {
        let a = &patterns.0[h.layer];
        // Queries 3..=118 predict tokens 4..=119: the stream's steps, those past the sinks.
        let want: f64 =
            (sinks..t - 1).map(|q| (0..sinks).map(|k| a[(h.head * t + q) * t + k] as f64).sum::<f64>()).sum::<f64>() / (t - 1 - sinks) as f64;
        assert!((h.sink_mass_exact - want).abs() < 1e-4, "L{} H{}: {} against the pattern's {want}", h.layer, h.head, h.sink_mass_exact);
        assert_eq!(h.sink_mass_rounded, h.sink_mass_exact, "nothing rounded, nothing moved");
        assert_eq!((h.key_error_sinks, h.key_error_rest, h.value_error_rest), (Some(0.0), Some(0.0), Some(0.0)));
    }
    let q4 = CacheRounding { keys: CacheFormat::Q4_0, values: CacheFormat::Q4_0, ..CacheRounding::default() };
    let rounded = divergence_from_exact(&lm.model, &ids, (dense, q4), sinks, &mut |_, _| {}).unwrap().by_head;
    for (h, e) in rounded.heads.iter().zip(&kept.heads) {
        assert_eq!(h.sink_mass_exact, e.sink_mass_exact, "the exact side does not depend on the rounding");
        assert!(h.key_error_sinks.unwrap() > 0.01 && h.value_error_rest.unwrap() > 0.01, "q4_0 rounds: {h:?}");
        assert!((0.0..=1.0).contains(&h.sink_mass_rounded));
    }
    let moved = rounded.most_moved()[0].sink_mass_moved();
    assert!(moved > 1e-3, "q4_0 moves some head's attention off the sinks ({moved})");
}

/// `recompute` rounds too: each window is prefilled afresh into a cache of the format. With W as
/// long as the stream every step's window is the dense stream's prefix, so recompute is the dense
/// stream under the same format (two paths: a prefilled policy cache against the block replay);
/// at a short W the rounding changes recompute's numbers.
#[test]
fn recompute_prefills_each_window_into_a_rounding_cache() {
    let Some(lm) = smollm2() else { return };
    let ids = book_ids(&lm, 96);
    let q8 = CacheRounding { keys: CacheFormat::Q8_0, values: CacheFormat::Q8_0, ..CacheRounding::default() };
    let dense = nll(&lm, &ids, Policy::new(Eviction::Dense, 0, PositionMode::Original), q8, false);
    let whole = nll(&lm, &ids, Policy::new(Eviction::Recompute, 200, PositionMode::Original), q8, false);
    let gap = mean_gap(&dense, &whole);
    assert!(gap < 2e-3, "recompute over the whole prefix against the dense stream, q8_0: mean |Δ| {gap}");
    let short = Policy::new(Eviction::Recompute, 32, PositionMode::Original);
    let (exact, rounded) = (nll(&lm, &ids, short, CacheRounding::default(), false), nll(&lm, &ids, short, q8, false));
    assert!(mean_gap(&exact[32..], &rounded[32..]) > 0.0);
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

/// `stream --kl`'s error by head: printed, in stream.json, a Parquet table (one row per head),
/// a figure, and the dashboard's streaming view.
fn where_the_error_lands_is_in_the_run_its_tables_and_the_dashboard(out: &std::path::Path, stdout: &str, report: &serde_json::Value) {
    assert!(stdout.contains("Where the error lands (positions 0–3 as the sinks, 195 queries per head)"), "{stdout}");
    let heads = report["cache_error_by_head"]["heads"].as_array().unwrap();
    assert_eq!(heads.len(), 30 * 9, "SmolLM2: 30 layers × 9 heads");
    // The first 4 positions are kept exact: their keys carry no error.
    assert!(heads.iter().all(|h| h["key_error_sinks"].as_f64() == Some(0.0) && h["key_error_rest"].as_f64().unwrap() > 0.0));
    assert_eq!(report["kl_from_exact"].as_array().unwrap().len(), 199);
    #[cfg(all(feature = "parquet", feature = "plots"))]
    {
        let o = common::sinkscope(&["export", out.to_str().unwrap(), "--parquet", "--png"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let frame = sinkscope::report::parquet::read_frame(&out.join("tables/cache_error_heads.parquet")).unwrap();
        assert_eq!(frame.height(), 270);
        let moved = frame.column("sink_mass_moved").unwrap().f64().unwrap().get(0).unwrap();
        assert_eq!(moved, heads[0]["sink_mass_exact"].as_f64().unwrap() - heads[0]["sink_mass_rounded"].as_f64().unwrap());
        let kl = sinkscope::report::parquet::read_frame(&out.join("tables/stream_nll.parquet")).unwrap();
        assert_eq!(kl.column("kl_from_exact").unwrap().f64().unwrap().get(5), report["kl_from_exact"][5].as_f64());
        assert!(std::fs::metadata(out.join("figures/cache-error-heads.png")).unwrap().len() > 1000);
    }
    #[cfg(feature = "tui")]
    {
        use sinkscope::tui::{action::Action, state::Tab};
        let mut app = sinkscope::tui::state::App::new(sinkscope::report::run::Run::open(out).unwrap());
        let s = dashboard::screen(&mut app, &[Action::GoTab(Tab::Streaming)]);
        assert!(s.contains("Cache K q4_0 · V q8_0 · 4 exact") && s.contains("moved most off the sinks"), "{s}");
    }
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
        "--kl",
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
    where_the_error_lands_is_in_the_run_its_tables_and_the_dashboard(&out, &stdout, &report);
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
    let tiny = ["stream", "-m", stories.to_str().unwrap(), "-f", f, "--tokens", "100", "--policy", "sink", "--cache", "32", "--cache-type-k", "q4_0"];
    refused(&tiny, "a q4_0 key cache stores blocks of 32 values, and this model's heads hold 8");
}

/// `recommend --cache-types`: every (cache type × exact first tokens) × policy row, each row's
/// perplexity the one `stream` gives the same configuration on the scored steps, the memory
/// shares the formats' bits say, the choice the best row within the budget and on the frontier;
/// the file records, the Parquet table, and the flags that cannot apply refused by name.
#[test]
fn the_cache_type_frontier_answers_under_a_memory_budget() {
    let Some(model) = common::model("SmolLM2-135M-Instruct.Q4_1.gguf") else { return };
    let text = common::corpora_dir().join("pg1342_pride_and_prejudice.txt");
    let (m, f) = (model.to_str().unwrap(), text.to_str().unwrap());
    let tmp = common::temp_dir("kv-cache-frontier");
    let out = tmp.join("run");
    let base = ["-m", m, "-f", f, "--start-char", "30000", "--tokens", "300", "--cache", "48"];
    let mut args = vec!["recommend"];
    args.extend(base);
    args.extend(["--windows", "96", "--cache-types", "q8_0,q4_0,q8_0/q4_0", "--unquantized-firsts", "0,4", "--memory-budget", "25%", "--json", "-o"]);
    args.push(out.to_str().unwrap());
    let o = common::sinkscope(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let fr: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = fr["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3 * 2 * 3, "3 types × N ∈ {{0, 4}} × (S=4 at W = 48, 96, and the full cache)");
    assert_eq!(fr["scored_from"], 96);
    let reference_bytes = fr["reference_bytes"].as_f64().unwrap();
    let budget = 0.25 * reference_bytes;
    let chosen = fr["chosen"].as_u64().unwrap() as usize;
    let ratio = |r: &serde_json::Value| r["ratio"].as_f64().unwrap();
    let bytes = |r: &serde_json::Value| r["bytes"].as_f64().unwrap();
    assert!(bytes(&rows[chosen]) <= budget && rows[chosen]["on_frontier"] == true);
    for r in rows {
        assert!(bytes(r) > budget || ratio(r) >= ratio(&rows[chosen]), "a better row within the budget: {r}");
        let [lo, hi] = [r["ratio_ci"][0].as_f64().unwrap(), r["ratio_ci"][1].as_f64().unwrap()];
        assert!(lo <= ratio(r) && ratio(r) <= hi, "{r}");
    }
    // The q4_0 full cache stores 4.5 bits per value where f16 stores 16.
    let full_q4 = rows.iter().find(|r| r["format"] == "K q4_0 · V q4_0" && r["cache"].is_null()).unwrap();
    assert_eq!(full_q4["memory_share"].as_f64().unwrap(), 4.5 / 16.0);
    // A row is what `stream` gives the same configuration, on the steps the frontier scores.
    let mut stream = vec!["stream"];
    stream.extend(base);
    stream.extend(["--policy", "sink", "--sinks", "4", "--cache-type-k", "q8_0", "--cache-type-v", "q4_0", "--unquantized-first", "4", "--json"]);
    let s = common::sinkscope(&stream);
    assert!(s.status.success(), "{}", String::from_utf8_lossy(&s.stderr));
    let nll: Vec<f64> =
        serde_json::from_slice::<serde_json::Value>(&s.stdout).unwrap()["nll"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    let want = (nll[96..].iter().sum::<f64>() / (nll.len() - 96) as f64).exp();
    let row = rows.iter().find(|r| r["format"] == "K q8_0 · V q4_0 · 4 exact" && r["cache"] == 48).unwrap();
    assert!((row["ppl"].as_f64().unwrap() - want).abs() < 1e-9, "{row} against stream's {want}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("stream.json")).unwrap()).unwrap();
    assert_eq!(report["cache_frontier"]["rows"].as_array().unwrap().len(), 18);
    assert_eq!(report["outcomes"].as_array().unwrap().len(), 19, "the exact full cache and every row");
    #[cfg(all(feature = "parquet", feature = "plots"))]
    {
        let o = common::sinkscope(&["export", out.to_str().unwrap(), "--parquet", "--png"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let frame = sinkscope::report::parquet::read_frame(&out.join("tables/cache_frontier.parquet")).unwrap();
        assert_eq!(frame.height(), 18);
        let chosen_col = frame.column("chosen").unwrap().bool().unwrap();
        assert_eq!((0..chosen_col.len()).filter(|&i| chosen_col.get(i) == Some(true)).count(), 1);
        assert!(std::fs::metadata(out.join("figures/cache-frontier.png")).unwrap().len() > 1000);
    }
    #[cfg(feature = "tui")]
    {
        use sinkscope::tui::{action::Action, state::Tab};
        let mut app = sinkscope::tui::state::App::new(sinkscope::report::run::Run::open(&out).unwrap());
        let screen = dashboard::screen(&mut app, &[Action::GoTab(Tab::Streaming)]);
        assert!(screen.contains("Cache types") && screen.contains("costs") && screen.contains("The frontier"), "{screen}");
    }
    let refused = |extra: &[&str], says: &str| {
        let mut all = vec!["recommend"];
        all.extend(base);
        all.extend_from_slice(extra);
        let o = common::sinkscope(&all);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(says) && err.trim().lines().count() == 1, "{extra:?}: {err}");
    };
    refused(&["--windows", "96"], "--cache-types");
    refused(&["--cache-types", "q4_0", "--memory-budget", "140%"], "140% is not a share");
    refused(&["--cache-types", "q4_0", "--cache-type-k", "q8_0"], "--cache-type-k");
    refused(&["--cache-types", "q4_0", "--per-head"], "--per-head");
    refused(&["--cache-types", "q5_k"], "not a cache type");
    refused(&["--cache-types", "f16", "--no-attn-rot"], "--no-attn-rot is for block formats");
}
