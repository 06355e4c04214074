//! Manifests: `weight-inspect manifest create` and `check` on files written at test time, and
//! the library behind them.

use std::fs;
use std::os::unix::fs::FileExt;

use crate::support::manifest::{model_dir, run, stdout, CHUNK};
use crate::support::sha256_hex;
use weight_inspect::manifest::{self, CreateOptions, FileVerdict, Manifest};

/// A manifest made from a folder names every file relative to it, with the file's and every
/// chunk's SHA-256 and every tensor's; and `check` finds them all matching.
#[test]
fn create_describes_every_file_chunk_and_tensor() {
    let (_d, dir) = model_dir();
    let m = manifest::create(
        std::slice::from_ref(&dir),
        &CreateOptions::default().with_chunk_size(CHUNK),
    )
    .unwrap();
    let paths: Vec<&str> = m.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "README.md",
            "m.gguf",
            "st/model-00001-of-00002.safetensors",
            "st/model-00002-of-00002.safetensors",
            "st/model.safetensors.index.json"
        ]
    );
    let g = &m.files[1];
    let bytes = fs::read(dir.join("m.gguf")).unwrap();
    assert_eq!(g.size, bytes.len() as u64);
    assert_eq!(g.sha256.to_string(), sha256_hex(&bytes));
    assert_eq!(g.chunks.len() as u64, (bytes.len() as u64).div_ceil(CHUNK));
    for (i, c) in g.chunks.iter().enumerate() {
        let r = g.chunk_range(i);
        assert_eq!(
            c.to_string(),
            sha256_hex(&bytes[r.start as usize..r.end as usize])
        );
    }
    let model = g.model.as_ref().unwrap();
    assert_eq!((model.format.as_str(), model.tensor_count), ("gguf", 3));
    assert_eq!(model.total_params, 256 * 256 + 128 * 64 + 64 * 64);
    assert!(g.tensors.windows(2).all(|w| w[0].offset < w[1].offset));
    for t in &g.tensors {
        let slice = &bytes[t.offset as usize..(t.offset + t.length) as usize];
        assert_eq!(t.sha256.to_string(), sha256_hex(slice), "{}", t.name);
    }
    assert_eq!(m.files[2].tensors[0].name, "w0");
    assert!(m.files[0].model.is_none() && m.files[0].tensors.is_empty());
    // The document reads back as it was, in the same text.
    let text = m.to_json();
    assert_eq!(Manifest::parse(text.as_bytes()).unwrap().to_json(), text);
    assert!(manifest::check(&m, &dir).all_match());
}

/// Regression-style damage: one byte changed on disk names exactly its chunk and its tensor; a
/// truncated file names the chunks past its end; a missing file says so. Exit 2; exit 0 when all
/// match.
#[test]
fn check_names_exactly_the_damaged_chunks_and_tensors() {
    let (d, dir) = model_dir();
    let man = d.path().join("model.manifest.json");
    let o = run(
        &["manifest", "create", "--chunk-size", "64K", "-o"],
        &[&man, &dir],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = run(&["manifest", "check"], &[&man, &dir]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).contains("all 5 file(s) match"), "{}", stdout(&o));

    let m = Manifest::read(&man).unwrap();
    let g = m.files.iter().find(|f| f.path == "m.gguf").unwrap();
    let target = g
        .tensors
        .iter()
        .find(|t| t.name == "blk.0.attn_q.weight")
        .unwrap();
    let at = target.offset + 100;
    let f = fs::OpenOptions::new()
        .write(true)
        .open(dir.join("m.gguf"))
        .unwrap();
    f.write_all_at(b"\xff\x00\xff", at).unwrap();
    let shard = dir.join("st/model-00002-of-00002.safetensors");
    let len = fs::metadata(&shard).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    fs::remove_file(dir.join("README.md")).unwrap();

    let o = run(&["manifest", "check"], &[&man, &dir]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    let out = stdout(&o);
    let chunk = at / CHUNK;
    let (start, end) = (chunk * CHUNK, ((chunk + 1) * CHUNK).min(g.size));
    assert!(
        out.contains(&format!(
            "m.gguf: chunk {chunk} (bytes {start}-{}) differs",
            end - 1
        )),
        "{out}"
    );
    assert_eq!(out.matches("m.gguf: chunk").count(), 1, "{out}");
    assert!(
        out.contains("m.gguf: tensor 'blk.0.attn_q.weight' differs"),
        "{out}"
    );
    assert_eq!(out.matches("m.gguf: tensor").count(), 1, "{out}");
    assert!(out.contains("README.md: missing"), "{out}");
    assert!(
        out.contains(&format!(
            "model-00002-of-00002.safetensors: {} bytes instead of {len}",
            len - 10
        )),
        "{out}"
    );
    assert!(out.contains("3 of 5 file(s) differ"), "{out}");

    // JSON verdicts, and a subset of the files.
    let o = run(
        &["manifest", "check", "--json"],
        &[&man, &dir.join("m.gguf")],
    );
    assert_eq!(o.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["files"].as_array().unwrap().len(), 1);
    assert_eq!(v["files"][0]["verdict"], "differs");
    assert_eq!(v["files"][0]["chunks"][0]["index"], chunk);
    let report = manifest::check(&m, &dir);
    let v = report.files.iter().find(|f| f.path == "README.md").unwrap();
    assert_eq!(v.verdict, FileVerdict::Missing);
}

/// A manifest that cannot be trusted — another format, another version, an unsafe path, too
/// large — is a clear error naming the file (exit 1), never a check.
#[test]
fn untrusted_manifests_are_refused_with_exit_1() {
    let (d, dir) = model_dir();
    let m = manifest::create(std::slice::from_ref(&dir), &CreateOptions::default()).unwrap();
    let mut v = serde_json::to_value(&m).unwrap();
    let cases: Vec<(serde_json::Value, &str)> = vec![
        (
            {
                let mut x = v.clone();
                x["version"] = 9.into();
                x
            },
            "manifest version 9",
        ),
        (
            {
                let mut x = v.clone();
                x["files"][0]["path"] = "../../etc/passwd".into();
                x
            },
            "'..'",
        ),
        (
            {
                let mut x = v.clone();
                x["format"] = "other".into();
                x
            },
            "not a weight-inspect manifest",
        ),
    ];
    for (doc, want) in cases {
        let p = d.path().join("bad.json");
        fs::write(&p, serde_json::to_vec(&doc).unwrap()).unwrap();
        let o = run(&["manifest", "check"], &[&p, &dir]);
        assert_eq!(o.status.code(), Some(1), "{want}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(want) && e.contains("bad.json"), "{want}: {e}");
    }
    let huge = d.path().join("huge.json");
    fs::File::create(&huge).unwrap().set_len(1 << 40).unwrap();
    let o = run(&["manifest", "check"], &[&huge, &dir]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("larger than"));
    v["files"] = serde_json::json!([]);
    assert!(Manifest::parse(&serde_json::to_vec(&v).unwrap()).is_ok());
}

/// Files given by name: a split GGUF's first part brings its other parts, a safetensors index
/// its shards; and files from a Hugging Face cache snapshot record where they came from.
#[test]
fn files_bring_their_parts_and_cache_snapshots_their_source() {
    let (_d, dir) = model_dir();
    let m = manifest::create(
        &[dir.join("st/model.safetensors.index.json")],
        &CreateOptions::default(),
    )
    .unwrap();
    assert_eq!(m.files.len(), 3);
    assert!(m.source.is_none());
    let commit = "c".repeat(40);
    let snap = dir.join(format!("models--org--name/snapshots/{commit}"));
    fs::create_dir_all(&snap).unwrap();
    fs::copy(dir.join("m.gguf"), snap.join("m.gguf")).unwrap();
    let m = manifest::create(&[snap], &CreateOptions::default()).unwrap();
    let s = m.source.unwrap();
    assert_eq!(
        (s.repo.as_str(), s.commit.as_str()),
        ("org/name", commit.as_str())
    );
}
