//! Model sources beyond single files: a sharded safetensors directory, a hub id resolved offline
//! from an HF cache, aliases on the search path, and `--tokenizer` overrides.

mod common;

use std::path::Path;

use sinkscope::model::receiver::NoCapture;
use sinkscope::model::{load, LoadOptions};

fn final_hidden(spec: &str) -> Vec<f32> {
    let lm = load(spec, &LoadOptions::default()).unwrap_or_else(|e| panic!("{spec}: {e}"));
    let ids = lm.tokenizer.encode("Once upon a time, there was a little dog.").unwrap();
    lm.model.forward(&ids, None, &mut NoCapture).unwrap().flatten_all().unwrap().to_vec1().unwrap()
}

/// Writes stories260K-hf's tensors as two shards plus model.safetensors.index.json.
fn write_sharded(src: &Path, dst: &Path) {
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(src.join(f), dst.join(f)).unwrap();
    }
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut names: Vec<String> = st.names().into_iter().map(str::to_owned).collect();
    names.sort();
    let mut weight_map = serde_json::Map::new();
    for (i, chunk) in names.chunks(names.len().div_ceil(2)).enumerate() {
        let file = format!("model-0000{}-of-00002.safetensors", i + 1);
        let views: Vec<(String, safetensors::tensor::TensorView)> = chunk.iter().map(|n| (n.clone(), st.tensor(n).unwrap())).collect();
        std::fs::write(dst.join(&file), safetensors::tensor::serialize(views, None).unwrap()).unwrap();
        for n in chunk {
            weight_map.insert(n.clone(), file.clone().into());
        }
    }
    let index = serde_json::json!({ "metadata": {}, "weight_map": weight_map });
    std::fs::write(dst.join("model.safetensors.index.json"), index.to_string()).unwrap();
}

#[test]
fn sharded_safetensors_equal_single_file() {
    let src = model_or_skip!("stories260K-hf");
    let dir = common::temp_dir("sharded");
    write_sharded(&src, &dir);
    assert_eq!(final_hidden(dir.to_str().unwrap()), final_hidden(src.to_str().unwrap()));
}

#[test]
fn hub_id_resolves_offline_from_the_hf_cache() {
    let src = model_or_skip!("stories260K-hf");
    let home = common::temp_dir("hfhome");
    // The HF cache layout: hub/models--OWNER--NAME/{refs/main, snapshots/REV/...}.
    let repo = home.join("hub/models--sinkscope-test--stories260K");
    let snapshot = repo.join("snapshots/0123456789abcdef");
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), "0123456789abcdef").unwrap();
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        std::fs::copy(src.join(f), snapshot.join(f)).unwrap();
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sinkscope"))
        .args(["info", "sinkscope-test/stories260K", "--json"])
        .env("HF_HOME", &home)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(info["format"], "hf-safetensors");
    assert!(info["source"].as_str().unwrap().contains("snapshots/0123456789abcdef"));
    // Not cached and offline: one clear line, exit 2.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sinkscope"))
        .args(["info", "sinkscope-test/not-cached"])
        .env("HF_HOME", &home)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not in the HF cache") && err.contains("HF_HUB_OFFLINE"), "{err}");
}

#[test]
fn aliases_follow_the_search_path() {
    let models = model_or_skip!("stories260K.gguf");
    let dir = common::temp_dir("alias");
    std::fs::copy(&models, dir.join("stories260K.gguf")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sinkscope"))
        .args(["info", "stories260k", "--json"])
        .env("SINKSCOPE_MODELS", &dir)
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(info["source"].as_str().unwrap().starts_with(dir.to_str().unwrap()));
}

/// An alias's file is used only with its pinned SHA-256: a file of the right size with one byte
/// changed is refused with its path named; a good one is hashed once and then remembered by size
/// and modification time (a memo whose hash is wrong for an unchanged file is believed, and
/// forgotten once the file is touched).
#[test]
fn an_alias_file_is_verified_once_and_remembered_by_size_and_time() {
    let models = model_or_skip!("stories260K.gguf");
    let (dir, cache) = (common::temp_dir("alias-verify"), common::temp_dir("alias-verify-cache"));
    let file = dir.join("stories260K.gguf");
    // A working directory with no models/ or ../shared/models of its own on the search path.
    let cwd = dir.join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let info = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_sinkscope"))
            .args(["info", "stories260k", "--json"])
            .env("SINKSCOPE_MODELS", &dir)
            .env("XDG_CACHE_HOME", &cache)
            .current_dir(&cwd)
            .output()
            .unwrap()
    };
    let mut bytes = std::fs::read(&models).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    std::fs::write(&file, &bytes).unwrap();
    let out = info();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(file.to_str().unwrap()) && err.contains("SHA-256") && err.lines().count() == 1, "{err}");

    std::fs::copy(&models, &file).unwrap();
    let out = info();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let memo_path = cache.join("sinkscope/verified.json");
    let memo: serde_json::Value = serde_json::from_slice(&std::fs::read(&memo_path).unwrap()).unwrap();
    let key = std::fs::canonicalize(&file).unwrap().display().to_string();
    assert_eq!(memo[&key]["sha256"], "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d");

    // The memo is what is read while the file is unchanged...
    let mut lying = memo.clone();
    lying[&key]["sha256"] = "0".repeat(64).into();
    std::fs::write(&memo_path, lying.to_string()).unwrap();
    assert_eq!(info().status.code(), Some(2));
    // ...and a new modification time makes it hash the file again.
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    std::fs::File::options().write(true).open(&file).unwrap().set_modified(later).unwrap();
    let out = info();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn tokenizer_override_replaces_the_embedded_one() {
    let gguf = model_or_skip!("stories260K.gguf");
    let json = gguf.with_file_name("stories260K-hf/tokenizer.json");
    let own = load(gguf.to_str().unwrap(), &LoadOptions::default()).unwrap();
    let over = load(gguf.to_str().unwrap(), &LoadOptions { tokenizer: Some(json), ..LoadOptions::default() }).unwrap();
    assert_eq!(over.info.tokenizer, "tokenizer.json");
    let text = "The little cat sat on the mat, and 3 birds sang.";
    assert_eq!(own.tokenizer.encode(text).unwrap(), over.tokenizer.encode(text).unwrap());
    // llama2.c checkpoints take a tok*.bin the same way.
    let bin = gguf.with_file_name("stories260K.bin");
    let tok = gguf.with_file_name("tok512.bin");
    let lm = load(bin.to_str().unwrap(), &LoadOptions { tokenizer: Some(tok), ..LoadOptions::default() }).unwrap();
    assert_eq!(lm.tokenizer.encode(text).unwrap(), own.tokenizer.encode(text).unwrap());
}
