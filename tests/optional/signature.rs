//! OpenSSF model signatures against the reference tool, `model_signing` (PyPI `model-signing`):
//! it signs (keys on three curves, files and shards, a certificate chain made here), this
//! program verifies; this program signs, it verifies; and for each way a signature or a model
//! can be wrong, both give the same verdict.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::manifest::{poke, run, signing_model_dir, stderr, stdout};

/// Keys, a PKI (a root, an intermediate, signing certificates: good, expired since, unable to
/// sign, issued after its intermediate expired; another root) and `model_signing`'s signatures.
const FIXTURES: &str = r#"
import datetime, pathlib, sys
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID, ExtendedKeyUsageOID
from model_signing import signing, hashing

out, model, other = (pathlib.Path(a) for a in sys.argv[1:4])
def key(name, curve):
    k = ec.generate_private_key(curve)
    (out / f"{name}.pem").write_bytes(k.private_bytes(serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    (out / f"{name}.pub.pem").write_bytes(k.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return k
for n, c in [("p256", ec.SECP256R1()), ("p384", ec.SECP384R1()), ("p521", ec.SECP521R1())]:
    key(n, c)
now = datetime.datetime.now(datetime.timezone.utc)
day = datetime.timedelta(days=1)
def name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
def cert(file, k, subject, issuer, issuer_key, ca, start, end, can_sign=True):
    b = (x509.CertificateBuilder().subject_name(name(subject)).issuer_name(name(issuer))
         .public_key(k.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(start).not_valid_after(end)
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
         .add_extension(x509.KeyUsage(digital_signature=not ca and can_sign, content_commitment=False,
             key_encipherment=not ca and not can_sign, data_encipherment=False, key_agreement=False,
             key_cert_sign=ca, crl_sign=ca, encipher_only=False, decipher_only=False), critical=True))
    if not ca:
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING if can_sign
            else ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    (out / f"{file}.crt").write_bytes(b.sign(issuer_key, hashes.SHA256())
        .public_bytes(serialization.Encoding.PEM))
ever, never = now - 3000 * day, now + 3000 * day
root = ec.generate_private_key(ec.SECP384R1())
cert("root", root, "wi test root", "wi test root", root, True, ever, never)
inter = ec.generate_private_key(ec.SECP256R1())
cert("inter", inter, "wi test intermediate", "wi test root", root, True, ever, never)
leaf = key("leaf", ec.SECP256R1())
cert("leaf", leaf, "wi test signer", "wi test intermediate", inter, False, now - day, now + 365 * day)
cert("leaf-expired", leaf, "wi test old signer", "wi test intermediate", inter, False,
     now - 800 * day, now - 400 * day)
cert("leaf-nosign", leaf, "wi test server", "wi test intermediate", inter, False, now - day,
     now + 365 * day, can_sign=False)
stranger = ec.generate_private_key(ec.SECP256R1())
cert("other-root", stranger, "wi other root", "wi other root", stranger, True, ever, never)
old_inter = ec.generate_private_key(ec.SECP256R1())
cert("inter-expired", old_inter, "wi test old intermediate", "wi test root", root, True,
     now - 900 * day, now - 500 * day)
cert("leaf-late", leaf, "wi test late signer", "wi test old intermediate", old_inter, False,
     now - 100 * day, now + 100 * day)

files = hashing.Config().use_file_serialization
for n in ["p256", "p384", "p521"]:
    signing.Config().use_elliptic_key_signer(private_key=out / f"{n}.pem") \
        .set_hashing_config(files()).sign(model, out / f"theirs-{n}.sig")
signing.Config().use_elliptic_key_signer(private_key=out / "p384.pem") \
    .set_hashing_config(hashing.Config().use_shard_serialization(shard_size=65536)) \
    .sign(model, out / "theirs-p384-shards.sig")
signing.Config().use_elliptic_key_signer(private_key=out / "p256.pem") \
    .set_hashing_config(files()).sign(other, out / "theirs-other-model.sig")
for alg, shard in [("blake2", None), ("blake2", 65536), ("blake3", None)]:
    h = (hashing.Config().use_shard_serialization(hashing_algorithm=alg, shard_size=shard)
         if shard else hashing.Config().use_file_serialization(hashing_algorithm=alg))
    signing.Config().use_elliptic_key_signer(private_key=out / "p256.pem") \
        .set_hashing_config(h).sign(model, out / f"theirs-{alg}{'-shards' if shard else ''}.sig")
for c, chain in [("leaf", "inter"), ("leaf-expired", "inter"), ("leaf-nosign", "inter"),
                 ("leaf-late", "inter-expired")]:
    signing.Config().use_certificate_signer(private_key=out / "leaf.pem",
        signing_certificate=out / f"{c}.crt", certificate_chain=[out / f"{chain}.crt"]) \
        .set_hashing_config(files()).sign(model, out / f"theirs-{c}.sig")
"#;

/// `model_signing`'s verdict on each case: "ok" or "refused: …". A sharded signature, or one of
/// BLAKE2b or BLAKE3 digests, is verified with its hashing configuration given (its command line
/// hashes SHA-256 whatever the statement says: checked). For shards, the size must be given: `model_signing` 1.1.1 fails on its own sharded signatures otherwise
/// (its guess of the hashing configuration reads the shard size as a float and raises
/// `TypeError`; its command line hashes whole files and finds every shard missing: checked).
const VERIFY: &str = r#"
import json, pathlib, sys
from model_signing import hashing, verifying
verdicts = []
for case in json.load(open(sys.argv[1])):
    try:
        c = verifying.Config()
        if case["shard_size"]:
            c = c.set_hashing_config(hashing.Config().use_shard_serialization(
                hashing_algorithm=case["hash"], shard_size=case["shard_size"]))
        elif case["hash"] != "sha256":
            c = c.set_hashing_config(hashing.Config().use_file_serialization(
                hashing_algorithm=case["hash"]))
        if case["method"] == "key":
            c = c.use_elliptic_key_verifier(public_key=pathlib.Path(case["material"]))
        else:
            c = c.use_certificate_verifier(certificate_chain=[pathlib.Path(case["material"])])
        c.verify(pathlib.Path(case["model"]), pathlib.Path(case["signature"]))
        verdicts.append("ok")
    except Exception as e:
        verdicts.append(f"refused: {type(e).__name__}: {e}")
print(json.dumps(verdicts))
"#;

struct Case {
    what: String,
    model: PathBuf,
    signature: PathBuf,
    /// `--public-key` or `--certificate-chain`.
    flag: &'static str,
    material: PathBuf,
    /// The verdict both must give: `None` verified, else a piece of this program's reason.
    refused: Option<&'static str>,
}

fn ours(c: &Case) -> (Option<i32>, String) {
    let o = run(
        &[
            "signature",
            "verify",
            "--signature",
            c.signature.to_str().unwrap(),
            c.flag,
            c.material.to_str().unwrap(),
        ],
        &[&c.model],
    );
    (o.status.code(), format!("{}{}", stdout(&o), stderr(&o)))
}

fn theirs(python: &str, dir: &Path, cases: &[Case]) -> Vec<String> {
    let list: Vec<serde_json::Value> = cases
        .iter()
        .map(|c| {
            let name = c.signature.to_string_lossy();
            let hash = ["blake2", "blake3"]
                .into_iter()
                .find(|a| name.contains(a))
                .unwrap_or("sha256");
            serde_json::json!({
                "method": if c.flag == "--public-key" { "key" } else { "certificate" },
                "material": c.material, "model": c.model, "signature": c.signature,
                "shard_size": c.signature.to_string_lossy().contains("shards").then_some(65536),
                "hash": hash,
            })
        })
        .collect();
    let file = dir.join("cases.json");
    fs::write(&file, serde_json::to_string(&list).unwrap()).unwrap();
    let o = Command::new(python)
        .args(["-c", VERIFY])
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Both tools on every case: the same verdict, and the one expected.
fn agree(python: &str, dir: &Path, cases: &[Case]) {
    let verdicts = theirs(python, dir, cases);
    for (c, theirs) in cases.iter().zip(verdicts) {
        let (code, text) = ours(c);
        match c.refused {
            None => {
                assert_eq!(code, Some(0), "{}: ours: {text}", c.what);
                assert_eq!(theirs, "ok", "{}: model_signing", c.what);
            }
            Some(why) => {
                assert_eq!(code, Some(2), "{}: ours: {text}", c.what);
                assert!(text.contains(why), "{}: ours: {text}", c.what);
                assert!(
                    theirs.starts_with("refused"),
                    "{}: model_signing: {theirs}",
                    c.what
                );
            }
        }
    }
}

pub fn model_signing_and_this_program_verify_each_others_signatures() {
    let python = crate::support::required_env("WI_PYTHON");
    let (d, model) = signing_model_dir();
    let out = d.path().join("out");
    fs::create_dir(&out).unwrap();
    let other = d.path().join("other");
    fs::create_dir(&other).unwrap();
    fs::write(other.join("x.bin"), b"another model").unwrap();
    let o = Command::new(&python)
        .args(["-c", FIXTURES])
        .args([&out, &model, &other])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let f = |n: &str| out.join(n);
    let case = |what: &str, model: &Path, sig: &str, flag, material: &str, refused| Case {
        what: what.to_string(),
        model: model.to_path_buf(),
        signature: f(sig),
        flag,
        material: f(material),
        refused,
    };

    // This program signs: keys on each curve, files and shards, and a certificate chain.
    let sign = |sig: &str, extra: &[&str]| {
        let mut args = vec!["signature", "sign", "--signature"];
        let path = f(sig);
        args.push(path.to_str().unwrap());
        args.extend_from_slice(extra);
        let o = run(&args, &[&model]);
        assert_eq!(o.status.code(), Some(0), "{sig}: {}", stderr(&o));
    };
    for n in ["p256", "p384", "p521"] {
        let key = f(&format!("{n}.pem"));
        sign(
            &format!("ours-{n}.sig"),
            &["--private-key", key.to_str().unwrap()],
        );
    }
    let p384 = f("p384.pem");
    sign(
        "ours-p384-shards.sig",
        &[
            "--private-key",
            p384.to_str().unwrap(),
            "--shard-size",
            "64K",
        ],
    );
    let p256 = f("p256.pem");
    for (sig, alg, shard) in [
        ("ours-blake2.sig", "blake2b", None),
        ("ours-blake2-shards.sig", "blake2", Some("64K")),
        ("ours-blake3.sig", "blake3", None),
    ] {
        let mut extra = vec![
            "--private-key",
            p256.to_str().unwrap(),
            "--hash-algorithm",
            alg,
        ];
        if let Some(n) = shard {
            extra.extend(["--shard-size", n]);
        }
        sign(sig, &extra);
    }
    let (leaf_key, leaf, inter) = (f("leaf.pem"), f("leaf.crt"), f("inter.crt"));
    sign(
        "ours-leaf.sig",
        &[
            "--private_key",
            leaf_key.to_str().unwrap(),
            "--signing_certificate",
            leaf.to_str().unwrap(),
            "--certificate_chain",
            inter.to_str().unwrap(),
        ],
    );

    // Models that are not what was signed.
    let (_t, tampered) = signing_model_dir();
    poke(&tampered.join("sub/w.bin"), 70_000);
    let (_e, extra) = signing_model_dir();
    fs::write(extra.join("added.bin"), b"not signed").unwrap();
    let (_m, missing) = signing_model_dir();
    fs::remove_file(missing.join("sub/w.bin")).unwrap();
    // A statement edited after signing: the first file's digest replaced.
    let edited = {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut b: serde_json::Value =
            serde_json::from_slice(&fs::read(f("theirs-p256.sig")).unwrap()).unwrap();
        let payload = b64
            .decode(b["dsseEnvelope"]["payload"].as_str().unwrap())
            .unwrap();
        let mut st: serde_json::Value = serde_json::from_slice(&payload).unwrap();
        st["predicate"]["resources"][0]["digest"] = "ab".repeat(32).into();
        b["dsseEnvelope"]["payload"] = b64.encode(serde_json::to_vec(&st).unwrap()).into();
        fs::write(f("edited.sig"), b.to_string()).unwrap();
        "edited.sig"
    };

    let key = "--public-key";
    let chain = "--certificate-chain";
    let cases = vec![
        case(
            "theirs, P-256",
            &model,
            "theirs-p256.sig",
            key,
            "p256.pub.pem",
            None,
        ),
        case(
            "theirs, P-384",
            &model,
            "theirs-p384.sig",
            key,
            "p384.pub.pem",
            None,
        ),
        case(
            "theirs, P-521",
            &model,
            "theirs-p521.sig",
            key,
            "p521.pub.pem",
            None,
        ),
        case(
            "theirs, shards",
            &model,
            "theirs-p384-shards.sig",
            key,
            "p384.pub.pem",
            None,
        ),
        case(
            "theirs, certificate",
            &model,
            "theirs-leaf.sig",
            chain,
            "root.crt",
            None,
        ),
        case(
            "ours, P-256",
            &model,
            "ours-p256.sig",
            key,
            "p256.pub.pem",
            None,
        ),
        case(
            "ours, P-384",
            &model,
            "ours-p384.sig",
            key,
            "p384.pub.pem",
            None,
        ),
        case(
            "ours, P-521",
            &model,
            "ours-p521.sig",
            key,
            "p521.pub.pem",
            None,
        ),
        case(
            "ours, shards",
            &model,
            "ours-p384-shards.sig",
            key,
            "p384.pub.pem",
            None,
        ),
        case(
            "ours, certificate",
            &model,
            "ours-leaf.sig",
            chain,
            "root.crt",
            None,
        ),
        case(
            "theirs, BLAKE2b",
            &model,
            "theirs-blake2.sig",
            key,
            "p256.pub.pem",
            None,
        ),
        case(
            "theirs, BLAKE2b shards",
            &model,
            "theirs-blake2-shards.sig",
            key,
            "p256.pub.pem",
            None,
        ),
        case(
            "theirs, BLAKE3",
            &model,
            "theirs-blake3.sig",
            key,
            "p256.pub.pem",
            None,
        ),
        case(
            "ours, BLAKE2b",
            &model,
            "ours-blake2.sig",
            key,
            "p256.pub.pem",
            None,
        ),
        case(
            "ours, BLAKE2b shards",
            &model,
            "ours-blake2-shards.sig",
            key,
            "p256.pub.pem",
            None,
        ),
        case(
            "ours, BLAKE3",
            &model,
            "ours-blake3.sig",
            key,
            "p256.pub.pem",
            None,
        ),
        case(
            "a tampered file, BLAKE3",
            &tampered,
            "theirs-blake3.sig",
            key,
            "p256.pub.pem",
            Some("sub/w.bin: the file's BLAKE3 differs"),
        ),
        case(
            "a tampered shard, BLAKE2b",
            &tampered,
            "theirs-blake2-shards.sig",
            key,
            "p256.pub.pem",
            Some("sub/w.bin: shard 1 (bytes 65536-131071) differs"),
        ),
        // Checked at the moment the signing certificate's validity began, as model_signing
        // checks it: a certificate expired since still verifies what it signed.
        case(
            "expired since",
            &model,
            "theirs-leaf-expired.sig",
            chain,
            "root.crt",
            None,
        ),
        case(
            "a tampered file",
            &tampered,
            "theirs-p256.sig",
            key,
            "p256.pub.pem",
            Some("sub/w.bin: the file's SHA-256 differs"),
        ),
        case(
            "a file not signed",
            &extra,
            "ours-p256.sig",
            key,
            "p256.pub.pem",
            Some("added.bin: present but not signed"),
        ),
        case(
            "a missing file",
            &missing,
            "theirs-p384-shards.sig",
            key,
            "p384.pub.pem",
            Some("sub/w.bin: missing"),
        ),
        case(
            "the wrong key",
            &model,
            "theirs-p384.sig",
            key,
            "p256.pub.pem",
            Some("key mismatch"),
        ),
        case(
            "the wrong CA",
            &model,
            "theirs-leaf.sig",
            chain,
            "other-root.crt",
            Some("no path to a trusted certificate"),
        ),
        case(
            "a certificate that may not sign",
            &model,
            "theirs-leaf-nosign.sig",
            chain,
            "root.crt",
            Some("may not sign"),
        ),
        case(
            "issued after its issuer expired",
            &model,
            "theirs-leaf-late.sig",
            chain,
            "root.crt",
            Some("had expired"),
        ),
        case(
            "another model's signature",
            &model,
            "theirs-other-model.sig",
            key,
            "p256.pub.pem",
            Some("x.bin: missing"),
        ),
        case(
            "a statement edited after signing",
            &model,
            edited,
            key,
            "p256.pub.pem",
            Some("does not verify with the given key"),
        ),
    ];
    agree(&python, d.path(), &cases);
}

/// `model_signing` signs `argv[2]` (a folder) with the private key `argv[1]` into `argv[3]`,
/// with its defaults (whole files, SHA-256, git's files left out).
const SIGN_DEFAULTS: &str = r#"
import pathlib, sys
from model_signing import signing
signing.Config().use_elliptic_key_signer(private_key=pathlib.Path(sys.argv[1])) \
    .sign(pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3]))
"#;

/// What is present but not signed, whatever its name, is refused by both tools: a link to a
/// folder, a lock file, a partial download (huggingface_hub's and ours), a hidden temporary
/// file, a `.cache` or `.git` folder below the top, a `.cache` folder at the top; git's files at
/// the top are left out by both.
pub fn unsigned_content_is_refused_as_model_signing_refuses_it() {
    let python = crate::support::required_env("WI_PYTHON");
    let (d, model) = signing_model_dir();
    let (private, public) = crate::support::signature::key_pair(d.path(), "k", 256);
    let sig = d.path().join("theirs.sig");
    let o = Command::new(&python)
        .args(["-c", SIGN_DEFAULTS])
        .args([&private, &model, &sig])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let write = |p: PathBuf, bytes: &[u8]| {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, bytes).unwrap();
    };
    type Add = Box<dyn Fn(&Path)>;
    let kinds: Vec<(&str, Add, Option<&'static str>)> = vec![
        (
            "git's files at the top",
            Box::new(move |m: &Path| {
                write(m.join(".git/config"), b"[core]");
                write(m.join(".gitattributes"), b"* -text");
                write(m.join(".github/ci.yml"), b"on: push");
                write(m.join(".gitignore"), b"*.tmp");
            }),
            None,
        ),
        (
            "a link to a folder",
            Box::new(move |m: &Path| {
                let outside = m.parent().unwrap().join("outside");
                write(outside.join("payload.bin"), b"never signed");
                std::os::unix::fs::symlink(&outside, m.join("sub/linked")).unwrap();
            }),
            Some("sub/linked (a link to a folder): present but not signed"),
        ),
        (
            "a lock file",
            Box::new(move |m: &Path| write(m.join("m.gguf.lock"), b"")),
            Some("m.gguf.lock: present but not signed"),
        ),
        (
            "huggingface_hub's partial download",
            Box::new(move |m: &Path| write(m.join("x.incomplete"), b"half")),
            Some("x.incomplete: present but not signed"),
        ),
        (
            "our partial download",
            Box::new(move |m: &Path| write(m.join("x.abc.wi-partial"), b"half")),
            Some("x.abc.wi-partial: present but not signed"),
        ),
        (
            "a hidden temporary file",
            Box::new(move |m: &Path| write(m.join(".x.tmp"), b"payload")),
            Some(".x.tmp: present but not signed"),
        ),
        (
            "a .cache folder below the top",
            Box::new(move |m: &Path| write(m.join("sub/.cache/x"), b"payload")),
            Some("sub/.cache/x: present but not signed"),
        ),
        (
            "a .cache folder at the top",
            Box::new(move |m: &Path| write(m.join(".cache/x"), b"payload")),
            Some(".cache/x: present but not signed"),
        ),
        (
            "a .git folder below the top",
            Box::new(move |m: &Path| write(m.join("sub/.git/config"), b"[core]")),
            Some("sub/.git/config: present but not signed"),
        ),
    ];
    let mut dirs = Vec::new();
    let mut cases = Vec::new();
    for (what, add, refused) in kinds {
        let (t, m) = signing_model_dir();
        add(&m);
        cases.push(Case {
            what: what.to_string(),
            model: m,
            signature: sig.clone(),
            flag: "--public-key",
            material: public.clone(),
            refused,
        });
        dirs.push(t);
    }
    agree(&python, d.path(), &cases);
}

/// A repository signed by `model_signing`'s command line with its defaults: a folder holding
/// `.gitattributes` (which it leaves out of the signature and records, with git's other paths
/// and the signature, in the statement's `ignore_paths`), served by mock-hub. `wi-fetch
/// --public-key` fetches it whole: every signed file checked, `.gitattributes` fetched without
/// a check and named as not covered; the snapshot verifies; huggingface_hub's
/// `snapshot_download` through a mirror that checks the signature gets every file.
pub fn a_repository_signed_by_model_signing_is_fetched_whole() {
    use crate::support::cli::Sandbox;
    let python = crate::support::required_env("WI_PYTHON");
    let d = tempfile::tempdir().unwrap();
    let repo = d.path().join("hub/acme/signed");
    fs::create_dir_all(&repo).unwrap();
    let weights: Vec<u8> = (0..200_000u32).map(|i| (i % 241) as u8).collect();
    fs::write(repo.join("weights.bin"), &weights).unwrap();
    fs::write(repo.join("config.json"), b"{\"model_type\": \"test\"}").unwrap();
    fs::write(
        repo.join(".gitattributes"),
        b"*.bin filter=lfs diff=lfs merge=lfs -text\n",
    )
    .unwrap();
    let (private, public) = crate::support::signature::key_pair(d.path(), "k", 256);
    let cli = Path::new(&python).with_file_name("model_signing");
    let o = Command::new(&cli)
        .args(["sign", "key"])
        .arg(&repo)
        .arg("--private_key")
        .arg(&private)
        .arg("--signature")
        .arg(repo.join("model.sig"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let hub = mock_server::MockHub::builder()
        .root(d.path().join("hub"))
        .lfs_threshold(64 << 10)
        .hash_cache(false)
        .start_in_background()
        .unwrap();
    let key = public.to_str().unwrap();

    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.args(["acme/signed", "--public-key", key]);
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            ".gitattributes: not covered by the model's signature (the signer left it out: the \
             statement's ignore_paths): fetched without a signature check"
        ),
        "{}",
        stderr(&o)
    );
    let snapshots = sb.repo_dir("acme/signed").join("snapshots");
    let snapshot = fs::read_dir(&snapshots)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    for f in [".gitattributes", "config.json", "model.sig", "weights.bin"] {
        assert!(snapshot.join(f).is_file(), "{f} not fetched");
    }
    assert_eq!(fs::read(snapshot.join("weights.bin")).unwrap(), weights);
    let o = run(&["signature", "verify", "--public-key", key], &[&snapshot]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains(".gitattributes: not checked (the signer left it out"),
        "{}",
        stdout(&o)
    );

    // huggingface_hub through a mirror that checks every file against the signature.
    let mirror = crate::support::serve::mirror(
        &hub.url(),
        &d.path().join("mirror-cache"),
        &["--public-key", key],
        &[],
    );
    let hf_cache = d.path().join("hf-cache");
    let o = Command::new(&python)
        .arg("-c")
        .arg("from huggingface_hub import snapshot_download\nprint(snapshot_download('acme/signed'))\n")
        .env("HF_HUB_CACHE", &hf_cache)
        .env("HF_HOME", hf_cache.join(".home"))
        .env("HF_ENDPOINT", &mirror.base)
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env("HF_HUB_DISABLE_XET", "1")
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let got = PathBuf::from(stdout(&o).lines().last().unwrap().trim());
    for f in [".gitattributes", "config.json", "model.sig", "weights.bin"] {
        assert!(got.join(f).is_file(), "{f} not in {}", got.display());
    }
    assert_eq!(fs::read(got.join("weights.bin")).unwrap(), weights);
}

/// Certificate chains that OpenSSL (`model_signing`'s `X509Store`) refuses and webpki alone
/// accepts, and their good neighbours: each case's signing certificate, the chain the bundle
/// carries, and the certificate trusted. Made with `cryptography`; `model_signing` signs each.
const CHAINS: &str = r#"
import datetime, json, pathlib, sys
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID, ExtendedKeyUsageOID
from model_signing import signing, hashing

out, model = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
now = datetime.datetime.now(datetime.timezone.utc)
day = datetime.timedelta(days=1)
leaf_key = ec.generate_private_key(ec.SECP256R1())
(out / "leaf.pem").write_bytes(leaf_key.private_bytes(serialization.Encoding.PEM,
    serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
def cert(file, key, subject, issuer, issuer_key, bc=(True, None), cert_sign=True, ku=True,
         leaf=False, days=(-10, 100)):
    n = lambda cn: x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    b = (x509.CertificateBuilder().subject_name(n(subject)).issuer_name(n(issuer))
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now + days[0] * day).not_valid_after(now + days[1] * day))
    if bc is not None:
        b = b.add_extension(x509.BasicConstraints(ca=bc[0], path_length=bc[1]), critical=True)
    if ku:
        b = b.add_extension(x509.KeyUsage(digital_signature=leaf, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            key_cert_sign=not leaf and cert_sign, crl_sign=not leaf, encipher_only=False,
            decipher_only=False), critical=True)
    if leaf:
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
    (out / f"{file}.crt").write_bytes(b.sign(issuer_key, hashes.SHA256())
        .public_bytes(serialization.Encoding.PEM))
K = lambda: ec.generate_private_key(ec.SECP256R1())
cases = []
def chain(case, root_opts=None, inter_opts=None, direct=False):
    # root -> (intermediate ->) signer; the bundle carries the intermediate (or the root).
    r, i = K(), K()
    cert(f"{case}-root", r, f"{case} root", f"{case} root", r, **(root_opts or {}))
    if direct:
        cert(f"{case}-leaf", leaf_key, "signer", f"{case} root", r, bc=(False, None), leaf=True)
        carried = f"{case}-root"
    else:
        cert(f"{case}-inter", i, f"{case} inter", f"{case} root", r, **(inter_opts or {}))
        cert(f"{case}-leaf", leaf_key, "signer", f"{case} inter", i, bc=(False, None), leaf=True)
        carried = f"{case}-inter"
    cases.append({"case": case, "chain": f"{carried}.crt", "trusted": f"{case}-root.crt"})
chain("good")
chain("good-direct", direct=True)
chain("inter-no-certsign", inter_opts={"cert_sign": False})
chain("root-no-certsign", root_opts={"cert_sign": False}, direct=True)
chain("root-pathlen0", root_opts={"bc": (True, 0)})
chain("root-pathlen0-direct", root_opts={"bc": (True, 0)}, direct=True)
chain("root-not-ca", root_opts={"bc": (False, None)})
chain("root-not-ca-direct", root_opts={"bc": (False, None)}, direct=True)
chain("root-no-bc", root_opts={"bc": None})
chain("root-no-bc-no-ku", root_opts={"bc": None, "ku": False})
chain("root-expired", root_opts={"days": (-100, -50)}, inter_opts={"days": (-60, 100)})
# The intermediate of the good chain trusted alone (without its root).
cases.append({"case": "inter-trusted-alone", "chain": "good-inter.crt", "trusted": "good-inter.crt",
              "leaf": "good-leaf"})
for c in cases:
    signing.Config().use_certificate_signer(private_key=out / "leaf.pem",
        signing_certificate=out / f"{c.get('leaf', c['case'] + '-leaf')}.crt",
        certificate_chain=[out / c["chain"]]) \
        .set_hashing_config(hashing.Config().use_file_serialization()) \
        .sign(model, out / f"theirs-{c['case']}.sig")
print(json.dumps(cases))
"#;

/// `--certificate-chain` judges a chain as `model_signing` does (OpenSSL's rules, not only
/// webpki's): an issuer without keyCertSign, a root whose pathLen an intermediate exceeds, a
/// root that is not a CA (CA=false, or neither basicConstraints nor key usage), a root expired
/// when the signing certificate was issued, and an intermediate trusted without its root are
/// refused; a good chain, a root with pathLen 0 right above the signing certificate and a root
/// with a key usage but no basicConstraints are trusted. Each case is signed by both tools and
/// both verify both signatures.
pub fn certificate_chains_are_judged_as_model_signing_judges_them() {
    let python = crate::support::required_env("WI_PYTHON");
    let (d, model) = signing_model_dir();
    let out = d.path().join("out");
    fs::create_dir(&out).unwrap();
    let o = Command::new(&python)
        .args(["-c", CHAINS])
        .args([&out, &model])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let made: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    let expected = |case: &str| -> Option<&'static str> {
        match case {
            "good" | "good-direct" | "root-pathlen0-direct" | "root-no-bc" => None,
            "inter-no-certsign" => Some("'CN=inter-no-certsign inter' issued"),
            "root-no-certsign" => Some("'CN=root-no-certsign root' issued"),
            "root-pathlen0" => Some("allows 0 intermediate(s) below it (pathLen)"),
            "root-not-ca" | "root-not-ca-direct" => Some("is not a CA (its basicConstraints"),
            "root-no-bc-no-ku" => Some("is not a CA (no basicConstraints"),
            "root-expired" => Some("root' was not valid"),
            "inter-trusted-alone" => Some("none of the certificates given is a root"),
            other => panic!("no verdict for {other}"),
        }
    };
    let mut cases = Vec::new();
    for c in &made {
        let name = c["case"].as_str().unwrap();
        let leaf = out.join(format!(
            "{}.crt",
            c.get("leaf")
                .and_then(|l| l.as_str())
                .map_or(format!("{name}-leaf"), str::to_string)
        ));
        let ours = out.join(format!("ours-{name}.sig"));
        let o = run(
            &[
                "signature",
                "sign",
                "--signature",
                ours.to_str().unwrap(),
                "--private-key",
                out.join("leaf.pem").to_str().unwrap(),
                "--signing-certificate",
                leaf.to_str().unwrap(),
                "--certificate-chain",
                out.join(c["chain"].as_str().unwrap()).to_str().unwrap(),
            ],
            &[&model],
        );
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        for sig in [out.join(format!("theirs-{name}.sig")), ours] {
            cases.push(Case {
                what: name.to_string(),
                model: model.clone(),
                signature: sig,
                flag: "--certificate-chain",
                material: out.join(c["trusted"].as_str().unwrap()),
                refused: expected(name),
            });
        }
    }
    assert_eq!(cases.len(), 24);
    agree(&python, d.path(), &cases);
}

/// Real keyless signatures (pypi-attestations' test assets: Sigstore bundles and PEP 740
/// attestations of known files, by known identities, on the public-good and staging instances),
/// verified offline against the trusted roots the `sigstore` package ships: each with its
/// identity and issuer; refused with another identity, another issuer, the other instance's
/// root, a root without the CT logs that signed its certificate's timestamps, or one byte of
/// the bundle changed; and the statement's digest is the file's own (one
/// byte of the file changed: another digest).
pub fn real_keyless_signatures_verify_offline() {
    use base64::Engine as _;
    use sha2::{Digest as _, Sha256};
    use weight_inspect::signature::{verify_envelope, KeylessPolicy, TrustPolicy, TrustedRoot};
    let dir = PathBuf::from(crate::support::required_env("WI_SIGSTORE_ASSETS"));
    let assets = dir.join("pypi_attestations-0.0.31/test/assets");
    let store = dir.join("sigstore-4.5.1/sigstore/_store");
    let root = |host: &str| TrustedRoot::read(&store.join(host).join("trusted_root.json")).unwrap();
    let (public_good, staging) = (
        root("https%3A%2F%2Ftuf-repo-cdn.sigstore.dev"),
        root("https%3A%2F%2Ftuf-repo-cdn.sigstage.dev"),
    );
    let without_ct: Vec<TrustedRoot> = [
        "https%3A%2F%2Ftuf-repo-cdn.sigstore.dev",
        "https%3A%2F%2Ftuf-repo-cdn.sigstage.dev",
    ]
    .iter()
    .map(|host| {
        let bytes = fs::read(store.join(host).join("trusted_root.json")).unwrap();
        let mut j: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        j["ctlogs"] = serde_json::json!([]);
        TrustedRoot::parse(&serde_json::to_vec(&j).unwrap()).unwrap()
    })
    .collect();
    let policy = |root: &TrustedRoot, identity: &str, issuer: &str| {
        TrustPolicy::Sigstore(KeylessPolicy {
            root: root.clone(),
            identity: identity.into(),
            issuer: issuer.into(),
        })
    };
    let b64 = base64::engine::general_purpose::STANDARD;
    // A PEP 740 attestation as the Sigstore bundle it stands for.
    let bundle_of_attestation = |a: &Path| -> Vec<u8> {
        let a: serde_json::Value = serde_json::from_slice(&fs::read(a).unwrap()).unwrap();
        let vm = &a["verification_material"];
        serde_json::to_vec(&serde_json::json!({
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": {
                "certificate": {"rawBytes": vm["certificate"]},
                "tlogEntries": vm["transparency_entries"],
            },
            "dsseEnvelope": {
                "payload": a["envelope"]["statement"],
                "payloadType": "application/vnd.in-toto+json",
                "signatures": [{"sig": a["envelope"]["signature"]}],
            },
        }))
        .unwrap()
    };
    struct Real {
        file: &'static str,
        root: usize,
        identity: &'static str,
        issuer: &'static str,
    }
    let cases = [
        Real {
            file: "rfc8785-0.1.2-py3-none-any.whl",
            root: 1,
            identity: "william@yossarian.net",
            issuer: "https://github.com/login/oauth",
        },
        Real {
            file: "pypi_attestation_models-0.0.4a2.tar.gz",
            root: 0,
            identity: "https://github.com/trailofbits/pypi-attestation-models/.github/workflows/release.yml@refs/tags/v0.0.4a2",
            issuer: "https://token.actions.githubusercontent.com",
        },
    ];
    let roots = [&public_good, &staging];
    for c in &cases {
        let artifact = fs::read(assets.join(c.file)).unwrap();
        let digest = hex::encode(Sha256::digest(&artifact));
        let bundles = [
            fs::read(assets.join(format!("{}.sigstore", c.file))).unwrap(),
            bundle_of_attestation(&assets.join(format!("{}.attestation", c.file))),
        ];
        for (k, bundle) in bundles.iter().enumerate() {
            let what = format!("{} ({})", c.file, ["bundle", "attestation"][k]);
            let right = policy(roots[c.root], c.identity, c.issuer);
            let v = verify_envelope(bundle, &right).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(v.signer.certificate.as_ref().unwrap().subject, c.identity);
            let st: serde_json::Value = serde_json::from_slice(&v.payload).unwrap();
            assert_eq!(
                st["subject"][0]["digest"]["sha256"],
                digest.as_str(),
                "{what}"
            );
            let mut changed = artifact.clone();
            changed[100] ^= 1;
            assert_ne!(hex::encode(Sha256::digest(&changed)), digest);

            let refused = |p: &TrustPolicy, b: &[u8], why: &str| {
                let e = verify_envelope(b, p)
                    .err()
                    .unwrap_or_else(|| panic!("{what}: {why}: verified"));
                assert!(e.is_refusal(), "{what}: {why}: {e}");
                assert!(e.to_string().contains(why), "{what}: {why}: {e}");
            };
            refused(
                &policy(roots[c.root], "someone@example.com", c.issuer),
                bundle,
                "not by 'someone@example.com'",
            );
            refused(
                &policy(roots[c.root], c.identity, "https://accounts.google.com"),
                bundle,
                "vouched for by",
            );
            refused(
                &policy(roots[1 - c.root], c.identity, c.issuer),
                bundle,
                "not in the trusted root",
            );
            // The root without its CT logs: the certificate's timestamps are no one's.
            refused(
                &policy(&without_ct[c.root], c.identity, c.issuer),
                bundle,
                "certificate-transparency",
            );
            // One byte of the bundle changed, where each check looks.
            let mut b: serde_json::Value = serde_json::from_slice(bundle).unwrap();
            let flip = |s: &str| {
                let mut raw = b64.decode(s).unwrap();
                let mid = raw.len() / 2;
                raw[mid] ^= 1;
                serde_json::Value::from(b64.encode(raw))
            };
            let with = |f: &dyn Fn(&mut serde_json::Value)| {
                let mut x = b.clone();
                f(&mut x);
                serde_json::to_vec(&x).unwrap()
            };
            let sig = b["dsseEnvelope"]["signatures"][0]["sig"]
                .as_str()
                .unwrap()
                .to_string();
            refused(
                &right,
                &with(&|x| x["dsseEnvelope"]["signatures"][0]["sig"] = flip(&sig)),
                "another signature",
            );
            let payload = b["dsseEnvelope"]["payload"].as_str().unwrap().to_string();
            refused(
                &right,
                &with(&|x| x["dsseEnvelope"]["payload"] = flip(&payload)),
                "another payload",
            );
            let entry = b["verificationMaterial"]["tlogEntries"][0].clone();
            let time = entry["integratedTime"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap();
            refused(
                &right,
                &with(&|x| {
                    x["verificationMaterial"]["tlogEntries"][0]["integratedTime"] =
                        (time + 1).to_string().into()
                }),
                "promise",
            );
            let h = entry["inclusionProof"]["hashes"][0]
                .as_str()
                .unwrap()
                .to_string();
            refused(
                &right,
                &with(&|x| {
                    x["verificationMaterial"]["tlogEntries"][0]["inclusionProof"]["hashes"][0] =
                        flip(&h)
                }),
                "inclusion proof",
            );
            b["verificationMaterial"]["tlogEntries"] = serde_json::json!([]);
            refused(
                &right,
                &serde_json::to_vec(&b).unwrap(),
                "no transparency-log entry",
            );
        }
    }
}

/// Cases of Sigstore's conformance suite (sigstore/sigstore-conformance, `bundle-verify`) for a
/// DSSE bundle, built from what packages publish (never copied here): the suite's
/// `happy-path-intoto-in-dsse-v3` bundle as sigstore-bundle 0.15.1 ships it, the artifact it
/// signs (`a.txt`) as sigstore-verify 0.15.1 ships it, the public-good root from the sigstore
/// wheel; the other cases are that bundle or root changed as the suite's case is. Each is named
/// after the suite's case it follows.
pub fn sigstore_conformance_cases_of_a_dsse_bundle() {
    use base64::Engine as _;
    use sha2::{Digest as _, Sha256};
    use weight_inspect::signature::{verify_envelope, KeylessPolicy, TrustPolicy, TrustedRoot};
    let dir = PathBuf::from(crate::support::required_env("WI_SIGSTORE_ASSETS"));
    let bundle: serde_json::Value = serde_json::from_slice(
        &fs::read(dir.join("sigstore-bundle-0.15.1/tests/fixtures/happy-path.json")).unwrap(),
    )
    .unwrap();
    let artifact =
        fs::read(dir.join("sigstore-verify-0.15.1/test_data/managed-key/artifact.txt")).unwrap();
    let root_json: serde_json::Value = serde_json::from_slice(
        &fs::read(dir.join(
            "sigstore-4.5.1/sigstore/_store/https%3A%2F%2Ftuf-repo-cdn.sigstore.dev/trusted_root.json",
        ))
        .unwrap(),
    )
    .unwrap();
    // The suite's default signer: its beacon workflow, through GitHub Actions' OIDC issuer.
    let identity =
        "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/\
                    .github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main";
    let policy = |root: &serde_json::Value| {
        TrustPolicy::Sigstore(KeylessPolicy {
            root: TrustedRoot::parse(&serde_json::to_vec(root).unwrap()).unwrap(),
            identity: identity.into(),
            issuer: "https://token.actions.githubusercontent.com".into(),
        })
    };
    let good = policy(&root_json);
    let with = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut b = bundle.clone();
        f(&mut b);
        serde_json::to_vec(&b).unwrap()
    };
    let verified = |what: &str, b: &[u8], p: &TrustPolicy| {
        verify_envelope(b, p).unwrap_or_else(|e| panic!("{what}: {e}"))
    };
    let refused = |what: &str, b: &[u8], p: &TrustPolicy, why: &str| {
        let e = verify_envelope(b, p)
            .err()
            .unwrap_or_else(|| panic!("{what}: verified"));
        assert!(e.is_refusal(), "{what}: {e}");
        assert!(e.to_string().contains(why), "{what}: {e}");
    };

    let b64 = base64::engine::general_purpose::STANDARD;
    let flip = |v: &serde_json::Value| {
        let mut raw = b64.decode(v.as_str().unwrap()).unwrap();
        let mid = raw.len() / 2;
        raw[mid] ^= 1;
        serde_json::Value::from(b64.encode(raw))
    };
    type Edit<'a> = &'a dyn Fn(&mut serde_json::Value);
    // A DSSE bundle of a.txt (`make` builds it, changed as told): verified, its statement names
    // a.txt by its digest; refused with its signature or its payload changed
    // (`happy`, `invalid_sig`, `mismatch`: the suite's names for the three cases).
    let envelope_cases = |names: [&str; 3], make: &dyn Fn(Edit<'_>) -> Vec<u8>, p: &TrustPolicy| {
        let v = verified(names[0], &make(&|_| {}), p);
        let st: serde_json::Value = serde_json::from_slice(&v.payload).unwrap();
        assert_eq!(st["subject"][0]["name"], "a.txt");
        assert_eq!(
            st["subject"][0]["digest"]["sha256"],
            hex::encode(Sha256::digest(&artifact))
        );
        refused(
            names[1],
            &make(&|b| {
                let s = flip(&b["dsseEnvelope"]["signatures"][0]["sig"]);
                b["dsseEnvelope"]["signatures"][0]["sig"] = s;
            }),
            p,
            "another signature",
        );
        refused(
            names[2],
            &make(&|b| {
                let x = flip(&b["dsseEnvelope"]["payload"]);
                b["dsseEnvelope"]["payload"] = x;
            }),
            p,
            "of another",
        );
    };
    envelope_cases(
        [
            "happy-path-intoto-in-dsse-v3",
            "dsse-invalid-sig",
            "dsse-mismatch-envelope",
        ],
        &with,
        &good,
    );
    // happy-path-v0.3 spells the media type the older way.
    verified(
        "happy-path-v0.3",
        &with(&|b| b["mediaType"] = "application/vnd.dev.sigstore.bundle+json;version=0.3".into()),
        &good,
    );
    // bundle-from-wrong-instance: the staging root.
    let staging: serde_json::Value = serde_json::from_slice(
        &fs::read(dir.join(
            "sigstore-4.5.1/sigstore/_store/https%3A%2F%2Ftuf-repo-cdn.sigstage.dev/trusted_root.json",
        ))
        .unwrap(),
    )
    .unwrap();
    refused(
        "bundle-from-wrong-instance",
        &with(&|_| {}),
        &policy(&staging),
        "not in the trusted root",
    );
    // invalid-inclusion-proof / the rule behind it: from v0.2 on, an entry carries its
    // inclusion proof (the signed promise alone is v0.1's); v0.1 carries the promise.
    let entry = |b: &mut serde_json::Value| -> serde_json::Value {
        b["verificationMaterial"]["tlogEntries"][0].clone()
    };
    refused(
        "v0.3 without an inclusion proof",
        &with(&|b| {
            let mut e = entry(b);
            e.as_object_mut().unwrap().remove("inclusionProof");
            b["verificationMaterial"]["tlogEntries"][0] = e;
        }),
        &good,
        "no inclusion proof, which a bundle of v0.3 must carry",
    );
    let as_v0_1 = |b: &mut serde_json::Value, chain: Vec<serde_json::Value>| {
        b["mediaType"] = "application/vnd.dev.sigstore.bundle+json;version=0.1".into();
        let vm = b["verificationMaterial"].as_object_mut().unwrap();
        vm.remove("certificate");
        vm.insert(
            "x509CertificateChain".into(),
            serde_json::json!({ "certificates": chain }),
        );
    };
    let leaf = bundle["verificationMaterial"]["certificate"].clone();
    verified(
        "happy-path-v0.1 (the promise, no proof)",
        &with(&|b| {
            as_v0_1(b, vec![leaf.clone()]);
            let mut e = entry(b);
            e.as_object_mut().unwrap().remove("inclusionProof");
            b["verificationMaterial"]["tlogEntries"][0] = e;
        }),
        &good,
    );
    refused(
        "v0.1 without the signed promise",
        &with(&|b| {
            as_v0_1(b, vec![leaf.clone()]);
            let mut e = entry(b);
            e.as_object_mut().unwrap().remove("inclusionPromise");
            b["verificationMaterial"]["tlogEntries"][0] = e;
        }),
        &good,
        "promise",
    );
    // The inclusion proof does not cover the entry's time, only the promise does: without the
    // promise (and without a timestamp) nothing says when it was signed, so a time moved into
    // the certificate's few minutes proves nothing.
    refused(
        "v0.3 with its proof, without its promise",
        &with(&|b| {
            let mut e = entry(b);
            e.as_object_mut().unwrap().remove("inclusionPromise");
            b["verificationMaterial"]["tlogEntries"][0] = e;
        }),
        &good,
        "nothing proves when it was signed",
    );
    // bundle-with-root-cert: a chain that holds its root is refused; one of intermediates is
    // read (the leaf, then the Fulcio intermediate of the authority that issued it).
    let mut intermediates_only = 0;
    for ca in root_json["certificateAuthorities"].as_array().unwrap() {
        let certs: Vec<serde_json::Value> = ca["certChain"]["certificates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| serde_json::json!({ "rawBytes": c["rawBytes"] }))
            .collect();
        let mut chain = vec![leaf.clone()];
        chain.extend(certs.iter().cloned());
        refused(
            "bundle-with-root-cert",
            &with(&|b| as_v0_1(b, chain.clone())),
            &good,
            "holds a root certificate",
        );
        let mut chain = vec![leaf.clone()];
        chain.extend(certs[..certs.len() - 1].iter().cloned());
        if verify_envelope(&with(&|b| as_v0_1(b, chain.clone())), &good).is_ok() {
            intermediates_only += 1;
        }
    }
    assert!(intermediates_only >= 1, "no intermediate chain verified");
    // trust-root-tlog-missing-validity-start: a root whose log has no start is refused.
    let mut no_start = root_json.clone();
    for l in no_start["tlogs"].as_array_mut().unwrap() {
        l["publicKey"]["validFor"]
            .as_object_mut()
            .unwrap()
            .remove("start");
    }
    let e = TrustedRoot::parse(&serde_json::to_vec(&no_start).unwrap()).unwrap_err();
    assert!(e.contains("without its start"), "{e}");
    // trust-root-tlog-validity-end-inclusive: a log valid until the entry's very second holds
    // it; one that ended the second before does not.
    let time: u64 = bundle["verificationMaterial"]["tlogEntries"][0]["integratedTime"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let ending = |at: u64| {
        let mut r = root_json.clone();
        let stamp = humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(at),
        )
        .to_string();
        for l in r["tlogs"].as_array_mut().unwrap() {
            l["publicKey"]["validFor"]["end"] = stamp.clone().into();
        }
        policy(&r)
    };
    verified(
        "trust-root-tlog-validity-end-inclusive",
        &with(&|_| {}),
        &ending(time),
    );
    refused(
        "a log that ended before the entry",
        &with(&|_| {}),
        &ending(time - 1),
        "not valid when the entry was logged",
    );

    // Rekor v2 (the suite's rekor2-dsse-* cases): the same envelope logged as a hashedrekord
    // 0.0.2 entry in an Ed25519 log of the staging instance, its checkpoint cosigned by
    // witnesses, its time from an RFC 3161 timestamp; sigstore-python's fixture, as
    // sigstore-verify 0.15.1 ships it.
    let v2: serde_json::Value = serde_json::from_slice(
        &fs::read(dir.join(
            "sigstore-verify-0.15.1/test_data/upstream/sigstore-python/a.dsse.staging-rekor-v2.txt.sigstore.json",
        ))
        .unwrap(),
    )
    .unwrap();
    let on_staging = policy(&staging);
    let v2_with = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut b = v2.clone();
        f(&mut b);
        serde_json::to_vec(&b).unwrap()
    };
    envelope_cases(
        [
            "rekor2-dsse-happy-path",
            "rekor2-dsse-invalid-sig",
            "rekor2-dsse-mismatch-envelope",
        ],
        &v2_with,
        &on_staging,
    );
    refused(
        "rekor2-no-timestamp",
        &v2_with(&|b| {
            b["verificationMaterial"]
                .as_object_mut()
                .unwrap()
                .remove("timestampVerificationData");
        }),
        &on_staging,
        "no RFC 3161 timestamp",
    );
    refused(
        "rekor2-timestamp-payload-mismatch",
        &v2_with(&|b| {
            let t = &mut b["verificationMaterial"]["timestampVerificationData"]
                ["rfc3161Timestamps"][0]["signedTimestamp"];
            let flipped = flip(t);
            *t = flipped;
        }),
        &on_staging,
        "timestamp 0 does not hold",
    );
    let mut no_tsa = staging.clone();
    no_tsa["timestampAuthorities"] = serde_json::json!([]);
    refused(
        "rekor2-timestamp-untrusted-tsa",
        &v2_with(&|_| {}),
        &policy(&no_tsa),
        "timestamp 0 does not hold: no certificate of the timestamping authority",
    );
    refused(
        "rekor2-no-inclusion-proof",
        &v2_with(&|b| {
            b["verificationMaterial"]["tlogEntries"][0]
                .as_object_mut()
                .unwrap()
                .remove("inclusionProof");
        }),
        &on_staging,
        "no inclusion proof",
    );
    refused(
        "rekor2-checkpoint-missing-log-signature",
        &v2_with(&|b| {
            let c = &mut b["verificationMaterial"]["tlogEntries"][0]["inclusionProof"]
                ["checkpoint"]["envelope"];
            let kept: Vec<&str> = c
                .as_str()
                .unwrap()
                .lines()
                .filter(|l| !l.starts_with("\u{2014} log2025"))
                .collect();
            *c = format!("{}\n", kept.join("\n")).into();
        }),
        &on_staging,
        "not signed by the log",
    );
    refused(
        "rekor2 against the public-good root",
        &v2_with(&|_| {}),
        &good,
        "not in the trusted root",
    );
}

/// `wi-fetch --identity …` reaches the keyless check: a repository whose `model.sig` is a real
/// keyless bundle (a package's attestation, not a model's statement) is refused after its
/// signature verified, for what it signs; with another identity, for who signed.
pub fn wi_fetch_checks_a_keyless_signature() {
    use crate::support::cli::Sandbox;
    let dir = PathBuf::from(crate::support::required_env("WI_SIGSTORE_ASSETS"));
    let assets = dir.join("pypi_attestations-0.0.31/test/assets");
    let staging = dir.join(
        "sigstore-4.5.1/sigstore/_store/https%3A%2F%2Ftuf-repo-cdn.sigstage.dev/trusted_root.json",
    );
    let file = "rfc8785-0.1.2-py3-none-any.whl";
    let root = tempfile::tempdir().unwrap();
    let repo = root.path().join("acme/attested");
    fs::create_dir_all(&repo).unwrap();
    fs::copy(assets.join(file), repo.join(file)).unwrap();
    fs::copy(
        assets.join(format!("{file}.sigstore")),
        repo.join("model.sig"),
    )
    .unwrap();
    let hub = mock_server::MockHub::builder()
        .root(root.path())
        .start_in_background()
        .unwrap();
    let fetch = |identity: &str| {
        let sb = Sandbox::new();
        let mut c = sb.cmd(&hub);
        c.args(["acme/attested", file, "--identity", identity])
            .args(["--identity-provider", "https://github.com/login/oauth"])
            .arg("--trust-config")
            .arg(&staging);
        let o = c.output().unwrap();
        let blobs = sb.repo_dir("acme/attested").join("blobs");
        let kept = fs::read_dir(blobs).map(|d| d.count()).unwrap_or(0);
        (o, kept)
    };
    let (o, kept) = fetch("william@yossarian.net");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the signed statement") && stderr(&o).contains("pypi.org"),
        "{}",
        stderr(&o)
    );
    assert_eq!(kept, 0);
    let (o, kept) = fetch("someone@example.com");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("not by 'someone@example.com'"),
        "{}",
        stderr(&o)
    );
    assert_eq!(kept, 0);
}
