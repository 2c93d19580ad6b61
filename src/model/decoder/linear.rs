//! The model's linear maps: y = x Wᵀ (+ b) over dense (pre-transposed f32, bf16/f16 widened in
//! blocks, or shared with the embedding) or quantized weights, and fused projections of one input
//! (q|k|v, gate|up).

use candle_core::quantized::QMatMul;
use candle_core::{DType, Device, Module, Tensor};

use super::config::Param;
use crate::error::Result;
use crate::model::matmul::{matmul_half_weight, matmul_split_rows};
use crate::model::quant_matmul::PackedWeight;

/// y = x Wᵀ (+ b) for x of shape (T, in).
pub(crate) struct Linear {
    pub(crate) weight: LinearWeight,
    pub(crate) bias: Option<Tensor>,
}

pub(crate) enum LinearWeight {
    /// Stored transposed, (in, out) contiguous, so gemm reads the weight row by row.
    DenseT(Tensor),
    /// (out, in) used through a transposed view: the tied output head shares the embedding.
    Dense(Tensor),
    /// (out, in) bf16 or f16, widened to f32 a block of output rows at a time.
    Half(Tensor),
    /// `--quantized`: GGUF blocks as 8-bit integers, multiplied with 8-bit activations.
    Packed(PackedWeight),
    /// `--quantized` for a block type not packed: candle's quantized matmul.
    Quant(QMatMul),
}

impl Linear {
    pub(crate) fn new(p: Param, bias: Option<Tensor>) -> Result<Self> {
        let weight = match p {
            Param::Dense(t) if t.dtype() == DType::F32 => LinearWeight::DenseT(t.t()?.contiguous()?),
            Param::Dense(t) => LinearWeight::Half(t.contiguous()?),
            Param::Quant(q) => match PackedWeight::new(&q)? {
                Some(packed) => LinearWeight::Packed(packed),
                None => LinearWeight::Quant(QMatMul::from_arc(q)?),
            },
        };
        Ok(Linear { weight, bias })
    }

    /// A linear map that reads `w` (out, in) in place, without a transposed copy.
    pub(crate) fn shared(w: Tensor) -> Self {
        let weight = if w.dtype() == DType::F32 { LinearWeight::Dense(w) } else { LinearWeight::Half(w) };
        Linear { weight, bias: None }
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = match &self.weight {
            LinearWeight::DenseT(wt) => matmul_split_rows(x, wt, false)?,
            LinearWeight::Dense(w) => matmul_split_rows(x, w, true)?,
            LinearWeight::Half(w) => matmul_half_weight(x, w)?,
            LinearWeight::Packed(p) => p.forward(x)?,
            LinearWeight::Quant(q) => q.forward(x)?,
        };
        Ok(match &self.bias {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        })
    }
}

/// Several projections of the same input. Dense weights are concatenated into one matmul at load
/// time (q|k|v, gate|up), and so are quantized ones packed with the same run length; others stay
/// separate.
pub(crate) struct Projection {
    parts: Vec<Linear>,
}

impl Projection {
    pub(crate) fn new(params: Vec<(Param, Option<Tensor>)>) -> Result<Self> {
        let widths: Vec<usize> = params.iter().map(|(p, _)| p.shape()[0]).collect();
        let bias = fused_bias(&params, &widths)?;
        if params.iter().all(|(p, _)| matches!(p, Param::Dense(_))) {
            // One storage type for the fused matrix: the file's own where the parts share it.
            let mut ws: Vec<Tensor> = params.iter().map(|(p, _)| p.stored()).collect::<Result<_>>()?;
            if ws.iter().any(|w| w.dtype() != ws[0].dtype()) {
                ws = ws.iter().map(|w| w.to_dtype(DType::F32)).collect::<candle_core::Result<_>>()?;
            }
            let fused = Linear::new(Param::Dense(Tensor::cat(&ws, 0)?), bias)?;
            return Ok(Projection { parts: vec![fused] });
        }
        // Quantized parts packed alike are stacked too (x quantized once per product).
        let packed: Option<Vec<PackedWeight>> = params
            .iter()
            .map(|(p, _)| match p {
                Param::Quant(q) => PackedWeight::new(q).transpose(),
                Param::Dense(_) => None,
            })
            .collect::<Option<Result<Vec<_>>>>()
            .transpose()?;
        match packed.map(PackedWeight::stack) {
            Some(Ok(stacked)) => Ok(Projection { parts: vec![Linear { weight: LinearWeight::Packed(stacked), bias }] }),
            // Packed but not stackable (runs of 16 beside runs of 32): kept as packed, not packed again.
            Some(Err(parts)) => {
                let parts = parts.into_iter().zip(params).map(|(w, (_, bias))| Linear { weight: LinearWeight::Packed(w), bias }).collect();
                Ok(Projection { parts })
            }
            None => Ok(Projection { parts: params.into_iter().map(|(p, b)| Linear::new(p, b)).collect::<Result<_>>()? }),
        }
    }

    /// All projections side by side: (T, Σ widths).
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self.parts.as_slice() {
            [fused] => fused.forward(x),
            parts => Ok(Tensor::cat(&parts.iter().map(|p| p.forward(x)).collect::<Result<Vec<_>>>()?, 1)?),
        }
    }
}

/// The parts' biases side by side (zeros for a part without one), if any part has one.
fn fused_bias(params: &[(Param, Option<Tensor>)], widths: &[usize]) -> Result<Option<Tensor>> {
    if params.iter().all(|(_, b)| b.is_none()) {
        return Ok(None);
    }
    let bs: Vec<Tensor> = params
        .iter()
        .zip(widths)
        .map(|((_, b), &w)| match b {
            Some(b) => Ok(b.clone()),
            None => Ok(Tensor::zeros(w, DType::F32, &Device::Cpu)?),
        })
        .collect::<Result<_>>()?;
    Ok(Some(Tensor::cat(&bs, 0)?))
}
