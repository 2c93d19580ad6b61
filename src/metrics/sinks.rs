//! α_k (Gu et al. 2024): the mean attention that queries at or after key k pay to it.

/// α_k from a head's column mass Σ_i A[i,k] over T query rows.
pub fn alpha(col_mass: &[f64], t: usize, k: usize) -> f64 {
    match col_mass.get(k) {
        Some(&m) if t > k => m / (t - k) as f64,
        _ => 0.0,
    }
}
