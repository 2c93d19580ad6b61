//! The cache policy's names on the command line: `--policy` and `--positions` values, with the
//! help each rule's own summary gives (the kv layer knows nothing of clap).

use clap::builder::PossibleValue;
use clap::ValueEnum;

use crate::kv::policy::{PolicyKind, PositionMode};

impl ValueEnum for PolicyKind {
    fn value_variants<'a>() -> &'a [Self] {
        &PolicyKind::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.name()).help(self.summary()))
    }
}

impl ValueEnum for PositionMode {
    fn value_variants<'a>() -> &'a [Self] {
        &PositionMode::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.name()).help(self.summary()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_parses_by_its_run_file_name() {
        for kind in PolicyKind::ALL {
            assert_eq!(PolicyKind::from_str(kind.name(), false), Ok(kind));
            assert_eq!(serde_json::to_string(&kind).unwrap(), format!("\"{}\"", kind.name()));
        }
        for mode in PositionMode::ALL {
            assert_eq!(PositionMode::from_str(mode.name(), false), Ok(mode));
            assert_eq!(serde_json::to_string(&mode).unwrap(), format!("\"{}\"", mode.name()));
        }
    }
}
