//! What a model file's settings may hold: each numeric or boolean setting the decoder reads has a
//! kind (a count, a positive number, a flag, …) with its valid range, and a value outside it is
//! refused naming the key, the value and the range — before anything is computed from it. The
//! per-format tables (`gguf_config::GGUF_KEYS`, `hf::HF_FIELDS`) list the settings; this file says
//! what each kind admits.

use std::fmt;

use super::decoder::config::MAX_SIZE;

/// The kind of value one setting must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// An integer from 1 to [`MAX_SIZE`] (layers, heads, widths, a context length).
    Count,
    /// An integer from 0 to [`MAX_SIZE`] (0 meaning none: a window, rotary dims, shared experts).
    Size,
    /// A finite number above 0 (a RoPE base, an epsilon, a scale factor).
    Positive,
    /// A finite number, 0 or more (a soft-cap, where 0 means none).
    NonNegative,
    /// Any finite number (a multiplier, where 0 or 1 means none).
    Finite,
    /// A finite number above 0 and at most 1 (a share of dimensions).
    Fraction,
    /// `true` or `false`.
    Flag,
}

/// A setting's value as read from a file, as far as the rules care.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    Int(i128),
    Float(f64),
    Bool(bool),
    /// Anything else, described ("the string \"10000\"", "a list of 30 values").
    Other(String),
}

impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Seen::Int(v) => write!(f, "{v}"),
            Seen::Float(v) => write!(f, "{v}"),
            Seen::Bool(v) => write!(f, "{v}"),
            Seen::Other(what) => f.write_str(what),
        }
    }
}

impl Expect {
    /// What the kind admits, in words.
    pub fn describe(self) -> String {
        match self {
            Expect::Count => format!("a whole number from 1 to {MAX_SIZE}"),
            Expect::Size => format!("a whole number from 0 to {MAX_SIZE}"),
            Expect::Positive => "a finite number above 0".into(),
            Expect::NonNegative => "a finite number, 0 or more".into(),
            Expect::Finite => "a finite number".into(),
            Expect::Fraction => "a number above 0 and at most 1".into(),
            Expect::Flag => "true or false".into(),
        }
    }

    pub fn admits(self, seen: &Seen) -> bool {
        let number = match *seen {
            Seen::Int(v) => Some(v as f64),
            Seen::Float(v) => Some(v),
            Seen::Bool(_) | Seen::Other(_) => None,
        };
        let size = |lo: i128| matches!(*seen, Seen::Int(v) if (lo..=MAX_SIZE as i128).contains(&v));
        match self {
            Expect::Count => size(1),
            Expect::Size => size(0),
            Expect::Positive => number.is_some_and(|x| x.is_finite() && x > 0.0),
            Expect::NonNegative => number.is_some_and(|x| x.is_finite() && x >= 0.0),
            Expect::Finite => number.is_some_and(f64::is_finite),
            Expect::Fraction => number.is_some_and(|x| x > 0.0 && x <= 1.0),
            Expect::Flag => matches!(seen, Seen::Bool(_)),
        }
    }

    /// `Err` with the refusal's words ("llama.rope.freq_base = inf is not a finite number above
    /// 0") when `seen` is not of this kind.
    pub fn check(self, key: &str, seen: &Seen) -> Result<(), String> {
        if self.admits(seen) {
            Ok(())
        } else {
            Err(format!("{key} = {seen} is not {}", self.describe()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_admits_its_range_only() {
        let cases = [
            (Expect::Count, Seen::Int(1), true),
            (Expect::Count, Seen::Int(0), false),
            (Expect::Count, Seen::Int(MAX_SIZE as i128 + 1), false),
            (Expect::Count, Seen::Float(8.0), false),
            (Expect::Size, Seen::Int(0), true),
            (Expect::Size, Seen::Int(-1), false),
            (Expect::Positive, Seen::Float(1e-6), true),
            (Expect::Positive, Seen::Int(10_000), true),
            (Expect::Positive, Seen::Float(f64::INFINITY), false),
            (Expect::Positive, Seen::Float(0.0), false),
            (Expect::Positive, Seen::Other("the string \"10000\"".into()), false),
            (Expect::NonNegative, Seen::Float(0.0), true),
            (Expect::NonNegative, Seen::Float(-1.0), false),
            (Expect::Finite, Seen::Float(f64::NAN), false),
            (Expect::Finite, Seen::Float(-3.0), true),
            (Expect::Fraction, Seen::Float(0.25), true),
            (Expect::Fraction, Seen::Float(1.5), false),
            (Expect::Flag, Seen::Bool(false), true),
            (Expect::Flag, Seen::Int(1), false),
        ];
        for (kind, seen, admitted) in cases {
            assert_eq!(kind.admits(&seen), admitted, "{kind:?} {seen}");
        }
        let e = Expect::Positive.check("llama.rope.freq_base", &Seen::Float(f64::INFINITY)).unwrap_err();
        assert_eq!(e, "llama.rope.freq_base = inf is not a finite number above 0");
    }
}
