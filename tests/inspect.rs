//! `weight-inspect` end to end: exit codes, JSON fields, folders, multi-file models,
//! per-tensor hashes, typed views, and gguf-py as an independent reference.

use serde_json::Value as Json;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use testkit::gguf::{Fill, GgufWriter, Val};
use testkit::safetensors::{self as st_writer, StWriter};
use weight_inspect::format::model::ViewError;
use weight_inspect::format::{Format, Model, ModelFile};
use weight_inspect::verify::{self, Options};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weight-inspect"))
}

fn run(args: &[&str], paths: &[&Path]) -> Output {
    bin()
        .args(args)
        .args(paths)
        .output()
        .expect("run weight-inspect")
}

fn json_lines(out: &Output) -> Vec<Json> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each stdout line is JSON"))
        .collect()
}

fn small_model() -> GgufWriter {
    GgufWriter::new()
        .arch("llama")
        .kv("general.file_type", Val::U32(7))
        .kv("general.quantization_version", Val::U32(2))
        .kv("llama.block_count", Val::U32(1))
        .tensor("token_embd.weight", 8, &[64, 4])
        .tensor("blk.0.attn_q.weight", 0, &[16, 16])
        .tensor("output_norm.weight", 1, &[64])
        .fill(Fill::Pattern)
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn json_report_has_the_documented_fields() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "m.gguf", &small_model().build());
    let out = run(&["--json"], &[&p]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = &json_lines(&out)[0];
    for field in [
        "path",
        "format",
        "version",
        "endianness",
        "alignment",
        "file_size",
        "data_offset",
        "tensor_count",
        "metadata_count",
        "total_params",
        "dtypes",
        "tensors",
        "metadata",
        "valid",
        "errors",
        "warnings",
        "llama_cpp_loadable",
    ] {
        assert!(r.get(field).is_some(), "missing field {field}");
    }
    assert_eq!(r["format"], "gguf");
    assert_eq!(r["version"], 3);
    assert_eq!(r["endianness"], "little");
    assert_eq!(r["tensor_count"], 3);
    assert_eq!(r["metadata_count"], 4);
    assert_eq!(r["total_params"], 64 * 4 + 256 + 64);
    assert_eq!(r["dtypes"]["Q8_0"], 1);
    assert_eq!(r["dtypes"]["F32"], 1);
    assert_eq!(r["dtypes"]["F16"], 1);
    assert_eq!(r["architecture"], "llama");
    assert_eq!(r["file_type"], "MOSTLY_Q8_0");
    assert_eq!(r["valid"], true);
    assert_eq!(r["llama_cpp_loadable"], true);
    let t0 = &r["tensors"][0];
    assert_eq!(t0["name"], "token_embd.weight");
    assert_eq!(t0["dtype"], "Q8_0");
    assert_eq!(t0["shape"], serde_json::json!([64, 4]));
    assert_eq!(t0["n_bytes"], 2 * 34 * 4);
    assert_eq!(
        t0["offset"], r["data_offset"],
        "first tensor starts the data section"
    );
    assert!(t0.get("sha256").is_none(), "no hashes without --verify");
}

#[test]
fn verify_hashes_exactly_each_tensors_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "m.gguf", &small_model().build());
    let bytes = std::fs::read(&p).unwrap();
    let out = run(&["--json", "--verify"], &[&p]);
    assert_eq!(out.status.code(), Some(0));
    let r = &json_lines(&out)[0];
    let tensors = r["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), 3);
    for t in tensors {
        let off = t["offset"].as_u64().unwrap() as usize;
        let n = t["n_bytes"].as_u64().unwrap() as usize;
        let want = hex::encode(Sha256::digest(&bytes[off..off + n]));
        assert_eq!(t["sha256"], want.as_str(), "tensor {}", t["name"]);
    }
    // The table shows a checksum sample.
    let out = run(&["--verify"], &[&p]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("3 tensors hashed"), "{text}");
}

#[test]
fn exit_codes_distinguish_valid_invalid_and_io_errors() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "good.gguf", &small_model().build());
    let bad = write(dir.path(), "bad.gguf", &small_model().truncate(40).build());
    let missing = dir.path().join("missing.gguf");

    assert_eq!(run(&[], &[&good]).status.code(), Some(0));
    let out = run(&[], &[&good, &bad]);
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("INVALID"), "{text}");
    assert!(text.contains("truncated"), "the error is named: {text}");

    let out = run(&[], &[&missing]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing.gguf"), "names the file: {err}");
    assert_eq!(err.lines().count(), 1, "one-line message: {err}");

    // Usage errors are 1, not clap's default 2 (2 means "invalid model").
    assert_eq!(bin().output().unwrap().status.code(), Some(1));
    assert_eq!(
        bin()
            .arg("--bogus")
            .arg(&good)
            .output()
            .unwrap()
            .status
            .code(),
        Some(1)
    );

    // Not a model at all.
    let junk = write(
        dir.path(),
        "junk.bin",
        b"hello, this is not a model file at all",
    );
    let out = run(&["--json"], &[&junk]);
    assert_eq!(out.status.code(), Some(2));
    let r = &json_lines(&out)[0];
    assert_eq!(r["valid"], false);
    assert_eq!(r["diagnostics"][0]["code"], "unknown-format");
}

#[test]
fn strict_turns_warnings_into_failures() {
    let dir = tempfile::tempdir().unwrap();
    // A quantized tensor without general.quantization_version is a warning only.
    let w = GgufWriter::new()
        .arch("llama")
        .tensor("blk.0.w", 8, &[32])
        .fill(Fill::Zeros);
    let p = write(dir.path(), "warn.gguf", &w.build());
    let out = run(&["--json"], &[&p]);
    assert_eq!(out.status.code(), Some(0));
    let r = &json_lines(&out)[0];
    assert_eq!(r["valid"], true);
    assert!(!r["warnings"].as_array().unwrap().is_empty());
    assert_eq!(run(&["--strict"], &[&p]).status.code(), Some(2));
}

#[test]
fn garbage_never_panics_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let valid = small_model().build();
    let mut cases = vec![Vec::new(), b"GGUF".to_vec(), vec![0xff; 64]];
    for cut in [5, 9, 24, 40, valid.len() / 2, valid.len() - 1] {
        cases.push(valid[..cut].to_vec());
    }
    let mut huge = valid.clone();
    huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes()); // tensor count
    cases.push(huge);
    for (i, bytes) in cases.iter().enumerate() {
        let p = write(dir.path(), &format!("case{i}.gguf"), bytes);
        let out = run(&["--json", "--verify"], &[&p]);
        let code = out.status.code();
        assert!(matches!(code, Some(0) | Some(2)), "case {i}: exit {code:?}");
    }
}

#[test]
fn folders_list_every_model_once() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.gguf", &small_model().build());
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    write(
        &sub,
        "b.safetensors",
        &StWriter::new().zeros("w", "F32", &[4]).build(),
    );
    write(dir.path(), "notes.txt", b"not a model");
    // A split pair counts once.
    let (s1, s2) = split_pair();
    write(dir.path(), "x-00001-of-00002.gguf", &s1);
    write(dir.path(), "x-00002-of-00002.gguf", &s2);
    let hidden = dir.path().join(".cache");
    std::fs::create_dir(&hidden).unwrap();
    write(&hidden, "skip.gguf", b"junk");

    let out = run(&["--json"], &[dir.path()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reports = json_lines(&out);
    let names: Vec<String> = reports
        .iter()
        .map(|r| {
            Path::new(r["path"].as_str().unwrap())
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(names, ["a.gguf", "b.safetensors", "x-00001-of-00002.gguf"]);
    assert_eq!(reports[2]["format"], "gguf-split");

    let empty = tempfile::tempdir().unwrap();
    let out = run(&[], &[empty.path()]);
    assert_eq!(out.status.code(), Some(1));
}

fn split_shard(no: u16, tensors: &[&str]) -> Vec<u8> {
    let mut w = GgufWriter::new()
        .kv("split.no", Val::U16(no))
        .kv("split.count", Val::U16(2))
        .kv("split.tensors.count", Val::I32(3))
        .fill(Fill::Pattern);
    if no == 0 {
        w = w.arch("llama").kv("general.file_type", Val::U32(0));
    }
    for t in tensors {
        w = w.tensor(t, 0, &[8, 2]);
    }
    w.build()
}

fn split_pair() -> (Vec<u8>, Vec<u8>) {
    (
        split_shard(0, &["a.weight", "b.weight"]),
        split_shard(1, &["c.weight"]),
    )
}

#[test]
fn split_gguf_opens_as_one_model() {
    let dir = tempfile::tempdir().unwrap();
    let (s1, s2) = split_pair();
    let first = write(dir.path(), "m-00001-of-00002.gguf", &s1);
    write(dir.path(), "m-00002-of-00002.gguf", &s2);
    let model = Model::open(&first).unwrap();
    assert_eq!(model.format(), Format::GgufSplit);
    assert_eq!(model.files().len(), 2);
    assert_eq!(model.tensors().count(), 3);
    let c = model
        .tensor("c.weight")
        .expect("tensor from the second shard");
    assert_eq!(c.as_slice::<f32>().unwrap().len(), 16);

    let r = verify::verify_model(
        &model,
        &Options {
            hash_tensors: true,
            strict: false,
        },
    );
    assert!(r.valid, "{:?}", r.errors);
    assert_eq!(r.files.len(), 2);
    assert_eq!(r.tensors[2].file.as_deref(), Some("m-00002-of-00002.gguf"));
    assert!(r.tensors.iter().all(|t| t.sha256.is_some()));

    // A missing shard makes the model invalid, with the shard named.
    std::fs::remove_file(dir.path().join("m-00002-of-00002.gguf")).unwrap();
    let r = verify::verify_path(&first, &Options::default()).unwrap();
    assert!(!r.valid);
    assert!(
        r.diagnostics
            .iter()
            .any(|d| d.code == "gguf.split.missing-shard"),
        "{:?}",
        r.diagnostics
    );

    // The same tensor in both shards.
    write(
        dir.path(),
        "m-00002-of-00002.gguf",
        &split_shard(1, &["a.weight"]),
    );
    let r = verify::verify_path(&first, &Options::default()).unwrap();
    assert!(r
        .diagnostics
        .iter()
        .any(|d| d.code == "gguf.split.duplicate-tensor"));
}

#[test]
fn sharded_safetensors_open_through_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let s1 = st_writer::shard_name("model", 1, 2);
    let s2 = st_writer::shard_name("model", 2, 2);
    StWriter::new()
        .zeros("a", "F32", &[2, 3])
        .write(&dir.path().join(&s1))
        .unwrap();
    StWriter::new()
        .zeros("b", "BF16", &[5])
        .write(&dir.path().join(&s2))
        .unwrap();
    let index = dir.path().join("model.safetensors.index.json");
    std::fs::write(
        &index,
        st_writer::index_json(Some(24 + 10), &[("a", &s1), ("b", &s2)]),
    )
    .unwrap();
    let out = run(&["--json", "--verify"], &[&index]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let r = &json_lines(&out)[0];
    assert_eq!(r["format"], "safetensors-sharded");
    assert_eq!(r["tensor_count"], 2);
    assert_eq!(r["version"], Json::Null);
    assert_eq!(r["llama_cpp_loadable"], Json::Null);
    assert_eq!(r["dtypes"]["BF16"], 1);

    // The folder lists the index once, not its shards.
    let out = run(&["--json"], &[dir.path()]);
    assert_eq!(json_lines(&out).len(), 1);

    // A tensor the map sends to the wrong shard.
    std::fs::write(
        &index,
        st_writer::index_json(None, &[("a", &s2), ("b", &s2)]),
    )
    .unwrap();
    let out = run(&["--json"], &[&index]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn typed_views_check_dtype_alignment_and_byte_order() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "m.gguf", &small_model().build());
    let file = ModelFile::open(&p).unwrap();
    let q = file.tensor("blk.0.attn_q.weight").unwrap();
    let floats = q.as_slice::<f32>().unwrap();
    assert_eq!(floats.len(), 256);
    assert_eq!(
        floats.as_ptr() as usize,
        q.bytes().as_ptr() as usize,
        "the typed view is the same memory, not a copy"
    );
    assert!(matches!(
        q.as_slice::<half::f16>(),
        Err(ViewError::WrongDtype { .. })
    ));
    let norm = file.tensor("output_norm.weight").unwrap();
    assert_eq!(norm.as_slice::<half::f16>().unwrap().len(), 64);

    // safetensors guarantees no alignment: pad the header so that F32 data is misaligned.
    let base = StWriter::new().zeros("w", "F32", &[4]);
    let json_len = base.header_json().len();
    let spaces = (0..4)
        .find(|s| !(8 + json_len + s).is_multiple_of(4))
        .unwrap();
    let p = dir.path().join("odd.safetensors");
    base.padding(st_writer::Padding::Spaces(spaces))
        .write(&p)
        .unwrap();
    let file = ModelFile::open(&p).unwrap();
    let view = file.tensor("w").unwrap();
    assert_ne!(view.info().offset % 4, 0);
    assert!(matches!(
        view.as_slice::<f32>(),
        Err(ViewError::Misaligned { .. })
    ));
    assert_eq!(view.bytes().len(), 16, "raw bytes are always available");

    // Big-endian GGUF: values read right, typed views refused.
    let be = GgufWriter::new()
        .big_endian()
        .arch("llama")
        .tensor("t", 0, &[4])
        .fill(Fill::Pattern)
        .build();
    let p = write(dir.path(), "be.gguf", &be);
    let file = ModelFile::open(&p).unwrap();
    assert_eq!(
        file.header().endianness(),
        weight_inspect::format::Endianness::Big
    );
    assert!(matches!(
        file.tensor("t").unwrap().as_slice::<f32>(),
        Err(ViewError::ForeignEndianness { .. })
    ));
    let out = run(&["--json"], &[&p]);
    let r = &json_lines(&out)[0];
    assert_eq!(r["endianness"], "big");
    assert_eq!(r["llama_cpp_loadable"], false);
}

/// Minor + major page faults of this thread so far (fields 10 and 12 of
/// /proc/thread-self/stat; per thread, so tests running in parallel do not count).
fn page_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    // The command name may hold spaces; fields are counted after its closing parenthesis.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    // rest starts at field 3 (state): minflt is field 10, majflt field 12.
    f[10 - 3].parse::<u64>().unwrap() + f[12 - 3].parse::<u64>().unwrap()
}

#[test]
fn opening_a_100_gb_file_touches_only_header_pages() {
    let dir = tempfile::tempdir().unwrap();
    // One F32 tensor of 2^20 × 25,600 elements: 107 GB of (sparse) data.
    let built = GgufWriter::new()
        .arch("llama")
        .kv("general.file_type", Val::U32(0))
        .tensor("huge.weight", 0, &[1 << 20, 25_600])
        .fill(Fill::None)
        .build_layout();
    let n_bytes = (1u64 << 20) * 25_600 * 4;
    let path = dir.path().join("huge.gguf");
    std::fs::write(&path, &built.bytes).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(built.data_offset as u64 + n_bytes).unwrap(); // sparse: no blocks written
    drop(file);

    let before = page_faults();
    let report = verify::verify_path(&path, &Options::default()).unwrap();
    let faults = page_faults() - before;
    assert!(report.valid, "{:?}", report.errors);
    assert_eq!(report.tensors[0].n_bytes, n_bytes);
    assert_eq!(report.file_size, built.data_offset as u64 + n_bytes);
    // Touching the data would fault in ~26 million pages; the header is one page, and the
    // rest of the run (allocations, the report) a few hundred.
    assert!(faults < 5_000, "{faults} page faults");
}

// ---- memory and output bounds on hostile inputs (regression tests) ----

/// Where the budgets put the ceiling: the mapped file itself (every header page is read),
/// a few MiB of decoded values, the process's own baseline, and slack.
fn memory_bound(file_size: u64) -> u64 {
    (64 << 20) + 4 * file_size
}

/// A well-formed GGUF of `size` bytes made only of short metadata arrays (64 `u8` items
/// each, the most that is decoded per array).
fn many_short_arrays_gguf(size: usize) -> Vec<u8> {
    let mut payload = 0u32.to_le_bytes().to_vec(); // element type u8
    payload.extend_from_slice(&64u64.to_le_bytes());
    payload.extend(0..64u8);
    let per_kv = 8 + 8 + 4 + payload.len();
    let mut w = GgufWriter::new().arch("x");
    for i in 0..size / per_kv {
        w = w.kv(&format!("a{i:07}"), Val::Raw(9, payload.clone()));
    }
    w.build()
}

/// Regression: a 32 MB GGUF of many short arrays made `weight-inspect` hold ~100× its size
/// (gigabytes) in decoded values and their JSON; the decode budget keeps it proportional.
#[test]
fn many_short_gguf_arrays_keep_memory_proportional() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = many_short_arrays_gguf(32 << 20);
    let size = bytes.len() as u64;
    let p = write(dir.path(), "arrays.gguf", &bytes);
    drop(bytes);
    for args in [&["--json"][..], &[][..]] {
        let m = crate::support::run_measured(bin().args(args).arg(&p));
        assert_eq!(m.code, Some(0), "{args:?}: {m:?}");
        assert!(
            m.peak_rss < memory_bound(size),
            "{args:?}: peak RSS {} MiB for a {} MiB file",
            m.peak_rss >> 20,
            size >> 20
        );
        assert!(m.stderr_len == 0, "{args:?}: {m:?}");
        // The report lists every key (~40 bytes of JSON each), never every decoded item.
        assert!(
            m.stdout_len < size,
            "{args:?}: {} bytes of output",
            m.stdout_len
        );
    }
}

/// A safetensors file whose header lists `n` entries, each `entry(i)` (JSON text after the
/// key), with no data.
fn many_entries_safetensors(n: usize, entry: impl Fn(usize) -> String) -> Vec<u8> {
    let mut header = String::from("{");
    for i in 0..n {
        if i > 0 {
            header.push(',');
        }
        header.push_str(&format!("\"t{i:07}\":{}", entry(i)));
    }
    header.push('}');
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out
}

/// Regression: a safetensors header of a million invalid entries built a JSON tree of the
/// whole header and a million diagnostics (gigabytes, and hundreds of MB of report); the
/// header is now streamed and the diagnostics budgeted.
#[test]
fn a_million_invalid_safetensors_entries_keep_memory_and_output_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = many_entries_safetensors(1_000_000, |_| "0".into());
    let size = bytes.len() as u64;
    let p = write(dir.path(), "entries.safetensors", &bytes);
    drop(bytes);
    for (args, max_out) in [(&["--json"][..], 1u64 << 20), (&[][..], 64 << 10)] {
        let m = crate::support::run_measured(bin().args(args).arg(&p));
        assert_eq!(m.code, Some(2), "{args:?}: {m:?}");
        assert!(
            m.peak_rss < memory_bound(size),
            "{args:?}: peak RSS {} MiB for a {} MiB file",
            m.peak_rss >> 20,
            size >> 20
        );
        assert_eq!(m.stderr_len, 0, "{args:?}");
        assert!(m.stdout_len < max_out, "{args:?}: {} bytes", m.stdout_len);
        let out = String::from_utf8_lossy(&m.stdout_head);
        assert!(
            out.contains("… and 999,984 more `safetensors.invalid-entry` diagnostics"),
            "{args:?}: {out}"
        );
    }
}

/// Past `MAX_TENSORS` entries the header is refused, with a clear error and little memory.
#[test]
fn too_many_safetensors_entries_are_refused() {
    use weight_inspect::format::safetensors::MAX_TENSORS;
    let dir = tempfile::tempdir().unwrap();
    let bytes = many_entries_safetensors(MAX_TENSORS as usize + 1, |_| "0".into());
    let size = bytes.len() as u64;
    let p = write(dir.path(), "too-many.safetensors", &bytes);
    drop(bytes);
    let m = crate::support::run_measured(bin().arg("--json").arg(&p));
    assert_eq!(m.code, Some(2), "{m:?}");
    assert!(m.peak_rss < memory_bound(size), "{} MiB", m.peak_rss >> 20);
    assert!(m.stdout_len < 16 << 10, "{} bytes", m.stdout_len);
    let r: Json = serde_json::from_slice(&m.stdout_head).unwrap();
    assert_eq!(
        r["diagnostics"][0]["code"],
        "safetensors.header.too-many-tensors"
    );
}

/// A million valid (empty) tensors: every one is described, in memory proportional to the
/// file.
#[test]
fn a_million_safetensors_tensors_keep_memory_proportional() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = many_entries_safetensors(1_000_000, |_| {
        r#"{"dtype":"U8","shape":[0],"data_offsets":[0,0]}"#.into()
    });
    let size = bytes.len() as u64;
    let p = write(dir.path(), "empty-tensors.safetensors", &bytes);
    drop(bytes);
    let m = crate::support::run_measured(bin().arg(&p));
    assert_eq!(m.code, Some(0), "{m:?}");
    assert!(
        m.peak_rss < (64 << 20) + 8 * size,
        "peak RSS {} MiB for a {} MiB file",
        m.peak_rss >> 20,
        size >> 20
    );
    let out = String::from_utf8_lossy(&m.stdout_head);
    assert!(out.contains("1,000,000"), "{out}");
}

/// Regression: a folder's `model.safetensors.index.json` was read whole, whatever its size,
/// to find the shards it covers. A 2 GiB (sparse) index is now refused unread, with an
/// error naming it.
#[test]
fn an_oversized_index_is_refused_unread() {
    use weight_inspect::format::safetensors::MAX_INDEX_BYTES;
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("model.safetensors.index.json");
    let f = std::fs::File::create(&index).unwrap();
    f.set_len(2 << 30).unwrap(); // sparse: no blocks written
    drop(f);
    let m = crate::support::run_measured(bin().arg("--json").arg(dir.path()));
    assert_eq!(m.code, Some(2), "{m:?}");
    assert!(m.peak_rss < 64 << 20, "peak RSS {} MiB", m.peak_rss >> 20);
    let r: Json = serde_json::from_slice(&m.stdout_head).unwrap();
    assert_eq!(r["diagnostics"][0]["code"], "file-too-large");
    assert_eq!(r["path"], index.display().to_string());
    let msg = r["errors"][0].as_str().unwrap();
    assert!(msg.contains(&MAX_INDEX_BYTES.to_string()), "{msg}");
    // The library refuses it the same way, naming the file.
    let e = Model::open(&index).unwrap_err();
    assert_eq!(e.path(), index);
    let shown = e.to_string();
    assert!(
        shown.contains("model.safetensors.index.json: safetensors index of"),
        "{shown}"
    );
}

/// Regression: the table printed names from files raw, so a tensor name, a metadata string
/// or a file name could hold terminal escapes or forge report lines.
#[test]
fn table_output_escapes_names_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let evil = "w\x1b]0;pwned\x07\nverdict       valid\u{202e}";
    let bytes = GgufWriter::new()
        .arch(evil)
        .kv("general.file_type", Val::U32(0))
        .tensor(evil, 0, &[4])
        .tensor(evil, 0, &[4]) // a duplicate: an error message naming it
        .fill(Fill::Pattern)
        .build();
    let p = write(dir.path(), "m\x1b[31m\n.gguf", &bytes);
    for args in [&["--verify"][..], &[][..]] {
        for target in [&p, &dir.path().to_path_buf()] {
            let out = run(args, &[target]);
            assert_eq!(out.status.code(), Some(2));
            let text = String::from_utf8(out.stdout).unwrap();
            assert!(
                !text
                    .chars()
                    .any(|c| c.is_control() && c != '\n' || c == '\u{202e}'),
                "{text:?}"
            );
            assert!(
                !text.lines().any(|l| l.starts_with("verdict")),
                "a forged line: {text}"
            );
            assert!(text.contains("w\\x1b]0;pwned\\x07\\nverdict"), "{text}");
            assert!(text.contains("m\\x1b[31m\\n.gguf"), "{text}");
        }
    }
    // JSON keeps the exact names (serde escapes them).
    let out = run(&["--json"], &[&p]);
    assert_eq!(json_lines(&out)[0]["architecture"], evil);
}

/// Regression: a fatal error quoting a key or name put the whole of it in the report (an
/// 8 MB key, or 8 bytes of `\u{fffd}` for each byte of an invalid one); messages are now
/// cut to a bounded length.
#[test]
fn errors_quoting_huge_names_stay_short() {
    let dir = tempfile::tempdir().unwrap();
    let long_key = "k".repeat(8 << 20);
    let cases = [
        GgufWriter::new()
            .kv_raw_key(&vec![0xff; 1 << 20], Val::U8(0))
            .build(),
        GgufWriter::new()
            .kv(&long_key, Val::Raw(99, Vec::new()))
            .build(),
    ];
    for (i, bytes) in cases.iter().enumerate() {
        let p = write(dir.path(), &format!("case{i}.gguf"), bytes);
        for args in [&["--json"][..], &[][..]] {
            let m = crate::support::run_measured(bin().args(args).arg(&p));
            assert_eq!(m.code, Some(2), "case {i} {args:?}");
            assert!(
                m.stdout_len < 8 << 10,
                "case {i} {args:?}: {} bytes",
                m.stdout_len
            );
        }
    }
}

#[test]
fn help_names_the_manifest_command_and_a_file_named_manifest_is_still_inspected() {
    let out = run(&["--help"], &[]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.lines()
            .any(|l| l.trim_start().starts_with("manifest ")),
        "{help}"
    );
    // `weight-inspect manifest` is the command; `./manifest` the file.
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "manifest", &small_model().build());
    let out = bin()
        .arg("./manifest")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = bin()
        .arg("manifest")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "manifest without create|check is a usage error"
    );
}

#[test]
fn one_metadata_key_is_one_key() {
    let dir = tempfile::tempdir().unwrap();
    let one = GgufWriter::new()
        .arch("llama")
        .tensor("output_norm.weight", 0, &[64])
        .fill(Fill::Pattern)
        .build();
    let p = write(dir.path(), "one.gguf", &one);
    let out = run(&[], &[&p]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("tensors       1, metadata 1 key\n"), "{text}");
    let p = write(dir.path(), "three.gguf", &small_model().build());
    let text = String::from_utf8_lossy(&run(&[], &[&p]).stdout).into_owned();
    assert!(text.contains(", metadata 4 keys\n"), "{text}");
}

/// An invalid model is refused by `Model::open` with an error naming the file and its first
/// problem, as the reference readers refuse it; `Model::open_lax` opens the valid rest, with
/// the problems in the diagnostics. A truncated copy (safetensors and GGUF), a size that does
/// not match the shape, an overflowing shape, a split GGUF missing a shard.
#[test]
fn an_invalid_model_does_not_open_without_asking_for_lax() {
    use weight_inspect::format::model::OpenError;
    let dir = tempfile::tempdir().unwrap();
    let full = StWriter::new()
        .tensor("a", "U8", &[8], &[1; 8])
        .tensor("b", "U8", &[8], &[2; 8])
        .build();
    let gguf = small_model().build();
    let (s1, _) = split_pair();
    let cases: Vec<(&str, Vec<u8>, &str, usize)> = vec![
        (
            "truncated.safetensors",
            full[..full.len() - 3].to_vec(),
            "'b'",
            1,
        ),
        (
            "mismatch.safetensors",
            StWriter::new()
                .tensor("ok", "U8", &[2], &[0; 2])
                .tensor("w", "F32", &[2, 3], &[0; 20])
                .build(),
            "'w'",
            1,
        ),
        (
            "overflow.safetensors",
            StWriter::new()
                .tensor_at("big", "F64", &[1 << 62], 0, 0)
                .build(),
            "'big'",
            0,
        ),
        // GGUF lists every tensor its header describes; the one cut off cannot be viewed.
        (
            "truncated.gguf",
            gguf[..gguf.len() - 100].to_vec(),
            "output_norm.weight",
            3,
        ),
        ("m-00001-of-00002.gguf", s1, "split.count = 2", 2),
    ];
    for (name, bytes, named, valid_tensors) in cases {
        let p = write(dir.path(), name, &bytes);
        let e = Model::open(&p).unwrap_err();
        let shown = e.to_string();
        assert!(matches!(e, OpenError::Invalid { .. }), "{name}: {shown}");
        assert_eq!(e.path(), p, "{name}");
        assert!(
            shown.starts_with(&format!("{}: not a valid ", p.display())) && shown.contains(named),
            "{name}: {shown}"
        );
        let lax = Model::open_lax(&p).unwrap();
        assert_eq!(lax.tensors().count(), valid_tensors, "{name}");
        let errors = lax
            .files()
            .iter()
            .flat_map(|f| f.header().diagnostics())
            .chain(lax.cross_file_diagnostics())
            .filter(|d| d.severity == weight_inspect::format::Severity::Error)
            .count();
        assert!(errors > 0, "{name}");
    }
    // A valid model opens.
    let p = write(dir.path(), "whole.safetensors", &full);
    assert_eq!(Model::open(&p).unwrap().tensors().count(), 2);
}

/// The tensor rows of a table: each row's words after the header line `tensor  dtype  …`.
fn tensor_rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .skip_while(|l| !l.trim_start().starts_with("tensor "))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

/// Issue 55: without `--json` no tensor was named. The table now lists each one after the
/// summary: name, dtype, shape in the file's order, size; its SHA-256 cut short with
/// `--verify`; `--no-tensors` leaves the list out.
#[test]
fn the_table_lists_every_tensor_with_its_dtype_shape_and_size() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "m.gguf", &small_model().build());
    let out = run(&[], &[&p]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    // The summary first, its verdict included, then the tensors in the file's order.
    let verdict = text.find("  verdict ").expect("a verdict");
    let header = text.find("\n  tensor ").expect("a tensor table");
    assert!(verdict < header, "{text}");
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        tensor_rows(&text),
        vec![
            words(&["token_embd.weight", "Q8_0", "[64,", "4]", "272", "B"]),
            words(&["blk.0.attn_q.weight", "F32", "[16,", "16]", "1.0", "KiB"]),
            words(&["output_norm.weight", "F16", "[64]", "128", "B"]),
        ],
        "{text}"
    );
    assert!(
        text.lines().any(|l| l
            .split_whitespace()
            .eq(["tensor", "dtype", "shape", "size"])),
        "{text}"
    );

    // --verify: each row ends with the first 16 digits of the tensor's SHA-256.
    let json = json_lines(&run(&["--json", "--verify"], &[&p]));
    let text = String::from_utf8(run(&["--verify"], &[&p]).stdout).unwrap();
    let rows = tensor_rows(&text);
    assert_eq!(rows.len(), 3, "{text}");
    for (row, t) in rows.iter().zip(json[0]["tensors"].as_array().unwrap()) {
        assert_eq!(row[0], t["name"].as_str().unwrap());
        assert_eq!(
            row.last().unwrap(),
            &t["sha256"].as_str().unwrap()[..16],
            "{text}"
        );
    }
    assert!(text.contains("3 tensors hashed"), "{text}");

    // --no-tensors: the summary alone (with a checksum sample under --verify).
    let text = String::from_utf8(run(&["--no-tensors", "--verify"], &[&p]).stdout).unwrap();
    assert!(!text.contains("token_embd.weight  Q8_0"), "{text}");
    assert!(tensor_rows(&text).is_empty(), "{text}");
    assert!(text.contains("  verdict       valid"), "{text}");
    assert!(text.contains("3 tensors hashed (SHA-256)\n"), "{text}");
}

/// A tensor's name from a file is printed escaped on its row, and the tensor a diagnostic
/// names (a duplicate here) is marked `error`; a sharded model's rows name their shard.
#[test]
fn tensor_rows_escape_names_and_mark_the_tensors_in_error() {
    let dir = tempfile::tempdir().unwrap();
    let evil = "w\x1b]0;pwned\x07\n  forged  F32  [4]  16 B";
    let bytes = GgufWriter::new()
        .arch("llama")
        .tensor("fine.weight", 0, &[4])
        .tensor(evil, 0, &[4])
        .tensor(evil, 0, &[4]) // a duplicate: an error naming it
        .fill(Fill::Pattern)
        .build();
    let p = write(dir.path(), "m.gguf", &bytes);
    let out = run(&[], &[&p]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "{text:?}"
    );
    assert!(!text.lines().any(|l| l.starts_with("  forged")), "{text}");
    let rows = tensor_rows(&text);
    assert_eq!(rows.len(), 3, "{text}");
    assert_eq!(rows[0], ["fine.weight", "F32", "[4]", "16", "B"], "{text}");
    for row in &rows[1..] {
        assert_eq!(row[0], "w\\x1b]0;pwned\\x07\\n", "{text}");
        assert_eq!(row.last().unwrap(), "error", "{text}");
    }
    assert!(
        text.lines().any(|l| l.trim_end().ends_with("  check")),
        "{text}"
    );

    // A split GGUF: a `file` column names each tensor's shard.
    let (a, b) = split_pair();
    let first = write(dir.path(), "s-00001-of-00002.gguf", &a);
    write(dir.path(), "s-00002-of-00002.gguf", &b);
    let text = String::from_utf8(run(&[], &[&first]).stdout).unwrap();
    let rows = tensor_rows(&text);
    assert!(!rows.is_empty(), "{text}");
    assert!(
        rows.iter().all(|r| r
            .iter()
            .any(|w| w.starts_with("s-0000") && w.ends_with(".gguf"))),
        "{text}"
    );
}

/// Issue 55: `weight-inspect inspect FILE` read `inspect` as a path. It is the default
/// command, after options too; a file named `inspect` is `./inspect`, and one in the folder is
/// pointed out when the command is used.
#[test]
fn inspect_is_the_default_command() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "m.gguf", &small_model().build());
    let plain = run(&[], &[&p]);
    assert_eq!(plain.status.code(), Some(0));
    for args in [
        &["inspect"][..],
        &["-v", "inspect"][..],
        &["--no-tensors", "inspect"][..],
        &["--revision", "main", "inspect"][..],
    ] {
        let out = run(args, &[&p]);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        if args.contains(&"--no-tensors") {
            assert!(tensor_rows(&String::from_utf8_lossy(&out.stdout)).is_empty());
        } else {
            assert_eq!(out.stdout, plain.stdout, "{args:?}");
        }
    }
    let out = run(&["--json", "inspect"], &[&p]);
    assert_eq!(json_lines(&out)[0]["path"], p.display().to_string());
    // A path after another is a path, whatever its name.
    let out = run(&["--json"], &[&p, Path::new("inspect")]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(json_lines(&out)[1]["path"], "inspect");

    // In a folder holding a file named `inspect`, the word is still the command; the file is
    // `./inspect`.
    write(dir.path(), "inspect", &small_model().build());
    let out = bin()
        .args(["inspect", "m.gguf"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("m.gguf\n"), "{text}");
    assert!(!text.contains("\ninspect\n"), "{text}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("./inspect"), "{err}");
    let out = bin()
        .args(["inspect", "./inspect"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("./inspect\n"));
    assert!(out.stderr.is_empty(), "{out:?}");

    // `inspect` alone is a usage error; its help names the paths it takes.
    assert_eq!(run(&["inspect"], &[]).status.code(), Some(1));
    let help = run(&["--help"], &[]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.lines().any(|l| l.trim_start().starts_with("inspect ")),
        "{help}"
    );
    assert!(help.contains("weight-inspect inspect PATH"), "{help}");
    assert!(help.contains("--no-tensors"), "{help}");
}
