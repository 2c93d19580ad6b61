//! Paged eviction (issue 45): `window`, `sink` and `keep` on a cache of 16-token pages, a page leaving
//! whole, held against an independent PyTorch loop that evicts whole pages
//! (tests/fixtures/make_paged_reference.py → paged_reference.json, W = 64, B = 16, S = 4), and
//! `h2o`, `tova`, `snapkv` choosing a layer's page by summed score against another
//! (make_score_stream_reference.py --paged → paged_score_reference.json, W = 64, B = 8), each on
//! both the block replay and token-by-token decoding; pages of 1 are the token-level positional
//! policy; the command line takes `--page` where pages apply and refuses it by name elsewhere.

#[macro_use]
mod common;

use sinkscope::kv::{simulate_with, Eviction, Policy, PolicyKind, PositionMode, SimOptions};
use sinkscope::model::{load, LoadOptions};

fn floats(v: &serde_json::Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

#[test]
fn paged_policies_match_an_independent_pytorch_loop() {
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(common::fixture("paged_reference.json")).unwrap()).unwrap();
    let (w, b, s) = (json["W"].as_u64().unwrap() as usize, json["B"].as_u64().unwrap() as usize, json["S"].as_u64().unwrap() as usize);
    for (key, file) in [("stories260k", "stories260K.gguf"), ("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")] {
        let path = model_or_skip!(file);
        let lm = load(path.to_str().unwrap(), &LoadOptions::default()).unwrap();
        let reference = &json["models"][key];
        let ids: Vec<u32> = reference["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let runs = [
            ("window_slot", Eviction::Window, PositionMode::Slot),
            ("sink4_slot", Eviction::Sink { sinks: s }, PositionMode::Slot),
            ("sink4_original", Eviction::Sink { sinks: s }, PositionMode::Original),
            ("sink4_delta", Eviction::Sink { sinks: s }, PositionMode::Delta),
            ("keep4_slot", Eviction::Keep { n_keep: s }, PositionMode::Slot),
            ("keep4_delta", Eviction::Keep { n_keep: s }, PositionMode::Delta),
        ];
        let policies: Vec<Policy> = runs.iter().map(|&(_, e, pos)| Policy::new(e, w, pos).paged(Some(b))).collect();
        for token_by_token in [false, true] {
            let opts = SimOptions { token_by_token, ..SimOptions::default() };
            let out = simulate_with(&lm.model, &ids, &policies, opts, &mut |_, _| {}).unwrap();
            for ((name, ..), o) in runs.iter().zip(&out) {
                let want = floats(&reference["runs"][name]["nll"]);
                assert_eq!(want.len(), o.nll.len(), "{key}/{name}");
                let worst = common::max_abs_diff("nll", &o.nll, &want);
                eprintln!("{key}/{name} (token by token: {token_by_token}): max |ΔNLL| vs PyTorch {worst:.2e}");
                assert!(worst < 1e-4, "{key}/{name}: {worst}");
                assert!(o.label.ends_with(&format!("in {b}-token pages")), "{}", o.label);
            }
        }
        // Pages of 1 are the token-level policy, bit for bit; 16-token pages differ once a page left.
        let sink = Policy::new(Eviction::Sink { sinks: s }, w, PositionMode::Slot);
        let out = simulate_with(&lm.model, &ids, &[sink, sink.paged(Some(1)), sink.paged(Some(b))], SimOptions::default(), &mut |_, _| {}).unwrap();
        assert_eq!(out[0].nll, out[1].nll);
        assert_eq!(out[0].nll[..w], out[2].nll[..w]);
        assert_ne!(out[0].nll[w..], out[2].nll[w..]);
    }
}

#[test]
fn paged_score_policies_match_an_independent_pytorch_loop() {
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(common::fixture("paged_score_reference.json")).unwrap()).unwrap();
    let (w, b) = (json["cache"].as_u64().unwrap() as usize, json["page"].as_u64().unwrap() as usize);
    for (key, file) in [("stories260k", "stories260K.gguf"), ("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")] {
        let path = model_or_skip!(file);
        let lm = load(path.to_str().unwrap(), &LoadOptions::default()).unwrap();
        let reference = &json["models"][key];
        let ids: Vec<u32> = reference["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let runs = reference["runs"].as_array().unwrap();
        let policies: Vec<Policy> = runs
            .iter()
            .map(|r| {
                let kind = PolicyKind::ALL.into_iter().find(|k| r["policy"] == k.name()).unwrap();
                let positions = PositionMode::ALL.into_iter().find(|p| r["positions"] == p.name()).unwrap();
                Policy::new(Eviction::of_kind(kind, r["sinks"].as_u64().unwrap() as usize, None), w, positions).paged(Some(b))
            })
            .collect();
        for token_by_token in [false, true] {
            let opts = SimOptions { token_by_token, ..SimOptions::default() };
            let out = simulate_with(&lm.model, &ids, &policies, opts, &mut |_, _| {}).unwrap();
            for (run, o) in runs.iter().zip(&out) {
                let want = floats(&run["nll"]);
                assert_eq!(want.len(), o.nll.len(), "{key}/{}", o.label);
                let worst = common::max_abs_diff("nll", &o.nll, &want);
                eprintln!("{key}/{} (token by token: {token_by_token}): max |ΔNLL| vs PyTorch {worst:.2e}", o.label);
                assert!(worst < 1e-4, "{key}/{}: {worst}", o.label);
                // The same pages kept: the first positions' survival and the keys' ages agree.
                let kept = o.kept.expect("a score-based policy reports what it kept");
                for (a, want) in kept.kept_first_share.iter().zip(floats(&run["kept_first_share"])) {
                    assert!((a - want).abs() < 1e-9, "{key}/{}: kept_first_share {a} vs {want}", o.label);
                }
                assert!((kept.mean_age - run["mean_age"].as_f64().unwrap()).abs() < 1e-9, "{key}/{}: mean age", o.label);
                assert_eq!(kept.samples as u64, run["samples"].as_u64().unwrap());
            }
        }
    }
}

/// With learned absolute positions a key carries the slot it entered at, so the block replay must
/// give each token the slot the paged set holds for it: the same as decoding token by token.
#[test]
fn learned_positions_enter_at_their_paged_slots() {
    let lm = load(common::fixture("arch/gpt2").to_str().unwrap(), &LoadOptions::default()).unwrap();
    let ids: Vec<u32> = (0..120).map(|i| (i * 7 % 200 + 3) as u32).collect();
    for kind in [PolicyKind::H2o, PolicyKind::Tova, PolicyKind::Snapkv] {
        let p = Policy::new(Eviction::of_kind(kind, 4, Some(8)), 32, PositionMode::Slot).paged(Some(8));
        let run =
            |token_by_token| simulate_with(&lm.model, &ids, &[p], SimOptions { token_by_token, ..SimOptions::default() }, &mut |_, _| {}).unwrap();
        let (block, token) = (run(false).remove(0), run(true).remove(0));
        let worst = common::max_abs_diff("nll", &block.nll, &token.nll);
        assert!(worst < 1e-4, "{}: block replay vs token by token {worst}", block.label);
        assert_eq!(block.kept, token.kept, "{}", block.label);
    }
}

#[test]
fn the_command_line_pages_the_rules_that_evict_and_refuses_the_rest() {
    let _ = model_or_skip!("stories260K.gguf");
    let dir = common::temp_dir("paged-cli");
    let text = common::corpora_dir().join("pg1342_pride_and_prejudice.txt");
    let text = text.to_str().unwrap();
    let stream = common::sinkscope(&[
        "stream",
        "-m",
        "stories260k",
        "-f",
        text,
        "--tokens",
        "200",
        "--policy",
        "sink",
        "--cache",
        "64",
        "--page",
        "16",
        "--json",
    ]);
    assert!(stream.status.success(), "{}", String::from_utf8_lossy(&stream.stderr));
    let got: serde_json::Value = serde_json::from_slice(&stream.stdout).unwrap();
    let label = got["label"].as_str().or_else(|| got[0]["label"].as_str()).unwrap_or_default().to_string();
    assert!(label.contains("in 16-token pages"), "{got}");
    let out = dir.join("needle");
    let needle = common::sinkscope(&[
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
        "dense,window,sink",
        "--cache",
        "64",
        "--page",
        "16",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(needle.status.success(), "{}", String::from_utf8_lossy(&needle.stderr));
    let record = std::fs::read_to_string(out.join("needle.json")).unwrap();
    assert!(
        record.contains("sink S=4 (its pages: 16) + 48 recent, W=64 (slot) in 16-token pages") && record.contains("\"page\": 16"),
        "paged arms recorded"
    );
    for (args, says) in [
        (vec!["stream", "--policy", "recompute"], "recompute keeps no cache"),
        (vec!["stream", "--policy", "dense"], "dense never evicts"),
        (vec!["stream", "--policy", "sink", "--cache", "60"], "not a multiple of the 16-token page"),
    ] {
        let mut all = vec!["-m", "stories260k", "-f", text, "--tokens", "100", "--page", "16"];
        all.splice(0..0, args.iter().copied());
        if !all.contains(&"--cache") {
            all.extend(["--cache", "64"]);
        }
        let done = common::sinkscope(&all);
        let err = String::from_utf8_lossy(&done.stderr);
        assert_eq!(done.status.code(), Some(2), "{all:?}: {err}");
        assert!(err.contains(says), "{all:?}: {err}");
    }
}
