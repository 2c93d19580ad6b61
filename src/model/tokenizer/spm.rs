//! SentencePiece-style BPE with scores and byte fallback (GGUF `llama` vocabularies and llama2.c),
//! implemented here: llama.cpp's `llm_tokenizer_spm`.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

/// SentencePiece's word-boundary marker.
pub const SPM_SPACE: char = '\u{2581}';

/// GGUF `tokenizer.ggml.token_type` values (llama.cpp `llama_token_type`).
pub const TOKEN_TYPE_CONTROL: i64 = 3;
pub const TOKEN_TYPE_USER_DEFINED: i64 = 4;
pub const TOKEN_TYPE_BYTE: i64 = 6;

/// "<0x0A>" → Some(10).
pub fn parse_byte_piece(piece: &str) -> Option<u8> {
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
    pub(crate) tokens: Vec<String>,
    pub(crate) scores: Vec<f32>,
    pub(crate) types: Vec<i64>,
    pub(crate) piece_to_id: HashMap<String, u32>,
    pub(crate) byte_ids: [Option<u32>; 256],
    pub(crate) bos: Option<u32>,
    pub(crate) eos: Vec<u32>,
    pub(crate) unk: Option<u32>,
    pub(crate) add_bos: bool,
    pub(crate) add_space_prefix: bool,
    pub(crate) kind: &'static str,
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
    pub fn new(
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
        for (i, s) in symbols.iter_mut().enumerate().take(n.saturating_sub(1)) {
            s.next = Some(i + 1);
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
        let tokens: Vec<String> =
            ["<unk>", "<s>", "</s>", "<0x41>", "<0xC3>", "<0xA9>", "▁", "a", "b", "ab", "▁ab", "▁a"].iter().map(|s| s.to_string()).collect();
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
