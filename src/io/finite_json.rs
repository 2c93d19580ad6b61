//! The guard every record writer passes: serde_json writes a NaN or an infinity as `null`, so a
//! number that overflowed would reach a run file as a silent gap. [`first_non_finite`] walks a
//! value as serde sees it and names the first non-finite number's place (`outcomes[2].ppl`);
//! the fields where an undefined value is meant (`serde_nan`'s) write it as `null` themselves.

use std::fmt::Display;

use serde::ser::{self, Serialize};

/// Where the walk found a non-finite number (or why it stopped).
#[derive(Debug)]
pub struct Found(pub String);

impl Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Found {}

impl ser::Error for Found {
    fn custom<T: Display>(msg: T) -> Self {
        Found(msg.to_string())
    }
}

/// The place of the first non-finite f32/f64 in `value` (`None`: every number is finite).
pub fn first_non_finite<T: Serialize + ?Sized>(value: &T) -> Option<String> {
    value.serialize(Walk { path: String::new() }).err().map(|f| f.0)
}

/// Refuses `value` when a number in it is not finite, naming `what` and the place: a bug or an
/// overflow, so an internal error.
pub fn check<T: Serialize + ?Sized>(value: &T, what: &str) -> crate::error::Result<()> {
    match first_non_finite(value) {
        Some(place) => {
            Err(crate::error::Error::Internal(format!("{what}: the record would hold a non-finite number at {place}; nothing was written")))
        }
        None => Ok(()),
    }
}

/// `value` as pretty JSON (what `--json` prints), after [`check`].
pub fn to_pretty<T: Serialize + ?Sized>(value: &T, what: &str) -> crate::error::Result<String> {
    check(value, what)?;
    Ok(serde_json::to_string_pretty(value)?)
}

/// One place in the value; its path names it.
struct Walk {
    path: String,
}

impl Walk {
    fn at(&self, part: impl Display) -> Walk {
        Walk { path: format!("{}{part}", self.path) }
    }
    fn field(&self, name: &str) -> Walk {
        match self.path.is_empty() {
            true => Walk { path: name.to_string() },
            false => self.at(format_args!(".{name}")),
        }
    }
    fn number(&self, x: f64) -> Result<(), Found> {
        match x.is_finite() {
            true => Ok(()),
            false => Err(Found(if self.path.is_empty() { x.to_string() } else { format!("{} ({x})", self.path) })),
        }
    }
}

/// A sequence, tuple or map being walked: counts its elements for their paths.
struct Compound {
    walk: Walk,
    index: usize,
}

impl Compound {
    fn next<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        let element = self.walk.at(format_args!("[{}]", self.index));
        self.index += 1;
        value.serialize(element)
    }
}

macro_rules! fine {
    ($($name:ident: $t:ty),*) => {
        $(fn $name(self, _: $t) -> Result<(), Found> { Ok(()) })*
    };
}

impl ser::Serializer for Walk {
    type Ok = ();
    type Error = Found;
    type SerializeSeq = Compound;
    type SerializeTuple = Compound;
    type SerializeTupleStruct = Compound;
    type SerializeTupleVariant = Compound;
    type SerializeMap = Compound;
    type SerializeStruct = Walk;
    type SerializeStructVariant = Walk;

    fine!(serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64, serialize_u8: u8,
          serialize_u16: u16, serialize_u32: u32, serialize_u64: u64, serialize_char: char, serialize_str: &str, serialize_bytes: &[u8]);

    fn serialize_f32(self, v: f32) -> Result<(), Found> {
        self.number(v as f64)
    }
    fn serialize_f64(self, v: f64) -> Result<(), Found> {
        self.number(v)
    }
    fn serialize_none(self) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Found> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result<(), Found> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(self, _: &'static str, _: u32, variant: &'static str, value: &T) -> Result<(), Found> {
        value.serialize(self.field(variant))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound, Found> {
        Ok(Compound { walk: self, index: 0 })
    }
    fn serialize_tuple(self, _: usize) -> Result<Compound, Found> {
        Ok(Compound { walk: self, index: 0 })
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Compound, Found> {
        Ok(Compound { walk: self, index: 0 })
    }
    fn serialize_tuple_variant(self, _: &'static str, _: u32, variant: &'static str, _: usize) -> Result<Compound, Found> {
        Ok(Compound { walk: self.field(variant), index: 0 })
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Compound, Found> {
        Ok(Compound { walk: self, index: 0 })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Walk, Found> {
        Ok(self)
    }
    fn serialize_struct_variant(self, _: &'static str, _: u32, variant: &'static str, _: usize) -> Result<Walk, Found> {
        Ok(self.field(variant))
    }
}

impl ser::SerializeSeq for Compound {
    type Ok = ();
    type Error = Found;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        self.next(value)
    }
    fn end(self) -> Result<(), Found> {
        Ok(())
    }
}

impl ser::SerializeTuple for Compound {
    type Ok = ();
    type Error = Found;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        self.next(value)
    }
    fn end(self) -> Result<(), Found> {
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Compound {
    type Ok = ();
    type Error = Found;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        self.next(value)
    }
    fn end(self) -> Result<(), Found> {
        Ok(())
    }
}

impl ser::SerializeTupleVariant for Compound {
    type Ok = ();
    type Error = Found;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        self.next(value)
    }
    fn end(self) -> Result<(), Found> {
        Ok(())
    }
}

impl ser::SerializeMap for Compound {
    type Ok = ();
    type Error = Found;
    // Keys are names, not numbers: only values are checked (a value's path is its entry's index).
    fn serialize_key<T: Serialize + ?Sized>(&mut self, _: &T) -> Result<(), Found> {
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        self.next(value)
    }
    fn end(self) -> Result<(), Found> {
        Ok(())
    }
}

impl ser::SerializeStruct for Walk {
    type Ok = ();
    type Error = Found;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Found> {
        value.serialize(self.field(key))
    }
    fn end(self) -> Result<(), Found> {
        Ok(())
    }
}

impl ser::SerializeStructVariant for Walk {
    type Ok = ();
    type Error = Found;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Found> {
        value.serialize(self.field(key))
    }
    fn end(self) -> Result<(), Found> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize)]
    struct Row {
        label: String,
        ppl: f64,
        #[serde(serialize_with = "crate::io::serde_nan::nans_as_null")]
        sampled: Vec<f64>,
        ci: Option<[f64; 2]>,
    }

    #[test]
    fn the_first_non_finite_number_is_named_by_its_place() {
        let row = |ppl: f64, ci: Option<[f64; 2]>| Row { label: "sink".into(), ppl, sampled: vec![1.0, f64::NAN], ci };
        assert_eq!(first_non_finite(&vec![row(3.0, None)]), None, "a NaN written as null on purpose passes");
        assert_eq!(first_non_finite(&vec![row(3.0, None), row(f64::INFINITY, None)]).as_deref(), Some("[1].ppl (inf)"));
        assert_eq!(first_non_finite(&row(2.0, Some([1.0, f64::NAN]))).as_deref(), Some("ci[1] (NaN)"));
        let json = serde_json::to_string(&row(2.0, None)).unwrap();
        assert!(json.contains("\"sampled\":[1.0,null]"), "{json}");
    }
}
