//! Atomic file output: a temp file in the same directory, then a rename, so an interrupted run
//! never leaves a half-written file.

use std::path::Path;

use serde::Serialize;

use crate::error::{Error, Result};

/// Writes `bytes` to `path` via a temporary file and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| Error::file(path, "is not a file path"))?;
    let tmp = dir.join(format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id()));
    // An interruption waits for this write or comes before it (see `staging::abandon_all`).
    let result = super::staging::exclusive(|| {
        let result = std::fs::write(&tmp, bytes).and_then(|_| std::fs::rename(&tmp, path));
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    });
    result.map_err(|e| Error::file(path, format!("cannot write ({e})")))
}

/// Writes `value` as pretty JSON with a final newline, atomically.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    // serde_json would write a NaN or an infinity as null: a silent gap where a number belongs.
    super::finite_json::check(value, &path.display().to_string())?;
    let mut bytes = serde_json::to_vec_pretty(value)?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// Writes a finished part of a longer command (a needle or survey part a rerun reuses) as
/// [`write_json_atomic`] does, and records it as kept: an interruption says it stays.
pub fn write_part_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    write_json_atomic(path, value)?;
    super::staging::kept(path);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize)]
    struct Record {
        ppl: f64,
    }

    /// The record writer refuses a non-finite number by its place and writes nothing.
    #[test]
    fn a_record_with_a_non_finite_number_is_not_written() {
        let dir = std::env::temp_dir().join(format!("sinkscope-finite-json-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("record.json");
        write_json_atomic(&path, &Record { ppl: 3.0 }).unwrap();
        let message = write_json_atomic(&path, &Record { ppl: f64::NAN }).unwrap_err().to_string();
        assert!(message.contains("non-finite number at ppl (NaN)"), "{message}");
        let kept = std::fs::read_to_string(&path).unwrap();
        assert!(kept.contains("3.0"), "the earlier record stays as it was: {kept}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
