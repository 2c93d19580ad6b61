//! The vocabulary embedded in a GGUF file (`tokenizer.ggml.*`): `llama` SentencePiece vocabularies
//! become an [`SpmTokenizer`]; `gpt2` byte-level BPE is rebuilt as a `tokenizers` pipeline with
//! llama.cpp's pre-tokenizer for `tokenizer.ggml.pre`.

use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::Split;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, SplitDelimiterBehavior};

use super::spm::{SpmTokenizer, TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED};
use crate::error::{Error, Result};
use crate::model::gguf::{GgufFile, Value};
use crate::model::gguf_config::seen;

/// GPT-2's pre-tokenizer regex and the llama-3 / qwen2 variants, as llama.cpp names them by
/// `tokenizer.ggml.pre`.
const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// DeepSeek LLM's and DeepSeek-V2's splits (llama.cpp's `deepseek-llm`), applied one after
/// another to the pieces the previous left: line breaks, letter runs, punctuation runs, trailing
/// whitespace, CJK runs, digit runs (llama.cpp's `llama-vocab.cpp`, as DeepSeek's tokenizer.json).
const DEEPSEEK_LLM_REGEXES: &[&str] = &[
    r"[\r\n]",
    r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
    r"\s+$",
    r"[一-龥ࠀ-一가-퟿]+",
    r"\p{N}+",
];
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A GGUF file's tokenizer, as built from its metadata.
pub enum Embedded {
    Spm(Box<SpmTokenizer>),
    ByteLevel { inner: Box<tokenizers::Tokenizer>, kind: String, bos: Option<u32>, add_bos: bool, eos: Vec<u32> },
}

/// Builds the tokenizer embedded in a GGUF file (`tokenizer.ggml.*`).
pub fn read(gguf: &GgufFile) -> Result<Embedded> {
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
        Some(a) => {
            a.iter().map(token_type).collect::<Option<_>>().ok_or_else(|| bad("tokenizer.ggml.token_type holds a value that is not a token type"))?
        }
        None => vec![1; tokens.len()],
    };
    if types.len() != tokens.len() {
        return Err(bad("token_type and tokens differ in length"));
    }
    let n_tokens = tokens.len();
    // A special token's id is in the vocabulary or the file is refused: one outside it would
    // quietly become no BOS (and change every number).
    let id = |key: &str| -> Result<Option<u32>> {
        let Some(v) = gguf.get(key) else { return Ok(None) };
        let id = v.as_u64().and_then(|v| u32::try_from(v).ok()).filter(|&v| (v as usize) < n_tokens);
        id.map(Some).ok_or_else(|| bad(&format!("{key} = {} is not a token id of its {n_tokens}-token vocabulary", seen(v))))
    };
    let bos = id("tokenizer.ggml.bos_token_id")?;
    let eos: Vec<u32> = id("tokenizer.ggml.eos_token_id")?.into_iter().chain(id("tokenizer.ggml.eot_token_id")?).collect();
    let flag = |key: &str| gguf.get(key).and_then(Value::as_bool);
    match model {
        "llama" => {
            let scores: Vec<f32> = match gguf.get("tokenizer.ggml.scores").and_then(Value::as_array) {
                Some(a) => a
                    .iter()
                    .map(|v| v.as_f64().map(|x| x as f32).filter(|x| x.is_finite()))
                    .collect::<Option<_>>()
                    .ok_or_else(|| bad("tokenizer.ggml.scores holds a value that is not a finite number"))?,
                None => return Err(bad("a llama vocabulary needs tokenizer.ggml.scores")),
            };
            if scores.len() != tokens.len() {
                return Err(bad("scores and tokens differ in length"));
            }
            Ok(Embedded::Spm(Box::new(SpmTokenizer::new(
                tokens,
                scores,
                types,
                bos,
                eos,
                id("tokenizer.ggml.unknown_token_id")?,
                flag("tokenizer.ggml.add_bos_token").unwrap_or(true),
                flag("tokenizer.ggml.add_space_prefix").unwrap_or(true),
                "gguf llama (SentencePiece BPE)",
            ))))
        }
        "gpt2" => {
            let merges =
                gguf.get("tokenizer.ggml.merges").and_then(Value::as_array).ok_or_else(|| bad("a gpt2 vocabulary needs tokenizer.ggml.merges"))?;
            let merges: Vec<(String, String)> = merges
                .iter()
                .map(|m| m.as_str().and_then(|s| s.split_once(' ')).map(|(a, b)| (a.to_owned(), b.to_owned())))
                .collect::<Option<_>>()
                .ok_or_else(|| bad("a merge is not of the form \"a b\""))?;
            let pre = gguf.get("tokenizer.ggml.pre").and_then(Value::as_str).unwrap_or("default");
            let vocab: Vocab = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
            let bpe = BPE::builder().vocab_and_merges(vocab, merges).build().map_err(|e| bad(&format!("cannot build BPE ({e})")))?;
            let mut inner = tokenizers::Tokenizer::new(bpe);
            inner.with_pre_tokenizer(Some(byte_level_pre_tokenizer(pre).ok_or_else(|| {
                bad(&format!("pre-tokenizer '{pre}' is not supported (known: default, gpt2, olmo, mpt, smollm, starcoder, command-r, falcon, llama3, llama-bpe, dbrx, qwen2, stablelm2, deepseek-llm)"))
            })?));
            inner.with_decoder(Some(ByteLevel::default()));
            let specials: Vec<AddedToken> = tokens
                .iter()
                .zip(&types)
                .filter(|(_, &t)| t == TOKEN_TYPE_CONTROL || t == TOKEN_TYPE_USER_DEFINED)
                .map(|(tok, _)| AddedToken::from(tok.clone(), true))
                .collect();
            inner.add_special_tokens(specials).map_err(|e| bad(&format!("cannot add special tokens ({e})")))?;
            Ok(Embedded::ByteLevel {
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

/// llama.cpp's pre-tokenizers by `tokenizer.ggml.pre`, expressed as a `tokenizers` pipeline.
fn byte_level_pre_tokenizer(pre: &str) -> Option<PreTokenizerWrapper> {
    let byte_level = ByteLevel::new(false, true, true);
    let regex_split = |re: &str| -> Option<PreTokenizerWrapper> {
        let split = Split::new(tokenizers::pre_tokenizers::split::SplitPattern::Regex(re.into()), SplitDelimiterBehavior::Isolated, false).ok()?;
        Some(PreTokenizerWrapper::Sequence(Sequence::new(vec![split.into(), ByteLevel::new(false, true, false).into()])))
    };
    match pre {
        // llama.cpp splits `olmo` and `mpt` with GPT-2's expression too.
        "default" | "gpt2" | "gpt-2" | "olmo" | "mpt" => Some(byte_level.into()),
        // SmolLM2, StarCoder2 and Command R (llama.cpp's `smollm`, `starcoder`, `command-r`): each
        // digit on its own before GPT-2's split.
        "smollm" | "starcoder" | "command-r" => Some(PreTokenizerWrapper::Sequence(Sequence::new(vec![Digits::new(true).into(), byte_level.into()]))),
        "llama3" | "llama-bpe" | "llama-v3" | "dbrx" => regex_split(LLAMA3_REGEX),
        // Falcon's: runs of punctuation, then GPT-2's split, then digits in threes.
        "falcon" => {
            let split = |re: &str| {
                Split::new(tokenizers::pre_tokenizers::split::SplitPattern::Regex(re.into()), SplitDelimiterBehavior::Isolated, false).ok()
            };
            let (punct, digits) = (split(r"[\p{P}\$\+<=>\^~\|`]+")?, split("[0-9][0-9][0-9]")?);
            Some(PreTokenizerWrapper::Sequence(Sequence::new(vec![punct.into(), byte_level.into(), digits.into()])))
        }
        "deepseek-llm" => {
            let splits: Option<Vec<PreTokenizerWrapper>> = DEEPSEEK_LLM_REGEXES
                .iter()
                .map(|re| {
                    let pattern = tokenizers::pre_tokenizers::split::SplitPattern::Regex((*re).into());
                    Split::new(pattern, SplitDelimiterBehavior::Isolated, false).ok().map(Into::into)
                })
                .collect();
            let mut steps = splits?;
            steps.push(ByteLevel::new(false, true, false).into());
            Some(PreTokenizerWrapper::Sequence(Sequence::new(steps)))
        }
        // llama.cpp splits StableLM 2's vocabulary with Qwen2's expression.
        "qwen2" | "stablelm2" => regex_split(QWEN2_REGEX),
        _ => None,
    }
}

/// A `tokenizer.ggml.token_type` entry (llama.cpp's token types are small signed integers).
fn token_type(v: &Value) -> Option<i64> {
    match *v {
        Value::I32(t) => Some(i64::from(t)),
        Value::I64(t) => Some(t),
        _ => v.as_u64().and_then(|t| i64::try_from(t).ok()),
    }
}
