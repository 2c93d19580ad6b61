//! Text generation with a KV cache: greedy or sampled continuation of a prompt, emitting each
//! newly decoded piece as soon as it is whole text.

use crate::error::{Error, Result};
use crate::model::decoder::KvCache;
use crate::model::load::LoadedModel;
use crate::model::receiver::NoCapture;
use crate::numerics::sampling::{argmax, sample, XorShift};

/// Generates up to `n` tokens after `prompt`, calling `emit` with each newly decoded piece of
/// text; returns the generated ids. Stops at an end-of-sequence token, at BOS (llama2.c's rule),
/// or at the end of the model's context.
pub fn generate(lm: &LoadedModel, prompt: &str, n: usize, temperature: f64, seed: u64, emit: &mut dyn FnMut(&str)) -> Result<Vec<u32>> {
    let mut ids = lm.tokenizer.encode(prompt)?;
    if ids.is_empty() {
        match lm.tokenizer.bos() {
            Some(bos) => ids.push(bos),
            None => return Err(Error::input("this model's tokenizer has no BOS token to start from; give a prompt with -p")),
        }
    }
    let context = lm.model.cfg.context_len;
    if ids.len() >= context {
        return Err(Error::input(format!("the prompt is {} tokens, which fills the model's context of {context}", ids.len())));
    }
    let mut printed = lm.tokenizer.decode(&ids);
    let mut cache = KvCache::default();
    let mut rng = XorShift(seed.max(1));
    let mut step_input = ids.clone();
    let mut generated = Vec::new();
    while generated.len() < n && ids.len() < context {
        let hidden = lm.model.forward(&step_input, Some(&mut cache), &mut NoCapture)?;
        let last = hidden.narrow(0, hidden.dim(0)? - 1, 1)?;
        let logits: Vec<f32> = lm.model.logits(&last)?.flatten_all()?.to_vec1()?;
        let next = if temperature == 0.0 { argmax(&logits) } else { sample(&logits, temperature, &mut rng) };
        if lm.tokenizer.eos().contains(&next) || Some(next) == lm.tokenizer.bos() {
            break;
        }
        ids.push(next);
        generated.push(next);
        let text = lm.tokenizer.decode(&ids);
        // Emit only once the text extends what was printed (a multi-byte character can span tokens).
        if let Some(new) = text.strip_prefix(printed.as_str()) {
            if !new.is_empty() && !new.ends_with('\u{FFFD}') {
                emit(new);
                printed = text;
            }
        }
        step_input = vec![next];
    }
    // Whatever is still held back (an incomplete character at the very end) is emitted as is.
    let text = lm.tokenizer.decode(&ids);
    if let Some(rest) = text.strip_prefix(printed.as_str()).filter(|r| !r.is_empty()) {
        emit(rest);
    }
    Ok(generated)
}

/// Greedy continuation of `prompt` as text (what `sinkscope generate` prints) and its token ids.
pub fn generate_text(lm: &LoadedModel, prompt: &str, n: usize) -> Result<(String, Vec<u32>)> {
    let mut text = String::new();
    let ids = generate(lm, prompt, n, 0.0, 0, &mut |piece| text.push_str(piece))?;
    Ok((text, ids))
}
