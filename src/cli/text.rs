//! Reading the user's text: from -p or a file, refusing empty, binary and invalid UTF-8 input with
//! a message that names the file, and tokenizing it within the model's context.

use std::path::Path;

use crate::error::{Error, Result};
use crate::model::LoadedModel;

/// Text from `-p` or `-f`, and where it came from.
pub fn read_input(prompt: Option<&str>, file: Option<&Path>) -> Result<(String, String)> {
    match (prompt, file) {
        (Some(_), Some(_)) => Err(Error::input("give either -p TEXT or -f FILE, not both")),
        (Some(p), None) if p.is_empty() => Err(Error::input("the text given with -p is empty")),
        (Some(p), None) => Ok((p.to_owned(), "prompt".into())),
        (None, Some(path)) => Ok((crate::textfile::read_text_file(path)?, path.display().to_string())),
        (None, None) => Err(Error::input("no text: pass -p TEXT or -f FILE")),
    }
}

/// Tokenizes `text`, keeping at most `max_tokens`, and refuses more tokens than the model's
/// context. Returns the ids and how many tokens were dropped.
pub fn tokenize_within_context(lm: &LoadedModel, text: &str, max_tokens: Option<usize>) -> Result<(Vec<u32>, usize)> {
    let mut ids = lm.tokenizer.encode(text)?;
    if ids.is_empty() {
        return Err(Error::input("the text gives no tokens"));
    }
    if max_tokens == Some(0) {
        return Err(Error::input("--max-tokens must be at least 1"));
    }
    let context = lm.model.cfg.context_len;
    let limit = max_tokens.unwrap_or(usize::MAX);
    let dropped = ids.len().saturating_sub(limit);
    ids.truncate(limit);
    if ids.len() > context {
        return Err(Error::input(format!(
            "the text is {} tokens, longer than the model's context of {context}; pass --max-tokens {context} (or fewer) to use its first tokens",
            ids.len()
        )));
    }
    Ok((ids, dropped))
}
