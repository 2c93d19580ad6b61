//! Tables to Parquet with polars: one file per table, Zstd-compressed, written atomically and
//! byte-for-byte deterministic (same run, same bytes), plus the reader the tests and `export`
//! use to check what was written.

use std::io::Cursor;
use std::path::Path;

use polars::prelude::*;

use super::tables::{ColumnData, Table};
use crate::error::{Error, Result};
use crate::io::write_atomic;

/// The polars frame of one table (column types: u32 → UInt32, f64 → Float64, str → String,
/// bool → Boolean; nullable columns keep their nulls).
pub fn to_frame(table: &Table) -> Result<DataFrame> {
    let columns: Vec<polars::prelude::Column> = table
        .columns
        .iter()
        .map(|c| {
            let name = PlSmallStr::from_static(c.name);
            match &c.data {
                ColumnData::U32(v) => polars::prelude::Column::new(name, v),
                ColumnData::OptU32(v) => polars::prelude::Column::new(name, v),
                ColumnData::F64(v) => polars::prelude::Column::new(name, v),
                ColumnData::OptF64(v) => polars::prelude::Column::new(name, v),
                ColumnData::Str(v) => polars::prelude::Column::new(name, v),
                ColumnData::Bool(v) => polars::prelude::Column::new(name, v),
            }
        })
        .collect();
    DataFrame::new(table.n_rows(), columns).map_err(|e| Error::Internal(format!("table {}: {e}", table.name)))
}

/// The Parquet file of `table`, in memory: the bytes `write_table` writes (the Python package
/// hands them to polars as they are).
pub fn table_bytes(table: &Table) -> Result<Vec<u8>> {
    let mut df = to_frame(table)?;
    let mut bytes = Vec::new();
    // One thread and fixed row groups keep the bytes identical from run to run.
    ParquetWriter::new(&mut bytes)
        .with_compression(ParquetCompression::Zstd(None))
        .with_statistics(StatisticsOptions::full())
        .set_parallel(false)
        .finish(&mut df)
        .map_err(|e| Error::Internal(format!("writing table {}: {e}", table.name)))?;
    Ok(bytes)
}

/// Writes `table` to `path` (temp file + rename).
pub fn write_table(table: &Table, path: &Path) -> Result<()> {
    write_atomic(path, &table_bytes(table)?)
}

/// Reads a Parquet file back into a frame.
pub fn read_frame(path: &Path) -> Result<DataFrame> {
    let bytes = crate::io::regular::read(path).map_err(|e| Error::file(path, format!("cannot read ({e})")))?;
    ParquetReader::new(Cursor::new(bytes)).finish().map_err(|e| Error::file(path, format!("is not a readable Parquet file ({e})")))
}
