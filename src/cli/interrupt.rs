//! Ctrl-C and SIGTERM: the files of an unfinished command are removed (see `io::staging`), one
//! line says so — nothing kept, or what the command had finished (committed directories, parts a
//! rerun reuses) — and the process exits with 130.

use crate::io::staging::abandon_all;

/// "a/x.json", or "a/x.json and 4 more".
fn listed(kept: &[std::path::PathBuf]) -> String {
    match kept {
        [one] => one.display().to_string(),
        [first, rest @ ..] => format!("{} and {} more", first.display(), rest.len()),
        [] => String::new(),
    }
}

/// Starts the thread that waits for SIGINT / SIGTERM.
pub fn install() {
    #[cfg(unix)]
    {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else { return };
        std::thread::spawn(move || {
            if let Some(signal) = signals.forever().next() {
                let name = if signal == SIGINT { "SIGINT" } else { "SIGTERM" };
                let kept = abandon_all();
                if kept.is_empty() {
                    eprintln!("error: interrupted ({name}); nothing of this command was kept, its output directory is as it was");
                } else {
                    eprintln!(
                        "error: interrupted ({name}) once it had written {}; those are complete, nothing else of this command was kept",
                        listed(&kept)
                    );
                }
                std::process::exit(130);
            }
        });
    }
}
