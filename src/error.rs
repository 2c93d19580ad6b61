//! Error type shared by the library: user-facing input errors (exit 2) versus internal bugs (exit 1).

use std::path::Path;

/// Every failure sinkscope reports. `Input` is the user's to fix (bad file, flag, or text) and maps
/// to exit code 2; everything else is a bug or an environment failure and maps to exit code 1.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// One readable sentence naming what is wrong and how to fix it.
    #[error("{0}")]
    Input(String),
    #[error("internal error in tensor code: {0}")]
    Tensor(#[from] candle_core::Error),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("JSON error: {0}")]
    Json(#[from] serde_json::Error),
    #[error("internal error: {0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An input error about a specific file: "FILE: what is wrong. Fix: …".
    pub fn file(path: &Path, problem: impl std::fmt::Display) -> Self {
        Error::Input(format!("{}: {problem}", path.display()))
    }

    pub fn input(msg: impl Into<String>) -> Self {
        Error::Input(msg.into())
    }

    /// The process exit code for this error (DESIGN §2: 2 for user/input errors, 1 for bugs).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Input(_) => 2,
            _ => 1,
        }
    }
}

/// Adds the file name to an I/O failure so the message says which file could not be read.
pub trait IoContext<T> {
    fn with_file(self, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn with_file(self, path: &Path) -> Result<T> {
        self.map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::file(path, "no such file"),
            std::io::ErrorKind::PermissionDenied => Error::file(path, "permission denied"),
            _ => Error::file(path, format!("cannot read: {e}")),
        })
    }
}

/// Runs `f`, turning a panic inside it into `None` without the panic message reaching stderr:
/// for dependencies that panic on malformed input (the user then gets one readable error).
pub fn catch_quietly<R>(f: impl FnOnce() -> R) -> Option<R> {
    use std::cell::Cell;
    static HOOK: std::sync::Once = std::sync::Once::new();
    thread_local!(static QUIET: Cell<bool> = const { Cell::new(false) });
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info);
            }
        }));
    });
    let was = QUIET.with(|q| q.replace(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was));
    result.ok()
}
