//! kvpress's presses (issue 45) against kvpress 0.5.5 itself (scripts/kvpress/reference.py →
//! tests/fixtures/kvpress_reference.json): SmolLM2-135M, a 512-token context compressed once after
//! its prefill, the question and the answer appended uncompressed at the original positions. Per
//! press and ratio: the kept positions of every (layer, KV head) and the answer's per-token NLL.

#[macro_use]
mod common;
mod rounding;

use sinkscope::kv::press::scores::PressKind;
use sinkscope::kv::press::{answer_with_kept, run_press, Press};

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
        let press = Press { kind, ratio, sinks: kind.default_sinks() };
        let got = run_press(&lm.model, press, &context, (&question, &answer)).unwrap();
        assert_eq!(got.n_kept as u64, run["n_kept"].as_u64().unwrap(), "{name} {ratio}");
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
        let theirs: Vec<Vec<Vec<usize>>> = run["kept"]
            .as_array()
            .unwrap()
            .iter()
            .map(|layer| layer.as_array().unwrap().iter().map(|hex| kept_from_hex(hex.as_str().unwrap(), n)).collect())
            .collect();
        let want: Vec<f64> = run["answer_nll"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        let decoded = answer_with_kept(&lm.model, &context, &theirs, (&question, &answer)).unwrap();
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
