//! Manifests of other tools made by those tools: OpenSSF model-signing's bundles and gguf-py's
//! `gguf_hash.py` lines; and the demo's sidecars checked by an independent writer.

use std::fs;
use std::process::Command;

use weight_inspect::manifest::{self, Document};

use crate::support::manifest::{poke, run, signing_model_dir as model_dir, stderr, stdout, SHARD};

/// The real tools: `model_signing` (OpenSSF) signs the folder, files and shards; this program
/// checks the bundles and names a damaged shard; `model_signing` reads this program's statements
/// as the same manifest it computes itself; gguf-py's `gguf_hash.py` lines check.
pub fn real_model_signing_bundles_and_gguf_py_lines() {
    let python = crate::support::required_env("WI_PYTHON");
    let (d, dir) = model_dir();
    let script = r#"
import json, sys, pathlib
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from model_signing import signing, hashing
from model_signing._signing.signing import dsse_payload_to_manifest
model, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
key = ec.generate_private_key(ec.SECP256R1())
(out / "k.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
    serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
for name, hc in [("files.sig", hashing.Config().use_file_serialization()),
                 ("shards.sig", hashing.Config().use_shard_serialization(shard_size=65536))]:
    signing.Config().use_elliptic_key_signer(private_key=out / "k.pem") \
        .set_hashing_config(hc).sign(model, out / name)
for name, hc in [("ours-files.json", hashing.Config().use_file_serialization()),
                 ("ours-shards.json", hashing.Config().use_shard_serialization(shard_size=65536))]:
    theirs = hc.set_ignored_paths(paths=[".cache"]).hash(model)
    ours = dsse_payload_to_manifest(json.loads((out / name).read_text()))
    assert ours == theirs, name
"#;
    for (name, shard) in [("ours-files.json", None), ("ours-shards.json", Some(SHARD))] {
        let s = manifest::create_in_toto(std::slice::from_ref(&dir), shard).unwrap();
        fs::write(d.path().join(name), s).unwrap();
    }
    let o = Command::new(&python)
        .args(["-c", script])
        .arg(&dir)
        .arg(d.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    for sig in ["files.sig", "shards.sig"] {
        let o = run(&["manifest", "check"], &[&d.path().join(sig), &dir]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{sig}: {}{}",
            stdout(&o),
            stderr(&o)
        );
        assert!(stdout(&o).contains("NOT verified"));
    }
    let doc = Document::read(&d.path().join("shards.sig")).unwrap();
    assert_eq!(
        doc.expectation("sub/w.bin")
            .unwrap()
            .chunks
            .unwrap()
            .chunk_size,
        SHARD
    );

    // gguf-py's gguf_hash.py, run in the folder (it names the file as given).
    let o = Command::new(&python)
        .args(["-m", "gguf.scripts.gguf_hash", "m.gguf"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = d.path().join("gguf-py.hash");
    fs::write(&lines, &o.stdout).unwrap();
    let o = run(&["manifest", "check"], &[&lines, &dir]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("sha1"), "{}", stdout(&o));

    poke(&dir.join("sub/w.bin"), 140_000);
    let o = run(
        &["manifest", "check"],
        &[&d.path().join("shards.sig"), &dir],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stdout(&o).contains("sub/w.bin: shard 2 (bytes 131072-149999) differs"),
        "{}",
        stdout(&o)
    );
}

/// The demo's sidecar manifests are written by the `manifest::create` that checks them, so a bug
/// shared by the writer and the checker would pass every test that uses them. Here an
/// independent writer checks them: Python's `hashlib` for the file and each chunk, and gguf-py's
/// own reader for where each tensor lies and how long it is.
pub fn the_demo_sidecars_agree_with_an_independent_writer() {
    let python = crate::support::required_env("WI_PYTHON");
    let repo = crate::support::cli::demo_root().join(crate::support::cli::REPO);
    let script = r#"
import hashlib, json, pathlib, sys
import gguf
folder = pathlib.Path(sys.argv[1])
checked = 0
for sidecar in sorted(folder.glob("*.wi-manifest.json")):
    m = json.loads(sidecar.read_text())
    assert m["format"] == "weight-inspect/manifest", sidecar
    for f in m["files"]:
        data = (folder / f["path"]).read_bytes()
        assert f["size"] == len(data), f["path"]
        assert f["sha256"] == hashlib.sha256(data).hexdigest(), f["path"]
        cs = f["chunk_size"]
        chunks = [hashlib.sha256(data[i:i + cs]).hexdigest() for i in range(0, len(data), cs)]
        assert f["chunks"] == chunks, f["path"]
        tensors = {t.name: t for t in gguf.GGUFReader(folder / f["path"]).tensors}
        assert len(tensors) == len(f["tensors"]), f["path"]
        for t in f["tensors"]:
            theirs = tensors[t["name"]]
            assert t["offset"] == int(theirs.data_offset), t["name"]
            assert t["length"] == int(theirs.n_bytes), t["name"]
            want = hashlib.sha256(data[t["offset"]:t["offset"] + t["length"]]).hexdigest()
            assert t["sha256"] == want, t["name"]
        checked += 1
print("checked", checked)
"#;
    let o = std::process::Command::new(&python)
        .args(["-c", script])
        .arg(&repo)
        .output()
        .expect("run python");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let sidecars = std::fs::read_dir(&repo)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .ends_with(".wi-manifest.json")
        })
        .count();
    assert!(sidecars >= 4, "{sidecars} sidecars");
    assert_eq!(out.trim(), format!("checked {sidecars}"));
}
