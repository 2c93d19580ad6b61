//! α_k (Gu et al. 2024): the mean attention that the queries which can see key k pay to it.

/// α_k from a head's column mass Σ_i A[i,k] over T query rows: divided by the queries that can
/// see k — those at or after it, and on a layer with a sliding window of w keys only the w
/// queries k..k+w−1.
pub fn alpha(col_mass: &[f64], t: usize, k: usize, window: Option<usize>) -> f64 {
    match col_mass.get(k) {
        Some(&m) if t > k => m / seeing(t, k, window) as f64,
        _ => 0.0,
    }
}

/// How many of T queries can see key k (its own included), under an optional window.
pub fn seeing(t: usize, k: usize, window: Option<usize>) -> usize {
    let end = window.map_or(t, |w| (k + w).min(t));
    end.saturating_sub(k)
}
