//! Command lines parsed with clap, a usage error as the one line every other error is.

use crate::error::{Error, Result};

/// Parses `argv` (without the program name) into `P`; a usage error, `--help` included, is one
/// line.
pub fn parse_from<P: clap::Parser, I: IntoIterator<Item = String>>(argv: I) -> Result<P> {
    P::try_parse_from(std::iter::once("sinkscope".to_string()).chain(argv)).map_err(|e| Error::input(one_line(&e.render().to_string())))
}

/// clap's usage error (message, usage block, a hint) as the one line every other error is.
pub fn one_line(rendered: &str) -> String {
    let (message, rest) = rendered.split_once("\n\nUsage:").unwrap_or((rendered, ""));
    // clap's hint to try --help is a second sentence of its own, not part of the one line.
    let message: Vec<&str> =
        message.trim_start_matches("error:").lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with("For more information")).collect();
    let usage = rest.lines().next().map(str::trim).filter(|u| !u.is_empty());
    match usage {
        Some(u) => format!("{}; usage: {u} (see --help)", message.join(" ")),
        None => message.join(" "),
    }
}
