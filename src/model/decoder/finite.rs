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

/// The first non-finite element of `t` (rows along dimension 0), as (row, value).
fn first_non_finite(t: &Tensor) -> Result<Option<(usize, f32)>> {
    let rows = t.dim(0)?.max(1);
    let width = (t.elem_count() / rows).max(1);
    let t = if t.is_contiguous() { t.clone() } else { t.contiguous()? };
    with_f32(&t, |v| v.iter().position(|x| !x.is_finite()).map(|i| (i / width, v[i])))
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

/// Checks `result` (what joins the residual stream at `at`); when it holds a non-finite value,
/// names the first of `steps` (the tensors that led to it, in the order computed) that does.
/// `rows` are the positions of the rows (several sequences may be stacked, each `rows.len()` long).
pub(super) fn refuse_non_finite(at: HookPoint, result: &Tensor, steps: &[(HookPoint, &Tensor)], rows: &Range<usize>) -> Result<()> {
    if first_non_finite(result)?.is_none() {
        return Ok(());
    }
    for (hook, t) in steps.iter().copied().chain([(at, result)]) {
        if let Some((row, value)) = first_non_finite(t)? {
            let position = rows.start + row % rows.len().max(1);
            return Err(non_finite(hook, position, value));
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

fn non_finite(hook: HookPoint, position: usize, value: f32) -> Error {
    Error::input(format!(
        "the forward pass goes non-finite ({value}) first at {hook}, position {position}: the model's weights there hold a NaN or ∞, or its activations overflow f32; nothing was measured (check the file against its source, e.g. `sinkscope info --json`)"
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
}
