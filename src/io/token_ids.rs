//! Reading a list of token ids from a file: a JSON array, a JSON object with an `ids` array
//! (llama.cpp's `/tokenize` answers `{"tokens": […]}`, also read), or whitespace-separated
//! integers — one clear error naming the file otherwise.

use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Result};

/// The token ids a file holds, in order.
pub fn read_token_ids(path: &Path) -> Result<Vec<u32>> {
    let text = crate::io::text::read_text_file(path)?;
    parse_token_ids(&text).map_err(|why| Error::file(path, why))
}

/// Parses token ids; the error says what is wrong and where.
pub fn parse_token_ids(text: &str) -> std::result::Result<Vec<u32>, String> {
    let trimmed = text.trim_start_matches('\u{feff}').trim();
    if trimmed.is_empty() {
        return Err("is empty; expected token ids (a JSON list or whitespace-separated integers)".into());
    }
    let ids: Vec<u32> = if trimmed.starts_with('[') || trimmed.starts_with('{') {
        let v: Value = serde_json::from_str(trimmed).map_err(|e| format!("is not valid JSON ({e})"))?;
        let list = match &v {
            Value::Array(a) => a,
            Value::Object(o) => o
                .get("ids")
                .or_else(|| o.get("tokens"))
                .and_then(Value::as_array)
                .ok_or("is a JSON object without an `ids` (or `tokens`) list of token ids")?,
            _ => return Err("is neither a JSON list nor an object of token ids".into()),
        };
        list.iter()
            .enumerate()
            .map(|(i, x)| {
                // `/tokenize` with `with_pieces` gives {"id": n, "piece": …} per token.
                let n = x.as_u64().or_else(|| x.get("id").and_then(Value::as_u64));
                n.and_then(|n| u32::try_from(n).ok()).ok_or_else(|| format!("element {i} ({x}) is not a token id (an integer from 0 to 4294967295)"))
            })
            .collect::<std::result::Result<_, _>>()?
    } else {
        trimmed
            .split_whitespace()
            .enumerate()
            .map(|(i, w)| w.parse::<u32>().map_err(|_| format!("word {} ({w:?}) is not a token id (a non-negative integer)", i + 1)))
            .collect::<std::result::Result<_, _>>()?
    };
    if ids.is_empty() {
        return Err("holds no token ids".into());
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_reads_the_same_ids() {
        for text in [
            "[1, 2, 3]",
            "{\"ids\": [1,2,3]}",
            "{\"tokens\": [1,2,3]}",
            "1 2\n3\n",
            "{\"tokens\":[{\"id\":1,\"piece\":\"a\"},{\"id\":2},{\"id\":3}]}",
        ] {
            assert_eq!(parse_token_ids(text), Ok(vec![1, 2, 3]), "{text}");
        }
    }

    #[test]
    fn bad_ids_are_named() {
        assert!(parse_token_ids("").unwrap_err().contains("empty"));
        assert!(parse_token_ids("[1, -2]").unwrap_err().contains("element 1"));
        assert!(parse_token_ids("[1, 2.5]").unwrap_err().contains("element 1"));
        assert!(parse_token_ids("1 x 3").unwrap_err().contains("word 2"));
        assert!(parse_token_ids("[]").unwrap_err().contains("no token ids"));
        assert!(parse_token_ids("[4294967296]").unwrap_err().contains("element 0"));
        assert!(parse_token_ids("{\"a\": 1}").unwrap_err().contains("`ids`"));
    }
}
