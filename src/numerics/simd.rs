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
            if $crate::numerics::simd::has_avx2_fma() {
                // SAFETY: the CPU has the features `wide` is compiled for.
                return unsafe { wide($($arg),*) };
            }
            portable($($arg),*)
        }
    };
}
pub(crate) use vectorized_fn;
