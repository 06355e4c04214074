//! The JSON schema of the types the Python package exchanges as dicts, generated from the Rust
//! types (the feature `schema`) and committed as `schema/types.schema.json`, which
//! `python/tests/test_types_schema.py` checks the TypedDicts of `types.py` against: what
//! serde writes of the reports (`FetchSummary`, `Plan`: `wi-fetch --json` and `--dry-run
//! --json` too) and of `ResidencyStats`, and what it reads of a `FetchRequest`.
//!
//! A change to those types fails [`the_committed_schema_is_the_rust_types`] until the file is
//! rewritten: `WI_BLESS=1 cargo test --test tests schema::`.

use std::path::Path;

use schemars::generate::SchemaSettings;
use serde_json::{json, Map, Value};
use weight_inspect::fetch::{FetchRequest, FetchSummary, Plan};
use weight_inspect::format::residency::ResidencyStats;

/// Where the schema is committed, from the repository's root.
const FILE: &str = "schema/types.schema.json";

/// The schema of every type, by name (Python's: `FileReport` is `FetchedFile`) in `$defs`, the
/// names sorted.
fn generate() -> Value {
    // What serde writes: a field skipped when empty is optional, every other one required.
    let mut written = SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator();
    written.subschema_for::<FetchSummary>();
    written.subschema_for::<Plan>();
    written.subschema_for::<ResidencyStats>();
    // What serde reads: every field of a request has a default.
    let mut read = SchemaSettings::draft2020_12()
        .for_deserialize()
        .into_generator();
    read.subschema_for::<FetchRequest>();

    let mut defs: Vec<(String, Value)> = written.take_definitions(true).into_iter().collect();
    for (_, schema) in &mut defs {
        never_null_when_left_out(schema);
    }
    for (name, schema) in read.take_definitions(true) {
        match defs.iter().find(|(n, _)| *n == name) {
            // A type both written and read (an enum) must have one schema.
            Some((_, other)) => assert_eq!(other, &schema, "{name} is read and written apart"),
            None => defs.push((name, schema)),
        }
    }
    defs.sort_by(|a, b| a.0.cmp(&b.0));
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "weight-inspect: the dicts of the Python package (weight_inspect.types)",
        "description": "Generated from the Rust types by tests/schema.rs (`WI_BLESS=1 cargo test \
            --test tests schema::` rewrites it); python/tests/test_types_schema.py checks \
            python/python/weight_inspect/types.py against it. FetchSummary and Plan are what \
            `wi-fetch --json` and `wi-fetch --dry-run --json` print (as serialized: a field \
            not required is left out when empty), ResidencyStats what `Model.residency` \
            returns, FetchRequest what `fetch` reads (every field optional).",
        "$defs": Value::Object(defs.into_iter().collect::<Map<_, _>>()),
    })
}

/// A written field that is not required is an `Option` left out when `None`
/// (`skip_serializing_if = "Option::is_none"`), or a list left out when empty: when there, it is
/// never `null`, which schemars (judging by the type) would allow.
fn never_null_when_left_out(schema: &mut Value) {
    let required: Vec<Value> = schema
        .get("required")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    for (name, property) in properties {
        if required.contains(&Value::from(name.as_str())) {
            continue;
        }
        let Some(p) = property.as_object_mut() else {
            continue;
        };
        // `"type": ["string", "null"]`
        if let Some(Value::Array(types)) = p.get_mut("type") {
            types.retain(|t| t != "null");
            if let [one] = types.as_slice() {
                let one = one.clone();
                p.insert("type".into(), one);
            }
        }
        // `"anyOf": [{"$ref": …}, {"type": "null"}]`
        if let Some(Value::Array(any)) = p.get_mut("anyOf") {
            any.retain(|s| s != &json!({"type": "null"}));
            if let [Value::Object(one)] = any.as_slice() {
                let one = one.clone();
                p.remove("anyOf");
                p.extend(one);
            }
        }
    }
}

#[test]
fn the_committed_schema_is_the_rust_types() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(FILE);
    let generated = serde_json::to_string_pretty(&generate()).unwrap() + "\n";
    if std::env::var_os("WI_BLESS").is_some_and(|v| !v.is_empty()) {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "{FILE} is not what the Rust types say (first difference at line {}); rewrite it \
             with `WI_BLESS=1 cargo test --test tests schema::`, review the diff, and make \
             python/python/weight_inspect/types.py agree (python/tests/test_types_schema.py)",
            line + 1
        );
    }
}
