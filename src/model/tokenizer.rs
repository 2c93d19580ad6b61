//! Text ↔ token ids for every model source: HF `tokenizer.json` (via the `tokenizers` crate), GGUF
//! embedded vocabularies (`gpt2` byte-level BPE rebuilt as a `tokenizers` pipeline; `llama`
//! SentencePiece-style BPE with scores and byte fallback, implemented here), and llama2.c `tok*.bin`.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::path::Path;

use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::Split;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, SplitDelimiterBehavior};

use super::gguf::{GgufFile, Value};
use crate::error::{Error, IoContext, Result};

/// SentencePiece's word-boundary marker.
const SPM_SPACE: char = '\u{2581}';

/// GGUF `tokenizer.ggml.token_type` values (llama.cpp `llama_token_type`).
const TOKEN_TYPE_CONTROL: i64 = 3;
const TOKEN_TYPE_USER_DEFINED: i64 = 4;
const TOKEN_TYPE_BYTE: i64 = 6;

/// GPT-2's pre-tokenizer regex and the llama-3 / qwen2 variants, as llama.cpp names them by
/// `tokenizer.ggml.pre`.
const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A model's tokenizer, whichever format it came from.
pub enum Tokenizer {
    /// A `tokenizers` pipeline (tokenizer.json, or a GGUF `gpt2` vocabulary rebuilt as one).
    Hf { inner: Box<tokenizers::Tokenizer>, kind: String, bos: Option<u32>, add_bos: bool, eos: Vec<u32> },
    /// SentencePiece-style BPE (GGUF `llama` vocabularies and llama2.c `tok*.bin`).
    Spm(SpmTokenizer),
}

impl Tokenizer {
    /// Loads `tokenizer.json`. BOS is added by its post-processor, if it has one.
    pub fn from_json_file(path: &Path) -> Result<Self> {
        let inner = tokenizers::Tokenizer::from_file(path).map_err(|e| {
            if !path.exists() {
                Error::file(path, "no such file; an HF model directory needs tokenizer.json")
            } else {
                Error::file(path, format!("not a valid tokenizer.json ({e})"))
            }
        })?;
        let eos = ["</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>"]
            .iter()
            .filter_map(|t| inner.token_to_id(t))
            .collect();
        let bos = ["<s>", "<|begin_of_text|>", "<|endoftext|>"].iter().find_map(|t| inner.token_to_id(t));
        Ok(Tokenizer::Hf { inner: Box::new(inner), kind: "tokenizer.json".into(), bos, add_bos: false, eos })
    }

    /// Builds the tokenizer embedded in a GGUF file (`tokenizer.ggml.*`).
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self> {
        let bad = |what: &str| Error::file(&gguf.path, format!("embedded tokenizer: {what}. Pass --tokenizer tokenizer.json to use another one."));
        let model = gguf.get("tokenizer.ggml.model").and_then(Value::as_str).ok_or_else(|| bad("tokenizer.ggml.model is missing"))?;
        let tokens: Vec<String> = gguf
            .get("tokenizer.ggml.tokens")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("tokenizer.ggml.tokens is missing"))?
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<_>>()
            .ok_or_else(|| bad("tokenizer.ggml.tokens holds non-strings"))?;
        let types: Vec<i64> = match gguf.get("tokenizer.ggml.token_type").and_then(Value::as_array) {
            Some(a) => a.iter().map(|v| v.as_f64().map(|x| x as i64).unwrap_or(1)).collect(),
            None => vec![1; tokens.len()],
        };
        if types.len() != tokens.len() {
            return Err(bad("token_type and tokens differ in length"));
        }
        let n_tokens = tokens.len();
        let id = |key: &str| gguf.get(key).and_then(Value::as_u64).and_then(|v| u32::try_from(v).ok()).filter(|&v| (v as usize) < n_tokens);
        let bos = id("tokenizer.ggml.bos_token_id");
        let eos: Vec<u32> = id("tokenizer.ggml.eos_token_id").into_iter().chain(id("tokenizer.ggml.eot_token_id")).collect();
        let flag = |key: &str| gguf.get(key).and_then(Value::as_bool);
        match model {
            "llama" => {
                let scores: Vec<f32> = match gguf.get("tokenizer.ggml.scores").and_then(Value::as_array) {
                    Some(a) => a.iter().map(|v| v.as_f64().unwrap_or(0.0) as f32).collect(),
                    None => return Err(bad("a llama vocabulary needs tokenizer.ggml.scores")),
                };
                if scores.len() != tokens.len() {
                    return Err(bad("scores and tokens differ in length"));
                }
                Ok(Tokenizer::Spm(SpmTokenizer::new(
                    tokens,
                    scores,
                    types,
                    bos,
                    eos,
                    id("tokenizer.ggml.unknown_token_id"),
                    flag("tokenizer.ggml.add_bos_token").unwrap_or(true),
                    flag("tokenizer.ggml.add_space_prefix").unwrap_or(true),
                    "gguf llama (SentencePiece BPE)",
                )))
            }
            "gpt2" => {
                let merges = gguf
                    .get("tokenizer.ggml.merges")
                    .and_then(Value::as_array)
                    .ok_or_else(|| bad("a gpt2 vocabulary needs tokenizer.ggml.merges"))?;
                let merges: Vec<(String, String)> = merges
                    .iter()
                    .map(|m| m.as_str().and_then(|s| s.split_once(' ')).map(|(a, b)| (a.to_owned(), b.to_owned())))
                    .collect::<Option<_>>()
                    .ok_or_else(|| bad("a merge is not of the form \"a b\""))?;
                let pre = gguf.get("tokenizer.ggml.pre").and_then(Value::as_str).unwrap_or("default");
                let vocab: Vocab = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
                let bpe = BPE::builder()
                    .vocab_and_merges(vocab, merges)
                    .build()
                    .map_err(|e| bad(&format!("cannot build BPE ({e})")))?;
                let mut inner = tokenizers::Tokenizer::new(bpe);
                inner.with_pre_tokenizer(Some(byte_level_pre_tokenizer(pre).ok_or_else(|| {
                    bad(&format!("pre-tokenizer '{pre}' is not supported (known: default, gpt2, smollm, llama3, llama-bpe, qwen2)"))
                })?));
                inner.with_decoder(Some(ByteLevel::default()));
                let specials: Vec<AddedToken> = tokens
                    .iter()
                    .zip(&types)
                    .filter(|(_, &t)| t == TOKEN_TYPE_CONTROL || t == TOKEN_TYPE_USER_DEFINED)
                    .map(|(tok, _)| AddedToken::from(tok.clone(), true))
                    .collect();
                inner.add_special_tokens(specials).map_err(|e| bad(&format!("cannot add special tokens ({e})")))?;
                Ok(Tokenizer::Hf {
                    inner: Box::new(inner),
                    kind: format!("gguf gpt2 (byte-level BPE, pre={pre})"),
                    bos,
                    add_bos: flag("tokenizer.ggml.add_bos_token").unwrap_or(false),
                    eos,
                })
            }
            other => Err(bad(&format!("tokenizer model '{other}' is not supported (known: llama, gpt2)"))),
        }
    }

    /// Reads a llama2.c `tok*.bin`: i32 max_token_length, then per token f32 score, i32 len, bytes.
    /// Pieces use ' ' where SentencePiece uses '▁', and ids 1/2 are "\n<s>\n"/"\n</s>\n".
    pub fn from_llama2c(path: &Path, vocab_size: usize) -> Result<Self> {
        let bytes = std::fs::read(path).with_file(path)?;
        let bad = |what: String| Error::file(path, format!("not a llama2.c tokenizer file: {what}. Pass the tok*.bin that belongs to the model."));
        let mut pos = 4usize;
        if bytes.len() < 4 {
            return Err(bad("too short".into()));
        }
        let mut tokens = Vec::with_capacity(vocab_size);
        let mut scores = Vec::with_capacity(vocab_size);
        let mut types = Vec::with_capacity(vocab_size);
        for i in 0..vocab_size {
            let header = bytes.get(pos..pos + 8).ok_or_else(|| bad(format!("truncated at token {i} of {vocab_size}")))?;
            let score = f32::from_le_bytes([header[0], header[1], header[2], header[3]]);
            let len = i32::from_le_bytes([header[4], header[5], header[6], header[7]]);
            let len = usize::try_from(len).map_err(|_| bad(format!("token {i} has negative length")))?;
            pos += 8;
            let raw = bytes.get(pos..pos + len).ok_or_else(|| bad(format!("truncated at token {i} of {vocab_size}")))?;
            pos += len;
            let text = String::from_utf8_lossy(raw);
            let (piece, ty) = match i {
                0 => ("<unk>".to_owned(), 2),
                1 => ("<s>".to_owned(), TOKEN_TYPE_CONTROL),
                2 => ("</s>".to_owned(), TOKEN_TYPE_CONTROL),
                _ if parse_byte_piece(&text).is_some() => (text.into_owned(), TOKEN_TYPE_BYTE),
                _ => (text.replace(' ', &SPM_SPACE.to_string()), 1),
            };
            tokens.push(piece);
            scores.push(score);
            types.push(ty);
        }
        Ok(Tokenizer::Spm(SpmTokenizer::new(tokens, scores, types, Some(1), vec![2], Some(0), true, true, "llama2.c tok.bin (SentencePiece BPE)")))
    }

    /// Token ids for `text`, with BOS prepended when the tokenizer's own settings say so.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match self {
            Tokenizer::Hf { inner, bos, add_bos, .. } => {
                let enc = inner.encode(text, true).map_err(|e| Error::Internal(format!("tokenizer failed: {e}")))?;
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
            Tokenizer::Hf { inner, .. } => Ok(inner
                .encode(text, false)
                .map_err(|e| Error::Internal(format!("tokenizer failed: {e}")))?
                .get_ids()
                .to_vec()),
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
            Tokenizer::Spm(spm) => {
                spm.types.get(id as usize).is_none_or(|&t| t == TOKEN_TYPE_CONTROL) || Some(id) == spm.unk
            }
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

/// llama.cpp's pre-tokenizers by `tokenizer.ggml.pre`, expressed as a `tokenizers` pipeline.
fn byte_level_pre_tokenizer(pre: &str) -> Option<PreTokenizerWrapper> {
    let byte_level = ByteLevel::new(false, true, true);
    let regex_split = |re: &str| -> Option<PreTokenizerWrapper> {
        let split = Split::new(tokenizers::pre_tokenizers::split::SplitPattern::Regex(re.into()), SplitDelimiterBehavior::Isolated, false).ok()?;
        Some(PreTokenizerWrapper::Sequence(Sequence::new(vec![split.into(), ByteLevel::new(false, true, false).into()])))
    };
    match pre {
        "default" | "gpt2" | "gpt-2" => Some(byte_level.into()),
        // SmolLM2 (and llama.cpp's `smollm`): each digit on its own before GPT-2's split.
        "smollm" => Some(PreTokenizerWrapper::Sequence(Sequence::new(vec![Digits::new(true).into(), byte_level.into()]))),
        "llama3" | "llama-bpe" | "llama-v3" => regex_split(LLAMA3_REGEX),
        "qwen2" => regex_split(QWEN2_REGEX),
        _ => None,
    }
}

/// "<0x0A>" → Some(10).
fn parse_byte_piece(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// SentencePiece-style BPE: start from characters, repeatedly merge the adjacent pair whose merged
/// piece is in the vocabulary with the highest score (leftmost on ties), then map characters that
/// no piece covers to their UTF-8 byte tokens. This is llama.cpp's `llm_tokenizer_spm` and
/// llama2.c's `encode`.
pub struct SpmTokenizer {
    tokens: Vec<String>,
    scores: Vec<f32>,
    types: Vec<i64>,
    piece_to_id: HashMap<String, u32>,
    byte_ids: [Option<u32>; 256],
    bos: Option<u32>,
    eos: Vec<u32>,
    unk: Option<u32>,
    add_bos: bool,
    add_space_prefix: bool,
    kind: &'static str,
}

/// A candidate merge of symbols `left` and `right`, ordered best-first for a max-heap.
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score.total_cmp(&other.score).then_with(|| other.left.cmp(&self.left))
    }
}

/// One symbol of the working sequence: a byte range of the normalized text, linked to neighbours.
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

impl SpmTokenizer {
    #[allow(clippy::too_many_arguments)]
    fn new(
        tokens: Vec<String>,
        scores: Vec<f32>,
        types: Vec<i64>,
        bos: Option<u32>,
        eos: Vec<u32>,
        unk: Option<u32>,
        add_bos: bool,
        add_space_prefix: bool,
        kind: &'static str,
    ) -> Self {
        let mut byte_ids = [None; 256];
        let mut piece_to_id = HashMap::with_capacity(tokens.len());
        for (i, (tok, &ty)) in tokens.iter().zip(&types).enumerate() {
            if let Some(b) = parse_byte_piece(tok).filter(|_| ty == TOKEN_TYPE_BYTE) {
                byte_ids[b as usize] = Some(i as u32);
            } else if ty != TOKEN_TYPE_CONTROL {
                piece_to_id.entry(tok.clone()).or_insert(i as u32);
            }
        }
        SpmTokenizer { tokens, scores, types, piece_to_id, byte_ids, bos, eos, unk, add_bos, add_space_prefix, kind }
    }

    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::new();
        if self.add_bos {
            ids.extend(self.bos);
        }
        if text.is_empty() {
            return ids;
        }
        let mut normalized = String::with_capacity(text.len() + 3);
        if self.add_space_prefix {
            normalized.push(SPM_SPACE);
        }
        for c in text.chars() {
            normalized.push(if c == ' ' { SPM_SPACE } else { c });
        }
        let mut symbols: Vec<Symbol> = normalized
            .char_indices()
            .enumerate()
            .map(|(i, (start, c))| Symbol { start, len: c.len_utf8(), prev: i.checked_sub(1), next: None })
            .collect();
        let n = symbols.len();
        for i in 0..n.saturating_sub(1) {
            symbols[i].next = Some(i + 1);
        }
        let mut heap = BinaryHeap::new();
        for i in 1..n {
            self.push_bigram(&normalized, &symbols, i - 1, i, &mut heap);
        }
        while let Some(bigram) = heap.pop() {
            let (l, r) = (bigram.left, bigram.right);
            // Skip stale entries: one side already merged away or grown since this was queued.
            if symbols[l].len == 0 || symbols[r].len == 0 || symbols[l].len + symbols[r].len != bigram.len {
                continue;
            }
            symbols[l].len += symbols[r].len;
            symbols[r].len = 0;
            symbols[l].next = symbols[r].next;
            if let Some(nx) = symbols[r].next {
                symbols[nx].prev = Some(l);
            }
            if let Some(pv) = symbols[l].prev {
                self.push_bigram(&normalized, &symbols, pv, l, &mut heap);
            }
            if let Some(nx) = symbols[l].next {
                self.push_bigram(&normalized, &symbols, l, nx, &mut heap);
            }
        }
        let mut cur = if n > 0 { Some(0) } else { None };
        while let Some(i) = cur {
            let s = symbols[i];
            let piece = &normalized[s.start..s.start + s.len];
            match self.piece_to_id.get(piece) {
                Some(&id) => ids.push(id),
                None => {
                    for b in piece.bytes() {
                        if let Some(id) = self.byte_ids[b as usize].or(self.unk) {
                            ids.push(id);
                        }
                    }
                }
            }
            cur = s.next;
        }
        ids
    }

    fn push_bigram(&self, text: &str, symbols: &[Symbol], left: usize, right: usize, heap: &mut BinaryHeap<Bigram>) {
        let start = symbols[left].start;
        let len = symbols[left].len + symbols[right].len;
        if let Some(&id) = self.piece_to_id.get(&text[start..start + len]) {
            heap.push(Bigram { score: self.scores[id as usize], left, right, len });
        }
    }

    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        let mut at_start = true;
        for &id in ids {
            let Some(tok) = self.tokens.get(id as usize) else { continue };
            let ty = self.types[id as usize];
            if ty == TOKEN_TYPE_CONTROL || Some(id) == self.unk && tok.starts_with('<') {
                continue;
            }
            if ty == TOKEN_TYPE_BYTE {
                if let Some(b) = parse_byte_piece(tok) {
                    bytes.push(b);
                    at_start = false;
                    continue;
                }
            }
            let mut piece = tok.replace(SPM_SPACE, " ");
            // SentencePiece drops the dummy-prefix space of the first word.
            if at_start && self.add_space_prefix && piece.starts_with(' ') {
                piece.remove(0);
            }
            at_start = false;
            bytes.extend_from_slice(piece.as_bytes());
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toy() -> SpmTokenizer {
        // ids: 0 unk, 1 <s>, 2 </s>, 3..=5 bytes, then pieces with scores.
        let tokens: Vec<String> = ["<unk>", "<s>", "</s>", "<0x41>", "<0xC3>", "<0xA9>", "▁", "a", "b", "ab", "▁ab", "▁a"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let scores = vec![0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -0.5, -0.1, -5.0];
        let types = vec![2, 3, 3, 6, 6, 6, 1, 1, 1, 1, 1, 1];
        SpmTokenizer::new(tokens, scores, types, Some(1), vec![2], Some(0), true, true, "toy")
    }

    #[test]
    fn spm_merges_by_score_and_falls_back_to_bytes() {
        let t = toy();
        // "ab" merges first (score -0.5 > -5.0 for "▁a"), then "▁"+"ab" → "▁ab".
        assert_eq!(t.encode("ab"), vec![1, 10]);
        // 'é' is not a piece: its two UTF-8 bytes are emitted; 'A' too.
        assert_eq!(t.encode("é"), vec![1, 6, 4, 5]);
        assert_eq!(t.encode(""), vec![1]);
        assert_eq!(t.decode(&[1, 10, 6, 4, 5]), "ab é");
    }

    #[test]
    fn byte_piece_parsing() {
        assert_eq!(parse_byte_piece("<0x0A>"), Some(10));
        assert_eq!(parse_byte_piece("<0x0A"), None);
        assert_eq!(parse_byte_piece("<0xZZ>"), None);
    }
}
