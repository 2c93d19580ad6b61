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
    let dir = common::temp_child("survey", "out");
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
    // The census: one row per model in survey.md and tables/census.parquet, the row the model's
    // own report.json gives.
    assert!(md.contains("## Census across designs") && md.contains("Sink_0^0.8") && md.contains("5 RoPE"), "{md}");
    assert!(dir.join("tables/census.parquet").is_file() && dir.join("figures/survey-census.svg").is_file());
    let analysis: sinkscope::analysis::AnalysisReport =
        serde_json::from_str(&std::fs::read_to_string(dir.join("models/stories260K.gguf/report.json")).unwrap()).unwrap();
    let census = sinkscope::analysis::census::Census::of(&analysis);
    assert_eq!(serde_json::to_value(&census).unwrap(), a["census"]);
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
    let dir = common::temp_child("survey-bad", "out");
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

/// The sinkscope binary started with `args` as a child process (not waited for).
fn spawn(args: &[&str]) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_sinkscope"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("SINKSCOPE_MODELS", common::model_path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start sinkscope")
}

/// Three models (GGUF, llama2.c, HF directory) surveyed in one process, and as two shards run at
/// the same time into separate directories, then merged: the same survey.json and survey.md, byte
/// for byte, and every model's run directory gathered into the merge's.
#[test]
fn survey_shards_merge_into_the_same_survey() {
    let models = [model_or_skip!("stories260K.gguf"), model_or_skip!("stories260K.bin"), model_or_skip!("stories260K-hf")];
    let root = common::temp_dir("survey-shards");
    let (single, p1, p2, merged) = (root.join("single"), root.join("p1"), root.join("p2"), root.join("merged"));
    let survey = |extra: &[&str], out: &std::path::Path| -> Vec<String> {
        let mut args: Vec<String> = vec!["survey".into()];
        for m in &models {
            args.extend(["-m".into(), m.to_str().unwrap().into()]);
        }
        args.extend(["--cache", "32", "--tokens", "160"].map(String::from));
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend(["-o".into(), out.to_str().unwrap().into()]);
        args
    };
    let shard_args = [survey(&["--shard", "1/2"], &p1), survey(&["--shard", "2/2"], &p2)];
    let children: Vec<_> = shard_args.iter().map(|a| spawn(&a.iter().map(String::as_str).collect::<Vec<_>>())).collect();
    let whole = survey(&[], &single);
    let out = common::sinkscope(&whole.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    // Round robin: shard 1 ran models 0 and 2, shard 2 model 1; neither wrote a comparison.
    let part: serde_json::Value = serde_json::from_slice(&std::fs::read(p1.join("survey-parts/part-1-of-2.json")).unwrap()).unwrap();
    let indices: Vec<u64> = part["rows"].as_array().unwrap().iter().map(|r| r["index"].as_u64().unwrap()).collect();
    assert_eq!((indices, part["shards"].as_u64()), (vec![0, 2], Some(2)));
    assert_eq!(part["settings"]["models"], serde_json::json!(["stories260K.gguf", "stories260K.bin", "stories260K-hf"]));
    assert!(!p1.join("survey.json").exists() && !p2.join("survey.md").exists() && !p2.join("models/stories260K.gguf").exists());
    // A model's record cut short is refused naming it, before anything is copied (issue 43).
    let report = p1.join("models/stories260K.gguf/report.json");
    let whole = std::fs::read(&report).unwrap();
    std::fs::write(&report, &whole[..whole.len() / 2]).unwrap();
    let bad = root.join("merged-bad");
    let refused = common::sinkscope(&["survey", "--merge", p1.to_str().unwrap(), p2.to_str().unwrap(), "-o", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(refused.status.code() == Some(2) && err.contains("report.json: is not a file this sinkscope can read"), "{err}");
    assert!(!bad.exists(), "a refused merge writes nothing");
    std::fs::write(&report, whole).unwrap();
    let merge = common::sinkscope(&["survey", "--merge", p1.to_str().unwrap(), p2.to_str().unwrap(), "-o", merged.to_str().unwrap()]);
    assert!(merge.status.success(), "{}", String::from_utf8_lossy(&merge.stderr));
    for f in ["survey.json", "survey.md"] {
        let (a, b) = (std::fs::read_to_string(single.join(f)).unwrap(), std::fs::read_to_string(merged.join(f)).unwrap());
        assert_eq!(a, b, "{f} differs between the single survey and the merge");
    }
    assert!(merged.join("tables/survey.parquet").is_file() && merged.join("stream-text.txt").is_file());
    for slug in ["stories260K.gguf", "stories260K.bin", "stories260K-hf"] {
        assert!(merged.join("models").join(slug).join("report.json").is_file(), "{slug} not gathered");
    }
    let names: Vec<String> =
        std::fs::read_dir(merged.join("models")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names.len(), 3, "temporary copies left behind: {names:?}");
    // The merged directory is a survey like any other: run there, it reuses every stage.
    let again = common::sinkscope(&survey(&[], &merged).iter().map(String::as_str).collect::<Vec<_>>());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success() && !err.contains("loading") && err.matches("already done").count() == 6, "{err}");
    assert_eq!(std::fs::read(single.join("survey.json")).unwrap(), std::fs::read(merged.join("survey.json")).unwrap());
}

/// Bad shards and parts that are not one whole survey are refused (exit 2, one line naming the
/// shard and the file) before anything is written.
#[test]
fn survey_shards_refuse_bad_input() {
    let gguf = model_or_skip!("stories260K.gguf");
    let gguf = gguf.to_str().unwrap();
    let root = common::temp_dir("survey-shards-bad");
    let (a, b, c, out) = (root.join("a"), root.join("b"), root.join("c"), root.join("out"));
    let (a, b, c, out) = (a.to_str().unwrap(), b.to_str().unwrap(), c.to_str().unwrap(), out.to_str().unwrap());
    // Shards without a model of their own finish at once and still write their (empty) part.
    for (shard, tokens, dir) in [("2/3", "160", a), ("3/3", "200", b), ("2/2", "160", c)] {
        let made = common::sinkscope(&["survey", "-m", gguf, "--shard", shard, "--tokens", tokens, "-o", dir]);
        assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    }
    let part: serde_json::Value = serde_json::from_slice(&std::fs::read(root.join("c/survey-parts/part-2-of-2.json")).unwrap()).unwrap();
    assert_eq!((part["format"].as_u64(), part["shard"].as_u64(), part["rows"].as_array().map(Vec::len)), (Some(1), Some(2), Some(0)));
    for (args, says) in [
        (vec!["survey", "-m", gguf, "--shard", "0/2", "-o", out], "between 1 and 2"),
        (vec!["survey", "-m", gguf, "--shard", "3/2", "-o", out], "between 1 and 2"),
        (vec!["survey", "-m", gguf, "--shard", "x", "-o", out], "is not K/N"),
        (vec!["survey", "--merge", c, "-o", out], "shard 1/2 is missing: no part-1-of-2.json"),
        (vec!["survey", "--merge", a, b, "-o", out], "part-3-of-3.json: shard 3/3 was made with other settings"),
        (vec!["survey", "--merge", a, c, "-o", out], "parts of differently split surveys"),
        (vec!["survey", "--merge", c, "-m", gguf, "-o", out], "cannot be used with"),
        (vec!["survey", "--merge", c, "--tokens", "160", "-o", out], "cannot be used with"),
        (vec!["survey", "--merge", &format!("{out}-none"), "-o", out], "no such directory"),
    ] {
        let run = common::sinkscope(&args);
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says) && err.trim().lines().count() == 1 && !err.contains("panicked"), "{args:?}: {err}");
    }
    let tokens = common::sinkscope(&["survey", "--merge", a, b, "-o", out]);
    assert!(String::from_utf8_lossy(&tokens.stderr).contains("tokens 200 here, 160 there"));
    assert!(!std::path::Path::new(out).exists(), "a refused merge wrote {out}");
}

/// Shard K of N takes the models at 0-based index i with i mod N = K − 1.
#[test]
fn shards_take_the_models_round_robin() {
    use sinkscope::pipeline::survey_parts::Shard;
    let shards: Vec<Shard> = (1..=3).map(|k| Shard::new(k, 3).unwrap()).collect();
    let owners: Vec<usize> = (0..7).map(|i| shards.iter().position(|s| s.runs(i)).unwrap() + 1).collect();
    assert_eq!(owners, [1, 2, 3, 1, 2, 3, 1]);
    assert!(Shard::new(0, 2).is_err() && Shard::new(3, 2).is_err() && Shard::new(1, 0).is_err());
    assert_eq!((shards[1].to_string(), shards[1].file_name()), ("2/3".to_string(), "part-2-of-3.json".to_string()));
}
