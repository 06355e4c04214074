//! `weight-inspect` on files written by other tools: the real vocabulary files of
//! `../shared/data`, and gguf-py's files read as gguf-py reads them.

use std::process::Command;

use serde_json::Value as Json;

use crate::support::manifest::run;

fn json_lines(out: &std::process::Output) -> Vec<Json> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each stdout line is JSON"))
        .collect()
}

pub fn real_vocab_files_are_valid_with_the_documented_counts() {
    let data = crate::support::shared_data();
    let dir = data.join("gguf-vocab");
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let mut expected = Vec::new();
    for line in readme.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() >= 5 && cells[1].ends_with(".gguf") {
            expected.push((
                cells[1].to_owned(),
                cells[2].parse::<u64>().unwrap(),
                cells[4].to_owned(),
            ));
        }
    }
    assert_eq!(expected.len(), 12, "the README lists 12 files");
    let out = run(&["--json", "--verify"], &[&dir]);
    assert_eq!(out.status.code(), Some(0));
    let reports = json_lines(&out);
    assert_eq!(reports.len(), 12);
    for (name, kv, arch) in expected {
        let r = reports
            .iter()
            .find(|r| r["path"].as_str().unwrap().ends_with(&name))
            .unwrap_or_else(|| panic!("{name} inspected"));
        assert_eq!(r["valid"], true, "{name}: {:?}", r["errors"]);
        assert_eq!(r["metadata_count"], kv, "{name}");
        assert_eq!(r["architecture"], arch.as_str(), "{name}");
        assert_eq!(r["tensor_count"], 0, "{name}");
        assert_eq!(r["llama_cpp_loadable"], true, "{name}");
    }
}

/// gguf-py (an independent implementation) writes files with every value type and several
/// tensor types; our reader must see the same keys, values, tensors and offsets as
/// gguf-py's own reader. Needs `WI_PYTHON` with the `gguf` package (`.ci/run` sets it).
pub fn gguf_py_files_read_the_same_as_gguf_py_reads_them() {
    let python = crate::support::required_env("WI_PYTHON");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("py.gguf");
    let script = r#"
import sys, json
import numpy as np
import gguf
path = sys.argv[1]
w = gguf.GGUFWriter(path, "llama")
w.add_uint8("t.u8", 7); w.add_int8("t.i8", -7); w.add_uint16("t.u16", 700); w.add_int16("t.i16", -700)
w.add_uint32("t.u32", 70000); w.add_int32("t.i32", -70000); w.add_float32("t.f32", 1.5)
w.add_bool("t.bool", True); w.add_string("t.str", "héllo"); w.add_uint64("t.u64", 2**40)
w.add_int64("t.i64", -2**40); w.add_float64("t.f64", 2.25)
w.add_array("t.arr", [1, 2, 3]); w.add_array("t.strs", ["a", "bc"])
w.add_uint32("general.quantization_version", 2)
w.add_tensor("a.weight", np.arange(96, dtype=np.float32).reshape(3, 32))
w.add_tensor("b.weight", np.ones((2, 64), dtype=np.float16))
q = np.zeros((4, 34), dtype=np.uint8)
w.add_tensor("c.weight", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
r = gguf.GGUFReader(path)
out = {"kv": len(r.fields), "tensors": []}
for t in r.tensors:
    out["tensors"].append({"name": t.name, "type": t.tensor_type.name, "shape": [int(x) for x in t.shape], "offset": int(t.data_offset), "n_bytes": int(t.n_bytes)})
out["u64"] = int(r.fields["t.u64"].parts[-1][0])
print(json.dumps(out))
"#;
    let py = Command::new(&python)
        .arg("-c")
        .arg(script)
        .arg(&path)
        .output()
        .expect("run python");
    assert!(
        py.status.success(),
        "gguf-py failed: {}",
        String::from_utf8_lossy(&py.stderr)
    );
    let theirs: Json = serde_json::from_slice(&py.stdout).unwrap();
    let out = run(&["--json"], &[&path]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let ours = &json_lines(&out)[0];
    // GGUFReader counts the 3 header fields (version, tensor count, kv count) as fields.
    assert_eq!(
        ours["metadata_count"].as_u64().unwrap() + 3,
        theirs["kv"].as_u64().unwrap()
    );
    let m = &ours["metadata"];
    assert_eq!(m["t.u8"], 7);
    assert_eq!(m["t.i8"], -7);
    assert_eq!(m["t.i16"], -700);
    assert_eq!(m["t.i32"], -70000);
    assert_eq!(m["t.f32"], 1.5);
    assert_eq!(m["t.bool"], true);
    assert_eq!(m["t.str"], "héllo");
    assert_eq!(m["t.u64"], theirs["u64"]);
    assert_eq!(m["t.i64"], -(1i64 << 40));
    assert_eq!(m["t.f64"], 2.25);
    assert_eq!(m["t.strs"], serde_json::json!(["a", "bc"]));
    let ours_t = ours["tensors"].as_array().unwrap();
    let theirs_t = theirs["tensors"].as_array().unwrap();
    assert_eq!(ours_t.len(), theirs_t.len());
    for (a, b) in ours_t.iter().zip(theirs_t) {
        assert_eq!(a["name"], b["name"]);
        assert_eq!(a["dtype"], b["type"]);
        assert_eq!(a["shape"], b["shape"], "ne[0] first in both");
        assert_eq!(a["offset"], b["offset"]);
        assert_eq!(a["n_bytes"], b["n_bytes"]);
    }
}
