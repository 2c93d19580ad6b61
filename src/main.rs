//! The `sinkscope` binary: parse arguments, run the command, map errors to exit codes
//! (0 ok, 2 input error with one readable line, 1 internal error, 3 sink loss found by `watch`).

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = sinkscope::cli::Cli::parse();
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
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
