//! Files in and out, below everything else: atomic writes (a temp file, then a rename), JSON,
//! named f32 arrays as safetensors, regular files only (no FIFO), the user's text input and token ids, serving-log logprob
//! traces, and NaN-tolerant serde helpers.

pub mod arrays;
pub mod atomic;
pub mod finite_json;
pub mod regular;
pub mod run_dir;
pub mod run_log;
pub mod serde_nan;
pub mod staging;
pub mod text;
pub mod token_ids;
pub mod trace;

pub use atomic::{write_atomic, write_json_atomic, write_part_json};
