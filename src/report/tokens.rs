//! Vocabulary pieces as text a reader recognises: byte-level (GPT-2) pieces decoded from their byte
//! alphabet, SentencePiece's word-start marker as a space, control characters made visible — for
//! the dashboard, the figures' axis labels and the Markdown report.

/// A vocabulary piece as readable text: word-start markers become spaces, newlines and other
/// control characters visible symbols (so layout never breaks on a raw control byte). With
/// `byte_level` (GPT-2-style vocabularies), pieces are first decoded from the byte alphabet, so
/// "âĢĻ" reads as "’".
pub fn display_piece(piece: &str, byte_level: bool) -> String {
    match piece {
        "<0x0A>" => return "↵".into(),
        "<0x09>" => return "→".into(),
        // An empty piece still needs a visible cell to be selectable.
        "" => return "∅".into(),
        _ => {}
    }
    let text = match byte_level.then(|| decode_byte_level(piece)).flatten() {
        Some(t) => t,
        None => piece.replace('▁', " "),
    };
    text.chars()
        .map(|c| match c {
            '\n' => '↵',
            '\t' => '→',
            c if c.is_control() => '·',
            c => c,
        })
        .collect()
}

/// GPT-2's byte alphabet: printable bytes stand for themselves, the other 68 bytes for
/// U+0100 onwards, in byte order. `None` when a character is outside the alphabet.
fn decode_byte_level(piece: &str) -> Option<String> {
    let printable = |b: u32| (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
    let shifted: Vec<u8> = (0u32..256).filter(|&b| !printable(b)).map(|b| b as u8).collect();
    let bytes = piece
        .chars()
        .map(|c| {
            let u = c as u32;
            if printable(u) {
                Some(u as u8)
            } else {
                u.checked_sub(256).and_then(|i| shifted.get(i as usize).copied())
            }
        })
        .collect::<Option<Vec<u8>>>()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// Whether a run's pieces come from a byte-level vocabulary ('Ġ' word starts, no '▁').
pub fn is_byte_level(pieces: &[&str]) -> bool {
    pieces.iter().any(|p| p.contains(['Ġ', 'Ċ'])) && !pieces.iter().any(|p| p.contains('▁'))
}

/// A piece as a short axis or table label: [`display_piece`], a leading space shown as '·' (so a
/// word start stays visible), cut to 10 characters.
pub fn label(piece: &str, byte_level: bool) -> String {
    let text = display_piece(piece, byte_level);
    let text = match text.strip_prefix(' ') {
        Some(rest) => format!("·{rest}"),
        None => text,
    };
    if text.chars().count() > 10 {
        format!("{}…", text.chars().take(9).collect::<String>())
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_read_as_text() {
        assert_eq!(display_piece("▁Once", false), " Once");
        assert_eq!(display_piece("<0x0A>", false), "↵");
        assert_eq!(display_piece("a\u{7}b", false), "a·b");
        assert_eq!(display_piece("", false), "∅");
        assert_eq!(display_piece("Ġthe", true), " the");
        assert_eq!(display_piece("ĊĠĠ", true), "↵  ");
        assert_eq!(display_piece("âĢĻ", true), "’", "three byte-alphabet characters, one UTF-8 character");
        assert_eq!(display_piece("<|endoftext|>", true), "<|endoftext|>");
        assert_eq!(display_piece("âĢ", true), "\u{FFFD}", "half a character");
        assert!(is_byte_level(&["The", "Ġcat"]) && !is_byte_level(&["▁The", "Ġ"]) && !is_byte_level(&["<s>", "a"]));
    }

    #[test]
    fn labels_show_word_starts_and_decode_bytes() {
        assert_eq!(label("Ġtruth", true), "·truth");
        assert_eq!(label("▁Once", false), "·Once");
        assert_eq!(label("âĢľ", true), "“");
        assert_eq!(label("Ċ", true), "↵");
        assert_eq!(label("Ġacknowledged", true), "·acknowle…");
        assert_eq!(label("<s>", false), "<s>");
    }
}
