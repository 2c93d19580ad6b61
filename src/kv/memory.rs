//! What a KV cache costs on a model: entries and bytes per layer at a cache's peak, where a layer
//! trained with a sliding window never holds more keys than its window whatever the policy keeps
//! (Gemma 3's local layers: 512), so only the global layers pay for a long budget.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::decoder::config::describe_windows;
use crate::model::decoder::DecoderConfig;

/// Bytes of one stored key or value element: f16, the cache type llama.cpp and vLLM default to.
pub const CACHE_ELEMENT_BYTES: u64 = 2;

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
    /// Bytes of keys and values over every layer at the peak (f16).
    pub bytes: u64,
    /// What the same peak would take if every layer held it (the model's windows ignored).
    pub bytes_without_windows: u64,
}

/// The memory of a cache whose queries see at most `peak` entries, on `cfg`'s layers.
pub fn kv_memory(cfg: &DecoderConfig, peak: usize) -> KvMemory {
    let per_entry = 2 * (cfg.n_kv_heads * cfg.d_head) as u64 * CACHE_ELEMENT_BYTES;
    let held: Vec<usize> = cfg.layer_windows().iter().map(|w| w.map_or(peak, |w| w.min(peak))).collect();
    let windowed_layers = cfg.windowed_layers().len();
    let global_layers = cfg.n_layers - windowed_layers;
    let windowed_entries = cfg.windowed_layers().iter().map(|&l| held[l]).max();
    let entries: usize = held.iter().sum();
    KvMemory {
        global_entries: peak,
        windowed_entries,
        global_layers,
        windowed_layers,
        bytes: entries as u64 * per_entry,
        bytes_without_windows: (cfg.n_layers * peak) as u64 * per_entry,
    }
}

/// Bytes of one key or value element as the simulator keeps it (f32).
const SIMULATED_ELEMENT_BYTES: u64 = 4;

/// Refuses a run whose cache would hold `peak` entries per layer when that cache (kept in f32 by
/// the simulator) cannot fit in `available` bytes (`None`: unknown, nothing checked) — checked
/// before computing, so an impossible length fails at once instead of after hours.
pub fn check_fits(cfg: &DecoderConfig, peak: usize, what: &str, available: Option<u64>) -> Result<()> {
    let Some(available) = available else { return Ok(()) };
    let bytes = kv_memory(cfg, peak).bytes.saturating_mul(SIMULATED_ELEMENT_BYTES / CACHE_ELEMENT_BYTES);
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
    /// "4.7 MiB (f16)" (and what the model's own windows saved, where they do).
    pub fn describe(&self) -> String {
        let mib = |b: u64| match b {
            b if b < 1 << 20 => format!("{:.1} KiB", b as f64 / 1024.0),
            b if b < 1 << 30 => format!("{:.1} MiB", b as f64 / (1 << 20) as f64),
            b => format!("{:.2} GiB", b as f64 / (1 << 30) as f64),
        };
        match self.windowed_entries {
            Some(w) if self.bytes < self.bytes_without_windows => format!(
                "{} (f16; {} windowed layer{} hold{} up to {w} entries, {} global layer{} {}: {} if every layer held them)",
                mib(self.bytes),
                self.windowed_layers,
                if self.windowed_layers == 1 { "" } else { "s" },
                if self.windowed_layers == 1 { "s" } else { "" },
                self.global_layers,
                if self.global_layers == 1 { "" } else { "s" },
                self.global_entries,
                mib(self.bytes_without_windows)
            ),
            _ => format!("{} (f16)", mib(self.bytes)),
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
}
