//! Quantized KV caches (issue 44): the cache formats' round trips held exactly (every value equal,
//! a zero's sign aside: ggml writes an all-zero iq4_nl block's codes from scratch memory) against
//! llama.cpp's own library (`scripts/llama-cpp/cache_formats.py` wrote the fixtures).

use std::path::PathBuf;

use sinkscope::numerics::cache_formats::CacheFormat;

fn fixture(name: &str) -> Vec<f32> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cache_formats").join(format!("{name}.f32"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

#[test]
fn every_cache_format_rounds_as_llama_cpp_and_ml_dtypes_do() {
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cache_formats/meta.json")).unwrap())
            .unwrap();
    let dim = meta["dim"].as_u64().unwrap() as usize;
    let input = fixture("input");
    let formats = meta["formats"].as_array().unwrap();
    assert_eq!(formats.len(), CacheFormat::ALL.len() - 1, "every format but f32 has a reference");
    for name in formats {
        let name = name.as_str().unwrap();
        let format = CacheFormat::parse(name).unwrap_or_else(|| panic!("unknown format {name}"));
        let want = fixture(name);
        assert_eq!(want.len(), input.len(), "{name}: length");
        let mut got = input.clone();
        got.chunks_exact_mut(dim).for_each(|row| format.round_trip(row));
        let mismatches: Vec<(usize, f32, f32)> =
            got.iter().zip(&want).enumerate().filter(|(_, (g, w))| g != w).map(|(i, (g, w))| (i, *g, *w)).take(5).collect();
        assert!(want.iter().all(|w| w.is_finite()), "{name}: the reference holds a non-finite value");
        assert!(mismatches.is_empty(), "{name}: not exact (up to the sign of zero) at (index, sinkscope, reference) {mismatches:?}");
    }
}
