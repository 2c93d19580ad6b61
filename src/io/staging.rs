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

/// What an interruption must remove: staging directories, files staged beside a destination
/// outside the output directory (`--save-tensors FILE`), and output directories this process
/// created (removed only if still empty).
#[derive(Default)]
struct Pending {
    staging_dirs: Vec<PathBuf>,
    staged_files: Vec<PathBuf>,
    created_dirs: Vec<PathBuf>,
    /// What this command has finished and keeps whatever happens next: each committed output
    /// directory and each finished part a rerun reuses ([`kept`]), in the order written.
    kept: Vec<PathBuf>,
}

/// Held while files are moved into place, and by the interruption cleanup: a commit is never cut
/// in half (an interruption during it waits for it and then finds nothing to undo).
static PENDING: Mutex<Pending> =
    Mutex::new(Pending { staging_dirs: Vec::new(), staged_files: Vec::new(), created_dirs: Vec::new(), kept: Vec::new() });

static NEXT: AtomicUsize = AtomicUsize::new(0);

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

/// Records `path` as finished and kept (a part file a rerun reuses, written whole by
/// `write_atomic`): an interruption says it was kept.
pub fn kept(path: &Path) {
    let mut p = pending();
    if !p.kept.iter().any(|k| k == path) {
        p.kept.push(path.to_path_buf());
    }
}

/// Forgets what the command that just ended kept (a caller running many commands in one process,
/// the Python package, starts each afresh).
pub fn end_command() {
    pending().kept.clear();
}

/// Undoes every unfinished write of this process: called once, by the signal handler, right
/// before the process exits. Returns what the command had finished (committed output directories,
/// finished parts): those stay, they are finished results, not half-written ones.
///
/// The lock is never released afterwards: a writer that wants a staging path, a temp file or a
/// commit waits until the process exits, so nothing new appears behind the cleanup.
pub fn abandon_all() -> Vec<PathBuf> {
    ABANDONING.store(true, Ordering::SeqCst);
    let mut p = pending();
    let kept = std::mem::take(&mut p.kept);
    for dir in p.staging_dirs.drain(..) {
        remove_tree(&dir);
    }
    for file in p.staged_files.drain(..) {
        let _ = std::fs::remove_file(&file);
    }
    for dir in p.created_dirs.drain(..).rev() {
        // Only if nothing else is in it (remove_dir refuses a non-empty directory).
        let _ = std::fs::remove_dir(&dir);
    }
    std::mem::forget(p);
    kept
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

/// Removes what runs killed outright (SIGKILL, a crash: no handler ran) left in `dir`: staging
/// directories and temp files whose process is gone. A live process's (another run writing here
/// now) are left alone; so is everything where liveness cannot be asked (non-Unix).
pub fn remove_leftovers(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let me = std::process::id();
    for entry in entries.flatten() {
        let Some(pid) = leftover_pid(&entry.file_name().to_string_lossy()) else { continue };
        if pid == me || process_alive(pid) {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            remove_tree(&path);
        } else {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// The process id in the name of something a run leaves while it works:
/// `.sinkscope-staging-PID-N` (a [`Staging`] directory) or `.NAME.tmp-PID` (a `write_atomic` temp).
fn leftover_pid(name: &str) -> Option<u32> {
    if let Some(rest) = name.strip_prefix(".sinkscope-staging-") {
        return rest.split('-').next()?.parse().ok();
    }
    name.strip_prefix('.')?.rsplit_once(".tmp-")?.1.parse().ok()
}

#[cfg(unix)]
fn process_alive(pid: u32) -> bool {
    // 0 and ids beyond pid_t would address process groups: never "dead".
    let Ok(pid) = libc::pid_t::try_from(pid) else { return true };
    if pid <= 0 {
        return true;
    }
    // SAFETY: signal 0 sends nothing; it only asks whether the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(not(unix))]
fn process_alive(_pid: u32) -> bool {
    true
}

/// Checks `-o` can be a directory (before minutes of work, and again when writing); it is
/// created only once there is something to write.
pub fn check_out_dir(out: &Path) -> Result<()> {
    if out.exists() && !out.is_dir() {
        return Err(Error::file(out, "exists and is not a directory; -o needs a directory"));
    }
    Ok(())
}

/// Claims `out` for this command: creates it if missing (removed again while empty if the command
/// fails or is interrupted) and holds it (`io::run_dir::hold`: the lock, and the refusal of another
/// model's results).
pub fn claim(out: &Path, owner: Option<super::run_dir::Owner<'_>>) -> Result<()> {
    create_out_dir(out)?;
    super::run_dir::hold(out, owner)
}

/// Removes the output directories this process created that are still empty: a command that
/// failed after claiming its `-o` (see `io::run_dir`) leaves no new directory behind.
pub fn discard_created_dirs() {
    let mut p = pending();
    for dir in p.created_dirs.drain(..).rev() {
        let _ = std::fs::remove_dir(&dir);
    }
}

/// Creates `out` and its missing parents, remembering each so that an interruption or a failed
/// command removes them again while they are empty ([`abandon_all`]).
pub fn create_out_dir(out: &Path) -> Result<()> {
    check_out_dir(out)?;
    let mut missing = Vec::new();
    let mut at = Some(out);
    while let Some(d) = at.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        missing.push(d.to_path_buf());
        at = d.parent();
    }
    let mut p = pending();
    p.created_dirs.extend(missing.into_iter().rev());
    std::fs::create_dir_all(out).map_err(|e| Error::file(out, format!("cannot create the output directory ({e})")))
}

/// The files one command writes into one output directory.
pub struct Staging {
    out: PathBuf,
    dir: PathBuf,
    /// Files written beside a destination of their own (temp, destination), moved at the commit.
    beside: Vec<(PathBuf, PathBuf)>,
    removals: Vec<PathBuf>,
    committed: bool,
}

impl Staging {
    /// Creates `out` if needed (remembered, so an interruption removes it again) and a fresh
    /// staging directory inside it.
    pub fn begin(out: &Path) -> Result<Staging> {
        claim(out, None)?;
        remove_leftovers(out);
        let dir = out.join(format!(".sinkscope-staging-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst)));
        pending().staging_dirs.push(dir.clone());
        std::fs::create_dir_all(&dir).map_err(|e| Error::file(out, format!("cannot create the output directory ({e})")))?;
        // `--replace`: the previous run's records and arrays go at the commit, unless rewritten.
        let removals = if super::run_dir::replacing() { super::run_dir::previous_run(out) } else { Vec::new() };
        Ok(Staging { out: out.to_path_buf(), dir, beside: Vec::new(), removals, committed: false })
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

    /// Where to write a file whose destination is a path of its own (`--save-tensors FILE`,
    /// anywhere): a hidden temp beside `dest`, moved onto it at the commit and removed by an
    /// interruption or a failure before it, like the files in the output directory.
    pub fn path_beside(&mut self, dest: &Path) -> Result<PathBuf> {
        let name = dest.file_name().ok_or_else(|| Error::file(dest, "is not a file path"))?;
        let temp = dest.with_file_name(format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id()));
        let mut p = pending();
        if !self.dir.is_dir() {
            return Err(Error::file(&self.dir, "the staging directory is gone (removed by an interruption or by hand)"));
        }
        p.staged_files.push(temp.clone());
        self.beside.push((temp.clone(), dest.to_path_buf()));
        Ok(temp)
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
    /// removes the staging directory. All or nothing: the files being replaced are first set aside
    /// in the staging directory, and if any move fails every file is put back as it was.
    pub fn commit(mut self) -> Result<()> {
        self.stage_command_log()?;
        let mut p = pending();
        let mut files = Vec::new();
        collect_files(&self.dir, &mut files)?;
        let rels = files.iter().map(|f| f.strip_prefix(&self.dir).map(Path::to_path_buf)).collect::<std::result::Result<Vec<_>, _>>();
        let rels = rels.map_err(|e| Error::Internal(e.to_string()))?;
        let aside = self.dir.join(".replaced");
        let mut done: Vec<Move> = Vec::new();
        let moved = self.move_all(&rels, &aside, &mut done).and_then(|()| self.move_beside(&mut done));
        if let Err(e) = moved {
            for step in done.iter().rev() {
                step.undo();
            }
            return Err(e);
        }
        for (_, dest) in &self.beside {
            let _ = std::fs::remove_file(set_aside_name(dest));
        }
        p.staged_files.retain(|f| !self.beside.iter().any(|(temp, _)| temp == f));
        for rel in self.removals.iter().filter(|r| !rels.contains(r)) {
            let _ = std::fs::remove_file(self.out.join(rel));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        p.staging_dirs.retain(|d| d != &self.dir);
        // The output directory now holds results: an interruption must not remove it.
        p.created_dirs.retain(|d| !self.out.starts_with(d));
        self.committed = true;
        if !p.kept.contains(&self.out) {
            p.kept.push(self.out.clone());
        }
        Ok(())
    }

    /// Sets each file being replaced aside, then moves the staged one in, recording every step.
    fn move_all(&self, rels: &[PathBuf], aside: &Path, done: &mut Vec<Move>) -> Result<()> {
        for rel in rels {
            let (staged, dest) = (self.dir.join(rel), self.out.join(rel));
            if let Some(parent) = dest.parent() {
                std::fs::create_dir_all(parent).map_err(|e| Error::file(parent, format!("cannot create ({e})")))?;
            }
            if dest.is_dir() {
                return Err(Error::file(&dest, "is a directory where the run writes a file; move it away and run again"));
            }
            if dest.exists() {
                let old = aside.join(rel);
                if let Some(parent) = old.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| Error::file(parent, format!("cannot create ({e})")))?;
                }
                rename(&dest, &old)?;
                done.push(Move { from: dest.clone(), to: old });
            }
            rename(&staged, &dest)?;
            done.push(Move { from: staged, to: dest });
        }
        Ok(())
    }
}

impl Staging {
    /// Adds this command to the directory's log of the commands that wrote it (`io::run_log`),
    /// staged with the files it lists so both land at the commit.
    fn stage_command_log(&self) -> Result<()> {
        let mut files = Vec::new();
        collect_files(&self.dir, &mut files)?;
        let mut rels: Vec<PathBuf> = files.iter().filter_map(|f| f.strip_prefix(&self.dir).ok().map(Path::to_path_buf)).collect();
        rels.extend(self.beside.iter().map(|(_, dest)| dest.clone()));
        let (sha, fresh) = (super::run_dir::owner_sha256(&self.out), super::run_dir::replacing());
        if let Some(bytes) = super::run_log::next_log(&super::run_log::command_line(), &self.out, &rels, sha, fresh)? {
            // Straight into the staging directory: nothing there is visible before the commit.
            let path = self.path(super::run_log::COMMANDS_FILE)?;
            std::fs::write(&path, bytes).map_err(|e| Error::file(&path, format!("cannot write ({e})")))?;
        }
        Ok(())
    }

    /// Moves the files staged beside their destinations into place, setting each replaced file
    /// aside first (beside it, removed once the whole commit succeeded).
    fn move_beside(&self, done: &mut Vec<Move>) -> Result<()> {
        for (temp, dest) in &self.beside {
            if dest.is_dir() {
                return Err(Error::file(dest, "is a directory where the run writes a file; move it away and run again"));
            }
            if dest.exists() {
                let old = set_aside_name(dest);
                rename(dest, &old)?;
                done.push(Move { from: dest.clone(), to: old });
            }
            rename(temp, dest)?;
            done.push(Move { from: temp.clone(), to: dest.clone() });
        }
        Ok(())
    }
}

/// Where a commit sets aside the file at `dest` that a staged-beside file replaces (a temp name
/// a later run removes if this process is killed before it does).
fn set_aside_name(dest: &Path) -> PathBuf {
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    dest.with_file_name(format!(".{name}.replaced.tmp-{}", std::process::id()))
}

/// One rename a commit made, to be reversed if a later one fails.
struct Move {
    from: PathBuf,
    to: PathBuf,
}

impl Move {
    fn undo(&self) {
        let _ = std::fs::rename(&self.to, &self.from);
    }
}

fn rename(from: &Path, to: &Path) -> Result<()> {
    std::fs::rename(from, to).map_err(|e| Error::file(to, format!("cannot move into place ({e}); the output directory is unchanged")))
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
        for (temp, _) in &self.beside {
            let _ = std::fs::remove_file(temp);
        }
        p.staged_files.retain(|f| !self.beside.iter().any(|(temp, _)| temp == f));
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
    fn a_commit_that_fails_half_way_puts_every_file_back() {
        let out = std::env::temp_dir().join(format!("sinkscope-staging-undo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(out.join("tables/t.parquet")).unwrap();
        std::fs::write(out.join("tables/t.parquet/keep"), b"a directory where a file goes").unwrap();
        std::fs::write(out.join("capture.json"), b"old").unwrap();
        let s = Staging::begin(&out).unwrap();
        std::fs::write(s.path("capture.json").unwrap(), b"new").unwrap();
        std::fs::write(s.path("tables/t.parquet").unwrap(), b"new table").unwrap();
        let err = s.commit().unwrap_err().to_string();
        assert!(err.contains("is a directory where the run writes a file"), "{err}");
        assert_eq!(std::fs::read(out.join("capture.json")).unwrap(), b"old", "the file moved in first is put back");
        let mut names: Vec<_> = std::fs::read_dir(&out).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        assert_eq!(names, ["capture.json", "tables"], "no staging directory or set-aside file is left");
        let _ = std::fs::remove_dir_all(&out);
    }

    #[test]
    fn leftovers_are_named_by_their_process() {
        assert_eq!(leftover_pid(".sinkscope-staging-4242-0"), Some(4242));
        assert_eq!(leftover_pid(".capture.json.tmp-77"), Some(77));
        assert_eq!(leftover_pid("capture.json"), None);
        assert_eq!(leftover_pid(".hidden"), None);
        assert_eq!(leftover_pid("notes.tmp-12"), None, "only the hidden temp names write_atomic makes");
        assert!(process_alive(std::process::id()));
        assert!(process_alive(0), "0 is never taken for a dead process");
    }

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
