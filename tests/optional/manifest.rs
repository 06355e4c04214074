//! Manifests checked by another tool: Python's `jsonschema` against the repository's schema.

use std::fs;
use std::path::Path;
use std::process::Command;

use weight_inspect::manifest::{self, CreateOptions};

use crate::support::manifest::{model_dir, CHUNK};

/// Every manifest written validates against the JSON Schema in the repository (with Python's
/// `jsonschema`, which `.ci/run` installs).
pub fn manifests_validate_against_the_schema() {
    let python = crate::support::required_env("WI_PYTHON");
    let (d, dir) = model_dir();
    let man = d.path().join("m.json");
    let m = manifest::create(&[dir], &CreateOptions::default().with_chunk_size(CHUNK)).unwrap();
    fs::write(&man, m.to_json()).unwrap();
    let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/manifest.schema.json");
    let script = "import json, sys, jsonschema\n\
                  schema = json.load(open(sys.argv[1]))\n\
                  jsonschema.Draft202012Validator.check_schema(schema)\n\
                  jsonschema.validate(json.load(open(sys.argv[2])), schema, cls=jsonschema.Draft202012Validator)\n\
                  bad = json.load(open(sys.argv[2])); bad['files'][0]['path'] = '../x'\n\
                  try:\n    jsonschema.validate(bad, schema, cls=jsonschema.Draft202012Validator)\n    sys.exit(3)\n\
                  except jsonschema.ValidationError:\n    pass\n";
    let o = Command::new(python)
        .args(["-c", script])
        .arg(&schema)
        .arg(&man)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
