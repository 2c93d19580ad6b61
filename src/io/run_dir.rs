//! A run directory belongs to one run at a time and to one model: a command claims its `-o`
//! directory (`io::staging::claim`) once its inputs are checked (before minutes of work), taking an advisory lock on
//! the directory itself (released by the OS when the process ends, however it ends) so a second
//! writer fails at once, and refusing a directory whose records name another model.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::error::{Error, Result};

/// The directories this process has claimed, each with the open handle its lock is held on and
/// the SHA-256 of the model whose results go there (when the claim named one).
static CLAIMED: Mutex<Vec<(PathBuf, File, Option<String>)>> = Mutex::new(Vec::new());

/// Whether the command running starts its output directory afresh (`--replace`); set by the
/// command line for each command it runs.
static REPLACE: AtomicBool = AtomicBool::new(false);

/// Sets whether the command about to run replaces another model's results (`--replace`).
pub fn set_replace(replace: bool) {
    REPLACE.store(replace, Ordering::SeqCst);
}

/// Whether the running command replaces another model's results.
pub fn replacing() -> bool {
    REPLACE.load(Ordering::SeqCst)
}

/// The model a command writes about, as run records name it.
#[derive(Debug, Clone, Copy)]
pub struct Owner<'a> {
    /// SHA-256 of the weights.
    pub sha256: &'a str,
    /// How messages name it (its source path).
    pub source: &'a str,
}

/// Holds the existing directory `out` for this command (idempotent within a process): locks it,
/// and with an `owner`, refuses it when a record there (`*.json` with a `model`) names another
/// model — unless [`replacing`], when the commit removes the previous run's records and arrays
/// (`Staging::begin`). `staging::claim` creates the directory first.
pub fn hold(out: &Path, owner: Option<Owner<'_>>) -> Result<()> {
    lock(out, owner.map(|o| o.sha256))?;
    if let (Some(owner), false) = (owner, replacing()) {
        if let Some((file, other)) = foreign_record(out, owner.sha256) {
            return Err(Error::file(
                out,
                format!(
                    "holds results of another model ({file}: {other}), not of {}; give another -o, or --replace to start the directory afresh",
                    owner.source
                ),
            ));
        }
    }
    Ok(())
}

/// Releases every directory this process claimed (at the end of each command).
pub fn release_all() {
    CLAIMED.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clear();
}

/// The SHA-256 of the model whose results this process writes into `out` (claimed with one).
pub fn owner_sha256(out: &Path) -> Option<String> {
    let key = out.canonicalize().unwrap_or_else(|_| out.to_path_buf());
    let claimed = CLAIMED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    claimed.iter().find(|(dir, _, _)| *dir == key).and_then(|(_, _, sha)| sha.clone())
}

/// Takes the directory's lock, or says another process holds it.
fn lock(out: &Path, sha256: Option<&str>) -> Result<()> {
    let key = out.canonicalize().unwrap_or_else(|_| out.to_path_buf());
    let mut claimed = CLAIMED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(claim) = claimed.iter_mut().find(|(dir, _, _)| *dir == key) {
        if claim.2.is_none() {
            claim.2 = sha256.filter(|s| !s.is_empty()).map(str::to_string);
        }
        return Ok(());
    }
    let handle = File::open(out).map_err(|e| Error::file(out, format!("cannot open the output directory ({e})")))?;
    if !try_lock(&handle) {
        return Err(Error::file(out, "another sinkscope command is writing into this directory now; wait for it to finish, or give another -o"));
    }
    claimed.push((key, handle, sha256.filter(|s| !s.is_empty()).map(str::to_string)));
    Ok(())
}

#[cfg(unix)]
fn try_lock(handle: &File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this process owns; the lock lives as long as the descriptor.
    unsafe { libc::flock(handle.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

#[cfg(not(unix))]
fn try_lock(_: &File) -> bool {
    true
}

/// The top-level records in `out` that name a model, in name order: each file's name and its
/// `model` object.
fn model_records(out: &Path) -> Vec<(PathBuf, serde_json::Value)> {
    let Ok(entries) = std::fs::read_dir(out) else { return Vec::new() };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "json")).collect();
    paths.sort();
    paths
        .into_iter()
        .filter_map(|path| {
            let bytes = super::regular::read(&path).ok()?;
            let mut record: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
            let model = record.get_mut("model")?.take();
            Some((PathBuf::from(path.file_name()?), model))
        })
        .collect()
}

/// The first record in `out` whose model has another SHA-256 than `sha256`: its file name and
/// that model's source.
fn foreign_record(out: &Path, sha256: &str) -> Option<(String, String)> {
    model_records(out).into_iter().find_map(|(name, model)| {
        let theirs = model.get("sha256")?.as_str()?;
        (theirs != sha256).then(|| {
            let source = model.get("source").and_then(serde_json::Value::as_str).unwrap_or("an unnamed model");
            (name.to_string_lossy().into_owned(), source.to_owned())
        })
    })
}

/// What `--replace` removes from `out`: the top-level records that name a model and the arrays
/// beside them (`*.safetensors`), as names relative to `out`, in name order.
pub fn previous_run(out: &Path) -> Vec<PathBuf> {
    let arrays = std::fs::read_dir(out).into_iter().flatten().flatten().map(|e| e.path());
    let arrays = arrays.filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "safetensors")).filter_map(|p| p.file_name().map(PathBuf::from));
    let mut found: Vec<PathBuf> = model_records(out).into_iter().map(|(name, _)| name).chain(arrays).collect();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_of_another_model_is_refused_and_claims_are_idempotent() {
        let dir = std::env::temp_dir().join(format!("sinkscope-run-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let me = Owner { sha256: "aa", source: "a.gguf" };
        std::fs::create_dir_all(&dir).unwrap();
        hold(&dir, Some(me)).unwrap();
        hold(&dir, Some(me)).unwrap();
        // Another open handle (as another process would have) cannot take the lock.
        assert!(!try_lock(&File::open(&dir).unwrap()), "the claim holds the directory's lock");
        std::fs::write(dir.join("capture.json"), r#"{"model": {"source": "b.gguf", "sha256": "bb"}}"#).unwrap();
        std::fs::write(dir.join("notes.json"), r#"{"no": "model"}"#).unwrap();
        std::fs::write(dir.join("heatmaps.safetensors"), b"x").unwrap();
        let e = hold(&dir, Some(me)).unwrap_err().to_string();
        assert!(e.contains("capture.json: b.gguf") && e.contains("not of a.gguf") && e.contains("--replace"), "{e}");
        set_replace(true);
        hold(&dir, Some(me)).unwrap();
        set_replace(false);
        assert_eq!(previous_run(&dir), [PathBuf::from("capture.json"), PathBuf::from("heatmaps.safetensors")]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
