//! Runs the crate's own hot loops (softmax, SwiGLU, log-sum-exp, attention column sums) compiled
//! for AVX2 + FMA when the CPU has them, chosen at run time, so a portable build still uses
//! 256-bit vectors where they exist (gemm dispatches its kernels the same way). No fast-math:
//! every operation rounds as in the baseline build, so results are bit-identical either way.

/// Whether this CPU runs the AVX2 + FMA copies (detected once, then a cached load).
#[inline(always)]
pub fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Defines a function twice — as written, and compiled for AVX2 + FMA — and calls the second
/// where the CPU has those features. Arguments are plain `name: Type` pairs, no generics.
macro_rules! vectorized_fn {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn portable($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn wide($($arg: $ty),*) $(-> $ret)? {
                portable($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            if $crate::simd::has_avx2_fma() {
                // SAFETY: the CPU has the features `wide` is compiled for.
                return unsafe { wide($($arg),*) };
            }
            portable($($arg),*)
        }
    };
}
pub(crate) use vectorized_fn;

#[cfg(test)]
mod tests {
    vectorized_fn! {
        fn shifted_exps(x: &[f32], out: &mut Vec<f32>) {
            out.extend(x.iter().map(|&v| crate::model::llama::exp_f32(v) * 0.5 + v));
        }
    }

    #[test]
    fn same_result_with_and_without_wide_vectors() {
        let x: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin() * 20.0).collect();
        let mut wide = Vec::new();
        shifted_exps(&x, &mut wide);
        let portable: Vec<f32> = x.iter().map(|&v| crate::model::llama::exp_f32(v) * 0.5 + v).collect();
        assert_eq!(wide, portable);
    }
}
