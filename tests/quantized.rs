//! `--quantized` on real weights: SmolLM2-135M (Q4_1, a Q8_0 tied head) and Gemma 3 270M (Q5_0,
//! Q8_0, Q4_K, Q6_K) keep their GGUF blocks packed as 8-bit integers (`model::quant_matmul`), use
//! under half the memory of f32, and stay close to the exact f32 numbers on 384 tokens of a book:
//! perplexity within 2% (measured at 512 tokens: +0.37% and +0.57%; llama.cpp's own on the same
//! tokens is +0.03% and −0.23% from f32, its AVX-512 build +0.17% and +0.98%), α_0 of every head
//! within 0.03 (measured ≤ 0.011), every logit within 6 (measured ≤ 2.8) — and not bit-equal to f32,
//! so the packed products are what ran. The unit tests in `quant_matmul` hold every block type's
//! packing and product against the dequantized f32 matrix.

mod common;

use sinkscope::capture::run::{capture, CaptureOptions, CaptureOutput};
use sinkscope::model::receiver::NoCapture;
use sinkscope::model::{load, LoadOptions, LoadedModel};

fn scored(lm: &LoadedModel, ids: &[u32]) -> CaptureOutput {
    let opts = CaptureOptions { heatmap_bins: None, ..CaptureOptions::default() };
    capture(&lm.model, ids, &opts).unwrap()
}

fn close_to_f32(model: &std::path::Path) {
    let path = model.to_str().unwrap();
    let exact = load(path, &LoadOptions::default()).unwrap();
    let quant = load(path, &LoadOptions { quantized: true, ..LoadOptions::default() }).unwrap();
    assert!(quant.info.compute.starts_with("quantized"), "{}", quant.info.compute);
    let (fb, qb) = (exact.model.weight_bytes(), quant.model.weight_bytes());
    assert!(qb * 2 < fb, "--quantized keeps {qb} bytes of weights against f32's {fb}");

    let book = std::fs::read_to_string(common::corpora_dir().join("pg84_frankenstein.txt")).unwrap();
    let text: String = book.chars().skip(120_000).take(4_000).collect();
    let ids: Vec<u32> = exact.tokenizer.encode(&text).unwrap().into_iter().take(384).collect();
    assert_eq!(ids.len(), 384);

    let (a, b) = (scored(&exact, &ids), scored(&quant, &ids));
    let (pa, pb) = (a.nll.unwrap().perplexity, b.nll.unwrap().perplexity);
    assert!(pa.is_finite() && pb.is_finite());
    assert!(pa != pb, "--quantized gave f32's perplexity to the bit: the packed products did not run");
    assert!((pb / pa - 1.0).abs() < 0.02, "perplexity {pb} under --quantized against {pa}");

    let (sa, sb) = (a.reducers.summarize(), b.reducers.summarize());
    assert_eq!(sa.heads.len(), sb.heads.len());
    let alphas: Vec<f64> = sa.heads.iter().zip(&sb.heads).map(|(x, y)| (x.alpha[0] - y.alpha[0]).abs()).collect();
    let worst_alpha = common::finite_max("α_0 gaps", &alphas);
    assert!(worst_alpha < 0.03, "α_0 of a head moved by {worst_alpha}");

    let (ha, hb) = (exact.model.forward(&ids, None, &mut NoCapture).unwrap(), quant.model.forward(&ids, None, &mut NoCapture).unwrap());
    let mut worst_logit = 0f64;
    for r0 in (0..ids.len()).step_by(64) {
        let la: Vec<f32> = exact.model.logits(&ha.narrow(0, r0, 64).unwrap()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        let lb: Vec<f32> = quant.model.logits(&hb.narrow(0, r0, 64).unwrap()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        // max_abs_diff fails on NaN and ±∞, so the comparison below sees only finite gaps.
        let gap = common::max_abs_diff("logits", &lb, &la);
        if gap > worst_logit {
            worst_logit = gap;
        }
    }
    assert!(worst_logit < 6.0, "a logit moved by {worst_logit}");
    eprintln!("{path}: perplexity {pb:.3} vs {pa:.3}, α_0 max |Δ| {worst_alpha:.4}, max |Δlogit| {worst_logit:.3}, weights {qb} vs {fb} bytes");
}

#[test]
fn smollm2_quantized_stays_close_to_f32() {
    close_to_f32(&model_or_skip!("SmolLM2-135M-Instruct.Q4_1.gguf"));
}

#[test]
fn gemma3_quantized_stays_close_to_f32() {
    close_to_f32(&model_or_skip!(sinkscope::model::catalog::lookup("gemma3-270m").unwrap().file));
}
