//! Bad input, third pass (issue 43), through the binary: a value a file gives is checked where it
//! is read (a GGUF setting out of its range, a token id outside the vocabulary), a file that is
//! not a regular file is refused before it is read (a FIFO would block forever), a count flag of
//! 0 is refused at parse, and a run directory belongs to one run: a second writer fails at once,
//! another model's results are refused unless `--replace`, and a failed command leaves no new
//! directory behind. Each case: exit 2, one line naming the key, file or flag.

mod common;

use std::path::{Path, PathBuf};

/// Runs sinkscope, checks the failure contract (exit 2, one line, no panic) and returns stderr.
fn fails(args: &[&str]) -> String {
    let out = common::sinkscope(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?}: exit {:?}; stderr: {stderr}", out.status.code());
    assert!(!stderr.contains("panicked") && stderr.starts_with("error: "), "{args:?}: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: one line expected: {stderr}");
    stderr
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// stories260K.gguf with the value of metadata key `key` (of `width` bytes after its type tag)
/// replaced by `value`.
fn gguf_with(dir: &Path, name: &str, key: &str, value: &[u8]) -> PathBuf {
    let mut bytes = std::fs::read(common::model("stories260K.gguf").unwrap()).unwrap();
    let at = bytes.windows(key.len()).position(|w| w == key.as_bytes()).unwrap_or_else(|| panic!("{key} not in the file")) + key.len() + 4;
    bytes[at..at + value.len()].copy_from_slice(value);
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Each row: a GGUF setting given a value outside its range, and what the refusal must name.
#[test]
fn gguf_settings_out_of_range_are_refused_by_key() {
    let _ = model_or_skip!("stories260K.gguf");
    let dir = common::temp_dir("trust-gguf");
    let rows: [(&str, &[u8], &str); 4] = [
        (
            "llama.attention.layer_norm_rms_epsilon",
            &f32::INFINITY.to_le_bytes(),
            "llama.attention.layer_norm_rms_epsilon = inf is not a finite number",
        ),
        ("llama.attention.layer_norm_rms_epsilon", &(-1.0f32).to_le_bytes(), "= -1 is not a finite number, 0 or more"),
        ("llama.attention.head_count_kv", &0u32.to_le_bytes(), "llama.attention.head_count_kv = 0 is not a whole number from 1"),
        (
            "tokenizer.ggml.bos_token_id",
            &100_000u32.to_le_bytes(),
            "tokenizer.ggml.bos_token_id = 100000 is not a token id of its 512-token vocabulary",
        ),
    ];
    for (i, (key, value, says)) in rows.into_iter().enumerate() {
        let model = gguf_with(&dir, &format!("m{i}.gguf"), key, value);
        for args in [vec!["info", s(&model)], vec!["capture", "-m", s(&model), "-p", "Once upon a time", "-o", s(&dir.join("out"))]] {
            let e = fails(&args);
            assert!(e.contains(says) && e.contains(&format!("m{i}.gguf")), "{key}: {e}");
        }
        assert!(!dir.join("out").exists(), "{key}: a refused capture leaves no directory");
    }
}

/// A FIFO as a model, a text or a trace is refused at once instead of blocking forever; so are a
/// directory and a device where a text belongs.
#[cfg(unix)]
#[test]
fn inputs_that_are_not_regular_files_are_refused_before_reading() {
    let _ = model_or_skip!("stories260K.gguf");
    let dir = common::temp_dir("trust-fifo");
    let fifo = dir.join("pipe");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let out = s(&dir.join("out")).to_owned();
    for args in [
        vec!["info", s(&fifo)],
        vec!["capture", "-m", "stories260k", "-f", s(&fifo), "-o", &out],
        vec!["watch", s(&fifo)],
        vec!["capture", "-m", "stories260k", "-f", "/dev/zero", "-o", &out],
    ] {
        let e = fails(&args);
        assert!(e.contains("not a regular file"), "{args:?}: {e}");
    }
    assert!(!dir.join("out").exists());
}

/// Count flags where 0 asks for nothing are refused at parse, naming the flag.
#[test]
fn count_flags_of_zero_are_refused_at_parse() {
    for args in [
        &["capture", "-m", "/no/such.gguf", "-p", "x", "--top-k", "0", "-o", "/tmp/never"][..],
        &["analyze", "-m", "/no/such.gguf", "--ablation-tokens", "0", "-o", "/tmp/never"],
        &["heads", "-m", "/no/such.gguf", "-f", "x.txt", "--recent", "0", "-o", "/tmp/never"],
        &["heads", "-m", "/no/such.gguf", "-f", "x.txt", "--causal", "--causal-tokens", "0", "-o", "/tmp/never"],
        &["needle", "-m", "/no/such.gguf", "--trials", "0", "-o", "/tmp/never"],
    ] {
        let e = fails(args);
        let flag = args.iter().rev().skip(2).find(|a| a.starts_with("--")).unwrap();
        assert!(e.contains(flag) && e.contains("0 asks for nothing"), "{args:?}: {e}");
    }
}

/// A run directory belongs to one run: another model's results there are refused naming both,
/// `--replace` starts it afresh, and a second writer fails at once while the first holds it.
#[test]
fn a_run_directory_belongs_to_one_run() {
    let _ = model_or_skip!("stories260K.gguf");
    let bin = model_or_skip!("stories260K.bin");
    let dir = common::temp_dir("trust-run-dir");
    let run = dir.join("run");
    let capture = |model: &str, extra: &[&str]| {
        let mut args = vec!["capture", "-m", model, "-p", "Once upon a time there was", "-o", s(&run)];
        args.extend_from_slice(extra);
        common::sinkscope(&args)
    };
    assert!(capture("stories260k", &[]).status.success());
    // The llama2.c checkpoint is other weights (another SHA-256) in another format.
    let e = fails(&["capture", "-m", s(&bin), "-p", "Once upon a time there was", "-o", s(&run)]);
    assert!(e.contains("holds results of another model") && e.contains("stories260K.gguf") && e.contains("stories260K.bin"), "{e}");
    let replaced = capture(s(&bin), &["--replace"]);
    assert!(replaced.status.success(), "{}", String::from_utf8_lossy(&replaced.stderr));
    let record: serde_json::Value = serde_json::from_slice(&std::fs::read(run.join("capture.json")).unwrap()).unwrap();
    assert!(record["model"]["source"].as_str().unwrap().ends_with("stories260K.bin"));
    // --replace where no run is written.
    assert!(fails(&["info", "stories260k", "--replace"]).contains("--replace applies to"));
    // A second writer while the directory is held (as a running command holds it).
    let held = std::fs::File::open(&run).unwrap();
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor this test owns.
        assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
        let e = fails(&["capture", "-m", s(&bin), "-p", "Once upon a time there was", "-o", s(&run)]);
        assert!(e.contains("another sinkscope command is writing into this directory"), "{e}");
    }
    drop(held);
    assert!(capture(s(&bin), &[]).status.success(), "released with the handle");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Records are checked on reading back: a run whose capture.json was edited to a perplexity below
/// 1 or an α above 1 is refused by `export` naming the file and the value.
#[test]
fn records_out_of_range_are_refused_on_reading_back() {
    let dir = common::temp_dir("trust-records");
    for (edit, says) in [
        ((&["nll", "perplexity"][..], serde_json::json!(-5.0)), "holds nll.perplexity = -5, outside [1, inf]"),
        ((&["summary", "heads", "0", "alpha", "0"][..], serde_json::json!(7.5)), "holds α_0 of layer 0 head 0 = 7.5, outside [0, 1]"),
    ] {
        let run = dir.join("run");
        let _ = std::fs::remove_dir_all(&run);
        std::fs::create_dir_all(&run).unwrap();
        let fixture = common::fixture("run-stories260k");
        for f in ["capture.json", "report.json", "stream.json"] {
            std::fs::copy(fixture.join(f), run.join(f)).unwrap();
        }
        let path = run.join("capture.json");
        let mut record: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let (keys, value) = edit;
        let mut at = &mut record;
        for k in keys {
            at = match k.parse::<usize>() {
                Ok(i) => &mut at[i],
                Err(_) => &mut at[*k],
            };
        }
        *at = value;
        std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
        let e = fails(&["export", s(&run)]);
        assert!(e.contains("capture.json") && e.contains(says), "{e}");
        assert!(!run.join("tables").exists(), "nothing published");
    }
}

/// A finite weight too large for f32 arithmetic (a 3e38 embedding row: its sum of squares, which
/// every norm computes, is ∞) stops the command naming the hook and position, as a NaN does —
/// before it gave a perplexity of 3.8 and a capture.json with null residual norms.
#[test]
fn activations_that_overflow_f32_are_refused_like_nan() {
    let bin = model_or_skip!("stories260K.bin");
    let dir = common::temp_dir("trust-overflow");
    let mut bytes = std::fs::read(&bin).unwrap();
    // llama2.c: a 7-int header (dim first), then the [vocab, dim] f32 embedding table.
    let dim = i32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
    let bos_row = 28 + dim * 4;
    for i in 0..dim {
        bytes[bos_row + 4 * i..bos_row + 4 * i + 4].copy_from_slice(&3e38f32.to_le_bytes());
    }
    let model = dir.join("big.bin");
    std::fs::write(&model, bytes).unwrap();
    let tok = common::model("tok512.bin").unwrap();
    let out = dir.join("out");
    // Without --no-nll the tied output head also turned it into a NaN loss; with it, the capture
    // used to succeed.
    for extra in [&[][..], &["--no-nll"]] {
        let mut args = vec!["capture", "-m", s(&model), "--tokenizer", s(&tok), "-p", "Once upon a time", "-o", s(&out)];
        args.extend_from_slice(extra);
        let e = fails(&args);
        assert!(e.contains("overflows f32") && e.contains("first at hook_embed, position 0"), "{e}");
        assert!(!out.exists(), "nothing written");
    }
}

/// Sizes are bounded before computing, and every command that writes a model's results into a
/// directory claims it first: each row is a command line (RUN: a directory holding a capture of
/// stories260K.gguf; DIR: a scratch directory) and what its one-line refusal must say.
#[test]
fn sizes_and_directories_are_checked_before_any_work() {
    let _ = model_or_skip!("stories260K.gguf");
    let bin = model_or_skip!("stories260K.bin");
    let dir = common::temp_dir("trust-table");
    let run = dir.join("run");
    let made = common::sinkscope(&["capture", "-m", "stories260k", "-p", "Once upon a time there was", "-o", s(&run)]);
    assert!(made.status.success());
    let text = common::corpora_dir().join("tinystories_val_subset.txt");
    std::fs::write(dir.join("blank.txt"), "   \n").unwrap();
    let rows: [(&[&str], &str); 7] = [
        // Before: the budget's warning, then the error (nine warnings before issue 43).
        (&["needle", "-m", "stories260k", "--filler", "DIR/blank.txt", "--lengths", "200", "-o", "DIR/n"], "the filler text is empty"),
        (
            &["needle", "-m", "stories260k", "--lengths", "99999999", "-o", "DIR/n"],
            "dense at 99999999 tokens keeps 99999999 keys and values per layer",
        ),
        (
            &["capture", "-m", "stories260k", "-p", "x", "-o", "DIR/c", "--save-tensors", "DIR/no/such/t.safetensors"],
            "is in a directory that does not exist",
        ),
        (&["heads", "-m", "BIN", "-f", "TEXT", "--tokens", "300", "-o", "RUN"], "holds results of another model"),
        (&["quant", "-m", "BIN", "-f", "TEXT", "-o", "RUN"], "holds results of another model"),
        (&["canary", "-m", "BIN", "-p", "Once", "-o", "RUN"], "holds results of another model"),
        (&["stream", "-m", "BIN", "-f", "TEXT", "--tokens", "300", "--policy", "dense", "-o", "RUN"], "holds results of another model"),
    ];
    let before = std::fs::read_dir(&run).unwrap().count();
    for (args, says) in rows {
        let args: Vec<String> =
            args.iter().map(|a| a.replace("DIR", s(&dir)).replace("RUN", s(&run)).replace("BIN", s(&bin)).replace("TEXT", s(&text))).collect();
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let e = fails(&argv);
        assert!(e.contains(says), "{args:?}: {e}");
    }
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left.len(), 2, "refused commands leave no directory: {left:?}");
    assert_eq!(std::fs::read_dir(&run).unwrap().count(), before, "nor a file in the run they were refused");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Number flags outside their range are refused at parse too, naming the flag and the range,
/// before any model loads (the model path here does not exist).
#[test]
fn number_flags_out_of_range_are_refused_at_parse() {
    for (args, says) in [
        (
            &["canary", "-m", "/no/such.gguf", "--collapse", "1.5", "-o", "/tmp/never"][..],
            "--collapse <COLLAPSE>': 1.5 is not a number strictly between 0 and 1",
        ),
        (&["heads", "-m", "/no/such.gguf", "-f", "x.txt", "--retrieval-share", "2", "-o", "/tmp/never"], "2 is not a share between 0 and 1"),
        (&["analyze", "-m", "/no/such.gguf", "--epsilon", "0", "-o", "/tmp/never"], "--epsilon <EPSILON>': 0 is not a number strictly"),
        (&["generate", "-m", "/no/such.gguf", "-p", "x", "--temperature", "inf"], "inf is not a finite number ≥ 0"),
        (&["watch", "/no/such.jsonl", "--min-step", "0"], "--min-step <MIN_STEP>': 0 is not a finite number above 0"),
        (&["watch", "/no/such.jsonl", "--follow", "--idle-exit=-1"], "-1 is not a finite number ≥ 0"),
    ] {
        let e = fails(args);
        assert!(e.contains(says), "{args:?}: {e}");
    }
}
