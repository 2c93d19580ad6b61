//! What a KV cache costs on a model: entries and bytes per layer at a cache's peak, where a layer
//! trained with a sliding window never holds more keys than its window whatever the policy keeps
//! (Gemma 3's local layers: 512), so only the global layers pay for a long budget; a hybrid's
//! linear-attention layers hold no entries at all but a recurrent state of fixed size.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::cache_rounding::CacheRounding;
use crate::model::decoder::config::describe_windows;
use crate::model::decoder::DecoderConfig;

/// Bytes of one stored key or value element: f16, the cache type llama.cpp and vLLM default to.
pub const CACHE_ELEMENT_BYTES: u64 = 2;
/// Bytes of one recurrent-state element: f32, as llama.cpp keeps a linear-attention layer's state.
pub const STATE_ELEMENT_BYTES: u64 = 4;

/// A cache's memory at its peak length, per sequence.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct KvMemory {
    /// Entries a global layer holds at the peak.
    pub global_entries: usize,
    /// The most entries a windowed layer holds at the peak (at most its window); `None` without windows.
    pub windowed_entries: Option<usize>,
    /// Layers of each kind.
    pub global_layers: usize,
    pub windowed_layers: usize,
    /// Bytes of keys and values over every layer at the peak (f16, or as `stored_as` says).
    pub bytes: u64,
    /// What the same peak would take if every layer held it (the model's windows ignored).
    pub bytes_without_windows: u64,
    /// The formats a quantized cache stores keys and values in (absent: f16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_as: Option<CacheRounding>,
    /// Bytes of the linear-attention layers' recurrent state (f32, whatever the length; in
    /// `bytes` too); 0 without such layers.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub recurrent_bytes: u64,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// The memory of a cache whose queries see at most `peak` entries, on `cfg`'s layers.
pub fn kv_memory(cfg: &DecoderConfig, peak: usize) -> KvMemory {
    kv_memory_stored(cfg, peak, &CacheRounding::default())
}

/// [`kv_memory`] for a cache storing keys and values as `rounding` says: its formats' bits per
/// value (block scales included), the first `exact_first` entries of a layer (and KIVI's recent
/// window) at f16 (an engine's unquantized type); an exact (f32) simulator cache counts as f16, as the engines store it.
pub fn kv_memory_stored(cfg: &DecoderConfig, peak: usize, rounding: &CacheRounding) -> KvMemory {
    let (keys, values) = cfg.cached_elements();
    let (keys, values) = (keys as f64, values as f64);
    let f16_entry = (keys + values) * CACHE_ELEMENT_BYTES as f64;
    let quantized = !rounding.is_exact();
    let rounded_entry = if quantized { (keys * rounding.keys.bits_per_value() + values * rounding.values.bits_per_value()) / 8.0 } else { f16_entry };
    let layer_bytes = |held: usize| -> f64 {
        let exact = if quantized { rounding.full_precision_entries(held) } else { 0 };
        exact as f64 * f16_entry + (held - exact) as f64 * rounded_entry
    };
    let attention_layers = cfg.attention_layers();
    let held: Vec<usize> = attention_layers.iter().map(|&l| cfg.layer_window(l).map_or(peak, |w| w.min(peak))).collect();
    let windowed_layers = cfg.windowed_layers().len();
    let global_layers = attention_layers.len() - windowed_layers;
    let windowed_entries = cfg.windowed_layers().iter().map(|&l| cfg.layer_window(l).map_or(peak, |w| w.min(peak))).max();
    let recurrent_bytes = cfg.recurrent_elements() as u64 * STATE_ELEMENT_BYTES;
    KvMemory {
        global_entries: peak,
        windowed_entries,
        global_layers,
        windowed_layers,
        bytes: held.iter().map(|&h| layer_bytes(h)).sum::<f64>().ceil() as u64 + recurrent_bytes,
        bytes_without_windows: (attention_layers.len() as f64 * layer_bytes(peak)).ceil() as u64 + recurrent_bytes,
        stored_as: quantized.then_some(*rounding),
        recurrent_bytes,
    }
}

/// Bytes of one key or value element as the simulator keeps it (f32).
const SIMULATED_ELEMENT_BYTES: u64 = 4;

/// Refuses a run whose cache would hold `peak` entries per layer when that cache (kept in f32 by
/// the simulator) cannot fit in `available` bytes (`None`: unknown, nothing checked) — checked
/// before computing, so an impossible length fails at once instead of after hours.
pub fn check_fits(cfg: &DecoderConfig, peak: usize, what: &str, available: Option<u64>) -> Result<()> {
    let Some(available) = available else { return Ok(()) };
    // The simulator keeps a value beside every key, a latent-attention model's too (where an
    // engine reads its values from its keys).
    let kept_per_counted = if cfg.cached_elements().1 == 0 { 2 } else { 1 };
    let memory = kv_memory(cfg, peak);
    let entries = memory.bytes - memory.recurrent_bytes;
    let bytes = entries.saturating_mul(kept_per_counted * SIMULATED_ELEMENT_BYTES / CACHE_ELEMENT_BYTES).saturating_add(memory.recurrent_bytes);
    if bytes > available {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        return Err(Error::input(format!(
            "{what} keeps {peak} keys and values per layer: {:.1} GiB (f32) where {:.1} GiB is available; use a shorter length or a smaller cache",
            gib(bytes),
            gib(available)
        )));
    }
    Ok(())
}

impl KvMemory {
    /// "4.7 MiB (f16)" or "1.4 MiB (K q4_0 · V q4_0)" (and what the model's own windows saved,
    /// where they do).
    pub fn describe(&self) -> String {
        let format = self.stored_as.map_or_else(|| "f16".to_string(), |r| r.label());
        let mib = |b: u64| match b {
            b if b < 1 << 20 => format!("{:.1} KiB", b as f64 / 1024.0),
            b if b < 1 << 30 => format!("{:.1} MiB", b as f64 / (1 << 20) as f64),
            b => format!("{:.2} GiB", b as f64 / (1 << 30) as f64),
        };
        // "1 windowed layer holds", "3 windowed layers hold".
        let layers = |n: usize, kind: &str| if n == 1 { format!("1 {kind} layer holds") } else { format!("{n} {kind} layers hold") };
        match self.windowed_entries {
            Some(w) if self.bytes < self.bytes_without_windows => format!(
                "{} ({format}; {} up to {w} entries, {} global layer{} {}: {} if every layer held them)",
                mib(self.bytes),
                layers(self.windowed_layers, "windowed"),
                self.global_layers,
                if self.global_layers == 1 { "" } else { "s" },
                self.global_entries,
                mib(self.bytes_without_windows)
            ),
            _ if self.recurrent_bytes > 0 => format!(
                "{} ({format}; {} {} entries, plus {} of linear-attention state that no length changes)",
                mib(self.bytes),
                layers(self.global_layers, "attention"),
                self.global_entries,
                mib(self.recurrent_bytes)
            ),
            _ => format!("{} ({format})", mib(self.bytes)),
        }
    }
}

/// What a model's own windows imply for any cache policy, in a sentence (`None`: no windows).
pub fn model_windows_note(cfg: &DecoderConfig) -> Option<String> {
    let windows = cfg.windows();
    let w = describe_windows(&windows);
    let windowed = cfg.windowed_layers().len();
    (windowed > 0).then(|| {
        format!(
            "this model's own windows: {windowed} of its {} layers never see keys more than {w} back whatever the cache keeps, so a budget W applies in full to its {} global layers only; its windowed layers need at most {w} entries",
            cfg.n_layers,
            cfg.n_layers - windowed
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::decoder::LayerAttn;

    fn cfg(window: Option<usize>, global_every: Option<usize>) -> DecoderConfig {
        let layers = match window {
            Some(w) => LayerAttn::every_nth_global(6, global_every.unwrap_or(usize::MAX), w, 1e4, 1e4),
            None => vec![LayerAttn::global(1e4); 6],
        };
        DecoderConfig::tiny(1e4, layers)
    }

    #[test]
    fn a_quantized_cache_counts_its_formats_bits_and_its_exact_entries_at_f16() {
        use crate::numerics::cache_formats::CacheFormat;
        // 16 values per key: f16 64 bytes per entry (keys and values); q4_0 K and V 2·16·4.5/8 = 18.
        let q4 = CacheRounding { keys: CacheFormat::Q4_0, values: CacheFormat::Q4_0, ..CacheRounding::default() };
        let m = kv_memory_stored(&cfg(None, None), 1000, &q4);
        assert_eq!(m.bytes, 6 * 1000 * 18);
        let exact4 = CacheRounding { exact_first: 4, ..q4 };
        assert_eq!(kv_memory_stored(&cfg(None, None), 1000, &exact4).bytes, 6 * (4 * 64 + 996 * 18));
        assert_eq!(kv_memory_stored(&cfg(None, None), 16, &q4).describe(), "1.7 KiB (K q4_0 · V q4_0)");
        assert_eq!(kv_memory_stored(&cfg(None, None), 16, &CacheRounding::default()), kv_memory(&cfg(None, None), 16));
        // KIVI-2: 2-bit codes plus an f16 min and scale per 32 (3 bits a value: 2·16·3/8 = 12
        // bytes an entry), its recent window of R = 128 and the 4 exact first tokens at f16.
        let kivi = CacheRounding { keys: CacheFormat::Kivi2, values: CacheFormat::Kivi2, exact_first: 4, kivi_residual: Some(128), ..q4 };
        assert_eq!(kv_memory_stored(&cfg(None, None), 1000, &kivi).bytes, 6 * (132 * 64 + 868 * 12));
        assert_eq!(kv_memory_stored(&cfg(None, None), 100, &kivi).bytes, 6 * 100 * 64, "all within the window");
    }

    #[test]
    fn windowed_layers_hold_at_most_their_window() {
        // 2·16 elements of 2 bytes per entry per layer = 64 bytes.
        let plain = kv_memory(&cfg(None, None), 1000);
        assert_eq!((plain.bytes, plain.bytes_without_windows, plain.windowed_entries), (6 * 1000 * 64, 6 * 1000 * 64, None));
        // Gemma 3's pattern: layer 5 global, 0–4 windowed at 512.
        let gemma = kv_memory(&cfg(Some(512), Some(6)), 1000);
        assert_eq!((gemma.global_layers, gemma.windowed_layers, gemma.windowed_entries), (1, 5, Some(512)));
        assert_eq!(gemma.bytes, (1000 + 5 * 512) * 64);
        // Below the window nothing is saved.
        assert_eq!(kv_memory(&cfg(Some(512), Some(6)), 256).bytes, 6 * 256 * 64);
        assert!(model_windows_note(&cfg(Some(512), Some(6))).is_some_and(|n| n.contains("5 of its 6 layers")));
        assert!(model_windows_note(&cfg(None, None)).is_none());
        // Two windows: each windowed layer holds its own.
        let mut two = cfg(Some(512), Some(6));
        two.layers[0].window = Some(128);
        let mixed = kv_memory(&two, 1000);
        assert_eq!((mixed.bytes, mixed.windowed_entries), ((1000 + 128 + 4 * 512) * 64, Some(512)));
        assert!(model_windows_note(&two).is_some_and(|n| n.contains("more than 128 and 512 back")));
        assert_eq!(kv_memory(&cfg(None, None), 16).describe(), "6.0 KiB (f16)");
        assert!(check_fits(&cfg(None, None), 1000, "dense", Some(1 << 20)).is_ok(), "750 KiB in f32");
        let e = check_fits(&cfg(None, None), 100_000, "dense at 100000 tokens", Some(1 << 20)).unwrap_err().to_string();
        assert!(e.contains("dense at 100000 tokens keeps 100000 keys and values per layer"), "{e}");
        assert!(check_fits(&cfg(None, None), usize::MAX / 2, "x", None).is_ok(), "unknown memory: nothing checked");
        assert!(
            gemma
                .describe()
                .starts_with("222.5 KiB (f16; 5 windowed layers hold up to 512 entries, 1 global layer 1000: 375.0 KiB if every layer held them)"),
            "{}",
            gemma.describe()
        );
    }

    /// DeepSeek-V2-Lite's shapes (27 layers, 16 heads, latent 512, RoPE key 64, keys 128 + 64,
    /// values 128) against a dense model of the same width (16 heads of 128, keys and values).
    #[test]
    fn a_latent_cache_stores_one_row_per_token_and_layer() {
        use crate::model::decoder::config::Mla;
        let mla = Mla { q_lora_rank: 0, kv_lora_rank: 512, qk_nope: 128, qk_rope: 64, v_head: 128 };
        let mut lite = DecoderConfig::tiny(1e4, vec![LayerAttn::global(1e4); 27]);
        (lite.n_heads, lite.n_kv_heads, lite.d_head, lite.arch.mla) = (16, 1, mla.cached_width(), Some(mla));
        let mut dense = DecoderConfig::tiny(1e4, vec![LayerAttn::global(1e4); 27]);
        (dense.n_heads, dense.n_kv_heads, dense.d_head) = (16, 16, 128);
        // f16: 576 · 2 = 1,152 bytes per token and layer, against 2 · 16 · 128 · 2 = 8,192.
        assert_eq!(kv_memory(&lite, 1).bytes, 27 * 1152);
        assert_eq!(kv_memory(&dense, 1).bytes, 27 * 8192);
        // q8_0 keys: 576 · 8.5 / 8 = 612 bytes; the value format counts for nothing.
        use crate::numerics::cache_formats::CacheFormat;
        let q8 = CacheRounding { keys: CacheFormat::Q8_0, values: CacheFormat::Q8_0, ..CacheRounding::default() };
        assert_eq!(kv_memory_stored(&lite, 1000, &q8).bytes, 27 * 1000 * 612);
        // The simulator itself keeps keys and values in f32: 27 · 1000 · 2 · 576 · 4 bytes.
        let simulated = 27 * 1000 * 2 * 576 * 4;
        assert!(check_fits(&lite, 1000, "x", Some(simulated)).is_ok());
        assert!(check_fits(&lite, 1000, "x", Some(simulated - 1)).is_err());
    }

    /// Qwen3-Next-80B-A3B's shapes: 48 layers, every 4th attending (16 heads, 2 KV heads of 256),
    /// the rest Gated DeltaNet (16 key heads and 32 value heads of 128, a 4-tap convolution).
    #[test]
    fn a_hybrid_pays_for_its_attention_layers_per_token_and_a_fixed_state_besides() {
        use crate::model::decoder::config::DeltaNetShape;
        let layers = (0..48).map(|l| if (l + 1) % 4 == 0 { LayerAttn::global(1e7) } else { LayerAttn::linear(1e7) }).collect();
        let mut hybrid = DecoderConfig::tiny(1e7, layers);
        (hybrid.n_heads, hybrid.n_kv_heads, hybrid.d_head) = (16, 2, 256);
        hybrid.arch.delta_net = Some(DeltaNetShape { k_heads: 16, v_heads: 32, k_dim: 128, v_dim: 128, conv_kernel: 4 });
        let mut dense = DecoderConfig::tiny(1e7, vec![LayerAttn::global(1e7); 48]);
        (dense.n_heads, dense.n_kv_heads, dense.d_head) = (16, 2, 256);
        // f16 K and V: 2 · 2 · 256 · 2 = 2,048 bytes per token and attending layer.
        // The state, f32: per linear layer 32 · 128 · 128 + 3 · (2 · 16 · 128 + 32 · 128) elements.
        let state = 36 * (32 * 128 * 128 + 3 * 8192) * 4;
        assert_eq!(state, 79_036_416);
        let (h1, d1) = (kv_memory(&hybrid, 1), kv_memory(&dense, 1));
        assert_eq!((h1.bytes, h1.recurrent_bytes, h1.global_layers), (12 * 2048 + state, state, 12));
        assert_eq!(d1.bytes, 48 * 2048);
        // Per token the hybrid pays a quarter; its state is worth exactly 1,072 tokens of the
        // difference (36 · 2,048 bytes a token).
        let at = |n: usize| (kv_memory(&hybrid, n).bytes, kv_memory(&dense, n).bytes);
        assert!(at(1071).0 > at(1071).1 && at(1072).0 == at(1072).1 && at(1073).0 < at(1073).1);
        assert_eq!(at(32768), (12 * 2048 * 32768 + state, 48 * 2048 * 32768));
        assert!(h1.describe().contains("linear-attention state"), "{}", h1.describe());
    }
}
