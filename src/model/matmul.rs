//! x·W for the dense projections and the output head: rows split across the thread pool, one
//! single-threaded gemm per share. Measured on the project's 2-core machines (12 interleaved rounds, SmolLM2's shapes at
//! 512 rows), two single-threaded gemms on row halves beat one two-threaded gemm: 155 vs 131
//! GFLOP/s (median) on 512×576×3072, 163 vs 149 on 512×1536×576, equal on the small ones (gemm's
//! AVX2 kernels then; its AVX-512 ones, Cargo.toml's `x86-v4`, run the same split). Shares
//! are whole row tiles (see [`ROW_TILE`]) so results do not depend on the thread count; fewer rows
//! than that (decoding) leave the split to gemm itself, across columns. Weights stored in bf16/f16 are widened
//! to f32 one block of output rows at a time, so the product stays f32 without an f32 copy of the
//! whole matrix.

use candle_core::{CpuStorage, Device, Storage, Tensor};
use gemm::{gemm, Parallelism};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::numerics::tensor::with_f32;

/// Row shares are whole multiples of this: gemm sums a row the same way wherever its share starts
/// only when shares start on its 16-row tiles (measured: shares of 33 rows gave other bits than
/// one product over all rows), so the split — and the bits — do not depend on the thread count.
const ROW_TILE: usize = 16;

/// x (m, k) · w for w given as (k, n) contiguous (`transposed` = false) or as the transpose of an
/// (n, k) contiguous matrix (`transposed` = true: a Linear layer's (out, in) weight read in place).
pub fn matmul_split_rows(x: &Tensor, w: &Tensor, transposed: bool) -> Result<Tensor> {
    let (m, k) = x.dims2()?;
    let (n, kw) = if transposed {
        w.dims2()?
    } else {
        let (a, b) = w.dims2()?;
        (b, a)
    };
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
            let mut share = m.div_ceil(threads).next_multiple_of(ROW_TILE);
            // gemm computes very short products another way (one row as a gemv; a few rows gave
            // other bits too): the last share is a whole tile or more, or none.
            while share < m && m % share != 0 && m % share < ROW_TILE {
                share += ROW_TILE;
            }
            if threads == 1 || share >= m {
                let par = if threads > 1 { Parallelism::Rayon(threads) } else { Parallelism::None };
                product(x, w, &mut y, (m, k, n), (w_rs, w_cs), par);
            } else {
                y.par_chunks_mut(share * n)
                    .zip(x.par_chunks(share * k))
                    .for_each(|(y, x)| product(x, w, y, (x.len() / k, k, n), (w_rs, w_cs), Parallelism::None));
            }
        })
    })??;
    Ok(Tensor::from_vec(y, (m, n), &Device::Cpu)?)
}

/// f32 elements per widened weight block: a block stays in the L2 cache while gemm reads it.
const HALF_BLOCK_ELEMS: usize = 1 << 18;

/// x (m, k) · wᵀ for w an (n, k) contiguous bf16 or f16 matrix, computed in f32. Output rows of w
/// are widened in fixed blocks (independent of the thread count, so the result is too), the
/// blocks spread across the thread pool.
pub fn matmul_half_weight(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (m, k) = x.dims2()?;
    let (n, kw) = w.dims2()?;
    if k != kw || !w.is_contiguous() {
        return Err(Error::Internal(format!("matmul of ({m}, {k}) by a ({n}, {kw}) half weight (contiguous: {})", w.is_contiguous())));
    }
    let x = x.contiguous()?;
    let block = (HALF_BLOCK_ELEMS / k.max(1)).clamp(16, 1024).min(n.max(1));
    let mut y = vec![0f32; m * n];
    let dst = SendPtr(y.as_mut_ptr());
    with_f32(&x, |x| -> Result<()> {
        (0..n.div_ceil(block)).into_par_iter().try_for_each(|b| {
            let (j0, rows) = (b * block, block.min(n - b * block));
            let wf = widen_rows(w, j0, rows, k)?;
            // SAFETY: x is m×k row-major; wf is (rows, k) row-major, read as its transpose (k, rows);
            // the block writes columns j0..j0+rows of the m×n output y, which no other block touches.
            unsafe { gemm_f32(m, rows, k, (dst.at(j0), n, 1), (x.as_ptr(), k, 1), (wf.as_ptr(), 1, k), 1.0, Parallelism::None) };
            Ok(())
        })
    })??;
    Ok(Tensor::from_vec(y, (m, n), &Device::Cpu)?)
}

/// A raw output pointer shared by tasks that write disjoint parts of one buffer (blocks of columns
/// here, heads' columns in attention).
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub(crate) *mut f32);
// SAFETY: only used for writes to disjoint parts of the buffer (see its uses).
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// # Safety
    /// `i` must lie inside the buffer.
    pub(crate) unsafe fn at(&self, i: usize) -> *mut f32 {
        unsafe { self.0.add(i) }
    }
}

/// Rows j0..j0+rows of a contiguous (·, k) bf16/f16 matrix, as f32.
fn widen_rows(w: &Tensor, j0: usize, rows: usize, k: usize) -> Result<Vec<f32>> {
    let (storage, layout) = w.storage_and_layout();
    let start = layout.start_offset() + j0 * k;
    let range = start..start + rows * k;
    match &*storage {
        Storage::Cpu(CpuStorage::BF16(v)) => Ok(v[range].iter().map(|h| h.to_f32()).collect()),
        Storage::Cpu(CpuStorage::F16(v)) => Ok(v[range].iter().map(|h| h.to_f32()).collect()),
        _ => Err(Error::Internal(format!("half-weight matmul over a {:?} tensor", w.dtype()))),
    }
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
pub(crate) unsafe fn gemm_f32(
    m: usize,
    n: usize,
    k: usize,
    dst: (*mut f32, usize, usize),
    lhs: (*const f32, usize, usize),
    rhs: (*const f32, usize, usize),
    scale: f32,
    par: Parallelism,
) {
    let s = |x: usize| x as isize;
    unsafe {
        gemm(m, n, k, dst.0, s(dst.2), s(dst.1), false, lhs.0, s(lhs.2), s(lhs.1), rhs.0, s(rhs.2), s(rhs.1), 0.0, scale, false, false, false, par)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_products_match_candle_in_both_layouts() {
        for m in [1, 5, 64, 131] {
            let (k, n) = (37, 53);
            let x = Tensor::from_vec((0..m * k).map(|i| ((i * 31) % 17) as f32 - 8.0).collect::<Vec<f32>>(), (m, k), &Device::Cpu).unwrap();
            let w_out_in =
                Tensor::from_vec((0..n * k).map(|i| ((i * 7) % 13) as f32 * 0.25 - 1.5).collect::<Vec<f32>>(), (n, k), &Device::Cpu).unwrap();
            let want: Vec<f32> = x.matmul(&w_out_in.t().unwrap()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let w_in_out = w_out_in.t().unwrap().contiguous().unwrap();
            for got in [matmul_split_rows(&x, &w_out_in, true).unwrap(), matmul_split_rows(&x, &w_in_out, false).unwrap()] {
                let got: Vec<f32> = got.flatten_all().unwrap().to_vec1().unwrap();
                // Small integers and quarters: every partial sum is exact in f32.
                assert_eq!(got, want, "m = {m}");
            }
        }
    }

    #[test]
    fn half_weights_give_the_f32_product_across_blocks() {
        // k = 2,000 makes a block 131 rows: n = 300 spans three, the last one short.
        for (m, k, n) in [(1, 2000, 300), (7, 2000, 300), (40, 37, 53)] {
            let x = Tensor::from_vec((0..m * k).map(|i| ((i * 31) % 17) as f32 - 8.0).collect::<Vec<f32>>(), (m, k), &Device::Cpu).unwrap();
            let w = Tensor::from_vec((0..n * k).map(|i| ((i * 7) % 13) as f32 * 0.25 - 1.5).collect::<Vec<f32>>(), (n, k), &Device::Cpu).unwrap();
            let want: Vec<f32> = matmul_split_rows(&x, &w, true).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            for dtype in [candle_core::DType::BF16, candle_core::DType::F16] {
                let got = matmul_half_weight(&x, &w.to_dtype(dtype).unwrap()).unwrap();
                let got: Vec<f32> = got.flatten_all().unwrap().to_vec1().unwrap();
                // Quarters up to ±1.5 are exact in bf16 and f16, and every partial sum in f32.
                assert_eq!(got, want, "m = {m}, k = {k}, {dtype:?}");
            }
        }
    }

    #[test]
    fn split_products_do_not_depend_on_the_thread_count() {
        // Shares of 33 rows (993 on 31 or 32 threads, split evenly), or a last share of 4 rows (100
        // on 3 threads in 16-row tiles), gave other bits than one gemm over all rows.
        // The last three: projection shapes of the real models (gemm's AVX-512 and AVX2 kernels
        // pick other tiles for them).
        for (m, k, n) in [
            (993, 97, 61),
            (100, 97, 61),
            (50, 97, 61),
            (161, 97, 61),
            (257, 97, 61),
            (37, 97, 61),
            (1000, 97, 61),
            (130, 97, 61),
            (500, 640, 256),
            (203, 576, 960),
            (77, 2048, 640),
        ] {
            let x = Tensor::from_vec((0..m * k).map(|i| ((i as f32) * 0.618).sin()).collect::<Vec<f32>>(), (m, k), &Device::Cpu).unwrap();
            let w = Tensor::from_vec((0..n * k).map(|i| ((i as f32) * 0.377).cos()).collect::<Vec<f32>>(), (n, k), &Device::Cpu).unwrap();
            // Both layouts: (out, in) read transposed (a tied head) and (in, out) (the projections).
            let w_in_out = w.t().unwrap().contiguous().unwrap();
            for (w, transposed) in [(&w, true), (&w_in_out, false)] {
                let run = |threads: usize| -> Vec<u32> {
                    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                    let y = pool.install(|| matmul_split_rows(&x, w, transposed)).unwrap();
                    y.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().map(|v| v.to_bits()).collect()
                };
                let one = run(1);
                for threads in [2, 3, 5, 16, 31, 32] {
                    assert!(one == run(threads), "{m} rows ({k}, {n}, transposed {transposed}) on {threads} threads");
                }
            }
        }
    }
}
