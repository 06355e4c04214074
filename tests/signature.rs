//! `weight-inspect signature sign|verify`: OpenSSF model signatures made and checked here (the
//! reference tool's side is in tests/optional/signature.rs).

use std::fs;
use std::path::Path;

use crate::support::manifest::{poke, run, signing_model_dir, stderr, stdout};
use crate::support::signature::key_pair;

fn sign(model: &Path, key: &Path, extra: &[&str]) {
    let mut args = vec!["signature", "sign", "--private-key", key.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = run(&args, &[model]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("signed by the key"), "{}", stderr(&o));
}

fn verify(model: &Path, public: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "signature",
        "verify",
        "--public-key",
        public.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run(&args, &[model])
}

#[test]
fn a_signed_folder_verifies_and_a_changed_shard_is_named() {
    let (d, model) = signing_model_dir();
    let (private, public) = key_pair(d.path(), "k", 384);
    sign(&model, &private, &["--shard-size", "64K"]);
    assert!(model.join("model.sig").is_file());
    let o = verify(&model, &public, &[]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    // The empty file has no shard: a sharded statement names the two others.
    assert!(
        stdout(&o).contains("(2 file(s)) is what the key"),
        "{}",
        stdout(&o)
    );

    poke(&model.join("sub/w.bin"), 140_000);
    let o = verify(&model, &public, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("sub/w.bin: shard 2 (bytes 131072-149999) differs"),
        "{}",
        stdout(&o)
    );
    assert!(
        stdout(&o).contains("NOT verified") && stdout(&o).contains("1 of 2 signed file(s)"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn files_present_but_not_signed_and_files_missing_are_refused() {
    let (d, model) = signing_model_dir();
    let (private, public) = key_pair(d.path(), "k", 256);
    sign(&model, &private, &[]);
    // Git's files are left out by default, as model_signing leaves them out.
    fs::create_dir(model.join(".git")).unwrap();
    fs::write(model.join(".git/config"), b"[core]").unwrap();
    fs::write(model.join(".gitattributes"), b"*.gguf filter=lfs").unwrap();
    assert_eq!(verify(&model, &public, &[]).status.code(), Some(0));

    fs::write(model.join("extra.bin"), b"not signed").unwrap();
    let o = verify(&model, &public, &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stdout(&o).contains("extra.bin: present but not signed\n"),
        "{}",
        stdout(&o)
    );
    assert!(
        stdout(&o).contains("1 file(s) present but not signed (--ignore-unsigned-files"),
        "{}",
        stdout(&o)
    );
    let o = verify(&model, &public, &["--ignore_unsigned_files"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).contains("extra.bin: present but not signed (accepted)"));
    let o = verify(&model, &public, &["--ignore-paths", "extra.bin"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));

    fs::remove_file(model.join("sub/w.bin")).unwrap();
    let o = verify(&model, &public, &["--ignore-unsigned-files"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stdout(&o).contains("sub/w.bin: missing"), "{}", stdout(&o));
}

/// A signed model with `add` done to it after signing: `signature verify` refuses it, naming
/// `unsigned` as present but not signed (as model_signing refuses it: checked in
/// tests/optional/signature.rs), and accepts it with --ignore-unsigned-files.
fn refused_as_unsigned(add: impl Fn(&Path), unsigned: &str) {
    let (d, model) = signing_model_dir();
    let (private, public) = key_pair(d.path(), "k", 256);
    sign(&model, &private, &[]);
    add(&model);
    let o = verify(&model, &public, &[]);
    assert_eq!(o.status.code(), Some(2), "{unsigned}: {}", stdout(&o));
    assert!(
        stdout(&o).contains(&format!("{unsigned}: present but not signed")),
        "{unsigned}: {}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("NOT verified"), "{}", stdout(&o));
    let o = verify(&model, &public, &["--ignore-unsigned-files"]);
    assert_eq!(o.status.code(), Some(0), "{unsigned}: {}", stdout(&o));
}

fn write(path: &Path, bytes: &[u8]) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, bytes).unwrap();
}

#[test]
fn a_link_to_a_folder_is_unsigned_content() {
    refused_as_unsigned(
        |m| {
            let outside = m.parent().unwrap().join("outside");
            write(&outside.join("payload.bin"), b"never signed");
            std::os::unix::fs::symlink(&outside, m.join("sub/linked")).unwrap();
        },
        "sub/linked (a link to a folder)",
    );
}

#[test]
fn a_lock_file_is_unsigned_content() {
    refused_as_unsigned(|m| write(&m.join("m.gguf.lock"), b""), "m.gguf.lock");
}

#[test]
fn an_incomplete_download_is_unsigned_content() {
    refused_as_unsigned(
        |m| write(&m.join("sub/x.bin.incomplete"), b"half"),
        "sub/x.bin.incomplete",
    );
}

#[test]
fn a_partial_download_of_ours_is_unsigned_content() {
    refused_as_unsigned(
        |m| write(&m.join("x.abc.wi-partial"), b"half"),
        "x.abc.wi-partial",
    );
}

#[test]
fn a_hidden_temporary_file_is_unsigned_content() {
    refused_as_unsigned(|m| write(&m.join(".x.tmp"), b"payload"), ".x.tmp");
}

#[test]
fn a_cache_folder_below_the_top_is_unsigned_content() {
    refused_as_unsigned(
        |m| write(&m.join("sub/.cache/huggingface/x"), b"payload"),
        "sub/.cache/huggingface/x",
    );
    // At the top, .cache is left out by our signer (its statement says so); see
    // what_verify_leaves_out_is_named for model_signing's statements.
}

#[test]
fn a_git_folder_below_the_top_is_unsigned_content() {
    refused_as_unsigned(
        |m| write(&m.join("sub/.git/config"), b"[core]"),
        "sub/.git/config",
    );
    refused_as_unsigned(
        |m| write(&m.join("sub/.gitattributes"), b"* -text"),
        "sub/.gitattributes",
    );
}

#[test]
fn signing_refuses_a_link_to_a_folder_and_signs_everything_else() {
    let (d, model) = signing_model_dir();
    let (private, public) = key_pair(d.path(), "k", 256);
    // What our signer left out before (bookkeeping names, .cache and .git below the top) is
    // signed now, as model_signing signs it; the verifier then finds nothing unsigned.
    write(&model.join("sub/x.lock"), b"");
    write(&model.join("sub/.cache/x"), b"payload");
    write(&model.join(".x.tmp"), b"payload");
    sign(&model, &private, &[]);
    let o = verify(&model, &public, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).contains("(6 file(s))"), "{}", stdout(&o));

    let outside = d.path().join("outside");
    write(&outside.join("payload.bin"), b"never signed");
    std::os::unix::fs::symlink(&outside, model.join("sub/linked")).unwrap();
    let o = run(
        &[
            "signature",
            "sign",
            "--private-key",
            private.to_str().unwrap(),
        ],
        &[&model],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("'sub/linked' in ") && stderr(&o).contains("is a link to a folder"),
        "{}",
        stderr(&o)
    );
    sign(&model, &private, &["--ignore-paths", "sub/linked"]);
    let o = verify(&model, &public, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("sub/linked: not checked (the signer left it out"),
        "{}",
        stdout(&o)
    );
}

/// model_signing 1.1.1's `ignore_paths` by default: git's four paths, and the signature when it
/// is inside the folder.
const MODEL_SIGNING_IGNORES: [&str; 5] = [
    ".github",
    ".gitattributes",
    ".gitignore",
    ".git",
    "model.sig",
];

/// Signs `model`'s statement again with `ignore_paths` (our signer lists `.cache` too).
fn resign_ignoring(model: &Path, private: &Path, ignore_paths: &[&str]) {
    use base64::Engine as _;
    let sig = model.join("model.sig");
    let b: serde_json::Value = serde_json::from_slice(&fs::read(&sig).unwrap()).unwrap();
    let payload = base64::engine::general_purpose::STANDARD
        .decode(b["dsseEnvelope"]["payload"].as_str().unwrap())
        .unwrap();
    let mut st: serde_json::Value = serde_json::from_slice(&payload).unwrap();
    st["predicate"]["serialization"]["ignore_paths"] = serde_json::json!(ignore_paths);
    let key = weight_inspect::signature::SigningKey::read(private).unwrap();
    let bundle =
        weight_inspect::signature::sign_statement(st.to_string().as_bytes(), &key, None).unwrap();
    fs::write(&sig, bundle).unwrap();
}

#[test]
fn what_verify_leaves_out_is_named() {
    let (d, model) = signing_model_dir();
    let (private, public) = key_pair(d.path(), "k", 256);
    sign(&model, &private, &[]);
    resign_ignoring(&model, &private, &MODEL_SIGNING_IGNORES);
    write(&model.join(".git/config"), b"[core]");
    write(&model.join(".gitattributes"), b"* -text");
    write(&model.join(".github/workflows/ci.yml"), b"on: push");
    // A --local-dir's download records (huggingface_hub's, and ours).
    write(
        &model.join(".cache/huggingface/download/m.gguf.metadata"),
        b"abc\n",
    );
    write(
        &model.join(".cache/huggingface/download/x.bin.abc.wi-partial"),
        b"half",
    );
    let o = verify(&model, &public, &["--ignore-paths", "sub/w.bin"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    for line in [
        "model.sig: not checked (the signature itself)\n",
        ".git: not checked, a folder of 1 file(s) (the signer left it out: the statement's \
         ignore_paths)\n",
        ".gitattributes: not checked (the signer left it out",
        ".github: not checked, a folder of 1 file(s) (the signer",
        ".cache/huggingface: not checked, a folder of 2 file(s) (the Hugging Face tools' \
         download records of a --local-dir, which model_signing would count as unsigned)\n",
    ] {
        assert!(out.contains(line), "{line}\n{out}");
    }
    // A path the statement names is checked, whatever is said to leave out.
    assert!(!out.contains("sub/w.bin: not checked"), "{out}");
    let o = verify(&model, &public, &["--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let left: Vec<(String, String, u64)> = v["left_out"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["path"].as_str().unwrap().to_string(),
                l["reason"].as_str().unwrap().to_string(),
                l["files"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        left,
        [
            (".cache/huggingface", "hub_download_records", 2),
            (".git", "signer_ignored", 1),
            (".gitattributes", "signer_ignored", 1),
            (".github", "signer_ignored", 1),
            ("model.sig", "signature", 1),
        ]
        .map(|(p, r, n)| (p.to_string(), r.to_string(), n))
    );

    // Without the statement's list, git's files are still left out, as model_signing's
    // verifier leaves them out by default.
    resign_ignoring(&model, &private, &[]);
    let o = verify(&model, &public, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(
        stdout(&o).contains(
            ".gitattributes: not checked (git's files: model_signing leaves them out by default)\n"
        ),
        "{}",
        stdout(&o)
    );

    // Anything else in .cache is unsigned.
    write(&model.join(".cache/other/x"), b"payload");
    resign_ignoring(&model, &private, &MODEL_SIGNING_IGNORES);
    let o = verify(&model, &public, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(
        stdout(&o).contains(".cache/other/x: present but not signed\n"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn another_key_an_edited_statement_and_a_broken_bundle_exit_2() {
    use base64::Engine as _;
    let (d, model) = signing_model_dir();
    let (private, public) = key_pair(d.path(), "k", 256);
    let (_, other) = key_pair(d.path(), "other", 256);
    sign(&model, &private, &[]);
    let o = verify(&model, &other, &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("signature refused: key mismatch"),
        "{}",
        stderr(&o)
    );

    // The statement edited after signing: a file's digest replaced by the digest of other bytes.
    let sig = model.join("model.sig");
    let original = fs::read_to_string(&sig).unwrap();
    let mut b: serde_json::Value = serde_json::from_str(&original).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let payload = b64
        .decode(b["dsseEnvelope"]["payload"].as_str().unwrap())
        .unwrap();
    let mut st: serde_json::Value = serde_json::from_slice(&payload).unwrap();
    st["predicate"]["resources"][0]["digest"] = "00".repeat(32).into();
    b["dsseEnvelope"]["payload"] = b64.encode(st.to_string()).into();
    fs::write(&sig, b.to_string()).unwrap();
    let o = verify(&model, &public, &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("does not verify with the given key"),
        "{}",
        stderr(&o)
    );

    fs::write(&sig, "{\"mediaType\": 1").unwrap();
    let o = verify(&model, &public, &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("malformed Sigstore bundle"),
        "{}",
        stderr(&o)
    );

    // What the user gave cannot be read: exit 1, the file named.
    fs::write(&sig, original).unwrap();
    let o = verify(&model, &d.path().join("absent.pem"), &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("absent.pem"), "{}", stderr(&o));
    let o = verify(&model, &sig, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("not a PEM public key"),
        "{}",
        stderr(&o)
    );
    let o = run(&["signature", "verify"], &[&model]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("whom the signature must come from is not said: give --public-key"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_model_of_one_file_and_the_json_verdict() {
    let (d, model) = signing_model_dir();
    let (private, public) = key_pair(d.path(), "k", 521);
    let file = model.join("m.gguf");
    let sig = d.path().join("one.sig");
    sign(&file, &private, &["--signature", sig.to_str().unwrap()]);
    let o = verify(
        &file,
        &public,
        &["--signature", sig.to_str().unwrap(), "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verified"], true);
    assert_eq!(v["signer"]["method"], "key");
    assert_eq!(v["signer"]["curve"], "secp521r1");
    assert_eq!(v["model_name"], "m.gguf");
    assert_eq!(v["report"]["files"][0]["verdict"], "match");
    assert_eq!(v["report"]["signature_verified"], true);

    // The signature of one model does not pass for another.
    let other = model.join("sub/w.bin");
    let o = verify(&other, &public, &["--signature", sig.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
}

/// A mock Hub serving `acme/signed` (the signing test model, signed with the key of `bits`
/// by this program, shards of 64 KiB, `model.sig` at its root) and `acme/unsigned` (the same
/// files, no signature); the hub, the folder and the key pair.
fn signed_hub(
    extra: &[&str],
) -> (
    mock_server::BackgroundHub,
    tempfile::TempDir,
    std::path::PathBuf,
    std::path::PathBuf,
) {
    let (d, model) = signing_model_dir();
    let (private, public) = key_pair(d.path(), "k", 256);
    let mut args = vec!["--shard-size", "64K"];
    args.extend_from_slice(extra);
    sign(&model, &private, &args);
    let root = d.path().join("hub");
    fs::create_dir_all(root.join("acme")).unwrap();
    fs::rename(&model, root.join("acme/signed")).unwrap();
    let (keep, again) = signing_model_dir();
    fs::rename(&again, root.join("acme/unsigned")).unwrap();
    drop(keep);
    let hub = hub_at(&root);
    (hub, d, private, public)
}

/// A mock Hub serving the repositories below `root` (files of 64 KiB or more in LFS).
fn hub_at(root: &Path) -> mock_server::BackgroundHub {
    mock_server::MockHub::builder()
        .root(root)
        .lfs_threshold(64 << 10)
        .hash_cache(false)
        .start_in_background()
        .unwrap()
}

fn wi_fetch(
    sb: &crate::support::cli::Sandbox,
    hub: &mock_server::MockHub,
    args: &[&str],
) -> std::process::Output {
    let mut c = sb.cmd(hub);
    c.args(args);
    c.output().unwrap()
}

/// The files of `repo`'s snapshots in the sandbox's cache, by path.
fn snapshot_files(sb: &crate::support::cli::Sandbox, repo: &str) -> Vec<String> {
    let snaps = sb.repo_dir(repo).join("snapshots");
    let mut out = Vec::new();
    for c in fs::read_dir(&snaps).into_iter().flatten().flatten() {
        let mut stack = vec![c.path()];
        while let Some(dir) = stack.pop() {
            for e in fs::read_dir(&dir).unwrap().flatten() {
                if e.path().is_dir() {
                    stack.push(e.path());
                } else {
                    out.push(
                        e.path()
                            .strip_prefix(c.path())
                            .unwrap()
                            .display()
                            .to_string(),
                    );
                }
            }
        }
    }
    out.sort();
    out
}

/// What the signer left out (the statement's `ignore_paths`; git's files at the top even when
/// the statement does not list them, as model_signing's verifier leaves them out) is fetched
/// whole without a check, each file named in a notice; anything else the statement does not
/// name is still refused.
#[test]
fn files_the_signer_left_out_are_fetched_unchecked_and_named() {
    use crate::support::cli::Sandbox;
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("hub");
    let (private, public) = key_pair(d.path(), "k", 256);
    let key = public.to_str().unwrap();
    // Signed by this program, which lists git's files in ignore_paths, and `notes` left out.
    let (_m, model) = signing_model_dir();
    write(&model.join(".gitattributes"), b"*.gguf filter=lfs\n");
    write(&model.join("notes/README.md"), b"left out by the signer");
    sign(&model, &private, &["--ignore-paths", "notes"]);
    fs::create_dir_all(root.join("acme")).unwrap();
    fs::rename(&model, root.join("acme/signed")).unwrap();
    // A statement that lists only the signature.
    let (_b, bare) = signing_model_dir();
    write(&bare.join(".gitattributes"), b"*.gguf filter=lfs\n");
    sign(&bare, &private, &[]);
    resign_ignoring(&bare, &private, &["model.sig"]);
    fs::rename(&bare, root.join("acme/bare")).unwrap();
    let hub = hub_at(&root);

    let sb = Sandbox::new();
    let whole = |repo| ["--include", "*", repo, "--public-key", key];
    let o = wi_fetch(&sb, &hub, &whole("acme/signed"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for f in [".gitattributes", "notes/README.md"] {
        let note = format!(
            "wi-fetch: note: {f}: not covered by the model's signature (the signer left it out: \
             the statement's ignore_paths): fetched without a signature check"
        );
        assert!(stderr(&o).contains(&note), "{note}\n{}", stderr(&o));
    }
    // The summary never says every file was checked: it names those that were not.
    assert!(
        stderr(&o).contains("2 file(s) its signer left out, not checked against it")
            && !stderr(&o).contains("every file hashed"),
        "{}",
        stderr(&o)
    );
    let got = snapshot_files(&sb, "acme/signed");
    assert!(
        got.contains(&".gitattributes".to_string()) && got.contains(&"notes/README.md".to_string()),
        "{got:?}"
    );

    let o = wi_fetch(&sb, &hub, &whole("acme/bare"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "wi-fetch: note: .gitattributes: not covered by the model's signature (git's files: \
             model_signing leaves them out by default): fetched without a signature check"
        ),
        "{}",
        stderr(&o)
    );
    // A file added after signing, under no path the signer left out: refused.
    hub.mutate_file("acme/bare", "notes/README.md", &b"added after signing"[..])
        .unwrap();
    let o = wi_fetch(&sb, &hub, &whole("acme/bare"));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("notes/README.md: FAILED: not named by the model's signature"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn wi_fetch_checks_the_model_signature_before_any_file() {
    use crate::support::cli::Sandbox;
    let (hub, d, _private, public) = signed_hub(&[]);
    let key = public.to_str().unwrap();
    let files = ["m.gguf", "sub/w.bin"];

    let sb = Sandbox::new();
    let mut args = vec!["acme/signed", "--public-key", key];
    args.extend_from_slice(&files);
    let o = wi_fetch(&sb, &hub, &args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the model's signature, made by the key")
            && stderr(&o).contains("every file hashed against it (2)"),
        "{}",
        stderr(&o)
    );
    // The summary says what was signed: the statement's digest and the model's name.
    let o = wi_fetch(&sb, &hub, &[&args[..], &["--json"]].concat());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let sig = &summary["signature"];
    assert_eq!(
        sig["statement_sha256"].as_str().map(str::len),
        Some(64),
        "{sig}"
    );
    assert!(sig["model"].is_string(), "{sig}");
    assert!(
        stderr(&o).contains(&format!(
            "statement sha256:{}",
            &sig["statement_sha256"].as_str().unwrap()[..16]
        )),
        "{}",
        stderr(&o)
    );
    // The files were in the cache: at the fast level their bytes are not hashed again, and the
    // summary says so rather than claiming a check it did not make.
    assert_eq!(sig["files_hashed"], serde_json::Value::Null, "{sig}");
    assert_eq!(
        sig["files_from_cache"],
        serde_json::json!(["m.gguf", "sub/w.bin"]),
        "{sig}"
    );
    assert!(
        stderr(&o).contains("2 taken from the cache as checked before, not hashed now"),
        "{}",
        stderr(&o)
    );
    // The signature is kept beside the files: the snapshot verifies as a model on its own.
    assert_eq!(
        snapshot_files(&sb, "acme/signed"),
        ["m.gguf", "model.sig", "sub/w.bin"]
    );
    let snap = fs::read_dir(sb.repo_dir("acme/signed").join("snapshots"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let o2 = verify(&snap, &public, &[]);
    assert_eq!(o2.status.code(), Some(0), "{}", stdout(&o2));
    assert!(
        stdout(&o2).contains("(2 file(s)) is what the key"),
        "{}",
        stdout(&o2)
    );
    // Offline, the signature comes from the cache.
    let mut off = args.clone();
    off.push("--offline");
    let o = wi_fetch(&sb, &hub, &off);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // `cache verify` re-checks every file against it, without the network: a blob changed on
    // disk is named.
    let check = |sb: &Sandbox, key: &str| {
        let mut c = crate::support::cli::cache_cmd(sb, &hub, &["verify", "acme/signed"]);
        c.args(files).args(["--offline", "--public-key", key]);
        c.output().unwrap()
    };
    let o = check(&sb, key);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the model's signature, made by the key")
            && stderr(&o).contains("every file hashed against it (2)"),
        "{}",
        stderr(&o)
    );
    let (_, stranger) = key_pair(d.path(), "stranger", 256);
    let o = check(&sb, stranger.to_str().unwrap());
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("key mismatch"), "{}", stderr(&o));
    poke(&snap.join("sub/w.bin"), 1_000);
    let o = check(&sb, key);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("sub/w.bin"), "{}", stderr(&o));

    // Another key: refused before any file, nothing kept.
    let (_, other) = key_pair(d.path(), "other", 256);
    let sb = Sandbox::new();
    let mut args = vec!["acme/signed", "--public-key", other.to_str().unwrap()];
    args.extend_from_slice(&files);
    let o = wi_fetch(&sb, &hub, &args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("key mismatch"), "{}", stderr(&o));
    assert!(snapshot_files(&sb, "acme/signed").is_empty());

    // A file the signature does not name: refused, the others kept.
    hub.mutate_file("acme/signed", "README.md", &b"added after signing"[..])
        .unwrap();
    let sb = Sandbox::new();
    let o = wi_fetch(
        &sb,
        &hub,
        &["acme/signed", "--public-key", key, "m.gguf", "README.md"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("README.md: FAILED: not named by the model's signature"),
        "{}",
        stderr(&o)
    );
    assert_eq!(snapshot_files(&sb, "acme/signed"), ["m.gguf", "model.sig"]);

    // One byte changed on the server: exit 2, the file named, nothing of it kept.
    let mut w = fs::read(d.path().join("hub/acme/signed/sub/w.bin")).unwrap();
    w[70_000] ^= 1;
    hub.mutate_file("acme/signed", "sub/w.bin", w).unwrap();
    let sb = Sandbox::new();
    let mut args = vec!["acme/signed", "--public-key", key];
    args.extend_from_slice(&files);
    let o = wi_fetch(&sb, &hub, &args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("sub/w.bin"), "{}", stderr(&o));
    assert!(
        !snapshot_files(&sb, "acme/signed").contains(&"sub/w.bin".to_string()),
        "{:?}",
        snapshot_files(&sb, "acme/signed")
    );
}

#[test]
fn a_repository_without_a_signature_is_said_or_refused() {
    use crate::support::cli::Sandbox;
    let (hub, _d, _private, public) = signed_hub(&[]);
    let key = public.to_str().unwrap();
    let sb = Sandbox::new();
    let o = wi_fetch(&sb, &hub, &["acme/unsigned", "m.gguf", "--public-key", key]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the repository has no signature 'model.sig'"),
        "{}",
        stderr(&o)
    );
    let sb = Sandbox::new();
    let o = wi_fetch(
        &sb,
        &hub,
        &[
            "acme/unsigned",
            "m.gguf",
            "--public-key",
            key,
            "--require-signature",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no signature 'model.sig'") && stderr(&o).contains("it is required"),
        "{}",
        stderr(&o)
    );
    assert!(snapshot_files(&sb, "acme/unsigned").is_empty());
    // Required without saying whom from: a usage error.
    let o = wi_fetch(
        &sb,
        &hub,
        &["acme/unsigned", "m.gguf", "--require-signature"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("a signature is required, but not whom it must come from"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_lock_file_pins_who_signed() {
    use crate::support::cli::Sandbox;
    let (hub, d, _private, public) = signed_hub(&[]);
    let key = public.to_str().unwrap();
    let lock = d.path().join("wi.lock");
    let lock_s = lock.to_str().unwrap();
    let sb = Sandbox::new();
    let o = wi_fetch(
        &sb,
        &hub,
        &[
            "acme/signed",
            "m.gguf",
            "--public-key",
            key,
            "--write-lock",
            lock_s,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let pinned: serde_json::Value = serde_json::from_slice(&fs::read(&lock).unwrap()).unwrap();
    let sig = &pinned["repos"][0]["signature"];
    assert_eq!(sig["path"], "model.sig");
    assert_eq!(sig["signer"]["method"], "key");
    let fingerprint = sig["signer"]["fingerprint"].as_str().unwrap().to_string();
    assert!(stderr(&o).contains(&fingerprint), "{}", stderr(&o));

    // The same signer, checked again with the key given: fetched.
    let sb = Sandbox::new();
    let o = wi_fetch(&sb, &hub, &["--locked", lock_s, "--public-key", key]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // No key given: the lock file's pin cannot be checked, exit 2, nothing fetched.
    let sb = Sandbox::new();
    let o = wi_fetch(&sb, &hub, &["--locked", lock_s]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the lock file pins the model's signature"),
        "{}",
        stderr(&o)
    );
    assert!(snapshot_files(&sb, "acme/signed").is_empty());
    // A lock file that pins another signer: the signature holds, but it is not theirs.
    let mut other = pinned.clone();
    other["repos"][0]["signature"]["signer"]["fingerprint"] = "ab".repeat(32).into();
    let other_lock = d.path().join("other.lock");
    fs::write(&other_lock, other.to_string()).unwrap();
    let sb = Sandbox::new();
    let o = wi_fetch(
        &sb,
        &hub,
        &[
            "--locked",
            other_lock.to_str().unwrap(),
            "--public-key",
            key,
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("where the lock file pins the key abab"),
        "{}",
        stderr(&o)
    );
}

/// A pull-through mirror with a signature policy: clients get the signed files, and nothing
/// else — a file changed on the upstream since it was signed is never served whole nor cached.
#[test]
fn a_mirror_serves_only_what_the_signature_names() {
    use crate::support::cli::Sandbox;
    let (hub, d, _private, public) = signed_hub(&[]);
    let key = public.to_str().unwrap();
    let mirror_cache = d.path().join("mirror-cache");
    let mirror = crate::support::serve::mirror(
        &hub.url(),
        &mirror_cache,
        &["--public-key", key, "--metadata-ttl", "0"],
        &[],
    );
    let through = |sb: &Sandbox, files: &[&str]| {
        let mut c = sb.cmd(&hub);
        c.env("HF_ENDPOINT", &mirror.base)
            .arg("acme/signed")
            .args(files);
        c.output().unwrap()
    };
    // A client without any policy of its own gets the signed files.
    let sb = Sandbox::new();
    let o = through(&sb, &["m.gguf", "sub/w.bin"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // The upstream changes a signed file: the mirror refuses it, its cache keeps nothing of it.
    let mut w = fs::read(d.path().join("hub/acme/signed/sub/w.bin")).unwrap();
    w[10] ^= 1;
    let commit = hub.mutate_file("acme/signed", "sub/w.bin", w).unwrap();
    let sb = Sandbox::new();
    let o = through(&sb, &["sub/w.bin"]);
    // The mirror's pull failed on the signature: the client is told why, asks once (the same
    // answer would come again), and exits as for any integrity failure.
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "sub/w.bin: FAILED: the mirror refused what its upstream served: fetching \
             'sub/w.bin' from the upstream failed: sub/w.bin: chunk 0 (bytes 0-65535) does not \
             match the manifest"
        ),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("attempt"), "{}", stderr(&o));
    let snap = mirror_cache
        .join("models--acme--signed/snapshots")
        .join(&commit);
    assert!(!snap.join("sub/w.bin").exists());
    // Nor a partial download of it (it stayed as blobs/*.wi-partial: issue 48).
    let left: Vec<String> = fs::read_dir(mirror_cache.join("models--acme--signed/blobs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".wi-partial"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // And a file the signature does not name.
    hub.mutate_file("acme/signed", "README.md", &b"added after signing"[..])
        .unwrap();
    let sb = Sandbox::new();
    let o = through(&sb, &["README.md"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("not named by the model's signature"),
        "{}",
        stderr(&o)
    );
    // huggingface_hub's clients read the reason from X-Error-Message.
    let url = format!("{}/acme/signed/resolve/main/README.md", mirror.base);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r = rt
        .block_on(crate::support::serve::client().get(url).send())
        .unwrap();
    assert_eq!(r.status().as_u16(), 502);
    assert_eq!(r.headers()["x-error-code"], "UpstreamContentRefused");
    let said = r.headers()["x-error-message"].to_str().unwrap().to_string();
    assert!(
        said.contains("not named by the model's signature"),
        "{said}"
    );
}

/// The bucket keeps the signature beside the files it signs: a node that reads the bucket
/// offline checks its files against it, and refuses them when another key is given.
#[test]
fn a_node_reading_the_bucket_offline_checks_the_signature_it_keeps() {
    use crate::support::cli::Sandbox;
    let (hub, d, _private, public) = signed_hub(&[]);
    let key = public.to_str().unwrap();
    let bucket = format!("file://{}", d.path().join("bucket").display());
    fs::create_dir_all(d.path().join("bucket")).unwrap();
    let files = ["m.gguf", "sub/w.bin"];
    let sb = Sandbox::new();
    let mut args = vec![
        "acme/signed",
        "--public-key",
        key,
        "--remote-cache",
        &bucket,
    ];
    args.extend_from_slice(&files);
    let o = wi_fetch(&sb, &hub, &args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let mut offline = args.clone();
    offline.push("--offline");
    let sb = Sandbox::new();
    let o = wi_fetch(&sb, &hub, &offline);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("every file hashed against it (2)"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        snapshot_files(&sb, "acme/signed"),
        ["m.gguf", "model.sig", "sub/w.bin"]
    );

    let (_, other) = key_pair(d.path(), "other", 256);
    let mut wrong = offline.clone();
    wrong[2] = other.to_str().unwrap();
    let sb = Sandbox::new();
    let o = wi_fetch(&sb, &hub, &wrong);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("key mismatch"), "{}", stderr(&o));
}

/// A small file kept in git (its ETag a SHA-1, so the Hub says nothing of its SHA-256): the
/// signature's SHA-256 is checked before it is put in place. (It was not: found this session.)
#[test]
fn a_small_file_kept_in_git_is_checked_against_the_signature_too() {
    use crate::support::cli::Sandbox;
    let d = tempfile::tempdir().unwrap();
    let repo = d.path().join("hub/acme/small");
    fs::create_dir_all(&repo).unwrap();
    fs::write(repo.join("config.json"), br#"{"model_type": "tiny"}"#).unwrap();
    let (private, public) = key_pair(d.path(), "k", 256);
    sign(&repo, &private, &[]);
    let hub = hub_at(&d.path().join("hub"));
    let key = public.to_str().unwrap();
    let sb = Sandbox::new();
    let o = wi_fetch(
        &sb,
        &hub,
        &["acme/small", "config.json", "--public-key", key],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    hub.mutate_file(
        "acme/small",
        "config.json",
        &br#"{"model_type": "evil"}"#[..],
    )
    .unwrap();
    let sb = Sandbox::new();
    let o = wi_fetch(
        &sb,
        &hub,
        &["acme/small", "config.json", "--public-key", key],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("config.json: FAILED: it matches the Hub's digest, but the file's SHA-256: not as the model's signature says"),
        "{}",
        stderr(&o)
    );
    assert!(!snapshot_files(&sb, "acme/small").contains(&"config.json".to_string()));
}

/// BLAKE2b and BLAKE3 statements (`--hash-algorithm`): verified, a changed byte named by its
/// algorithm or shard; and wi-fetch checks a download against a BLAKE3 signature before the
/// file is put in place (the engine hashes SHA-256 as bytes arrive; the BLAKE3 is checked on
/// the complete file).
#[test]
fn blake2b_and_blake3_signatures_are_checked_locally_and_when_fetching() {
    use crate::support::cli::Sandbox;
    for (alg, extra, said) in [
        ("blake3", None, "sub/w.bin: the file's BLAKE3 differs"),
        ("blake2b", None, "sub/w.bin: the file's BLAKE2b differs"),
        (
            "blake2",
            Some("64K"),
            "sub/w.bin: shard 2 (bytes 131072-149999) differs",
        ),
    ] {
        let (d, model) = signing_model_dir();
        let (private, public) = key_pair(d.path(), "k", 256);
        let mut args = vec!["--hash-algorithm", alg];
        if let Some(n) = extra {
            args.extend(["--shard-size", n]);
        }
        sign(&model, &private, &args);
        let sig = fs::read_to_string(model.join("model.sig")).unwrap();
        assert!(!sig.contains("sha256-sharded"), "{alg}");
        let o = verify(&model, &public, &[]);
        assert_eq!(o.status.code(), Some(0), "{alg}: {}", stdout(&o));
        poke(&model.join("sub/w.bin"), 140_000);
        let o = verify(&model, &public, &[]);
        assert_eq!(o.status.code(), Some(2), "{alg}: {}", stdout(&o));
        assert!(stdout(&o).contains(said), "{alg}: {}", stdout(&o));
    }
    // model_signing writes BLAKE3 by file only.
    let (d, model) = signing_model_dir();
    let (private, _) = key_pair(d.path(), "k", 256);
    let o = run(
        &[
            "signature",
            "sign",
            "--private-key",
            private.to_str().unwrap(),
            "--hash-algorithm",
            "blake3",
            "--shard-size",
            "64K",
        ],
        &[&model],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("BLAKE3 digests are written by file"));

    // Fetched against a BLAKE3 signature: verified; one byte changed on the server is found
    // before the file is kept.
    let d = tempfile::tempdir().unwrap();
    let repo = d.path().join("hub/acme/b3");
    let (_m, model) = signing_model_dir();
    fs::create_dir_all(repo.parent().unwrap()).unwrap();
    fs::rename(&model, &repo).unwrap();
    let (private, public) = key_pair(d.path(), "k", 256);
    sign(&repo, &private, &["--hash-algorithm", "blake3"]);
    let hub = hub_at(&d.path().join("hub"));
    let key = public.to_str().unwrap();
    let args = ["acme/b3", "m.gguf", "sub/w.bin", "--public-key", key];
    let sb = Sandbox::new();
    let o = wi_fetch(&sb, &hub, &args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        snapshot_files(&sb, "acme/b3"),
        ["m.gguf", "model.sig", "sub/w.bin"]
    );
    let mut w = fs::read(repo.join("sub/w.bin")).unwrap();
    w[70_000] ^= 1;
    hub.mutate_file("acme/b3", "sub/w.bin", w).unwrap();
    let sb = Sandbox::new();
    let o = wi_fetch(&sb, &hub, &args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("sub/w.bin: FAILED")
            && stderr(&o).contains("the file's BLAKE3: not as the model's signature says"),
        "{}",
        stderr(&o)
    );
    assert_eq!(snapshot_files(&sb, "acme/b3"), ["m.gguf", "model.sig"]);
}

/// What the mirror refused is answered the same for `--metadata-ttl` without fetching the file
/// from the upstream again for each client that asks (a fleet asking at once costs the upstream
/// one download, not one per node).
#[test]
fn a_file_the_mirror_refused_is_not_fetched_again_for_every_client() {
    use crate::support::cli::Sandbox;
    let (hub, d, _private, public) = signed_hub(&[]);
    let mut w = fs::read(d.path().join("hub/acme/signed/sub/w.bin")).unwrap();
    w[10] ^= 1;
    hub.mutate_file("acme/signed", "sub/w.bin", w).unwrap();
    let mirror = crate::support::serve::mirror(
        &hub.url(),
        &d.path().join("mirror-cache"),
        &[
            "--public-key",
            public.to_str().unwrap(),
            "--metadata-ttl",
            "600",
        ],
        &[],
    );
    let ask = || {
        let sb = Sandbox::new();
        let mut c = sb.cmd(&hub);
        c.env("HF_ENDPOINT", &mirror.base)
            .args(["acme/signed", "sub/w.bin"]);
        let o = c.output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("the mirror refused what its upstream served")
                && stderr(&o).contains("does not match the manifest"),
            "{}",
            stderr(&o)
        );
    };
    ask();
    let sent = hub.stats().file("acme/signed", "sub/w.bin").bytes_sent;
    assert!(sent > 0);
    ask();
    ask();
    assert_eq!(
        hub.stats().file("acme/signed", "sub/w.bin").bytes_sent,
        sent,
        "fetched from the upstream again"
    );
}

/// A signature the repository's listing names but that cannot be read (404, 401, 403) is a
/// refusal under a key, never "no signature" (issue 48: the check was switched off, the files
/// fetched unchecked and exit 0): exit 2, nothing committed.
#[test]
fn a_listed_signature_that_cannot_be_read_is_a_refusal() {
    use crate::support::cli::Sandbox;
    let (hub, _d, _private, public) = signed_hub(&[]);
    let key = public.to_str().unwrap();
    for status in [404, 401, 403] {
        hub.faults().clear();
        hub.faults()
            .push(mock_server::Fault::status(status).on_path("acme/signed/model.sig"));
        let sb = Sandbox::new();
        let o = wi_fetch(&sb, &hub, &["acme/signed", "--public-key", key]);
        assert_eq!(o.status.code(), Some(2), "{status}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("the repository lists it")
                && !stderr(&o).contains("has no signature"),
            "{status}: {}",
            stderr(&o)
        );
        assert!(
            snapshot_files(&sb, "acme/signed").is_empty(),
            "{status}: {:?}",
            snapshot_files(&sb, "acme/signed")
        );
    }
}

/// A mirror checking signatures reads a commit's signature once, however many files and
/// clients ask (it read and parsed it again for every file it pulled: six files, six
/// downloads), and a signature past the bound is refused unread.
#[test]
fn a_mirror_reads_a_commits_signature_once() {
    use crate::support::cli::Sandbox;
    let (hub, d, _private, public) = signed_hub(&[]);
    let key = public.to_str().unwrap();
    let mirror = crate::support::serve::mirror(
        &hub.url(),
        &d.path().join("mirror-cache"),
        &["--public-key", key, "--metadata-ttl", "600"],
        &[],
    );
    let through = |files: &[&str]| {
        let sb = Sandbox::new();
        let mut c = sb.cmd(&hub);
        c.env("HF_ENDPOINT", &mirror.base)
            .arg("acme/signed")
            .args(files);
        c.output().unwrap()
    };
    hub.reset_stats();
    for files in [&["m.gguf"][..], &["sub/w.bin"], &["m.gguf", "sub/w.bin"]] {
        let o = through(files);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    let sig = hub.stats().file("acme/signed", "model.sig");
    assert_eq!(sig.get_requests, 1, "{sig:?}");
}

/// A signature larger than the bound is refused before it is read, naming the bound.
#[test]
fn a_signature_past_the_bound_is_refused_unread() {
    use crate::support::cli::Sandbox;
    let (hub, _d, _private, public) = signed_hub(&[]);
    let key = public.to_str().unwrap();
    let huge = vec![b' '; (32 << 20) + 1];
    hub.mutate_file("acme/signed", "model.sig", huge).unwrap();
    hub.reset_stats();
    let sb = Sandbox::new();
    let o = wi_fetch(&sb, &hub, &["acme/signed", "m.gguf", "--public-key", key]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("more than the 32.0 MiB a signature may have"),
        "{}",
        stderr(&o)
    );
    assert_eq!(hub.stats().file("acme/signed", "model.sig").bytes_sent, 0);
    assert!(snapshot_files(&sb, "acme/signed").is_empty());
}

/// A lock file pins the signed statement too: a locked fetch refuses another signing by the
/// same key (an older version of the model, another model's files and signature).
#[test]
fn a_lock_file_pins_the_signed_statement() {
    use crate::support::cli::Sandbox;
    let (hub, d, _private, public) = signed_hub(&[]);
    let key = public.to_str().unwrap();
    let lock = d.path().join("wi.lock");
    let sb = Sandbox::new();
    let o = wi_fetch(
        &sb,
        &hub,
        &[
            "acme/signed",
            "m.gguf",
            "--public-key",
            key,
            "--write-lock",
            lock.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mut pinned: serde_json::Value = serde_json::from_slice(&fs::read(&lock).unwrap()).unwrap();
    let sig = &mut pinned["repos"][0]["signature"];
    assert_eq!(sig["statement_sha256"].as_str().map(str::len), Some(64));
    assert!(sig.get("files_from_cache").is_none() && sig.get("files_hashed").is_none());
    sig["statement_sha256"] = "cd".repeat(32).into();
    let other = d.path().join("other.lock");
    fs::write(&other, pinned.to_string()).unwrap();
    let sb = Sandbox::new();
    let o = wi_fetch(
        &sb,
        &hub,
        &["--locked", other.to_str().unwrap(), "--public-key", key],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("where the lock file pins sha256:cdcd"),
        "{}",
        stderr(&o)
    );
    assert!(snapshot_files(&sb, "acme/signed").is_empty());
}

/// A signing mirror checks what its cache already holds, whatever filled it (issue 48: a file
/// pulled before the key was set was served unchecked, and a path the signature does not name
/// was served once a signed file with the same bytes was held).
#[test]
fn a_signing_mirror_checks_what_it_already_holds() {
    use crate::support::cli::Sandbox;
    let (hub, d, _private, public) = signed_hub(&[]);
    let key = public.to_str().unwrap();
    let cache = d.path().join("mirror-cache");
    let through = |mirror: &crate::support::serve::Server, files: &[&str]| {
        let sb = Sandbox::new();
        let mut c = sb.cmd(&hub);
        c.env("HF_ENDPOINT", &mirror.base)
            .arg("acme/signed")
            .args(files);
        c.output().unwrap()
    };
    // The upstream changes a signed file; a mirror without a key pulls it and keeps it.
    let mut w = fs::read(d.path().join("hub/acme/signed/sub/w.bin")).unwrap();
    w[10] ^= 1;
    hub.mutate_file("acme/signed", "sub/w.bin", w).unwrap();
    // A path the signature does not name, with a signed file's bytes (the same blob).
    let m = fs::read(d.path().join("hub/acme/signed/m.gguf")).unwrap();
    hub.mutate_file("acme/signed", "copy.gguf", m).unwrap();
    {
        let open = crate::support::serve::mirror(&hub.url(), &cache, &[], &[]);
        let o = through(&open, &["sub/w.bin", "m.gguf"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    // The same cache behind a mirror with the key: the held file is checked, found not to be
    // what the signature says, and refused (the upstream's copy is no better).
    let signing = crate::support::serve::mirror(
        &hub.url(),
        &cache,
        &["--public-key", key, "--metadata-ttl", "0"],
        &[],
    );
    let o = through(&signing, &["sub/w.bin"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the mirror refused what its upstream served"),
        "{}",
        stderr(&o)
    );
    // The signed file it holds is served, checked once.
    let o = through(&signing, &["m.gguf"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The unnamed path with the same bytes is refused, held or not.
    let o = through(&signing, &["copy.gguf"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("not named by the model's signature"),
        "{}",
        stderr(&o)
    );
    // And so is a HEAD of it, as huggingface_hub's clients ask first.
    let url = format!("{}/acme/signed/resolve/main/copy.gguf", signing.base);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r = rt
        .block_on(crate::support::serve::client().head(url).send())
        .unwrap();
    assert_eq!(r.status().as_u16(), 502);
}
