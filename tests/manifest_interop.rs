//! Manifests of other tools: `llama-gguf-hash` lines and OpenSSF model-signing bundles and
//! statements, read (detected from their content), checked against files, and written.

use std::fs;
use std::path::Path;

use base64::Engine as _;
use sha2::{Digest as _, Sha256};
use weight_inspect::manifest::{self, Document, FileVerdict};

use crate::support::manifest::{poke, run, signing_model_dir as model_dir, stderr, stdout, SHARD};

/// Where the tensor `name` of the GGUF at `path` starts.
fn tensor_offset(path: &Path, name: &str) -> u64 {
    let bytes = fs::read(path).unwrap();
    let h = weight_inspect::format::parse(&bytes).unwrap();
    h.tensors().iter().find(|t| t.name == name).unwrap().offset
}

/// `create --format gguf-hash` writes llama-gguf-hash's sha256 lines (every tensor in header
/// order, then the model); `check` reads them back (detected from the content), and names the
/// one tensor whose bytes changed and the model line; the lines of other hash kinds are said not
/// to be checked.
#[test]
fn gguf_hash_lines_round_trip_and_name_a_changed_tensor() {
    let (d, dir) = model_dir();
    let lines = d.path().join("model.hash");
    let o = run(
        &["manifest", "create", "--format", "gguf-hash", "-o"],
        &[&lines, &dir],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = fs::read_to_string(&lines).unwrap();
    let bytes = fs::read(dir.join("m.gguf")).unwrap();
    let at = tensor_offset(&dir.join("m.gguf"), "token_embd.weight") as usize;
    let want = hex::encode(Sha256::digest(&bytes[at..at + 256 * 256 * 4]));
    assert_eq!(
        text.lines().next().unwrap(),
        format!("sha256    {want}  m.gguf:token_embd.weight")
    );
    assert_eq!(text.lines().count(), 4, "{text}");
    assert!(text.lines().last().unwrap().ends_with("  m.gguf"), "{text}");
    let doc = Document::read(&lines).unwrap();
    assert_eq!(doc.kind(), "llama-gguf-hash lines");
    let o = run(&["manifest", "check"], &[&lines, &dir]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("all 1 file(s) match"), "{}", stdout(&o));

    // Lines of other kinds are read, and said not to be checked.
    let mut more = text.clone();
    more.push_str("xxh64     f66e9cd66a4396a0  m.gguf:token_embd.weight\n");
    more.push_str("uuid      ef001206-dadc-5f6d-a15f-3359e577d4e5  m.gguf\n");
    fs::write(&lines, &more).unwrap();
    let o = run(&["manifest", "check"], &[&lines, &dir]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        stdout(&o).contains("note: 1 uuid, 1 xxh64 line(s) were not checked"),
        "{}",
        stdout(&o)
    );

    let q = tensor_offset(&dir.join("m.gguf"), "blk.0.attn_q.weight");
    poke(&dir.join("m.gguf"), q + 10);
    let o = run(&["manifest", "check"], &[&lines, &dir]);
    assert_eq!(o.status.code(), Some(2));
    let out = stdout(&o);
    assert!(
        out.contains("m.gguf: tensor 'blk.0.attn_q.weight' differs"),
        "{out}"
    );
    assert_eq!(out.matches("tensor '").count(), 1, "{out}");
    assert!(
        out.contains("tensor data (the model line) differs"),
        "{out}"
    );
    let report = manifest::check_document(&Document::read(&lines).unwrap(), &dir);
    match &report.files[0].verdict {
        FileVerdict::Differs { tensors, .. } => assert_eq!(tensors, &["blk.0.attn_q.weight"]),
        v => panic!("{v:?}"),
    }
    // A tensor the file does not hold.
    fs::write(&lines, format!("sha256    {want}  m.gguf:nope\n")).unwrap();
    let o = run(&["manifest", "check"], &[&lines, &dir]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stdout(&o).contains("tensor 'nope' is not in the file's header"));
}

/// `create --format in-toto` writes an unsigned in-toto statement (files, and shards with
/// --shard-size); `check` reads it back; in a sharded statement the shard boundaries are the
/// chunks, so a changed byte names exactly its shard; the output says that no signature was
/// verified, in words and in JSON.
#[test]
fn in_toto_statements_round_trip_and_name_the_damaged_shard() {
    let (d, dir) = model_dir();
    let files = d.path().join("files.json");
    let shards = d.path().join("shards.json");
    let o = run(
        &["manifest", "create", "--format", "in-toto", "-o"],
        &[&files, &dir],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(
        &[
            "manifest",
            "create",
            "--format",
            "in-toto",
            "--shard-size",
            "64K",
            "-o",
        ],
        &[&shards, &dir],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&fs::read(&shards).unwrap()).unwrap();
    assert_eq!(v["subject"][0]["name"], "model");
    assert_eq!(v["predicate"]["serialization"]["method"], "shards");
    assert_eq!(v["predicate"]["serialization"]["shard_size"], SHARD);
    let names: Vec<&str> = v["predicate"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names[0], format!("m.gguf:0:{SHARD}"));
    assert!(names.contains(&"sub/w.bin:131072:150000"), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("empty")), "{names:?}");
    let doc = Document::read(&shards).unwrap();
    assert_eq!(doc.kind(), "OpenSSF model-signing statement");
    let w = doc.expectation("sub/w.bin").unwrap();
    assert_eq!(w.chunks.as_ref().unwrap().chunk_size, SHARD);
    assert_eq!(w.size, Some(150_000));

    for m in [&files, &shards] {
        let o = run(&["manifest", "check"], &[m, &dir]);
        assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
        assert!(stdout(&o).contains("only the digests were checked"));
    }
    poke(&dir.join("sub/w.bin"), 70_000);
    let o = run(&["manifest", "check"], &[&shards, &dir]);
    assert_eq!(o.status.code(), Some(2));
    let out = stdout(&o);
    assert!(
        out.contains("sub/w.bin: shard 1 (bytes 65536-131071) differs"),
        "{out}"
    );
    assert_eq!(out.matches("differs").count(), 1, "{out}");
    let o = run(&["manifest", "check", "--json"], &[&files, &dir]);
    assert_eq!(o.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["signature_verified"], false);
    assert!(v["notes"][0].as_str().unwrap().contains("no signature"));
    let w = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "sub/w.bin")
        .unwrap();
    assert_eq!(w["digests"][0], "file_sha256");
}

fn bundle_of(statement: &[u8]) -> Vec<u8> {
    let payload = base64::engine::general_purpose::STANDARD.encode(statement);
    serde_json::to_vec_pretty(&serde_json::json!({
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {"publicKey": {"hint": "00"}, "tlogEntries": []},
        "dsseEnvelope": {"payload": payload, "payloadType": "application/vnd.in-toto+json",
                          "signatures": [{"sig": "MEUCIQ==", "keyid": ""}]}
    }))
    .unwrap()
}

/// The format is found from the content, whatever the file is called; a bundle's statement
/// with the float `shard_size` protobuf writes is read; the model folder is found beside a
/// bundle as `model_signing` leaves it.
#[test]
fn formats_are_detected_from_their_content() {
    let (d, dir) = model_dir();
    let native = manifest::create(
        std::slice::from_ref(&dir),
        &manifest::CreateOptions::default(),
    )
    .unwrap()
    .to_json();
    let lines = manifest::create_gguf_hash(std::slice::from_ref(&dir)).unwrap();
    let statement = manifest::create_in_toto(std::slice::from_ref(&dir), Some(SHARD)).unwrap();
    // protobuf's JSON writes numbers as floats
    let floated = statement.replace(
        &format!("\"shard_size\": {SHARD}"),
        &format!("\"shard_size\": {SHARD}.0"),
    );
    assert_ne!(floated, statement);
    let bundle = bundle_of(floated.as_bytes());
    let cases: [(&[u8], &str); 4] = [
        (native.as_bytes(), "weight-inspect manifest"),
        (lines.as_bytes(), "llama-gguf-hash lines"),
        (statement.as_bytes(), "OpenSSF model-signing statement"),
        (&bundle, "OpenSSF model-signing bundle"),
    ];
    for (bytes, kind) in cases {
        let doc = Document::parse(bytes).unwrap();
        assert_eq!(doc.kind(), kind);
        assert!(manifest::check_document(&doc, &dir).all_match(), "{kind}");
    }
    // model_signing writes model.sig beside the folder it signed: found without a path.
    let sig = d.path().join("model.sig");
    fs::write(&sig, &bundle).unwrap();
    let o = run(&["manifest", "check"], &[&sig]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("Sigstore signature of this bundle was NOT verified"),
        "{}",
        stdout(&o)
    );
}

/// Hostile documents are refused with exit 1 and a reason naming the manifest: huge, deeply
/// nested, bad base64, unsafe paths, gapped or overlapping shards, digests of another kind.
#[test]
fn hostile_interop_documents_are_refused_with_exit_1() {
    let (d, dir) = model_dir();
    let statement = manifest::create_in_toto(std::slice::from_ref(&dir), Some(SHARD)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&statement).unwrap();
    // A statement with its resources changed, the subject's digest made consistent again.
    let with = |f: &dyn Fn(&mut Vec<serde_json::Value>)| -> Vec<u8> {
        let mut v = v.clone();
        let mut rs = v["predicate"]["resources"].as_array().unwrap().clone();
        f(&mut rs);
        let mut h = Sha256::new();
        for r in &rs {
            h.update(hex::decode(r["digest"].as_str().unwrap()).unwrap());
        }
        v["subject"][0]["digest"]["sha256"] = hex::encode(h.finalize()).into();
        v["predicate"]["resources"] = rs.into();
        serde_json::to_vec(&v).unwrap()
    };
    let rename = |i: usize, name: &'static str| {
        move |rs: &mut Vec<serde_json::Value>| rs[i]["name"] = name.into()
    };
    let gguf_shards = |rs: &Vec<serde_json::Value>| {
        rs.iter()
            .filter(|r| r["name"].as_str().unwrap().starts_with("m.gguf:"))
            .count()
    };
    let n = gguf_shards(&v["predicate"]["resources"].as_array().unwrap().clone());
    assert!(n >= 3);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (with(&rename(0, "../m.gguf:0:65536")), "'..'"),
        (with(&rename(0, "/m.gguf:0:65536")), "absolute"),
        (
            with(&|rs| {
                rs.remove(1);
            }),
            "a gap",
        ),
        (
            with(&|rs| {
                let dup = rs[1].clone();
                rs.push(dup);
            }),
            "overlaps",
        ),
        (
            with(&|rs| rs[0]["algorithm"] = "blake2b-sharded-65536".into()),
            "algorithm 'blake2b-sharded-65536' in a statement of sha256 digests",
        ),
        (bundle_of(b"not json"), "malformed"),
        (
            {
                let mut b: serde_json::Value =
                    serde_json::from_slice(&bundle_of(statement.as_bytes())).unwrap();
                b["dsseEnvelope"]["payload"] = "%%%%".into();
                serde_json::to_vec(&b).unwrap()
            },
            "not base64",
        ),
        // Deep nesting where a value is read, and where one is skipped (serde_json skips
        // without recursing): errors either way, never a stack overflow.
        (
            format!(
                "{{\"dsseEnvelope\": {}{}}}",
                "[".repeat(50_000),
                "]".repeat(50_000)
            )
            .into_bytes(),
            "malformed Sigstore bundle",
        ),
        (
            format!(
                "{{\"dsseEnvelope\": {{\"payload\": \"\", \"payloadType\": \"\", \"x\": {}{}}}}}",
                "[".repeat(50_000),
                "]".repeat(50_000)
            )
            .into_bytes(),
            "not an in-toto statement",
        ),
        (b"sha256 0 m.gguf:t\n".to_vec(), "line 1"),
        (b"{\"neither\": 1}".to_vec(), "none of the manifests"),
    ];
    for (bytes, want) in cases {
        let p = d.path().join("bad.sig");
        fs::write(&p, &bytes).unwrap();
        let o = run(&["manifest", "check"], &[&p, &dir]);
        assert_eq!(o.status.code(), Some(1), "{want}: {}", stdout(&o));
        let e = stderr(&o);
        assert!(e.contains(want) && e.contains("bad.sig"), "{want}: {e}");
    }
    let huge = d.path().join("huge.sig");
    fs::File::create(&huge).unwrap().set_len(1 << 40).unwrap();
    let o = run(&["manifest", "check"], &[&huge, &dir]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("larger than"));
    // Too many resources: refused as soon as the bound is passed (a smaller bound shown here
    // with files: MAX_FILES + 1 subjects of the v0.1 predicate).
    let many: Vec<serde_json::Value> = (0..=manifest::MAX_FILES)
        .map(|i| serde_json::json!({"name": format!("f{i}"), "digest": {"sha256": "00"}}))
        .collect();
    let doc = serde_json::json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": many,
        "predicateType": "https://model_signing/Digests/v0.1",
    });
    let e = Document::parse(&serde_json::to_vec(&doc).unwrap()).unwrap_err();
    assert!(e.to_string().contains("more than 100000 elements"), "{e}");
}

/// What the `--format` options refuse.
#[test]
fn create_refuses_what_a_format_cannot_say() {
    let (d, dir) = model_dir();
    let o = run(
        &["manifest", "create", "--format", "gguf-hash"],
        &[&dir.join("sub/w.bin")],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no GGUF file"), "{}", stderr(&o));
    let o = run(&["manifest", "create", "--shard-size", "64K"], &[&dir]);
    assert_eq!(o.status.code(), Some(1));
    let o = run(
        &[
            "manifest",
            "create",
            "--format",
            "in-toto",
            "--shard-size",
            "1K",
        ],
        &[&dir],
    );
    assert_eq!(o.status.code(), Some(1));
    // One file alone is named '.', the subject carrying its name, as model_signing names it.
    let one = manifest::create_in_toto(&[dir.join("m.gguf")], None).unwrap();
    let v: serde_json::Value = serde_json::from_str(&one).unwrap();
    assert_eq!(v["predicate"]["resources"][0]["name"], ".");
    assert_eq!(v["subject"][0]["name"], "m.gguf");
    let p = d.path().join("one.json");
    fs::write(&p, one).unwrap();
    let o = run(&["manifest", "check"], &[&p, &dir.join("m.gguf")]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
}
