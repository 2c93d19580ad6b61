//! The cache's number formats on the command line (`--cache-type-k`, `--cache-type-v`,
//! `--unquantized-first`, `--no-attn-rot`), checked once into a [`CacheRounding`]. Flattened only
//! into the commands that model a quantized cache.

use clap::Args;

use crate::error::{Error, Result};
use crate::kv::cache_frontier::MemoryBudget;
use crate::kv::policy::PositionMode;
use crate::model::cache_rounding::CacheRounding;
use crate::numerics::cache_formats::CacheFormat;

/// How the cache stores keys and values.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct CacheFormatArgs {
    /// The format keys are stored in: llama.cpp's f32, f16, bf16, q8_0, q5_0, q5_1, q4_0, q4_1,
    /// iq4_nl, vLLM's fp8-e4m3, fp8-e5m2 (scale 1), or KIVI's kivi2, kivi4 (with values in
    /// kivi2 or kivi4) [default: f32, exact].
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
    /// KIVI's full-precision recent window R, a multiple of 32 [default: 128].
    #[arg(long, value_name = "R")]
    pub kivi_residual: Option<usize>,
}

fn parse_format(s: &str) -> std::result::Result<CacheFormat, String> {
    CacheFormat::parse(s).ok_or_else(|| {
        let names: Vec<&str> = CacheFormat::ALL.iter().chain(&CacheFormat::KIVI).map(|f| f.name()).collect();
        format!("not a cache type; one of {}", names.join(", "))
    })
}

impl CacheFormatArgs {
    /// The rounding under keys placed by `positions`: `slot` rotates keys when they are read,
    /// so its cache stores them before RoPE; `original` and `delta` store them rotated. A flag
    /// with nothing to act on is refused by name.
    pub fn rounding(&self, positions: PositionMode) -> Result<CacheRounding> {
        let (keys, values) = (self.cache_type_k.unwrap_or(CacheFormat::F32), self.cache_type_v.unwrap_or(CacheFormat::F32));
        let r = rounding_of((keys, values), self.unquantized_first, !self.no_attn_rot, positions, self.kivi_residual);
        if self.kivi_residual.is_some() && !r.is_kivi() {
            return Err(Error::input("--kivi-residual is KIVI's recent window; give --cache-type-k and --cache-type-v kivi2 or kivi4"));
        }
        if r.is_exact() && self.unquantized_first > 0 {
            return Err(Error::input("--unquantized-first keeps tokens exact in a rounded cache; give --cache-type-k or --cache-type-v"));
        }
        if self.no_attn_rot && !r.has_block() {
            return Err(Error::input("--no-attn-rot is for block formats (q8_0, q5_0, q5_1, q4_0, q4_1, iq4_nl), which llama.cpp rotates"));
        }
        Ok(r)
    }
}

/// [`CacheFormatArgs::rounding`] for a command that stores rows one at a time (`command`),
/// refusing KIVI's schemes by name.
impl CacheFormatArgs {
    pub fn row_rounding(&self, positions: PositionMode, command: &str) -> Result<CacheRounding> {
        let r = self.rounding(positions)?;
        r.refuse_kivi(command)?;
        Ok(r)
    }
}

/// One rounding: keys placed by `positions` are stored before RoPE under `slot` (except KIVI's,
/// which quantizes keys as they are rotated); `kivi_residual` applies to KIVI's schemes only.
fn rounding_of(
    (keys, values): (CacheFormat, CacheFormat),
    exact_first: usize,
    hadamard: bool,
    positions: PositionMode,
    kivi_residual: Option<usize>,
) -> CacheRounding {
    let kivi = keys.is_kivi() || values.is_kivi();
    let kivi_residual = kivi.then(|| kivi_residual.unwrap_or(crate::numerics::kivi::DEFAULT_RESIDUAL));
    CacheRounding { keys, values, exact_first, hadamard, before_rope: positions == PositionMode::Slot && !kivi, kivi_residual }
}

/// A cache type of `recommend --cache-types`: `T` for keys and values alike, or `K/V`.
pub fn parse_format_pair(s: &str) -> std::result::Result<(CacheFormat, CacheFormat), String> {
    match s.split_once('/') {
        Some((k, v)) => Ok((parse_format(k)?, parse_format(v)?)),
        None => parse_format(s).map(|f| (f, f)),
    }
}

/// A memory budget: a share of the f16 full cache (`40%`) or a size (`12MiB`, `1.5GiB`, `800KiB`,
/// or bytes).
pub fn parse_memory_budget(s: &str) -> std::result::Result<MemoryBudget, String> {
    let number = |x: &str| x.trim().parse::<f64>().ok().filter(|v| v.is_finite() && *v > 0.0);
    if let Some(p) = s.strip_suffix('%') {
        return number(p)
            .filter(|&v| v <= 100.0)
            .map(|v| MemoryBudget::Share(v / 100.0))
            .ok_or_else(|| format!("{s} is not a share between 0% and 100%"));
    }
    let (digits, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
    let scale = match unit {
        "" | "B" => 1u64,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return Err(format!("{s}: give a share (40%) or a size in B, KiB, MiB or GiB")),
    };
    number(digits).map(|v| MemoryBudget::Bytes((v * scale as f64).round() as u64)).ok_or_else(|| format!("{s} is not a positive size"))
}

/// Every (cache type × exact first tokens) of a frontier as a rounding under keys placed by
/// `positions` (an exact type once, whatever N), in the order given.
pub fn frontier_roundings(
    types: &[(CacheFormat, CacheFormat)],
    firsts: &[usize],
    no_attn_rot: bool,
    positions: PositionMode,
    kivi_residual: Option<usize>,
) -> Result<Vec<CacheRounding>> {
    let mut out: Vec<CacheRounding> = Vec::new();
    for &(keys, values) in types {
        for &n in firsts {
            let r = rounding_of((keys, values), n, !no_attn_rot, positions, kivi_residual);
            let r = if r.is_exact() { CacheRounding { exact_first: 0, ..r } } else { r };
            if !out.contains(&r) {
                out.push(r);
            }
        }
    }
    if kivi_residual.is_some() && !out.iter().any(CacheRounding::is_kivi) {
        return Err(Error::input("--kivi-residual is KIVI's recent window; give kivi2 or kivi4 among --cache-types"));
    }
    if no_attn_rot && !out.iter().any(CacheRounding::has_block) {
        return Err(Error::input("--no-attn-rot is for block formats (q8_0, q5_0, q5_1, q4_0, q4_1, iq4_nl), which llama.cpp rotates"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_and_budgets_parse_and_nonsense_is_refused() {
        assert_eq!(parse_format_pair("q8_0/q4_0"), Ok((CacheFormat::Q8_0, CacheFormat::Q4_0)));
        assert_eq!(parse_format_pair("q4_0"), Ok((CacheFormat::Q4_0, CacheFormat::Q4_0)));
        assert!(parse_format_pair("q3_k").is_err() && parse_format_pair("q8_0/").is_err());
        assert_eq!(parse_memory_budget("40%"), Ok(MemoryBudget::Share(0.4)));
        assert_eq!(parse_memory_budget("1.5MiB"), Ok(MemoryBudget::Bytes(1_572_864)));
        assert_eq!(parse_memory_budget("4096"), Ok(MemoryBudget::Bytes(4096)));
        for bad in ["0%", "140%", "NaN%", "12MB", "-3MiB", "MiB", "inf"] {
            assert!(parse_memory_budget(bad).is_err(), "{bad}");
        }
    }
}
