//! Ctrl-C and SIGTERM: the files of an unfinished command are removed (see `io::staging`), one
//! line says so, and the process exits with 130, leaving the output directory as it was.

use crate::io::staging::abandon_all;

/// Starts the thread that waits for SIGINT / SIGTERM.
pub fn install() {
    #[cfg(unix)]
    {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else { return };
        std::thread::spawn(move || {
            if let Some(signal) = signals.forever().next() {
                let name = if signal == SIGINT { "SIGINT" } else { "SIGTERM" };
                if abandon_all() {
                    eprintln!("error: interrupted ({name}) after the command's files were written; they are complete");
                } else {
                    eprintln!("error: interrupted ({name}); nothing of this command was kept, its output directory is as it was");
                }
                std::process::exit(130);
            }
        });
    }
}
