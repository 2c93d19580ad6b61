//! `sinkscope survey`: several models into one comparison, each row what that model's own
//! diagnosis and sweep say, resumable, and bad input refused.

#[macro_use]
mod common;

/// stories260K in two formats (GGUF, llama2.c) — the same weights, so the same row — into one
/// survey: survey.json, survey.md, the Parquet table and both figures; each row's Sink_0 and
/// window ratio are its run directories' own numbers; a second run reuses every stage.
#[test]
fn survey_compares_models_and_resumes() {
    let gguf = model_or_skip!("stories260K.gguf");
    let bin = model_or_skip!("stories260K.bin");
    let dir = common::temp_dir("survey").join("out");
    let args =
        ["survey", "-m", gguf.to_str().unwrap(), "-m", bin.to_str().unwrap(), "--cache", "32,48", "--tokens", "160", "-o", dir.to_str().unwrap()];
    let out = common::sinkscope(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for f in ["survey.json", "survey.md", "tables/survey.parquet", "figures/survey-sink0-vs-collapse.png", "figures/survey-alpha0-depth.svg"] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
    let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("survey.json")).unwrap()).unwrap();
    let rows = s["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        assert_eq!(r["sweeps"].as_array().unwrap().len(), 2);
        assert_eq!(r["alpha0_by_layer"].as_array().unwrap().len(), r["n_layers"].as_u64().unwrap() as usize);
    }
    // Same weights, same numbers (the two loaders are each checked against references elsewhere).
    let (a, b) = (&rows[0], &rows[1]);
    assert!((a["sink_0"].as_f64().unwrap() - b["sink_0"].as_f64().unwrap()).abs() < 1e-9);
    // The row is the model's own run: Sink_0 from its report.json, the ratio from its stream.json.
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("models/stories260K.gguf/report.json")).unwrap()).unwrap();
    assert_eq!(a["sink_0"].as_f64(), report["sink_score"]["0"].as_f64());
    let stream: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("models/stories260K.gguf/text0-w32/stream.json")).unwrap()).unwrap();
    let table = stream["recommendation"]["table"].as_array().unwrap();
    let ppl = |s: u64| table.iter().find(|r| r["sinks"].as_u64() == Some(s)).unwrap()["ppl_after_eviction"].as_f64().unwrap();
    let best = table.iter().filter_map(|r| r["ppl_after_eviction"].as_f64()).fold(f64::INFINITY, f64::min);
    assert!((a["sweeps"][0]["window_ratio"].as_f64().unwrap() - ppl(0) / best).abs() < 1e-12);
    // Streaming heads: the share of KV heads whose outside-window attention is at most 5%, as
    // the sweep directory's own measurement lists them.
    let heads: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("models/stories260K.gguf/text0-w32/streaming-heads.json")).unwrap()).unwrap();
    let outside: Vec<f64> =
        heads["outside"].as_array().unwrap().iter().flat_map(|l| l.as_array().unwrap().iter().map(|v| v.as_f64().unwrap())).collect();
    assert_eq!(outside.len(), 5 * 4, "stories260K: 5 layers × 4 KV heads");
    assert_eq!((heads["sinks"].as_u64(), heads["recent"].as_u64()), (Some(4), Some(28)));
    let want = 100.0 * outside.iter().filter(|&&m| m <= 0.05).count() as f64 / outside.len() as f64;
    assert_eq!(a["sweeps"][0]["streaming_heads"].as_f64(), Some(want));
    assert!(outside.iter().all(|m| (0.0..=1.0).contains(m)));
    let md = std::fs::read_to_string(dir.join("survey.md")).unwrap();
    assert!(md.contains(&format!("{want:.0}% (W 32)")), "{md}");
    assert!(md.contains("| stories260k | llama |") && md.contains("## Which model needs sinks"), "{md}");
    // Resumed: nothing recomputed, the per-model files untouched.
    let stamp = |p: &str| std::fs::metadata(dir.join(p)).unwrap().modified().unwrap();
    let files = [
        "models/stories260K.bin/report.json",
        "models/stories260K.bin/text0-w48/stream.json",
        "models/stories260K.bin/text0-w48/streaming-heads.json",
    ];
    let before: Vec<_> = files.iter().map(|f| stamp(f)).collect();
    let again = common::sinkscope(&args);
    assert!(again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(!err.contains("loading") && err.matches("already done").count() == 6, "{err}");
    assert_eq!(before, files.iter().map(|f| stamp(f)).collect::<Vec<_>>());
    // Other load options are other numbers: nothing is reused.
    let bf16: Vec<&str> = args.iter().copied().chain(["--dtype", "bf16"]).collect();
    let third = common::sinkscope(&bf16);
    assert!(third.status.success());
    let err = String::from_utf8_lossy(&third.stderr);
    assert!(err.matches("loading").count() == 2 && !err.contains("already done"), "{err}");
    let load: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("models/stories260K.bin/load-options.json")).unwrap()).unwrap();
    assert_eq!(load, serde_json::json!({"dtype": "bf16", "quantized": false}));
}

#[test]
fn survey_refuses_bad_input() {
    let gguf = model_or_skip!("stories260K.gguf");
    let dir = common::temp_dir("survey-bad").join("out");
    for args in [
        vec!["survey", "-o", dir.to_str().unwrap()],
        vec!["survey", "-m", "/nonexistent/model.gguf", "-o", dir.to_str().unwrap()],
        vec!["survey", "-m", gguf.to_str().unwrap(), "-m", gguf.to_str().unwrap(), "-o", dir.to_str().unwrap()],
        vec!["survey", "-m", gguf.to_str().unwrap(), "--cache", "1", "-o", dir.to_str().unwrap()],
        vec!["survey", "-m", gguf.to_str().unwrap(), "-f", "/nonexistent/text.txt", "-o", dir.to_str().unwrap()],
        vec!["survey", "-m", gguf.to_str().unwrap(), "--sinks", "", "-o", dir.to_str().unwrap()],
    ] {
        let out = common::sinkscope(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    assert!(!dir.exists(), "bad input wrote {}", dir.display());
}
