//! serde_json writes NaN as `null`; these read such nulls back as NaN, so results with undefined
//! values (a probe without sinks, a recompute step that was not scored) round-trip; likewise
//! infinite ratios (a zero denominator) read back as infinite.

use serde::{Deserialize, Deserializer, Serializer};

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

/// Writes a NaN or an infinity as `null` on purpose (the fields read back by the functions above):
/// the record guard (`io::finite_json`) passes these and refuses any other non-finite number.
pub fn nan_as_null<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    match x.is_finite() {
        true => s.serialize_f64(*x),
        false => s.serialize_none(),
    }
}

/// [`nan_as_null`] for a list.
pub fn nans_as_null<S: Serializer>(xs: &[f64], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(xs.iter().map(|x| x.is_finite().then_some(*x)))
}
