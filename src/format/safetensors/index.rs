//! Sharded checkpoints: `model.safetensors.index.json` and the checks of the index against
//! its shards.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::json::{json_error, Field, Key};
use super::SafetensorsHeader;
use crate::format::{Diagnostic, Diagnostics, FormatError, FormatErrorKind};

/// Largest `model.safetensors.index.json` read from disk, in bytes (real ones are a few MB:
/// 9 MB for a 91,000-tensor checkpoint). Larger files are refused with an error naming them.
pub const MAX_INDEX_BYTES: u64 = 64 << 20;
/// Most `weight_map` entries read from an index.
pub const MAX_INDEX_ENTRIES: u64 = 1 << 21;
/// Most JSON values kept from an index's `metadata` (nested ones included).
pub const MAX_INDEX_METADATA_VALUES: u64 = 4096;

/// A parsed `model.safetensors.index.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardIndex {
    /// `metadata.total_size`: the bytes of all tensors, as the writer counted them (advisory).
    pub total_size: Option<u64>,
    /// `weight_map` as `(tensor, shard file)` pairs in file order. Every shard name here is a
    /// plain file name: entries with unsafe names (`/`, `\`, `..`, …) are dropped and
    /// diagnosed, so that no caller opens a path outside the checkpoint's folder.
    pub weight_map: Vec<(String, String)>,
    /// The `metadata` object's entries in file order (`total_size` included).
    pub metadata: Vec<(String, serde_json::Value)>,
    /// Problems found in the index itself (see the module docs for the codes).
    pub diagnostics: Vec<Diagnostic>,
}

impl ShardIndex {
    /// The shard files the map names, each once, sorted.
    pub fn shard_files(&self) -> Vec<String> {
        let set: BTreeSet<&str> = self.weight_map.iter().map(|(_, s)| s.as_str()).collect();
        set.into_iter().map(str::to_string).collect()
    }

    /// The shard file that holds `tensor`, according to the map.
    pub fn shard_of(&self, tensor: &str) -> Option<&str> {
        self.weight_map
            .iter()
            .find(|(t, _)| t == tensor)
            .map(|(_, s)| s.as_str())
    }
}

/// Parse a sharded checkpoint's index (`model.safetensors.index.json`).
///
/// The index is read as a stream: `weight_map` entry by entry (at most
/// [`MAX_INDEX_ENTRIES`]), `metadata` values kept as JSON up to [`MAX_INDEX_METADATA_VALUES`]
/// values in all (beyond which they are `null`, with a
/// `safetensors.index.metadata-truncated` warning), other keys skipped. Callers that read the
/// index from disk bound its size first ([`MAX_INDEX_BYTES`]).
///
/// # Errors
///
/// [`FormatErrorKind::InvalidUtf8`] or [`FormatErrorKind::InvalidHeader`] when the bytes are
/// not a UTF-8 JSON object with a `weight_map` object; [`FormatErrorKind::TooManyEntries`]
/// past [`MAX_INDEX_ENTRIES`]; everything else is a diagnostic in [`ShardIndex::diagnostics`].
pub fn parse_index(bytes: &[u8]) -> Result<ShardIndex, FormatError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        FormatError::new(
            FormatErrorKind::InvalidUtf8("safetensors index".into()),
            e.valid_up_to() as u64,
        )
    })?;
    let mut diags = Diagnostics::new();
    let mut out = IndexParts::default();
    let mut too_many = false;
    let mut de = serde_json::Deserializer::from_str(text);
    let result = de
        .deserialize_map(IndexVisitor {
            diags: &mut diags,
            out: &mut out,
            too_many: &mut too_many,
        })
        .and_then(|()| de.end());
    match result {
        Ok(()) => {}
        Err(_) if too_many => {
            return Err(FormatError::new(
                FormatErrorKind::TooManyEntries {
                    what: "weight_map entries in a safetensors index",
                    limit: MAX_INDEX_ENTRIES,
                    code: "safetensors.index.too-many-entries",
                },
                0,
            ))
        }
        Err(e) => return Err(json_error(text, 0, "safetensors index", &e)),
    }
    let Some(weight_map) = out.weight_map else {
        let what = match out.weight_map_kind {
            Some(kind) => format!("'weight_map' is {kind}, not an object"),
            None => "no 'weight_map' object".to_string(),
        };
        return Err(FormatError::new(
            FormatErrorKind::InvalidHeader(format!("safetensors index: {what}")),
            0,
        ));
    };
    if out.metadata_truncated {
        diags.warning(
            "safetensors.index.metadata-truncated",
            format!(
                "index metadata holds more than {MAX_INDEX_METADATA_VALUES} JSON values; the \
                 values past that are shown as null"
            ),
        );
    }
    Ok(ShardIndex {
        total_size: out.total_size,
        weight_map,
        metadata: out.metadata,
        diagnostics: diags.finish(),
    })
}

#[derive(Default)]
struct IndexParts {
    total_size: Option<u64>,
    weight_map: Option<Vec<(String, String)>>,
    /// The kind of a `weight_map` that is not an object.
    weight_map_kind: Option<&'static str>,
    metadata: Vec<(String, serde_json::Value)>,
    metadata_truncated: bool,
}

struct IndexVisitor<'a> {
    diags: &'a mut Diagnostics,
    out: &'a mut IndexParts,
    too_many: &'a mut bool,
}

impl<'de> Visitor<'de> for IndexVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let (mut weight_map_seen, mut metadata_seen) = (false, false);
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            let seen = match key.as_ref() {
                "weight_map" => &mut weight_map_seen,
                "metadata" => &mut metadata_seen,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            if std::mem::replace(seen, true) {
                self.diags.error(
                    "safetensors.index.duplicate-key",
                    format!("index key '{key}' appears more than once; the first is kept"),
                );
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            if key == "weight_map" {
                map.next_value_seed(WeightMapSeed {
                    diags: self.diags,
                    out: self.out,
                    too_many: self.too_many,
                })?;
            } else {
                map.next_value_seed(IndexMetadataSeed {
                    diags: self.diags,
                    out: self.out,
                })?;
            }
        }
        Ok(())
    }
}

struct WeightMapSeed<'a> {
    diags: &'a mut Diagnostics,
    out: &'a mut IndexParts,
    too_many: &'a mut bool,
}

impl<'de> DeserializeSeed<'de> for WeightMapSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for WeightMapSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of tensor names to shard names")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.out.weight_map_kind = Some("null");
        Ok(())
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.out.weight_map_kind = Some("a boolean");
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.out.weight_map_kind = Some("a number");
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.visit_u64(0)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.visit_u64(0)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.out.weight_map_kind = Some("a string");
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        self.out.weight_map_kind = Some("an array");
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen: HashSet<Cow<'de, str>> = HashSet::new();
        let mut weight_map = Vec::new();
        let mut read = 0u64;
        while let Some(Key(tensor)) = map.next_key::<Key<'de>>()? {
            read += 1;
            if read > MAX_INDEX_ENTRIES {
                *self.too_many = true;
                return Err(de::Error::custom("too many weight_map entries"));
            }
            if seen.contains(&tensor) {
                self.diags.error(
                    "safetensors.index.duplicate-key",
                    format!("weight_map lists tensor '{tensor}' more than once; the first is kept"),
                );
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let shard: Field = map.next_value()?;
            let entry = match shard.text {
                None => {
                    self.diags.error(
                        "safetensors.index.invalid-shard-name",
                        format!(
                            "weight_map: tensor '{tensor}' maps to {}, not a file name",
                            shard.kind
                        ),
                    );
                    None
                }
                Some(shard) => match unsafe_shard_name(&shard) {
                    Some(why) => {
                        self.diags.error(
                            "safetensors.index.invalid-shard-name",
                            format!(
                                "weight_map: tensor '{tensor}' maps to \"{}\", which {why}; the \
                                 entry is ignored",
                                shard.escape_debug()
                            ),
                        );
                        None
                    }
                    None => Some((tensor.to_string(), shard)),
                },
            };
            seen.insert(tensor);
            weight_map.extend(entry);
        }
        self.out.weight_map = Some(weight_map);
        Ok(())
    }
}

struct IndexMetadataSeed<'a> {
    diags: &'a mut Diagnostics,
    out: &'a mut IndexParts,
}

impl<'de> DeserializeSeed<'de> for IndexMetadataSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl IndexMetadataSeed<'_> {
    fn not_an_object(self, kind: &str) {
        self.diags.warning(
            "safetensors.index.invalid-metadata",
            format!("index 'metadata' is {kind}, not an object"),
        );
    }
}

impl<'de> Visitor<'de> for IndexMetadataSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.not_an_object("null");
        Ok(())
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.not_an_object("a boolean");
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.not_an_object("a number");
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.visit_u64(0)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.visit_u64(0)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.not_an_object("a string");
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        self.not_an_object("an array");
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut budget = MAX_INDEX_METADATA_VALUES;
        let mut seen: HashSet<Cow<'de, str>> = HashSet::new();
        while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
            if seen.contains(&k) {
                self.diags.error(
                    "safetensors.index.duplicate-key",
                    format!("index metadata key '{k}' appears more than once; the first is kept"),
                );
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let v = map.next_value_seed(JsonSeed {
                budget: &mut budget,
                truncated: &mut self.out.metadata_truncated,
                diags: self.diags,
                path: &format!("metadata.{k}"),
            })?;
            if k == "total_size" {
                match v.as_u64() {
                    Some(u) if v.is_u64() => self.out.total_size = Some(u),
                    _ => self.diags.warning(
                        "safetensors.index.invalid-total-size",
                        format!(
                            "index metadata 'total_size' is {}, not a non-negative integer",
                            describe(&v)
                        ),
                    ),
                }
            }
            // Bounded by MAX_INDEX_METADATA_VALUES: each key holds at least one value.
            if self.out.metadata.len() as u64 <= MAX_INDEX_METADATA_VALUES {
                self.out.metadata.push((k.to_string(), v));
            }
            seen.insert(k);
        }
        Ok(())
    }
}

/// A `serde_json::Value` within a budget of values: past it, values read as `null` (their
/// text is skipped) and `truncated` is set. Duplicate keys are reported with their path;
/// the first is kept.
struct JsonSeed<'a> {
    budget: &'a mut u64,
    truncated: &'a mut bool,
    diags: &'a mut Diagnostics,
    path: &'a str,
}

impl<'de> DeserializeSeed<'de> for JsonSeed<'_> {
    type Value = serde_json::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<serde_json::Value, D::Error> {
        if *self.budget == 0 {
            *self.truncated = true;
            <IgnoredAny as de::Deserialize>::deserialize(d)?;
            return Ok(serde_json::Value::Null);
        }
        *self.budget -= 1;
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for JsonSeed<'_> {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<serde_json::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<serde_json::Value, E> {
        self.visit_unit()
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<serde_json::Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<serde_json::Value, E> {
        Ok(v.into())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<serde_json::Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<serde_json::Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, Into::into))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<serde_json::Value, E> {
        Ok(v.into())
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<serde_json::Value, E> {
        Ok(v.into())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<serde_json::Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let path = format!("{}[{}]", self.path, items.len());
            let seed = JsonSeed {
                budget: self.budget,
                truncated: self.truncated,
                diags: self.diags,
                path: &path,
            };
            match seq.next_element_seed(seed)? {
                Some(v) => items.push(v),
                None => break,
            }
        }
        Ok(serde_json::Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<serde_json::Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
            let path = format!("{}.{k}", self.path);
            if out.contains_key(k.as_ref()) {
                self.diags.error(
                    "safetensors.index.duplicate-key",
                    format!("index key '{path}' appears more than once; the first is kept"),
                );
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let v = map.next_value_seed(JsonSeed {
                budget: self.budget,
                truncated: self.truncated,
                diags: self.diags,
                path: &path,
            })?;
            out.insert(k.into_owned(), v);
        }
        Ok(serde_json::Value::Object(out))
    }
}

/// The kind of a JSON value, with short scalar values spelled out (for messages).
fn describe(v: &serde_json::Value) -> String {
    use serde_json::Value as J;
    match v {
        J::Null => "null".into(),
        J::Bool(_) => "a boolean".into(),
        J::Number(n) => format!("the number {n}"),
        J::String(_) => "a string".into(),
        J::Array(items) => {
            if items.len() <= 8 && items.iter().all(|i| !i.is_array() && !i.is_object()) {
                let parts: Vec<String> = items.iter().map(J::to_string).collect();
                format!("[{}]", parts.join(", "))
            } else {
                format!("an array of {} items", items.len())
            }
        }
        J::Object(_) => "an object".into(),
    }
}

/// Why `name` is not a safe plain file name, if it is not.
pub(super) fn unsafe_shard_name(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("is empty")
    } else if name.contains('/') || name.contains('\\') {
        Some("is a path, not a file name")
    } else if name.contains("..") {
        Some("contains '..'")
    } else if name.contains(':') {
        Some("contains ':' (a drive or stream on Windows)")
    } else if name.contains('\0') {
        Some("contains a NUL byte")
    } else {
        None
    }
}

/// Split a numbered shard name `NAME-0000i-of-0000N.safetensors` into `(NAME, i, N)`.
///
/// ```
/// use weight_inspect::format::safetensors::parse_shard_name;
/// assert_eq!(parse_shard_name("model-00002-of-00004.safetensors"), Some(("model", 2, 4)));
/// assert_eq!(parse_shard_name("model.safetensors"), None);
/// ```
pub fn parse_shard_name(name: &str) -> Option<(&str, u32, u32)> {
    let stem = name.strip_suffix(".safetensors")?;
    let (left, total) = stem.rsplit_once("-of-")?;
    let (prefix, index) = left.rsplit_once('-')?;
    let number = |s: &str| {
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            s.parse::<u32>().ok()
        } else {
            None
        }
    };
    Some((prefix, number(index)?, number(total)?))
}

/// Check a sharded checkpoint: the index against the parsed shards, both ways, and the shard
/// names. `shards` holds each shard's file name (as the index spells it) and header; a shard
/// that the index names but `shards` lacks is reported as missing.
///
/// The diagnostics of the index itself ([`ShardIndex::diagnostics`]) and of each shard's
/// header are not repeated here.
pub fn check_sharded(
    index: &ShardIndex,
    shards: &[(String, &SafetensorsHeader)],
) -> Vec<Diagnostic> {
    let mut diags = Diagnostics::new();
    let files = index.shard_files();
    let provided: HashSet<&str> = shards.iter().map(|(n, _)| n.as_str()).collect();

    for f in &files {
        if !provided.contains(f.as_str()) {
            diags.push(Diagnostic::error(
                "safetensors.shard.missing-file",
                format!("shard '{f}' named by the index is missing"),
            ));
        }
    }
    check_shard_names(&files, &mut diags);

    // Each provided shard once (the first of two with one name).
    let mut seen_files = HashSet::new();
    let shards: Vec<(&str, &SafetensorsHeader)> = shards
        .iter()
        .filter(|(f, _)| seen_files.insert(f.as_str()))
        .map(|(f, h)| (f.as_str(), *h))
        .collect();

    // Where each tensor really is.
    let mut located: HashMap<&str, Vec<&str>> = HashMap::new();
    for &(file, header) in &shards {
        for t in &header.tensors {
            located.entry(t.name.as_str()).or_default().push(file);
        }
    }

    let mapped: HashMap<&str, &str> = index
        .weight_map
        .iter()
        .map(|(t, s)| (t.as_str(), s.as_str()))
        .collect();
    for (tensor, shard) in &index.weight_map {
        let places = located
            .get(tensor.as_str())
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        if places.contains(&shard.as_str()) {
            continue;
        }
        if let Some(actual) = places.first() {
            diags.push(Diagnostic::error(
                "safetensors.shard.wrong-shard",
                format!("tensor '{tensor}' is mapped to shard '{shard}' but stored in '{actual}'"),
            ));
        } else if provided.contains(shard.as_str()) {
            diags.push(Diagnostic::error(
                "safetensors.shard.missing-tensor",
                format!("tensor '{tensor}' is mapped to shard '{shard}', which does not hold it"),
            ));
        }
    }

    let mut reported_dup = HashSet::new();
    for &(file, header) in &shards {
        for t in &header.tensors {
            let name = t.name.as_str();
            if !mapped.contains_key(name) {
                diags.push(Diagnostic::error(
                    "safetensors.shard.unmapped-tensor",
                    format!("tensor '{name}' of shard '{file}' is not in the index's weight_map"),
                ));
            }
            if let Some(places) = located.get(name) {
                if places.len() > 1 && reported_dup.insert(name) {
                    diags.push(Diagnostic::error(
                        "safetensors.shard.duplicate-tensor",
                        format!(
                            "tensor '{name}' is stored in {} shards: {}",
                            places.len(),
                            places.join(", ")
                        ),
                    ));
                }
            }
        }
    }

    if let Some(total) = index.total_size {
        if files.iter().all(|f| provided.contains(f.as_str())) {
            let wanted: HashSet<&str> = files.iter().map(String::as_str).collect();
            let mut counted = HashSet::new();
            let sum = shards
                .iter()
                .filter(|(f, _)| wanted.contains(f))
                .flat_map(|(_, h)| h.tensors.iter())
                .filter(|t| counted.insert(t.name.as_str()))
                .fold(0u64, |acc, t| acc.saturating_add(t.n_bytes));
            if sum != total {
                diags.push(Diagnostic::warning(
                    "safetensors.index.total-size-mismatch",
                    format!(
                        "index metadata total_size is {total} but the shards' tensors hold \
                         {sum} bytes (advisory: writers count tied storage once)"
                    ),
                ));
            }
        }
    }
    diags.finish()
}

fn check_shard_names(files: &[String], diags: &mut Diagnostics) {
    let mut numbered = Vec::new();
    for f in files {
        match parse_shard_name(f) {
            Some(p) => numbered.push((f.as_str(), p)),
            None => diags.push(Diagnostic::warning(
                "safetensors.shard.naming",
                format!("shard '{f}' is not named NAME-0000i-of-0000N.safetensors"),
            )),
        }
    }
    let Some(&(first_file, (prefix, _, total))) = numbered.first() else {
        return;
    };
    let mut present = BTreeSet::new();
    for &(f, (p, i, n)) in &numbered {
        if p != prefix || n != total {
            diags.push(Diagnostic::error(
                "safetensors.shard.naming",
                format!(
                    "shard '{f}' does not match '{first_file}': names of one checkpoint share \
                     their prefix and shard count"
                ),
            ));
        } else if i == 0 || i > n {
            diags.push(Diagnostic::error(
                "safetensors.shard.naming",
                format!("shard '{f}' is numbered {i}, outside 1..={n} (shards count from 1)"),
            ));
        } else {
            present.insert(i);
        }
    }
    let missing_count = u64::from(total) - present.len() as u64;
    if missing_count > 0 {
        let shown: Vec<String> = (1..=total)
            .filter(|i| !present.contains(i))
            .take(10)
            .map(|i| i.to_string())
            .collect();
        let more = if missing_count > 10 { ", …" } else { "" };
        diags.push(Diagnostic::error(
            "safetensors.shard.missing-shard",
            format!(
                "{missing_count} of the {total} shards of '{prefix}' are not named by the \
                 index: number(s) {}{more}",
                shown.join(", ")
            ),
        ));
    }
}
