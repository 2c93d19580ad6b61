//! The SHA-256 of a model's weight files, and which catalog files on the model path match their
//! pinned one: a file an alias finds is
//! hashed the first time, and the outcome is remembered by its path, size and modification time
//! (in `<user cache>/sinkscope/verified.json`), so it is hashed again only when it changes. The
//! memo is a cache: unreadable or unwritable, every use hashes again and nothing else changes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use super::catalog::CatalogEntry;
use crate::error::{Error, Result};

/// What a file of the catalog's size holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    /// The pinned bytes.
    Pinned,
    /// Other bytes of the same size: damaged, or another model under the catalog's file name.
    Other { sha256: String },
}

/// One remembered hash: valid while the file keeps this size and modification time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Seen {
    bytes: u64,
    modified_ns: u128,
    sha256: String,
}

/// `<user cache>/sinkscope/verified.json`.
fn memo_path() -> Option<PathBuf> {
    dirs::cache_dir().map(|d| d.join("sinkscope").join("verified.json"))
}

fn read_memo(path: &Path) -> BTreeMap<String, Seen> {
    std::fs::read(path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
}

/// Writes the memo through a temp file and a rename, so a reader never sees half of it; a
/// failure only means the next use hashes again.
fn write_memo(path: &Path, memo: &BTreeMap<String, Seen>) {
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let tmp = dir.join(format!(".verified.json.{}", std::process::id()));
    let written = serde_json::to_vec_pretty(memo).ok().is_some_and(|bytes| std::fs::write(&tmp, bytes).is_ok());
    if !written || std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// The size and modification time (ns since the epoch) of `path`.
fn stamp(path: &Path) -> Option<(u64, u128)> {
    let meta = std::fs::metadata(path).ok()?;
    let modified = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?.as_nanos();
    Some((meta.len(), modified))
}

/// Whether `path` (already of `entry`'s size) holds `entry`'s pinned bytes: from the memo when the
/// file has not changed since it was hashed, else by hashing it now (and remembering that).
pub fn check(entry: &CatalogEntry, path: &Path) -> Result<Check> {
    let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()).display().to_string();
    let memo_file = memo_path();
    let now = stamp(path);
    let mut memo = memo_file.as_deref().map(read_memo).unwrap_or_default();
    let remembered = memo.get(&key).filter(|seen| now == Some((seen.bytes, seen.modified_ns))).map(|seen| seen.sha256.clone());
    let sha256 = match remembered {
        Some(sha) => sha,
        None => {
            let sha = weights_sha256(path)?;
            if let (Some(file), Some((bytes, modified_ns))) = (memo_file.as_deref(), now) {
                memo.insert(key, Seen { bytes, modified_ns, sha256: sha.clone() });
                write_memo(file, &memo);
            }
            sha
        }
    };
    Ok(if sha256 == entry.sha256 { Check::Pinned } else { Check::Other { sha256 } })
}

/// SHA-256 over the weight files of a model path: the file itself, or every `*.safetensors` of an
/// HF directory in name order.
pub fn weights_sha256(path: &Path) -> Result<String> {
    use sha2::{Digest, Sha256};
    let files: Vec<PathBuf> = if path.is_dir() {
        let mut v: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| Error::file(path, format!("cannot list ({e})")))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        v.sort();
        v
    } else {
        vec![path.to_path_buf()]
    };
    let mut hasher = Sha256::new();
    for f in &files {
        let mut file = crate::io::regular::open(f).map_err(|e| Error::file(f, format!("cannot open ({e})")))?;
        std::io::copy(&mut file, &mut hasher).map_err(|e| Error::file(f, format!("cannot read ({e})")))?;
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}
