//! Per-head sums a stream collects while it attends, for saying where a rounding cache's error
//! lands: each query head's attention on the stream's first positions (the sinks), and each KV
//! head's rounding error of the keys and values its cache stored, split into those positions and
//! the rest. `kv::divergence` runs an exact and a rounded stream in lockstep, each with a tally.

/// Relative errors ‖x̂ − x‖ / ‖x‖ and absolute ones ‖x̂ − x‖ of stored rows, summed apart for
/// the sink positions and the rest.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ErrorSums {
    pub sinks: f64,
    pub sinks_abs: f64,
    pub sink_rows: usize,
    pub rest: f64,
    pub rest_abs: f64,
    pub rest_rows: usize,
}

impl ErrorSums {
    /// Adds one row's relative error (a zero row counts as exact).
    pub fn add(&mut self, exact: &[f32], stored: &[f32], at_sink: bool) {
        let (mut err, mut norm) = (0f64, 0f64);
        for (&x, &y) in exact.iter().zip(stored) {
            err += ((y - x) as f64).powi(2);
            norm += (x as f64).powi(2);
        }
        let rel = if norm > 0.0 { (err / norm).sqrt() } else { 0.0 };
        match at_sink {
            true => (self.sinks += rel, self.sinks_abs += err.sqrt(), self.sink_rows += 1),
            false => (self.rest += rel, self.rest_abs += err.sqrt(), self.rest_rows += 1),
        };
    }

    /// Mean relative error at the sink positions (`None`: none stored).
    pub fn at_sinks(&self) -> Option<f64> {
        (self.sink_rows > 0).then(|| self.sinks / self.sink_rows as f64)
    }

    /// Mean relative error at the other positions.
    pub fn elsewhere(&self) -> Option<f64> {
        (self.rest_rows > 0).then(|| self.rest / self.rest_rows as f64)
    }

    /// Mean absolute errors ‖x̂ − x‖: (at the sink positions, elsewhere).
    pub fn absolute(&self) -> (Option<f64>, Option<f64>) {
        ((self.sink_rows > 0).then(|| self.sinks_abs / self.sink_rows as f64), (self.rest_rows > 0).then(|| self.rest_abs / self.rest_rows as f64))
    }
}

/// The sums, per layer; a layer's vectors are sized when it first attends.
#[derive(Debug, Clone, Default)]
pub struct HeadTally {
    /// Stream positions `0..sink_positions` are the sinks.
    pub sink_positions: usize,
    /// [layer][query head]: Σ over counted queries of the attention on the sink positions.
    pub sink_mass: Vec<Vec<f64>>,
    /// [layer]: queries counted (those at stream positions ≥ `sink_positions`, which could
    /// attend elsewhere).
    pub queries: Vec<usize>,
    /// [layer][KV head]: the rounding error of the keys and values stored.
    pub key_error: Vec<Vec<ErrorSums>>,
    pub value_error: Vec<Vec<ErrorSums>>,
}

impl HeadTally {
    pub fn new(sink_positions: usize) -> Self {
        HeadTally { sink_positions, ..Default::default() }
    }

    /// The layer's sums, created with `heads` query heads and `kv_heads` KV heads.
    pub(crate) fn layer(&mut self, layer: usize, heads: usize, kv_heads: usize) -> LayerTally<'_> {
        while self.sink_mass.len() <= layer {
            self.sink_mass.push(vec![0.0; heads]);
            self.queries.push(0);
            self.key_error.push(vec![ErrorSums::default(); kv_heads]);
            self.value_error.push(vec![ErrorSums::default(); kv_heads]);
        }
        LayerTally {
            sink_positions: self.sink_positions,
            sink_mass: &mut self.sink_mass[layer],
            queries: &mut self.queries[layer],
            key_error: &mut self.key_error[layer],
            value_error: &mut self.value_error[layer],
        }
    }
}

/// One layer's sums, borrowed while it attends.
pub(crate) struct LayerTally<'a> {
    pub sink_positions: usize,
    pub sink_mass: &'a mut [f64],
    pub queries: &'a mut usize,
    pub key_error: &'a mut [ErrorSums],
    pub value_error: &'a mut [ErrorSums],
}

/// Adds each row's error of `stored` against `exact` (both (heads, n, dh), flattened) to its
/// head's sums; row i of a head sits at stream position `positions[i]`.
pub(crate) fn add_errors(sums: &mut [ErrorSums], exact: &[f32], stored: &[f32], positions: &[usize], d_head: usize, sinks: usize) {
    let n = positions.len();
    for (row, (x, y)) in exact.chunks_exact(d_head).zip(stored.chunks_exact(d_head)).enumerate() {
        sums[row / n].add(x, y, positions[row % n] < sinks);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_errors_are_split_at_the_sink_positions() {
        let mut sums = vec![ErrorSums::default(); 2];
        // Two heads × positions [0, 5], dh = 2: head 0 exact at 0, 10% off at 5; head 1 50% off at 0.
        let exact = [1.0, 0.0, 3.0, 4.0, 2.0, 0.0, 0.0, 1.0];
        let stored = [1.0, 0.0, 3.3, 4.4, 1.0, 0.0, 0.0, 1.0];
        add_errors(&mut sums, &exact, &stored, &[0, 5], 2, 1);
        assert_eq!(sums[0].at_sinks(), Some(0.0));
        assert!((sums[0].elsewhere().unwrap() - 0.1).abs() < 1e-6);
        assert!((sums[1].at_sinks().unwrap() - 0.5).abs() < 1e-9);
        assert_eq!(sums[1].elsewhere(), Some(0.0));
        assert!((sums[0].absolute().1.unwrap() - 0.5).abs() < 1e-6 && (sums[1].absolute().0.unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(ErrorSums::default().at_sinks(), None);
    }
}
