//! Memory estimate for a capture, made before the model runs, so a capture that cannot fit is
//! refused with the numbers instead of being killed halfway.

use serde::{Deserialize, Serialize};

use crate::model::decoder::DecoderConfig;
use crate::model::hook::{HookFilter, HookPoint};

/// Bytes by category.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemoryEstimate {
    pub weights: u64,
    pub activations: u64,
    pub reducers: u64,
    pub saved_tensors: u64,
    pub total: u64,
}

/// Elements of one hook's full tensor over `t` positions (attention maps: [head, t, t]).
pub fn hook_elements(cfg: &DecoderConfig, hook: &HookPoint, t: u64) -> u64 {
    let (d, h, kvh, dh, ff) = (cfg.d_model as u64, cfg.n_heads as u64, cfg.n_kv_heads as u64, cfg.d_head as u64, cfg.d_ff as u64);
    match hook {
        HookPoint::Embed
        | HookPoint::LnFinal
        | HookPoint::ResidPre(_)
        | HookPoint::ResidMid(_)
        | HookPoint::ResidPost(_)
        | HookPoint::AttnOut(_)
        | HookPoint::AttnIn(_)
        | HookPoint::MlpIn(_) => t * d,
        HookPoint::Q(_) | HookPoint::Z(_) | HookPoint::Gate(_) => t * h * dh,
        HookPoint::K(_) | HookPoint::V(_) => t * kvh * dh,
        HookPoint::AttnScores(_) | HookPoint::Pattern(_) => h * t * t,
        HookPoint::SinkProb(_) => h * t,
        HookPoint::MlpPost(_) => t * ff,
    }
}

/// Estimates peak memory of a forward over `t` tokens with the standard reducers, the pooled
/// heatmaps when `heatmap` = Some((bins, first keys)), plus the full tensors `save` selects.
/// `weight_bytes` is the in-memory size of the loaded weights.
pub fn estimate(cfg: &DecoderConfig, t: usize, weight_bytes: u64, save: Option<&HookFilter>, heatmap: Option<(usize, usize)>) -> MemoryEstimate {
    let t64 = t as u64;
    let (d, ff, h, kvh, dh, l) =
        (cfg.d_model as u64, cfg.d_ff as u64, cfg.n_heads as u64, cfg.n_kv_heads as u64, cfg.d_head as u64, cfg.n_layers as u64);
    // Live per-layer tensors: residual, normed input, q|k|v, roped copies, attention output,
    // gate|up, activation, plus one attention block (bounded) and a logits chunk.
    let per_layer = t64 * (4 * d + 2 * (h + 2 * kvh) * dh + 3 * ff) * 4;
    let attention_block = 2 * (32u64 << 20);
    let logits_chunk = 64 * cfg.vocab_size as u64 * 4;
    let activations = per_layer + attention_block + logits_chunk;
    // Column masses (f64) per layer, head and key; norms and top-k are smaller.
    let reducers = l * h * t64 * 8 + l * t64 * 3 * 4 + 2 * l * kvh * t64 * 4 + l * d * 4;
    // Heatmaps: per layer and head a G×G grid and G×K early columns, f32.
    let reducers = reducers
        + heatmap.map_or(0, |(bins, k)| {
            let g = bins.min(t).max(1) as u64;
            l * h * g * (g + k.min(t) as u64) * 4
        });
    let saved_tensors =
        save.map(|f| HookPoint::all(cfg.n_layers).iter().filter(|hk| f.matches(hk)).map(|hk| hook_elements(cfg, hk, t64) * 4).sum()).unwrap_or(0);
    let total = weight_bytes + activations + reducers + saved_tensors;
    MemoryEstimate { weights: weight_bytes, activations, reducers, saved_tensors, total }
}

/// This process's peak resident set size so far (Linux `VmHWM`), if known.
pub fn peak_rss_bytes() -> Option<u64> {
    proc_kb("/proc/self/status", "VmHWM:")
}

/// A "Key:   N kB" line of a /proc file, in bytes.
fn proc_kb(file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let kb: u64 = text.lines().find(|l| l.starts_with(key))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

pub fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::decoder::{ArchSwitches, LayerAttn};
    use crate::model::rope::RopeLayout;

    fn smollm() -> DecoderConfig {
        DecoderConfig {
            n_layers: 30,
            n_heads: 9,
            n_kv_heads: 3,
            d_model: 576,
            d_head: 64,
            d_ff: 1536,
            vocab_size: 49152,
            context_len: 8192,
            rope_theta: 1e5,
            rope_layout: RopeLayout::Interleaved,
            rope_freq_factors: None,
            rms_eps: 1e-5,
            arch: ArchSwitches::default(),
            layers: vec![LayerAttn::global(1e5); 30],
        }
    }

    #[test]
    fn full_patterns_dominate_and_scale_quadratically() {
        let cfg = smollm();
        let all = HookFilter::parse("hook_pattern", 30).unwrap();
        let e = estimate(&cfg, 8192, 0, Some(&all), None);
        // DESIGN §5: 30·9·8192²·4 bytes ≈ 72 GB.
        assert_eq!(e.saved_tensors, 30 * 9 * 8192 * 8192 * 4);
        let reduced = estimate(&cfg, 8192, 0, None, None);
        assert!(reduced.total < 2 << 30, "reducers-only capture at 8k should fit in 2 GiB: {reduced:?}");
        // The pooled heatmaps: 30 layers × 9 heads × 128 bins × (128 + 16) columns of f32 ≈ 20 MB.
        let with_maps = estimate(&cfg, 8192, 0, None, Some((128, 16)));
        assert_eq!(with_maps.reducers - reduced.reducers, 30 * 9 * 128 * (128 + 16) * 4);
    }
}
