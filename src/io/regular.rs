//! Opening a file the user named, refusing what is not a regular file before reading: a FIFO or
//! a character device would block (or never end), a directory has no bytes. Errors keep
//! `std::io::Error`'s shape so each caller words them as it always has.

use std::fs::File;
use std::io::{Error, ErrorKind, Result};
use std::path::Path;

/// `Err(InvalidInput)` naming what `path` is when it exists but is not a regular file (symlinks
/// followed); a missing path is left to the open that follows.
pub fn check(path: &Path) -> Result<()> {
    let Ok(meta) = std::fs::metadata(path) else { return Ok(()) };
    if meta.is_file() {
        return Ok(());
    }
    let what = if meta.is_dir() { "a directory" } else { special_kind(&meta) };
    let kind = if meta.is_dir() { ErrorKind::IsADirectory } else { ErrorKind::InvalidInput };
    Err(Error::new(kind, format!("{what}, not a regular file; give a file")))
}

/// What a file that is neither regular nor a directory is.
#[cfg(unix)]
fn special_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

#[cfg(not(unix))]
fn special_kind(_: &std::fs::Metadata) -> &'static str {
    "not a regular file"
}

/// [`std::fs::File::open`] of a regular file only.
pub fn open(path: &Path) -> Result<File> {
    check(path)?;
    File::open(path)
}

/// [`std::fs::read`] of a regular file only.
pub fn read(path: &Path) -> Result<Vec<u8>> {
    check(path)?;
    std::fs::read(path)
}

/// [`std::fs::read_to_string`] of a regular file only.
pub fn read_to_string(path: &Path) -> Result<String> {
    check(path)?;
    std::fs::read_to_string(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_read() {
        let dir = std::env::temp_dir().join(format!("sinkscope-regular-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success());
        let file = dir.join("f.txt");
        std::fs::write(&file, "x").unwrap();
        assert_eq!(read(&file).unwrap(), b"x");
        assert!(read(&dir).unwrap_err().to_string().starts_with("a directory"));
        assert!(read_to_string(Path::new("/dev/zero")).unwrap_err().to_string().starts_with("a device"));
        if made {
            // Would block forever without the check.
            assert!(open(&fifo).unwrap_err().to_string().starts_with("a FIFO"));
        }
        assert_eq!(read(&dir.join("missing")).unwrap_err().kind(), ErrorKind::NotFound);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
