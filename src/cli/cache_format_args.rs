//! The cache's number formats on the command line (`--cache-type-k`, `--cache-type-v`,
//! `--unquantized-first`, `--no-attn-rot`), checked once into a [`CacheRounding`]. Flattened only
//! into the commands that model a quantized cache.

use clap::Args;

use crate::error::{Error, Result};
use crate::kv::policy::PositionMode;
use crate::model::cache_rounding::CacheRounding;
use crate::numerics::cache_formats::CacheFormat;

/// How the cache stores keys and values.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct CacheFormatArgs {
    /// The format keys are stored in: llama.cpp's f32, f16, bf16, q8_0, q5_0, q5_1, q4_0, q4_1,
    /// iq4_nl, or vLLM's fp8-e4m3, fp8-e5m2 (scale 1) [default: f32, exact].
    #[arg(long, value_name = "T", value_parser = parse_format)]
    pub cache_type_k: Option<CacheFormat>,
    /// The format values are stored in (the same names) [default: f32, exact].
    #[arg(long, value_name = "T", value_parser = parse_format)]
    pub cache_type_v: Option<CacheFormat>,
    /// Keep the keys and values of the stream's first N tokens exact (IntactKV, KVSink).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub unquantized_first: usize,
    /// Store block formats without llama.cpp's Hadamard rotation (as `LLAMA_ATTN_ROT_DISABLE=1`).
    #[arg(long)]
    pub no_attn_rot: bool,
}

fn parse_format(s: &str) -> std::result::Result<CacheFormat, String> {
    CacheFormat::parse(s).ok_or_else(|| {
        let names: Vec<&str> = CacheFormat::ALL.iter().map(|f| f.name()).collect();
        format!("not a cache type; one of {}", names.join(", "))
    })
}

impl CacheFormatArgs {
    /// The rounding under keys placed by `positions`: `slot` rotates keys when they are read,
    /// so its cache stores them before RoPE; `original` and `delta` store them rotated. A flag
    /// with nothing to act on is refused by name.
    pub fn rounding(&self, positions: PositionMode) -> Result<CacheRounding> {
        let r = CacheRounding {
            keys: self.cache_type_k.unwrap_or(CacheFormat::F32),
            values: self.cache_type_v.unwrap_or(CacheFormat::F32),
            exact_first: self.unquantized_first,
            hadamard: !self.no_attn_rot,
            before_rope: positions == PositionMode::Slot,
        };
        if r.is_exact() && self.unquantized_first > 0 {
            return Err(Error::input("--unquantized-first keeps tokens exact in a rounded cache; give --cache-type-k or --cache-type-v"));
        }
        if self.no_attn_rot && !r.has_block() {
            return Err(Error::input("--no-attn-rot is for block formats (q8_0, q5_0, q5_1, q4_0, q4_1, iq4_nl), which llama.cpp rotates"));
        }
        Ok(r)
    }
}
