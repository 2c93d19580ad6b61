//! Score-based policies (H2O, TOVA) under a rounding cache (issue 44): keys (before RoPE, at slot
//! positions) and values rounded once as they enter, queries in the keys' product format — the
//! same places the positional caches round, checked three ways on SmolLM2: every position kept
//! exact is the exact scored cache bit for bit; a budget that never evicts, decoded token by
//! token, is the dense stream decoded through the positional cache under the same rounding (to
//! 1e-6 per token); the block replay and token-by-token decoding through the scored cache round
//! the same places. Rounded keys
//! at original positions (an engine storing rotated keys) are refused by name.

mod common;
mod rounding;

use rounding::{book_ids, mean_gap, nll, smollm2};
use sinkscope::kv::{Eviction, Policy, PositionMode, Scorer};
use sinkscope::model::cache_rounding::CacheRounding;
use sinkscope::numerics::cache_formats::CacheFormat;

fn h2o(cache: usize) -> Policy {
    Policy::new(Eviction::Scored { sinks: 4, scorer: Scorer::H2o { recent: None } }, cache, PositionMode::Slot)
}

fn q4() -> CacheRounding {
    CacheRounding { keys: CacheFormat::Q4_0, values: CacheFormat::Q8_0, before_rope: true, ..CacheRounding::default() }
}

#[test]
fn a_scored_cache_rounds_where_the_positional_caches_do() {
    let Some(lm) = smollm2() else { return };
    let ids = book_ids(&lm, 128);
    let tova = Policy::new(Eviction::Scored { sinks: 4, scorer: Scorer::Tova }, 48, PositionMode::Slot);
    // Every position exact: the exact scored cache, bit for bit, on both paths (an fp8 key
    // cache, whose queries are not rounded).
    let fp8 = CacheRounding { keys: CacheFormat::Fp8E4m3, values: CacheFormat::Fp8E5m2, before_rope: true, ..CacheRounding::default() };
    for (policy, tbt) in [(h2o(48), false), (h2o(48), true), (tova, false)] {
        let exact = nll(&lm, &ids, policy, CacheRounding::default(), tbt);
        assert_eq!(nll(&lm, &ids, policy, CacheRounding { exact_first: 1000, ..fp8 }, tbt), exact, "{}", policy.label());
        assert!(mean_gap(&nll(&lm, &ids, policy, fp8, tbt), &exact) > 1e-3, "{}: fp8 changes nothing?", policy.label());
        assert!(mean_gap(&nll(&lm, &ids, policy, q4(), tbt), &exact) > 1e-3, "{}: q4_0 changes nothing?", policy.label());
    }
    // Nothing evicted: decoded token by token, the dense stream decoded through the positional
    // cache under the same rounding (another store: the same numbers). Replayed in blocks, the
    // float order differs from decoding, and a value a hair from a rounding boundary lands on
    // either side, so that check is relative, as between the positional cache's own two paths:
    // nearer the dense rounded replay than the dense exact one.
    let dense = Policy::new(Eviction::Dense, 128, PositionMode::Slot);
    let (scored_decoded, dense_decoded) = (nll(&lm, &ids, h2o(128), q4(), true), nll(&lm, &ids, dense, q4(), true));
    let worst = common::max_abs_diff("h2o W=128 decoded vs dense decoded", &scored_decoded, &dense_decoded);
    assert!(worst < 1e-6, "decoded: {worst}");
    let (scored, dense_rounded) = (nll(&lm, &ids, h2o(128), q4(), false), nll(&lm, &ids, dense, q4(), false));
    let dense_exact = nll(&lm, &ids, dense, CacheRounding::default(), false);
    let (same, unrounded) = (mean_gap(&scored, &dense_rounded), mean_gap(&scored, &dense_exact));
    eprintln!("h2o W=128 q4_0 replayed: vs dense q4_0 {same:.4}, vs dense exact {unrounded:.4} nats per token");
    assert!(same < unrounded, "vs dense q4_0 {same:.4}, vs dense exact {unrounded:.4}");
    // Evicting: the block replay and token-by-token decoding round the same places.
    let exact = nll(&lm, &ids, h2o(48), CacheRounding::default(), true);
    let (replay, decoded) = (nll(&lm, &ids, h2o(48), q4(), false), nll(&lm, &ids, h2o(48), q4(), true));
    let (paths, unrounded) = (mean_gap(&decoded, &replay), mean_gap(&decoded, &exact));
    eprintln!("h2o W=48 q4_0: decoded vs replay {paths:.4}, vs the exact cache {unrounded:.4} nats per token");
    assert!(paths < unrounded, "decoded vs replay {paths:.4}, vs the exact cache {unrounded:.4}");
}

/// At original positions a scored cache stores each key rotated at its stream position and
/// rounds it there, as an engine that keeps keys rotated does: with every position exact it is
/// the exact scored cache bit for bit; with a budget that never evicts, decoded, it is the dense
/// stream through the positional cache rounding after RoPE (< 1e-6 per token); and its two paths
/// round the same places.
#[test]
fn a_scored_cache_at_original_positions_rounds_keys_as_rotated() {
    let Some(lm) = smollm2() else { return };
    let ids = book_ids(&lm, 128);
    let at_original = |cache| Policy { positions: PositionMode::Original, ..h2o(cache) };
    let rotated = CacheRounding { before_rope: false, ..q4() };
    for tbt in [false, true] {
        let exact = nll(&lm, &ids, at_original(48), CacheRounding::default(), tbt);
        let fp8 = CacheRounding { keys: CacheFormat::Fp8E4m3, values: CacheFormat::Fp8E5m2, exact_first: 1000, ..CacheRounding::default() };
        assert_eq!(nll(&lm, &ids, at_original(48), fp8, tbt), exact, "every position exact (token by token: {tbt})");
    }
    let dense = Policy::new(Eviction::Dense, 128, PositionMode::Original);
    let (scored, positional) = (nll(&lm, &ids, at_original(128), rotated, true), nll(&lm, &ids, dense, rotated, true));
    let worst = common::max_abs_diff("h2o W=128 at original positions vs dense, decoded", &scored, &positional);
    assert!(worst < 1e-6, "{worst}");
    let before_rope = nll(&lm, &ids, at_original(128), CacheRounding { before_rope: true, ..rotated }, true);
    assert!(mean_gap(&before_rope, &scored) > 1e-3, "rounding before and after RoPE differ");
    let exact = nll(&lm, &ids, at_original(48), CacheRounding::default(), true);
    let (replay, decoded) = (nll(&lm, &ids, at_original(48), rotated, false), nll(&lm, &ids, at_original(48), rotated, true));
    let (paths, unrounded) = (mean_gap(&decoded, &replay), mean_gap(&decoded, &exact));
    eprintln!("h2o W=48 q4_0 at original positions: decoded vs replay {paths:.4}, vs the exact cache {unrounded:.4} nats per token");
    assert!(paths < unrounded, "decoded vs replay {paths:.4}, vs the exact cache {unrounded:.4}");
}

#[test]
fn scored_caches_under_cache_types_run_through_the_binary() {
    let Some(model) = common::model("SmolLM2-135M-Instruct.Q4_1.gguf") else { return };
    let text = common::corpora_dir().join("pg1342_pride_and_prejudice.txt");
    let (m, f) = (model.to_str().unwrap(), text.to_str().unwrap());
    let tmp = common::temp_dir("kv-cache-scored");
    let stream = |extra: &[&str], out: &str| {
        let mut args = vec!["stream", "-m", m, "-f", f, "--tokens", "160", "--policy", "h2o", "--cache", "64", "--cache-type-k", "q4_0"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["-o", out]);
        common::sinkscope(&args)
    };
    let out = tmp.join("run");
    let ran = stream(&["--unquantized-first", "4"], out.to_str().unwrap());
    assert!(ran.status.success(), "{}", String::from_utf8_lossy(&ran.stderr));
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("stream.json")).unwrap()).unwrap();
    assert_eq!(report["cache_rounding"]["keys"], "q4_0", "{}", report["cache_rounding"]);
    let ppl = report["outcomes"][0]["ppl"].as_f64().unwrap();
    assert!(ppl.is_finite() && ppl > 1.0, "{ppl}");
    // At original positions keys are stored rotated, rounded after RoPE.
    let original = stream(&["--positions", "original"], tmp.join("original").to_str().unwrap());
    assert!(original.status.success(), "{}", String::from_utf8_lossy(&original.stderr));
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(tmp.join("original/stream.json")).unwrap()).unwrap();
    assert!(report["cache_rounding"]["before_rope"] == false && report["outcomes"][0]["ppl"].as_f64().is_some_and(f64::is_finite));
    // needle's streamed score-based arm (an fp8 cache: stories260K's heads hold 8 values).
    let nd = tmp.join("needle-run");
    let mut args = vec![
        "needle",
        "-m",
        "stories260k",
        "--lengths",
        "200",
        "--depths",
        "0.5",
        "--trials",
        "1",
        "--policy",
        "h2o",
        "--cache",
        "64",
        "--cache-type-k",
        "fp8-e4m3",
        "-o",
        nd.to_str().unwrap(),
    ];
    let needle = common::sinkscope(&args);
    assert!(needle.status.success(), "{}", String::from_utf8_lossy(&needle.stderr));
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(nd.join("needle.json")).unwrap()).unwrap();
    assert_eq!(report["settings"]["cache_rounding"]["keys"], "fp8-e4m3", "{}", report["settings"]);
    assert!(report["trials"][0]["answer_nll"].as_f64().is_some_and(f64::is_finite));
    // The answer's KL from the same policy's exact cache: above 0 here, exactly 0 with every
    // position kept exact (an fp8 key cache does not round its queries).
    let kl = |r: &serde_json::Value| r["trials"].as_array().unwrap().iter().map(|t| t["kl_from_exact"].as_f64().unwrap()).collect::<Vec<f64>>();
    assert!(kl(&report).iter().all(|&k| k > 0.0), "{:?}", kl(&report));
    assert!(String::from_utf8_lossy(&needle.stdout).contains("the answer's KL from the same policy's exact cache"));
    args.extend_from_slice(&["--unquantized-first", "100000"]);
    let all_exact = common::sinkscope(
        &args.iter().map(|a| a.replace("needle-run", "needle-exact")).collect::<Vec<_>>().iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert!(all_exact.status.success(), "{}", String::from_utf8_lossy(&all_exact.stderr));
    let exact: serde_json::Value = serde_json::from_slice(&std::fs::read(tmp.join("needle-exact").join("needle.json")).unwrap()).unwrap();
    assert!(kl(&exact).iter().all(|&k| k == 0.0), "{:?}", kl(&exact));
    assert_eq!(exact["cells"][0]["kl_from_exact"], 0.0);
}

/// The per-head sweep under a rounding cache: the mixed store rounds as the scored policies do
/// (with no head full, it is `h2o` R = W − S under the same rounding, NLL for NLL), counts each
/// format's bits in its memory, and compares each share with a uniform sink cache run through the
/// same store (at 0% and 100% retrieval heads, the same cache: the same perplexity).
#[test]
fn the_per_head_sweep_rounds_every_cache_it_runs() {
    use sinkscope::kv::per_head::{mixed_policy, simulate_mixed};
    let Some(lm) = smollm2() else { return };
    let ids = book_ids(&lm, 160);
    let cfg = &lm.model.cfg;
    let none = vec![vec![false; cfg.n_kv_heads]; cfg.n_layers];
    let rounding = CacheRounding { exact_first: 4, ..q4() };
    let mixed = simulate_mixed(&lm.model, &ids, &none, (4, 64), rounding).unwrap();
    assert_eq!(mixed.outcome.nll, nll(&lm, &ids, mixed_policy(4, 64), rounding, false));
    // 4 exact entries per (layer, KV head) at f16, the rest at q4_0 + q8_0: 4.5 + 8.5 bits a value.
    let heads = cfg.n_layers * cfg.n_kv_heads;
    let want = (4 * heads * 2 * cfg.d_head * 2) as f64 + ((mixed.entries - 4 * heads) * cfg.d_head) as f64 * 13.0 / 8.0;
    assert_eq!(mixed.bytes, want.ceil() as u64);

    let Some(model) = common::model("SmolLM2-135M-Instruct.Q4_1.gguf") else { return };
    let text = common::corpora_dir().join("pg1342_pride_and_prejudice.txt");
    let tmp = common::temp_dir("kv-cache-per-head");
    let out = tmp.join("run");
    let args = ["recommend", "-m", model.to_str().unwrap(), "-f", text.to_str().unwrap(), "--tokens", "200", "--cache", "64"];
    let extra = ["--per-head", "--shares", "0,1", "--cache-type-k", "q4_0", "--cache-type-v", "q8_0", "-o", out.to_str().unwrap()];
    let ran = common::sinkscope(&args.iter().chain(&extra).copied().collect::<Vec<_>>());
    assert!(ran.status.success(), "{}", String::from_utf8_lossy(&ran.stderr));
    assert!(String::from_utf8_lossy(&ran.stdout).contains("cache: K q4_0 · V q8_0"));
    let f: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("per_head.json")).unwrap()).unwrap();
    assert_eq!(f["cache_rounding"]["keys"], "q4_0");
    for row in f["rows"].as_array().unwrap() {
        assert_eq!(row["ppl_from_w"], row["uniform_ppl_from_w"], "{row}");
    }
}

/// needle's per-head arms (`--retrieval-heads`: whole heads chosen on the exact model) run under
/// a rounding cache too, each beside its exact twin: every prompt of every arm has its KL.
#[test]
fn needles_per_head_arms_run_under_a_rounding_cache() {
    let Some(model) = common::model("stories260K.gguf") else { return };
    let filler = common::corpora_dir().join("tinystories_val_subset.txt");
    let out = common::temp_child("kv-cache-needle-heads", "run");
    let args = [
        "needle",
        "-m",
        model.to_str().unwrap(),
        "-f",
        filler.to_str().unwrap(),
        "--lengths",
        "200",
        "--depths",
        "0,1",
        "--trials",
        "2",
        "--cache",
        "96",
        "--policy",
        "dense",
        "--retrieval-heads",
        "--whole-share",
        "0.2",
        "--cache-type-k",
        "fp8-e4m3",
        "--cache-type-v",
        "fp8-e5m2",
        "-o",
        out.to_str().unwrap(),
    ];
    let ran = common::sinkscope(&args);
    assert!(ran.status.success(), "{}", String::from_utf8_lossy(&ran.stderr));
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("needle.json")).unwrap()).unwrap();
    let trials = report["trials"].as_array().unwrap();
    for label in ["per-head, needle heads whole (4 of 20) + sink S=4, W=96", "sink S=4 at per-head memory", "dense"] {
        let arm: Vec<&serde_json::Value> = trials.iter().filter(|t| t["policy"].as_str().unwrap().starts_with(label)).collect();
        assert_eq!(arm.len(), 4, "{label}");
        assert!(arm.iter().all(|t| t["kl_from_exact"].as_f64().is_some_and(|k| k >= 0.0)), "{label}: {arm:?}");
    }
}

/// `stream --kl` under a score-based policy: two of its caches (exact, rounding) in lockstep, each
/// keeping what its own attention chooses. Where nothing rounds, the KL is exactly 0 and the two
/// sink masses equal; with a budget that never evicts, the exact side's sink mass is the dense
/// positional replay's (to 1e-4, every head of SmolLM2).
#[test]
fn kl_and_where_the_error_lands_under_a_scored_policy() {
    use sinkscope::kv::divergence::divergence_from_exact;
    let Some(lm) = smollm2() else { return };
    let ids = book_ids(&lm, 128);
    let fp8 =
        CacheRounding { keys: CacheFormat::Fp8E4m3, values: CacheFormat::Fp8E5m2, before_rope: true, exact_first: 1000, ..CacheRounding::default() };
    let none = divergence_from_exact(&lm.model, &ids, (h2o(48), fp8), 4, &mut |_, _| {}).unwrap();
    assert!(none.kl.len() == 127 && none.kl.iter().all(|&k| k == 0.0), "{:?}", &none.kl[..8]);
    assert!(none.by_head.heads.iter().all(|h| h.sink_mass_exact == h.sink_mass_rounded));
    let scored = divergence_from_exact(&lm.model, &ids, (h2o(128), q4()), 4, &mut |_, _| {}).unwrap();
    let dense = divergence_from_exact(&lm.model, &ids, (Policy::new(Eviction::Dense, 128, PositionMode::Slot), q4()), 4, &mut |_, _| {}).unwrap();
    assert_eq!(scored.by_head.queries, dense.by_head.queries);
    for (s, d) in scored.by_head.heads.iter().zip(&dense.by_head.heads) {
        assert!((s.sink_mass_exact - d.sink_mass_exact).abs() < 1e-4, "L{} H{}: {} vs {}", s.layer, s.head, s.sink_mass_exact, d.sink_mass_exact);
        assert!(s.key_error_rest.is_some_and(|e| e > 0.0) && s.value_error_sinks.is_some_and(|e| e > 0.0));
    }
    assert!(scored.kl.iter().all(|&k| k >= 0.0) && scored.kl.iter().sum::<f64>() > 0.0);
}

/// needle's question-known and recompute arms under a rounding cache (stories260K, fp8 keys: its
/// heads hold 8 values): each beside its exact twin, the answer's KL above 0; with every position
/// kept exact (an fp8 key cache does not round its queries) the KL is exactly 0 and the answer's
/// NLL the exact run's (the prompt's attention read through the cache: 1e-4 nats), at slot and at
/// original positions.
#[test]
fn needles_question_known_and_recompute_arms_run_under_a_rounding_cache() {
    let tmp = common::temp_dir("needle-arms-rounding");
    for positions in ["slot", "original"] {
        let run = |extra: &[&str], name: &str| -> serde_json::Value {
            let out = tmp.join(format!("{name}-{positions}"));
            let mut args =
                vec!["needle", "-m", "stories260k", "--lengths", "200", "--depths", "0.5", "--trials", "2", "--policy", "snapkv,h2o,recompute"];
            args.extend_from_slice(&["--cache", "64", "--question-known", "--positions", positions, "-o", out.to_str().unwrap()]);
            args.extend_from_slice(extra);
            let o = common::sinkscope(&args);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            serde_json::from_slice(&std::fs::read(out.join("needle.json")).unwrap()).unwrap()
        };
        let field = |r: &serde_json::Value, f: &str| -> Vec<(String, f64)> {
            r["trials"].as_array().unwrap().iter().map(|t| (t["policy"].as_str().unwrap().to_string(), t[f].as_f64().unwrap())).collect()
        };
        let exact = run(&[], "exact");
        let rounded = run(&["--cache-type-k", "fp8-e4m3", "--cache-type-v", "fp8-e5m2"], "fp8");
        let all_exact = run(&["--cache-type-k", "fp8-e4m3", "--unquantized-first", "100000"], "all-exact");
        let arms: Vec<String> = field(&rounded, "kl_from_exact").into_iter().map(|(p, _)| p).collect();
        assert!(arms.iter().any(|p| p.contains("question known")) && arms.iter().any(|p| p.starts_with("recompute")), "{arms:?}");
        assert!(field(&rounded, "kl_from_exact").iter().all(|(_, k)| *k > 0.0), "{:?}", field(&rounded, "kl_from_exact"));
        assert!(field(&all_exact, "kl_from_exact").iter().all(|(_, k)| *k == 0.0), "{:?}", field(&all_exact, "kl_from_exact"));
        for ((p, got), (q, want)) in field(&all_exact, "answer_nll").iter().zip(field(&exact, "answer_nll")) {
            assert_eq!(p, &q);
            assert!((got - want).abs() < 1e-4, "{positions} {p}: {got} against the exact run's {want}");
        }
    }
}
