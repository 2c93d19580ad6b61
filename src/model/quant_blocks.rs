//! The GGUF block types `--quantized` packs (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K), read
//! from the file's bits as runs of `scale · w + offset` with w a small signed integer: each type's
//! layout written once, for `quant_matmul` to pack.

use candle_core::quantized::GgmlDType;
use half::f16;

/// (weights per run, bytes per block, weights per block) of the block types packed.
pub(crate) fn block_layout(dtype: GgmlDType) -> Option<(usize, usize, usize)> {
    Some(match dtype {
        GgmlDType::Q4_0 => (32, 18, 32),
        GgmlDType::Q4_1 => (32, 20, 32),
        GgmlDType::Q5_0 => (32, 22, 32),
        GgmlDType::Q5_1 => (32, 24, 32),
        GgmlDType::Q8_0 => (32, 34, 32),
        GgmlDType::Q4K => (32, 144, 256),
        GgmlDType::Q5K => (32, 176, 256),
        GgmlDType::Q6K => (16, 210, 256),
        _ => return None,
    })
}

/// Splits one GGUF block (a type [`block_layout`] knows) into runs of `scale · w + offset`: the
/// block's w values into `w`, each run's (scale, offset) into `affine`, in order. The file's
/// unsigned codes u are centred (w = u − half their range) with the offset moved to match, so
/// |w| is as small as the type allows (the activations' rounding error scales with it).
pub(crate) fn unpack_block(dtype: GgmlDType, b: &[u8], w: &mut [i8; 256], affine: &mut [(f32, f32); 16]) {
    let h = |i: usize| f16::from_le_bytes([b[i], b[i + 1]]).to_f32();
    match dtype {
        GgmlDType::Q4_0 | GgmlDType::Q4_1 => {
            // Q4_0: d · (u − 8); Q4_1: d · u + m = d · (u − 8) + (m + 8d).
            let (d, offset, qs) = if dtype == GgmlDType::Q4_0 { (h(0), 0.0, &b[2..18]) } else { (h(0), h(2) + 8.0 * h(0), &b[4..20]) };
            for (j, &byte) in qs.iter().enumerate() {
                w[j] = (byte & 0xF) as i8 - 8;
                w[j + 16] = (byte >> 4) as i8 - 8;
            }
            affine[0] = (d, offset);
        }
        GgmlDType::Q5_0 | GgmlDType::Q5_1 => {
            // The fifth bit of weight j is bit j of qh. Q5_0: d · (u − 16); Q5_1: d · u + m.
            let (d, offset, qh, qs) =
                if dtype == GgmlDType::Q5_0 { (h(0), 0.0, &b[2..6], &b[6..22]) } else { (h(0), h(2) + 16.0 * h(0), &b[4..8], &b[8..24]) };
            let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
            for (j, &byte) in qs.iter().enumerate() {
                w[j] = ((byte & 0xF) | ((((qh >> j) & 1) as u8) << 4)) as i8 - 16;
                w[j + 16] = ((byte >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4)) as i8 - 16;
            }
            affine[0] = (d, offset);
        }
        GgmlDType::Q8_0 => {
            for (w, &q) in w.iter_mut().zip(&b[2..34]) {
                *w = q as i8;
            }
            affine[0] = (h(0), 0.0);
        }
        GgmlDType::Q4K | GgmlDType::Q5K => {
            // Sub-block j: d·sc_j · u − dmin·m_j, centred on 8 (Q4_K) or 16 (Q5_K).
            let (d, dmin, scales) = (h(0), h(2), &b[4..16]);
            let (qh, qs, centre) = if dtype == GgmlDType::Q5K { (Some(&b[16..48]), &b[48..176], 16) } else { (None, &b[16..144], 8) };
            for (j, a) in affine.iter_mut().take(8).enumerate() {
                let (sc, m) = scale_min_k4(j, scales);
                let scale = d * sc as f32;
                *a = (scale, centre as f32 * scale - dmin * m as f32);
            }
            for chunk in 0..4 {
                for l in 0..32 {
                    let byte = qs[chunk * 32 + l];
                    let (hi_lo, hi_hi) = match qh {
                        Some(qh) => (((qh[l] >> (2 * chunk)) & 1) << 4, ((qh[l] >> (2 * chunk + 1)) & 1) << 4),
                        None => (0, 0),
                    };
                    w[chunk * 64 + l] = ((byte & 0xF) | hi_lo) as i8 - centre;
                    w[chunk * 64 + 32 + l] = ((byte >> 4) | hi_hi) as i8 - centre;
                }
            }
        }
        GgmlDType::Q6K => {
            // Sub-block j of 16: d·sc_j · (u − 32).
            let (ql, qh, scales, d) = (&b[0..128], &b[128..192], &b[192..208], h(208));
            for half in 0..2 {
                let (ql, qh, o) = (&ql[half * 64..], &qh[half * 32..], half * 128);
                for l in 0..32 {
                    w[o + l] = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
                    w[o + l + 32] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                    w[o + l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                    w[o + l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                }
            }
            for (a, &s) in affine.iter_mut().zip(scales) {
                *a = (d * (s as i8) as f32, 0.0);
            }
        }
        _ => {}
    }
}

/// The j-th 6-bit (scale, min) pair of a Q4_K/Q5_K block's 12 packed bytes.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}
