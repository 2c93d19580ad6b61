//! Numerics below the model: the run-time SIMD dispatch (`vectorized_fn!`), the scalar kernels
//! (e^x, masked softmax, SwiGLU) and borrowing a tensor's f32 data.

pub mod kernels;
pub mod simd;
pub mod tensor;
