//! Named f32 arrays on disk as safetensors: the writer every array file goes through (atomic),
//! and the reader runs use to load them back, with one clear error per malformed file.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};

/// Writes named F32 arrays ([name, shape, row-major data]) as one safetensors file, atomically.
/// The bytes depend only on the arrays and the metadata: the header lists the metadata and the
/// arrays in name order (the `safetensors` crate's writer goes through a HashMap, whose order
/// changes from run to run), data in the order given.
pub fn write_safetensors_f32(path: &Path, tensors: &[(String, &[usize], &[f32])], metadata: BTreeMap<String, String>) -> Result<()> {
    #[derive(serde::Serialize)]
    struct Entry<'a> {
        dtype: &'static str,
        shape: &'a [usize],
        data_offsets: [usize; 2],
    }
    let mut header: BTreeMap<&str, serde_json::Value> = BTreeMap::new();
    if !metadata.is_empty() {
        header.insert("__metadata__", serde_json::to_value(&metadata)?);
    }
    let mut offset = 0usize;
    for (name, shape, data) in tensors {
        if shape.iter().product::<usize>() != data.len() {
            return Err(Error::Internal(format!("array {name}: shape {shape:?} does not hold {} values", data.len())));
        }
        let end = offset + std::mem::size_of_val(*data);
        if header.insert(name, serde_json::to_value(Entry { dtype: "F32", shape, data_offsets: [offset, end] })?).is_some() {
            return Err(Error::Internal(format!("array {name} is named twice")));
        }
        offset = end;
    }
    let mut head = serde_json::to_vec(&header)?;
    // The data starts 8-byte aligned: the header is padded with spaces, as the format allows.
    head.resize(head.len().next_multiple_of(8), b' ');
    let mut bytes = Vec::with_capacity(8 + head.len() + offset);
    bytes.extend_from_slice(&(head.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&head);
    for (_, _, data) in tensors {
        bytes.extend_from_slice(bytemuck_f32(data));
    }
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
        let bytes = super::regular::read(path).map_err(|e| Error::file(path, format!("cannot read ({e})")))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_arrays_read_back_and_the_bytes_are_reproducible() {
        let dir = std::env::temp_dir().join(format!("sinkscope-arrays-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (vec![1.0f32, -2.5, 3.25, 0.0, 7.0, 8.0], vec![0.5f32; 3]);
        let meta: BTreeMap<String, String> =
            [("model", "m"), ("text", "t"), ("n_tokens", "3"), ("z", "last")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let tensors: Vec<(String, &[usize], &[f32])> = vec![("zeta".into(), &[2, 3], &a), ("alpha".into(), &[3], &b)];
        let mut files = Vec::new();
        for i in 0..4 {
            let path = dir.join(format!("{i}.safetensors"));
            write_safetensors_f32(&path, &tensors, meta.clone()).unwrap();
            files.push(std::fs::read(&path).unwrap());
        }
        assert!(files.windows(2).all(|w| w[0] == w[1]), "same arrays, same bytes");
        let back = Arrays::read(&dir.join("0.safetensors"), "test").unwrap();
        assert_eq!(back.get("zeta", 2), Some((&[2usize, 3][..], &a[..])));
        assert_eq!(back.get("alpha", 1), Some((&[3usize][..], &b[..])));
        assert_eq!(back.metadata, meta);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
