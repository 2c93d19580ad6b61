//! Head dependency, causally (DESIGN §6): hide key position k from one head (or a whole layer) and
//! measure how the next-token predictions of the later tokens change — ΔNLL (mean over the scored
//! rows of NLL_masked − NLL_clean, nats) and KL(P_clean ‖ P_masked) (mean over rows, nats).
//! This module holds the math; `capture::ablation` runs the masked passes and owns the result type.

use rayon::prelude::*;

use crate::numerics::kernels::exp_f32;

/// log-softmax of each row of a [rows, vocab] matrix (exponentials in f32, sums in f64), rows in
/// parallel.
pub fn log_softmax_rows(logits: &[f32], vocab: usize) -> Vec<f32> {
    let mut out = vec![0f32; logits.len()];
    out.par_chunks_mut(vocab).zip(logits.par_chunks(vocab)).for_each(|(o, row)| {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        o.iter_mut().zip(row).for_each(|(o, &x)| *o = exp_f32(x - max));
        let lse = max as f64 + o.iter().map(|&e| e as f64).sum::<f64>().ln();
        o.iter_mut().zip(row).for_each(|(o, &x)| *o = (x as f64 - lse) as f32);
    });
    out
}

/// KL(P ‖ Q) of each row, for log-probabilities `p_logp` and `q_logp` of matching rows (at least
/// 0, as in [`compare_rows`]); rows run in parallel and come back in order.
pub fn kl_rows(p_logp: &[f32], q_logp: &[f32], vocab: usize) -> Vec<f64> {
    p_logp
        .par_chunks(vocab)
        .zip(q_logp.par_chunks(vocab))
        .map(|(p, q)| p.iter().zip(q).map(|(&lp, &lq)| (exp_f32(lp) * (lp - lq)) as f64).sum::<f64>().max(0.0))
        .collect()
}

/// Sums over rows of (NLL_masked − NLL_clean) and KL(P_clean ‖ P_masked), for log-probabilities
/// of matching rows and the target token of each row. Rows run in parallel, but their results
/// are added in row order, so the sums do not depend on the number of threads or on scheduling.
/// A row's KL is at least 0: the divergence cannot be negative, and a computed Σ p (lc − lm) below
/// zero is the rounding of a KL of (nearly) 0 — two f32 log-softmaxes of the same logits.
pub fn compare_rows(clean_logp: &[f32], masked_logp: &[f32], vocab: usize, targets: &[u32]) -> (f64, f64) {
    let rows: Vec<(f64, f64)> = clean_logp
        .par_chunks(vocab)
        .zip(masked_logp.par_chunks(vocab))
        .zip(targets.par_iter())
        .map(|((c, m), &t)| {
            let dnll = (c[t as usize] - m[t as usize]) as f64;
            let kl: f64 = c.iter().zip(m).map(|(&lc, &lm)| (exp_f32(lc) * (lc - lm)) as f64).sum();
            (dnll, kl.max(0.0))
        })
        .collect();
    rows.iter().fold((0.0, 0.0), |acc, r| (acc.0 + r.0, acc.1 + r.1))
}

/// One clean row's log-probabilities and its target token, for scoring variants against it.
pub struct CleanRow<'a> {
    pub logp: &'a [f32],
    pub target: u32,
}

/// (NLL_masked − NLL_clean, KL(P_clean ‖ P_masked)) of one row from the masked row's raw logits:
/// the same numbers [`log_softmax_rows`] then [`compare_rows`] give, bit for bit, without storing
/// the masked log-probabilities.
pub fn compare_logit_row(clean: &CleanRow, logits: &[f32]) -> (f64, f64) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse = max as f64 + logits.iter().map(|&x| exp_f32(x - max) as f64).sum::<f64>().ln();
    let lm = |x: f32| (x as f64 - lse) as f32;
    let t = clean.target as usize;
    let dnll = (clean.logp[t] - lm(logits[t])) as f64;
    let kl: f64 = clean.logp.iter().zip(logits).map(|(&lc, &x)| (exp_f32(lc) * (lc - lm(x))) as f64).sum();
    (dnll, kl.max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scoring_raw_logits_is_log_softmax_then_compare_bit_for_bit() {
        let vocab = 301;
        let clean: Vec<f32> = (0..8 * vocab).map(|i| ((i as f32) * 0.377).sin() * 7.0).collect();
        let masked: Vec<f32> = clean.iter().enumerate().map(|(i, &x)| x + ((i as f32) * 1.3).cos() * 0.8).collect();
        let targets: Vec<u32> = (0..8).map(|r| (r * 37 % vocab) as u32).collect();
        let (c, m) = (log_softmax_rows(&clean, vocab), log_softmax_rows(&masked, vocab));
        for r in 0..8 {
            let row = r * vocab..(r + 1) * vocab;
            let want = compare_rows(&c[row.clone()], &m[row.clone()], vocab, &targets[r..r + 1]);
            let got = compare_logit_row(&CleanRow { logp: &c[row.clone()], target: targets[r] }, &masked[row]);
            assert_eq!((got.0.to_bits(), got.1.to_bits()), (want.0.to_bits(), want.1.to_bits()), "row {r}");
        }
    }

    #[test]
    fn identical_predictions_have_zero_effect() {
        let logp = log_softmax_rows(&[1.0, 2.0, 3.0, 0.0, 0.0, 0.0], 3);
        let (d, kl) = compare_rows(&logp, &logp, 3, &[2, 0]);
        assert_eq!(d, 0.0);
        assert!(kl.abs() < 1e-12);
    }

    #[test]
    fn known_kl_and_nll_change() {
        // Clean: uniform over 2; masked: p = (0.8, 0.2). Target 0.
        let clean = log_softmax_rows(&[0.0, 0.0], 2);
        let masked = vec![0.8f32.ln(), 0.2f32.ln()];
        let (d, kl) = compare_rows(&clean, &masked, 2, &[0]);
        assert!((d - (0.5f64.ln() - 0.8f64.ln())).abs() < 1e-6);
        let want_kl = 0.5 * (0.5f64 / 0.8).ln() + 0.5 * (0.5f64 / 0.2).ln();
        assert!((kl - want_kl).abs() < 1e-6);
    }

    #[test]
    fn kl_is_never_negative_and_sums_do_not_depend_on_threads() {
        // Rows whose masked distribution is the clean one rounded differently: KL ≈ 0 either side.
        let vocab = 257;
        let logits: Vec<f32> = (0..64 * vocab).map(|i| ((i as f32) * 0.618).sin() * 9.0).collect();
        let nudged: Vec<f32> = logits.iter().enumerate().map(|(i, &x)| if i % 7 == 0 { x + 1e-6 } else { x }).collect();
        let (c, m) = (log_softmax_rows(&logits, vocab), log_softmax_rows(&nudged, vocab));
        let targets: Vec<u32> = (0..64).map(|r| (r * 13 % vocab) as u32).collect();
        let (_, kl) = compare_rows(&c, &m, vocab, &targets);
        assert!(kl >= 0.0, "KL {kl}");
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap().install(|| compare_rows(&c, &m, vocab, &targets));
        let many = rayon::ThreadPoolBuilder::new().num_threads(4).build().unwrap().install(|| compare_rows(&c, &m, vocab, &targets));
        assert_eq!(one.0.to_bits(), many.0.to_bits());
        assert_eq!(one.1.to_bits(), many.1.to_bits());
    }
}
