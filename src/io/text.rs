//! Reading the user's text (`-p` or a file): empty, binary and non-UTF-8 input is refused with a
//! message that names the file and says how to fix it.

use std::path::Path;

use crate::error::{Error, Result};

pub fn read_text_file(path: &Path) -> Result<String> {
    let bytes = super::regular::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::file(path, "no such file"),
        std::io::ErrorKind::IsADirectory => Error::file(path, "is a directory, not a text file"),
        _ => Error::file(path, format!("cannot read ({e})")),
    })?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        let what = if bytes.is_empty() { "the text file is empty" } else { "the text file holds only whitespace" };
        return Err(Error::file(path, format!("{what}; give a file with some text")));
    }
    if bytes.contains(&0) {
        return Err(Error::file(path, "looks like a binary file (it contains NUL bytes); give a UTF-8 text file"));
    }
    String::from_utf8(bytes).map_err(|e| {
        Error::file(
            path,
            format!("is not valid UTF-8 (bad byte at offset {}); convert it, e.g. iconv -f latin1 -t utf-8", e.utf8_error().valid_up_to()),
        )
    })
}

/// `text` from its `start_char`-th character on (`--start-char`); `None` when it is shorter.
pub fn from_char(text: &str, start_char: usize) -> Option<&str> {
    text.char_indices().nth(start_char).map(|(i, _)| &text[i..])
}

/// How a text given inline (`-p`, or a string passed to the Python package) is recorded: by what
/// it is, not by a temporary file it went through.
pub fn inline_label(text: &str) -> String {
    use sha2::{Digest, Sha256};
    let sha: String = Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    format!("inline text ({} chars, sha256 {sha})", text.chars().count())
}

/// Text from `-p` or `-f`, and where it came from.
pub fn read_input(prompt: Option<&str>, file: Option<&Path>) -> Result<(String, String)> {
    match (prompt, file) {
        (Some(_), Some(_)) => Err(Error::input("give either -p TEXT or -f FILE, not both")),
        (Some(""), None) => Err(Error::input("the text given with -p is empty")),
        (Some(p), None) => Ok((p.to_owned(), inline_label(p))),
        (None, Some(path)) => Ok((read_text_file(path)?, path.display().to_string())),
        (None, None) => Err(Error::input("no text: pass -p TEXT or -f FILE")),
    }
}
