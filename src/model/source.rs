//! Resolves a `-m MODEL` argument to files on disk: a `.gguf`, a llama2.c `.bin` (+ its `tok*.bin`),
//! an HF directory, a hub id through the HF cache (hf-hub; offline when cached), or one of the
//! short aliases of the catalog found on the model search path (`model::fetch` downloads them).

use std::path::{Path, PathBuf};

use super::catalog::{human_bytes, lookup, CatalogEntry, CATALOG};
use super::verified::{check, Check};
use crate::error::{Error, Result};

/// Where a model's files are.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelSource {
    Gguf(PathBuf),
    Llama2c {
        model: PathBuf,
    },
    /// A directory with config.json, model.safetensors (or a sharded index) and tokenizer.json.
    HfDir(PathBuf),
}

impl ModelSource {
    pub fn path(&self) -> &Path {
        match self {
            ModelSource::Gguf(p) | ModelSource::Llama2c { model: p } | ModelSource::HfDir(p) => p,
        }
    }

    pub fn format(&self) -> &'static str {
        match self {
            ModelSource::Gguf(_) => "gguf",
            ModelSource::Llama2c { .. } => "llama2c",
            ModelSource::HfDir(_) => "hf-safetensors",
        }
    }
}

/// Directories searched for aliases: `$SINKSCOPE_MODELS` (colon-separated), `./models`,
/// `../shared/models`, and (without `$SINKSCOPE_MODELS`) the user's model cache, where
/// `sinkscope fetch` puts downloads.
pub fn search_path() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("SINKSCOPE_MODELS").map(|v| std::env::split_paths(&v).collect()).unwrap_or_default();
    dirs.push(PathBuf::from("models"));
    dirs.push(PathBuf::from("../shared/models"));
    if let Some(cache) = user_cache_dir().filter(|_| std::env::var_os("SINKSCOPE_MODELS").is_none()) {
        dirs.push(cache);
    }
    dirs
}

/// `<platform cache dir>/sinkscope/models` (e.g. `~/.cache/sinkscope/models`).
pub fn user_cache_dir() -> Option<PathBuf> {
    dirs::cache_dir().map(|d| d.join("sinkscope").join("models"))
}

/// Where an alias's file is on the search path.
#[derive(Debug, Default)]
pub struct AliasLookup {
    /// The first file of the catalog's size whose SHA-256 is the pinned one.
    pub found: Option<PathBuf>,
    /// Files of the catalog's size but other bytes (damaged, or another model), with their SHA-256.
    pub rejected: Vec<(PathBuf, String)>,
}

/// Where the catalog model `entry` is on the search path: the first file of the right size whose
/// SHA-256 matches the pin (hashed the first time, then remembered by size and modification time:
/// `model::verified`). A file that cannot be read counts as absent.
pub fn find_alias(entry: &CatalogEntry) -> AliasLookup {
    let mut lookup = AliasLookup::default();
    for path in search_path().into_iter().map(|d| d.join(entry.file)) {
        if !std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() == entry.bytes) {
            continue;
        }
        match check(entry, &path) {
            Ok(Check::Pinned) => {
                lookup.found = Some(path);
                break;
            }
            Ok(Check::Other { sha256 }) => lookup.rejected.push((path, sha256)),
            Err(_) => {}
        }
    }
    lookup
}

/// The error for an alias whose only files of the right size hold other bytes.
fn rejected_error(entry: &CatalogEntry, rejected: &[(PathBuf, String)]) -> Error {
    let files = rejected.iter().map(|(p, sha)| format!("{} (SHA-256 {}…)", p.display(), &sha[..12.min(sha.len())])).collect::<Vec<_>>().join(", ");
    let fix = if entry.downloadable() {
        format!("delete it and run `sinkscope fetch {}`", entry.alias)
    } else {
        "replace it with the pinned file".to_string()
    };
    Error::input(format!(
        "model alias '{}' means {} with SHA-256 {}…, but {files} has its size and other bytes (damaged, or another model under that name): {fix}, or pass the file's path with -m to use it as it is",
        entry.alias,
        entry.file,
        &entry.sha256[..12]
    ))
}

pub fn resolve(spec: &str) -> Result<ModelSource> {
    if spec.trim().is_empty() {
        return Err(Error::input(
            "-m MODEL is empty: pass a .gguf file, a llama2.c .bin, an HF model directory, a hub id, or an alias (`sinkscope models` lists them)",
        ));
    }
    let path = Path::new(spec);
    if path.exists() {
        return from_path(path);
    }
    if let Some(entry) = lookup(spec) {
        let lookup = find_alias(entry);
        if let Some(path) = lookup.found {
            return Ok(ModelSource::Gguf(path));
        }
        if !lookup.rejected.is_empty() {
            return Err(rejected_error(entry, &lookup.rejected));
        }
        let dirs = search_path().iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ");
        let how = if entry.downloadable() {
            format!("Run `sinkscope fetch {}` to download and verify it, or put it", entry.alias)
        } else {
            format!("It has no pinned download ({}); put it", entry.note)
        };
        return Err(Error::input(format!(
            "model alias '{spec}' means {} ({}, SHA-256 {}…), which is in none of: {dirs}. {how} into one of them or set SINKSCOPE_MODELS to its directory.",
            entry.file,
            human_bytes(entry.bytes),
            &entry.sha256[..12]
        )));
    }
    if looks_like_hub_id(spec) {
        return from_hub(spec);
    }
    Err(Error::input(format!(
        "{spec}: no such file or directory, and not a model alias ({}) or hub id (owner/name)",
        CATALOG.iter().map(|e| e.alias).collect::<Vec<_>>().join(", ")
    )))
}

fn from_path(path: &Path) -> Result<ModelSource> {
    if path.is_dir() {
        if path.join("config.json").is_file() {
            return Ok(ModelSource::HfDir(path.to_path_buf()));
        }
        return Err(Error::file(path, "this directory has no config.json; an HF model directory needs config.json, model.safetensors and tokenizer.json (or pass a .gguf / llama2.c .bin file)"));
    }
    let mut magic = [0u8; 4];
    let n =
        std::io::Read::read(&mut crate::io::regular::open(path).map_err(|e| Error::file(path, e))?, &mut magic).map_err(|e| Error::file(path, e))?;
    if n == 4 && &magic == b"GGUF" {
        return Ok(ModelSource::Gguf(path.to_path_buf()));
    }
    match path.extension().and_then(|e| e.to_str()) {
        Some("gguf") => Ok(ModelSource::Gguf(path.to_path_buf())),
        Some("bin") => Ok(ModelSource::Llama2c { model: path.to_path_buf() }),
        Some("safetensors") => {
            Err(Error::file(path, "pass the directory holding this file (with config.json and tokenizer.json), not the .safetensors file itself"))
        }
        _ => Err(Error::file(path, "unrecognised model file: expected a .gguf, a llama2.c .bin, or an HF model directory")),
    }
}

fn looks_like_hub_id(spec: &str) -> bool {
    let parts: Vec<&str> = spec.split('/').collect();
    parts.len() == 2 && parts.iter().all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)))
}

/// Files an HF model directory needs besides the weights.
const HUB_FILES: [&str; 2] = ["config.json", "tokenizer.json"];

/// Finds `id` in the HF cache (`$HF_HOME`/`$HF_HUB_CACHE`), downloading what is missing unless
/// `HF_HUB_OFFLINE=1`; returns the snapshot directory.
fn from_hub(id: &str) -> Result<ModelSource> {
    let cache = hf_hub::Cache::from_env();
    let cached = cache.model(id.to_owned());
    let weights_cached = cached.get("model.safetensors").or_else(|| cached.get("model.safetensors.index.json"));
    if let (Some(config), Some(_), true) = (cached.get("config.json"), weights_cached, HUB_FILES.iter().all(|f| cached.get(f).is_some())) {
        if let Some(dir) = config.parent() {
            if index_shards_present(dir) {
                return Ok(ModelSource::HfDir(dir.to_path_buf()));
            }
        }
    }
    let offline = std::env::var("HF_HUB_OFFLINE").map(|v| v == "1" || v.eq_ignore_ascii_case("true")).unwrap_or(false);
    let not_available = |why: String| {
        Error::input(format!(
            "hub model {id} is not in the HF cache ({}) and {why}. Download it where the hub is reachable (huggingface-cli download {id}) and copy the cache, or pass a local path.",
            cache.path().display()
        ))
    };
    if offline {
        return Err(not_available("HF_HUB_OFFLINE is set".into()));
    }
    let api = hf_hub::api::sync::ApiBuilder::from_env()
        .with_progress(false)
        .build()
        .map_err(|e| not_available(format!("the hub client could not start ({e})")))?;
    let repo = api.model(id.to_owned());
    let fetch = |f: &str| repo.get(f).map_err(|e| not_available(format!("the hub could not be reached ({e})")));
    let config = fetch("config.json")?;
    fetch("tokenizer.json")?;
    match repo.get("model.safetensors") {
        Ok(_) => {}
        Err(_) => {
            let index = fetch("model.safetensors.index.json")?;
            for shard in shard_names(&index)? {
                fetch(&shard)?;
            }
        }
    }
    let dir = config.parent().ok_or_else(|| Error::Internal("hub cache path has no parent".into()))?;
    Ok(ModelSource::HfDir(dir.to_path_buf()))
}

fn index_shards_present(dir: &Path) -> bool {
    let index = dir.join("model.safetensors.index.json");
    if !index.exists() {
        return dir.join("model.safetensors").exists();
    }
    shard_names(&index).map(|s| s.iter().all(|f| dir.join(f).exists())).unwrap_or(false)
}

/// The distinct shard files named by a `model.safetensors.index.json`.
pub fn shard_names(index: &Path) -> Result<Vec<String>> {
    let text = crate::io::regular::read_to_string(index).map_err(|e| Error::file(index, e))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::file(index, format!("not valid JSON ({e})")))?;
    let map = json.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| Error::file(index, "has no weight_map object"))?;
    let mut shards: Vec<String> = map.values().filter_map(|v| v.as_str().map(str::to_owned)).collect();
    shards.sort();
    shards.dedup();
    if shards.iter().any(|s| s.contains("..") || s.starts_with('/')) {
        return Err(Error::file(index, "weight_map names a file outside the model directory"));
    }
    Ok(shards)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_ids_are_recognised() {
        assert!(looks_like_hub_id("HuggingFaceTB/SmolLM2-135M"));
        assert!(!looks_like_hub_id("a/b/c"));
        assert!(!looks_like_hub_id("model.gguf"));
        assert!(!looks_like_hub_id("/abs"));
    }

    #[test]
    fn unknown_spec_is_input_error() {
        let err = resolve("definitely-not-a-model").unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn offline_uncached_hub_id_says_so() {
        std::env::set_var("HF_HUB_OFFLINE", "1");
        std::env::set_var("HF_HOME", std::env::temp_dir().join("sinkscope-empty-hf-home"));
        let err = resolve("nobody-here/no-such-model").unwrap_err().to_string();
        assert!(err.contains("not in the HF cache") && err.contains("HF_HUB_OFFLINE"), "{err}");
    }
}
