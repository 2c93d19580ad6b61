//! `verify` through the binary, on traces whose truth is known: sinkscope's own stream.json (same
//! arithmetic: a floor of zero) conforms to the policy that made it and diverges from a near miss,
//! naming it; bad traces are one line and exit 2. (Held against llama.cpp in tests/llama_cpp.rs.)

mod common;

use std::path::Path;

use serde_json::Value;

fn verify(trace: &Path, extra: &[&str]) -> (Option<i32>, String, String) {
    let args: Vec<&str> = ["verify", trace.to_str().unwrap(), "-m", "stories260k"].into_iter().chain(extra.iter().copied()).collect();
    let out = common::sinkscope(&args);
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_trace_conforms_to_its_own_policy_and_diverges_from_a_near_miss() {
    let Some(_) = common::models_dir() else { return };
    let dir = common::temp_dir("verify-own");
    let run = dir.join("run");
    let text = common::corpora_dir().join("tinystories_val_subset.txt");
    let out = common::sinkscope(&[
        "stream",
        "-m",
        "stories260k",
        "-f",
        text.to_str().unwrap(),
        "--tokens",
        "400",
        "--policy",
        "keep",
        "--sinks",
        "1",
        "--cache",
        "64",
        "--positions",
        "delta",
        "-o",
        run.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let trace = run.join("stream.json");

    let (code, text, err) = verify(&trace, &["--policy", "keep", "--sinks", "1", "--cache", "64", "-o", dir.join("v").to_str().unwrap()]);
    assert_eq!(code, Some(0), "{text}{err}");
    assert!(text.contains("VERDICT: conforms"), "{text}");
    let report: Value = serde_json::from_slice(&std::fs::read(dir.join("v/verify.json")).unwrap()).unwrap();
    let c = &report["conformance"];
    // The same arithmetic, but not the same schedule: with its near misses the replay's shared
    // prefix ends one token earlier (W − 1 is among them), so a block boundary moves.
    let (floor, after) = (c["floor"]["max_abs"].as_f64().unwrap(), c["after"]["max_abs"].as_f64().unwrap());
    assert!(floor.abs() < 1e-12 && after.abs() < 1e-4, "floor {floor}, after {after}");
    assert_eq!(report["evictions"].as_array().unwrap()[0], 65, "the first query on an evicted cache scores token 65");
    assert!(dir.join("v/verify.png").is_file() && dir.join("v/verify.svg").is_file());

    // Declared one short of the truth: diverges from the first eviction, and the truth ranks first.
    let (code, text, err) = verify(&trace, &["--policy", "keep", "--sinks", "1", "--cache", "63", "--json"]);
    assert_eq!(code, Some(3), "{text}{err}");
    let r: Value = serde_json::from_str(&text).unwrap();
    let best = &r["conformance"]["ranking"][0];
    assert!(best["label"].as_str().unwrap().starts_with("keep N=1 half-discard, W=64") && best["explains_better"] == true, "{best}");
    assert_eq!(r["conformance"]["verdict"]["verdict"], "diverges");
}

#[test]
fn traces_verify_cannot_use_are_refused_in_one_line() {
    let Some(_) = common::models_dir() else { return };
    let dir = common::temp_dir("verify-bad");
    let policy = ["--policy", "keep", "--sinks", "1", "--cache", "16"];
    for (name, body, says) in [
        ("no-ids.jsonl", "{\"logprob\": -1.0}\n{\"logprob\": -2.0}\n", "has no token id"),
        ("no-prompt.jsonl", "{\"id\": 3, \"logprob\": -1.0}\n", "--prompt-ids"),
        ("vocab.jsonl", "{\"id\": 1, \"logprob\": null}\n{\"id\": 9999, \"logprob\": -1.0}\n", "outside the model's vocabulary of 512"),
        ("short.jsonl", "{\"id\": 1, \"logprob\": null}\n{\"id\": 5, \"logprob\": -1.0}\n{\"id\": 6, \"logprob\": -1.0}\n", "nothing was evicted"),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, body).unwrap();
        let (code, text, err) = verify(&path, &policy);
        if says == "nothing was evicted" {
            // Legal, but says nothing about the cache: exit 0, and it says so.
            assert_eq!(code, Some(0), "{err}");
            assert!(text.contains(says), "{text}");
            continue;
        }
        assert_eq!(code, Some(2), "{name}: {text}{err}");
        assert_eq!(err.trim().lines().count(), 1, "{name}: {err}");
        assert!(err.contains(says) && err.contains(name), "{name}: {err}");
    }
    // A prompt given beside a trace that has its own, differing, is refused.
    let trace = dir.join("with-prompt.jsonl");
    std::fs::write(&trace, "{\"id\": 1, \"logprob\": null}\n{\"id\": 5, \"logprob\": -1.0}\n").unwrap();
    let prompt = dir.join("prompt.json");
    std::fs::write(&prompt, "[2]").unwrap();
    let (code, _, err) = verify(&trace, &["--policy", "keep", "--sinks", "1", "--cache", "16", "--prompt-ids", prompt.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(err.contains("differs from the prompt"), "{err}");
}
