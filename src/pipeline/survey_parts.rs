//! A survey fanned out over processes or machines. A shard (`--shard K/N`) runs every N-th model
//! (round robin) into the usual run directories and leaves a self-contained part record,
//! `survey-parts/part-K-of-N.json`: the survey's settings and its rows. The merge checks that a
//! set of parts is one whole survey (same settings, every shard once, every model once), gathers
//! each model's run directory into the output directory, and writes the comparison exactly as one
//! process would have (survey.json and survey.md byte for byte).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::demo::STREAM_TEXT;
use super::progress::Progress;
use super::survey::{epsilon, slugs, survey_models, text_labels, write_survey, LoadRecord, SurveyOptions, DEFAULT_TEXT_FILE};
use crate::analysis::survey::{Survey, SurveyRow};
use crate::error::{Error, IoContext, Result};
use crate::io::staging::{check_out_dir, create_out_dir, remove_leftovers};
use crate::io::{write_atomic, write_part_json};

/// Where a survey directory keeps its part records.
pub const PARTS_DIR: &str = "survey-parts";
/// The part record's format (a merge refuses parts of another).
pub const PART_FORMAT: u32 = 1;

/// Shard K of N: the models with 0-based index i where i mod N = K − 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    k: usize,
    n: usize,
}

impl Shard {
    pub fn new(k: usize, n: usize) -> Result<Shard> {
        if n == 0 {
            return Err(Error::input(format!("--shard {k}/0: N is the number of shards, at least 1")));
        }
        if k == 0 || k > n {
            return Err(Error::input(format!("--shard {k}/{n}: K must be between 1 and {n} (shards are numbered 1 to N)")));
        }
        Ok(Shard { k, n })
    }

    /// K (1-based).
    pub fn k(&self) -> usize {
        self.k
    }

    /// N.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Whether this shard runs model `i` (0-based).
    pub fn runs(&self, i: usize) -> bool {
        i % self.n == self.k - 1
    }

    /// `part-K-of-N.json`.
    pub fn file_name(&self) -> String {
        format!("part-{}-of-{}.json", self.k, self.n)
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.k, self.n)
    }
}

/// Everything that makes two shards parts of one survey: equal in every part of a merge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SurveySettings {
    pub sinkscope_version: String,
    /// ε of Sink_0^ε.
    pub epsilon: f64,
    /// Each model's run-directory name (`models/<name>`), in the order given.
    pub models: Vec<String>,
    /// Each sweep text's label (a given text's path; the built-in one's file name).
    pub texts: Vec<String>,
    /// Whether the text is the built-in one (chapters I–III of Pride and Prejudice).
    pub builtin_text: bool,
    pub caches: Vec<usize>,
    pub tokens: usize,
    pub sinks: Vec<usize>,
    pub ablation: bool,
    pub load: LoadRecord,
}

impl SurveySettings {
    pub fn of(opts: &SurveyOptions) -> Result<SurveySettings> {
        Ok(SurveySettings {
            sinkscope_version: env!("CARGO_PKG_VERSION").to_string(),
            epsilon: epsilon(),
            models: slugs(opts)?,
            texts: text_labels(opts),
            builtin_text: opts.texts.is_empty(),
            caches: opts.caches.clone(),
            tokens: opts.tokens,
            sinks: opts.sinks.clone(),
            ablation: opts.ablation,
            load: LoadRecord::of(&opts.load),
        })
    }
}

/// One model's row and its place (0-based) among the survey's models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartRow {
    pub index: usize,
    pub row: SurveyRow,
}

/// `survey-parts/part-K-of-N.json`: one shard's results, enough to merge without its command line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SurveyPart {
    pub format: u32,
    /// K and N.
    pub shard: usize,
    pub shards: usize,
    pub settings: SurveySettings,
    pub rows: Vec<PartRow>,
}

/// Runs shard `shard` of the survey into `out` (resumable like a whole survey) and writes its part
/// record; returns where and what. No comparison is written: that is the merge's.
pub fn survey_shard(opts: &SurveyOptions, shard: Shard, out: &Path, progress: &mut dyn Progress) -> Result<(PathBuf, SurveyPart)> {
    let settings = SurveySettings::of(opts)?;
    let rows = survey_models(opts, &|i| shard.runs(i), out, progress)?;
    let rows = rows.into_iter().map(|(index, row)| PartRow { index, row }).collect();
    let part = SurveyPart { format: PART_FORMAT, shard: shard.k, shards: shard.n, settings, rows };
    let dir = out.join(PARTS_DIR);
    create_out_dir(&dir)?;
    let path = dir.join(shard.file_name());
    write_part_json(&path, &part)?;
    Ok((path, part))
}

/// A part read back, with the survey directory it came from.
struct Found {
    dir: PathBuf,
    file: PathBuf,
    part: SurveyPart,
}

/// Merges the parts in every `dirs[i]/survey-parts/` into `out`: each model's run directory
/// copied to `out/models/<name>` (unless it is already there), then survey.json, the Parquet
/// table, survey.md and the figures. Nothing is written unless the parts are one whole survey.
pub fn merge_parts(dirs: &[PathBuf], out: &Path, progress: &mut dyn Progress) -> Result<Survey> {
    let found = read_parts(dirs)?;
    let (settings, rows) = check_parts(&found, dirs)?;
    check_out_dir(out)?;
    let runs: Vec<(PathBuf, PathBuf)> = rows
        .iter()
        .map(|(i, f, _)| {
            let slug = &settings.models[*i];
            (f.dir.join("models").join(slug), out.join("models").join(slug))
        })
        .collect();
    for ((from, _), (_, f, _)) in runs.iter().zip(&rows) {
        if !from.is_dir() {
            let shard = Shard { k: f.part.shard, n: f.part.shards };
            return Err(Error::file(
                from,
                format!("missing, but {} lists its model; rerun shard {shard} into {}", f.file.display(), f.dir.display()),
            ));
        }
        // Its records parse and hold values in range before anything is copied (a truncated
        // report.json is refused here, not published in the merged survey).
        crate::report::run::Run::open(from)?;
    }
    create_out_dir(out)?;
    let here = out.canonicalize().with_file(out)?;
    for ((from, to), (_, f, _)) in runs.iter().zip(&rows) {
        if f.dir != here {
            progress.stage(&format!("copying {} to {}", from.display(), to.display()));
            copy_run_dir(from, to)?;
        }
    }
    if settings.builtin_text {
        write_atomic(&out.join(DEFAULT_TEXT_FILE), STREAM_TEXT.as_bytes())?;
    }
    let rows = rows.into_iter().map(|(_, _, row)| row).collect();
    let survey = Survey { sinkscope_version: settings.sinkscope_version.clone(), epsilon: settings.epsilon, rows };
    write_survey(&survey, out)?;
    Ok(survey)
}

/// Every part file in the directories (each directory once), ordered by shard.
fn read_parts(dirs: &[PathBuf]) -> Result<Vec<Found>> {
    if dirs.is_empty() {
        return Err(Error::input("--merge needs the survey directories the shards wrote (their -o)"));
    }
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut found = Vec::new();
    for dir in dirs {
        if !dir.is_dir() {
            return Err(Error::file(dir, "no such directory; --merge takes the -o directories of the shards"));
        }
        let canonical = dir.canonicalize().with_file(dir)?;
        if seen.contains(&canonical) {
            continue;
        }
        seen.push(canonical.clone());
        let parts = dir.join(PARTS_DIR);
        if !parts.is_dir() {
            return Err(Error::file(&parts, "no such directory: no shard wrote here; run `sinkscope survey … --shard K/N -o DIR` first"));
        }
        let mut files: Vec<PathBuf> = std::fs::read_dir(&parts)
            .with_file(&parts)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("part-")) && p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        for file in files {
            found.push(Found { dir: canonical.clone(), part: read_part(&file)?, file });
        }
    }
    if found.is_empty() {
        let list = dirs.iter().map(|d| d.join(PARTS_DIR).display().to_string()).collect::<Vec<_>>().join(", ");
        return Err(Error::input(format!("no part files (part-K-of-N.json) in {list}; run the shards first")));
    }
    found.sort_by_key(|f| f.part.shard);
    Ok(found)
}

fn read_part(file: &Path) -> Result<SurveyPart> {
    let bytes = crate::io::regular::read(file).with_file(file)?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| Error::file(file, format!("is not JSON ({e}); delete it and rerun its shard")))?;
    if value.get("format").and_then(serde_json::Value::as_u64) != Some(u64::from(PART_FORMAT)) {
        return Err(Error::file(file, format!("is not a survey part of format {PART_FORMAT}; rerun its shard with this sinkscope")));
    }
    let part: SurveyPart =
        serde_json::from_value(value).map_err(|e| Error::file(file, format!("is not a survey part ({e}); delete it and rerun its shard")))?;
    Shard::new(part.shard, part.shards).map_err(|e| Error::file(file, format!("names no valid shard ({e}); delete it and rerun its shard")))?;
    Ok(part)
}

/// Each model's index, the part that holds its row, and the row, by index.
type Rows<'f> = Vec<(usize, &'f Found, SurveyRow)>;

/// The parts are one survey: the same settings and N everywhere, shards 1..N once each, and each
/// part holding exactly its shard's models. Returns the settings and every row by model index.
fn check_parts<'f>(found: &'f [Found], dirs: &[PathBuf]) -> Result<(&'f SurveySettings, Rows<'f>)> {
    let Some(first) = found.first() else { return Err(Error::Internal("a merge without parts".into())) };
    let (settings, n) = (&first.part.settings, first.part.shards);
    for f in &found[1..] {
        if f.part.shards != n {
            return Err(Error::file(
                &f.file,
                format!(
                    "is shard {}/{} but {} is shard {}/{n}: parts of differently split surveys; merge the parts of one survey (delete stale parts)",
                    f.part.shard,
                    f.part.shards,
                    first.file.display(),
                    first.part.shard
                ),
            ));
        }
        if let Some(diff) = settings_diff(settings, &f.part.settings) {
            return Err(Error::file(
                &f.file,
                format!(
                    "shard {}/{n} was made with other settings than {} ({diff}); merge the parts of one survey, or rerun the shard with the same -m/-f/--cache/--tokens/--sinks/--ablation/--dtype/--quantized",
                    f.part.shard,
                    first.file.display()
                ),
            ));
        }
    }
    let mut by_shard: BTreeMap<usize, &Found> = BTreeMap::new();
    for f in found {
        if let Some(other) = by_shard.insert(f.part.shard, f) {
            return Err(Error::file(&f.file, format!("shard {}/{n} is also in {}; keep one of them", f.part.shard, other.file.display())));
        }
    }
    if let Some(k) = (1..=n).find(|k| !by_shard.contains_key(k)) {
        let list = dirs.iter().map(|d| d.join(PARTS_DIR).display().to_string()).collect::<Vec<_>>().join(", ");
        return Err(Error::input(format!(
            "shard {k}/{n} is missing: no part-{k}-of-{n}.json in {list}; run `sinkscope survey … --shard {k}/{n}` into one of them, or add its directory to --merge"
        )));
    }
    let mut rows: BTreeMap<usize, (&Found, SurveyRow)> = BTreeMap::new();
    for f in found {
        let shard = Shard { k: f.part.shard, n };
        for r in &f.part.rows {
            let Some(slug) = settings.models.get(r.index).filter(|_| shard.runs(r.index)) else {
                return Err(Error::file(&f.file, format!("holds a row for model {} which shard {shard} does not run; rerun the shard", r.index + 1)));
            };
            if let Some((other, _)) = rows.insert(r.index, (f, r.row.clone())) {
                return Err(Error::file(&f.file, format!("the row of {slug} is also in {}; rerun the shard", other.file.display())));
            }
        }
        if let Some(i) = (0..settings.models.len()).find(|&i| shard.runs(i) && !rows.contains_key(&i)) {
            return Err(Error::file(&f.file, format!("lacks the row of {}; rerun shard {shard} into {}", settings.models[i], f.dir.display())));
        }
    }
    Ok((settings, rows.into_iter().map(|(i, (f, row))| (i, f, row)).collect()))
}

/// The first setting that differs, in words: "tokens 200 here, 160 there".
fn settings_diff(there: &SurveySettings, here: &SurveySettings) -> Option<String> {
    if there == here {
        return None;
    }
    let (a, b) = (serde_json::to_value(there).ok()?, serde_json::to_value(here).ok()?);
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else { return Some("settings differ".into()) };
    a.iter().find(|(k, v)| b.get(*k) != Some(*v)).map(|(k, v)| format!("{k} {} here, {v} there", b.get(k).unwrap_or(&serde_json::Value::Null)))
}

/// Copies run directory `from` to `to`, replacing what is there: into a temporary sibling first,
/// renamed into place, so an interrupted or failed copy leaves no half-copied directory (the
/// next merge removes the temporary one).
fn copy_run_dir(from: &Path, to: &Path) -> Result<()> {
    let (Some(parent), Some(name)) = (to.parent(), to.file_name()) else { return Err(Error::file(to, "is not a directory path")) };
    create_out_dir(parent)?;
    remove_leftovers(parent);
    let name = name.to_string_lossy();
    let tmp = parent.join(format!(".{name}.tmp-{}", std::process::id()));
    let old = parent.join(format!(".{name}.old.tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    if let Err(e) = copy_tree(from, &tmp) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    let had = to.exists();
    if had {
        if let Err(e) = std::fs::rename(to, &old) {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(Error::file(to, format!("cannot replace ({e}); move it away and merge again")));
        }
    }
    if let Err(e) = std::fs::rename(&tmp, to) {
        if had {
            let _ = std::fs::rename(&old, to);
        }
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(Error::file(to, format!("cannot write ({e})")));
    }
    if had {
        let _ = if old.is_dir() { std::fs::remove_dir_all(&old) } else { std::fs::remove_file(&old) };
    }
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).map_err(|e| Error::file(to, format!("cannot create ({e})")))?;
    for entry in std::fs::read_dir(from).with_file(from)? {
        let src = entry.with_file(from)?.path();
        let Some(name) = src.file_name() else { continue };
        let dst = to.join(name);
        if src.is_dir() {
            copy_tree(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst).map_err(|e| Error::file(&src, format!("cannot copy to {} ({e})", dst.display())))?;
        }
    }
    Ok(())
}
