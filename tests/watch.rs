//! `watch`: every trace format read from real-shaped samples (written from the formats'
//! documentation: OpenAI chat and completions, a streamed chat as server-sent events, llama.cpp's
//! `/completion` new and old, JSONL and CSV server logs, sinkscope's stream.json), malformed traces
//! refused with exit 2, and the verdict's exit status (3 = sink loss, 0 = none) on synthetic traces
//! with a known step; `--follow` on a file that grows while it is watched. How well the detector
//! finds real sink loss is measured by `cargo bench --bench watch_eval`, not asserted here.

mod common;

use std::io::Write;

use sinkscope::io::trace::{parse_trace, read_trace, TraceFormat};

fn sample(name: &str) -> std::path::PathBuf {
    common::fixture(&format!("traces/{name}"))
}

fn close(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12)
}

#[test]
fn every_format_reads_its_tokens() {
    let t = read_trace(&sample("openai_chat.json")).unwrap();
    assert_eq!((t.format, t.requests.len()), (TraceFormat::OpenAi, 1));
    assert_eq!(t.requests[0].id, "chatcmpl-AZ3ikOBXzzHBMGdWNQ4jH2LjtDZQd");
    assert!(close(&t.requests[0].logprobs, &[-0.31725305, -0.02380986, -0.000054669687, -0.015587699, -1.1398757e-6, -0.0021976542, -0.10233421]));
    assert_eq!(t.requests[0].tokens[1].as_deref(), Some("!"));

    // A list of completions responses, one with two choices, one with an echoed prompt (null first).
    let t = read_trace(&sample("openai_completions.json")).unwrap();
    let ids: Vec<&str> = t.requests.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["cmpl-8x1AbC", "cmpl-8x1AbC/1", "cmpl-8x1AbD"]);
    assert_eq!(t.requests.iter().map(|r| r.logprobs.len()).collect::<Vec<_>>(), [7, 3, 1]);
    assert_eq!(t.requests[2].tokens[0].as_deref(), Some(" hello"));

    let t = read_trace(&sample("openai_chat_stream.sse")).unwrap();
    assert_eq!(t.requests.len(), 1, "the chunks of one stream are one request");
    assert!(close(&t.requests[0].logprobs, &[-0.0891, -0.5312, -0.0004]));

    let t = read_trace(&sample("llamacpp_completion.json")).unwrap();
    assert_eq!((t.format, t.requests[0].id.as_str()), (TraceFormat::LlamaCpp, "slot 0"));
    assert!(close(&t.requests[0].logprobs, &[-0.0351, -0.9162, -1.2040, -2.3027]));
    let t = read_trace(&sample("llamacpp_completion_old.json")).unwrap();
    assert!(close(&t.requests[0].logprobs, &[0.9656f64.ln(), 0.25f64.ln()]));

    let t = read_trace(&sample("server_log.jsonl")).unwrap();
    assert_eq!(t.format, TraceFormat::Jsonl);
    let (r1, r2) = (&t.requests[0], &t.requests[1]);
    assert_eq!((r1.id.as_str(), r1.logprobs.len(), r2.id.as_str(), r2.logprobs.len()), ("r1", 4, "r2", 2));
    assert_eq!(r1.evictions, [3], "the event and the cache length that stopped growing are one eviction");
    assert_eq!(r1.cache_len[3], Some(3));

    let t = read_trace(&sample("server_log.csv")).unwrap();
    assert_eq!(t.format, TraceFormat::Csv);
    let a = &t.requests[0];
    assert!(close(&a.logprobs, &[-0.5, -0.25, -1.0]));
    assert_eq!((a.tokens[0].as_deref(), a.tokens[2].as_deref(), a.evictions.as_slice()), (Some("Hello, world"), Some(" \"quoted\""), &[2][..]));
    assert_eq!(t.requests[1].id, "b");
}

#[test]
fn sinkscope_stream_json_is_a_trace() {
    let run = common::fixture("run-stories260k/stream.json");
    let t = read_trace(&run).unwrap();
    assert_eq!(t.format, TraceFormat::SinkscopeStream);
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&run).unwrap()).unwrap();
    let outcomes = json["outcomes"].as_array().unwrap();
    assert_eq!(t.requests.len(), outcomes.len());
    for (r, o) in t.requests.iter().zip(outcomes) {
        let scored: Vec<f64> = o["nll"].as_array().unwrap().iter().filter_map(|v| v.as_f64()).map(|v| -v).collect();
        assert!(close(&r.logprobs, &scored), "{}", r.id);
        // A cached policy's first eviction comes from its cache length.
        if let Some(fe) = o["first_eviction_step"].as_u64().filter(|_| o["policy"]["kind"] != "recompute") {
            assert_eq!(r.evictions.first().copied(), Some(fe as usize), "{}", r.id);
        }
    }
}

#[test]
fn malformed_traces_are_refused_with_the_reason() {
    let dir = common::temp_dir("watch-bad");
    let cases: [(&str, &[u8], &str); 10] = [
        ("empty.jsonl", b"", "is empty"),
        ("binary.bin", b"\x00\xff\xfe\x01", "not UTF-8"),
        ("notjson.json", b"{\"logprob\": -1.0}\n{oops", "line 2: not JSON"),
        ("nologprobs.json", br#"{"id":"x","choices":[{"index":0,"message":{"content":"hi"},"logprobs":null}]}"#, "has no `logprobs`"),
        ("nan.csv", b"logprob\n-1.0\nNaN\n", "finite number"),
        ("positive.jsonl", b"{\"logprob\": 0.5}\n", "finite number"),
        ("absurd.jsonl", b"{\"logprob\": -1.0}\n{\"logprob\": -1e308}\n", "token 1 has logprob -1e308"),
        ("sentinel.csv", b"logprob\n-2.5\n-9999\n-1.0\n", "some APIs write −9999"),
        ("nocolumn.csv", b"token,prob\na,0.5\n", "no `logprob` column"),
        ("other.json", br#"{"hello": "world"}"#, "neither an OpenAI-compatible response"),
    ];
    for (name, bytes, why) in cases {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let out = common::sinkscope(&["watch", path.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(why) && err.contains(name) && err.lines().count() == 1, "{name}: {err}");
    }
}

/// A steady trace with a drop of `step` nats from token `at` (reproducible noise, σ ≈ 1.2 nats
/// like real token logprobs), as JSONL with cache lengths growing to `budget`.
fn synthetic(n: usize, at: usize, step: f64, budget: usize) -> String {
    synthetic_request(n, at, step, budget, 0x2545_F491_4F6C_DD1D, None)
}

/// [`synthetic`] with its own noise, and a request id on every line when given.
fn synthetic_request(n: usize, at: usize, step: f64, budget: usize, seed: u64, request: Option<&str>) -> String {
    let mut state = seed;
    let mut uniform = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|i| {
            let noise: f64 = (0..12).map(|_| uniform()).sum::<f64>() - 6.0;
            let lp = (-2.0 + 0.8 * noise - if i >= at { step } else { 0.0 }).min(0.0);
            let id = request.map_or(String::new(), |r| format!("\"request\": \"{r}\", "));
            format!("{{{id}\"logprob\": {lp}, \"cache_len\": {}}}\n", (i + 1).min(budget))
        })
        .collect()
}

#[test]
fn the_exit_status_says_whether_sink_loss_was_found() {
    let dir = common::temp_dir("watch-exit");
    // A 1.2-nat step 4 tokens after the cache fills at 300: sink loss, exit 3, dated and sized.
    let loss = dir.join("loss.jsonl");
    std::fs::write(&loss, synthetic(1200, 304, 1.2, 300)).unwrap();
    let out = common::sinkscope(&["watch", loss.to_str().unwrap(), "--json", "-o", dir.join("out").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let step = &report["requests"][0]["steps"][0];
    assert_eq!(report["requests"][0]["evictions"], serde_json::json!([300]));
    assert!(step["sink_loss"].as_bool().unwrap() && (294..=324).contains(&step["start"].as_u64().unwrap()), "{step}");
    assert!((step["size"].as_f64().unwrap() - 1.2).abs() < 0.4, "{step}");
    assert!(dir.join("out/watch.json").is_file() && dir.join("out/watch-0.png").is_file() && dir.join("out/watch-0.svg").is_file());
    // The same step 400 tokens after the eviction is not sink loss: exit 0, the step still listed.
    let late = dir.join("late.jsonl");
    std::fs::write(&late, synthetic(1200, 700, 1.2, 300)).unwrap();
    let out = common::sinkscope(&["watch", late.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stdout).contains("none within 20 tokens after an eviction"));
    // Without cache events the budget dates the eviction; without either, a step cannot be cleared.
    let bare: String =
        synthetic(1200, 304, 1.2, usize::MAX).lines().map(|l| l.split(", \"cache_len\"").next().unwrap().to_string() + "}\n").collect();
    let bare_path = dir.join("bare.jsonl");
    std::fs::write(&bare_path, bare).unwrap();
    let out = common::sinkscope(&["watch", bare_path.to_str().unwrap(), "--budget", "350", "--prompt-tokens", "50"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stdout));
    let out = common::sinkscope(&["watch", bare_path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stdout).contains("pass --budget W"));
    // A steady trace: no step, exit 0.
    let steady = dir.join("steady.jsonl");
    std::fs::write(&steady, synthetic(3000, usize::MAX, 0.0, 300)).unwrap();
    let out = common::sinkscope(&["watch", steady.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
}

/// A small drop at every request's eviction is found when the requests' first evictions are
/// tested together (`pooled`), and sized; without the drop, nothing is.
#[test]
fn the_pooled_test_finds_a_small_drop_across_requests() {
    let dir = common::temp_dir("watch-pooled");
    for (name, step, want) in [("drop", 0.3, Some(3)), ("flat", 0.0, Some(0))] {
        let log: String = (0..12u64).map(|r| synthetic_request(400, 200, step, 200, 0x9E37_79B9 + 7919 * r, Some(&format!("r{r}")))).collect();
        let path = dir.join(format!("{name}.jsonl"));
        std::fs::write(&path, log).unwrap();
        let out = common::sinkscope(&["watch", path.to_str().unwrap(), "--json"]);
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let pooled = &report["pooled"];
        assert_eq!(pooled["requests"].as_u64(), Some(12), "{pooled}");
        assert_eq!(out.status.code(), want, "{name}: {}", report["verdict"]);
        let mean = pooled["mean_drop"].as_f64().unwrap();
        assert!((mean - step).abs() < 0.15, "{name}: pooled drop {mean} for a {step}-nat step");
        assert_eq!(pooled["sink_loss"].as_bool(), Some(step > 0.0), "{pooled}");
    }
}

#[test]
fn follow_reads_a_growing_file() {
    let dir = common::temp_dir("watch-follow");
    let path = dir.join("live.jsonl");
    let lines = synthetic(1200, 304, 1.2, 300);
    let (first, rest) = lines.split_at(lines.match_indices('\n').nth(199).unwrap().0 + 1);
    std::fs::write(&path, first).unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_sinkscope"))
        .args(["watch", path.to_str().unwrap(), "--follow", "--idle-exit", "3"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(600));
    // The rest arrives in pieces, the last one cut mid-line for a while.
    let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    let (middle, tail) = rest.split_at(rest.len() / 2 + 7);
    f.write_all(middle.as_bytes()).unwrap();
    f.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(600));
    f.write_all(tail.as_bytes()).unwrap();
    drop(f);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert_eq!(stdout.matches("SINK LOSS request").count(), 1, "each step printed once: {stdout}");
}

#[test]
fn a_trace_parses_the_same_from_text() {
    let text = std::fs::read_to_string(sample("server_log.jsonl")).unwrap();
    assert_eq!(parse_trace(&text).unwrap(), read_trace(&sample("server_log.jsonl")).unwrap());
}
