//! A model's folder (or file) against a signature: verified, or signed.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{
    read_signature, sign_statement, verify_signature, SignatureError, Signer, SigningKey,
    TrustPolicy,
};
use crate::manifest::interop::openssf::is_within;
use crate::manifest::{check_expectations, CheckReport, FileExpectation, ManifestError};
use crate::names::escape;

/// The paths `model_signing` leaves out by default (`--ignore-git-paths`), always left out here.
pub(crate) const GIT_PATHS: [&str; 4] = [".git", ".gitattributes", ".github", ".gitignore"];

/// The Hugging Face tools' records in a `--local-dir` (huggingface_hub's and wi-fetch's
/// metadata, locks and partial downloads), left out and named.
const HUB_RECORDS: &str = ".cache/huggingface";

/// Why `rel`, a path the statement does not name, is left out as `model_signing`'s verifier
/// leaves it out: the signer left it out (the statement's `ignore_paths` lists it, or a folder
/// above it), or it is one of git's files at the top. `None`: it is unsigned content.
pub(crate) fn left_out_by_signer(
    statement: &crate::manifest::OpenSsfDocument,
    rel: &str,
) -> Option<LeftOutReason> {
    if statement.ignore_paths().iter().any(|p| is_within(rel, p)) {
        Some(LeftOutReason::SignerIgnored)
    } else if GIT_PATHS.iter().any(|p| is_within(rel, p)) {
        Some(LeftOutReason::GitFiles)
    } else {
        None
    }
}

/// How a model is compared with its signature (`model_signing verify`'s options). What is
/// left out (and named, never silently): the signature itself, what the signer left out (the
/// statement's `ignore_paths`), git's files at the top (`.git`, `.gitattributes`, `.github`,
/// `.gitignore`: `model_signing` leaves them out by default), the paths given, and the Hugging
/// Face tools' records at the top of a `--local-dir` (`.cache/huggingface`, which
/// `model_signing` would count as unsigned). Anything else present that the signature does not
/// name is unsigned: a file anywhere, whatever its name, and a link to a folder.
#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    /// Paths left out of the model, relative to its folder (or absolute, inside it), besides
    /// those the signer left out (`ignore_paths` in the statement) and the signature itself.
    pub ignore_paths: Vec<PathBuf>,
    /// Accept files the signature does not name (they are listed, not refused).
    pub ignore_unsigned_files: bool,
}

/// Why a path of the model's folder was not checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeftOutReason {
    /// The signature itself.
    Signature,
    /// The signer left it out: the statement's `ignore_paths` lists it.
    SignerIgnored,
    /// Git's files at the top, which `model_signing` leaves out by default.
    GitFiles,
    /// Given to leave out ([`VerifyOptions::ignore_paths`]).
    Given,
    /// The Hugging Face tools' download records in a `--local-dir` (`.cache/huggingface`).
    HubDownloadRecords,
}

impl LeftOutReason {
    /// In words.
    pub fn describe(self) -> &'static str {
        match self {
            LeftOutReason::Signature => "the signature itself",
            LeftOutReason::SignerIgnored => "the signer left it out: the statement's ignore_paths",
            LeftOutReason::GitFiles => "git's files: model_signing leaves them out by default",
            LeftOutReason::Given => "--ignore-paths",
            LeftOutReason::HubDownloadRecords => {
                "the Hugging Face tools' download records of a --local-dir, which model_signing \
                 would count as unsigned"
            }
        }
    }
}

/// A path of the model's folder that was not checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeftOut {
    /// Relative to the model's folder (a folder is named once, for all its files).
    pub path: String,
    /// Whether it is a folder.
    pub folder: bool,
    /// The regular files it holds (1 for a file).
    pub files: usize,
    /// Why.
    pub reason: LeftOutReason,
}

/// What [`verify_model`] found: who signed, every signed file's verdict, the files present
/// that the signature does not name, and what was left out.
#[derive(Debug, Clone, Serialize)]
pub struct ModelVerdict {
    /// Who signed (the signature itself held).
    pub signer: Signer,
    /// The model's name in the statement.
    pub model_name: String,
    /// Every file the statement names, checked.
    pub report: CheckReport,
    /// What the statement says of each file (the report's files, in its order).
    #[serde(skip)]
    pub expected: Vec<FileExpectation>,
    /// What is in the model's folder that the statement does not name, by path relative to
    /// it: files, and entries that are not regular files (a link to a folder, a socket…) with
    /// what they are in brackets.
    pub unsigned: Vec<String>,
    /// Whether unsigned files were accepted ([`VerifyOptions::ignore_unsigned_files`]).
    pub unsigned_accepted: bool,
    /// Paths of the model's folder not checked, and why (see [`VerifyOptions`]).
    pub left_out: Vec<LeftOut>,
    /// What the reader should know.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl ModelVerdict {
    /// Whether the model is what was signed: every named file matches, and no file is present
    /// that the signature does not name (unless those were accepted).
    pub fn verified(&self) -> bool {
        self.report.all_match() && (self.unsigned_accepted || self.unsigned.is_empty())
    }
}

/// `path` relative to `base` as a `/`-separated string, when it is inside it.
fn relative(path: &Path, base: &Path) -> Option<String> {
    let abs = |p: &Path| std::path::absolute(p).ok();
    let (p, b) = (abs(path)?, abs(base)?);
    let rel = p.strip_prefix(&b).ok()?;
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// Verifies the model at `model` (its folder, or its one file) against the signature at
/// `signature` under `policy`: the signature first ([`verify_signature`]), then every file it
/// names re-hashed, and the folder listed for files it does not name.
pub fn verify_model(
    model: &Path,
    signature: &Path,
    policy: &TrustPolicy,
    opts: &VerifyOptions,
) -> Result<ModelVerdict, SignatureError> {
    let bytes = read_signature(signature)?;
    let verified = verify_signature(&bytes, policy)?;
    let st = &verified.statement;
    let mut expected: Vec<FileExpectation> = st.files().to_vec();
    let base = if model.is_dir() {
        if st.is_single_file() {
            return Err(SignatureError::Model(ManifestError::Input(format!(
                "the signature is of one file ('{}'), and {} is a folder: give that file",
                escape(st.model_name()),
                model.display()
            ))));
        }
        model.to_path_buf()
    } else {
        if !st.is_single_file() {
            return Err(SignatureError::Model(ManifestError::Input(format!(
                "the signature is of a folder of {} file(s) ('{}'), and {} is one file: give the \
                 folder",
                expected.len(),
                escape(st.model_name()),
                model.display()
            ))));
        }
        // A model of one file is signed as `.`: its bytes, whatever its name.
        let name = model
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for f in &mut expected {
            f.path.clone_from(&name);
        }
        model.parent().unwrap_or(Path::new(".")).to_path_buf()
    };
    let mut report = check_expectations(&expected, &base);
    report.format = "OpenSSF model-signing bundle".to_string();
    report.signature_verified = Some(true);
    report.notes = verified.notes.clone();
    let mut unsigned = Vec::new();
    let mut left_out = Vec::new();
    if model.is_dir() {
        let mut rules: Vec<(String, LeftOutReason)> = Vec::new();
        rules.extend(relative(signature, model).map(|r| (r, LeftOutReason::Signature)));
        rules.extend(
            st.ignore_paths()
                .iter()
                .map(|p| (p.clone(), LeftOutReason::SignerIgnored)),
        );
        rules.extend(
            GIT_PATHS
                .iter()
                .map(|p| (p.to_string(), LeftOutReason::GitFiles)),
        );
        for p in &opts.ignore_paths {
            let rel = if p.is_absolute() {
                relative(p, model)
            } else {
                Some(p.to_string_lossy().replace('\\', "/"))
            };
            rules.extend(rel.map(|r| (r, LeftOutReason::Given)));
        }
        rules.push((HUB_RECORDS.to_string(), LeftOutReason::HubDownloadRecords));
        let named: std::collections::HashSet<&str> =
            expected.iter().map(|f| f.path.as_str()).collect();
        // A path a rule covers is left out, unless the statement names a file at or below it
        // (then that file is checked, and its neighbours judged one by one).
        let reason = |rel: &str| -> Option<LeftOutReason> {
            let (_, why) = rules.iter().find(|(r, _)| is_within(rel, r))?;
            let holds_named = named.contains(rel)
                || named
                    .iter()
                    .any(|n| n.len() > rel.len() && is_within(n, rel));
            (!holds_named).then_some(*why)
        };
        let walk = crate::manifest::walk(model, &|rel| reason(rel).is_some())
            .map_err(SignatureError::Model)?;
        // Shards cut an empty file into nothing: a sharded statement cannot name one.
        let sharded = st.shard_size().is_some();
        unsigned = walk
            .files
            .into_iter()
            .filter(|(rel, _)| !named.contains(rel.as_str()))
            .filter(|(_, path)| !(sharded && std::fs::metadata(path).is_ok_and(|m| m.len() == 0)))
            .map(|(rel, _)| rel)
            .chain(
                walk.other
                    .into_iter()
                    .map(|(rel, what)| format!("{rel} ({what})")),
            )
            .collect();
        unsigned.sort();
        left_out = walk
            .left_out
            .into_iter()
            .filter_map(|(path, folder, files)| {
                let reason = reason(&path)?;
                Some(LeftOut {
                    path,
                    folder,
                    files,
                    reason,
                })
            })
            .collect();
    }
    Ok(ModelVerdict {
        signer: verified.signer,
        model_name: verified.statement.model_name().to_string(),
        report,
        expected,
        unsigned,
        unsigned_accepted: opts.ignore_unsigned_files,
        left_out,
        notes: verified.notes,
    })
}

/// How a model is signed.
#[derive(Debug, Clone, Default)]
pub struct SignOptions {
    /// Cut files into shards of this many bytes (`model_signing`'s `shards` serialization);
    /// whole files (`files`) when `None`.
    pub shard_size: Option<u64>,
    /// The digests' algorithm: SHA-256 (the default, and what a download checks as each shard
    /// arrives), BLAKE2b or BLAKE3 (by file only, as `model_signing` writes it).
    pub algorithm: crate::manifest::HashAlgorithm,
    /// Paths left out, relative to the model's folder (the signature itself is left out when
    /// it is written inside the folder).
    pub ignore_paths: Vec<PathBuf>,
    /// The signing certificate then the rest of its chain (PEM files): the bundle carries the
    /// chain instead of the key's hint (`model_signing sign certificate`).
    pub certificate_chain: Option<(PathBuf, Vec<PathBuf>)>,
}

/// Signs the model at `model` (its folder, or one file) with `key`, writing the bundle to
/// `signature` (replaced atomically); who signed.
pub fn sign_model(
    model: &Path,
    signature: &Path,
    key: &SigningKey,
    opts: &SignOptions,
) -> Result<Signer, SignatureError> {
    let certificates = match &opts.certificate_chain {
        Some((leaf, rest)) => Some(super::chain::read_chain(leaf, rest)?),
        None => None,
    };
    let mut ignore: Vec<String> = Vec::new();
    for p in &opts.ignore_paths {
        if p.is_absolute() {
            ignore.extend(relative(p, model));
        } else {
            ignore.push(p.to_string_lossy().replace('\\', "/"));
        }
    }
    if model.is_dir() {
        ignore.extend(relative(signature, model));
    }
    let statement = crate::manifest::create_in_toto_with(
        &[model.to_path_buf()],
        &crate::manifest::InTotoOptions {
            shard_size: opts.shard_size,
            algorithm: opts.algorithm,
            ignore,
        },
    )
    .map_err(SignatureError::Model)?;
    let signer = match &certificates {
        Some(ders) => super::chain::describe(ders, key.public_key())?,
        None => Signer::key(key.public_key()),
    };
    let json = sign_statement(statement.as_bytes(), key, certificates)?;
    let tmp = crate::safe_fs::tempfile(signature).map_err(|e| SignatureError::io(signature, e))?;
    std::fs::write(tmp.path(), json.as_bytes()).map_err(|e| SignatureError::io(signature, e))?;
    tmp.persist(signature)
        .map_err(|e| SignatureError::io(signature, e.error))?;
    Ok(signer)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `signature verify` on a model whose file is truncated while it is hashed: a verdict
    /// naming the file (it died of SIGBUS, reading a memory map).
    #[test]
    fn a_file_truncated_while_it_is_verified_is_named_and_the_model_refused() {
        use aws_lc_rs::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
        let key = SigningKey::from_der(doc.as_ref()).unwrap();
        let d = tempfile::tempdir().unwrap();
        let model = d.path().join("model");
        std::fs::create_dir(&model).unwrap();
        let w = model.join("w.bin");
        std::fs::write(&w, vec![9u8; 4 << 20]).unwrap();
        std::fs::write(model.join("config.json"), b"{}").unwrap();
        let sig = model.join("model.sig");
        sign_model(&model, &sig, &key, &SignOptions::default()).unwrap();
        let policy = TrustPolicy::Key(key.public_key().clone());
        let v = verify_model(&model, &sig, &policy, &VerifyOptions::default()).unwrap();
        assert!(v.verified());

        let truncated = w.clone();
        crate::manifest::read_hook::before_first_read(&w, move || {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&truncated)
                .unwrap()
                .set_len(1 << 20)
                .unwrap();
        });
        let v = verify_model(&model, &sig, &policy, &VerifyOptions::default()).unwrap();
        assert!(!v.verified());
        let f = v.report.files.iter().find(|f| f.path == "w.bin").unwrap();
        match &f.verdict {
            crate::manifest::FileVerdict::Unreadable { error } => {
                assert!(error.contains("it changed while it was read"), "{error}");
            }
            other => panic!("{other:?}"),
        }
    }
}
