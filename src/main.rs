//! The `sinkscope` binary: parse arguments, run the command, map errors to exit codes
//! (0 ok, 2 input error with one readable line, 1 internal error, 3 sink loss found by `watch`).

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    quiet_on_closed_pipe();
    let cli = match sinkscope::cli::Cli::try_parse() {
        Ok(mut cli) => {
            // Lossy: a path that is not UTF-8 is logged approximately, never a panic.
            cli.argv = std::env::args_os().skip(1).map(|a| a.to_string_lossy().into_owned()).collect();
            cli
        }
        Err(e) if !e.use_stderr() => {
            // --help and --version: their text, exit 0.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {}", sinkscope::cli::usage::one_line(&e.render().to_string()));
            return ExitCode::from(2);
        }
    };
    match sinkscope::cli::run(cli) {
        Ok(status) => ExitCode::from(status),
        Err(_) if sinkscope::io::staging::abandoning() => {
            // Ctrl-C: the signal handler is removing this command's files and exits with 130;
            // this thread's error (its staging directory vanished) is not the result to report.
            loop {
                std::thread::park();
            }
        }
        Err(e) => {
            sinkscope::io::staging::discard_created_dirs();
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// `sinkscope info --json | head -c1`: when the reader goes away, stop as other command-line tools
/// do (killed by SIGPIPE, no message) instead of panicking on the failed write.
fn quiet_on_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts; no handler
    // of this program is replaced (Rust's runtime sets it to "ignore").
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
