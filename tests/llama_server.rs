//! A real server, real logs: `llama-server` (built from llama-cpp-python's vendored llama.cpp by
//! `scripts/llama-cpp/build.sh`) is started on 127.0.0.1 with a 256-token context, `--keep` and
//! context shift on, generates 640 tokens from a book prompt with logprobs
//! (`scripts/llama-cpp/server_trace.py`, which stops it whatever happens), and its `/completion`
//! response, as the server wrote it, goes through `watch` and `verify`.

mod common;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn server_trace(keep: usize, dir: &Path) -> Option<(std::path::PathBuf, std::path::PathBuf, std::path::PathBuf)> {
    let cache = common::llama_cpp()?;
    let model = common::model("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/llama-cpp/server_trace.py");
    let (response, prompt, log) =
        (dir.join(format!("keep{keep}.json")), dir.join(format!("keep{keep}-prompt.json")), dir.join(format!("keep{keep}.log")));
    let out = Command::new(cache.join("venv/bin/python"))
        .arg(script)
        .arg("--server")
        .arg(cache.join("build/bin/llama-server"))
        .arg("--model")
        .arg(&model)
        .arg("--text")
        .arg(common::corpora_dir().join("pg84_frankenstein.txt"))
        .args(["--ctx", "256", "--keep", &keep.to_string(), "--n-predict", "640"])
        .arg("--response")
        .arg(&response)
        .arg("--prompt-ids")
        .arg(&prompt)
        .arg("--log")
        .arg(&log)
        .output()
        .expect("the engine's python runs");
    assert!(out.status.success(), "llama-server session: {}", String::from_utf8_lossy(&out.stderr));
    eprintln!("llama-server keep {keep}: {}", String::from_utf8_lossy(&out.stdout).trim());
    Some((model, response, prompt))
}

/// The server shifted its context (its log says so, 4 times in 736 tokens of a 256-token
/// context); `verify` replays the same tokens under `keep` N = --keep (SmolLM2 adds no BOS), W =
/// 255, `delta` and calls the server conforming, with an eviction wherever the server shifted.
#[test]
fn llama_server_context_shift_conforms_and_watch_reads_its_log() {
    for keep in [0, 4] {
        let dir = common::temp_dir(&format!("llama-server-keep{keep}"));
        let Some((model, response, prompt)) = server_trace(keep, &dir) else { return };
        let log = std::fs::read_to_string(dir.join(format!("keep{keep}.log"))).unwrap();
        let shifts = log.lines().filter(|l| l.contains("slot context shift")).count();
        assert!(shifts >= 3, "the server shifted {shifts} times");

        let watch = common::sinkscope(&["watch", response.to_str().unwrap(), "--budget", "255", "--prompt-tokens", "96", "--json"]);
        assert!(matches!(watch.status.code(), Some(0 | 3)), "{}", String::from_utf8_lossy(&watch.stderr));
        let w: Value = serde_json::from_slice(&watch.stdout).unwrap();
        let r = &w["requests"][0];
        // The server gives no probability to a token that ends inside a UTF-8 character.
        assert!(r["tokens"].as_u64().unwrap() >= 600, "{}", r["tokens"]);
        eprintln!(
            "watch on the server's keep {keep} log: mean logprob {:.3}, {} steps, sink loss {}",
            r["mean_logprob"].as_f64().unwrap(),
            r["steps"].as_array().unwrap().len(),
            w["sink_loss"]
        );

        let out = dir.join("verify");
        let v = common::sinkscope(&[
            "verify",
            response.to_str().unwrap(),
            "--prompt-ids",
            prompt.to_str().unwrap(),
            "-m",
            model.to_str().unwrap(),
            "--policy",
            "keep",
            "--sinks",
            &keep.to_string(),
            "--cache",
            "255",
            "--positions",
            "delta",
            "-o",
            out.to_str().unwrap(),
        ]);
        let text = String::from_utf8_lossy(&v.stdout);
        eprintln!("{text}");
        assert_eq!(v.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&v.stderr));
        let report: Value = serde_json::from_slice(&std::fs::read(out.join("verify.json")).unwrap()).unwrap();
        assert_eq!(report["evictions"].as_array().unwrap().len(), shifts, "one eviction per server shift");
        assert!(out.join("verify.png").is_file() && out.join("verify.svg").is_file());
    }
}
