//! Probes: the token sequences `analyze` runs (natural text, "\n"-prefixed text, random tokens, one
//! token repeated, with or without BOS), defined in TOML (`probes/default.toml` is built in) and
//! turned into token ids with the model's tokenizer.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::tokenizer::Tokenizer;

const DEFAULT_SET: &str = include_str!("../probes/default.toml");
/// Texts the built-in set refers to, so the binary works from any directory.
const BUILTIN_TEXTS: [(&str, &str); 2] =
    [("texts/demo.txt", include_str!("../probes/texts/demo.txt")), ("texts/tinystories.txt", include_str!("../probes/texts/tinystories.txt"))];

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BosMode {
    #[default]
    Model,
    Always,
    Never,
    Flip,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ProbeKind {
    Text {
        file: PathBuf,
        #[serde(default)]
        start_char: usize,
    },
    NewlinePrefix {
        file: PathBuf,
        #[serde(default)]
        start_char: usize,
        #[serde(default = "four")]
        replace: usize,
    },
    Random {
        seed: u64,
    },
    Repeat {
        word: String,
    },
}

fn four() -> usize {
    4
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeSpec {
    pub name: String,
    #[serde(flatten)]
    pub kind: ProbeKind,
    pub tokens: usize,
    #[serde(default)]
    pub bos: BosMode,
}

/// The causal sweep's text and key positions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AblationSpec {
    pub file: PathBuf,
    #[serde(default)]
    pub start_char: usize,
    pub tokens: usize,
    pub keys: Vec<usize>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ProbeSet {
    #[serde(rename = "probe", default)]
    pub probes: Vec<ProbeSpec>,
    pub ablation: Option<AblationSpec>,
    /// Where relative `file`s are looked up; `None` for the built-in set.
    #[serde(skip)]
    dir: Option<PathBuf>,
}

/// One probe ready to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BuiltProbe {
    pub name: String,
    /// "text", "newline_prefix", "random", "repeat", or "file" for `analyze -f`.
    pub kind: String,
    pub ids: Vec<u32>,
    pub bos: bool,
    /// Positions whose tokens were replaced (newline_prefix).
    pub replaced: Vec<usize>,
}

/// A probe of a set left out for a tokenizer, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SkippedProbe {
    pub name: String,
    pub why: String,
}

impl ProbeSet {
    /// `default` (built in) or a path to a TOML file.
    pub fn load(name: &str) -> Result<Self> {
        if name == "default" {
            let mut set: ProbeSet = toml::from_str(DEFAULT_SET).map_err(|e| Error::Internal(format!("built-in probe set: {e}")))?;
            set.dir = None;
            return Ok(set);
        }
        let path = Path::new(name);
        let text = crate::io::regular::read_to_string(path)
            .map_err(|e| Error::file(path, format!("cannot read the probe set ({e}); use 'default' or a TOML file")))?;
        let mut set: ProbeSet =
            toml::from_str(&text).map_err(|e| Error::file(path, format!("is not a valid probe set: {}", e.to_string().replace('\n', " "))))?;
        if set.probes.is_empty() {
            return Err(Error::file(path, "defines no [[probe]]"));
        }
        set.dir = Some(path.parent().unwrap_or(Path::new(".")).to_path_buf());
        Ok(set)
    }

    fn read(&self, file: &Path) -> Result<String> {
        match &self.dir {
            None => BUILTIN_TEXTS
                .iter()
                .find(|(name, _)| Path::new(name) == file)
                .map(|(_, text)| text.to_string())
                .ok_or_else(|| Error::Internal(format!("built-in probe text {} missing", file.display()))),
            Some(dir) => crate::io::text::read_text_file(&dir.join(file)),
        }
    }

    /// The probes this tokenizer can take (see [`ProbeSet::skipped`] for the rest).
    pub fn build(&self, tok: &Tokenizer) -> Result<Vec<BuiltProbe>> {
        self.probes.iter().filter(|p| Self::skip_reason(p, tok).is_none()).map(|p| self.build_one(p, tok)).collect()
    }

    /// The probes [`ProbeSet::build`] leaves out for this tokenizer, and why: one that flips BOS
    /// where the tokenizer has none, so that nothing can be flipped (a BOS asked for outright
    /// stays an error).
    pub fn skipped(&self, tok: &Tokenizer) -> Vec<SkippedProbe> {
        self.probes.iter().filter_map(|p| Some(SkippedProbe { name: p.name.clone(), why: Self::skip_reason(p, tok)?.into() })).collect()
    }

    fn skip_reason(p: &ProbeSpec, tok: &Tokenizer) -> Option<&'static str> {
        (p.bos == BosMode::Flip && tok.bos().is_none()).then_some("it flips BOS, and this tokenizer has no BOS token")
    }

    /// The ablation text's token ids (with BOS as the model's tokenizer adds it).
    pub fn build_ablation(&self, tok: &Tokenizer) -> Result<Option<(Vec<u32>, Vec<usize>)>> {
        let Some(a) = &self.ablation else { return Ok(None) };
        let text = self.read(&a.file)?;
        let ids = take_tokens(tok, &text, a.start_char, a.tokens, tok.adds_bos(), "ablation")?;
        Ok(Some((ids, a.keys.clone())))
    }

    fn build_one(&self, p: &ProbeSpec, tok: &Tokenizer) -> Result<BuiltProbe> {
        if p.tokens < 2 {
            return Err(Error::input(format!("probe {}: tokens must be at least 2", p.name)));
        }
        let bos = match p.bos {
            BosMode::Model => tok.adds_bos(),
            BosMode::Always => true,
            BosMode::Never => false,
            BosMode::Flip => !tok.adds_bos(),
        };
        if bos && tok.bos().is_none() {
            return Err(Error::input(format!("probe {} asks for BOS but this tokenizer has none", p.name)));
        }
        let mut replaced = Vec::new();
        let (kind, ids) = match &p.kind {
            ProbeKind::Text { file, start_char } => ("text", take_tokens(tok, &self.read(file)?, *start_char, p.tokens, bos, &p.name)?),
            ProbeKind::NewlinePrefix { file, start_char, replace } => {
                let mut ids = take_tokens(tok, &self.read(file)?, *start_char, p.tokens, bos, &p.name)?;
                let newline = *tok.encode_plain("\n")?.last().ok_or_else(|| Error::input("the tokenizer has no token for \"\\n\""))?;
                let start = bos as usize;
                for pos in start..(start + replace).min(ids.len()) {
                    ids[pos] = newline;
                    replaced.push(pos);
                }
                ("newline_prefix", ids)
            }
            ProbeKind::Random { seed } => {
                let eligible: Vec<u32> = (0..tok.vocab_size() as u32).filter(|&id| !tok.is_special(id)).collect();
                if eligible.is_empty() {
                    return Err(Error::input(format!("probe {}: the tokenizer has no ordinary tokens to draw from", p.name)));
                }
                let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).max(1);
                let mut ids: Vec<u32> = bos_prefix(tok, bos);
                while ids.len() < p.tokens {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    ids.push(eligible[(state % eligible.len() as u64) as usize]);
                }
                ("random", ids)
            }
            ProbeKind::Repeat { word } => {
                let id = [format!(" {word}"), word.clone()]
                    .iter()
                    .find_map(|w| match tok.encode_plain(w).ok()?.as_slice() {
                        [one] => Some(*one),
                        _ => None,
                    })
                    .ok_or_else(|| Error::input(format!("probe {}: '{word}' is not a single token for this tokenizer", p.name)))?;
                let mut ids = bos_prefix(tok, bos);
                ids.resize(p.tokens, id);
                ("repeat", ids)
            }
        };
        Ok(BuiltProbe { name: p.name.clone(), kind: kind.into(), ids, bos, replaced })
    }
}

fn bos_prefix(tok: &Tokenizer, bos: bool) -> Vec<u32> {
    if bos {
        tok.bos().into_iter().collect()
    } else {
        Vec::new()
    }
}

/// The first `n` tokens of `text[start_char..]`, with BOS first when `bos`.
fn take_tokens(tok: &Tokenizer, text: &str, start_char: usize, n: usize, bos: bool, name: &str) -> Result<Vec<u32>> {
    let mut ids = bos_prefix(tok, bos);
    ids.extend(tok.encode_plain(crate::io::text::from_char(text, start_char).unwrap_or(""))?);
    if ids.len() < n {
        return Err(Error::input(format!("probe {name}: the text gives only {} tokens, fewer than the {n} asked for", ids.len())));
    }
    ids.truncate(n);
    Ok(ids)
}
