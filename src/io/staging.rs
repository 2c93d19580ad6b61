//! A command's output files land together or not at all: they are written into a staging
//! directory inside the output directory and moved into place by one `commit` at the end. If the
//! process is interrupted first, [`abandon_all`] (called by the signal handler) removes every
//! staging directory and the output directory if the run created it — so it is left as it was
//! before the command started. Files are created under the same lock ([`exclusive`]), so none
//! can appear behind the cleanup.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::error::{Error, Result};

/// What an interruption must remove: staging directories, and output directories this process
/// created (removed only if still empty).
#[derive(Default)]
struct Pending {
    staging_dirs: Vec<PathBuf>,
    created_dirs: Vec<PathBuf>,
}

/// Held while files are moved into place, and by the interruption cleanup: a commit is never cut
/// in half (an interruption during it waits for it and then finds nothing to undo).
static PENDING: Mutex<Pending> = Mutex::new(Pending { staging_dirs: Vec::new(), created_dirs: Vec::new() });

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Set once a commit has moved a command's files into place: an interruption after that point
/// has nothing to undo (the results are complete).
static COMMITTED: AtomicBool = AtomicBool::new(false);

fn pending() -> std::sync::MutexGuard<'static, Pending> {
    PENDING.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `write` (which creates a file and renames it into place) so that an interruption either
/// happens before it starts or waits until it is done: a temp file is never left behind and no
/// file appears after the cleanup. Writes are short (bytes already in memory), so holding the
/// lock delays an exit by one write at most.
pub fn exclusive<T>(write: impl FnOnce() -> T) -> T {
    let _held = pending();
    write()
}

/// Set when an interruption has begun: work still running in other threads is about to be
/// discarded, so its errors (a vanished staging directory) are not the command's result.
static ABANDONING: AtomicBool = AtomicBool::new(false);

/// Whether an interruption is undoing this process's writes (its exit is imminent).
pub fn abandoning() -> bool {
    ABANDONING.load(Ordering::SeqCst)
}

/// Undoes every unfinished write of this process: called once, by the signal handler, right
/// before the process exits. Returns whether a commit had already completed (its files stay:
/// they are a finished result, not a half-written one).
///
/// The lock is never released afterwards: a writer that wants a staging path, a temp file or a
/// commit waits until the process exits, so nothing new appears behind the cleanup.
pub fn abandon_all() -> bool {
    ABANDONING.store(true, Ordering::SeqCst);
    let mut p = pending();
    let committed = COMMITTED.load(Ordering::SeqCst);
    for dir in p.staging_dirs.drain(..) {
        remove_tree(&dir);
    }
    for dir in p.created_dirs.drain(..).rev() {
        // Only if nothing else is in it (remove_dir refuses a non-empty directory).
        let _ = std::fs::remove_dir(&dir);
    }
    std::mem::forget(p);
    committed
}

/// Removes a staging directory. Files and directories are created only under the lock the
/// caller holds ([`exclusive`], [`Staging::path`]), so one pass normally does it; `remove_dir_all`
/// fails if a file appears after it listed a directory (a writer that bypassed those helpers),
/// so it is repeated until the directory is gone — nothing can recreate the directory itself.
fn remove_tree(dir: &Path) {
    for _ in 0..1000 {
        if std::fs::remove_dir_all(dir).is_ok() || !dir.exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Checks `-o` can be a directory (before minutes of work, and again when writing); it is
/// created only once there is something to write.
pub fn check_out_dir(out: &Path) -> Result<()> {
    if out.exists() && !out.is_dir() {
        return Err(Error::file(out, "exists and is not a directory; -o needs a directory"));
    }
    Ok(())
}

/// The files one command writes into one output directory.
pub struct Staging {
    out: PathBuf,
    dir: PathBuf,
    removals: Vec<PathBuf>,
    committed: bool,
}

impl Staging {
    /// Creates `out` if needed (remembered, so an interruption removes it again) and a fresh
    /// staging directory inside it.
    pub fn begin(out: &Path) -> Result<Staging> {
        check_out_dir(out)?;
        let mut missing = Vec::new();
        let mut at = Some(out);
        while let Some(d) = at.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
            missing.push(d.to_path_buf());
            at = d.parent();
        }
        let dir = out.join(format!(".sinkscope-staging-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst)));
        {
            let mut p = pending();
            p.created_dirs.extend(missing.into_iter().rev());
            p.staging_dirs.push(dir.clone());
        }
        std::fs::create_dir_all(&dir).map_err(|e| Error::file(out, format!("cannot create the output directory ({e})")))?;
        Ok(Staging { out: out.to_path_buf(), dir, removals: Vec::new(), committed: false })
    }

    /// Where to write `rel` (a path relative to the output directory) until the commit.
    pub fn path(&self, rel: impl AsRef<Path>) -> Result<PathBuf> {
        let path = self.dir.join(rel);
        // Under the lock, and never the staging directory itself: after an interruption removed
        // it, writes into it fail instead of bringing it back.
        let _held = pending();
        if !self.dir.is_dir() {
            return Err(Error::file(&self.dir, "the staging directory is gone (removed by an interruption or by hand)"));
        }
        if let Some(parent) = path.parent().filter(|p| *p != self.dir) {
            std::fs::create_dir_all(parent).map_err(|e| Error::file(parent, format!("cannot create ({e})")))?;
        }
        Ok(path)
    }

    /// Whether `rel` will be in the output directory after the commit (staged now, or already there).
    pub fn has(&self, rel: impl AsRef<Path>) -> bool {
        self.dir.join(&rel).exists() || self.out.join(&rel).exists()
    }

    /// Removes `rel` from the output directory at the commit (a file the new results make stale).
    pub fn remove_on_commit(&mut self, rel: impl AsRef<Path>) {
        self.removals.push(rel.as_ref().to_path_buf());
    }

    /// Moves every staged file into the output directory, replacing what was there, then
    /// removes the staging directory.
    pub fn commit(mut self) -> Result<()> {
        let mut p = pending();
        let mut files = Vec::new();
        collect_files(&self.dir, &mut files)?;
        for file in &files {
            let rel = file.strip_prefix(&self.dir).map_err(|e| Error::Internal(e.to_string()))?;
            let dest = self.out.join(rel);
            if let Some(parent) = dest.parent() {
                std::fs::create_dir_all(parent).map_err(|e| Error::file(parent, format!("cannot create ({e})")))?;
            }
            std::fs::rename(file, &dest).map_err(|e| Error::file(&dest, format!("cannot move into place ({e})")))?;
        }
        for rel in &self.removals {
            let _ = std::fs::remove_file(self.out.join(rel));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        p.staging_dirs.retain(|d| d != &self.dir);
        // The output directory now holds results: an interruption must not remove it.
        p.created_dirs.retain(|d| !self.out.starts_with(d));
        self.committed = true;
        COMMITTED.store(true, Ordering::SeqCst);
        Ok(())
    }
}

impl Drop for Staging {
    /// A run that fails before its commit leaves the output directory as it was.
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        let mut p = pending();
        let _ = std::fs::remove_dir_all(&self.dir);
        p.staging_dirs.retain(|d| d != &self.dir);
        let created: Vec<PathBuf> = p.created_dirs.iter().filter(|d| self.out.starts_with(d)).cloned().collect();
        for d in created.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
        p.created_dirs.retain(|d| !created.contains(d));
    }
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::file(dir, format!("cannot list ({e})")))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_files(&path, out)?;
        } else {
            out.push(path);
        }
    }
    out.sort();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_land_together_and_an_unfinished_run_leaves_nothing() {
        let root = std::env::temp_dir().join(format!("sinkscope-staging-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let out = root.join("a/b");
        {
            let s = Staging::begin(&out).unwrap();
            std::fs::write(s.path("x.json").unwrap(), b"1").unwrap();
            // Dropped without a commit: the directories this run created go again.
        }
        assert!(!root.join("a").exists());
        let mut s = Staging::begin(&out).unwrap();
        std::fs::write(s.path("x.json").unwrap(), b"2").unwrap();
        std::fs::write(s.path("tables/t.parquet").unwrap(), b"3").unwrap();
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("stale.safetensors"), b"old").unwrap();
        s.remove_on_commit("stale.safetensors");
        assert!(!out.join("x.json").exists(), "nothing lands before the commit");
        s.commit().unwrap();
        assert_eq!(std::fs::read(out.join("x.json")).unwrap(), b"2");
        assert_eq!(std::fs::read(out.join("tables/t.parquet")).unwrap(), b"3");
        assert!(!out.join("stale.safetensors").exists());
        let names: Vec<_> = std::fs::read_dir(&out).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        assert!(names.iter().all(|n| !n.starts_with(".sinkscope-staging")), "{names:?}");
        let _ = std::fs::remove_dir_all(&root);
    }
}
