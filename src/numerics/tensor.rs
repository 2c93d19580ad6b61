//! Borrowing a candle tensor's f32 data as a plain slice, for the kernels that work on slices.

use candle_core::{Storage, Tensor};

use crate::error::Result;

/// Runs `f` on the tensor's f32 data without copying when it is a contiguous CPU tensor.
pub fn with_f32<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
    {
        let (storage, layout) = t.storage_and_layout();
        if let (Storage::Cpu(cpu), Some((start, end))) = (&*storage, layout.contiguous_offsets()) {
            if let Ok(all) = cpu.as_slice::<f32>() {
                return Ok(f(&all[start..end]));
            }
        }
    }
    let owned = t.flatten_all()?.to_dtype(candle_core::DType::F32)?.to_vec1::<f32>()?;
    Ok(f(&owned))
}
