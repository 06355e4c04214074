//! GGUF tests (owned by the GGUF helper): round trips of every version and byte order, every
//! rule with its exact diagnostic code or fatal error kind, the real vocabulary files, split
//! checks, and a property test on mutated files.

use proptest::prelude::*;
use testkit::gguf::{Fill, GgufWriter, TensorSpec, Val};
use weight_inspect::format::gguf::{
    self, check_split, parse_split_name, split_shard_names, ArrayValue, GgufHeader, Value,
    ValueType,
};
use weight_inspect::format::{DType, Endianness, FormatErrorKind, Severity};

// ---- helpers ----

fn ok(bytes: &[u8]) -> GgufHeader {
    match gguf::parse(bytes) {
        Ok(h) => h,
        Err(e) => panic!("parse failed: {e}"),
    }
}

fn fatal(bytes: &[u8]) -> FormatErrorKind {
    match gguf::parse(bytes) {
        Ok(h) => panic!("expected a fatal error, got {:?}", h.diagnostics),
        Err(e) => e.kind,
    }
}

fn codes(h: &GgufHeader) -> Vec<&'static str> {
    h.diagnostics.iter().map(|d| d.code).collect()
}

/// Assert `code` is present with `severity`, and return its message.
fn diag(h: &GgufHeader, code: &str, severity: Severity) -> String {
    match h.diagnostics.iter().find(|d| d.code == code) {
        Some(d) => {
            assert_eq!(d.severity, severity, "{d}");
            d.message.clone()
        }
        None => panic!("no {code} in {:#?}", h.diagnostics),
    }
}

fn error(h: &GgufHeader, code: &str) -> String {
    let m = diag(h, code, Severity::Error);
    assert!(
        !h.llama_cpp_loadable,
        "an error must make the file unloadable"
    );
    assert!(!h.is_valid());
    m
}

fn warning(h: &GgufHeader, code: &str) -> String {
    diag(h, code, Severity::Warning)
}

fn clean(h: &GgufHeader) {
    assert!(h.diagnostics.is_empty(), "{:#?}", h.diagnostics);
    assert!(h.llama_cpp_loadable);
}

/// A valid little-endian v3 model: architecture, two F32 tensors.
fn model() -> GgufWriter {
    GgufWriter::new()
        .arch("llama")
        .kv("llama.block_count", Val::U32(2))
        .tensor("token_embd.weight", 0, &[8, 4])
        .tensor("blk.0.attn_q.weight", 1, &[3])
}

/// Every one of the 13 value types, arrays short and long, nested not included.
fn all_values() -> Vec<(&'static str, Val)> {
    vec![
        ("t.u8", Val::U8(200)),
        ("t.i8", Val::I8(-5)),
        ("t.u16", Val::U16(65000)),
        ("t.i16", Val::I16(-30000)),
        ("t.u32", Val::U32(4_000_000_000)),
        ("t.i32", Val::I32(-2_000_000_000)),
        ("t.f32", Val::F32(1.5)),
        ("t.bool", Val::Bool(true)),
        ("t.string", Val::s("héllo")),
        ("t.array", Val::i32s(&[1, -2, 3])),
        ("t.u64", Val::U64(u64::MAX)),
        ("t.i64", Val::I64(i64::MIN)),
        ("t.f64", Val::F64(-0.25)),
        ("t.strs", Val::strs(&["a", "bb", ""])),
        (
            "t.bools",
            Val::Array(7, vec![Val::Bool(false), Val::Bool(true)]),
        ),
        ("t.empty", Val::Array(8, vec![])),
    ]
}

fn expected_values() -> Vec<Value> {
    vec![
        Value::U8(200),
        Value::I8(-5),
        Value::U16(65000),
        Value::I16(-30000),
        Value::U32(4_000_000_000),
        Value::I32(-2_000_000_000),
        Value::F32(1.5),
        Value::Bool(true),
        Value::String("héllo".into()),
        Value::Array(ArrayValue {
            elem_type: ValueType::I32,
            len: 3,
            offset: 0,
            byte_len: 12,
            items: vec![Value::I32(1), Value::I32(-2), Value::I32(3)],
            endianness: Endianness::Little,
            version: 3,
        }),
        Value::U64(u64::MAX),
        Value::I64(i64::MIN),
        Value::F64(-0.25),
    ]
}

fn with_all_values(mut w: GgufWriter) -> GgufWriter {
    for (k, v) in all_values() {
        w = w.kv(k, v);
    }
    w
}

// ---- round trips ----

fn check_round_trip(w: GgufWriter, version: u32, endianness: Endianness) -> GgufHeader {
    let built = with_all_values(w).build_layout();
    let h = ok(&built.bytes);
    assert_eq!(h.version, version);
    assert_eq!(h.endianness, endianness);
    assert_eq!(h.alignment, 32);
    assert_eq!(h.metadata_count(), 2 + all_values().len());
    assert_eq!(h.architecture(), Some("llama"));
    for ((k, _), want) in all_values().iter().zip(expected_values()) {
        let got = h.get(k).unwrap_or_else(|| panic!("missing {k}"));
        match (got, &want) {
            (Value::Array(a), Value::Array(b)) => {
                assert_eq!(a.elem_type, b.elem_type);
                assert_eq!(a.items, b.items);
                assert_eq!(a.len, b.len);
                assert_eq!(a.byte_len, b.byte_len);
                assert_eq!(a.endianness, endianness);
                assert_eq!(a.version, version);
                assert_eq!(
                    a.i64s(&built.bytes).collect::<Result<Vec<_>, _>>().unwrap(),
                    vec![1, -2, 3]
                );
            }
            _ => assert_eq!(got, &want, "{k}"),
        }
    }
    let strs = h.get("t.strs").unwrap().as_array().unwrap();
    let decoded: Vec<&str> = strs
        .strings(&built.bytes)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(decoded, ["a", "bb", ""]);
    assert_eq!(
        h.get("t.bools").unwrap().to_json(),
        serde_json::json!([false, true])
    );
    assert_eq!(h.get("t.empty").unwrap().as_array().unwrap().len, 0);

    assert_eq!(h.tensors.len(), 2);
    let t0 = &h.tensors[0];
    assert_eq!(t0.name, "token_embd.weight");
    assert_eq!(t0.shape, vec![8, 4]);
    assert_eq!(t0.dtype.name(), "F32");
    assert_eq!(t0.n_bytes, 128);
    assert_eq!(t0.offset, built.data_offset as u64);
    let t1 = &h.tensors[1];
    assert_eq!(t1.dtype.name(), "F16");
    assert_eq!(t1.n_bytes, 6);
    assert_eq!(t1.offset, built.data_offset as u64 + 128);
    assert_eq!(h.data_offset, built.data_offset as u64);
    assert_eq!(h.data_offset % 32, 0);
    assert_eq!(h.file_size, built.bytes.len() as u64);
    assert_eq!(h.tensor_count, 2);
    assert!(h.is_valid(), "{:#?}", h.diagnostics);
    h
}

#[test]
fn v3_little_endian_round_trips() {
    let h = check_round_trip(model(), 3, Endianness::Little);
    clean(&h);
}

#[test]
fn v2_round_trips() {
    let h = check_round_trip(model().version(2), 2, Endianness::Little);
    clean(&h);
}

#[test]
fn v1_round_trips_but_llama_cpp_refuses() {
    let h = check_round_trip(model().version(1), 1, Endianness::Little);
    assert_eq!(codes(&h), ["gguf.version.v1"]);
    warning(&h, "gguf.version.v1");
    assert!(!h.llama_cpp_loadable);
}

#[test]
fn v3_big_endian_round_trips_but_llama_cpp_refuses() {
    let h = check_round_trip(model().big_endian(), 3, Endianness::Big);
    assert_eq!(codes(&h), ["gguf.endianness.big"]);
    assert!(!h.llama_cpp_loadable);
}

#[test]
fn v1_big_endian_long_arrays_decode_on_demand() {
    let tokens: Vec<String> = (0..100).map(|i| format!("tok{i}")).collect();
    let scores: Vec<f32> = (0..100).map(|i| i as f32).collect();
    let bytes = GgufWriter::new()
        .version(1)
        .big_endian()
        .arch("x")
        .kv("tokenizer.ggml.tokens", Val::strs(&tokens))
        .kv("tokenizer.ggml.scores", Val::f32s(&scores))
        .build();
    let h = ok(&bytes);
    let a = h.get("tokenizer.ggml.tokens").unwrap().as_array().unwrap();
    assert!(a.items.is_empty() && !a.is_decoded());
    let got: Vec<&str> = a.strings(&bytes).collect::<Result<_, _>>().unwrap();
    assert_eq!(got, tokens);
    let s = h.get("tokenizer.ggml.scores").unwrap().as_array().unwrap();
    let f: Vec<f64> = s.f64s(&bytes).collect::<Result<_, _>>().unwrap();
    assert_eq!(f[99], 99.0);
    assert_eq!(h.token_count(), Some(100));
}

#[test]
fn all_thirteen_value_types_have_ids_and_names() {
    for id in 0..13 {
        let t = ValueType::from_id(id).unwrap();
        assert_eq!(t.id(), id);
    }
    assert!(ValueType::from_id(13).is_none());
    assert_eq!(ValueType::String.name(), "string");
    assert_eq!(ValueType::F32.gguf_py_name(), "FLOAT32");
    let vals = expected_values();
    let ids: Vec<u32> = vals.iter().map(|v| v.value_type().id()).collect();
    assert_eq!(ids, (0..13).collect::<Vec<_>>());
}

// ---- arrays: long, nested, JSON ----

#[test]
fn long_arrays_are_summarised_and_decoded_on_demand() {
    let ids: Vec<i32> = (0..1000).collect();
    let u: Vec<u32> = (0..65).collect();
    let bytes = GgufWriter::new()
        .arch("x")
        .kv("big.i32", Val::i32s(&ids))
        .kv("big.u32", Val::u32s(&u))
        .kv("short.u32", Val::u32s(&u[..64]))
        .kv("neg", Val::i32s(&[-1; 70]))
        .build();
    let h = ok(&bytes);
    clean(&h);
    let a = h.get("big.i32").unwrap().as_array().unwrap();
    assert_eq!((a.len, a.byte_len, a.items.len()), (1000, 4000, 0));
    assert_eq!(
        h.get("big.i32").unwrap().to_json(),
        serde_json::json!({"type": "array", "element_type": "i32", "len": 1000})
    );
    let back: Vec<i64> = a.i64s(&bytes).collect::<Result<_, _>>().unwrap();
    assert_eq!(back, (0..1000).collect::<Vec<i64>>());
    let u64s: Vec<u64> = h
        .get("big.u32")
        .unwrap()
        .as_array()
        .unwrap()
        .u64s(&bytes)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(u64s.len(), 65);
    let short = h.get("short.u32").unwrap().as_array().unwrap();
    assert_eq!(short.items.len(), 64);
    assert_eq!(h.get("short.u32").unwrap().to_json()[63], 63);
    // Wrong-typed decoding gives an error, not a panic.
    let neg = h.get("neg").unwrap().as_array().unwrap();
    assert!(neg.u64s(&bytes).next().unwrap().is_err());
    assert!(neg.strings(&bytes).next().unwrap().is_err());
    assert_eq!(neg.strings(&bytes).count(), 1);
    // values() decodes anything.
    let vals: Vec<Value> = a.values(&bytes).collect::<Result<_, _>>().unwrap();
    assert_eq!(vals[999], Value::I32(999));
    // Decoding from bytes that are too short errors out.
    assert!(a.i64s(&bytes[..100]).any(|r| r.is_err()));
}

#[test]
fn json_of_non_finite_floats_is_a_string() {
    assert_eq!(Value::F32(f32::NAN).to_json(), serde_json::json!("NaN"));
    assert_eq!(
        Value::F64(f64::INFINITY).to_json(),
        serde_json::json!("inf")
    );
    assert_eq!(
        Value::F64(f64::NEG_INFINITY).to_json(),
        serde_json::json!("-inf")
    );
    assert_eq!(Value::F32(0.5).to_json(), serde_json::json!(0.5));
    assert_eq!(Value::String("a".into()).to_json(), serde_json::json!("a"));
}

#[test]
fn nested_arrays_are_read_with_a_warning() {
    let inner = Val::Array(4, vec![Val::U32(1), Val::U32(2)]);
    let long_inner: Vec<Val> = (0..100).map(|_| inner.clone()).collect();
    let bytes = model()
        .kv(
            "nested",
            Val::Array(9, vec![inner.clone(), Val::Array(4, vec![])]),
        )
        .kv("nested.long", Val::Array(9, long_inner))
        .build();
    let h = ok(&bytes);
    let m = warning(&h, "gguf.kv.nested-array");
    assert!(m.contains("'nested'"), "{m}");
    assert!(h.is_valid());
    assert!(!h.llama_cpp_loadable);
    assert_eq!(
        h.get("nested").unwrap().to_json(),
        serde_json::json!([[1, 2], []])
    );
    let long = h.get("nested.long").unwrap().as_array().unwrap();
    let items: Vec<Value> = long.values(&bytes).collect::<Result<_, _>>().unwrap();
    assert_eq!(items.len(), 100);
    assert_eq!(items[5].to_json(), serde_json::json!([1, 2]));
}

#[test]
fn arrays_nested_too_deep_are_fatal() {
    let mut v = Val::Array(4, vec![]);
    for _ in 0..8 {
        v = Val::Array(9, vec![v]);
    }
    // 9 levels.
    let bytes = GgufWriter::new().kv("deep", v.clone()).build();
    match fatal(&bytes) {
        FormatErrorKind::NestingTooDeep { key, limit } => {
            assert_eq!((key.as_str(), limit), ("deep", 8));
        }
        k => panic!("{k:?}"),
    }
    // 8 levels are fine.
    let Val::Array(_, inner) = v else {
        unreachable!()
    };
    let h = ok(&GgufWriter::new()
        .arch("x")
        .kv("deep", inner[0].clone())
        .build());
    warning(&h, "gguf.kv.nested-array");
}

// ---- fatal errors ----

#[test]
fn bad_magic_is_fatal() {
    let bytes = model().magic(*b"GGML").build();
    assert_eq!(fatal(&bytes), FormatErrorKind::BadMagic(*b"GGML"));
}

#[test]
fn unknown_versions_are_fatal() {
    for v in [0u32, 4, 77] {
        let bytes = model().raw_version(v).build();
        assert_eq!(fatal(&bytes), FormatErrorKind::UnsupportedVersion(v));
    }
}

#[test]
fn truncation_anywhere_is_fatal() {
    let built = with_all_values(model()).fill(Fill::None).build_layout();
    let b = &built.bytes;
    for cut in [
        0,
        3,
        6,
        10,
        20,
        built.kv_offsets[3] + 9,
        built.infos_end - 1,
    ] {
        match fatal(&b[..cut]) {
            FormatErrorKind::Truncated { .. } => {}
            k => panic!("cut at {cut}: {k:?}"),
        }
    }
    // Every prefix of the header fails cleanly.
    for cut in 0..built.infos_end {
        assert!(gguf::parse(&b[..cut]).is_err(), "cut at {cut}");
    }
}

#[test]
fn truncation_error_names_the_key() {
    let built = GgufWriter::new()
        .kv("general.name", Val::s("a long enough name"))
        .build_layout();
    let kind = fatal(&built.bytes[..built.bytes.len() - 3]);
    assert!(kind.to_string().contains("general.name"), "{kind}");
}

#[test]
fn huge_lengths_and_counts_are_fatal_before_allocating() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "string length",
            GgufWriter::new()
                .kv("k", Val::StrLen(u64::MAX, b"abc".to_vec()))
                .build(),
        ),
        (
            "string over 1 GiB",
            GgufWriter::new()
                .kv("k", Val::StrLen((1 << 30) + 1, b"abc".to_vec()))
                .build(),
        ),
        (
            "array count",
            GgufWriter::new()
                .kv("k", Val::ArrayCount(8, 1 << 60, vec![]))
                .build(),
        ),
        (
            "array count × size overflows",
            GgufWriter::new()
                .kv("k", Val::ArrayCount(10, u64::MAX / 2, vec![]))
                .build(),
        ),
        ("kv count", GgufWriter::new().kv_count(u64::MAX).build()),
        ("tensor count", model().tensor_count(1 << 40).build()),
    ];
    for (what, bytes) in cases {
        match fatal(&bytes) {
            FormatErrorKind::LengthTooLarge { .. } => {}
            k => panic!("{what}: {k:?}"),
        }
    }
    // A count that would fit a bigger file but not this one is a truncation.
    let bytes = GgufWriter::new()
        .kv("k", Val::ArrayCount(8, 3, vec![Val::s("a")]))
        .build();
    assert!(matches!(fatal(&bytes), FormatErrorKind::Truncated { .. }));
}

#[test]
fn tensor_name_length_too_large_names_the_tensor() {
    let built = model().fill(Fill::None).build_layout();
    let mut b = built.bytes.clone();
    let at = built.tensor_info_offsets[1];
    b[at..at + 8].copy_from_slice(&(1u64 << 50).to_le_bytes());
    let k = fatal(&b);
    assert!(matches!(k, FormatErrorKind::LengthTooLarge { .. }), "{k:?}");
    assert!(k.to_string().contains("tensor info 1"), "{k}");
}

#[test]
fn unknown_value_types_are_fatal() {
    let bytes = GgufWriter::new()
        .kv("weird", Val::Raw(13, vec![0; 8]))
        .build();
    assert_eq!(
        fatal(&bytes),
        FormatErrorKind::UnknownValueType {
            key: "weird".into(),
            type_id: 13
        }
    );
    let bytes = GgufWriter::new()
        .kv("weird.arr", Val::Array(99, vec![]))
        .build();
    assert_eq!(
        fatal(&bytes),
        FormatErrorKind::UnknownValueType {
            key: "weird.arr".into(),
            type_id: 99
        }
    );
}

#[test]
fn invalid_utf8_in_keys_and_names_is_fatal() {
    let bytes = GgufWriter::new().kv_raw_key(b"bad\xff", Val::U8(1)).build();
    assert!(matches!(fatal(&bytes), FormatErrorKind::InvalidUtf8(_)));
    let bytes = model()
        .tensor_spec(TensorSpec {
            name: b"x\xc3".to_vec(),
            type_id: 0,
            dims: vec![1],
            offset: None,
            n_dims: None,
        })
        .build();
    match fatal(&bytes) {
        FormatErrorKind::InvalidUtf8(what) => assert!(what.contains("tensor 2"), "{what}"),
        k => panic!("{k:?}"),
    }
}

#[test]
fn absurd_n_dims_is_fatal_and_five_is_an_error() {
    let spec = |n_dims: Option<u32>, dims: Vec<u64>| TensorSpec {
        name: b"t".to_vec(),
        type_id: 0,
        dims,
        offset: None,
        n_dims,
    };
    let bytes = GgufWriter::new()
        .arch("x")
        .tensor_spec(spec(Some(u32::MAX), vec![1]))
        .build();
    assert!(matches!(
        fatal(&bytes),
        FormatErrorKind::LengthTooLarge { .. }
    ));
    let bytes = GgufWriter::new()
        .arch("x")
        .tensor_spec(spec(None, vec![1; 100]))
        .build();
    assert!(matches!(fatal(&bytes), FormatErrorKind::Other(_)));
    let h = ok(&GgufWriter::new()
        .arch("x")
        .tensor_spec(spec(None, vec![2, 1, 1, 1, 3]))
        .build());
    let m = error(&h, "gguf.tensor.too-many-dims");
    assert!(m.contains("'t'") && m.contains('5'), "{m}");
    assert_eq!(h.tensors[0].shape, vec![2, 1, 1, 1, 3]);
}

// ---- tensor errors ----

#[test]
fn unknown_tensor_type_is_an_error() {
    let h = ok(&model().tensor("odd", 43, &[4]).build());
    let m = error(&h, "gguf.tensor.unknown-type");
    assert!(m.contains("'odd'") && m.contains("43"), "{m}");
    assert_eq!(h.tensors.len(), 2, "left out of the list");
    assert_eq!(h.tensor_count, 3);
}

#[test]
fn removed_tensor_types_are_named() {
    let h = ok(&model()
        .kv("general.quantization_version", Val::U32(2))
        .tensor("old", 31, &[64])
        .build());
    let m = error(&h, "gguf.tensor.removed-type");
    assert!(
        m.contains("'old'") && m.contains("Q4_0_4_4") && m.contains("removed from ggml in 2024"),
        "{m}"
    );
    let t = h.tensor("old").unwrap();
    assert_eq!(t.dtype.name(), "Q4_0_4_4");
    assert_eq!(
        t.n_bytes, 36,
        "sized with its last layout (32 elements / 18 bytes)"
    );
    let h = ok(&model().tensor("older", 4, &[32]).build());
    assert!(error(&h, "gguf.tensor.removed-type").contains("Q4_2"));
}

#[test]
fn negative_dimensions_are_errors() {
    let h = ok(&model()
        .tensor("neg", 0, &[u64::MAX, 2])
        .fill(Fill::None)
        .build());
    let m = error(&h, "gguf.tensor.negative-dim");
    assert!(
        m.contains("'neg'") && m.contains("-1") && m.contains("negative"),
        "{m}"
    );
}

#[test]
fn overflowing_sizes_are_errors_even_when_they_wrap_to_zero() {
    for dims in [
        vec![1u64 << 32, 1 << 32],
        vec![1 << 62, 4],
        vec![1 << 40, 1 << 40],
        vec![1 << 31, 1 << 31, 4],
    ] {
        let h = ok(&model().tensor("big", 0, &dims).fill(Fill::None).build());
        let m = error(&h, "gguf.tensor.overflow");
        assert!(m.contains("'big'"), "{m}");
    }
}

#[test]
fn rows_must_be_a_multiple_of_the_block_size() {
    let h = ok(&model()
        .kv("general.quantization_version", Val::U32(2))
        .tensor("q", 2, &[33, 2])
        .fill(Fill::None)
        .build());
    let m = error(&h, "gguf.tensor.not-block-multiple");
    assert!(
        m.contains("'q'") && m.contains("33") && m.contains("32"),
        "{m}"
    );
}

#[test]
fn tensors_past_the_end_of_the_file_are_errors() {
    // Data cut short.
    let built = model().build_layout();
    let h = ok(&built.bytes[..built.data_offset + 100]);
    let m = error(&h, "gguf.tensor.out-of-bounds");
    assert!(m.contains("token_embd.weight"), "{m}");
    // An offset so large that offset + size overflows.
    let built = model()
        .tensor_at("far", 0, &[4], u64::MAX - 31)
        .fill(Fill::None)
        .build_layout();
    let mut bytes = built.bytes;
    bytes.resize(built.data_offset + 256, 0);
    let h = ok(&bytes);
    let m = error(&h, "gguf.tensor.out-of-bounds");
    assert!(m.contains("'far'"), "{m}");
}

#[test]
fn misaligned_offsets_are_errors() {
    let h = ok(&GgufWriter::new()
        .arch("x")
        .tensor("a", 0, &[1])
        .tensor_at("b", 0, &[1], 4)
        .build());
    let m = error(&h, "gguf.tensor.misaligned");
    assert!(m.contains("'b'") && m.contains("offset 4"), "{m}");
}

#[test]
fn overlapping_tensors_are_errors() {
    let h = ok(&GgufWriter::new()
        .arch("x")
        .tensor("a", 0, &[8])
        .tensor_at("b", 0, &[16], 32)
        .tensor_at("c", 0, &[8], 64)
        .build());
    let m = error(&h, "gguf.tensor.overlap");
    assert!(m.contains("'b'") && m.contains("'c'"), "{m}");
    // Touching but not overlapping, and empty tensors, are fine.
    let h = ok(&GgufWriter::new()
        .arch("x")
        .tensor("a", 0, &[8])
        .tensor("e", 0, &[0])
        .tensor("b", 0, &[8])
        .build());
    clean(&h);
}

#[test]
fn duplicate_tensor_names_are_errors() {
    let h = ok(&model().tensor("token_embd.weight", 0, &[2]).build());
    let m = error(&h, "gguf.tensor.duplicate-name");
    assert!(
        m.contains("token_embd.weight") && m.contains("0 and 2"),
        "{m}"
    );
}

#[test]
fn long_names_and_nul_bytes_are_warnings() {
    let n63 = "a".repeat(63);
    let n64 = "b".repeat(64);
    let h = ok(&model().tensor(&n63, 0, &[1]).build());
    clean(&h);
    let h = ok(&model().tensor(&n64, 0, &[1]).build());
    assert!(warning(&h, "gguf.tensor.name-too-long").contains("64 bytes"));
    assert!(h.is_valid() && !h.llama_cpp_loadable);

    let h = ok(&model().tensor("x\0y", 0, &[1]).build());
    warning(&h, "gguf.tensor.name-nul");
    assert!(h.is_valid());
    let h = ok(&model()
        .tensor("x\0y", 0, &[1])
        .tensor("x\0z", 0, &[1])
        .build());
    warning(&h, "gguf.tensor.nul-collision");
    assert!(!h.llama_cpp_loadable);
}

// ---- metadata errors ----

#[test]
fn duplicate_and_empty_keys_are_errors() {
    let h = ok(&model()
        .kv("general.name", Val::s("one"))
        .kv("general.name", Val::s("two"))
        .build());
    assert!(error(&h, "gguf.kv.duplicate-key").contains("'general.name'"));
    assert_eq!(h.get("general.name").unwrap().as_str(), Some("one"));
    let h = ok(&model().kv("", Val::U8(0)).build());
    error(&h, "gguf.kv.empty-key");
}

#[test]
fn bool_bytes_other_than_0_and_1_are_errors() {
    let h = ok(&model().kv("flag", Val::RawBool(2)).build());
    assert!(error(&h, "gguf.kv.bad-bool").contains("'flag'"));
    assert_eq!(h.get("flag"), Some(&Value::Bool(true)));
    let mut items = vec![Val::Bool(true); 100];
    items[50] = Val::RawBool(7);
    let h = ok(&model().kv("flags", Val::Array(7, items)).build());
    let m = error(&h, "gguf.kv.bad-bool");
    assert!(m.contains("'flags'") && m.contains("first 7"), "{m}");
}

#[test]
fn invalid_utf8_strings_are_errors() {
    let h = ok(&model().kv("s", Val::RawStr(b"ab\xffc".to_vec())).build());
    assert!(error(&h, "gguf.kv.invalid-utf8").contains("'s'"));
    assert_eq!(h.get("s").unwrap().as_str(), Some("ab\u{fffd}c"));
    // In a long array: validated during parse, reported on demand.
    let mut items: Vec<Val> = (0..100).map(|i| Val::s(&i.to_string())).collect();
    items[7] = Val::RawStr(vec![0xc0]);
    let bytes = model().kv("toks", Val::Array(8, items)).build();
    let h = ok(&bytes);
    error(&h, "gguf.kv.invalid-utf8");
    let a = h.get("toks").unwrap().as_array().unwrap();
    let all: Vec<_> = a.strings(&bytes).collect();
    assert_eq!(all.len(), 100, "iteration goes on after a bad item");
    assert!(matches!(
        all[7].as_ref().unwrap_err().kind,
        FormatErrorKind::InvalidUtf8(_)
    ));
    assert_eq!(*all[8].as_ref().unwrap(), "8");
}

#[test]
fn alignment_must_be_a_u32_power_of_two() {
    for a in [0u32, 48, 3] {
        let h = ok(&model().alignment(a).layout_alignment(32).build());
        assert!(error(&h, "gguf.alignment.invalid").contains(&a.to_string()));
        assert_eq!(h.alignment, 32);
    }
    let h = ok(&model().kv("general.alignment", Val::U64(32)).build());
    assert!(error(&h, "gguf.alignment.invalid").contains("u64"));
    for a in [1u32, 8, 64, 4096] {
        let built = model().alignment(a).build_layout();
        let h = ok(&built.bytes);
        clean(&h);
        assert_eq!(h.alignment, u64::from(a));
        assert_eq!(h.data_offset, built.data_offset as u64);
    }
}

// ---- data section and layout ----

#[test]
fn zero_tensors_need_no_padding() {
    let bytes = GgufWriter::new().arch("x").kv("a", Val::U8(1)).build();
    assert_ne!(bytes.len() % 32, 0);
    let h = ok(&bytes);
    clean(&h);
    assert_eq!(h.data_offset, bytes.len() as u64);
}

#[test]
fn data_section_past_the_end_is_an_error() {
    let built = GgufWriter::new()
        .arch("x")
        .tensor("empty", 0, &[0])
        .fill(Fill::None)
        .build_layout();
    assert_ne!(built.infos_end % 32, 0);
    let h = ok(&built.bytes);
    assert!(error(&h, "gguf.data.out-of-bounds").contains("past the end"));
}

#[test]
fn non_canonical_layouts_are_warnings() {
    // A gap.
    let h = ok(&GgufWriter::new()
        .arch("x")
        .tensor("a", 0, &[8])
        .tensor_at("b", 0, &[8], 64)
        .build());
    let m = warning(&h, "gguf.layout.non-canonical");
    assert!(
        m.contains("'b'") && m.contains("64") && m.contains("32"),
        "{m}"
    );
    assert!(h.is_valid() && !h.llama_cpp_loadable);
    // Out of order.
    let h = ok(&GgufWriter::new()
        .arch("x")
        .tensor_at("a", 0, &[8], 32)
        .tensor_at("b", 0, &[8], 0)
        .build());
    warning(&h, "gguf.layout.non-canonical");
    assert!(h.is_valid() && !h.llama_cpp_loadable);
}

#[test]
fn missing_tail_padding_is_a_warning_llama_cpp_accepts() {
    let bytes = model().tail_padding(false).build();
    let h = ok(&bytes);
    assert_eq!(codes(&h), ["gguf.layout.missing-tail-padding"]);
    assert!(
        h.llama_cpp_loadable,
        "llama.cpp's mmap loader only checks each tensor's end"
    );
}

#[test]
fn many_diagnostics_of_one_code_are_summarised() {
    let mut w = GgufWriter::new().arch("x");
    for i in 0..40 {
        w = w.tensor_at(&format!("t{i}"), 0, &[1], i * 64 + 4);
    }
    let h = ok(&w.build());
    let mis: Vec<_> = h
        .diagnostics
        .iter()
        .filter(|d| d.code == "gguf.tensor.misaligned")
        .collect();
    assert_eq!(mis.len(), 17);
    assert!(mis[16].message.contains("24 more"), "{}", mis[16].message);
}

// ---- metadata rules ----

#[test]
fn missing_architecture_is_a_warning() {
    let h = ok(&GgufWriter::new().build());
    assert_eq!(codes(&h), ["gguf.meta.missing-architecture"]);
    let h = ok(&GgufWriter::new()
        .kv("general.architecture", Val::U32(1))
        .build());
    warning(&h, "gguf.meta.wrong-type");
}

#[test]
fn quantized_files_need_a_quantization_version() {
    let w = model().tensor("q", 12, &[256]);
    let h = ok(&w.clone().build());
    assert!(warning(&h, "gguf.meta.missing-quantization-version").contains("Q4_K"));
    let h = ok(&w
        .kv("general.quantization_version", Val::U32(2))
        .kv("general.file_type", Val::U32(15))
        .build());
    clean(&h);
    assert_eq!(h.quantization_version(), Some(2));
    assert_eq!(h.file_type(), Some(15));
}

#[test]
fn block_count_and_block_numbers_are_checked() {
    let h = ok(&GgufWriter::new()
        .arch("llama")
        .kv("llama.block_count", Val::U32(1000))
        .build());
    warning(&h, "gguf.meta.block-count");
    let h = ok(&model().tensor("blk.2.ffn_up.weight", 0, &[4]).build());
    let m = warning(&h, "gguf.tensor.block-out-of-range");
    assert!(m.contains("blk.2.ffn_up.weight"), "{m}");
    let h = ok(&model().tensor("blk.1.ffn_up.weight", 0, &[4]).build());
    clean(&h);
}

#[test]
fn tokenizer_arrays_are_checked() {
    let toks: Vec<String> = (0..10).map(|i| i.to_string()).collect();
    let good = || {
        GgufWriter::new()
            .arch("x")
            .kv("tokenizer.ggml.tokens", Val::strs(&toks))
    };
    let h = ok(&good()
        .kv("tokenizer.ggml.scores", Val::f32s(&[0.0; 10]))
        .kv("tokenizer.ggml.token_type", Val::i32s(&[1; 10]))
        .kv("tokenizer.ggml.bos_token_id", Val::U32(9))
        .build());
    clean(&h);
    let h = ok(&good()
        .kv("tokenizer.ggml.scores", Val::f32s(&[0.0; 9]))
        .build());
    assert!(warning(&h, "gguf.tokenizer.length-mismatch").contains("scores"));
    let mut types = vec![1; 100];
    types[42] = 9;
    let h = ok(&GgufWriter::new()
        .arch("x")
        .kv("tokenizer.ggml.token_type", Val::i32s(&types))
        .build());
    let m = warning(&h, "gguf.tokenizer.bad-token-type");
    assert!(m.contains("index 42") && m.contains('9'), "{m}");
    let h = ok(&good()
        .kv("tokenizer.ggml.eos_token_id", Val::U32(10))
        .build());
    assert!(warning(&h, "gguf.tokenizer.token-id-out-of-range").contains("eos_token_id"));
}

// ---- scale ----

#[test]
fn a_large_header_parses_quickly() {
    let toks: Vec<String> = (0..100_000).map(|i| format!("token{i}")).collect();
    let mut w = GgufWriter::new()
        .arch("llama")
        .kv("llama.block_count", Val::U32(500))
        .kv("tokenizer.ggml.tokens", Val::strs(&toks))
        .kv("tokenizer.ggml.scores", Val::f32s(&vec![0.0; 100_000]))
        .kv("tokenizer.ggml.token_type", Val::i32s(&vec![1; 100_000]))
        .fill(Fill::None);
    for i in 0..5000 {
        w = w.tensor(&format!("blk.{}.w{}", i / 10, i % 10), 0, &[64, 64]);
    }
    let bytes = w.build();
    let start = std::time::Instant::now();
    let h = ok(&bytes);
    let took = start.elapsed();
    assert_eq!(h.tensors.len(), 5000);
    assert_eq!(h.token_count(), Some(100_000));
    // The data section is absent: every tensor is out of bounds, summarised.
    assert!(h.diagnostics.len() < 40);
    assert!(took.as_secs_f64() < 5.0, "{took:?}");
}

// ---- split ----

fn shard(no: u16, count: u16, total: i32, tensors: &[&str]) -> Vec<u8> {
    let mut w = GgufWriter::new()
        .arch("llama")
        .kv("split.no", Val::U16(no))
        .kv("split.count", Val::U16(count))
        .kv("split.tensors.count", Val::I32(total));
    for t in tensors {
        w = w.tensor(t, 0, &[4]);
    }
    w.build()
}

fn split_codes(files: &[(&str, Vec<u8>)]) -> Vec<&'static str> {
    let headers: Vec<GgufHeader> = files.iter().map(|(_, b)| ok(b)).collect();
    let shards: Vec<(String, &GgufHeader)> = files
        .iter()
        .zip(&headers)
        .map(|((n, _), h)| (n.to_string(), h))
        .collect();
    check_split(&shards).iter().map(|d| d.code).collect()
}

#[test]
fn split_names() {
    assert_eq!(
        split_shard_names("m/Model-00001-of-00003.gguf").unwrap(),
        [
            "m/Model-00001-of-00003.gguf",
            "m/Model-00002-of-00003.gguf",
            "m/Model-00003-of-00003.gguf"
        ]
    );
    assert_eq!(
        parse_split_name("a-b-00002-of-00002.gguf"),
        Some(("a-b", 2, 2))
    );
    assert_eq!(parse_split_name("x-00000-of-00002.gguf"), None);
    assert_eq!(parse_split_name("x-00003-of-00002.gguf"), None);
    assert_eq!(parse_split_name("x-1-of-2.gguf"), None);
    assert_eq!(parse_split_name("x.gguf"), None);
    assert!(split_shard_names("plain.gguf").is_none());
}

#[test]
fn split_shards_are_checked() {
    let good = vec![
        ("M-00001-of-00003.gguf", shard(0, 3, 4, &["a", "b"])),
        ("M-00002-of-00003.gguf", shard(1, 3, 4, &["c"])),
        ("M-00003-of-00003.gguf", shard(2, 3, 4, &["d"])),
    ];
    assert!(split_codes(&good).is_empty());

    let mut missing = good.clone();
    missing.remove(1);
    let c = split_codes(&missing);
    assert!(c.contains(&"gguf.split.missing-shard") && c.contains(&"gguf.split.count-mismatch"));
    assert!(!c.contains(&"gguf.split.tensor-count") || c.len() > 2);

    let mut dup = good.clone();
    dup[2].1 = shard(2, 3, 4, &["a"]);
    assert_eq!(split_codes(&dup), ["gguf.split.duplicate-tensor"]);

    let mut total = good.clone();
    for (i, f) in total.iter_mut().enumerate() {
        f.1 = shard(i as u16, 3, 5, [["a", "b"].as_slice(), &["c"], &["d"]][i]);
    }
    assert_eq!(split_codes(&total), ["gguf.split.tensor-count"]);

    let mut renamed = good.clone();
    renamed[1].0 = "M-00003-of-00003.gguf";
    renamed[2].0 = "M-00002-of-00003.gguf";
    let c = split_codes(&renamed);
    assert_eq!(c, ["gguf.split.name-mismatch", "gguf.split.name-mismatch"]);

    let mut bad_name = good.clone();
    bad_name[0].0 = "model.gguf";
    assert!(split_codes(&bad_name).contains(&"gguf.split.bad-name"));

    let mut twice = good.clone();
    twice[2].1 = shard(1, 3, 4, &["d"]);
    let c = split_codes(&twice);
    assert!(c.contains(&"gguf.split.duplicate-shard") && c.contains(&"gguf.split.missing-shard"));

    let no_keys = vec![("M-00001-of-00001.gguf", model().build())];
    assert!(split_codes(&no_keys).contains(&"gguf.split.missing-key"));

    let wrong_type = vec![(
        "M-00001-of-00001.gguf",
        GgufWriter::new()
            .arch("x")
            .kv("split.no", Val::U32(0))
            .kv("split.count", Val::U16(1))
            .kv("split.tensors.count", Val::I32(0))
            .build(),
    )];
    assert_eq!(split_codes(&wrong_type), ["gguf.split.key-type"]);
}

// ---- robustness ----

fn fuzz_base() -> Built {
    with_all_values(model())
        .kv("tokenizer.ggml.tokens", Val::strs(&["a", "b", "c"]))
        .kv("long", Val::i32s(&[7; 70]))
        .kv("nested", Val::Array(9, vec![Val::u32s(&[1, 2])]))
        .tensor("q", 2, &[64, 2])
        .build_layout()
}

use testkit::gguf::Built;

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
    HugeU64(usize, u64),
    HugeU32(usize, u32),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(i, x)| Mutation::Flip(i, x)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        (
            any::<usize>(),
            prop_oneof![
                Just(u64::MAX),
                Just(1u64 << 63),
                Just(1u64 << 40),
                Just(1u64 << 30),
                any::<u64>()
            ]
        )
            .prop_map(|(i, v)| Mutation::HugeU64(i, v)),
        (
            any::<usize>(),
            prop_oneof![Just(u32::MAX), Just(13u32), Just(9u32), any::<u32>()]
        )
            .prop_map(|(i, v)| Mutation::HugeU32(i, v)),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation, anchors: &[usize]) {
    let len = bytes.len();
    // Half of the positioned mutations hit a structural field start.
    let pos = |i: usize| {
        if i.is_multiple_of(2) && !anchors.is_empty() {
            anchors[(i / 2) % anchors.len()]
        } else {
            i % len.max(1)
        }
    };
    match m {
        Mutation::Flip(i, x) => {
            let p = pos(*i);
            if p < len {
                bytes[p] ^= x;
            }
        }
        Mutation::Truncate(i) => bytes.truncate(i % (len + 1)),
        Mutation::Insert(i, b) => {
            let p = pos(*i).min(len);
            bytes.splice(p..p, b.iter().copied());
        }
        Mutation::HugeU64(i, v) => {
            let p = pos(*i);
            if p + 8 <= len {
                bytes[p..p + 8].copy_from_slice(&v.to_le_bytes());
            }
        }
        Mutation::HugeU32(i, v) => {
            let p = pos(*i);
            if p + 4 <= len {
                bytes[p..p + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn mutated_files_never_panic(muts in prop::collection::vec(mutation(), 1..4)) {
        let base = fuzz_base();
        let mut anchors = vec![base.tensor_count_offset, base.kv_count_offset, base.infos_end];
        anchors.extend(&base.kv_offsets);
        anchors.extend(&base.tensor_info_offsets);
        // Also the length/type fields right after each key start.
        anchors.extend(base.tensor_info_offsets.iter().map(|o| o + 9));
        let mut bytes = base.bytes.clone();
        for m in &muts {
            apply(&mut bytes, m, &anchors);
        }
        if let Ok(h) = gguf::parse(&bytes) {
            // Nothing parsed can be larger than the file allows.
            prop_assert!(h.tensors.len() as u64 <= bytes.len() as u64 / 20);
            prop_assert!(h.metadata.len() as u64 <= bytes.len() as u64 / 9);
            prop_assert!(h.data_offset <= bytes.len() as u64 + h.alignment);
            for (_, v) in &h.metadata {
                let _ = v.to_json();
                if let Value::Array(a) = v {
                    prop_assert!(a.offset + a.byte_len <= bytes.len() as u64);
                    // On-demand decoding stays safe too.
                    let _ = a.values(&bytes).take(100).count();
                }
            }
            for t in &h.tensors {
                let _ = t.n_elements();
                prop_assert!(matches!(t.dtype, DType::Ggml(_)));
            }
        }
    }

    #[test]
    fn random_bytes_after_the_magic_never_panic(tail in prop::collection::vec(any::<u8>(), 0..256), v in 1u32..=3) {
        let mut bytes = b"GGUF".to_vec();
        bytes.extend_from_slice(&v.to_le_bytes());
        bytes.extend_from_slice(&tail);
        let _ = gguf::parse(&bytes);
    }
}

#[test]
fn arrays_over_llama_cpps_item_limit_are_a_warning() {
    // A u8 array of 2^30 + 1 items (llama.cpp's limit is 2^30): the items are the sparse
    // tail of the file, so the test writes only the header.
    let n = (1u64 << 30) + 1;
    let head = GgufWriter::new()
        .arch("llama")
        .kv("big", Val::ArrayCount(0, n, Vec::new()))
        .fill(Fill::None)
        .build();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long-array.gguf");
    std::fs::write(&path, &head).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(head.len() as u64 + n).unwrap();
    drop(file);
    let model = weight_inspect::format::ModelFile::open(&path).unwrap();
    let weight_inspect::format::Header::Gguf(h) = model.header() else {
        panic!("a GGUF header");
    };
    let msg = warning(h, "gguf.kv.array-too-long");
    assert!(msg.contains("big"), "{msg}");
    assert!(!h.llama_cpp_loadable);
    assert_eq!(
        h.get("big").and_then(|v| v.as_array()).map(|a| a.len),
        Some(n)
    );
}

#[test]
fn split_numbers_beyond_the_count_are_errors() {
    let shard = |no: u16| {
        ok(&GgufWriter::new()
            .arch("llama")
            .kv("split.no", Val::U16(no))
            .kv("split.count", Val::U16(2))
            .kv("split.tensors.count", Val::I32(0))
            .build())
    };
    let (a, b) = (shard(0), shard(5));
    let d = check_split(&[
        ("m-00001-of-00002.gguf".to_string(), &a),
        ("m-00002-of-00002.gguf".to_string(), &b),
    ]);
    assert!(
        d.iter()
            .any(|d| d.code == "gguf.split.bad-number" && d.message.contains('5')),
        "{d:?}"
    );
}

/// Regression: many short arrays were all decoded (~100× the file in memory); a budget over
/// the whole header now stops decoding, and the arrays past it read on demand.
#[test]
fn short_arrays_past_the_decode_budget_stay_undecoded() {
    use weight_inspect::format::gguf::{ARRAY_DECODE_LIMIT, DECODE_BUDGET_ITEMS};
    let n_arrays = 2 * DECODE_BUDGET_ITEMS / ARRAY_DECODE_LIMIT;
    let items: Vec<u32> = (0..ARRAY_DECODE_LIMIT as u32).collect();
    // First, a short string array of more bytes than the byte budget: not decoded either.
    let big = "x".repeat((gguf::DECODE_BUDGET_BYTES / 2) as usize);
    let mut w = GgufWriter::new()
        .arch("x")
        .kv("strings", Val::strs(&[&big, &big, &big]));
    for i in 0..n_arrays {
        w = w.kv(&format!("a{i}"), Val::u32s(&items));
    }
    let bytes = w.build();
    let h = ok(&bytes);
    clean(&h);
    let arrays: Vec<&ArrayValue> = h
        .metadata
        .iter()
        .filter_map(|(_, v)| v.as_array())
        .collect();
    let decoded: u64 = arrays.iter().map(|a| a.items.len() as u64).sum();
    assert!(decoded <= DECODE_BUDGET_ITEMS, "{decoded} items decoded");
    assert!(h.get("a0").unwrap().as_array().unwrap().is_decoded());
    let last = h.get(&format!("a{}", n_arrays - 1)).unwrap();
    let last = last.as_array().unwrap();
    assert!(!last.is_decoded());
    assert_eq!(
        h.get(&format!("a{}", n_arrays - 1)).unwrap().to_json(),
        serde_json::json!({"type": "array", "element_type": "u32", "len": 64})
    );
    let back: Vec<u64> = last.u64s(&bytes).collect::<Result<_, _>>().unwrap();
    assert_eq!(back, (0..64).collect::<Vec<u64>>());
    let strings = h.get("strings").unwrap().as_array().unwrap();
    assert!(!strings.is_decoded());
    assert_eq!(strings.strings(&bytes).filter(|s| s.is_ok()).count(), 3);
}

/// mock-server's demo data (written with testkit's streaming writer) is what llama.cpp
/// loads: every GGUF file parses without a diagnostic, in the canonical layout (each tensor
/// at the running sum of padded sizes, inside the file, which ends with the last padding),
/// the split F32 model passes the split checks, and every model verifies, hashes included.
#[test]
fn demo_data_parses_and_verifies() {
    use mock_server::demo::{self, DemoOptions};
    use weight_inspect::verify::{self, Options};
    let dir = tempfile::tempdir().unwrap();
    let opts = DemoOptions {
        size_mb: 1,
        seed: 42,
        minilm: None,
    };
    demo::build(dir.path(), &opts).unwrap();
    let repo = dir.path().join("demo/TinyLlama-GGUF");
    let mut names: Vec<String> = std::fs::read_dir(&repo)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".gguf"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "tinyllama-f16.gguf",
            "tinyllama-f32-00001-of-00002.gguf",
            "tinyllama-f32-00002-of-00002.gguf",
            "tinyllama-q4_k_m.gguf",
            "tinyllama-q8_0.gguf",
        ]
    );
    let mut shards = Vec::new();
    for name in &names {
        let bytes = std::fs::read(repo.join(name)).unwrap();
        let h = ok(&bytes);
        if name.contains("-00002-of-") {
            // Later shards carry the split keys only, as llama-gguf-split writes them.
            assert_eq!(codes(&h), ["gguf.meta.missing-architecture"], "{name}");
        } else {
            clean(&h);
        }
        assert_eq!((h.version, h.alignment), (3, 32), "{name}");
        assert!(!h.tensors.is_empty(), "{name}");
        let mut end = h.data_offset;
        for t in &h.tensors {
            assert_eq!(t.offset, end, "{name}: {}", t.name);
            assert!(
                t.byte_range().end <= bytes.len() as u64,
                "{name}: {}",
                t.name
            );
            end = (t.byte_range().end).div_ceil(32) * 32;
        }
        assert_eq!(end, bytes.len() as u64, "{name}");
        if name.contains("-of-") {
            shards.push((name.clone(), h));
        }
    }
    let shards: Vec<(String, &GgufHeader)> = shards.iter().map(|(n, h)| (n.clone(), h)).collect();
    assert!(
        check_split(&shards).is_empty(),
        "{:#?}",
        check_split(&shards)
    );
    let opts = Options {
        hash_tensors: true,
        strict: true,
    };
    for name in [
        "tinyllama-q4_k_m.gguf",
        "tinyllama-q8_0.gguf",
        "tinyllama-f16.gguf",
        "tinyllama-f32-00001-of-00002.gguf",
    ] {
        let report = verify::verify_path(&repo.join(name), &opts).unwrap();
        assert!(
            report.valid,
            "{name}: {:?} {:?}",
            report.errors, report.warnings
        );
        assert_eq!(report.llama_cpp_loadable, Some(true), "{name}");
        assert_eq!(report.architecture.as_deref(), Some("llama"), "{name}");
        assert!(report.hashed, "{name}");
    }
}
