//! Greedy generation against published facts: llama2.c's expected stories260K output (test_all.py)
//! from both the GGUF and the llama2.c checkpoint, and SmolLM2 naming Paris.

mod common;

use sinkscope::model::{load, LoadOptions};
use sinkscope::pipeline::generate::generate_text;

fn expected_stdout() -> String {
    std::fs::read_to_string(common::fixture("llama2c_expected_stdout.txt")).unwrap()
}

fn greedy(model: &std::path::Path, prompt: &str, n: usize) -> (String, usize) {
    let lm = load(model.to_str().unwrap(), &LoadOptions::default()).unwrap();
    let (text, ids) = generate_text(&lm, prompt, n).unwrap();
    (text, ids.len())
}

#[test]
fn stories260k_gguf_reproduces_llama2c_expected_output() {
    let model = model_or_skip!("stories260K.gguf");
    let (text, n) = greedy(&model, "", 200);
    assert_eq!(n, 200, "generation stopped early");
    assert_eq!(text, expected_stdout());
}

#[test]
fn stories260k_llama2c_bin_reproduces_llama2c_expected_output() {
    let model = model_or_skip!("stories260K.bin");
    let (text, n) = greedy(&model, "", 200);
    assert_eq!(n, 200, "generation stopped early");
    assert_eq!(text, expected_stdout());
}

#[test]
fn stories260k_hf_directory_agrees_with_gguf() {
    let dir = model_or_skip!("stories260K-hf");
    let (text, _) = greedy(&dir, "", 60);
    // tokenizer.json's decoder keeps SentencePiece's leading space; the words must match.
    assert!(expected_stdout().starts_with(text.trim_start()), "{text}");
    assert!(text.trim_start().len() > 100);
}

#[test]
fn smollm2_names_paris() {
    let model = model_or_skip!("SmolLM2-135M-Instruct.Q4_1.gguf");
    let (text, _) = greedy(&model, "The capital of France is", 3);
    assert!(text.starts_with(" Paris"), "{text:?}");
}

#[test]
fn smollm2_quantized_mode_also_names_paris() {
    let model = model_or_skip!("SmolLM2-135M-Instruct.Q4_1.gguf");
    let lm = load(model.to_str().unwrap(), &LoadOptions { quantized: true, ..LoadOptions::default() }).unwrap();
    assert!(lm.info.compute.starts_with("quantized"));
    let (text, _) = generate_text(&lm, "The capital of France is", 2).unwrap();
    assert!(text.starts_with(" Paris"), "{text:?}");
}

#[test]
fn cli_generate_prints_the_continuation() {
    let _ = model_or_skip!("stories260K.gguf");
    let out = common::sinkscope(&["generate", "-m", "stories260k", "-n", "12"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.starts_with("Once upon a time, there was a little girl"), "{stdout}");
}
