//! `sinkscope canary`: its per-step mass and log-probability against the full forward pass (itself
//! checked against HF transformers), what window and sink caches do to the first slots, the trace
//! `watch` reads, and bad input.

#[macro_use]
mod common;

use sinkscope::capture::collector::TensorCollector;
use sinkscope::io::trace::read_trace;
use sinkscope::kv::canary::{run_canary, CanaryOptions, FIRST_SLOTS};
use sinkscope::kv::policy::{Eviction, Policy, PolicyKind, PositionMode};
use sinkscope::model::hook::{HookFilter, HookPoint};
use sinkscope::model::{load, LoadOptions};

fn policy(kind: PolicyKind, sinks: usize, cache: usize) -> Policy {
    Policy::new(Eviction::of_kind(kind, sinks, None), cache, PositionMode::Slot)
}

/// Under a dense cache, step i's first-slot mass per layer is the full forward's pattern row i
/// summed over keys 0..4 and averaged over heads, and its log-probability is −NLL of token i + 1
/// (tolerance 2e-5 on the mass, 1e-4 nats on the logprob: decode vs one block of queries).
#[test]
fn dense_canary_matches_the_full_forward() {
    let path = model_or_skip!("stories260K.gguf");
    let lm = load(path.to_str().unwrap(), &LoadOptions::default()).unwrap();
    let text = std::fs::read_to_string(common::fixture("texts/tinystories.txt")).unwrap();
    let ids: Vec<u32> = lm.tokenizer.encode(&text).unwrap().into_iter().take(48).collect();
    let opts = CanaryOptions {
        policy: policy(PolicyKind::Dense, 0, 0),
        prompt: ids[..8].to_vec(),
        steps: 40,
        forced: Some(ids[8..].to_vec()),
        temperature: 0.0,
        seed: 1,
        layer: 2,
        collapse: 0.25,
        rounding: Default::default(),
    };
    let run = run_canary(&lm.model, &opts, &mut |_, _| {}).unwrap();
    assert_eq!(run.steps.len(), ids.len() - 1);
    let mut sink = TensorCollector::new(HookFilter::parse("hook_pattern", lm.model.cfg.n_layers).unwrap(), ids.len());
    let hidden = lm.model.forward(&ids, None, &mut sink).unwrap();
    let nll = lm.model.next_token_nll(&hidden.narrow(0, 0, ids.len() - 1).unwrap(), &ids[1..]).unwrap();
    let (h, t) = (lm.model.cfg.n_heads, ids.len());
    for (i, step) in run.steps.iter().enumerate() {
        assert_eq!(step.token, ids[i + 1]);
        assert!((step.logprob + nll[i]).abs() < 1e-4, "step {i}: {} vs {}", step.logprob, -nll[i]);
        for l in 0..lm.model.cfg.n_layers {
            let (_, p) = sink.get(&HookPoint::Pattern(l)).unwrap();
            let mass: f64 = (0..h).map(|hd| (0..FIRST_SLOTS.min(i + 1)).map(|k| p[(hd * t + i) * t + k] as f64).sum::<f64>()).sum::<f64>() / h as f64;
            assert!((step.first_slot_mass[l] - mass).abs() < 2e-5, "step {i} layer {l}: {} vs {mass}", step.first_slot_mass[l]);
        }
    }
}

/// SmolLM2 (strong sinks), W = 64 on real text: a window evicts the first token at the first
/// eviction and the watched mid-depth layer's mass collapses there (flagged); a sink cache keeps
/// token 0 in slot 0 and its mass, and nothing is flagged.
#[test]
fn window_loses_the_first_slot_mass_and_sinks_keep_it() {
    let path = model_or_skip!("SmolLM2-135M-Instruct.Q4_1.gguf");
    let lm = load(path.to_str().unwrap(), &LoadOptions::default()).unwrap();
    let text = std::fs::read_to_string(common::fixture("texts/pride.txt")).unwrap();
    let ids: Vec<u32> = lm.tokenizer.encode(&text).unwrap().into_iter().take(120).collect();
    let layer = lm.model.cfg.n_layers / 2;
    let run = |p: Policy| {
        let opts = CanaryOptions {
            policy: p,
            prompt: ids[..1].to_vec(),
            steps: ids.len() - 1,
            forced: Some(ids[1..].to_vec()),
            temperature: 0.0,
            seed: 1,
            layer,
            collapse: 0.25,
            rounding: Default::default(),
        };
        run_canary(&lm.model, &opts, &mut |_, _| {}).unwrap()
    };
    let window = run(policy(PolicyKind::Window, 0, 64));
    let sinks = run(policy(PolicyKind::Sink, 4, 64));
    let after = |r: &sinkscope::kv::canary::CanaryRun| {
        let tail: Vec<f64> = r.steps[r.first_eviction.unwrap()..].iter().map(|s| s.first_slot_mass[layer]).collect();
        tail.iter().sum::<f64>() / tail.len() as f64
    };
    assert_eq!(window.first_eviction, sinks.first_eviction);
    assert_eq!(window.sink_evicted, window.first_eviction);
    assert_eq!(window.collapse_at, window.first_eviction, "baseline {:?}", window.baseline_mass);
    assert_eq!((sinks.sink_evicted, sinks.collapse_at), (None, None));
    assert!(sinks.steps.iter().all(|s| s.first_slots.first() == Some(&0)));
    let (w, s) = (after(&window), after(&sinks));
    eprintln!("mid-depth mass after the first eviction: window {w:.3}, sink {s:.3} (baseline {:.3})", window.baseline_mass.unwrap());
    assert!(w < 0.25 * s, "window {w} vs sink {s}");
}

/// The command writes canary.json, the figures and a trace `watch` reads with the same tokens
/// and evictions; bad input → exit 2.
#[test]
fn canary_command_writes_a_trace_watch_reads() {
    let model = model_or_skip!("stories260K.gguf");
    let m = model.to_str().unwrap();
    let dir = common::temp_dir("canary-cli");
    let out = common::sinkscope(&[
        "canary",
        "-m",
        m,
        "-p",
        "Once upon a time",
        "-n",
        "80",
        "--policy",
        "window",
        "--cache",
        "32",
        "-o",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("first eviction: token"), "{stdout}");
    for f in ["canary.json", "canary-trace.jsonl", "canary-mass.png", "canary-logprob.svg"] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("canary.json")).unwrap()).unwrap();
    let steps = report["run"]["steps"].as_array().unwrap();
    let generated: Vec<&serde_json::Value> = steps.iter().filter(|s| !s["prompt"].as_bool().unwrap()).collect();
    assert_eq!(generated.len(), 80);
    let trace = read_trace(&dir.join("canary-trace.jsonl")).unwrap();
    assert_eq!(trace.requests.len(), 1);
    let r = &trace.requests[0];
    assert_eq!(r.logprobs.len(), 80);
    for (a, s) in r.logprobs.iter().zip(&generated) {
        assert!((a - s["logprob"].as_f64().unwrap()).abs() < 1e-12);
    }
    let first = generated.iter().position(|s| s["evicted"].as_u64().unwrap() > 0).unwrap();
    assert_eq!(r.evictions.first(), Some(&first));
    for bad in [vec!["--collapse", "2"], vec!["--policy", "h2o"], vec!["--layer", "99"], vec!["--force", "/nonexistent/text.txt"]] {
        let mut args = vec!["canary", "-m", m, "-n", "8"];
        args.extend(bad.iter().copied());
        let out = common::sinkscope(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}
