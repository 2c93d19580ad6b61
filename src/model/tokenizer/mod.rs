//! Text ↔ token ids for every model source: HF `tokenizer.json` (via the `tokenizers` crate), GGUF
//! embedded vocabularies (`gguf_vocab`), and llama2.c `tok*.bin` (`llama2c_vocab`); SentencePiece
//! BPE is implemented in `spm`.

pub mod gguf_vocab;
pub mod llama2c_vocab;
pub mod spm;

use std::path::Path;

use crate::error::{catch_quietly, Error, Result};
use crate::model::gguf::GgufFile;
use gguf_vocab::Embedded;
use spm::{SpmTokenizer, TOKEN_TYPE_CONTROL};

/// A model's tokenizer, whichever format it came from.
pub enum Tokenizer {
    /// A `tokenizers` pipeline (tokenizer.json, or a GGUF `gpt2` vocabulary rebuilt as one).
    Hf { inner: Box<tokenizers::Tokenizer>, kind: String, bos: Option<u32>, add_bos: bool, eos: Vec<u32> },
    /// SentencePiece-style BPE (GGUF `llama` vocabularies and llama2.c `tok*.bin`).
    Spm(Box<SpmTokenizer>),
}

impl Tokenizer {
    /// Loads `tokenizer.json`. BOS is added by its post-processor, if it has one.
    pub fn from_json_file(path: &Path) -> Result<Self> {
        let text = crate::io::regular::read_to_string(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::file(path, "no such file; an HF model directory needs tokenizer.json"),
            _ => Error::file(path, format!("cannot read ({e}); tokenizer.json must be UTF-8 JSON")),
        })?;
        // The tokenizers crate panics on some malformed JSON (found by fuzzing): check the syntax
        // first, and turn any panic that is left into this error.
        let invalid = |why: String| Error::file(path, format!("not a valid tokenizer.json ({why})"));
        serde_json::from_str::<serde_json::Value>(&text).map_err(|e| invalid(e.to_string()))?;
        let inner = catch_quietly(|| text.parse::<tokenizers::Tokenizer>())
            .ok_or_else(|| invalid("the tokenizers library could not read its structure".into()))?
            .map_err(|e| invalid(e.to_string()))?;
        // Encoding once here finds an inconsistent post-processor at load time, naming the file.
        if catch_quietly(|| inner.encode("a", true)).is_none() {
            return Err(invalid("its post-processor or added tokens are inconsistent: encoding panics".into()));
        }
        let eos = ["</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>"].iter().filter_map(|t| inner.token_to_id(t)).collect();
        let bos = ["<s>", "<|begin_of_text|>", "<|endoftext|>"].iter().find_map(|t| inner.token_to_id(t));
        Ok(Tokenizer::Hf { inner: Box::new(inner), kind: "tokenizer.json".into(), bos, add_bos: false, eos })
    }

    /// Builds the tokenizer embedded in a GGUF file (`tokenizer.ggml.*`).
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self> {
        Ok(match gguf_vocab::read(gguf)? {
            Embedded::Spm(spm) => Tokenizer::Spm(spm),
            Embedded::ByteLevel { inner, kind, bos, add_bos, eos } => Tokenizer::Hf { inner, kind, bos, add_bos, eos },
        })
    }

    /// Reads a llama2.c `tok*.bin`: i32 max_token_length, then per token f32 score, i32 len, bytes.
    /// Pieces use ' ' where SentencePiece uses '▁', and ids 1/2 are "\n<s>\n"/"\n</s>\n".
    pub fn from_llama2c(path: &Path, vocab_size: usize) -> Result<Self> {
        Ok(Tokenizer::Spm(Box::new(llama2c_vocab::read(path, vocab_size)?)))
    }

    /// The first `max_tokens` ids of [`Tokenizer::encode`]`(text)` without tokenizing all of a long
    /// text (a 4 MB book costs ~0.4 GB and ~2 s to tokenize whole): successively doubled prefixes,
    /// each cut after a line break (else after whitespace), until one yields `PREFIX_MARGIN` ids
    /// more than wanted; those past `max_tokens` are dropped, so the ids kept lie far from the cut,
    /// where no tokenizer's merges reach.
    pub fn encode_prefix(&self, text: &str, max_tokens: usize) -> Result<Vec<u32>> {
        const PREFIX_MARGIN: usize = 256;
        // Rarely fewer than ~2 bytes of English text per token; 8 leaves room for any language.
        let mut len = max_tokens.saturating_add(PREFIX_MARGIN).saturating_mul(8).max(1 << 16);
        loop {
            if len >= text.len() {
                let mut ids = self.encode(text)?;
                ids.truncate(max_tokens);
                return Ok(ids);
            }
            let mut ids = self.encode(&text[..prefix_cut(text, len)])?;
            if ids.len() >= max_tokens.saturating_add(PREFIX_MARGIN) {
                ids.truncate(max_tokens);
                return Ok(ids);
            }
            len = len.saturating_mul(2);
        }
    }

    /// Token ids for `text`, with BOS prepended when the tokenizer's own settings say so.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match self {
            Tokenizer::Hf { inner, bos, add_bos, .. } => {
                // A malformed tokenizer.json can make the tokenizers crate panic here (a template
                // naming a special token it does not define; found by fuzzing): an error instead.
                let enc = catch_quietly(|| inner.encode(text, true))
                    .ok_or_else(|| Error::input("the tokenizer failed on this text (its tokenizer.json is inconsistent: e.g. a post-processor naming an undefined special token)"))?
                    .map_err(|e| Error::Internal(format!("tokenizer failed: {e}")))?;
                let mut ids = enc.get_ids().to_vec();
                if let (true, Some(b)) = (*add_bos, *bos) {
                    if ids.first() != Some(&b) {
                        ids.insert(0, b);
                    }
                }
                Ok(ids)
            }
            Tokenizer::Spm(spm) => Ok(spm.encode(text)),
        }
    }

    /// Token ids for `text` without BOS or any other added special token.
    pub fn encode_plain(&self, text: &str) -> Result<Vec<u32>> {
        match self {
            Tokenizer::Hf { inner, .. } => {
                Ok(inner.encode(text, false).map_err(|e| Error::Internal(format!("tokenizer failed: {e}")))?.get_ids().to_vec())
            }
            Tokenizer::Spm(spm) => {
                let mut ids = spm.encode(text);
                if spm.add_bos && spm.bos.is_some() && !ids.is_empty() {
                    ids.remove(0);
                }
                Ok(ids)
            }
        }
    }

    /// Whether `id` is a control / special token (never produced from ordinary text).
    pub fn is_special(&self, id: u32) -> bool {
        match self {
            Tokenizer::Hf { inner, .. } => inner.get_added_tokens_decoder().get(&id).is_some_and(|t| t.special),
            Tokenizer::Spm(spm) => spm.types.get(id as usize).is_none_or(|&t| t == TOKEN_TYPE_CONTROL) || Some(id) == spm.unk,
        }
    }

    pub fn decode(&self, ids: &[u32]) -> String {
        match self {
            Tokenizer::Hf { inner, .. } => inner.decode(ids, true).unwrap_or_default(),
            Tokenizer::Spm(spm) => spm.decode(ids),
        }
    }

    /// The vocabulary entry for one id, for labels (e.g. "Ġthe", "<s>").
    pub fn token_str(&self, id: u32) -> String {
        match self {
            Tokenizer::Hf { inner, .. } => inner.id_to_token(id).unwrap_or_else(|| format!("<{id}>")),
            Tokenizer::Spm(spm) => spm.tokens.get(id as usize).cloned().unwrap_or_else(|| format!("<{id}>")),
        }
    }

    pub fn bos(&self) -> Option<u32> {
        match self {
            Tokenizer::Hf { bos, .. } => *bos,
            Tokenizer::Spm(spm) => spm.bos,
        }
    }

    /// Whether `encode` prepends BOS.
    pub fn adds_bos(&self) -> bool {
        match self {
            Tokenizer::Hf { .. } => {
                let probe = self.encode("a").unwrap_or_default();
                self.bos().is_some() && probe.first().copied() == self.bos()
            }
            Tokenizer::Spm(spm) => spm.add_bos && spm.bos.is_some(),
        }
    }

    pub fn eos(&self) -> &[u32] {
        match self {
            Tokenizer::Hf { eos, .. } => eos,
            Tokenizer::Spm(spm) => &spm.eos,
        }
    }

    pub fn kind(&self) -> &str {
        match self {
            Tokenizer::Hf { kind, .. } => kind,
            Tokenizer::Spm(spm) => spm.kind,
        }
    }

    pub fn vocab_size(&self) -> usize {
        match self {
            Tokenizer::Hf { inner, .. } => inner.get_vocab_size(true),
            Tokenizer::Spm(spm) => spm.tokens.len(),
        }
    }
}

/// Where to cut `text` at most `len` bytes in: after its last line break in the second half of
/// that, else after its last whitespace, else at a character boundary (never 0 when `len` > 0 and the text is non-empty).
fn prefix_cut(text: &str, len: usize) -> usize {
    let mut end = len.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let head = &text[..end];
    let after = |i: usize| i + head[i..].chars().next().map_or(0, char::len_utf8);
    // A line break only in the second half: one near the start of a long line would keep the prefix
    // from ever growing.
    let line_break = head.rfind('\n').filter(|&i| i >= end / 2);
    let cut = line_break.or_else(|| head.rfind(char::is_whitespace)).map_or(end, after);
    if cut == 0 {
        end
    } else {
        cut
    }
}
