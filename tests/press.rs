//! kvpress's presses (issue 45) against kvpress 0.5.5 itself (scripts/kvpress/reference.py →
//! tests/fixtures/kvpress_reference.json): SmolLM2-135M, a 512-token context compressed once after
//! its prefill, the question and the answer appended uncompressed at the original positions. Per
//! press and ratio: the kept positions of every (layer, KV head) and the answer's per-token NLL.

#[macro_use]
mod common;
mod rounding;

use sinkscope::kv::press::scores::PressKind;
use sinkscope::kv::press::select::{Budget, ADAPTIVE_ALPHA, PYRAMID_BETA, PYRAMID_WINDOW};
use sinkscope::kv::press::{answer_with_kept, run_press, Press, PressTokens};

fn reference() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(common::fixture("kvpress_reference.json")).unwrap()).unwrap()
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// The relative gap between the cut and the best dropped score below which the two sides' float
/// orders may swap them (keys rotated and attention summed differently: ~1e-7 relative).
const NEAR_TIE: f64 = 1e-5;

/// Position p is bit p of the big-endian hex integer.
fn kept_from_hex(hex: &str, n: usize) -> Vec<usize> {
    let digits: Vec<u32> = hex.chars().map(|c| c.to_digit(16).unwrap()).collect();
    (0..n).filter(|&p| digits[digits.len() - 1 - p / 4] >> (p % 4) & 1 == 1).collect()
}

/// Every press sinkscope runs, at every ratio: the same kept positions wherever kvpress's cut has
/// no tie (where it has one, torch.topk's CPU tie-breaking chose, and sinkscope keeps the earlier
/// position: the kept sets may differ among the tied positions only) and no near tie (the best
/// dropped score within 1e-5 of the cut, relative: one position may swap), and the answer's NLL
/// within 1e-4 nats of kvpress's at every token where the kept sets are identical.
#[test]
fn presses_keep_what_kvpress_keeps() {
    let Some(lm) = rounding::smollm2() else { return };
    let json = reference();
    let (context, question, answer) = (ids(&json["context"]), ids(&json["question"]), ids(&json["answer"]));
    let n = context.len();
    let mut checked = 0;
    for run in json["runs"].as_array().unwrap() {
        let name = run["press"].as_str().unwrap();
        let Some(kind) = PressKind::parse(name) else { continue };
        let ratio = run["ratio"].as_f64().unwrap();
        let tokens = PressTokens { context: &context, question: &question, answer: &answer, query_aware: false };
        let got = run_press(&lm.model, Press::new(kind, ratio), tokens).unwrap();
        assert!(got.kept.iter().flatten().all(|h| h.len() as u64 == run["n_kept"].as_u64().unwrap()), "{name} {ratio}: kvpress's n_kept per head");
        let (mut same, mut heads, mut differ_at_ties) = (0, 0, 0);
        for (l, layer) in run["kept"].as_array().unwrap().iter().enumerate() {
            for (kv, hex) in layer.as_array().unwrap().iter().enumerate() {
                let want = kept_from_hex(hex.as_str().unwrap(), n);
                heads += 1;
                if got.kept[l][kv] == want {
                    same += 1;
                    continue;
                }
                let ties = run["ties_at_cut"][l][kv].as_u64().unwrap();
                let ties_kept = run["ties_at_cut_kept"][l][kv].as_u64().unwrap();
                let gap = run["cut_gap_rel"][l][kv].as_f64().unwrap();
                let differing = got.kept[l][kv].iter().filter(|p| !want.contains(p)).count() as u64;
                // A tie, or the best dropped score within float noise of the cut (the two sides
                // rotate keys and sum attention in different orders).
                let tied = ties > ties_kept || gap < NEAR_TIE;
                assert!(
                    tied && differing <= ties - ties_kept + 1,
                    "{name} {ratio}: layer {l} KV head {kv} keeps {differing} other positions, the cut {gap} from the next score with {ties} tied"
                );
                differ_at_ties += 1;
            }
        }
        // The answer after kvpress's own choice: the decode alone, against kvpress's.
        let theirs = kvpress_kept(run, n);
        let want: Vec<f64> = run["answer_nll"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        let decoded = answer_with_kept(&lm.model, tokens, &theirs, false).unwrap();
        let gap = common::max_abs_diff(name, &decoded, &want);
        let own = common::max_abs_diff(name, &got.answer_nll, &want);
        eprintln!("{name} ratio {ratio}: {same} of {heads} (layer, KV head) sets identical ({differ_at_ties} differ at a tie or near tie); answer NLL after kvpress's sets max |Δ| {gap:.2e}, after sinkscope's {own:.2e}");
        assert!(gap < 1e-4, "{name} {ratio}: max |ΔNLL| {gap}");
        if same == heads {
            assert!(own < 1e-4, "{name} {ratio}: the same sets, max |ΔNLL| {own}");
        }
        checked += 1;
    }
    assert_eq!(checked, 3 * PressKind::ALL.len(), "every press sinkscope runs, at three ratios");
}

/// kvpress's kept sets of a run ([layer][KV head]), from their hex bitmasks over `n` positions.
fn kvpress_kept(run: &serde_json::Value, n: usize) -> Vec<Vec<Vec<usize>>> {
    let layers = run["kept"].as_array().unwrap().iter();
    layers.map(|layer| layer.as_array().unwrap().iter().map(|hex| kept_from_hex(hex.as_str().unwrap(), n)).collect()).collect()
}

fn kept_of(run: &serde_json::Value) -> Vec<Vec<Vec<usize>>> {
    run["kept"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_array().unwrap().iter().map(|h| h.as_array().unwrap().iter().map(|p| p.as_u64().unwrap() as usize).collect()).collect())
        .collect()
}

fn floats(v: &serde_json::Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

/// `sinkscope press` on kvpress's own token ids (`--context-ids` …) writes what kvpress keeps —
/// SnapKV at 0.5, identical on every (layer, KV head) — and its answer NLL within 1e-4, the
/// uncompressed answer as kvpress's "none", and the tables one row per kept position, per answer
/// token (the uncompressed under "none") and per query head.
#[test]
fn the_press_command_writes_what_kvpress_keeps_and_its_tables() {
    let _ = model_or_skip!("SmolLM2-135M-Instruct.Q4_1.gguf");
    let json = reference();
    let dir = common::temp_dir("press-command");
    for part in ["context", "question", "answer"] {
        std::fs::write(dir.join(format!("{part}.json")), json[part].to_string()).unwrap();
    }
    let path = |p: &str| dir.join(p).to_str().unwrap().to_string();
    let (ctx, q, a, out) = (path("context.json"), path("question.json"), path("answer.json"), path("run"));
    let args = [
        "press",
        "-m",
        "smollm2-135m",
        "--context-ids",
        &ctx,
        "--question-ids",
        &q,
        "--answer-ids",
        &a,
        "--press",
        "snapkv,knorm",
        "--ratio",
        "0.5",
        "-o",
        &out,
    ];
    let done = common::sinkscope(&args);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let got: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("run/press.json")).unwrap()).unwrap();
    let theirs = json["runs"].as_array().unwrap().iter().find(|r| r["press"] == "snapkv" && r["ratio"] == 0.5).unwrap();
    let ours = got["runs"].as_array().unwrap().iter().find(|r| r["label"] == "snapkv").unwrap();
    let n = json["context"].as_array().unwrap().len();
    let want = kvpress_kept(theirs, n);
    assert_eq!(kept_of(ours), want, "snapkv 0.5: every (layer, KV head) keeps what kvpress keeps");
    assert!(common::max_abs_diff("snapkv", &floats(&ours["answer_nll"]), &floats(&theirs["answer_nll"])) < 1e-4);
    assert!(common::max_abs_diff("none", &floats(&got["uncompressed_nll"]), &floats(&json["none"]["answer_nll"])) < 1e-4);
    // Attention kept per query head: a share, and below 1 somewhere at half the keys.
    let shares: Vec<f64> = ours["attention_kept"].as_array().unwrap().iter().flat_map(floats).collect();
    assert_eq!(shares.len(), 30 * 9);
    assert!(shares.iter().all(|s| (0.0..=1.0 + 1e-9).contains(s)) && shares.iter().any(|&s| s < 0.99), "{shares:?}");
    let rows = |t: &str| sinkscope::report::parquet::read_frame(&dir.join(format!("run/tables/{t}.parquet"))).unwrap().height();
    let kept_rows: usize = got["runs"].as_array().unwrap().iter().map(|r| kept_of(r).iter().flatten().map(Vec::len).sum::<usize>()).sum();
    assert_eq!(rows("press_kept"), kept_rows);
    assert_eq!(rows("press_answer"), 16 * 3, "the answer's tokens, uncompressed and after each press");
    assert_eq!(rows("press_heads"), 2 * 30 * 9);
    assert_eq!(rows("press"), 2);
    assert!(std::fs::read_to_string(dir.join("run/press.md")).unwrap().contains("| snapkv | 0.5 |"));
    // An edited record is refused on reading back, by name, before any table indexes it.
    let mut edited = got.clone();
    edited["runs"][0]["kept"][3][1][0] = serde_json::json!(99_999);
    std::fs::write(dir.join("run/press.json"), edited.to_string()).unwrap();
    let export = common::sinkscope(&["export", &out, "--parquet"]);
    let err = String::from_utf8_lossy(&export.stderr);
    assert_eq!(export.status.code(), Some(2), "{err}");
    assert!(err.contains("press.json") && err.contains("kept positions"), "{err}");
}

/// From text, query-aware, in 16-token blocks: the question is
/// compressed with the context, every KV head of a layer keeps the same whole blocks, and the
/// answer runs after the compressed prefix.
#[test]
fn a_query_aware_press_in_blocks_keeps_whole_blocks_of_context_and_question() {
    let _ = model_or_skip!("SmolLM2-135M-Instruct.Q4_1.gguf");
    let dir = common::temp_dir("press-blocks");
    let book = common::corpora_dir().join("pg1342_pride_and_prejudice.txt");
    let out = dir.join("run");
    let args = [
        "press",
        "-m",
        "smollm2-135m",
        "-f",
        book.to_str().unwrap(),
        "--start-char",
        "100000",
        "--tokens",
        "300",
        "--question",
        "What did Elizabeth think of Mr. Darcy?",
        "--answer",
        " She thought him proud.",
        "--press",
        "knorm",
        "--ratio",
        "0.5",
        "--block",
        "16",
        "--query-aware",
        "-o",
        out.to_str().unwrap(),
    ];
    let done = common::sinkscope(&args);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let got: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("press.json")).unwrap()).unwrap();
    let q = got["question"]["ids"].as_array().unwrap().len();
    assert_eq!(got["context"]["ids"].as_array().unwrap().len(), 300);
    assert!(got["query_aware"].as_bool().unwrap());
    let n = 300 + q;
    let run = &got["runs"][0];
    assert_eq!(run["label"], "knorm+block16");
    let blocks = n.div_ceil(16);
    for layer in kept_of(run) {
        assert!(layer.iter().all(|h| *h == layer[0]), "one choice for every KV head of a layer");
        let whole: Vec<usize> = layer[0].iter().map(|p| p / 16).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        let expect: usize = whole.iter().map(|&b| if b == blocks - 1 { n - 16 * b } else { 16 }).sum();
        assert_eq!(layer[0].len(), expect, "whole blocks only");
        assert_eq!(whole.len(), blocks / 2, "⌊blocks · (1 − ratio)⌋ blocks");
    }
    assert!(floats(&run["answer_nll"]).iter().all(|x| x.is_finite()));
}

/// kvpress's tie record at the cut of layer `l`, KV head `kv`: (tied scores, tied kept, gap) —
/// per (layer, KV head) for the per-head cuts, per layer for AdaKV's and ChunkKV's (the chunks').
fn tie_at(run: &serde_json::Value, l: usize, kv: usize) -> (u64, u64, f64, bool) {
    let prefix = if run["chunk_ties_at_cut"].is_array() { "chunk_" } else { "" };
    let field = |name: &str| {
        let v = &run[format!("{prefix}{name}")][l];
        if v.is_array() {
            v[kv].clone()
        } else {
            v.clone()
        }
    };
    let per_layer = !run[format!("{prefix}ties_at_cut")][l].is_array();
    (field("ties_at_cut").as_u64().unwrap(), field("ties_at_cut_kept").as_u64().unwrap(), field("cut_gap_rel").as_f64().unwrap_or(0.0), per_layer)
}

/// kvpress's wrappers and budgets (scripts/kvpress/wrappers.py → kvpress_wrappers.json): ChunkKV's
/// 16-token chunks, PyramidKV's per-layer budgets, key re-rotation, AdaKV's head-adaptive
/// allocation and the query-aware setting keep the same positions as kvpress wherever its cut has
/// no tie or near tie (where it has one: at most the tied positions differ), and the answer after
/// kvpress's sets is kvpress's within 1e-4 nats (after sinkscope's own where the sets agree).
#[test]
fn wrappers_keep_what_kvpress_keeps() {
    let Some(lm) = rounding::smollm2() else { return };
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(common::fixture("kvpress_wrappers.json")).unwrap()).unwrap();
    let (context, question, answer) = (ids(&json["context"]), ids(&json["question"]), ids(&json["answer"]));
    let mut wrappers = std::collections::BTreeSet::new();
    for run in json["runs"].as_array().unwrap() {
        let (wrapper, name, ratio) = (run["wrapper"].as_str().unwrap(), run["press"].as_str().unwrap(), run["ratio"].as_f64().unwrap());
        let kind = PressKind::parse(name).unwrap();
        let mut press = Press::new(kind, ratio);
        match wrapper {
            "chunkkv" => press.block = Some(16),
            "pyramidkv" => press.budget = Budget::Pyramid { window: PYRAMID_WINDOW, beta: PYRAMID_BETA },
            "key_rerotation" => press.rerotate = true,
            "adakv" => press.budget = Budget::Adaptive { alpha: ADAPTIVE_ALPHA },
            "query_aware" => {}
            other => panic!("a wrapper the test does not know: {other}"),
        }
        let tokens = PressTokens { context: &context, question: &question, answer: &answer, query_aware: wrapper == "query_aware" };
        let n = context.len() + if tokens.query_aware { question.len() } else { 0 };
        let got = run_press(&lm.model, press, tokens).unwrap();
        let theirs = kvpress_kept(run, n);
        let (mut same, mut heads) = (0, 0);
        for (l, layer) in theirs.iter().enumerate() {
            let mut layer_differing = 0;
            for (kv, want) in layer.iter().enumerate() {
                heads += 1;
                if got.kept[l][kv] == *want {
                    same += 1;
                    continue;
                }
                let (ties, ties_kept, gap, per_layer) = tie_at(run, l, kv);
                let differing = got.kept[l][kv].iter().filter(|p| !want.contains(p)).count() as u64
                    + want.iter().filter(|p| !got.kept[l][kv].contains(p)).count() as u64;
                let tied = ties > ties_kept || gap < NEAR_TIE;
                let allowed = 2 * (ties - ties_kept + 1) * if wrapper == "chunkkv" { 16 } else { 1 };
                assert!(tied, "{wrapper} {name} {ratio}: layer {l} KV head {kv} keeps other positions with no tie at the cut (gap {gap})");
                layer_differing += differing;
                if !per_layer {
                    assert!(differing <= allowed, "{wrapper} {name} {ratio}: layer {l} KV head {kv}: {differing} positions differ");
                    layer_differing = 0;
                } else {
                    assert!(layer_differing <= allowed, "{wrapper} {name} {ratio}: layer {l}: {layer_differing} positions differ");
                }
            }
        }
        let want = floats(&run["answer_nll"]);
        let decoded = answer_with_kept(&lm.model, tokens, &theirs, press.rerotate).unwrap();
        let gap = common::max_abs_diff(name, &decoded, &want);
        let own = common::max_abs_diff(name, &got.answer_nll, &want);
        eprintln!("{wrapper} {name} {ratio}: {same} of {heads} sets identical; answer NLL after kvpress's sets max |Δ| {gap:.2e}, after sinkscope's {own:.2e}");
        assert!(gap < 1e-4, "{wrapper} {name} {ratio}: max |ΔNLL| {gap}");
        if same == heads {
            assert!(own < 1e-4, "{wrapper} {name} {ratio}: the same sets, max |ΔNLL| {own}");
        }
        wrappers.insert(wrapper.to_string());
    }
    assert_eq!(wrappers.len(), 5, "every wrapper the fixture holds: {wrappers:?}");
}
