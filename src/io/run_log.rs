//! The commands that wrote a run directory: `commands.json` gains one entry per commit — the
//! command line (the directory itself written as "."), the files that commit wrote and the model
//! it was about — so every result in the directory can be traced to what made it and rerun.
//! Written only for a command line (the binary, the Python package); library callers that run a
//! pipeline directly leave no log.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The log's name in a run directory.
pub const COMMANDS_FILE: &str = "commands.json";

/// The command line running now (program name first); empty when none was set.
static COMMAND_LINE: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Sets the command line the next commits are logged under (`cli::run_in`, per command).
pub fn set_command_line(argv: Vec<String>) {
    *COMMAND_LINE.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = argv;
}

/// The command line running now (empty: none).
pub fn command_line() -> Vec<String> {
    COMMAND_LINE.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct CommandLog {
    commands: Vec<LoggedCommand>,
}

/// One commit into the directory.
#[derive(Debug, Serialize, Deserialize)]
struct LoggedCommand {
    argv: Vec<String>,
    /// What the commit wrote, relative to the directory (a file written elsewhere, as given).
    files: Vec<String>,
    /// SHA-256 of the weights of the model the command was about, when it loaded one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model_sha256: Option<String>,
    sinkscope_version: String,
}

/// The log of `out` with an entry for the command line `argv` added, to be staged with the
/// commit's `files` (`None` when `argv` is empty: no command line). The previous log is kept
/// unless the command starts the directory afresh (`fresh`, `--replace`); one that cannot be read
/// is refused by name.
pub fn next_log(argv: &[String], out: &Path, files: &[PathBuf], model_sha256: Option<String>, fresh: bool) -> Result<Option<Vec<u8>>> {
    if argv.is_empty() {
        return Ok(None);
    }
    let path = out.join(COMMANDS_FILE);
    let mut log = if fresh || !path.exists() {
        CommandLog::default()
    } else {
        let bytes = super::regular::read(&path).map_err(|e| Error::file(&path, format!("cannot read ({e})")))?;
        serde_json::from_slice(&bytes).map_err(|e| {
            Error::file(&path, format!("is not sinkscope's log of the commands that wrote this directory ({e}); move it away and run again"))
        })?
    };
    log.commands.push(LoggedCommand {
        argv: argv.iter().map(|a| as_logged(a, out)).collect(),
        files: files.iter().map(|f| f.display().to_string()).collect(),
        model_sha256,
        sinkscope_version: env!("CARGO_PKG_VERSION").to_string(),
    });
    let mut bytes = serde_json::to_vec_pretty(&log)?;
    bytes.push(b'\n');
    Ok(Some(bytes))
}

/// An argument as logged: the directory itself as "." (so the log does not depend on where the
/// directory was written, and two runs of one command into two directories log the same line).
fn as_logged(arg: &str, out: &Path) -> String {
    if Path::new(arg) == out {
        return ".".into();
    }
    match arg.split_once('=') {
        Some((flag, value)) if flag.starts_with('-') && Path::new(value) == out => format!("{flag}=."),
        _ => arg.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_commit_adds_its_command_line_with_the_directory_as_dot() {
        let dir = std::env::temp_dir().join(format!("sinkscope-run-log-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert!(next_log(&[], &dir, &[], None, false).unwrap().is_none(), "no command line: no log");
        let d = dir.to_str().unwrap().to_string();
        let capture: Vec<String> = ["sinkscope", "capture", "-o", &d, "--save-tensors", &format!("{d}/t.st")].map(String::from).to_vec();
        let first = next_log(&capture, &dir, &[PathBuf::from("capture.json")], Some("ab".into()), false).unwrap().unwrap();
        std::fs::write(dir.join(COMMANDS_FILE), &first).unwrap();
        let export: Vec<String> = ["sinkscope", "export", &format!("--dir={d}")].map(String::from).to_vec();
        let second: serde_json::Value = serde_json::from_slice(&next_log(&export, &dir, &[], None, false).unwrap().unwrap()).unwrap();
        assert_eq!(second["commands"][0]["argv"], serde_json::json!(["sinkscope", "capture", "-o", ".", "--save-tensors", format!("{d}/t.st")]));
        assert_eq!(second["commands"][0]["model_sha256"], "ab");
        assert_eq!(second["commands"][1]["argv"], serde_json::json!(["sinkscope", "export", "--dir=."]));
        let fresh: serde_json::Value = serde_json::from_slice(&next_log(&export, &dir, &[], None, true).unwrap().unwrap()).unwrap();
        assert_eq!(fresh["commands"].as_array().unwrap().len(), 1, "--replace starts the log afresh");
        std::fs::write(dir.join(COMMANDS_FILE), b"{\"commands\": 3}").unwrap();
        let e = next_log(&export, &dir, &[], None, false).unwrap_err().to_string();
        assert!(e.contains("commands.json: is not sinkscope's log"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
