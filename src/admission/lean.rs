//! Serde building blocks for reading only what the webhooks need from a
//! review, in one pass and mostly without copying: strings are borrowed from
//! the request body unless they contain escapes, and every member gpugate
//! does not read is skipped with [`IgnoredAny`].
//!
//! Objects are read the way k8s-openapi's generated code reads them, so a
//! pod is accepted or refused as before for every field that is read: only
//! from a JSON object (never from an array), unknown members skipped, and a
//! repeated member's last value winning.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// A member of a JSON object: absent, `null`, or a value. Patches need the
/// difference: a new member is added where absent and replaces a `null`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Slot<T> {
    #[default]
    Absent,
    Null,
    Set(T),
}

impl<T> Slot<T> {
    /// The value, when set.
    pub fn get(&self) -> Option<&T> {
        match self {
            Slot::Set(v) => Some(v),
            Slot::Absent | Slot::Null => None,
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Slot<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Option::<T>::deserialize(d)?.map_or(Slot::Null, Slot::Set))
    }
}

/// A JSON value kept unread, as its text in the input (to read later, or
/// never). Only the JSON reader can keep one: a `serde_json::Value` cannot
/// be read into it.
#[derive(Debug, Clone, Copy)]
pub struct RawJson<'a>(pub &'a RawValue);

impl PartialEq for RawJson<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl<'de> Deserialize<'de> for RawJson<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <&'de RawValue>::deserialize(d).map(RawJson)
    }
}

/// A JSON string, borrowed from the input when it has no escapes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Text<'a>(pub Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(TextVisitor { numbers: false })
    }
}

/// A Kubernetes quantity as written: a string, or a JSON number turned into
/// its text as k8s-openapi's `Quantity` does (`1` reads as `"1"`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuantityText<'a>(pub Cow<'a, str>);

impl<'de> Deserialize<'de> for QuantityText<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TextVisitor { numbers: true })
            .map(|t| QuantityText(t.0))
    }
}

struct TextVisitor {
    /// Whether numbers are accepted (as their text).
    numbers: bool,
}

impl TextVisitor {
    fn number<E: de::Error>(
        &self,
        text: String,
        unexpected: de::Unexpected,
    ) -> Result<Text<'static>, E> {
        if self.numbers {
            Ok(Text(Cow::Owned(text)))
        } else {
            Err(E::invalid_type(unexpected, self))
        }
    }
}

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.numbers { "Quantity" } else { "a string" })
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Text(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Text(Cow::Owned(v.to_string())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Text(Cow::Owned(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        self.number(v.to_string(), de::Unexpected::Signed(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        self.number(v.to_string(), de::Unexpected::Unsigned(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        self.number(v.to_string(), de::Unexpected::Float(v))
    }
}

/// A JSON object of strings (annotations, labels, resource quantities) in
/// input order. Pods carry a handful of entries, so lookups scan; they scan
/// from the back so that a repeated key's last value wins, as in a map.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pairs<'a>(pub Vec<(Cow<'a, str>, Cow<'a, str>)>);

impl<'a> Pairs<'a> {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_ref())
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.0.iter().any(|(k, _)| k == key)
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_ref())
    }
}

impl<'de> Deserialize<'de> for Pairs<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(PairsVisitor::<Text<'de>>(PhantomData))
    }
}

/// Resource quantities by name (`resources.limits`, `resources.requests`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Quantities<'a>(pub Pairs<'a>);

impl<'de> Deserialize<'de> for Quantities<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(PairsVisitor::<QuantityText<'de>>(PhantomData))
            .map(Quantities)
    }
}

/// Reads an object's members with values read as `V`.
struct PairsVisitor<V>(PhantomData<V>);

impl<'de, V> Visitor<'de> for PairsVisitor<V>
where
    V: Deserialize<'de> + Into<Cow<'de, str>>,
{
    type Value = Pairs<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
        while let Some((k, v)) = map.next_entry::<Text<'de>, V>()? {
            pairs.push((k.0, v.into()));
        }
        Ok(Pairs(pairs))
    }
}

impl<'a> From<Text<'a>> for Cow<'a, str> {
    fn from(t: Text<'a>) -> Self {
        t.0
    }
}

impl<'a> From<QuantityText<'a>> for Cow<'a, str> {
    fn from(t: QuantityText<'a>) -> Self {
        t.0
    }
}

/// A JSON object read member by member into a struct of the fields gpugate
/// needs.
pub trait ObjectFields<'de>: Default {
    /// What the object is, for error messages (k8s-openapi's names).
    const NAME: &'static str;

    /// Reads the value of `key` when it is one of the fields and says
    /// whether it did; other members are skipped.
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error>;
}

/// Reads `T` from a JSON object; anything else is an error.
pub fn deserialize_object<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: ObjectFields<'de>,
{
    d.deserialize_map(ObjectVisitor(PhantomData))
}

fn read_fields<'de, A, T>(mut map: A) -> Result<T, A::Error>
where
    A: MapAccess<'de>,
    T: ObjectFields<'de>,
{
    let mut out = T::default();
    while let Some(key) = map.next_key::<Text<'de>>()? {
        if !out.field(&key.0, &mut map)? {
            map.next_value::<IgnoredAny>()?;
        }
    }
    Ok(out)
}

struct ObjectVisitor<T>(PhantomData<T>);

impl<'de, T: ObjectFields<'de>> Visitor<'de> for ObjectVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(T::NAME)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        read_fields(map)
    }
}

/// `T` when the JSON value is an object; `None` (read and dropped) when it
/// is anything else. For the review envelope, whose shape is checked after
/// reading rather than refused by the reader.
pub struct IfObject<T>(pub Option<T>);

impl<T> Default for IfObject<T> {
    fn default() -> Self {
        IfObject(None)
    }
}

impl<'de, T: ObjectFields<'de>> Deserialize<'de> for IfObject<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(IfObjectVisitor(PhantomData))
    }
}

struct IfObjectVisitor<T>(PhantomData<T>);

impl<'de, T: ObjectFields<'de>> Visitor<'de> for IfObjectVisitor<T> {
    type Value = IfObject<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        read_fields(map).map(|t| IfObject(Some(t)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq).map(|()| IfObject(None))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(IfObject(None))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(IfObject(None))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(IfObject(None))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(IfObject(None))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(IfObject(None))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(IfObject(None))
    }
}

/// Any JSON value, keeping only a string or a boolean: the envelope reads
/// `uid`, `operation`, `dryRun` and the like leniently, as `Value::as_str`
/// and `Value::as_bool` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Loose<'a> {
    Text(Cow<'a, str>),
    Bool(bool),
    #[default]
    Other,
}

impl<'a> Loose<'a> {
    pub fn text(self) -> Option<Cow<'a, str>> {
        match self {
            Loose::Text(t) => Some(t),
            Loose::Bool(_) | Loose::Other => None,
        }
    }

    pub fn bool(&self) -> Option<bool> {
        match self {
            Loose::Bool(b) => Some(*b),
            Loose::Text(_) | Loose::Other => None,
        }
    }
}

impl<'de> Deserialize<'de> for Loose<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LooseVisitor)
    }
}

struct LooseVisitor;

impl<'de> Visitor<'de> for LooseVisitor {
    type Value = Loose<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Loose::Text(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Loose::Text(Cow::Owned(v.to_string())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Loose::Text(Cow::Owned(v)))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Loose::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Loose::Other)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Loose::Other)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Loose::Other)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Loose::Other)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq).map(|()| Loose::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Loose::Other)
    }
}

fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq)]
    struct Probe<'a> {
        name: Option<Cow<'a, str>>,
        slot: Slot<Pairs<'a>>,
    }

    impl<'de> ObjectFields<'de> for Probe<'de> {
        const NAME: &'static str = "Probe";

        fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
            match key {
                "name" => self.name = map.next_value::<Option<Text<'de>>>()?.map(|t| t.0),
                "slot" => self.slot = map.next_value()?,
                _ => return Ok(false),
            }
            Ok(true)
        }
    }

    impl<'de> Deserialize<'de> for Probe<'de> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            deserialize_object(d)
        }
    }

    #[test]
    fn strings_are_borrowed_unless_escaped() {
        let p: Probe = serde_json::from_str(r#"{"name": "plain"}"#).unwrap();
        assert!(matches!(p.name, Some(Cow::Borrowed("plain"))));
        let p: Probe = serde_json::from_str(r#"{"name": "a\"b"}"#).unwrap();
        assert!(matches!(p.name.as_deref(), Some("a\"b")));
    }

    #[test]
    fn objects_only_last_member_wins_unknown_skipped() {
        assert!(serde_json::from_str::<Probe>(r#"["x", {}]"#).is_err());
        let p: Probe =
            serde_json::from_str(r#"{"name": "a", "x": [1, {"y": 2}], "name": "b"}"#).unwrap();
        assert_eq!(p.name.as_deref(), Some("b"));
        let p: Probe = serde_json::from_str(r#"{"slot": {"k": "1", "k": "2"}}"#).unwrap();
        assert_eq!(p.slot.get().and_then(|s| s.get("k")), Some("2"));
    }

    #[test]
    fn slots_tell_absent_from_null() {
        let p: Probe = serde_json::from_str("{}").unwrap();
        assert_eq!(p.slot, Slot::Absent);
        let p: Probe = serde_json::from_str(r#"{"slot": null}"#).unwrap();
        assert_eq!(p.slot, Slot::Null);
        assert!(serde_json::from_str::<Probe>(r#"{"slot": {"k": 1}}"#).is_err());
    }

    #[test]
    fn quantities_accept_numbers_as_text() {
        let q: Quantities = serde_json::from_str(r#"{"a": 1, "b": "2Gi", "c": 1.5}"#).unwrap();
        assert_eq!(
            (q.0.get("a"), q.0.get("b"), q.0.get("c")),
            (Some("1"), Some("2Gi"), Some("1.5"))
        );
        assert!(serde_json::from_str::<Quantities>(r#"{"a": [1]}"#).is_err());
    }

    #[test]
    fn loose_values_and_if_object() {
        let v: Vec<Loose> = serde_json::from_str(r#"["s", true, 1, null, [1], {"a": 1}]"#).unwrap();
        assert_eq!(v[0].clone().text().as_deref(), Some("s"));
        assert_eq!(v[1].bool(), Some(true));
        assert!(v[2..].iter().all(|l| *l == Loose::Other));
        let v: Vec<IfObject<Probe>> =
            serde_json::from_str(r#"[{"name": "n"}, [1], "s", 2]"#).unwrap();
        assert!(v[0].0.is_some() && v[1..].iter().all(|o| o.0.is_none()));
    }
}
