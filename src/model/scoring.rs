//! Next-token NLL from final-norm hidden states. Only log Σ exp(logits) and the target's logit
//! are needed, so a dense output head is read once per 512 rows, in vocabulary blocks (one task
//! each), and each block's logits are made one L2-sized tile at a time and folded into a running
//! log-sum-exp per row while the tile is in cache: no rows × vocab matrix, no pass over logits
//! that have left the cache.

use rayon::prelude::*;

use super::matmul::gemm_f32;
use crate::numerics::kernels::exp_f32;

/// Vocabulary entries per task.
const VOCAB_BLOCK: usize = 4096;
/// Vocabulary entries per tile: 512 rows × 256 logits (512 KiB) stay in a core's L2 between the
/// product that writes them and the log-sum-exp that reads them.
const TILE: usize = 256;
/// Hidden rows scored per pass (each pass reads the head once).
const ROW_CHUNK: usize = 512;

/// −log softmax(row)[target]: exponentials after subtracting the max, in eight f32 lanes per
/// 1,024-entry block (so a 49,152-entry row vectorizes, with the branch-free exp), blocks summed
/// in f64.
pub fn token_nll(row: &[f32], target: usize) -> f64 {
    let max = lane_max(row);
    (max as f64 + sum_exp(row, max).ln()) - row[target] as f64
}

fn lane_max(row: &[f32]) -> f32 {
    let mut top = [f32::NEG_INFINITY; 8];
    let chunks = row.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, &v) in top.iter_mut().zip(c) {
            *m = if v > *m { v } else { *m };
        }
    }
    top.iter().chain(rest).copied().fold(f32::NEG_INFINITY, f32::max)
}

crate::numerics::simd::vectorized_fn! {
    /// Σ exp(v − max) over the row.
    fn sum_exp(row: &[f32], max: f32) -> f64 {
        let mut sum = 0f64;
        for block in row.chunks(1024) {
            let mut lanes = [0f32; 8];
            let chunks = block.chunks_exact(8);
            let rest = chunks.remainder();
            for c in chunks {
                for (l, &v) in lanes.iter_mut().zip(c) {
                    *l += exp_f32(v - max);
                }
            }
            sum += lanes.iter().map(|&l| l as f64).sum::<f64>() + rest.iter().map(|&v| exp_f32(v - max) as f64).sum::<f64>();
        }
        sum
    }
}

/// The output head's weight as the scorer reads it.
pub(crate) enum HeadWeight<'a> {
    /// (vocab, d) row-major: a Linear (out, in) weight, e.g. tied embeddings.
    OutIn(&'a [f32]),
    /// (d, vocab) row-major.
    InOut(&'a [f32]),
}

/// One row's running log-sum-exp: Σ exp(logit − max) over the entries folded in so far.
#[derive(Clone, Copy)]
struct Partial {
    max: f32,
    sum: f64,
    target: Option<f32>,
}

impl Partial {
    const EMPTY: Partial = Partial { max: f32::NEG_INFINITY, sum: 0.0, target: None };

    /// Folds in `other` (entries not folded in yet), rescaling whichever sum has the smaller max.
    fn fold(&mut self, other: Partial) {
        if other.max > self.max {
            self.sum = self.sum * ((self.max - other.max) as f64).exp() + other.sum;
            self.max = other.max;
        } else if other.sum != 0.0 {
            // Skips only an empty partial: a tile of NaN logits (max −∞, sum NaN) still poisons
            // the row, so the caller's finiteness check refuses it.
            self.sum += other.sum * ((other.max - self.max) as f64).exp();
        }
        self.target = self.target.or(other.target);
    }
}

/// NLL of `targets[r]` under logits x[r] · W for x (rows, d) row-major.
pub(crate) fn streamed_nll(x: &[f32], d: usize, head: HeadWeight<'_>, vocab: usize, targets: &[u32]) -> Vec<f64> {
    let rows = targets.len();
    debug_assert!(x.len() >= rows * d);
    let mut out = Vec::with_capacity(rows);
    for r0 in (0..rows).step_by(ROW_CHUNK) {
        let m = ROW_CHUNK.min(rows - r0);
        let xs = &x[r0 * d..(r0 + m) * d];
        let ts = &targets[r0..r0 + m];
        let blocks: Vec<Vec<Partial>> = (0..vocab)
            .step_by(VOCAB_BLOCK)
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|b0| {
                let mut running = vec![Partial::EMPTY; m];
                let mut logits = vec![0f32; m * TILE];
                for j0 in (b0..vocab.min(b0 + VOCAB_BLOCK)).step_by(TILE) {
                    let vb = TILE.min(vocab - j0);
                    // The tile's (d, vb) slice of W: pointer and (row, column) strides.
                    let (w, rs, cs) = match head {
                        HeadWeight::OutIn(w) => (&w[j0 * d..(j0 + vb) * d], 1, d),
                        HeadWeight::InOut(w) => (&w[j0..(d - 1) * vocab + j0 + vb], vocab, 1),
                    };
                    // SAFETY: logits holds m×vb, xs m×d; (p, j) ↦ p·rs + j·cs stays inside w's
                    // slice for p < d, j < vb; the task owns its logits.
                    unsafe {
                        gemm_f32(m, vb, d, (logits.as_mut_ptr(), vb, 1), (xs.as_ptr(), d, 1), (w.as_ptr(), rs, cs), 1.0, gemm::Parallelism::None)
                    };
                    for ((row, &t), run) in logits[..m * vb].chunks(vb).zip(ts).zip(running.iter_mut()) {
                        let max = lane_max(row);
                        let t = t as usize;
                        run.fold(Partial { max, sum: sum_exp(row, max), target: (j0..j0 + vb).contains(&t).then(|| row[t - j0]) });
                    }
                }
                running
            })
            .collect();
        for r in 0..m {
            // Folded in block order, so the result does not depend on scheduling.
            let mut total = Partial::EMPTY;
            for b in &blocks {
                total.fold(b[r]);
            }
            out.push((total.max as f64 + total.sum.ln()) - total.target.unwrap_or(f32::NAN) as f64);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nll_of_uniform_row_is_log_vocab() {
        let row = vec![0.5f32; 8];
        assert!((token_nll(&row, 3) - 8f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn nll_matches_a_plain_f64_log_softmax() {
        // 1,003 entries (not a multiple of 8), spread over ±30.
        let row: Vec<f32> = (0..1003).map(|i| ((i * 7919) % 6000) as f32 / 100.0 - 30.0).collect();
        let max = row.iter().copied().fold(f64::NEG_INFINITY, |m, v| m.max(v as f64));
        let lse = max + row.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln();
        for target in [0, 500, 1002] {
            let want = lse - row[target] as f64;
            assert!((token_nll(&row, target) - want).abs() < 1e-6, "{target}");
        }
    }

    #[test]
    fn streamed_blocks_equal_full_rows_in_both_layouts() {
        // 3 rows, d = 5, vocab = 9,001 (two full blocks and a ragged one).
        let (rows, d, vocab) = (3, 5, 9001);
        let x: Vec<f32> = (0..rows * d).map(|i| ((i * 13) % 7) as f32 * 0.5 - 1.5).collect();
        let w: Vec<f32> = (0..vocab * d).map(|i| ((i * 7919) % 1000) as f32 * 0.004 - 2.0).collect();
        let w_t: Vec<f32> = (0..d * vocab).map(|i| w[(i % vocab) * d + i / vocab]).collect();
        let targets = [0u32, 4500, 9000];
        let full: Vec<f64> = (0..rows)
            .map(|r| {
                let logits: Vec<f32> = (0..vocab).map(|j| (0..d).map(|p| x[r * d + p] * w[j * d + p]).sum()).collect();
                token_nll(&logits, targets[r] as usize)
            })
            .collect();
        for got in [streamed_nll(&x, d, HeadWeight::OutIn(&w), vocab, &targets), streamed_nll(&x, d, HeadWeight::InOut(&w_t), vocab, &targets)] {
            for (g, f) in got.iter().zip(&full) {
                assert!((g - f).abs() < 1e-5, "{g} vs {f}");
            }
        }
    }

    #[test]
    fn streamed_nll_does_not_depend_on_the_thread_count() {
        // 600 rows (two row passes), vocab 9,001 (three blocks, the last ragged, in ragged tiles).
        let (rows, d, vocab) = (600, 24, 9001);
        let x: Vec<f32> = (0..rows * d).map(|i| ((i as f32) * 0.618).sin()).collect();
        let w: Vec<f32> = (0..vocab * d).map(|i| ((i as f32) * 0.377).cos() * 0.5).collect();
        let targets: Vec<u32> = (0..rows as u32).map(|r| (r * 7919) % vocab as u32).collect();
        let run = |threads: usize| -> Vec<u64> {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| streamed_nll(&x, d, HeadWeight::OutIn(&w), vocab, &targets)).iter().map(|v| v.to_bits()).collect()
        };
        let one = run(1);
        assert_eq!(one.len(), rows);
        assert!(one.iter().all(|&b| f64::from_bits(b).is_finite()));
        for threads in [2, 3, 7] {
            assert!(one == run(threads), "{threads} threads");
        }
    }

    #[test]
    fn a_tile_of_nan_logits_makes_the_nll_nan() {
        // Vocabulary entries 256..512 (the second tile) get NaN weights: every logit there is NaN.
        let (d, vocab) = (4, 1000);
        let mut w: Vec<f32> = (0..vocab * d).map(|i| (i % 13) as f32 * 0.1).collect();
        w[256 * d..512 * d].fill(f32::NAN);
        let x = vec![0.5f32; 2 * d];
        let nll = streamed_nll(&x, d, HeadWeight::OutIn(&w), vocab, &[3, 900]);
        assert_eq!(nll.len(), 2);
        assert!(nll.iter().all(|v| v.is_nan()), "{nll:?}");
    }
}
