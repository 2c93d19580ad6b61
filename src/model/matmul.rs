//! x·W for the dense projections and the output head: rows split across the thread pool, one
//! single-threaded gemm per share. Measured on the project's 2-core machines (12 interleaved rounds, SmolLM2's shapes at
//! 512 rows), two single-threaded gemms on row halves beat one two-threaded gemm: 155 vs 131
//! GFLOP/s (median) on 512×576×3072, 163 vs 149 on 512×1536×576, equal on the small ones. Few rows
//! (decoding) leave the split to gemm itself, across columns.

use candle_core::{Device, Tensor};
use gemm::{gemm, Parallelism};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::numerics::tensor::with_f32;

/// Rows per share below which the whole product runs as one gemm.
const MIN_SPLIT_ROWS: usize = 32;

/// x (m, k) · w for w given as (k, n) contiguous (`transposed` = false) or as the transpose of an
/// (n, k) contiguous matrix (`transposed` = true: a Linear layer's (out, in) weight read in place).
pub fn matmul_split_rows(x: &Tensor, w: &Tensor, transposed: bool) -> Result<Tensor> {
    let (m, k) = x.dims2()?;
    let (n, kw) = if transposed { w.dims2()? } else { let (a, b) = w.dims2()?; (b, a) };
    if k != kw || !w.is_contiguous() {
        return Err(Error::Internal(format!("matmul of ({m}, {k}) by a ({kw}, {n}) weight (contiguous: {})", w.is_contiguous())));
    }
    // Row and column strides of w as a (k, n) matrix.
    let (w_rs, w_cs) = if transposed { (1, k) } else { (n, 1) };
    let x = x.contiguous()?;
    let mut y = vec![0f32; m * n];
    with_f32(w, |w| {
        with_f32(&x, |x| {
            let threads = rayon::current_num_threads().max(1);
            let share = m.div_ceil(threads);
            if threads == 1 || share < MIN_SPLIT_ROWS {
                let par = if threads > 1 { Parallelism::Rayon(threads) } else { Parallelism::None };
                product(x, w, &mut y, (m, k, n), (w_rs, w_cs), par);
            } else {
                y.par_chunks_mut(share * n).zip(x.par_chunks(share * k)).for_each(|(y, x)| product(x, w, y, (x.len() / k, k, n), (w_rs, w_cs), Parallelism::None));
            }
        })
    })??;
    Ok(Tensor::from_vec(y, (m, n), &Device::Cpu)?)
}

/// y (rows, n) = x (rows, k) · w (k, n with strides `w_strides`), x and y row-major.
fn product(x: &[f32], w: &[f32], y: &mut [f32], (rows, k, n): (usize, usize, usize), (w_rs, w_cs): (usize, usize), par: Parallelism) {
    debug_assert!(x.len() >= rows * k && w.len() >= k * n && y.len() >= rows * n);
    // SAFETY: x holds rows×k and y rows×n elements (row-major); w holds k×n elements, and
    // (p, j) ↦ p·w_rs + j·w_cs stays inside it for p < k, j < n.
    unsafe { gemm_f32(rows, n, k, (y.as_mut_ptr(), n, 1), (x.as_ptr(), k, 1), (w.as_ptr(), w_rs, w_cs), 1.0, par) };
}

/// dst (m × n) = scale · lhs (m × k) · rhs (k × n), each operand given as (pointer, row stride, column
/// stride) in elements: the one place the crate calls gemm.
///
/// # Safety
/// Every index the strides reach for the given sizes must lie inside its buffer, and no other
/// thread may touch the part of dst written.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_f32(m: usize, n: usize, k: usize, dst: (*mut f32, usize, usize), lhs: (*const f32, usize, usize), rhs: (*const f32, usize, usize), scale: f32, par: Parallelism) {
    let s = |x: usize| x as isize;
    unsafe { gemm(m, n, k, dst.0, s(dst.2), s(dst.1), false, lhs.0, s(lhs.2), s(lhs.1), rhs.0, s(rhs.2), s(rhs.1), 0.0, scale, false, false, false, par) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_products_match_candle_in_both_layouts() {
        for m in [1, 5, 64, 131] {
            let (k, n) = (37, 53);
            let x = Tensor::from_vec((0..m * k).map(|i| ((i * 31) % 17) as f32 - 8.0).collect::<Vec<f32>>(), (m, k), &Device::Cpu).unwrap();
            let w_out_in = Tensor::from_vec((0..n * k).map(|i| ((i * 7) % 13) as f32 * 0.25 - 1.5).collect::<Vec<f32>>(), (n, k), &Device::Cpu).unwrap();
            let want: Vec<f32> = x.matmul(&w_out_in.t().unwrap()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let w_in_out = w_out_in.t().unwrap().contiguous().unwrap();
            for got in [matmul_split_rows(&x, &w_out_in, true).unwrap(), matmul_split_rows(&x, &w_in_out, false).unwrap()] {
                let got: Vec<f32> = got.flatten_all().unwrap().to_vec1().unwrap();
                // Small integers and quarters: every partial sum is exact in f32.
                assert_eq!(got, want, "m = {m}");
            }
        }
    }
}
