//! Numerics below the model: the run-time SIMD dispatch (`vectorized_fn!`), the scalar kernels
//! (e^x, masked softmax, SwiGLU), borrowing a tensor's f32 data, choosing a token from logits, and
//! the number formats of a KV cache (with the Hadamard rotation llama.cpp stores them under, and
//! KIVI's grouped codes).

pub mod cache_formats;
pub mod hadamard;
pub mod kernels;
pub mod kivi;
pub mod sampling;
pub mod simd;
pub mod tensor;
