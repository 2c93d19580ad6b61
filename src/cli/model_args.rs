//! The model flags every command that loads one shares (`-m`, `--quantized`, `--dtype`, `--tokenizer`).

use std::path::PathBuf;

use clap::Args;

use super::progress::TerminalProgress;
use crate::error::Result;
use crate::model::decoder::WeightDtype;
use crate::model::fetch::{ensure, offline_from_env};
use crate::model::fit::{available_memory, plan};
use crate::model::load::{load_kept, LoadOptions, LoadedModel};
use crate::model::resolve;

/// Model selection shared by every command that loads one.
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// A .gguf file, a llama2.c .bin (tokenizer beside it), an HF directory, a hub id
    /// (owner/name, via the HF cache), or an alias (`sinkscope models` lists them; one that is
    /// not on the model path is downloaded and verified first).
    #[arg(short = 'm', long = "model", default_value = crate::model::catalog::DEFAULT_MODEL)]
    pub model: String,
    /// Keep GGUF weights quantized for matmuls (faster, less memory, not exact). Default:
    /// dequantize everything to f32 so analysis is exact.
    #[arg(long)]
    pub quantized: bool,
    /// Use this tokenizer.json (or llama2.c tok*.bin) instead of the model's own.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// How weight matrices are kept in memory: auto (as the file stores them: bf16/f16 stay half),
    /// f32, bf16 or f16 (half the memory of f32; arithmetic is f32 either way).
    #[arg(long, default_value = "auto", value_parser = parse_dtype)]
    pub dtype: WeightDtype,
    /// Never download: an alias that is not on the model path is an error saying what to do.
    #[arg(long)]
    pub offline: bool,
}

impl ModelArgs {
    pub fn load(&self) -> Result<LoadedModel> {
        // An alias not on the model path is fetched (verified) first, unless downloads are off.
        ensure(&self.model, self.offline || offline_from_env(), &mut TerminalProgress::new())?;
        let opts = LoadOptions {
            quantized: self.quantized,
            tokenizer: self.tokenizer.clone(),
            dtype: self.dtype,
            scan_weights: false,
            report_unread: false,
        };
        let source = resolve(&self.model)?;
        // Said before the weights load (minutes, for a model this large).
        let (keep, note) = plan(&source, &opts.keep(), available_memory())?;
        if let Some(note) = &note {
            eprintln!("note: {note}");
        }
        let mut lm = load_kept(&source, &LoadOptions { quantized: keep.quantized, dtype: keep.dtype, ..opts })?;
        lm.info.memory_note = note;
        Ok(lm)
    }
}

/// `--dtype`'s values.
pub fn parse_dtype(s: &str) -> std::result::Result<WeightDtype, String> {
    WeightDtype::parse(s).ok_or_else(|| format!("unknown weight type '{s}'; use one of {}", WeightDtype::NAMES))
}
