//! Parsers of count and number flags, shared by the commands' clap definitions: a value outside
//! its range is refused at parse, naming the flag, before any model loads.

/// A count flag where 0 would ask for nothing (`--top-k 0`, `--causal-tokens 0`): refused at
/// parse, naming the flag, before any model loads.
pub fn at_least_one(s: &str) -> std::result::Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("0 asks for nothing; give at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// A number flag: parsed, then held to `admits` (described by `range`), so a value outside it is
/// refused at parse, naming the flag, before any model loads.
fn number_in(s: &str, admits: impl Fn(f64) -> bool, range: &str) -> std::result::Result<f64, String> {
    let x = s.parse::<f64>().map_err(|e| e.to_string())?;
    if admits(x) {
        Ok(x)
    } else {
        Err(format!("{x} is not {range}"))
    }
}

/// A share of something, 0 to 1 (`--retrieval-share`, `--shares`).
pub fn share(s: &str) -> std::result::Result<f64, String> {
    number_in(s, |x| (0.0..=1.0).contains(&x), "a share between 0 and 1")
}

/// A fraction strictly between 0 and 1 (`--epsilon`, `--collapse`).
pub fn open_fraction(s: &str) -> std::result::Result<f64, String> {
    number_in(s, |x| x > 0.0 && x < 1.0, "a number strictly between 0 and 1")
}

/// A finite number, 0 or more (`--temperature`, `--delta`, `--idle-exit`).
pub fn non_negative(s: &str) -> std::result::Result<f64, String> {
    number_in(s, |x| x.is_finite() && x >= 0.0, "a finite number ≥ 0")
}

/// A finite number above 0 (`--min-step`, `--false-alarms`).
pub fn positive(s: &str) -> std::result::Result<f64, String> {
    number_in(s, |x| x.is_finite() && x > 0.0, "a finite number above 0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_flags_are_held_to_their_range() {
        assert_eq!(share("1"), Ok(1.0));
        assert!(share("1.5").unwrap_err().contains("1.5 is not a share between 0 and 1"));
        assert!(open_fraction("0").is_err() && open_fraction("0.3") == Ok(0.3));
        assert!(non_negative("inf").is_err() && non_negative("NaN").is_err() && non_negative("0") == Ok(0.0));
        assert!(positive("0").is_err() && positive("-1").is_err() && positive("2") == Ok(2.0));
        assert!(share("many").unwrap_err().contains("invalid float"));
    }
}
