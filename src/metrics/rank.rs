//! Spearman's rank correlation: how alike two scorings order the same items (ties get their
//! mean rank), e.g. two kinds of evidence for which heads retrieve.

/// Ranks 1..n of `x` in ascending order, tied values sharing their mean rank.
fn ranks(x: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..x.len()).collect();
    order.sort_by(|&a, &b| x[a].total_cmp(&x[b]));
    let mut out = vec![0.0; x.len()];
    let mut i = 0;
    while i < order.len() {
        let j = (i..order.len()).take_while(|&j| x[order[j]] == x[order[i]]).last().unwrap_or(i);
        let mean = (i + j) as f64 / 2.0 + 1.0;
        for &k in &order[i..=j] {
            out[k] = mean;
        }
        i = j + 1;
    }
    out
}

/// Spearman's ρ of `a` and `b` (Pearson's correlation of their ranks); `None` when the lengths
/// differ, fewer than 2 items, a value is not finite, or either side is constant.
pub fn spearman(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() != b.len() || a.len() < 2 || a.iter().chain(b).any(|v| !v.is_finite()) {
        return None;
    }
    let (ra, rb) = (ranks(a), ranks(b));
    let n = a.len() as f64;
    let mean = (n + 1.0) / 2.0;
    let (mut cov, mut va, mut vb) = (0.0, 0.0, 0.0);
    for (x, y) in ra.iter().zip(&rb) {
        cov += (x - mean) * (y - mean);
        va += (x - mean) * (x - mean);
        vb += (y - mean) * (y - mean);
    }
    (va > 0.0 && vb > 0.0).then(|| cov / (va * vb).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spearman_matches_worked_values() {
        // Monotone in either direction: ±1.
        assert_eq!(spearman(&[1.0, 2.0, 3.0, 4.0], &[10.0, 20.0, 25.0, 100.0]), Some(1.0));
        assert_eq!(spearman(&[1.0, 2.0, 3.0, 4.0], &[4.0, 3.0, 2.0, 1.0]), Some(-1.0));
        // Ranks (1,2,3,4,5) and (2,1,4,3,5): d² sums to 4, ρ = 1 − 6·4/(5·24) = 0.8.
        let rho = spearman(&[1.0, 2.0, 3.0, 4.0, 5.0], &[2.0, 1.0, 4.0, 3.0, 5.0]).unwrap();
        assert!((rho - 0.8).abs() < 1e-12, "{rho}");
        // Ties share ranks: (1, 2.5, 2.5, 4) against (1, 2, 3, 4).
        let tied = spearman(&[0.0, 1.0, 1.0, 2.0], &[0.0, 1.0, 2.0, 3.0]).unwrap();
        assert!((tied - 4.5 / (4.5f64 * 5.0).sqrt()).abs() < 1e-12, "{tied}");
        assert_eq!(spearman(&[1.0, 1.0], &[1.0, 2.0]), None, "constant");
        assert_eq!(spearman(&[1.0, 2.0], &[1.0]), None, "lengths differ");
        assert_eq!(spearman(&[1.0, f64::NAN], &[1.0, 2.0]), None, "not finite");
    }
}
