//! Where a forward pass first goes non-finite: the residual stream is checked after each
//! sublayer, and when it holds a NaN or ∞ the sublayer's own tensors are searched in the order
//! they were computed, so the error names the first hook, layer and position that carry one — no
//! perplexity, verdict or figure is ever built on NaN. `info` searches the weights themselves
//! ([`scan_param`]), so a broken file is reported as such.

use std::ops::Range;

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use super::config::Param;

use crate::error::{Error, Result};
use crate::model::hook::HookPoint;
use crate::numerics::tensor::with_f32;

/// What makes a row of an activation unusable.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Unusable {
    /// An element is NaN or ∞.
    NonFinite(f32),
    /// Every element is finite but the row's sum of squares (what each RMS or layer norm, and
    /// the residual-norm reducers, compute in f32) is beyond f32's range: the norm would be ∞
    /// and the normalised row 0 — a wrong number, not a measurement.
    Overflow(f64),
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unusable::NonFinite(v) => write!(f, "goes non-finite ({v})"),
            Unusable::Overflow(squares) => write!(f, "overflows f32 (a row's sum of squares is {squares:.3e}, beyond f32's {:.3e})", f32::MAX),
        }
    }
}

/// The first row of `t` (rows along dimension 0) that is unusable, and why.
fn first_unusable(t: &Tensor) -> Result<Option<(usize, Unusable)>> {
    use rayon::prelude::*;
    let rows = t.dim(0)?.max(1);
    let width = (t.elem_count() / rows).max(1);
    let t = if t.is_contiguous() { t.clone() } else { t.contiguous()? };
    // Each row summed in order (f64, so the sum itself cannot overflow): the same verdicts on any
    // thread count.
    let verdicts: Vec<Option<Unusable>> = with_f32(&t, |v| v.par_chunks(width).map(row_verdict).collect())?;
    Ok(verdicts.into_iter().enumerate().find_map(|(row, v)| v.map(|v| (row, v))))
}

fn row_verdict(row: &[f32]) -> Option<Unusable> {
    if let Some(&bad) = row.iter().find(|x| !x.is_finite()) {
        return Some(Unusable::NonFinite(bad));
    }
    let squares: f64 = row.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
    (squares > f64::from(f32::MAX)).then_some(Unusable::Overflow(squares))
}

/// A weight tensor holding NaN or ∞.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NonFiniteWeight {
    /// The tensor's name as the decoder asks for it (llama.cpp's GGUF names).
    pub tensor: String,
    /// Non-finite elements.
    pub count: usize,
    pub elements: usize,
    /// The first one's flat index and value ("NaN", "inf" or "-inf": JSON has no such numbers).
    pub first_index: usize,
    pub first_value: String,
}

/// Searches one weight (dequantized when kept quantized) for NaN and ∞.
pub fn scan_param(name: &str, p: &Param) -> Result<Option<NonFiniteWeight>> {
    let dense = match p {
        Param::Dense(t) => t.flatten_all()?,
        Param::Quant(q) => q.dequantize(&candle_core::Device::Cpu)?.flatten_all()?,
    };
    with_f32(&dense, |v| {
        let first = v.iter().position(|x| !x.is_finite())?;
        Some(NonFiniteWeight {
            tensor: name.to_string(),
            count: v[first..].iter().filter(|x| !x.is_finite()).count(),
            elements: v.len(),
            first_index: first,
            first_value: v[first].to_string(),
        })
    })
}

/// Checks `result` (what joins the residual stream at `at`); when it holds a non-finite value or
/// a row whose norm overflows f32, names the first of `steps` (the tensors that led to it, in the
/// order computed) that does.
/// `rows` are the positions of the rows (several sequences may be stacked, each `rows.len()` long).
pub(super) fn refuse_non_finite(at: HookPoint, result: &Tensor, steps: &[(HookPoint, &Tensor)], rows: &Range<usize>) -> Result<()> {
    if first_unusable(result)?.is_none() {
        return Ok(());
    }
    for (hook, t) in steps.iter().copied().chain([(at, result)]) {
        if let Some((row, why)) = first_unusable(t)? {
            let position = rows.start + row % rows.len().max(1);
            return Err(unusable(hook, position, why));
        }
    }
    Err(Error::Internal(format!("{at} held a non-finite value that could not be found again")))
}

/// Next-token NLLs from finite hidden states are finite; a NaN or ∞ comes from the output head.
pub(super) fn refuse_non_finite_nll(nll: Vec<f64>) -> Result<Vec<f64>> {
    match nll.iter().position(|v| !v.is_finite()) {
        None => Ok(nll),
        Some(row) => Err(Error::input(format!(
            "the output head gives a non-finite next-token loss ({}) for row {row}: its weights hold a NaN or ∞; nothing was measured (check the file against its source)",
            nll[row]
        ))),
    }
}

fn unusable(hook: HookPoint, position: usize, why: Unusable) -> Error {
    Error::input(format!(
        "the forward pass {why} first at {hook}, position {position}: the model's weights there hold a NaN, an ∞ or values too large for f32 arithmetic; nothing was measured (check the file against its source, e.g. `sinkscope info --json`)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn the_first_step_holding_a_nan_is_named_with_its_position() {
        let clean = Tensor::zeros((3, 4), candle_core::DType::F32, &Device::Cpu).unwrap();
        let mut v = vec![0f32; 12];
        v[9] = f32::NAN;
        let broken = Tensor::from_vec(v, (3, 4), &Device::Cpu).unwrap();
        assert!(
            refuse_non_finite(HookPoint::ResidMid(2), &clean, &[(HookPoint::Q(2), &broken)], &(0..3)).is_ok(),
            "only the result is checked first"
        );
        let err =
            refuse_non_finite(HookPoint::ResidMid(2), &broken, &[(HookPoint::AttnIn(2), &clean), (HookPoint::Z(2), &broken)], &(5..8)).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("blocks.2.attn.hook_z, position 7") && msg.contains("NaN"), "{msg}");
        let inf = Tensor::from_vec(vec![0f32, f32::INFINITY], (2, 1), &Device::Cpu).unwrap();
        let msg = refuse_non_finite(HookPoint::Embed, &inf, &[], &(0..2)).unwrap_err().to_string();
        assert!(msg.contains("(inf) first at hook_embed, position 1"), "{msg}");
    }

    #[test]
    fn a_finite_row_whose_norm_overflows_f32_is_refused_too() {
        let big = Tensor::from_vec(vec![1f32, 2.0, 3e38, 3e38, 0.0, 0.0], (3, 2), &Device::Cpu).unwrap();
        let msg = refuse_non_finite(HookPoint::Embed, &big, &[], &(0..3)).unwrap_err().to_string();
        assert!(msg.contains("overflows f32") && msg.contains("first at hook_embed, position 1"), "{msg}");
        let fits = Tensor::from_vec(vec![1e19f32, 1e19], (1, 2), &Device::Cpu).unwrap();
        assert!(refuse_non_finite(HookPoint::Embed, &fits, &[], &(0..1)).is_ok(), "a sum of squares of 2e38 fits f32");
    }
}
