//! Numerics below the model: the run-time SIMD dispatch (`vectorized_fn!`), the scalar kernels
//! (e^x, masked softmax, SwiGLU), borrowing a tensor's f32 data, and choosing a token from logits.

pub mod kernels;
pub mod sampling;
pub mod simd;
pub mod tensor;
