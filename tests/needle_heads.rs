//! Which heads retrieve (`kv::retrieval::heads`) and the per-head mixed policy under the pass-key
//! sweep: a head's effect, computed over the answer's rows alone on a shared prefix, equals a
//! full forward over prompt + answer with the same keys hidden (an independent path: no cache,
//! every row re-run); the mixed policy with every KV head whole is dense, with none it is `sink`;
//! `needle --retrieval-heads` writes its table, section and figure, and reuses its measurement.

mod common;

use sinkscope::capture::collector::TensorCollector;
use sinkscope::kv::per_head::mixed_policy;
use sinkscope::kv::retrieval::arms::sweep;
use sinkscope::kv::retrieval::haystack::{draw_trials, Haystack};
use sinkscope::kv::retrieval::heads::prompt_effects;
use sinkscope::kv::retrieval::{sweep_from, CacheStream, Compression};
use sinkscope::kv::{Eviction, Policy, PositionMode};
use sinkscope::model::cache_rounding::CacheRounding;
use sinkscope::model::decoder::KeyMask;
use sinkscope::model::hook::{HookFilter, HookPoint};
use sinkscope::model::{load, LoadOptions, LoadedModel};

/// nats; both paths are f32 arithmetic over the same weights in a different order.
const NLL_TOL: f64 = 1e-4;

fn load_model(file: &str) -> Option<LoadedModel> {
    let path = common::model(file)?;
    Some(load(path.to_str().unwrap(), &LoadOptions::default()).unwrap())
}

fn book() -> String {
    std::fs::read_to_string(common::corpora_dir().join("pg84_frankenstein.txt")).unwrap()[..20_000].to_string()
}

/// The answer's NLL, summed, from hidden rows of prompt + answer[..m−1] (row p−1+j predicts j).
fn answer_nll(lm: &LoadedModel, hidden: &candle_core::Tensor, prompt_len: usize, answer: &[u32]) -> f64 {
    let rows = hidden.narrow(0, prompt_len - 1, answer.len()).unwrap();
    let nll = lm.model.next_token_nll(&rows, answer).unwrap();
    assert_eq!(nll.len(), answer.len());
    assert!(nll.iter().all(|x| x.is_finite()));
    nll.iter().sum()
}

#[test]
fn a_head_s_effect_equals_a_full_forward_with_the_needle_hidden_from_the_answer() {
    let text = book();
    for (file, layers) in [("stories260K.gguf", vec![0, 2, 4]), ("SmolLM2-135M-Instruct.Q4_1.gguf", vec![3, 17])] {
        let Some(lm) = load_model(file) else { return };
        let cfg = &lm.model.cfg;
        let trials = draw_trials(&lm.tokenizer, 1, 3, 11).unwrap();
        let haystack = Haystack::new(&lm.tokenizer, &text, 300, trials[0].needle.len()).unwrap();
        let at = haystack.insertion(0.3);
        let prompt = haystack.prompt(at, &trials[0].needle);
        let start = haystack.head.len() + at;
        let needle = start..start + trials[0].needle.len();
        let answer = &trials[0].candidates[0];
        let (kv, query, clean) = prompt_effects(&lm.model, &prompt, needle.clone(), answer).unwrap();
        assert_eq!((kv.len(), kv[0].len(), query.len(), query[0].len()), (cfg.n_layers, cfg.n_kv_heads, cfg.n_layers, cfg.n_heads));

        // The reference: every row of prompt + answer from each layer's input, no cache.
        let ids = [&prompt[..], &answer[..answer.len() - 1]].concat();
        let mut inputs = TensorCollector::new(HookFilter::parse("hook_resid_pre", cfg.n_layers).unwrap(), ids.len());
        let hidden = lm.model.forward(&ids, None, &mut inputs).unwrap();
        let reference_clean = answer_nll(&lm, &hidden, prompt.len(), answer);
        assert!((reference_clean - clean).abs() < NLL_TOL, "{file}: clean {clean} vs {reference_clean}");
        let group = cfg.n_heads / cfg.n_kv_heads;
        for &l in &layers {
            let (shape, data) = inputs.get(&HookPoint::ResidPre(l)).unwrap();
            let resid = candle_core::Tensor::from_slice(data, shape, &candle_core::Device::Cpu).unwrap();
            let mut masks: Vec<KeyMask> =
                (0..cfg.n_kv_heads).map(|g| KeyMask::span(l, (g * group..(g + 1) * group).collect(), needle.clone(), prompt.len() - 1)).collect();
            masks.push(KeyMask::span(l, vec![cfg.n_heads - 1], needle.clone(), prompt.len() - 1));
            let variants = lm.model.forward_masked(&resid, &masks).unwrap();
            assert_eq!(variants.len(), masks.len());
            for (g, h) in variants.iter().enumerate() {
                let want = answer_nll(&lm, h, prompt.len(), answer) - reference_clean;
                let got = if g < cfg.n_kv_heads { kv[l][g] } else { query[l][cfg.n_heads - 1] };
                assert!((got - want).abs() < NLL_TOL, "{file} layer {l} variant {g}: {got} vs {want}");
            }
        }
        if file.starts_with("SmolLM2") {
            // SmolLM2 retrieves the key here: some KV head's loss of the needle costs the answer.
            assert!(kv.iter().chain(&query).flatten().all(|d| d.is_finite()), "{kv:?}");
            let most = kv.iter().flatten().copied().max_by(f64::total_cmp).unwrap();
            assert!(most > 0.5, "no KV head's loss of the needle moves SmolLM2's answer: {most}");
        }
    }
}

#[test]
fn the_mixed_policy_with_every_head_whole_is_dense_and_with_none_is_sink() {
    let text = book();
    let Some(lm) = load_model("stories260K.gguf") else { return };
    let cfg = &lm.model.cfg;
    let trials = draw_trials(&lm.tokenizer, 2, 3, 5).unwrap();
    let haystack = Haystack::new(&lm.tokenizer, &text, 200, trials[0].needle.len()).unwrap();
    let insertions: Vec<usize> = [0.0, 0.6, 1.0].iter().map(|&d| haystack.insertion(d)).collect();
    let (s, w) = (4, 64);
    let mixed = |whole: bool| {
        let full = vec![vec![whole; cfg.n_kv_heads]; cfg.n_layers];
        let trunk = CacheStream::new(&lm.model, mixed_policy(s, w)).unwrap().with_full_heads(&full).unwrap();
        sweep_from(&lm.model, trunk, &haystack, &insertions, &trials, &mut |_| {}).unwrap()
    };
    let plain = |eviction: Eviction, cache: usize| {
        sweep(
            &lm.model,
            (Policy::new(eviction, cache, PositionMode::Slot), Compression::Streamed, CacheRounding::default()),
            &haystack,
            &insertions,
            &trials,
            &mut |_| {},
        )
        .unwrap()
    };
    for ((a, b), what) in
        [(mixed(true), plain(Eviction::Dense, 0)), (mixed(false), plain(Eviction::Sink { sinks: s }, w))].into_iter().zip(["dense", "sink"])
    {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
            assert_eq!((x.prompt_len, x.needle_start), (y.prompt_len, y.needle_start));
            assert_eq!(x.scores.nll.len(), y.scores.nll.len());
            for (p, q) in x.scores.nll.iter().zip(&y.scores.nll) {
                assert!((p - q).abs() < NLL_TOL, "mixed vs {what}: {p} vs {q}");
            }
            assert!((x.needle_kept - y.needle_kept).abs() < 1e-12, "{what}: kept {} vs {}", x.needle_kept, y.needle_kept);
        }
    }
}

#[test]
fn the_command_measures_heads_runs_the_per_head_arms_and_reuses_the_measurement() {
    let Some(model) = common::model("stories260K.gguf") else { return };
    let filler = common::corpora_dir().join("tinystories_val_subset.txt");
    let out = common::temp_child("needle-heads", "run");
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
        "-o",
        out.to_str().unwrap(),
    ];
    let first = common::sinkscope(&args);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(stdout.contains("heads that retrieve (4 calibration prompts of 200 tokens"), "{stdout}");
    for label in
        ["per-head, needle heads whole (4 of 20) + sink S=4, W=96", "per-head, attention heads whole (4 of 20)", "sink S=4 at per-head memory"]
    {
        assert!(stdout.contains(label), "{label} missing: {stdout}");
    }
    let md = std::fs::read_to_string(out.join("needle.md")).unwrap();
    assert!(md.contains("### Which heads retrieve") && md.contains("Spearman"), "{md}");
    assert!(out.join("figures/needle-heads.png").exists() && out.join("figures/needle-heads.svg").exists());
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("needle.json")).unwrap()).unwrap();
    let heads = &report["heads"];
    assert_eq!(heads["effects"]["kv"].as_array().unwrap().len(), 5, "stories260K has 5 layers");
    // The equal-memory sink holds the mixed cache's entries: 4 of 20 KV heads whole at the
    // 200-token prompt, 16 at W = 96 → ⌈(4·200 + 16·96)/20⌉ = 117.
    let budgets: Vec<u64> = report["trials"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["policy"] == "sink S=4 at per-head memory")
        .map(|t| t["budget"].as_u64().unwrap())
        .collect();
    assert!(!budgets.is_empty() && budgets.iter().all(|&b| b == 117), "{budgets:?}");
    #[cfg(feature = "parquet")]
    {
        let table = std::fs::read(out.join("tables/needle_heads.parquet")).unwrap();
        assert!(table.starts_with(b"PAR1"));
    }
    // A rerun reuses the measurement and every part, and lands the same findings.
    let second = common::sinkscope(&args);
    assert!(second.status.success(), "{}", String::from_utf8_lossy(&second.stderr));
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(String::from_utf8_lossy(&second.stdout).contains("heads that retrieve") && (err.contains("already measured")), "{err}");
    assert_eq!(std::fs::read_to_string(out.join("needle.md")).unwrap(), md);
    // `export` reads the sweep as part of the run: its tables, figures and a section of index.md.
    let export = common::sinkscope(&["export", out.to_str().unwrap(), "--parquet", "--png", "--md"]);
    assert!(export.status.success(), "{}", String::from_utf8_lossy(&export.stderr));
    let index = std::fs::read_to_string(out.join("index.md")).unwrap();
    assert!(index.contains("## Pass-key retrieval") && index.contains("### Which heads retrieve"), "{index}");
    assert!(index.contains("figures/needle-heads.png") && index.contains("needle_heads"), "{index}");
    assert!(out.join("figures/needle-dense.png").exists());
    // A share that keeps no head, or every head, is refused.
    let bad = common::sinkscope(&[&args[..args.len() - 4], &["--whole-share", "1", "-o", out.to_str().unwrap()]].concat());
    assert_eq!(bad.status.code(), Some(2));
}
