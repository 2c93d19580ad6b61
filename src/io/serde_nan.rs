//! serde_json writes NaN as `null`; these read such nulls back as NaN, so results with undefined
//! values (a probe without sinks, a recompute step that was not scored) round-trip; likewise
//! infinite ratios (a zero denominator) read back as infinite.

use serde::{Deserialize, Deserializer};

pub fn nan_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// For ratios that are infinite when their denominator is 0 (`null` in the JSON).
pub fn inf_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

pub fn nans_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    Ok(Vec::<Option<f64>>::deserialize(d)?.into_iter().map(|v| v.unwrap_or(f64::NAN)).collect())
}
