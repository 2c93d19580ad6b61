//! Quantized matrix products per GGUF block type against the f32 product of the same weights
//! dequantized (a plain harness, not a timed test): for each type sinkscope keeps quantized with
//! `--quantized` (Q4_0, Q4_1, Q5_0, Q4_K, Q5_K, Q6_K, Q8_0), on the projection shapes of SmolLM2-135M
//! and Gemma 3 270M at prompt length 512 and at one row (decoding), times the f32 gemm over the
//! dequantized matrix, `--quantized`'s integer product (`model::quant_matmul`) and candle's
//! quantized matmul (what `--quantized` used before), and prints one JSON line per case with the
//! medians, the ratios and the largest |Δ| against f32 relative to the f32 output's largest |value|.
//!
//!     cargo bench --bench quant_matmul -- [--repeat R] [--rows M]

use std::time::Instant;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use sinkscope::model::matmul::matmul_split_rows;
use sinkscope::model::quant_matmul::PackedWeight;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn median(f: &mut dyn FnMut(), repeat: usize) -> f64 {
    f(); // warm-up (and any one-time packing)
    let mut walls: Vec<f64> = (0..repeat)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    walls.sort_by(f64::total_cmp);
    walls[walls.len() / 2]
}

fn main() {
    let repeat: usize = arg("--repeat").and_then(|v| v.parse().ok()).unwrap_or(5);
    let rows: Vec<usize> = match arg("--rows") {
        Some(v) => v.split(',').filter_map(|r| r.parse().ok()).collect(),
        None => vec![512, 1],
    };
    // (model, matrix, in, out): SmolLM2's gate/up and down, Gemma 3's gate|up and down.
    let shapes = [("smollm2", "up", 576, 1536), ("smollm2", "down", 1536, 576), ("gemma3", "up", 640, 2048), ("gemma3", "down", 2048, 640)];
    for dtype in [GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q5_0, GgmlDType::Q4K, GgmlDType::Q5K, GgmlDType::Q6K, GgmlDType::Q8_0] {
        for &(model, matrix, k, n) in &shapes {
            if k % dtype.block_size() != 0 {
                continue; // as in the files: llama.cpp stores such matrices in a 32-weight type
            }
            let w: Vec<f32> = (0..n * k).map(|i| ((i as f32) * 0.7548).sin() * 0.05).collect();
            let w = Tensor::from_vec(w, (n, k), &Device::Cpu).unwrap();
            let q = QTensor::quantize(&w, dtype).unwrap();
            let dense = q.dequantize(&Device::Cpu).unwrap().t().unwrap().contiguous().unwrap();
            let packed = PackedWeight::new(&q).unwrap().unwrap();
            let candle = QMatMul::from_arc(std::sync::Arc::new(q)).unwrap();
            for &m in &rows {
                let x: Vec<f32> = (0..m * k).map(|i| ((i as f32) * 0.2917).cos()).collect();
                let x = Tensor::from_vec(x, (m, k), &Device::Cpu).unwrap();
                let want = matmul_split_rows(&x, &dense, false).unwrap();
                let got = packed.forward(&x).unwrap();
                let want: Vec<f32> = want.flatten_all().unwrap().to_vec1().unwrap();
                let got: Vec<f32> = got.flatten_all().unwrap().to_vec1().unwrap();
                assert_eq!(want.len(), got.len());
                let scale = want.iter().map(|v| v.abs()).max_by(f32::total_cmp).unwrap_or(0.0);
                let worst = want.iter().zip(&got).map(|(a, b)| (a - b).abs()).max_by(f32::total_cmp).unwrap_or(f32::NAN);
                let theirs: Vec<f32> = candle.forward(&x).unwrap().flatten_all().unwrap().to_vec1().unwrap();
                assert_eq!(want.len(), theirs.len());
                let worst_candle = want.iter().zip(&theirs).map(|(a, b)| (a - b).abs()).max_by(f32::total_cmp).unwrap_or(f32::NAN);
                let f32_s = median(&mut || drop(matmul_split_rows(&x, &dense, false).unwrap()), repeat);
                let quant_s = median(&mut || drop(packed.forward(&x).unwrap()), repeat);
                let candle_s = median(&mut || drop(candle.forward(&x).unwrap()), repeat);
                println!(
                    "{}",
                    serde_json::json!({
                        "dtype": format!("{dtype:?}"), "model": model, "matrix": matrix, "rows": m, "in": k, "out": n,
                        "f32_ms": f32_s * 1e3, "quantized_ms": quant_s * 1e3, "candle_ms": candle_s * 1e3,
                        "f32_over_quantized": f32_s / quant_s, "candle_over_quantized": candle_s / quant_s,
                        "max_rel_err": worst / scale, "candle_max_rel_err": worst_candle / scale,
                    })
                );
            }
        }
    }
}
