//! Tokenizer parity: SmolLM2's GGUF-embedded gpt2 vocabulary (rebuilt by sinkscope) against HF
//! tokenizers on SmolLM2's tokenizer.json; stories260K's GGUF llama vocabulary and llama2.c
//! tok512.bin (sinkscope's SentencePiece BPE) against llama2.c's own C encoder (run.c) ids.

mod common;

use sinkscope::model::{load, LoadOptions, Tokenizer};

fn cases() -> Vec<(String, String, Vec<u32>, Vec<u32>)> {
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(common::fixture("tokenizer_reference.json")).unwrap()).unwrap();
    let ids = |v: &serde_json::Value| v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect::<Vec<_>>();
    json["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap().to_owned(), c["text"].as_str().unwrap().to_owned(), ids(&c["smollm2_ids"]), ids(&c["stories260k_ids"])))
        .collect()
}

fn tokenizer_of(model: &std::path::Path) -> Tokenizer {
    load(model.to_str().unwrap(), &LoadOptions::default()).unwrap().tokenizer
}

#[test]
fn smollm2_gguf_vocabulary_matches_hf_tokenizer_json() {
    let model = model_or_skip!("SmolLM2-135M-Instruct.Q4_1.gguf");
    let tok = tokenizer_of(&model);
    assert!(!tok.adds_bos(), "SmolLM2's GGUF says add_bos_token = false");
    for (name, text, want, _) in cases() {
        assert_eq!(tok.encode(&text).unwrap(), want, "case {name}: {text:?}");
    }
}

#[test]
fn smollm2_matches_hf_tokenizer_on_a_whole_book_chapter() {
    let model = model_or_skip!("SmolLM2-135M-Instruct.Q4_1.gguf");
    let ours = tokenizer_of(&model);
    // SmolLM2's tokenizer.json (3.4 MB) is in ../shared only, not in the repository's tests/data.
    let Some(reference) = common::model("smollm2-135m-tokenizer/tokenizer.json") else { return };
    let reference = tokenizers::Tokenizer::from_file(reference).unwrap();
    for book in ["pg1342_pride_and_prejudice.txt", "pg84_frankenstein.txt"] {
        let text = std::fs::read_to_string(common::corpora_dir().join(book)).unwrap();
        let chunk: String = text.chars().skip(text.len() / 3).take(20_000).collect();
        let want = reference.encode(chunk.as_str(), true).unwrap().get_ids().to_vec();
        assert_eq!(ours.encode(&chunk).unwrap(), want, "{book}");
    }
}

#[test]
fn stories260k_gguf_and_tok512_match_llama2c_run_c() {
    let gguf = model_or_skip!("stories260K.gguf");
    let bin = gguf.with_file_name("stories260K.bin");
    for tok in [tokenizer_of(&gguf), tokenizer_of(&bin)] {
        assert!(tok.adds_bos());
        for (name, text, _, want) in cases() {
            assert_eq!(tok.encode(&text).unwrap(), want, "{} case {name}: {text:?}", tok.kind());
        }
    }
}

#[test]
fn stories260k_spm_matches_hf_tokenizer_json_on_long_text() {
    let gguf = model_or_skip!("stories260K.gguf");
    let ours = tokenizer_of(&gguf);
    let reference = tokenizers::Tokenizer::from_file(gguf.with_file_name("stories260K-hf/tokenizer.json")).unwrap();
    let text = std::fs::read_to_string(common::corpora_dir().join("tinystories_val_subset.txt")).unwrap();
    let chunk: String = text.chars().take(30_000).collect();
    let want = reference.encode(chunk.as_str(), true).unwrap().get_ids().to_vec();
    assert_eq!(ours.encode(&chunk).unwrap(), want);
}

#[test]
fn decode_inverts_encode() {
    let gguf = model_or_skip!("stories260K.gguf");
    let smol = model_or_skip!("SmolLM2-135M-Instruct.Q4_1.gguf");
    let text = std::fs::read_to_string(common::fixture("texts/varied.txt")).unwrap();
    for tok in [tokenizer_of(&gguf), tokenizer_of(&smol)] {
        let ids = tok.encode(&text).unwrap();
        assert_eq!(tok.decode(&ids), text, "{}", tok.kind());
    }
}

/// `encode_prefix` (what `stream` uses on long files) gives exactly the first ids of encoding the
/// whole text, for every tokenizer kind: gpt2 BPE rebuilt from a GGUF, SentencePiece from a GGUF and
/// from llama2.c's tok512.bin, and HF tokenizers from a tokenizer.json — on a book, on 300 KB
/// without a line break (alone and after a title line), and on text whose only whitespace is
/// multi-byte.
#[test]
fn prefix_encoding_equals_the_whole_text_truncated() {
    let smollm2 = model_or_skip!("SmolLM2-135M-Instruct.Q4_1.gguf");
    let stories = model_or_skip!("stories260K.gguf");
    let hf = load(stories.with_file_name("stories260K-hf").to_str().unwrap(), &LoadOptions::default()).unwrap().tokenizer;
    let book = std::fs::read_to_string(common::corpora_dir().join("pg84_frankenstein.txt")).unwrap();
    let book: String = book.chars().take(300_000).collect();
    let one_line = book.replace('\n', " ");
    let ideographic: String = book.chars().map(|c| if c == ' ' || c == '\n' { '\u{3000}' } else { c }).collect();
    let titled = format!("Frankenstein\n{one_line}");
    for tok in [tokenizer_of(&smollm2), tokenizer_of(&stories), tokenizer_of(&stories.with_file_name("stories260K.bin")), hf] {
        for (what, text) in [("book", &book), ("one line", &one_line), ("a title line, then one line", &titled), ("U+3000 spaces", &ideographic)] {
            let whole = tok.encode(text).unwrap();
            for n in [1, 100, 7_000, 20_000, whole.len(), whole.len() + 10] {
                let want = &whole[..n.min(whole.len())];
                assert_eq!(tok.encode_prefix(text, n).unwrap(), want, "{} on {what}, {n} tokens", tok.kind());
            }
        }
    }
}
