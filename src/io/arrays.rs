//! Named f32 arrays on disk as safetensors: the writer every array file goes through (atomic),
//! and the reader runs use to load them back, with one clear error per malformed file.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};

/// Writes named F32 arrays ([name, shape, row-major data]) as one safetensors file, atomically.
pub fn write_safetensors_f32(path: &Path, tensors: &[(String, &[usize], &[f32])], metadata: BTreeMap<String, String>) -> Result<()> {
    let views = tensors
        .iter()
        .map(|(name, shape, data)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.to_vec(), bytemuck_f32(data))
                .map(|v| (name.clone(), v))
                .map_err(|e| Error::Internal(format!("safetensors view for {name}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let bytes = safetensors::tensor::serialize(views, Some(metadata.into_iter().collect()))
        .map_err(|e| Error::Internal(format!("safetensors serialize: {e}")))?;
    super::atomic::write_atomic(path, &bytes)
}

/// Views f32s as little-endian bytes (every supported target is little-endian; checked below).
fn bytemuck_f32(data: &[f32]) -> &[u8] {
    const _: () = assert!(cfg!(target_endian = "little"), "safetensors output assumes little-endian");
    // SAFETY: f32 has no padding and any byte pattern is a valid u8.
    unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data)) }
}

/// Arrays read back from a safetensors file, with its metadata.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Arrays {
    pub arrays: BTreeMap<String, (Vec<usize>, Vec<f32>)>,
    pub metadata: BTreeMap<String, String>,
}

impl Arrays {
    /// Reads every F32 array of `path`; `what` names the command that makes the file, for the error.
    pub fn read(path: &Path, what: &str) -> Result<Arrays> {
        let bytes = std::fs::read(path).map_err(|e| Error::file(path, format!("cannot read ({e})")))?;
        let bad = |why: String| Error::file(path, format!("is not a valid array file ({why}); re-run `sinkscope {what}`"));
        let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| bad(e.to_string()))?;
        let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).map_err(|e| bad(e.to_string()))?;
        let mut arrays = BTreeMap::new();
        for (name, view) in st.tensors() {
            if view.dtype() != safetensors::Dtype::F32 {
                return Err(bad(format!("`{name}` is {:?}, not F32", view.dtype())));
            }
            let data = view.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            arrays.insert(name, (view.shape().to_vec(), data));
        }
        let metadata = meta.metadata().clone().unwrap_or_default().into_iter().collect();
        Ok(Arrays { arrays, metadata })
    }

    /// The array `name` with exactly `rank` dimensions.
    pub fn get(&self, name: &str, rank: usize) -> Option<(&[usize], &[f32])> {
        self.arrays.get(name).filter(|(s, _)| s.len() == rank).map(|(s, d)| (s.as_slice(), d.as_slice()))
    }
}
