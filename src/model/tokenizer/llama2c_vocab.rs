//! llama2.c's `tok*.bin`: per token a score and its bytes, read into an [`SpmTokenizer`].

use std::path::Path;

use super::spm::{parse_byte_piece, SpmTokenizer, SPM_SPACE, TOKEN_TYPE_BYTE, TOKEN_TYPE_CONTROL};
use crate::error::{Error, IoContext, Result};

/// Reads a llama2.c `tok*.bin`: i32 max_token_length, then per token f32 score, i32 len, bytes.
/// Pieces use ' ' where SentencePiece uses '▁', and ids 1/2 are "\n<s>\n"/"\n</s>\n".
pub fn read(path: &Path, vocab_size: usize) -> Result<SpmTokenizer> {
    let bytes = crate::io::regular::read(path).with_file(path)?;
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
    Ok(SpmTokenizer::new(tokens, scores, types, Some(1), vec![2], Some(0), true, true, "llama2.c tok.bin (SentencePiece BPE)"))
}
