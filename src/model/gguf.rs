//! GGUF reader: parses the header, metadata and tensor table with bounds checks against the file
//! size (a truncated or corrupt file is an input error, never a panic), then hands tensor bytes
//! to candle as `QTensor`s straight from a memory map.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use candle_core::quantized::{ggml_file::qtensor_from_ggml, GgmlDType, QTensor};
use candle_core::Device;

use crate::error::{Error, IoContext, Result};

const GGUF_MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;

/// One metadata value. Arrays keep their element values (vocabularies are arrays of strings).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    Str(String),
    Array(Vec<Value>),
}

impl Value {
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) if v >= 0 => Some(v as u64),
            Value::I16(v) if v >= 0 => Some(v as u64),
            Value::I32(v) if v >= 0 => Some(v as u64),
            Value::I64(v) if v >= 0 => Some(v as u64),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// Where one tensor lives in the file and how it is encoded.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub dtype: GgmlDType,
    /// Shape in row-major (candle/PyTorch) order: the reverse of ggml's `ne`.
    pub shape: Vec<usize>,
    /// Byte offset from the start of the file.
    pub start: usize,
    pub n_bytes: usize,
}

/// A parsed, memory-mapped GGUF file.
pub struct GgufFile {
    pub path: PathBuf,
    pub version: u32,
    pub metadata: BTreeMap<String, Value>,
    pub tensors: BTreeMap<String, TensorInfo>,
    mmap: memmap2::Mmap,
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<Self> {
        let file = crate::io::regular::open(path).with_file(path)?;
        // SAFETY: the map is read-only; a file truncated by another process while mapped is the
        // same hazard every mmap-based model loader (llama.cpp, candle, safetensors) accepts.
        let mmap = unsafe { memmap2::Mmap::map(&file) }.with_file(path)?;
        let parsed = Parser { bytes: &mmap, pos: 0, path }.parse()?;
        Ok(GgufFile { path: path.to_path_buf(), version: parsed.0, metadata: parsed.1, tensors: parsed.2, mmap })
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    pub fn architecture(&self) -> Result<&str> {
        self.get("general.architecture").and_then(Value::as_str).ok_or_else(|| self.corrupt("metadata has no general.architecture"))
    }

    /// A required unsigned integer metadata value.
    pub fn req_u64(&self, key: &str) -> Result<u64> {
        self.get(key).and_then(Value::as_u64).ok_or_else(|| self.corrupt(&format!("metadata key {key} is missing or not an integer")))
    }

    pub fn opt_f64(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(Value::as_f64)
    }

    /// Loads one tensor as a candle `QTensor` (a copy of its bytes; F32 tensors are plain data).
    pub fn qtensor(&self, name: &str) -> Result<QTensor> {
        let info = self.tensors.get(name).ok_or_else(|| self.corrupt(&format!("tensor {name} is missing")))?;
        let raw = &self.mmap[info.start..info.start + info.n_bytes];
        // candle reinterprets the bytes as blocks in place, so they must be suitably aligned;
        // GGUF aligns the data section, but copy into an 8-byte aligned buffer if a writer did not.
        let qt = if (raw.as_ptr() as usize).is_multiple_of(8) {
            qtensor_from_ggml(info.dtype, raw, info.shape.clone(), &Device::Cpu)?
        } else {
            let mut aligned = vec![0u64; info.n_bytes.div_ceil(8)];
            let bytes = unsafe {
                // SAFETY: a u64 buffer viewed as bytes, within its own length.
                std::slice::from_raw_parts_mut(aligned.as_mut_ptr() as *mut u8, info.n_bytes)
            };
            bytes.copy_from_slice(raw);
            qtensor_from_ggml(info.dtype, bytes, info.shape.clone(), &Device::Cpu)?
        };
        Ok(qt)
    }

    pub fn has_tensor(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    fn corrupt(&self, what: &str) -> Error {
        Error::file(&self.path, format!("{what}. The GGUF file is incomplete or not a supported model; re-download or re-convert it."))
    }
}

/// ggml type ids (ggml.h) and their encodings; only the ones candle can decode are accepted.
fn ggml_dtype(id: u32) -> Option<GgmlDType> {
    Some(match id {
        0 => GgmlDType::F32,
        1 => GgmlDType::F16,
        2 => GgmlDType::Q4_0,
        3 => GgmlDType::Q4_1,
        6 => GgmlDType::Q5_0,
        7 => GgmlDType::Q5_1,
        8 => GgmlDType::Q8_0,
        9 => GgmlDType::Q8_1,
        10 => GgmlDType::Q2K,
        11 => GgmlDType::Q3K,
        12 => GgmlDType::Q4K,
        13 => GgmlDType::Q5K,
        14 => GgmlDType::Q6K,
        15 => GgmlDType::Q8K,
        30 => GgmlDType::BF16,
        _ => return None,
    })
}

type Parsed = (u32, BTreeMap<String, Value>, BTreeMap<String, TensorInfo>);

/// A cursor over the mapped bytes; every read checks the remaining length first.
struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Parser<'a> {
    fn truncated(&self, what: &str) -> Error {
        Error::file(
            self.path,
            format!(
                "GGUF file is truncated or corrupt (ran out of bytes reading {what} at byte {} of {}). Re-download the model file.",
                self.pos,
                self.bytes.len()
            ),
        )
    }

    fn corrupt(&self, what: String) -> Error {
        Error::file(self.path, format!("GGUF file is corrupt: {what}. Re-download the model file."))
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if self.bytes.len().saturating_sub(self.pos) < n {
            return Err(self.truncated(what));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let len = self.u64(what)?;
        let len = usize::try_from(len).map_err(|_| self.truncated(what))?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.corrupt(format!("{what} is not valid UTF-8")))
    }

    fn value(&mut self, ty: u32, key: &str, depth: u32) -> Result<Value> {
        Ok(match ty {
            0 => Value::U8(self.array::<1>(key)?[0]),
            1 => Value::I8(self.array::<1>(key)?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.array(key)?)),
            3 => Value::I16(i16::from_le_bytes(self.array(key)?)),
            4 => Value::U32(self.u32(key)?),
            5 => Value::I32(i32::from_le_bytes(self.array(key)?)),
            6 => Value::F32(f32::from_le_bytes(self.array(key)?)),
            7 => Value::Bool(self.array::<1>(key)?[0] != 0),
            8 => Value::Str(self.string(key)?),
            9 if depth == 0 => {
                let elem_ty = self.u32(key)?;
                let n = self.u64(key)?;
                // Every element takes at least one byte: a count beyond the remaining bytes is a lie.
                if n > (self.bytes.len() - self.pos) as u64 {
                    return Err(self.truncated(key));
                }
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    items.push(self.value(elem_ty, key, depth + 1)?);
                }
                Value::Array(items)
            }
            10 => Value::U64(self.u64(key)?),
            11 => Value::I64(i64::from_le_bytes(self.array(key)?)),
            12 => Value::F64(f64::from_le_bytes(self.array(key)?)),
            other => return Err(self.corrupt(format!("metadata key {key} has unknown value type {other}"))),
        })
    }

    fn parse(mut self) -> Result<Parsed> {
        let magic = self.take(4, "the magic number")?;
        if magic != GGUF_MAGIC {
            return Err(Error::file(self.path, "not a GGUF file (bad magic number). Pass a .gguf model, a llama2.c .bin, or an HF model directory."));
        }
        let version = self.u32("the version")?;
        if !(2..=3).contains(&version) {
            return Err(self.corrupt(format!("GGUF version {version} is not supported (only v2 and v3); re-convert with a current llama.cpp")));
        }
        let n_tensors = self.u64("the tensor count")?;
        let n_kv = self.u64("the metadata count")?;
        let remaining = (self.bytes.len() - self.pos) as u64;
        if n_tensors > remaining || n_kv > remaining {
            return Err(self.truncated("the header counts"));
        }
        let mut metadata = BTreeMap::new();
        for _ in 0..n_kv {
            let key = self.string("a metadata key")?;
            let ty = self.u32(&key)?;
            let value = self.value(ty, &key, 0)?;
            metadata.insert(key, value);
        }
        let alignment = match metadata.get("general.alignment").and_then(Value::as_u64) {
            Some(a) if a > 0 && a.is_power_of_two() => a,
            Some(a) => return Err(self.corrupt(format!("general.alignment {a} is not a power of two"))),
            None => DEFAULT_ALIGNMENT,
        };
        let mut raw_infos = Vec::with_capacity(n_tensors as usize);
        for _ in 0..n_tensors {
            let name = self.string("a tensor name")?;
            let n_dims = self.u32(&name)?;
            if n_dims == 0 || n_dims > 4 {
                return Err(self.corrupt(format!("tensor {name} has {n_dims} dimensions")));
            }
            let mut ne = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                ne.push(self.u64(&name)?);
            }
            let ty = self.u32(&name)?;
            let offset = self.u64(&name)?;
            raw_infos.push((name, ne, ty, offset));
        }
        let data_start = (self.pos as u64).div_ceil(alignment) * alignment;
        let file_len = self.bytes.len() as u64;
        let mut tensors = BTreeMap::new();
        for (name, ne, ty, offset) in raw_infos {
            let dtype = ggml_dtype(ty).ok_or_else(|| self.corrupt(format!("tensor {name} has ggml type {ty}, which sinkscope cannot decode")))?;
            let n_elems = ne.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
            let block = dtype.block_size() as u64;
            let n_bytes = match n_elems {
                Some(n) if n > 0 && n % block == 0 => (n / block).checked_mul(dtype.type_size() as u64),
                _ => None,
            }
            .ok_or_else(|| self.corrupt(format!("tensor {name} has impossible dimensions {ne:?}")))?;
            let start = data_start.checked_add(offset);
            let end = start.and_then(|s| s.checked_add(n_bytes));
            match (start, end) {
                (Some(start), Some(end)) if end <= file_len => {
                    let shape = ne.iter().rev().map(|&d| d as usize).collect();
                    tensors.insert(name, TensorInfo { dtype, shape, start: start as usize, n_bytes: n_bytes as usize });
                }
                _ => {
                    return Err(Error::file(
                        self.path,
                        format!(
                            "GGUF file is truncated: tensor {name} needs bytes up to {} but the file has {file_len}. Re-download the model file.",
                            end.unwrap_or(u64::MAX)
                        ),
                    ))
                }
            }
        }
        Ok((version, metadata, tensors))
    }
}
