//! Whether a model's weights fit in this machine's memory as asked, read from the file's headers
//! before anything is loaded, and what to load it as when they do not: half-precision matrices
//! (`--dtype bf16`), else GGUF blocks kept quantized (`--quantized`), else a refusal with the
//! numbers.

use std::path::Path;

use candle_core::quantized::GgmlDType;
use safetensors::SafeTensors;

use super::decoder::WeightDtype;
use super::gguf::GgufFile;
use super::quant_matmul::packed_bytes;
use super::source::{shard_names, ModelSource};
use crate::error::{Error, IoContext, Result};

/// What the activations of a run need beside `weights` bytes of weights: a tenth of them, and at
/// least 256 MiB (a T = 512 capture of an 8B-shaped model peaks about 1 GiB above its weights).
pub fn activation_headroom(weights: u64) -> u64 {
    (weights / 10).max(256 << 20)
}

/// How the weights are kept: what `--quantized` and `--dtype` say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Keep {
    pub quantized: bool,
    pub dtype: WeightDtype,
}

/// The memory the weights take under each way of keeping them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    /// Every weight as f32 (`--dtype f32`).
    pub f32: u64,
    /// As the file stores them: half matrices stay half (`--dtype auto`).
    pub auto: u64,
    /// Weight matrices in bf16/f16, the rest f32 (`--dtype bf16`).
    pub half: u64,
    /// GGUF blocks packed for the integer products, the rest f32 (`--quantized`); `None` where
    /// the file holds no quantized matrices.
    pub quantized: Option<u64>,
}

impl Footprint {
    /// The bytes under `opts`.
    pub fn under(&self, opts: &Keep) -> u64 {
        match (opts.quantized, opts.dtype) {
            (true, _) if self.quantized.is_some() => self.quantized.unwrap_or(self.f32),
            (_, WeightDtype::Auto) => self.auto,
            (_, WeightDtype::F32) => self.f32,
            (_, WeightDtype::Bf16 | WeightDtype::F16) => self.half,
        }
    }
}

/// One tensor's contribution to each way of keeping the weights.
fn add(fp: &mut Footprint, shape: &[usize], stored_bytes_per_elem: Option<usize>, quantized_as: Option<GgmlDType>, stored: u64) {
    let n = shape.iter().product::<usize>() as u64;
    let matrix = shape.len() == 2;
    fp.f32 += 4 * n;
    fp.half += if matrix { 2 * n } else { 4 * n };
    fp.auto += match stored_bytes_per_elem {
        Some(2) if matrix => 2 * n,
        _ => 4 * n,
    };
    let packed = match (quantized_as, shape) {
        (Some(dtype), [rows, cols]) => packed_bytes(dtype, *rows, *cols).unwrap_or(stored),
        _ => 4 * n,
    };
    *fp.quantized.get_or_insert(0) += packed;
}

/// The weights' footprint, from the file's headers only.
pub fn footprint(source: &ModelSource) -> Result<Footprint> {
    let mut fp = Footprint { f32: 0, auto: 0, half: 0, quantized: None };
    match source {
        ModelSource::Gguf(path) => {
            let file = GgufFile::open(path)?;
            let blocks = |d: GgmlDType| !matches!(d, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16);
            for t in file.tensors.values() {
                let half = matches!(t.dtype, GgmlDType::F16 | GgmlDType::BF16).then_some(2);
                add(&mut fp, &t.shape, half, blocks(t.dtype).then_some(t.dtype), t.n_bytes as u64);
            }
            // Beside a separate output head, a quantized embedding table is also kept in f32
            // for lookups.
            if let (Some(q), Some(embed)) = (fp.quantized.as_mut(), file.tensors.get("token_embd.weight")) {
                if blocks(embed.dtype) && file.tensors.contains_key("output.weight") {
                    *q += 4 * embed.shape.iter().product::<usize>() as u64;
                }
            }
            if !file.tensors.values().any(|t| blocks(t.dtype)) {
                fp.quantized = None;
            }
        }
        ModelSource::HfDir(dir) => {
            for shard in safetensors_files(dir)? {
                let file = crate::io::regular::open(&shard).with_file(&shard)?;
                // SAFETY: read-only map of a file only this process reads; see GgufFile::open.
                let map = unsafe { memmap2::Mmap::map(&file) }.with_file(&shard)?;
                let st = SafeTensors::deserialize(&map).map_err(|e| Error::file(&shard, format!("safetensors header is invalid ({e})")))?;
                for (_, view) in st.tensors() {
                    add(&mut fp, view.shape(), Some(view.dtype().bitsize() / 8), None, view.data().len() as u64);
                }
            }
            fp.quantized = None;
        }
        ModelSource::Llama2c { model } => {
            let bytes = std::fs::metadata(model).with_file(model)?.len();
            fp = Footprint { f32: bytes, auto: bytes, half: bytes, quantized: None };
        }
    }
    Ok(fp)
}

fn safetensors_files(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    Ok(shard_names(&dir.join("model.safetensors.index.json"))?.into_iter().map(|s| dir.join(s)).collect())
}

/// The memory a run may use: `SINKSCOPE_MEMORY_LIMIT` (bytes) if set, else the kernel's
/// `MemAvailable`; `None` where neither can be read (then nothing is checked).
pub fn available_memory() -> Option<u64> {
    if let Some(limit) = std::env::var("SINKSCOPE_MEMORY_LIMIT").ok().and_then(|v| v.trim().parse().ok()) {
        return Some(limit);
    }
    mem_available()
}

/// Memory the system reports as available (Linux `MemAvailable`), if known.
pub fn mem_available() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kib| kib * 1024)
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// How to load `source` within `available` bytes: `opts` as they are when the weights fit (or
/// when the memory cannot be read); when they do not and no weight type was asked for, bf16
/// matrices or, for a quantized GGUF, `--quantized` — with the note saying so — else a refusal
/// with the numbers.
pub fn plan(source: &ModelSource, opts: &Keep, available: Option<u64>) -> Result<(Keep, Option<String>)> {
    let Some(available) = available else { return Ok((*opts, None)) };
    let fp = footprint(source)?;
    let fits = |bytes: u64| bytes + activation_headroom(bytes) <= available;
    let asked = fp.under(opts);
    if fits(asked) {
        return Ok((*opts, None));
    }
    let path = source.path();
    let alternatives = [
        (Keep { dtype: WeightDtype::Bf16, quantized: false }, "--dtype bf16", Some(fp.half)),
        (Keep { quantized: true, ..*opts }, "--quantized", fp.quantized),
    ];
    let options: Vec<String> = alternatives.iter().filter_map(|(_, flag, bytes)| bytes.map(|b| format!("{flag} needs {}", gib(b)))).collect();
    let chose_nothing = !opts.quantized && opts.dtype == WeightDtype::Auto;
    if chose_nothing {
        if let Some((chosen, flag, Some(bytes))) = alternatives.into_iter().find(|(_, _, bytes)| bytes.is_some_and(fits)) {
            let note = format!(
                "{}: the weights need {} in f32 and {} is available; loading them with {flag} ({}, arithmetic in f32{})",
                path.display(),
                gib(asked),
                gib(available),
                gib(bytes),
                if flag == "--quantized" { ", 8-bit activations: not exact" } else { "" }
            );
            return Ok((chosen, Some(note)));
        }
    }
    Err(Error::file(
        path,
        format!(
            "the weights need {} as asked, beside {} for activations, and {} is available ({}); the model does not fit on this machine",
            gib(asked),
            gib(activation_headroom(asked)),
            gib(available),
            if options.is_empty() { "no smaller way to keep them".to_owned() } else { options.join(", ") }
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_too_large_for_f32_is_loaded_half_then_quantized_then_refused() {
        let fp_path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/arch/llama3/model.gguf");
        let source = ModelSource::Gguf(fp_path);
        let fp = footprint(&source).unwrap();
        // An f32 GGUF: every tensor 4 bytes an element, half matrices 2.
        assert!(fp.half < fp.f32 && fp.auto == fp.f32 && fp.quantized.is_none(), "{fp:?}");
        let opts = Keep::default();
        let roomy = plan(&source, &opts, Some(fp.f32 + activation_headroom(fp.f32))).unwrap();
        assert!(roomy.1.is_none() && roomy.0.dtype == WeightDtype::Auto);
        let (half, note) = plan(&source, &opts, Some(fp.half + activation_headroom(fp.half))).unwrap();
        assert_eq!(half.dtype, WeightDtype::Bf16);
        assert!(note.unwrap().contains("--dtype bf16"));
        let refused = plan(&source, &opts, Some(activation_headroom(0))).unwrap_err().to_string();
        assert!(refused.contains("does not fit") && refused.contains("--dtype bf16 needs"), "{refused}");
        // A weight type asked for is never changed behind the user's back.
        let asked = Keep { dtype: WeightDtype::F32, quantized: false };
        assert!(plan(&source, &asked, Some(fp.half + activation_headroom(fp.half))).is_err());
    }
}
