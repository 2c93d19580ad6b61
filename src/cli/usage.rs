//! A clap usage error as the one line every other error is.

/// clap's usage error (message, usage block, a hint) as the one line every other error is.
pub fn one_line(rendered: &str) -> String {
    let (message, rest) = rendered.split_once("\n\nUsage:").unwrap_or((rendered, ""));
    let message: Vec<&str> = message.trim_start_matches("error:").lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let usage = rest.lines().next().map(str::trim).filter(|u| !u.is_empty());
    match usage {
        Some(u) => format!("{}; usage: {u} (see --help)", message.join(" ")),
        None => message.join(" "),
    }
}
