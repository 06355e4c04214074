//! Verified loading (`weight_inspect::load`): every kind of reference, a flipped byte, a file
//! truncated while it is read, a manifest of another file, no reference at all.

use std::path::{Path, PathBuf};

use testkit::safetensors::StWriter;
use weight_inspect::load::{LoadError, LoadOptions, ReferenceSource, VerifiedFile, Verify};
use weight_inspect::manifest::{self, CreateOptions, Sha256Hex};

/// A safetensors file of four tensors, one large enough to span several read blocks.
fn model(dir: &Path) -> PathBuf {
    let p = dir.join("model.safetensors");
    let bytes = StWriter::new()
        .zeros("a.weight", "F32", &[16, 16])
        .zeros("b.big", "BF16", &[3, 3 << 20])
        .zeros("c.bias", "F16", &[7])
        .zeros("d.empty", "F32", &[0, 4])
        .metadata("format", "pt")
        .build();
    std::fs::write(&p, bytes).unwrap();
    p
}

/// A model file of other bytes than [`model`]'s.
fn fresh_copy(dir: &Path) -> PathBuf {
    let p = dir.join("other-model.safetensors");
    std::fs::write(&p, StWriter::new().zeros("x", "F32", &[5]).build()).unwrap();
    p
}

/// Every tensor read, as the loaders do: the bytes of each, or the error.
fn load_all(f: &VerifiedFile) -> Result<Vec<Vec<u8>>, LoadError> {
    let mut out: Vec<Vec<u8>> = f
        .tensors()
        .iter()
        .map(|t| vec![0u8; t.n_bytes as usize])
        .collect();
    f.read_all(out.iter_mut().map(|v| &mut v[..]).collect())?;
    Ok(out)
}

fn load_one(f: &VerifiedFile, name: &str) -> Result<Vec<u8>, LoadError> {
    let (i, t) = f
        .tensors()
        .iter()
        .enumerate()
        .find(|(_, t)| t.name == name)
        .unwrap();
    let mut v = vec![0u8; t.n_bytes as usize];
    f.read_into(vec![(i, &mut v[..])])?;
    Ok(v)
}

/// The bytes of each tensor, from the file itself.
fn expected(path: &Path, f: &VerifiedFile) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(path).unwrap();
    f.tensors()
        .iter()
        .map(|t| bytes[t.offset as usize..(t.offset + t.n_bytes) as usize].to_vec())
        .collect()
}

/// Flips one byte of tensor `name` in the file.
fn flip(path: &Path, name: &str) {
    let f = VerifiedFile::open(
        path,
        &LoadOptions {
            verify: Verify::Off,
            ..LoadOptions::default()
        },
    )
    .unwrap();
    let t = f.tensors().iter().find(|t| t.name == name).unwrap();
    let mut bytes = std::fs::read(path).unwrap();
    bytes[(t.offset + t.n_bytes / 2) as usize] ^= 0x40;
    std::fs::write(path, bytes).unwrap();
}

fn write_manifest(path: &Path, to: &Path, edit: impl FnOnce(&mut manifest::Manifest)) {
    let mut m = manifest::create(
        &[path.to_path_buf()],
        &CreateOptions::default().with_chunk_size(64 << 10),
    )
    .unwrap();
    edit(&mut m);
    std::fs::write(to, m.to_json()).unwrap();
}

fn sha256_of(path: &Path) -> Sha256Hex {
    use sha2::Digest as _;
    Sha256Hex(sha2::Sha256::digest(std::fs::read(path).unwrap()).into())
}

fn mismatch(e: &LoadError) -> Vec<String> {
    match e {
        LoadError::Mismatch(m) => m.tensors.clone(),
        other => panic!("not a mismatch: {other}"),
    }
}

#[test]
fn a_given_manifest_checks_each_tensor_and_names_the_one_that_differs() {
    let d = tempfile::tempdir().unwrap();
    let p = model(d.path());
    let m = d.path().join("m.json");
    write_manifest(&p, &m, |_| {});
    let opts = LoadOptions {
        manifest: Some(m.clone()),
        ..LoadOptions::default()
    };
    let f = VerifiedFile::open(&p, &opts).unwrap();
    let v = f.verification();
    assert!(v.checked);
    assert_eq!(v.granularity, Some("tensors"));
    assert_eq!(
        v.reference,
        Some(ReferenceSource::Manifest { path: m.clone() })
    );
    assert_eq!(load_all(&f).unwrap(), expected(&p, &f));
    assert_eq!(load_one(&f, "c.bias").unwrap(), expected(&p, &f)[2]);

    flip(&p, "b.big");
    let f = VerifiedFile::open(&p, &opts).unwrap();
    let e = load_all(&f).unwrap_err();
    assert_eq!(mismatch(&e), vec!["b.big".to_string()]);
    let shown = e.to_string();
    assert!(shown.contains("model.safetensors"), "{shown}");
    assert!(
        shown.contains("tensor 'b.big' does not match the manifest"),
        "{shown}"
    );
    // A tensor read on its own is checked on its own: the others still load.
    assert!(load_one(&f, "b.big").is_err());
    assert_eq!(load_one(&f, "a.weight").unwrap(), expected(&p, &f)[0]);
}

#[test]
fn chunk_digests_name_the_tensors_in_the_chunk_that_differs() {
    let d = tempfile::tempdir().unwrap();
    let p = model(d.path());
    let m = d.path().join("m.json");
    write_manifest(&p, &m, |m| m.files[0].tensors.clear());
    let opts = LoadOptions {
        manifest: Some(m),
        ..LoadOptions::default()
    };
    let f = VerifiedFile::open(&p, &opts).unwrap();
    assert_eq!(f.verification().granularity, Some("chunks"));
    assert_eq!(load_all(&f).unwrap(), expected(&p, &f));
    flip(&p, "b.big");
    let f = VerifiedFile::open(&p, &opts).unwrap();
    let e = load_one(&f, "b.big").unwrap_err();
    assert_eq!(mismatch(&e), vec!["b.big".to_string()]);
    assert!(e.to_string().contains("chunk "), "{e}");
    assert_eq!(load_one(&f, "c.bias").unwrap(), expected(&p, &f)[2]);
}

#[test]
fn a_whole_file_digest_is_checked_at_the_end_of_a_load_and_before_a_lazy_read() {
    let d = tempfile::tempdir().unwrap();
    let p = model(d.path());
    let opts = LoadOptions {
        sha256: Some(sha256_of(&p)),
        ..LoadOptions::default()
    };
    let f = VerifiedFile::open(&p, &opts).unwrap();
    assert_eq!(f.verification().granularity, Some("file"));
    assert_eq!(load_all(&f).unwrap(), expected(&p, &f));
    // A few tensors: the whole file hashed once, then each tensor against its own digest.
    assert_eq!(load_one(&f, "c.bias").unwrap(), expected(&p, &f)[2]);
    assert_eq!(load_one(&f, "a.weight").unwrap(), expected(&p, &f)[0]);
    assert_eq!(load_one(&f, "d.empty").unwrap(), Vec::<u8>::new());

    flip(&p, "c.bias");
    let f = VerifiedFile::open(&p, &opts).unwrap();
    let e = load_all(&f).unwrap_err();
    assert!(mismatch(&e).is_empty());
    assert!(
        e.to_string().contains("which tensor differs is not known"),
        "{e}"
    );
    assert!(load_one(&f, "a.weight").unwrap_err().is_mismatch());
}

#[test]
fn a_cache_blob_is_checked_against_its_name_and_a_sidecar_against_itself() {
    let d = tempfile::tempdir().unwrap();
    let src = model(d.path());
    let sha = sha256_of(&src);
    let repo = d.path().join("models--org--name");
    let blob = repo.join("blobs").join(sha.to_string());
    let snap = repo.join("snapshots").join("c".repeat(40));
    std::fs::create_dir_all(blob.parent().unwrap()).unwrap();
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::rename(&src, &blob).unwrap();
    let p = snap.join("model.safetensors");
    std::os::unix::fs::symlink(format!("../../blobs/{sha}"), &p).unwrap();
    let f = VerifiedFile::open(&p, &LoadOptions::default()).unwrap();
    let v = f.verification();
    assert!(
        matches!(v.reference, Some(ReferenceSource::CacheBlob { .. })),
        "{v:?}"
    );
    assert_eq!(load_all(&f).unwrap(), expected(&p, &f));
    // The manifest wi-fetch recorded when it verified the blob (a hint, read only on a failure).
    let recorded = repo.join(".wi-manifests").join(format!("{sha}.json"));
    std::fs::create_dir_all(recorded.parent().unwrap()).unwrap();
    write_manifest(&blob, &recorded, |m| m.files[0].tensors.clear());
    flip(&blob, "a.weight");
    let f = VerifiedFile::open(&p, &LoadOptions::default()).unwrap();
    let e = load_all(&f).unwrap_err();
    assert!(
        e.to_string()
            .contains("the SHA-256 the cache blob is named by"),
        "{e}"
    );
    // The verdict is the blob's name; the recorded chunks name the tensors of the chunk.
    assert!(mismatch(&e).contains(&"a.weight".to_string()), "{e}");
    assert!(!mismatch(&e).contains(&"c.bias".to_string()), "{e}");
    assert!(
        e.to_string().contains("differs from the manifest recorded"),
        "{e}"
    );
    assert!(load_one(&f, "c.bias").unwrap_err().is_mismatch());
    // A recorded manifest of other bytes is not used to name anything.
    write_manifest(&fresh_copy(d.path()), &recorded, |_| {});
    let e = load_all(&VerifiedFile::open(&p, &LoadOptions::default()).unwrap()).unwrap_err();
    assert!(mismatch(&e).is_empty(), "{e}");

    // A manifest published beside the file is taken first, and names the tensor.
    let fresh = model(d.path());
    let sidecar = d.path().join("model.safetensors.wi-manifest.json");
    write_manifest(&fresh, &sidecar, |_| {});
    flip(&fresh, "a.weight");
    let f = VerifiedFile::open(&fresh, &LoadOptions::default()).unwrap();
    assert_eq!(
        f.verification().reference,
        Some(ReferenceSource::Sidecar { path: sidecar })
    );
    assert_eq!(
        mismatch(&load_all(&f).unwrap_err()),
        vec!["a.weight".to_string()]
    );
}

#[test]
fn a_lock_file_pins_the_file_it_names() {
    let d = tempfile::tempdir().unwrap();
    let p = model(d.path());
    let lock = d.path().join("wi.lock");
    let size = std::fs::metadata(&p).unwrap().len();
    let doc = serde_json::json!({
        "format": "weight-inspect/lock", "version": 1,
        "repos": [{"repo": "org/name", "type": "model", "revision": "main",
                   "commit": "c".repeat(40),
                   "files": [{"path": "model.safetensors", "size": size,
                              "sha256": sha256_of(&p).to_string(), "chunk_size": 16 << 20,
                              "manifest": format!("sha256:{}", "0".repeat(64))}]}]
    });
    std::fs::write(&lock, doc.to_string()).unwrap();
    let opts = LoadOptions {
        lock: Some(lock.clone()),
        ..LoadOptions::default()
    };
    let f = VerifiedFile::open(&p, &opts).unwrap();
    assert_eq!(
        f.verification().reference,
        Some(ReferenceSource::LockFile { path: lock })
    );
    assert_eq!(load_all(&f).unwrap(), expected(&p, &f));
    flip(&p, "c.bias");
    let f = VerifiedFile::open(&p, &opts).unwrap();
    assert!(load_all(&f)
        .unwrap_err()
        .to_string()
        .contains("the lock file"));
}

#[test]
fn a_manifest_of_another_file_is_refused_with_why() {
    let d = tempfile::tempdir().unwrap();
    let p = model(d.path());
    let other = d.path().join("other.safetensors");
    std::fs::write(&other, StWriter::new().zeros("x", "F32", &[3]).build()).unwrap();
    let m = d.path().join("m.json");
    write_manifest(&other, &m, |_| {});
    let opts = LoadOptions {
        manifest: Some(m.clone()),
        ..LoadOptions::default()
    };
    let e = VerifiedFile::open(&p, &opts).unwrap_err();
    assert!(matches!(e, LoadError::Reference { .. }), "{e}");
    assert!(e.to_string().contains("does not describe this file"), "{e}");
    // The same name, another file: its size differs.
    write_manifest(&other, &m, |m| m.files[0].path = "model.safetensors".into());
    let e = VerifiedFile::open(&p, &opts).unwrap_err();
    assert!(e.is_mismatch(), "{e}");
    assert!(e.to_string().contains("its size does not match"), "{e}");
}

#[test]
fn nothing_to_check_against_loads_with_that_said_or_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let p = model(d.path());
    let f = VerifiedFile::open(&p, &LoadOptions::default()).unwrap();
    let v = f.verification();
    assert!(!v.checked && v.reference.is_none() && v.verify == Verify::Auto);
    assert_eq!(load_all(&f).unwrap(), expected(&p, &f));
    let e = VerifiedFile::open(
        &p,
        &LoadOptions {
            verify: Verify::Required,
            ..LoadOptions::default()
        },
    )
    .unwrap_err();
    assert!(matches!(e, LoadError::NoReference { .. }), "{e}");
    assert!(e.to_string().contains("verify=\"required\""), "{e}");
    // Off reads without hashing, even against a reference that would fail.
    let off = LoadOptions {
        verify: Verify::Off,
        sha256: Some(Sha256Hex([0; 32])),
        ..LoadOptions::default()
    };
    let f = VerifiedFile::open(&p, &off).unwrap();
    assert!(!f.verification().checked);
    assert!(load_all(&f).is_ok());
}

#[test]
fn a_file_truncated_after_it_was_opened_is_an_error_not_a_signal() {
    let d = tempfile::tempdir().unwrap();
    let p = model(d.path());
    for opts in [
        LoadOptions::default(),
        LoadOptions {
            sha256: Some(sha256_of(&p)),
            ..LoadOptions::default()
        },
    ] {
        let bytes = std::fs::read(&p).unwrap();
        let f = VerifiedFile::open(&p, &opts).unwrap();
        let len = f.size();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(len / 2)
            .unwrap();
        let e = load_all(&f).unwrap_err();
        assert!(matches!(e, LoadError::Io { .. }), "{e}");
        assert!(e.to_string().contains("truncated"), "{e}");
        std::fs::write(&p, bytes).unwrap();
    }
}

#[test]
fn a_request_that_does_not_fit_the_file_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let p = model(d.path());
    let f = VerifiedFile::open(&p, &LoadOptions::default()).unwrap();
    let mut small = [0u8; 3];
    let e = f.read_into(vec![(0, &mut small[..])]).unwrap_err();
    assert!(
        e.to_string()
            .contains("tensor 'a.weight' is 1024 bytes, not 3"),
        "{e}"
    );
    let mut a = vec![0u8; 1024];
    let mut b = vec![0u8; 1024];
    let e = f
        .read_into(vec![(0, &mut a[..]), (0, &mut b[..])])
        .unwrap_err();
    assert!(e.to_string().contains("asked for twice"), "{e}");
    let e = f.read_into(vec![(99, &mut a[..])]).unwrap_err();
    assert!(e.to_string().contains("no tensor number 99"), "{e}");
}

#[test]
fn bytes_in_memory_are_checked_against_a_digest() {
    let d = tempfile::tempdir().unwrap();
    let p = model(d.path());
    let bytes = std::fs::read(&p).unwrap();
    let sha = sha256_of(&p);
    let name = Path::new("<bytes>");
    let (h, v) = weight_inspect::load::check_bytes(name, &bytes, Some(&sha), Verify::Auto).unwrap();
    assert_eq!(h.tensors().len(), 4);
    assert!(v.checked);
    let mut bad = bytes.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    let e = weight_inspect::load::check_bytes(name, &bad, Some(&sha), Verify::Auto).unwrap_err();
    assert!(e.is_mismatch(), "{e}");
    let e = weight_inspect::load::check_bytes(name, &bytes, None, Verify::Required).unwrap_err();
    assert!(matches!(e, LoadError::NoReference { .. }));
}

/// Tensor `i` of `shared` as handed out (`None` unless checked).
fn handed(shared: &weight_inspect::load::SharedFile, i: usize) -> Option<Vec<u8>> {
    let (ptr, len) = shared.hand_out(i)?;
    // SAFETY: `hand_out` gives the address and length of a checked tensor inside the map,
    // which `shared` keeps alive; nothing writes it meanwhile.
    #[allow(unsafe_code)]
    let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
    Some(bytes.to_vec())
}

#[test]
fn shared_tensors_are_checked_through_the_map_before_they_are_handed_out() {
    let d = tempfile::tempdir().unwrap();
    let p = model(d.path());
    let m = d.path().join("m.json");
    write_manifest(&p, &m, |_| {});
    let opts = LoadOptions {
        manifest: Some(m),
        ..LoadOptions::default()
    };
    let f = VerifiedFile::open(&p, &opts).unwrap();
    let want = expected(&p, &f);
    let shared = f.share().unwrap();
    assert!(handed(&shared, 2).is_none(), "unchecked: not handed out");
    f.check_shared(&shared, &[2]).unwrap();
    assert_eq!(handed(&shared, 2).unwrap(), want[2]);
    assert!(
        handed(&shared, 1).is_none(),
        "each tensor checked on its own"
    );
    f.check_shared(&shared, &[0, 1, 2, 3]).unwrap();
    for (i, w) in want.iter().enumerate() {
        assert_eq!(&handed(&shared, i).unwrap(), w);
    }
    assert!(f.check_shared(&shared, &[9]).is_err());
    drop(shared);

    flip(&p, "b.big");
    let f = VerifiedFile::open(&p, &opts).unwrap();
    let shared = f.share().unwrap();
    let e = f.check_shared(&shared, &[0, 1]).unwrap_err();
    assert_eq!(mismatch(&e), vec!["b.big".to_string()]);
    assert!(
        handed(&shared, 1).is_none(),
        "a damaged tensor is never handed out"
    );
    // Asked again, it fails again; the others load.
    assert!(f.check_shared(&shared, &[1]).unwrap_err().is_mismatch());
    f.check_shared(&shared, &[3]).unwrap();
    assert_eq!(handed(&shared, 3).unwrap(), Vec::<u8>::new());
}

/// [`model`], opened with its SHA-256 as the reference and shared: the path, the options, the
/// file, each tensor's bytes, the shared file.
fn shared_model_by_its_sha256(
    dir: &Path,
) -> (
    PathBuf,
    LoadOptions,
    VerifiedFile,
    Vec<Vec<u8>>,
    weight_inspect::load::SharedFile,
) {
    let p = model(dir);
    let opts = LoadOptions {
        sha256: Some(sha256_of(&p)),
        ..LoadOptions::default()
    };
    let f = VerifiedFile::open(&p, &opts).unwrap();
    let want = expected(&p, &f);
    let shared = f.share().unwrap();
    (p, opts, f, want, shared)
}

#[test]
fn a_shared_file_with_one_digest_is_checked_whole_at_the_first_tensor() {
    let d = tempfile::tempdir().unwrap();
    let (p, opts, f, want, shared) = shared_model_by_its_sha256(d.path());
    f.check_shared(&shared, &[2]).unwrap();
    // The whole file matched: every tensor may be handed out.
    for (i, w) in want.iter().enumerate() {
        assert_eq!(&handed(&shared, i).unwrap(), w);
    }
    drop(shared);
    flip(&p, "c.bias");
    let f = VerifiedFile::open(&p, &opts).unwrap();
    let shared = f.share().unwrap();
    let e = f.check_shared(&shared, &[0]).unwrap_err();
    assert!(
        e.to_string().contains("which tensor differs is not known"),
        "{e}"
    );
    assert!((0..4).all(|i| handed(&shared, i).is_none()));
}

#[test]
fn shared_tensors_keep_their_bytes_when_the_file_is_truncated_and_rewritten() {
    let d = tempfile::tempdir().unwrap();
    let (p, _, f, want, shared) = shared_model_by_its_sha256(d.path());
    f.check_shared(&shared, &[0, 1, 2, 3]).unwrap();
    assert_eq!(
        shared.lease(),
        weight_inspect::format::mmap::LeaseState::Held
    );
    // Another program empties the file, then writes other bytes (an open that waits for the
    // lease to be given up: the map's pages are copies by then).
    let status = std::process::Command::new("sh")
        .args(["-c", ": > \"$1\" && head -c 4096 /dev/zero > \"$1\"", "sh"])
        .arg(&p)
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 4096);
    assert_eq!(
        shared.lease(),
        weight_inspect::format::mmap::LeaseState::Copied
    );
    for (i, w) in want.iter().enumerate() {
        assert_eq!(&handed(&shared, i).unwrap(), w);
    }
}

#[test]
fn a_file_open_for_writing_is_not_shared_and_says_why() {
    let d = tempfile::tempdir().unwrap();
    let p = model(d.path());
    let f = VerifiedFile::open(&p, &LoadOptions::default()).unwrap();
    let writer = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    let e = f.share().unwrap_err();
    assert!(matches!(e, LoadError::Unshared { .. }), "{e}");
    assert!(e.to_string().contains("open for writing"), "{e}");
    drop(writer);
    // Nothing to check against: shared as it is (the file's verification says so).
    let shared = f.share().unwrap();
    f.check_shared(&shared, &[0]).unwrap();
    assert_eq!(handed(&shared, 0).unwrap(), expected(&p, &f)[0]);
}
