//! Streaming JSON reading for safetensors headers and indexes.
//!
//! The header is read entry by entry with serde visitors: no JSON tree of the whole header
//! is built, names borrow from the header text where they hold no escapes, duplicate keys
//! are seen (a map visitor sees every key, `serde_json::Value` keeps only the last), and a
//! value of the wrong shape is described in a diagnostic instead of failing the parse. Every
//! container is bounded: entry counts by [`MAX_TENSORS`](super::MAX_TENSORS) and
//! [`MAX_METADATA_ENTRIES`](super::MAX_METADATA_ENTRIES), shapes by
//! [`MAX_DIMS`](super::MAX_DIMS), unknown fields and array descriptions by small constants.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{Dtype, MAX_DIMS, MAX_METADATA_ENTRIES, MAX_TENSORS, METADATA_KEY};
use crate::format::{Diagnostic, Diagnostics, FormatError, FormatErrorKind};

/// One tensor entry as read from the header (with readable offsets), before the layout
/// checks.
pub(super) struct RawEntry<'h> {
    pub name: Cow<'h, str>,
    pub dtype: Option<Dtype>,
    pub shape: Option<Vec<u64>>,
    pub offsets: (u64, u64),
}

/// What the header holds, before the layout checks.
#[derive(Default)]
pub(super) struct RawHeader<'h> {
    pub entries: Vec<RawEntry<'h>>,
    pub metadata: Vec<(String, String)>,
}

/// A limit that stopped the parse (set by a visitor before it returns its error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    TooManyTensors,
    TooManyMetadata,
}

/// Parse the header text: fatal for malformed JSON, a non-object top level or too many
/// entries; everything about the entries themselves goes to `diags`.
pub(super) fn parse_header<'h>(
    text: &'h str,
    diags: &mut Diagnostics,
) -> Result<RawHeader<'h>, FormatError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let mut stop = None;
    let mut out = RawHeader::default();
    let result = de
        .deserialize_map(HeaderVisitor {
            diags,
            out: &mut out,
            stop: &mut stop,
        })
        .and_then(|()| de.end());
    match (result, stop) {
        (Ok(()), _) => Ok(out),
        (Err(_), Some(Stop::TooManyTensors)) => Err(FormatError::new(
            FormatErrorKind::TooManyEntries {
                what: "tensors in a safetensors header",
                limit: MAX_TENSORS,
                code: "safetensors.header.too-many-tensors",
            },
            8,
        )),
        (Err(_), Some(Stop::TooManyMetadata)) => Err(FormatError::new(
            FormatErrorKind::TooManyEntries {
                what: "'__metadata__' entries in a safetensors header",
                limit: MAX_METADATA_ENTRIES,
                code: "safetensors.header.too-many-metadata",
            },
            8,
        )),
        (Err(e), None) => Err(json_error(text, 8, "safetensors JSON header", &e)),
    }
}

/// A fatal error for malformed JSON, at the absolute byte offset serde_json stopped at.
pub(super) fn json_error(text: &str, base: u64, what: &str, e: &serde_json::Error) -> FormatError {
    // serde_json reports 1-based lines and 1-based byte columns (0 at end of input).
    let line_start: usize = text
        .split_inclusive('\n')
        .take(e.line().saturating_sub(1))
        .map(str::len)
        .sum();
    let pos = (line_start + e.column().saturating_sub(1)).min(text.len());
    FormatError::new(
        FormatErrorKind::InvalidHeader(format!("{what}: {e}")),
        base + pos as u64,
    )
}

// ---------------------------------------------------------------------------------------
// Keys that borrow when they can
// ---------------------------------------------------------------------------------------

/// A JSON string, borrowed from the text when it holds no escape.
pub(super) struct Key<'de>(pub Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

// ---------------------------------------------------------------------------------------
// A field's value, described rather than rejected
// ---------------------------------------------------------------------------------------

/// Array items spelled out in a description (`[0, 4, 8]`); longer arrays are counted.
const SHOWN_ITEMS: usize = 8;
/// Characters of a string item shown in a description.
const SHOWN_CHARS: usize = 40;

/// Any JSON value, kept only as far as a header field needs: a string, an array of `u64`
/// (at most [`MAX_DIMS`] items), or a description for messages. Nested containers are
/// skipped, not stored.
#[derive(Debug, Default)]
pub(super) struct Field {
    /// "a string", "a number", "an array", "an object", "null", "a boolean".
    pub kind: &'static str,
    /// The string, for a string.
    pub text: Option<String>,
    /// The items, for an array of at most [`MAX_DIMS`] non-negative integers.
    pub u64s: Option<Vec<u64>>,
    /// The number, for a non-negative integer.
    pub uint: Option<u64>,
    /// For messages: scalars spelled out, short arrays listed, others by kind.
    pub describe: String,
}

impl<'de> de::Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(FieldVisitor)
    }
}

struct FieldVisitor;

fn scalar(kind: &'static str, describe: String) -> Field {
    Field {
        kind,
        describe,
        ..Field::default()
    }
}

impl<'de> Visitor<'de> for FieldVisitor {
    type Value = Field;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Field, E> {
        Ok(scalar("null", "null".into()))
    }
    fn visit_none<E: de::Error>(self) -> Result<Field, E> {
        self.visit_unit()
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Field, E> {
        Ok(scalar("a boolean", v.to_string()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Field, E> {
        let mut f = scalar("a number", format!("the number {v}"));
        f.uint = Some(v);
        Ok(f)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Field, E> {
        match u64::try_from(v) {
            Ok(u) => self.visit_u64(u),
            Err(_) => Ok(scalar("a number", format!("the number {v}"))),
        }
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Field, E> {
        Ok(scalar("a number", format!("the number {v}")))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Field, E> {
        self.visit_string(v.to_owned())
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Field, E> {
        Ok(Field {
            kind: "a string",
            text: Some(v),
            describe: "a string".into(),
            ..Field::default()
        })
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Field, A::Error> {
        // No capacity from size_hint: the items themselves bound the allocation.
        let mut u64s = Some(Vec::new());
        let mut shown: Vec<String> = Vec::new();
        let mut all_scalar = true;
        let mut len = 0u64;
        while let Some(item) = seq.next_element::<Item>()? {
            len += 1;
            match (&mut u64s, item.uint) {
                (Some(v), Some(u)) if v.len() < MAX_DIMS => v.push(u),
                _ => u64s = None,
            }
            all_scalar &= item.scalar;
            if shown.len() < SHOWN_ITEMS {
                shown.push(item.text);
            }
        }
        let describe = if len as usize <= SHOWN_ITEMS && all_scalar {
            format!("[{}]", shown.join(", "))
        } else {
            format!("an array of {len} items")
        };
        Ok(Field {
            kind: "an array",
            u64s,
            describe,
            ..Field::default()
        })
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Field, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(scalar("an object", "an object".into()))
    }
}

/// One array item: its text for a description, and its value if a non-negative integer.
struct Item {
    uint: Option<u64>,
    scalar: bool,
    text: String,
}

impl<'de> de::Deserialize<'de> for Item {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ItemVisitor)
    }
}

struct ItemVisitor;

fn item(text: String) -> Item {
    Item {
        uint: None,
        scalar: true,
        text,
    }
}

impl<'de> Visitor<'de> for ItemVisitor {
    type Value = Item;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Item, E> {
        Ok(item("null".into()))
    }
    fn visit_none<E: de::Error>(self) -> Result<Item, E> {
        self.visit_unit()
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Item, E> {
        Ok(item(v.to_string()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Item, E> {
        Ok(Item {
            uint: Some(v),
            scalar: true,
            text: v.to_string(),
        })
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Item, E> {
        match u64::try_from(v) {
            Ok(u) => self.visit_u64(u),
            Err(_) => Ok(item(v.to_string())),
        }
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Item, E> {
        Ok(item(v.to_string()))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Item, E> {
        let shown: String = v.chars().take(SHOWN_CHARS).collect();
        let more = if shown.len() < v.len() { "…" } else { "" };
        Ok(item(format!("\"{}{more}\"", shown.escape_debug())))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Item, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Item {
            uint: None,
            scalar: false,
            text: "[…]".into(),
        })
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Item, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Item {
            uint: None,
            scalar: false,
            text: "{…}".into(),
        })
    }
}

// ---------------------------------------------------------------------------------------
// The header
// ---------------------------------------------------------------------------------------

struct HeaderVisitor<'a, 'h> {
    diags: &'a mut Diagnostics,
    out: &'a mut RawHeader<'h>,
    stop: &'a mut Option<Stop>,
}

impl<'de, 'a> Visitor<'de> for HeaderVisitor<'a, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen: HashSet<Cow<'de, str>> = HashSet::new();
        let mut metadata_seen = false;
        let mut tensors_read = 0u64;
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            if key == METADATA_KEY {
                if metadata_seen {
                    self.diags.error(
                        "safetensors.duplicate-key",
                        "key '__metadata__' appears more than once in the header; the first is kept",
                    );
                    map.next_value::<IgnoredAny>()?;
                } else {
                    metadata_seen = true;
                    map.next_value_seed(MetadataSeed {
                        diags: self.diags,
                        out: &mut self.out.metadata,
                        stop: self.stop,
                    })?;
                }
                continue;
            }
            tensors_read += 1;
            if tensors_read > MAX_TENSORS {
                *self.stop = Some(Stop::TooManyTensors);
                return Err(de::Error::custom("too many tensors"));
            }
            if seen.contains(&key) {
                self.diags.error(
                    "safetensors.duplicate-key",
                    format!(
                        "tensor '{key}' appears more than once in the header (readers may keep \
                         either entry); the first is kept"
                    ),
                );
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let entry = map.next_value_seed(EntrySeed {
                name: &key,
                diags: self.diags,
            })?;
            seen.insert(key.clone());
            // An entry without readable offsets takes no part in the layout: its
            // diagnostic is all there is to say about it.
            if let Some(offsets) = entry.offsets {
                self.out.entries.push(RawEntry {
                    name: key,
                    dtype: entry.dtype,
                    shape: entry.shape,
                    offsets,
                });
            }
        }
        Ok(())
    }
}

/// The fields of one entry, checked.
struct EntryFields {
    dtype: Option<Dtype>,
    shape: Option<Vec<u64>>,
    offsets: Option<(u64, u64)>,
}

struct EntrySeed<'a> {
    name: &'a str,
    diags: &'a mut Diagnostics,
}

/// Unknown field names listed in a diagnostic; more are counted.
const SHOWN_UNKNOWN: usize = 8;

impl<'de> DeserializeSeed<'de> for EntrySeed<'_> {
    type Value = EntryFields;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<EntryFields, D::Error> {
        d.deserialize_any(self)
    }
}

impl EntrySeed<'_> {
    fn not_an_object(self, kind: &str) -> EntryFields {
        self.diags.error(
            "safetensors.invalid-entry",
            format!(
                "tensor '{}': entry is {kind}, not an object {{dtype, shape, data_offsets}}",
                self.name
            ),
        );
        EntryFields {
            dtype: None,
            shape: None,
            offsets: None,
        }
    }
}

impl<'de> Visitor<'de> for EntrySeed<'_> {
    type Value = EntryFields;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a tensor entry")
    }
    fn visit_unit<E: de::Error>(self) -> Result<EntryFields, E> {
        Ok(self.not_an_object("null"))
    }
    fn visit_none<E: de::Error>(self) -> Result<EntryFields, E> {
        self.visit_unit()
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<EntryFields, E> {
        Ok(self.not_an_object("a boolean"))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<EntryFields, E> {
        Ok(self.not_an_object("a number"))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<EntryFields, E> {
        Ok(self.not_an_object("a number"))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<EntryFields, E> {
        Ok(self.not_an_object("a number"))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<EntryFields, E> {
        Ok(self.not_an_object("a string"))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<EntryFields, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(self.not_an_object("an array"))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<EntryFields, A::Error> {
        let name = self.name;
        let diags = self.diags;
        let mut out = EntryFields {
            dtype: None,
            shape: None,
            offsets: None,
        };
        let (mut has_dtype, mut has_shape, mut has_offsets) = (false, false, false);
        let mut unknown: Vec<String> = Vec::new();
        let mut unknown_count = 0u64;
        let mut seen_unknown: HashSet<Cow<'de, str>> = HashSet::new();
        while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
            let dup = match k.as_ref() {
                "dtype" => std::mem::replace(&mut has_dtype, true),
                "shape" => std::mem::replace(&mut has_shape, true),
                "data_offsets" => std::mem::replace(&mut has_offsets, true),
                _ => {
                    // Bounded: only the first few unknown names are remembered for
                    // duplicate detection and the message.
                    if seen_unknown.contains(&k) {
                        true
                    } else {
                        unknown_count += 1;
                        if seen_unknown.len() < SHOWN_UNKNOWN {
                            seen_unknown.insert(k.clone());
                            unknown.push(format!("'{k}'"));
                        }
                        false
                    }
                }
            };
            if dup {
                diags.error(
                    "safetensors.duplicate-key",
                    format!(
                        "tensor '{name}': field '{k}' appears more than once; the first is kept"
                    ),
                );
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            match k.as_ref() {
                "dtype" => {
                    let v: Field = map.next_value()?;
                    match v.text {
                        Some(s) => match Dtype::from_name(&s) {
                            Some(d) => out.dtype = Some(d),
                            None => diags.error(
                                "safetensors.unknown-dtype",
                                format!("tensor '{name}': unknown dtype \"{}\"", s.escape_debug()),
                            ),
                        },
                        None => diags.error(
                            "safetensors.invalid-entry",
                            format!("tensor '{name}': dtype is {}, not a string", v.kind),
                        ),
                    }
                }
                "shape" => {
                    let v: Field = map.next_value()?;
                    match v.u64s {
                        Some(dims) => out.shape = Some(dims),
                        None => diags.error(
                            "safetensors.invalid-entry",
                            format!(
                                "tensor '{name}': shape is {}, not an array of at most {MAX_DIMS} \
                                 non-negative integers",
                                v.describe
                            ),
                        ),
                    }
                }
                "data_offsets" => {
                    let v: Field = map.next_value()?;
                    match v.u64s.as_deref() {
                        Some(&[begin, end]) => out.offsets = Some((begin, end)),
                        _ => diags.error(
                            "safetensors.invalid-entry",
                            format!(
                                "tensor '{name}': data_offsets is {}, not [begin, end] of \
                                 non-negative integers",
                                v.describe
                            ),
                        ),
                    }
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let missing: Vec<&str> = [
            ("dtype", has_dtype),
            ("shape", has_shape),
            ("data_offsets", has_offsets),
        ]
        .iter()
        .filter(|(_, present)| !present)
        .map(|(f, _)| *f)
        .collect();
        if !missing.is_empty() {
            diags.error(
                "safetensors.invalid-entry",
                format!("tensor '{name}': missing field(s) {}", missing.join(", ")),
            );
        }
        if unknown_count > 0 {
            let more = if unknown_count > unknown.len() as u64 {
                format!(", … ({unknown_count} in all)")
            } else {
                String::new()
            };
            diags.warning(
                "safetensors.unknown-field",
                format!(
                    "tensor '{name}': unknown field(s) {}{more} (the reference reader ignores them)",
                    unknown.join(", ")
                ),
            );
        }
        Ok(out)
    }
}

struct MetadataSeed<'a> {
    diags: &'a mut Diagnostics,
    out: &'a mut Vec<(String, String)>,
    stop: &'a mut Option<Stop>,
}

impl<'de> DeserializeSeed<'de> for MetadataSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl MetadataSeed<'_> {
    fn not_a_map(self, kind: &str) {
        self.diags.push(Diagnostic::error(
            "safetensors.metadata-not-map",
            format!("'__metadata__' is {kind}, not an object of strings"),
        ));
    }
}

impl<'de> Visitor<'de> for MetadataSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of strings")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.not_a_map("null");
        Ok(())
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.not_a_map("a boolean");
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.not_a_map("a number");
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.not_a_map("a number");
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.not_a_map("a number");
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.not_a_map("a string");
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        self.not_a_map("an array");
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen: HashSet<Cow<'de, str>> = HashSet::new();
        let mut read = 0u64;
        while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
            read += 1;
            if read > MAX_METADATA_ENTRIES {
                *self.stop = Some(Stop::TooManyMetadata);
                return Err(de::Error::custom("too many metadata entries"));
            }
            if seen.contains(&k) {
                self.diags.error(
                    "safetensors.duplicate-key",
                    format!("'__metadata__' key '{k}' appears more than once; the first is kept"),
                );
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let v: Field = map.next_value()?;
            match v.text {
                Some(s) => self.out.push((k.to_string(), s)),
                None => self.diags.error(
                    "safetensors.metadata-not-string",
                    format!(
                        "'__metadata__' value of key '{k}' is {}, not a string",
                        v.kind
                    ),
                ),
            }
            seen.insert(k);
        }
        Ok(())
    }
}
