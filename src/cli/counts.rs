//! Parsers of count flags, shared by the commands' clap definitions.

/// A count flag where 0 would ask for nothing (`--top-k 0`, `--causal-tokens 0`): refused at
/// parse, naming the flag, before any model loads.
pub fn at_least_one(s: &str) -> std::result::Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("0 asks for nothing; give at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}
