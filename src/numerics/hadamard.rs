//! The orthonormal Walsh–Hadamard rotation llama.cpp applies to queries, keys and values before a
//! quantized cache stores them (`attn_rot_k` / `attn_rot_v`): a row is cut into pieces of `n`
//! (a power of two) and each piece is multiplied by H_n, whose entry (i, j) is
//! (−1)^popcount(i & j) / √n. H_n is symmetric and its own inverse, so the same call undoes it.

/// Rotates each consecutive piece of `n` values of `row` by H_n (fast transform, in place).
/// `row.len()` must be a multiple of `n`, and `n` a power of two.
pub fn rotate(row: &mut [f32], n: usize) {
    debug_assert!(n.is_power_of_two() && row.len().is_multiple_of(n));
    let norm = 1.0 / (n as f32).sqrt();
    for piece in row.chunks_exact_mut(n) {
        let mut h = 1;
        while h < n {
            for start in (0..n).step_by(2 * h) {
                for i in start..start + h {
                    let (a, b) = (piece[i], piece[i + h]);
                    piece[i] = a + b;
                    piece[i + h] = a - b;
                }
            }
            h *= 2;
        }
        piece.iter_mut().for_each(|x| *x *= norm);
    }
}

/// The rotation size llama.cpp uses for keys of `head_dim` values: the largest power of two,
/// at least 64, that divides it (`build_input_k_rot`); `None` where llama.cpp rotates nothing
/// (a head size not a multiple of 64).
pub fn key_rotation(head_dim: usize) -> Option<usize> {
    if head_dim == 0 || !head_dim.is_multiple_of(64) {
        return None;
    }
    Some(1 << head_dim.trailing_zeros())
}

/// The rotation size for values: always 64 (llama.cpp found the smallest better for V), where
/// the head size is a multiple of 64.
pub fn value_rotation(head_dim: usize) -> Option<usize> {
    (head_dim > 0 && head_dim.is_multiple_of(64)).then_some(64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// H_n built as llama.cpp builds it: doubling [[H, H], [H, −H]] from 1/√n.
    fn doubled(n: usize) -> Vec<f32> {
        let mut m = vec![0.0f32; n * n];
        m[0] = 1.0 / (n as f32).sqrt();
        let mut s = 1;
        while s < n {
            for i in 0..s {
                for j in 0..s {
                    let v = m[i * n + j];
                    m[(i + s) * n + j] = v;
                    m[i * n + j + s] = v;
                    m[(i + s) * n + j + s] = -v;
                }
            }
            s *= 2;
        }
        m
    }

    #[test]
    fn the_fast_transform_is_the_doubled_matrix_and_its_own_inverse() {
        let n = 64;
        let h = doubled(n);
        let x: Vec<f32> = (0..2 * n).map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.3).collect();
        let mut y = x.clone();
        rotate(&mut y, n);
        for (p, piece) in x.chunks(n).enumerate() {
            for i in 0..n {
                let want: f32 = (0..n).map(|j| h[i * n + j] * piece[j]).sum();
                assert!((y[p * n + i] - want).abs() < 1e-5, "{i}: {} vs {want}", y[p * n + i]);
            }
        }
        rotate(&mut y, n);
        assert!(x.iter().zip(&y).all(|(a, b)| (a - b).abs() < 1e-5));
    }

    #[test]
    fn rotation_sizes_follow_llama_cpp() {
        assert_eq!(key_rotation(64), Some(64));
        assert_eq!(key_rotation(128), Some(128));
        assert_eq!(key_rotation(256), Some(256));
        assert_eq!(key_rotation(192), Some(64));
        assert_eq!(key_rotation(96), None);
        assert_eq!(value_rotation(256), Some(64));
        assert_eq!(value_rotation(80), None);
    }
}
