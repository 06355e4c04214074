//! safetensors: headers, every layout rule, sharded checkpoints, real and reference-written
//! files.
//!
//! Each invalid case asserts its exact diagnostic code or fatal error kind. Files are built
//! with `testkit::safetensors` at test time.

use proptest::prelude::*;
use testkit::safetensors::{
    dtype_bits, index_json, shard_name, tensor_bytes, Padding, StWriter, DTYPES,
};
use weight_inspect::format::safetensors::{
    check_sharded, parse, parse_index, Dtype, SafetensorsHeader, ShardIndex, MAX_HEADER_SIZE,
};
use weight_inspect::format::{self, DType, FormatErrorKind, Header, Severity};

/// Parse bytes that must have a describable header.
fn ok(bytes: &[u8]) -> SafetensorsHeader {
    match parse(bytes) {
        Ok(h) => h,
        Err(e) => panic!("unexpected fatal error: {e}"),
    }
}

/// The diagnostic codes of a header, in order.
fn codes(h: &SafetensorsHeader) -> Vec<&'static str> {
    h.diagnostics.iter().map(|d| d.code).collect()
}

/// Error-level codes only.
fn errors(h: &SafetensorsHeader) -> Vec<&'static str> {
    h.diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| d.code)
        .collect()
}

/// The single diagnostic with `code`, whose message must mention each of `words`.
fn assert_diag(h: &SafetensorsHeader, code: &str, severity: Severity, words: &[&str]) {
    let found: Vec<_> = h.diagnostics.iter().filter(|d| d.code == code).collect();
    assert_eq!(
        found.len(),
        1,
        "expected one {code}, got {:#?}",
        h.diagnostics
    );
    assert_eq!(found[0].severity, severity, "{:?}", found[0]);
    for w in words {
        assert!(
            found[0].message.contains(w),
            "message of {code} lacks {w:?}: {}",
            found[0].message
        );
    }
}

fn names(h: &SafetensorsHeader) -> Vec<&str> {
    h.tensors.iter().map(|t| t.name.as_str()).collect()
}

// ---------------------------------------------------------------------------------------
// Valid files
// ---------------------------------------------------------------------------------------

#[test]
fn every_dtype_round_trips() {
    assert_eq!(Dtype::ALL.len(), DTYPES.len());
    for name in DTYPES {
        let d = Dtype::from_name(name).unwrap_or_else(|| panic!("{name} unknown"));
        assert_eq!(d.name(), name);
        assert_eq!(Some(u64::from(d.bits())), dtype_bits(name), "{name}");
        assert_eq!(d.to_string(), name);

        // 2 x 4 elements: whole bytes for 4- and 6-bit types too.
        let w = StWriter::new().zeros("t", name, &[2, 4]);
        let bytes = w.build();
        let h = ok(&bytes);
        assert!(h.diagnostics.is_empty(), "{name}: {:?}", h.diagnostics);
        let t = &h.tensors[0];
        assert_eq!(t.dtype, DType::Safetensors(d));
        assert_eq!(t.shape, [2, 4]);
        assert_eq!(t.n_bytes, tensor_bytes(name, &[2, 4]));
        assert_eq!(t.n_elements(), 8);
        assert_eq!(t.offset, w.data_offset());
        let data = &bytes[t.offset as usize..(t.offset + t.n_bytes) as usize];
        let want: Vec<u8> = (0..t.n_bytes).map(|i| (i % 251) as u8).collect();
        assert_eq!(data, want.as_slice(), "{name}");
    }
}

#[test]
fn all_dtypes_in_one_file_sorted_by_offset() {
    // Largest elements first, as the reference writer orders them, so all are aligned.
    let mut order: Vec<&str> = DTYPES.to_vec();
    order.sort_by_key(|d| std::cmp::Reverse(dtype_bits(d)));
    let mut w = StWriter::new().metadata("format", "pt");
    for (i, d) in order.iter().enumerate() {
        w = w.zeros(&format!("t{i:02}.{d}"), d, &[3, 8]);
    }
    let h = ok(&w.build());
    assert!(h.diagnostics.is_empty(), "{:?}", h.diagnostics);
    assert_eq!(h.tensors.len(), 22);
    assert_eq!(h.metadata, [("format".to_string(), "pt".to_string())]);
    assert_eq!(h.metadata_value("format"), Some("pt"));
    for pair in h.tensors.windows(2) {
        assert_eq!(pair[0].offset + pair[0].n_bytes, pair[1].offset);
    }
    let last = h.tensors.last().unwrap();
    assert_eq!(last.offset + last.n_bytes, h.file_size);
    assert_eq!(h.data_offset, 8 + h.header_len);
    assert_eq!(h.header_len % 8, 0);
}

#[test]
fn tensors_are_ordered_by_offset_not_header_order() {
    let bytes = StWriter::new()
        .tensor_at("second", "U8", &[4], 4, 8)
        .tensor_at("first", "U8", &[4], 0, 4)
        .data(&[0; 8])
        .build();
    let h = ok(&bytes);
    assert!(h.diagnostics.is_empty(), "{:?}", h.diagnostics);
    assert_eq!(names(&h), ["first", "second"]);
    assert_eq!(h.tensors[0].offset, h.data_offset);
    assert_eq!(h.tensor("second").unwrap().offset, h.data_offset + 4);
}

#[test]
fn empty_file_and_metadata_only() {
    let h = ok(&StWriter::new().build());
    assert!(h.tensors.is_empty() && h.diagnostics.is_empty());
    assert_eq!(h.header_len, 8); // "{}" + 6 spaces, like the reference writer
    let h = ok(&StWriter::new().metadata("a", "b").metadata("c", "").build());
    assert!(h.diagnostics.is_empty());
    assert_eq!(h.metadata.len(), 2);
    assert_eq!(h.metadata_value("c"), Some(""));
}

#[test]
fn empty_and_rank0_tensors_are_valid() {
    let w = StWriter::new()
        .zeros("scalar", "F32", &[])
        .zeros("empty", "F32", &[0])
        .zeros("empty2d", "BF16", &[3, 0])
        .zeros("after", "F32", &[2]);
    let h = ok(&w.build());
    assert!(h.diagnostics.is_empty(), "{:?}", h.diagnostics);
    let scalar = h.tensor("scalar").unwrap();
    assert_eq!((scalar.shape.len(), scalar.n_bytes), (0, 4));
    assert_eq!(h.tensor("empty").unwrap().n_bytes, 0);
    assert_eq!(h.tensor("empty2d").unwrap().n_bytes, 0);
    // The empty tensors sit at offset 4 with "after"; empty ones sort first.
    assert_eq!(names(&h), ["scalar", "empty", "empty2d", "after"]);
}

#[test]
fn only_empty_tensors() {
    let h = ok(&StWriter::new().zeros("e", "F64", &[0, 5]).build());
    assert!(h.diagnostics.is_empty());
    assert_eq!(h.tensors.len(), 1);
}

#[test]
fn sub_byte_dtypes() {
    // F4: 2 elements per byte; F6: 4 elements per 3 bytes.
    let h = ok(&StWriter::new()
        .zeros("f4", "F4", &[2])
        .zeros("f6a", "F6_E2M3", &[4])
        .zeros("f6b", "F6_E3M2", &[2, 2, 2])
        .build());
    assert!(h.diagnostics.is_empty(), "{:?}", h.diagnostics);
    let sizes: Vec<u64> = h.tensors.iter().map(|t| t.n_bytes).collect();
    assert_eq!(sizes, [1, 3, 6]);

    // 3 F4 elements are 12 bits: not a whole number of bytes.
    let h = ok(&StWriter::new().tensor("f4", "F4", &[3], &[0, 0]).build());
    assert_diag(
        &h,
        "safetensors.partial-byte",
        Severity::Error,
        &["'f4'", "12 bits"],
    );
    assert!(h.tensors.is_empty());
    // 5 F6 elements are 30 bits.
    let h = ok(&StWriter::new()
        .tensor("f6", "F6_E3M2", &[5], &[0; 4])
        .build());
    assert_eq!(errors(&h), ["safetensors.partial-byte"]);
}

#[test]
fn padded_headers() {
    // Reference padding: no diagnostics.
    let w = StWriter::new().zeros("a", "F32", &[3]);
    assert_eq!(w.padded_header().len() % 8, 0);
    assert!(ok(&w.build()).diagnostics.is_empty());
    // More spaces than needed are still valid, and counted in header_len.
    let w = StWriter::new()
        .zeros("a", "U8", &[3])
        .padding(Padding::Spaces(64));
    let h = ok(&w.build());
    assert_eq!(h.header_len, w.padded_header().len() as u64);
    assert_eq!(h.tensors[0].offset, w.data_offset());
}

#[test]
fn unpadded_header_and_misaligned_tensors_are_warnings() {
    let w = StWriter::new()
        .zeros("bytes", "U8", &[3])
        .zeros("floats", "F32", &[2])
        .padding(Padding::None);
    let json_len = w.header_json().len();
    assert_ne!(json_len % 8, 0, "test needs an unaligned header");
    let h = ok(&w.build());
    assert!(!h.has_errors(), "{:?}", h.diagnostics);
    assert_diag(&h, "safetensors.header-unpadded", Severity::Warning, &[]);
    assert_diag(
        &h,
        "safetensors.misaligned",
        Severity::Warning,
        &["'floats'", "F32"],
    );
    assert_eq!(h.tensors.len(), 2);
}

#[test]
fn one_byte_and_empty_tensors_are_never_misaligned() {
    let h = ok(&StWriter::new()
        .zeros("b", "U8", &[3])
        .zeros("e", "F64", &[0])
        .zeros("f4", "F4", &[2])
        .build());
    assert!(h.diagnostics.is_empty(), "{:?}", h.diagnostics);
}

#[test]
fn header_starting_with_whitespace_is_a_warning() {
    let json = StWriter::new().zeros("a", "U8", &[1]).header_json();
    let h = ok(&StWriter::new()
        .header(&format!("  {json}"))
        .data(&[0])
        .build());
    assert_eq!(codes(&h), ["safetensors.header-start"]);
    assert_eq!(names(&h), ["a"]);
}

#[test]
fn format_parse_detects_safetensors() {
    let bytes = StWriter::new().zeros("a", "F16", &[4]).build();
    assert_eq!(format::detect(&bytes), Some(format::Format::Safetensors));
    match format::parse(&bytes).unwrap() {
        Header::Safetensors(h) => assert_eq!(names(&h), ["a"]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn names_with_escapes_and_unicode() {
    let h = ok(&StWriter::new()
        .zeros("é\"\\\n.weight", "U8", &[1])
        .metadata("ключ", "значение \u{1F600}")
        .build());
    assert!(h.diagnostics.is_empty());
    assert_eq!(names(&h), ["é\"\\\n.weight"]);
    assert_eq!(h.metadata_value("ключ"), Some("значение \u{1F600}"));
}

// ---------------------------------------------------------------------------------------
// Fatal errors
// ---------------------------------------------------------------------------------------

fn fatal(bytes: &[u8]) -> format::FormatError {
    match parse(bytes) {
        Ok(h) => panic!("expected a fatal error, got {h:?}"),
        Err(e) => e,
    }
}

#[test]
fn shorter_than_the_length_prefix() {
    for len in 0..8 {
        let e = fatal(&vec![0u8; len]);
        assert!(
            matches!(e.kind, FormatErrorKind::Truncated { needed: 8, available, .. } if available == len as u64),
            "{e:?}"
        );
    }
}

#[test]
fn header_too_large() {
    let bytes = StWriter::new().header_len(MAX_HEADER_SIZE + 1).build();
    assert_eq!(
        fatal(&bytes).kind,
        FormatErrorKind::HeaderTooLarge(MAX_HEADER_SIZE + 1)
    );
    let bytes = StWriter::new().header_len(u64::MAX).build();
    assert_eq!(
        fatal(&bytes).kind,
        FormatErrorKind::HeaderTooLarge(u64::MAX)
    );
    assert_eq!(fatal(&bytes).code(), "safetensors.header-too-large");
}

#[test]
fn header_longer_than_the_file() {
    let w = StWriter::new().zeros("a", "U8", &[2]);
    let real = w.padded_header().len() as u64;
    let bytes = w.clone().header_len(real + 3).build(); // 2 data bytes: 1 short
    let e = fatal(&bytes);
    assert_eq!(e.code(), "truncated");
    assert!(
        matches!(e.kind, FormatErrorKind::Truncated { needed, available, .. } if needed == real + 3 && available == real + 2),
        "{e:?}"
    );
    assert_eq!(e.offset, 8);
}

#[test]
fn invalid_utf8_header() {
    let mut bytes = StWriter::new().header("{\"a\":\"\u{e9}\"}").build();
    let pos = bytes.iter().position(|&b| b == 0xc3).unwrap();
    bytes[pos] = 0xff;
    let e = fatal(&bytes);
    assert_eq!(
        e.kind,
        FormatErrorKind::InvalidUtf8("safetensors JSON header".into())
    );
    assert_eq!(e.offset, pos as u64);
}

#[test]
fn malformed_json_is_fatal_with_its_offset() {
    // Offsets are absolute: the JSON starts at byte 8.
    let cases = [
        ("{\"a\":{\"dtype\":\"F32\",}}", 28u64), // the '}' after the trailing comma
        ("{", 8),
        ("", 8),
        ("{}{}", 10),
        ("{}\0\0\0\0\0\0", 10),   // NUL padding is not JSON whitespace
        ("{\"a\":1 \n , x}", 19), // line 2, the 'x'
    ];
    let got: Vec<(&str, u64)> = cases
        .iter()
        .map(|(json, _)| {
            let bytes = StWriter::new().header(json).padding(Padding::None).build();
            let e = fatal(&bytes);
            assert_eq!(e.code(), "safetensors.invalid-header", "{json:?}: {e}");
            (*json, e.offset)
        })
        .collect();
    assert_eq!(got, cases);
}

#[test]
fn non_object_header_is_fatal() {
    for json in ["[]", "null", "\"x\"", "42", "[{}]"] {
        let e = fatal(&StWriter::new().header(json).build());
        assert!(
            matches!(e.kind, FormatErrorKind::InvalidHeader(_)),
            "{json}: {e:?}"
        );
    }
}

#[test]
fn deeply_nested_json_is_an_error_not_a_stack_overflow() {
    // An entry's value is skipped without recursion (only the shape of a header field is
    // kept), so the nesting costs neither stack nor memory: it is an invalid entry.
    let deep = format!("{{\"a\":{}{}}}", "[".repeat(100_000), "]".repeat(100_000));
    let h = ok(&StWriter::new().header(&deep).build());
    assert_diag(
        &h,
        "safetensors.invalid-entry",
        Severity::Error,
        &["'a'", "an array"],
    );
    // Unbalanced nesting is malformed JSON: fatal.
    let deep = format!("{{\"a\":{}}}", "[".repeat(100_000));
    let e = fatal(&StWriter::new().header(&deep).build());
    assert_eq!(e.code(), "safetensors.invalid-header");
}

// ---------------------------------------------------------------------------------------
// Entries and metadata
// ---------------------------------------------------------------------------------------

const ENTRY: &str = r#"{"dtype":"U8","shape":[4],"data_offsets":[0,4]}"#;

#[test]
fn identical_duplicate_tensor_is_an_error() {
    // The reference reader accepts this file (last one wins); we do not.
    let h = ok(&StWriter::new()
        .raw_entry("w", ENTRY)
        .raw_entry("w", ENTRY)
        .data(&[0; 4])
        .build());
    assert_diag(&h, "safetensors.duplicate-key", Severity::Error, &["'w'"]);
    assert_eq!(codes(&h), ["safetensors.duplicate-key"]);
    assert_eq!(names(&h), ["w"]);
}

#[test]
fn differing_duplicate_tensor_keeps_the_first() {
    let h = ok(&StWriter::new()
        .raw_entry("w", ENTRY)
        .raw_entry("w", r#"{"dtype":"U8","shape":[2],"data_offsets":[4,6]}"#)
        .data(&[0; 6])
        .build());
    // The second entry's bytes are covered by nothing once it is dropped.
    assert_eq!(
        errors(&h),
        ["safetensors.duplicate-key", "safetensors.trailing-bytes"]
    );
    assert_eq!(h.tensors[0].shape, [4]);
}

#[test]
fn duplicate_metadata_keys_are_errors() {
    let h = ok(&StWriter::new()
        .metadata("k", "v")
        .metadata("k", "v")
        .build());
    assert_diag(
        &h,
        "safetensors.duplicate-key",
        Severity::Error,
        &["'k'", "__metadata__"],
    );
    assert_eq!(h.metadata.len(), 1);

    let json = r#"{"__metadata__":{"a":"1"},"__metadata__":{"a":"1"}}"#;
    let h = ok(&StWriter::new().header(json).build());
    assert_diag(
        &h,
        "safetensors.duplicate-key",
        Severity::Error,
        &["__metadata__"],
    );
    assert_eq!(h.metadata_value("a"), Some("1"));
}

#[test]
fn duplicate_field_in_an_entry_is_an_error() {
    let h = ok(&StWriter::new()
        .zeros("w", "U8", &[4])
        .field("dtype", "\"U8\"")
        .build());
    assert_diag(
        &h,
        "safetensors.duplicate-key",
        Severity::Error,
        &["'w'", "'dtype'"],
    );
    assert_eq!(names(&h), ["w"]);
}

#[test]
fn metadata_values_must_be_strings() {
    for (value, kind) in [
        ("1", "a number"),
        ("null", "null"),
        ("true", "a boolean"),
        ("[\"a\"]", "an array"),
        ("{\"x\":\"y\"}", "an object"),
    ] {
        let h = ok(&StWriter::new()
            .raw_metadata(&format!("{{\"ok\":\"yes\",\"bad\":{value}}}"))
            .build());
        assert_diag(
            &h,
            "safetensors.metadata-not-string",
            Severity::Error,
            &["'bad'", kind],
        );
        assert_eq!(h.metadata, [("ok".to_string(), "yes".to_string())]);
    }
}

#[test]
fn metadata_must_be_a_map() {
    for value in ["[]", "\"pt\"", "null", "3"] {
        let h = ok(&StWriter::new()
            .raw_metadata(value)
            .zeros("a", "U8", &[1])
            .build());
        assert_eq!(codes(&h), ["safetensors.metadata-not-map"], "{value}");
        assert_eq!(names(&h), ["a"]);
    }
}

#[test]
fn unknown_dtype_names_the_tensor() {
    for dtype in ["F128", "f32", "float32", "", "Q4_K"] {
        let h = ok(&StWriter::new()
            .tensor("good", "U8", &[2], &[0, 0])
            .tensor("odd.weight", dtype, &[2], &[0, 0])
            .build());
        assert_diag(
            &h,
            "safetensors.unknown-dtype",
            Severity::Error,
            &["'odd.weight'", dtype],
        );
        assert_eq!(codes(&h), ["safetensors.unknown-dtype"], "no layout noise");
        assert_eq!(names(&h), ["good"]);
    }
}

#[test]
fn unknown_field_is_a_warning() {
    let h = ok(&StWriter::new()
        .zeros("w", "F32", &[2])
        .field("byte_order", "\"big\"")
        .build());
    assert_diag(
        &h,
        "safetensors.unknown-field",
        Severity::Warning,
        &["'w'", "'byte_order'"],
    );
    assert!(!h.has_errors());
    assert_eq!(names(&h), ["w"]);
}

#[test]
fn invalid_entries() {
    let cases = [
        ("\"a string\"", "a string"),
        ("[0, 4]", "an array"),
        (r#"{"shape":[4],"data_offsets":[0,4]}"#, "dtype"),
        (r#"{"dtype":"U8","data_offsets":[0,4]}"#, "shape"),
        (r#"{"dtype":"U8","shape":[4]}"#, "data_offsets"),
        (
            r#"{"dtype":8,"shape":[4],"data_offsets":[0,4]}"#,
            "dtype is a number",
        ),
        (r#"{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}"#, "-4"),
        (
            r#"{"dtype":"U8","shape":[4.0],"data_offsets":[0,4]}"#,
            "shape",
        ),
        (r#"{"dtype":"U8","shape":4,"data_offsets":[0,4]}"#, "shape"),
        (
            r#"{"dtype":"U8","shape":[4],"data_offsets":[0,4,8]}"#,
            "[0, 4, 8]",
        ),
        (
            r#"{"dtype":"U8","shape":[4],"data_offsets":[4]}"#,
            "data_offsets",
        ),
        (
            r#"{"dtype":"U8","shape":[4],"data_offsets":[0,18446744073709551616]}"#,
            "data_offsets",
        ),
        (
            r#"{"dtype":"U8","shape":[4],"data_offsets":{"0":4}}"#,
            "an object",
        ),
    ];
    for (json, word) in cases {
        let h = ok(&StWriter::new().raw_entry("bad", json).build());
        assert_diag(
            &h,
            "safetensors.invalid-entry",
            Severity::Error,
            &["'bad'", word],
        );
        assert!(h.tensors.is_empty(), "{json}");
    }
}

#[test]
fn invalid_entry_with_offsets_still_takes_its_place() {
    // A bad shape: the entry's bytes are still accounted for, so no hole or trailing bytes.
    let h = ok(&StWriter::new()
        .raw_entry("bad", r#"{"dtype":"U8","shape":[-1],"data_offsets":[0,4]}"#)
        .tensor_at("good", "U8", &[2], 4, 6)
        .data(&[0; 6])
        .build());
    assert_eq!(codes(&h), ["safetensors.invalid-entry"]);
    assert_eq!(names(&h), ["good"]);
}

// ---------------------------------------------------------------------------------------
// Layout rules
// ---------------------------------------------------------------------------------------

#[test]
fn hole_between_tensors() {
    let h = ok(&StWriter::new()
        .tensor_at("a", "U8", &[4], 0, 4)
        .tensor_at("b", "U8", &[4], 8, 12)
        .data(&[0; 12])
        .build());
    assert_diag(
        &h,
        "safetensors.hole",
        Severity::Error,
        &["'a'", "'b'", "[4, 8)", "4 unused"],
    );
    assert_eq!(errors(&h), ["safetensors.hole"]);
    assert_eq!(names(&h), ["a", "b"], "both tensors are still describable");
}

#[test]
fn hole_at_the_start() {
    let h = ok(&StWriter::new()
        .tensor_at("a", "U8", &[4], 2, 6)
        .data(&[0; 6])
        .build());
    assert_diag(&h, "safetensors.hole", Severity::Error, &["'a'", "start"]);
}

#[test]
fn overlapping_tensors() {
    let h = ok(&StWriter::new()
        .tensor_at("a", "U8", &[8], 0, 8)
        .tensor_at("b", "U8", &[8], 4, 12)
        .data(&[0; 12])
        .build());
    assert_diag(
        &h,
        "safetensors.overlap",
        Severity::Error,
        &["'a'", "'b'", "[4, 12]", "[0, 8]"],
    );
    assert_eq!(errors(&h), ["safetensors.overlap"]);
    assert_eq!(names(&h), ["a", "b"]);
}

#[test]
fn tensor_inside_another_and_identical_ranges() {
    let h = ok(&StWriter::new()
        .tensor_at("outer", "U8", &[8], 0, 8)
        .tensor_at("inner", "U8", &[2], 2, 4)
        .tensor_at("tail", "U8", &[2], 8, 10)
        .data(&[0; 10])
        .build());
    assert_eq!(errors(&h), ["safetensors.overlap"], "{:?}", h.diagnostics);

    let h = ok(&StWriter::new()
        .tensor_at("x", "U8", &[4], 0, 4)
        .tensor_at("y", "U8", &[4], 0, 4)
        .data(&[0; 4])
        .build());
    assert_diag(&h, "safetensors.overlap", Severity::Error, &["'x'", "'y'"]);
}

#[test]
fn empty_tensor_inside_another_is_an_overlap() {
    // The reference reader rejects it too (each begin must equal the previous end).
    let h = ok(&StWriter::new()
        .tensor_at("a", "U8", &[8], 0, 8)
        .tensor_at("e", "U8", &[0], 4, 4)
        .data(&[0; 8])
        .build());
    assert_diag(&h, "safetensors.overlap", Severity::Error, &["'e'"]);
}

#[test]
fn reversed_offsets() {
    let h = ok(&StWriter::new()
        .tensor_at("r", "U8", &[4], 8, 4)
        .data(&[0; 8])
        .build());
    assert_diag(
        &h,
        "safetensors.offsets-reversed",
        Severity::Error,
        &["'r'", "[8, 4]"],
    );
    assert!(h.tensors.is_empty());
}

#[test]
fn size_mismatch() {
    let h = ok(&StWriter::new()
        .tensor("w", "F32", &[2, 3], &[0; 20])
        .build());
    assert_diag(
        &h,
        "safetensors.size-mismatch",
        Severity::Error,
        &["'w'", "20", "24", "[0, 20]"],
    );
    assert_eq!(errors(&h), ["safetensors.size-mismatch"]);
    assert!(h.tensors.is_empty());
}

#[test]
fn shape_overflow() {
    // Element count overflows.
    let h = ok(&StWriter::new()
        .tensor_at("big", "U8", &[1 << 32, 1 << 32, 2], 0, 0)
        .build());
    assert_diag(&h, "safetensors.overflow", Severity::Error, &["'big'"]);
    // Element count fits, bits do not.
    let h = ok(&StWriter::new()
        .tensor_at("big", "F64", &[1 << 62], 0, 0)
        .build());
    assert_diag(&h, "safetensors.overflow", Severity::Error, &["'big'"]);
    // u64::MAX as a dimension, with a zero dimension first: 0 elements, no overflow.
    let h = ok(&StWriter::new()
        .tensor_at("zero", "F64", &[0, u64::MAX], 0, 0)
        .build());
    assert!(h.diagnostics.is_empty(), "{:?}", h.diagnostics);
}

#[test]
fn out_of_bounds() {
    let h = ok(&StWriter::new()
        .tensor("a", "U8", &[4], &[0; 4])
        .tensor_at("far", "U8", &[4], 4, 8)
        .build());
    assert_diag(
        &h,
        "safetensors.out-of-bounds",
        Severity::Error,
        &["'far'", "[4, 8]"],
    );
    assert_eq!(errors(&h), ["safetensors.out-of-bounds"]);
    assert_eq!(names(&h), ["a"]);

    let h = ok(&StWriter::new()
        .tensor_at("huge", "U8", &[1], u64::MAX - 1, u64::MAX)
        .build());
    assert_eq!(
        errors(&h),
        ["safetensors.hole", "safetensors.out-of-bounds"]
    );
}

#[test]
fn trailing_bytes_polyglot() {
    let h = ok(&StWriter::new()
        .zeros("a", "F32", &[2])
        .trailing(b"<html>hidden</html>")
        .build());
    assert_diag(
        &h,
        "safetensors.trailing-bytes",
        Severity::Error,
        &["19 bytes", "'a'"],
    );
    assert_eq!(errors(&h), ["safetensors.trailing-bytes"]);
    assert_eq!(names(&h), ["a"]);

    // No tensors at all, and bytes after the header.
    let h = ok(&StWriter::new().trailing(&[1, 2, 3]).build());
    assert_eq!(errors(&h), ["safetensors.trailing-bytes"]);
}

#[test]
fn several_problems_are_all_reported() {
    let h = ok(&StWriter::new()
        .tensor_at("a", "F32", &[2], 0, 8)
        .tensor_at("b", "F32", &[2], 12, 20) // hole of 4 before it
        .tensor_at("c", "BF16", &[3], 20, 24) // needs 6 bytes
        .tensor_at("d", "X9", &[1], 24, 25) // unknown dtype
        .raw_entry("e", "3")
        .metadata("n", "x")
        .data(&[0; 28]) // 3 trailing
        .build());
    let mut got = errors(&h);
    got.sort_unstable();
    assert_eq!(
        got,
        [
            "safetensors.hole",
            "safetensors.invalid-entry",
            "safetensors.size-mismatch",
            "safetensors.trailing-bytes",
            "safetensors.unknown-dtype",
        ]
    );
    assert_eq!(names(&h), ["a", "b"]);
}

// ---------------------------------------------------------------------------------------
// Never panic
// ---------------------------------------------------------------------------------------

fn dtype_strategy() -> impl Strategy<Value = &'static str> {
    proptest::sample::select(DTYPES.to_vec())
}

/// A valid file: up to 6 tensors with small shapes (element counts that are multiples of 4
/// keep sub-byte types whole).
fn valid_file() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        (dtype_strategy(), proptest::collection::vec(0u64..5, 0..4)),
        0..6,
    )
    .prop_map(|tensors| {
        let mut w = StWriter::new().metadata("format", "pt");
        for (i, (dtype, mut shape)) in tensors.into_iter().enumerate() {
            shape.push(4);
            w = w.zeros(&format!("layer.{i}.weight"), dtype, &shape);
        }
        w.build()
    })
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, xor: u8 },
    Set { at: usize, byte: u8 },
    Truncate { len: usize },
    Insert { at: usize, bytes: Vec<u8> },
    Remove { at: usize, n: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..).prop_map(|(at, xor)| Mutation::Flip { at, xor }),
        (
            any::<usize>(),
            proptest::sample::select(b"{}[]\":,0123456789-.e \\aFUIB_".to_vec())
        )
            .prop_map(|(at, byte)| Mutation::Set { at, byte }),
        any::<usize>().prop_map(|len| Mutation::Truncate { len }),
        (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (any::<usize>(), 1usize..8).prop_map(|(at, n)| Mutation::Remove { at, n }),
    ]
}

/// Apply a mutation, aiming mostly at the header (where the parser looks).
fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    let header_end = bytes.len().min(
        bytes
            .get(..8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()) as usize)
            .saturating_add(8),
    );
    let pick = |at: usize, len: usize| if len == 0 { 0 } else { at % len };
    match m {
        Mutation::Flip { at, xor } if !bytes.is_empty() => {
            let i = pick(*at, header_end.max(1));
            bytes[i] ^= xor;
        }
        Mutation::Set { at, byte } if header_end > 8 => {
            let i = 8 + pick(*at, header_end - 8);
            bytes[i] = *byte;
        }
        Mutation::Truncate { len } => bytes.truncate(pick(*len, bytes.len() + 1)),
        Mutation::Insert { at, bytes: ins } => {
            let i = pick(*at, header_end + 1);
            bytes.splice(i..i, ins.iter().copied());
        }
        Mutation::Remove { at, n } if !bytes.is_empty() => {
            let i = pick(*at, bytes.len());
            let end = (i + n).min(bytes.len());
            bytes.drain(i..end);
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn valid_files_parse_without_errors(bytes in valid_file()) {
        let h = ok(&bytes);
        // Tensors are in random dtype order, so misalignment warnings are expected.
        prop_assert!(!h.has_errors(), "{:?}", h.diagnostics);
        let data: u64 = h.tensors.iter().map(|t| t.n_bytes).sum();
        prop_assert_eq!(h.data_offset + data, bytes.len() as u64);
    }

    #[test]
    fn mutated_files_never_panic(
        bytes in valid_file(),
        mutations in proptest::collection::vec(mutation(), 1..4),
    ) {
        let mut bytes = bytes;
        for m in &mutations {
            apply(&mut bytes, m);
        }
        if let Ok(h) = parse(&bytes) {
            // The guarantee of `tensors`, whatever the diagnostics.
            for t in &h.tensors {
                prop_assert!(t.offset >= h.data_offset);
                prop_assert!(t.offset + t.n_bytes <= bytes.len() as u64);
                let DType::Safetensors(d) = t.dtype else { unreachable!() };
                prop_assert_eq!(d.n_bytes(t.n_elements()), Some(t.n_bytes));
            }
        }
        let _ = format::parse(&bytes);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = parse(&bytes);
        let _ = parse_index(&bytes);
    }
}

// ---------------------------------------------------------------------------------------
// Sharded checkpoints
// ---------------------------------------------------------------------------------------

fn index(json: &str) -> ShardIndex {
    match parse_index(json.as_bytes()) {
        Ok(i) => i,
        Err(e) => panic!("{e}"),
    }
}

fn diag_codes(d: &[format::Diagnostic]) -> Vec<&'static str> {
    d.iter().map(|d| d.code).collect()
}

/// Two shards of `model`: a (F32, 16 bytes) and b (F16, 4 bytes) in shard 1, c (BF16, 16
/// bytes) in shard 2: 36 bytes in all.
fn two_shards() -> (String, String, SafetensorsHeader, SafetensorsHeader) {
    let s1 = shard_name("model", 1, 2);
    let s2 = shard_name("model", 2, 2);
    let h1 = ok(&StWriter::new()
        .zeros("a", "F32", &[4])
        .zeros("b", "F16", &[2])
        .build());
    let h2 = ok(&StWriter::new().zeros("c", "BF16", &[8]).build());
    (s1, s2, h1, h2)
}

#[test]
fn index_parses_in_order() {
    let json = r#"{
      "metadata": {"total_size": 36, "format": "pt", "nested": {"k": [1, 2.5, null]}},
      "weight_map": {
        "c": "model-00002-of-00002.safetensors",
        "a": "model-00001-of-00002.safetensors",
        "b": "model-00001-of-00002.safetensors"
      }
    }"#;
    let i = index(json);
    assert!(i.diagnostics.is_empty(), "{:?}", i.diagnostics);
    assert_eq!(i.total_size, Some(36));
    assert_eq!(
        i.weight_map[0],
        ("c".into(), "model-00002-of-00002.safetensors".into())
    );
    assert_eq!(i.weight_map.len(), 3);
    assert_eq!(
        i.shard_files(),
        [
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors"
        ]
    );
    assert_eq!(i.shard_of("b"), Some("model-00001-of-00002.safetensors"));
    assert_eq!(i.metadata.len(), 3);
    assert_eq!(i.metadata[1], ("format".into(), serde_json::json!("pt")));
}

#[test]
fn index_without_metadata_or_total_size() {
    let i = index(r#"{"weight_map": {"a": "x.safetensors"}}"#);
    assert_eq!(i.total_size, None);
    assert!(i.diagnostics.is_empty());
    let i = index(r#"{"metadata": {"total_size": 1.5e3}, "weight_map": {}}"#);
    assert_eq!(
        diag_codes(&i.diagnostics),
        ["safetensors.index.invalid-total-size"]
    );
    assert_eq!(i.diagnostics[0].severity, Severity::Warning);
    let i = index(r#"{"metadata": [], "weight_map": {}}"#);
    assert_eq!(
        diag_codes(&i.diagnostics),
        ["safetensors.index.invalid-metadata"]
    );
}

#[test]
fn index_fatal_errors() {
    for json in [
        "",
        "{",
        "[]",
        r#"{"metadata": {}}"#,
        r#"{"weight_map": []}"#,
        r#"{"weight_map": {}} x"#,
    ] {
        let e = parse_index(json.as_bytes()).unwrap_err();
        assert_eq!(e.code(), "safetensors.invalid-header", "{json:?}");
    }
    let e = parse_index(b"{\"weight_map\": {\"\xff\": \"a\"}}").unwrap_err();
    assert_eq!((e.code(), e.offset), ("invalid-utf8", 17));
}

#[test]
fn index_duplicate_keys_are_errors() {
    let i = index(&index_json(
        Some(1),
        &[("a", "s.safetensors"), ("a", "s.safetensors")],
    ));
    assert_eq!(
        diag_codes(&i.diagnostics),
        ["safetensors.index.duplicate-key"]
    );
    assert!(i.diagnostics[0].message.contains("'a'"));
    assert_eq!(i.weight_map.len(), 1);

    let i = index(r#"{"metadata": {"total_size": 1, "total_size": 1}, "weight_map": {}}"#);
    assert_eq!(
        diag_codes(&i.diagnostics),
        ["safetensors.index.duplicate-key"]
    );
    let i = index(r#"{"weight_map": {}, "weight_map": {}}"#);
    assert_eq!(
        diag_codes(&i.diagnostics),
        ["safetensors.index.duplicate-key"]
    );
    let i = index(r#"{"metadata": {"x": {"y": 1, "y": 1}}, "weight_map": {}}"#);
    assert_eq!(
        diag_codes(&i.diagnostics),
        ["safetensors.index.duplicate-key"]
    );
    assert!(i.diagnostics[0].message.contains("metadata.x.y"));
}

#[test]
fn index_rejects_unsafe_shard_names() {
    for bad in [
        "../model-00001-of-00002.safetensors",
        "sub/model.safetensors",
        "sub\\model.safetensors",
        "/etc/passwd",
        "",
        "..",
        "C:model.safetensors",
    ] {
        let i = index(&index_json(None, &[("t", bad), ("u", "ok.safetensors")]));
        assert_eq!(
            diag_codes(&i.diagnostics),
            ["safetensors.index.invalid-shard-name"],
            "{bad:?}"
        );
        assert_eq!(
            i.shard_files(),
            ["ok.safetensors"],
            "unsafe names are dropped"
        );
    }
    let i = index(r#"{"weight_map": {"t": 3, "u": null}}"#);
    assert_eq!(
        diag_codes(&i.diagnostics),
        [
            "safetensors.index.invalid-shard-name",
            "safetensors.index.invalid-shard-name"
        ]
    );
    assert!(i.weight_map.is_empty());
}

#[test]
fn consistent_checkpoint_has_no_diagnostics() {
    let (s1, s2, h1, h2) = two_shards();
    let i = index(&index_json(Some(36), &[("a", &s1), ("b", &s1), ("c", &s2)]));
    let d = check_sharded(&i, &[(s1, &h1), (s2, &h2)]);
    assert!(d.is_empty(), "{d:?}");
}

#[test]
fn mapped_tensor_missing_from_its_shard() {
    let (s1, s2, h1, h2) = two_shards();
    let i = index(&index_json(
        Some(36),
        &[("a", &s1), ("b", &s1), ("c", &s2), ("ghost", &s2)],
    ));
    let d = check_sharded(&i, &[(s1, &h1), (s2.clone(), &h2)]);
    assert_eq!(diag_codes(&d), ["safetensors.shard.missing-tensor"]);
    assert!(d[0].message.contains("'ghost'") && d[0].message.contains(&s2));
}

#[test]
fn shard_tensor_not_in_the_map() {
    let (s1, s2, h1, h2) = two_shards();
    let i = index(&index_json(Some(36), &[("a", &s1), ("c", &s2)]));
    let d = check_sharded(&i, &[(s1.clone(), &h1), (s2, &h2)]);
    assert_eq!(diag_codes(&d), ["safetensors.shard.unmapped-tensor"]);
    assert!(d[0].message.contains("'b'") && d[0].message.contains(&s1));
}

#[test]
fn tensor_mapped_to_another_shard() {
    let (s1, s2, h1, h2) = two_shards();
    let i = index(&index_json(Some(36), &[("a", &s1), ("b", &s2), ("c", &s2)]));
    let d = check_sharded(&i, &[(s1.clone(), &h1), (s2.clone(), &h2)]);
    assert_eq!(diag_codes(&d), ["safetensors.shard.wrong-shard"]);
    assert!(
        d[0].message.contains("'b'") && d[0].message.contains(&s1) && d[0].message.contains(&s2)
    );
}

#[test]
fn tensor_in_two_shards() {
    let (s1, s2, h1, _) = two_shards();
    let h2 = ok(&StWriter::new()
        .zeros("c", "BF16", &[8])
        .zeros("a", "F32", &[4])
        .build());
    let i = index(&index_json(None, &[("a", &s1), ("b", &s1), ("c", &s2)]));
    let d = check_sharded(&i, &[(s1.clone(), &h1), (s2.clone(), &h2)]);
    // `a` is mapped (to shard 1), so its copy in shard 2 is a duplicate, not unmapped.
    assert_eq!(diag_codes(&d), ["safetensors.shard.duplicate-tensor"]);
    assert!(d[0].message.contains("'a'") && d[0].message.contains(&s2));
}

#[test]
fn shard_file_missing() {
    let (s1, s2, h1, _) = two_shards();
    let i = index(&index_json(Some(36), &[("a", &s1), ("b", &s1), ("c", &s2)]));
    let d = check_sharded(&i, &[(s1, &h1)]);
    // No total_size check without every shard.
    assert_eq!(diag_codes(&d), ["safetensors.shard.missing-file"]);
    assert!(d[0].message.contains(&s2));
}

#[test]
fn total_size_is_advisory() {
    let (s1, s2, h1, h2) = two_shards();
    let i = index(&index_json(
        Some(100),
        &[("a", &s1), ("b", &s1), ("c", &s2)],
    ));
    let d = check_sharded(&i, &[(s1, &h1), (s2, &h2)]);
    assert_eq!(diag_codes(&d), ["safetensors.index.total-size-mismatch"]);
    assert_eq!(d[0].severity, Severity::Warning);
    assert!(d[0].message.contains("100") && d[0].message.contains("36"));
}

#[test]
fn shard_numbering() {
    let check = |files: &[&str]| {
        let map: Vec<(String, &str)> = files
            .iter()
            .enumerate()
            .map(|(i, f)| (format!("t{i}"), *f))
            .collect();
        let pairs: Vec<(&str, &str)> = map.iter().map(|(t, f)| (t.as_str(), *f)).collect();
        let i = index(&index_json(None, &pairs));
        // Each shard holds exactly its tensor, so only naming problems remain.
        let headers: Vec<SafetensorsHeader> = map
            .iter()
            .map(|(t, _)| ok(&StWriter::new().zeros(t, "U8", &[1]).build()))
            .collect();
        let shards: Vec<(String, &SafetensorsHeader)> = files
            .iter()
            .zip(&headers)
            .map(|(f, h)| (f.to_string(), h))
            .collect();
        let d = check_sharded(&i, &shards);
        d.iter().map(|d| (d.code, d.severity)).collect::<Vec<_>>()
    };
    use Severity::{Error, Warning};
    assert!(check(&[
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors"
    ])
    .is_empty());
    // Shard 2 of 3 never named.
    assert_eq!(
        check(&[
            "model-00001-of-00003.safetensors",
            "model-00003-of-00003.safetensors"
        ]),
        [("safetensors.shard.missing-shard", Error)]
    );
    // Counting from 0.
    assert_eq!(
        check(&[
            "model-00000-of-00002.safetensors",
            "model-00001-of-00002.safetensors"
        ]),
        [
            ("safetensors.shard.naming", Error),
            ("safetensors.shard.missing-shard", Error)
        ]
    );
    // Disagreeing counts and prefixes.
    assert_eq!(
        check(&[
            "model-00001-of-00002.safetensors",
            "model-00002-of-00003.safetensors"
        ]),
        [
            ("safetensors.shard.naming", Error),
            ("safetensors.shard.missing-shard", Error)
        ]
    );
    assert_eq!(
        check(&[
            "a-00001-of-00002.safetensors",
            "b-00002-of-00002.safetensors"
        ]),
        [
            ("safetensors.shard.naming", Error),
            ("safetensors.shard.missing-shard", Error)
        ]
    );
    // Unnumbered names load, but are unusual.
    assert_eq!(
        check(&["first.safetensors", "second.safetensors"]),
        [
            ("safetensors.shard.naming", Warning),
            ("safetensors.shard.naming", Warning)
        ]
    );
    // A huge claimed count is reported once, not once per missing number.
    let d = check(&["model-00001-of-4000000000.safetensors"]);
    assert_eq!(d, [("safetensors.shard.missing-shard", Error)]);
}
