//! OpenSSF model-signing manifests (`sigstore/model-transparency`, the `model_signing` Python
//! package), read and written.
//!
//! `model_signing sign` writes a Sigstore bundle (`model.sig`) whose `dsseEnvelope.payload` is
//! the base64 of an in-toto statement (`payloadType` `application/vnd.in-toto+json`):
//!
//! ```json
//! {
//!   "_type": "https://in-toto.io/Statement/v1",
//!   "subject": [{"name": "model", "digest": {"sha256": "…"}}],
//!   "predicateType": "https://model_signing/signature/v1.0",
//!   "predicate": {
//!     "serialization": {"method": "shards", "hash_type": "sha256", "shard_size": 1000000000.0,
//!                       "allow_symlinks": false, "ignore_paths": [".git", "…"]},
//!     "resources": [{"name": "weights.bin:0:1000000000", "algorithm": "sha256-sharded-1000000000",
//!                    "digest": "…"}]
//!   }
//! }
//! ```
//!
//! - `method` `files`: one resource per file, named by its path relative to the model's folder
//!   (the folder that was signed, the subject's `name`); its digest is the file's SHA-256. A model
//!   that is one file is named `.`, and the subject carries the file's name.
//! - `method` `shards`: one resource per shard, named `path:start:end` (`end` excluded); shards
//!   cut each file every `shard_size` bytes (written as a float by the protobuf encoding, e.g.
//!   `1000000000.0`), empty files have none. A file's shards become its chunks
//!   ([`FileExpectation::chunks`]), so each is checked on its own (as it arrives, when
//!   downloading); shards that are contiguous from byte 0 but not all `shard_size` long become
//!   [`FileExpectation::ranges`]; gaps and overlaps are refused.
//! - the subject's `sha256` is the SHA-256 of every resource's digest (raw bytes) in order; a
//!   statement where it does not match is refused, as `model_signing` refuses it.
//! - the older `https://model_signing/Digests/v0.1` predicate lists the files as subjects.
//!
//! Digests are SHA-256 (`hash_type` `sha256`), BLAKE2b (`blake2b`: 64 bytes, unkeyed) or
//! BLAKE3 (`blake3`, which `model_signing` writes by file only). SHA-256 digests fill the
//! expectation's SHA-256 fields (so a download checks each shard as it arrives); the others fill
//! [`FileExpectation::other`], checked on the complete file. The subject's digest is SHA-256
//! whatever the resources' algorithm. The bundle's signature (and certificate, transparency log entry…) is
//! **not** verified here (the `signature` module verifies it):
//! [`Document::notes`](crate::manifest::Document::notes) says so, and the reports print it.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use super::{shown, Bounded};
use crate::manifest::{
    ChunkDigests, FileExpectation, HashAlgorithm, ManifestError, OtherDigests, RangeDigest,
    Sha256Hex, MAX_CHUNKS, MAX_FILES, MIN_CHUNK_SIZE,
};
use crate::names::{case_fold, check_repo_path, escape};

/// The in-toto statement type read and written.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// The DSSE payload type of an in-toto statement.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// The model-signing predicate type written (and, with its `v1.x` successors, read).
pub const PREDICATE_TYPE: &str = "https://model_signing/signature/v1.0";
/// The predicate of `model_signing` v0.2, read for compatibility: the files are the subjects.
pub const PREDICATE_TYPE_V0_1: &str = "https://model_signing/Digests/v0.1";
/// The paths `model_signing` leaves out by default, written in `ignore_paths` (with `.cache`,
/// the Hugging Face tools' bookkeeping folder, which this program never describes).
const IGNORE_PATHS: [&str; 5] = [".cache", ".git", ".gitattributes", ".github", ".gitignore"];
/// Most `ignore_paths` a statement may list.
const MAX_IGNORE_PATHS: usize = 4096;
/// Largest shard size read exactly from a float (2^53).
const MAX_FLOAT_INT: f64 = 9_007_199_254_740_992.0;

/// An OpenSSF model-signing manifest: the statement's digests, mapped to what each file must be
/// (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenSsfDocument {
    bundle: bool,
    predicate_type: String,
    model_name: String,
    subject_sha256: Option<Sha256Hex>,
    shard_size: Option<u64>,
    ignore_paths: Vec<String>,
    single_file: bool,
    algorithm: HashAlgorithm,
    files: Vec<FileExpectation>,
}

#[derive(Deserialize)]
struct Bundle {
    #[serde(default, rename = "dsseEnvelope")]
    dsse: Option<Envelope>,
}

#[derive(Deserialize)]
struct Envelope {
    payload: String,
    #[serde(rename = "payloadType")]
    payload_type: String,
}

#[derive(Deserialize)]
struct Statement {
    #[serde(rename = "_type")]
    type_: String,
    #[serde(default)]
    subject: Bounded<Subject, MAX_FILES>,
    #[serde(rename = "predicateType")]
    predicate_type: String,
    #[serde(default)]
    predicate: Option<Predicate>,
}

#[derive(Deserialize)]
struct Subject {
    #[serde(default)]
    name: String,
    #[serde(default)]
    digest: SubjectDigest,
}

#[derive(Deserialize, Default)]
struct SubjectDigest {
    #[serde(default)]
    sha256: Option<String>,
}

#[derive(Deserialize)]
struct Predicate {
    #[serde(default)]
    serialization: Option<Serialization>,
    #[serde(default)]
    resources: Bounded<Resource, MAX_CHUNKS>,
}

#[derive(Deserialize)]
struct Serialization {
    method: String,
    hash_type: String,
    #[serde(default)]
    shard_size: Option<serde_json::Number>,
    #[serde(default)]
    ignore_paths: Bounded<String, MAX_IGNORE_PATHS>,
}

#[derive(Deserialize)]
struct Resource {
    name: String,
    algorithm: String,
    digest: String,
}

fn invalid(why: String) -> ManifestError {
    ManifestError::invalid(why)
}

fn hex256(s: &str, what: &dyn Fn() -> String) -> Result<Sha256Hex, ManifestError> {
    s.parse::<Sha256Hex>()
        .map_err(|e| invalid(format!("{}: digest '{}': {e}", what(), shown(s, 80))))
}

/// A single-segment safe name (the subject's name, standing for a model of one file).
fn check_file_name(name: &str) -> Result<(), &'static str> {
    check_repo_path(name)?;
    if name.contains('/') {
        return Err("a '/' in a model's name");
    }
    Ok(())
}

impl OpenSsfDocument {
    /// Parses a Sigstore bundle holding a DSSE envelope of an in-toto statement (the signature
    /// is not verified: see the module docs).
    pub fn parse_bundle(bytes: &[u8]) -> Result<OpenSsfDocument, ManifestError> {
        let b: Bundle = serde_json::from_slice(bytes)
            .map_err(|e| invalid(format!("malformed Sigstore bundle ({e})")))?;
        let Some(env) = b.dsse else {
            return Err(invalid(
                "a Sigstore bundle without a dsseEnvelope (it signs a blob, not an in-toto \
                 statement): it lists no file"
                    .into(),
            ));
        };
        if env.payload_type != PAYLOAD_TYPE {
            return Err(invalid(format!(
                "the bundle's payload is '{}', not an in-toto statement ({PAYLOAD_TYPE})",
                shown(&env.payload_type, 80)
            )));
        }
        let lenient = GeneralPurposeConfig::new()
            .with_decode_padding_mode(DecodePaddingMode::Indifferent)
            .with_decode_allow_trailing_bits(false);
        let standard = GeneralPurpose::new(&base64::alphabet::STANDARD, lenient);
        let url_safe = GeneralPurpose::new(&base64::alphabet::URL_SAFE, lenient);
        let payload = standard
            .decode(env.payload.as_bytes())
            .or_else(|_| url_safe.decode(env.payload.as_bytes()))
            .map_err(|e| {
                invalid(format!(
                    "the bundle's dsseEnvelope.payload is not base64 ({e})"
                ))
            })?;
        drop(env);
        OpenSsfDocument::parse_statement(&payload, true).map_err(|e| match e {
            ManifestError::Invalid { path, reason } => ManifestError::Invalid {
                path,
                reason: format!("in the bundle's statement: {reason}"),
            },
            other => other,
        })
    }

    /// Parses an in-toto statement of OpenSSF model signing (`bundle`: whether it came from a
    /// Sigstore bundle, for [`Self::is_bundle`]).
    pub fn parse_statement(bytes: &[u8], bundle: bool) -> Result<OpenSsfDocument, ManifestError> {
        let st: Statement = serde_json::from_slice(bytes)
            .map_err(|e| invalid(format!("malformed in-toto statement ({e})")))?;
        if st.type_ != STATEMENT_TYPE && st.type_ != "https://in-toto.io/Statement/v0.1" {
            return Err(invalid(format!(
                "an in-toto statement of type '{}', not {STATEMENT_TYPE}",
                shown(&st.type_, 80)
            )));
        }
        let pt = st.predicate_type.as_str();
        let mut doc = OpenSsfDocument {
            bundle,
            predicate_type: pt.to_string(),
            model_name: String::new(),
            subject_sha256: None,
            shard_size: None,
            ignore_paths: Vec::new(),
            single_file: false,
            algorithm: HashAlgorithm::Sha256,
            files: Vec::new(),
        };
        if pt == PREDICATE_TYPE_V0_1 {
            doc.files = v0_1_files(&st.subject.0)?;
            return Ok(doc);
        }
        if pt != PREDICATE_TYPE && !pt.starts_with("https://model_signing/signature/v1.") {
            return Err(invalid(format!(
                "predicate type '{}' is not OpenSSF model signing's ({PREDICATE_TYPE})",
                shown(pt, 100)
            )));
        }
        let [subject] = st.subject.0.as_slice() else {
            return Err(invalid(format!(
                "{} subjects (model signing names exactly one: the model)",
                st.subject.0.len()
            )));
        };
        let root = hex256(subject.digest.sha256.as_deref().unwrap_or(""), &|| {
            "the subject".to_string()
        })?;
        doc.model_name = subject.name.clone();
        doc.subject_sha256 = Some(root);
        let Some(pred) = st.predicate else {
            return Err(invalid("no predicate".into()));
        };
        let Some(ser) = &pred.serialization else {
            return Err(invalid("no predicate.serialization".into()));
        };
        let algorithm = match ser.hash_type.as_str() {
            "sha256" => HashAlgorithm::Sha256,
            "blake2b" => HashAlgorithm::Blake2b,
            "blake3" => HashAlgorithm::Blake3,
            other => {
                return Err(invalid(format!(
                    "hash_type '{}' (model signing writes sha256, blake2b or blake3)",
                    shown(other, 40)
                )))
            }
        };
        let shard_size = match ser.method.as_str() {
            "files" => None,
            "shards" => Some(shard_size(ser.shard_size.as_ref())?),
            other => {
                return Err(invalid(format!(
                    "serialization method '{}' (model signing writes \"files\" or \"shards\")",
                    shown(other, 40)
                )))
            }
        };
        doc.shard_size = shard_size;
        doc.ignore_paths = ser.ignore_paths.0.clone();
        doc.algorithm = algorithm;
        let sharded_alg = shard_size.map(|n| format!("{algorithm}-sharded-{n}"));
        let mut rooted = Sha256::new();
        let mut digests = Vec::with_capacity(pred.resources.0.len());
        for (i, r) in pred.resources.0.iter().enumerate() {
            let what = || format!("resource {i} ('{}')", shown(&r.name, 200));
            let alg_ok =
                r.algorithm == algorithm.name() || Some(&r.algorithm) == sharded_alg.as_ref();
            if !alg_ok {
                return Err(invalid(format!(
                    "{}: algorithm '{}' in a statement of {algorithm} digests{}",
                    what(),
                    shown(&r.algorithm, 40),
                    sharded_alg
                        .as_ref()
                        .map(|a| format!(" (here {algorithm} or {a})"))
                        .unwrap_or_default()
                )));
            }
            let d = algorithm.parse_hex(&r.digest).map_err(|e| {
                invalid(format!(
                    "{}: digest '{}': {e}",
                    what(),
                    shown(&r.digest, 80)
                ))
            })?;
            rooted.update(&d);
            digests.push(d);
        }
        if rooted.finalize()[..] != root.0[..] {
            return Err(invalid(
                "inconsistent: the subject's digest is not the SHA-256 of the resources' digests \
                 (the statement was altered or damaged)"
                    .into(),
            ));
        }
        doc.files = match shard_size {
            None => files_of(&doc.model_name, algorithm, &pred.resources.0, &digests)?,
            Some(n) => shards_of(&doc.model_name, n, algorithm, &pred.resources.0, &digests)?,
        };
        doc.single_file = pred
            .resources
            .0
            .iter()
            .any(|r| r.name == "." || r.name.starts_with(".:"));
        Ok(doc)
    }

    /// Whether it came from a Sigstore bundle (else a bare in-toto statement).
    pub fn is_bundle(&self) -> bool {
        self.bundle
    }

    /// The statement's `predicateType`.
    pub fn predicate_type(&self) -> &str {
        &self.predicate_type
    }

    /// The model's name (the subject: the name of the folder, or of the one file, that was
    /// signed); empty for the v0.1 predicate, which has none.
    pub fn model_name(&self) -> &str {
        &self.model_name
    }

    /// The statement's subject digest: the SHA-256 of every resource's digest in order, what
    /// names the signed model's content as a whole (`None` for the v0.1 predicate, which has
    /// none).
    pub fn subject_sha256(&self) -> Option<Sha256Hex> {
        self.subject_sha256
    }

    /// The shard size of a `shards` manifest.
    pub fn shard_size(&self) -> Option<u64> {
        self.shard_size
    }

    /// The algorithm of its digests (`serialization.hash_type`; SHA-256 for the v0.1
    /// predicate).
    pub fn algorithm(&self) -> HashAlgorithm {
        self.algorithm
    }

    /// The paths the signer left out (`serialization.ignore_paths`: relative to the model's
    /// folder, as `model_signing` writes them), which a verifier leaves out too.
    pub fn ignore_paths(&self) -> &[String] {
        &self.ignore_paths
    }

    /// Whether it signs a model of one file (named `.`, the file's name in the subject): such a
    /// statement holds for that file's bytes under any name.
    pub fn is_single_file(&self) -> bool {
        self.single_file
    }

    /// What each file must be, by path.
    pub fn files(&self) -> &[FileExpectation] {
        &self.files
    }

    /// The report's notes: the signature was not verified.
    pub(crate) fn notes(&self) -> Vec<String> {
        vec![if self.bundle {
            "only the digests were checked: the Sigstore signature of this bundle was NOT \
             verified (verify it with weight-inspect signature verify)"
                .to_string()
        } else {
            "only the digests were checked: an in-toto statement alone carries no signature, and \
             none was verified"
                .to_string()
        }]
    }
}

fn shard_size(n: Option<&serde_json::Number>) -> Result<u64, ManifestError> {
    let bad = || {
        invalid(format!(
            "shard_size {} is not a whole number of bytes from 1 to 2^53",
            n.map_or_else(|| "missing".to_string(), |n| shown(&n.to_string(), 40))
        ))
    };
    let n = n.ok_or_else(bad)?;
    let v = match n.as_u64() {
        Some(v) => v,
        None => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && (1.0..=MAX_FLOAT_INT).contains(&f) => f as u64,
            _ => return Err(bad()),
        },
    };
    if v == 0 || v > MAX_FLOAT_INT as u64 {
        return Err(bad());
    }
    Ok(v)
}

/// Refuses a second file of the same name, or of a name that differs only by case.
struct Names(HashMap<String, String>);

impl Names {
    fn add(&mut self, path: &str, what: &dyn Fn() -> String) -> Result<(), ManifestError> {
        if self.0.len() >= MAX_FILES {
            return Err(invalid(format!("more than {MAX_FILES} files")));
        }
        match self.0.insert(case_fold(path), path.to_string()) {
            Some(prev) if prev == path => Err(invalid(format!("{}: listed twice", what()))),
            Some(prev) => Err(invalid(format!(
                "{}: differs from '{}' only by case",
                what(),
                escape(&prev)
            ))),
            None => Ok(()),
        }
    }
}

/// The path a resource names: `.` stands for the one file of a single-file model, named by the
/// subject.
fn resource_path<'a>(
    name: &'a str,
    model: &'a str,
    what: &dyn Fn() -> String,
) -> Result<&'a str, ManifestError> {
    if name == "." {
        check_file_name(model).map_err(|why| {
            invalid(format!(
                "{}: '.' names the model's one file, but the subject's name '{}' cannot name a \
                 file: {why}",
                what(),
                shown(model, 200)
            ))
        })?;
        return Ok(model);
    }
    check_repo_path(name)
        .map_err(|why| invalid(format!("{}: path '{}': {why}", what(), shown(name, 200))))?;
    Ok(name)
}

/// A digest read for `algorithm` as SHA-256 (its length was checked when it was read).
fn as_sha256(d: &[u8]) -> Result<Sha256Hex, ManifestError> {
    <[u8; 32]>::try_from(d)
        .map(Sha256Hex)
        .map_err(|_| invalid(format!("a SHA-256 of {} bytes", d.len())))
}

fn files_of(
    model: &str,
    algorithm: HashAlgorithm,
    resources: &[Resource],
    digests: &[Vec<u8>],
) -> Result<Vec<FileExpectation>, ManifestError> {
    let mut names = Names(HashMap::new());
    let mut out = Vec::with_capacity(resources.len().min(MAX_FILES));
    for (i, (r, d)) in resources.iter().zip(digests).enumerate() {
        let what = || format!("resource {i} ('{}')", shown(&r.name, 200));
        if r.name == "." && resources.len() > 1 {
            return Err(invalid(format!(
                "{}: '.' (a model of one file) beside other files",
                what()
            )));
        }
        let path = resource_path(&r.name, model, &what)?;
        names.add(path, &what)?;
        let mut f = FileExpectation {
            path: path.to_string(),
            ..FileExpectation::default()
        };
        if algorithm == HashAlgorithm::Sha256 {
            f.sha256 = Some(as_sha256(d)?);
        } else {
            f.other = Some(OtherDigests {
                algorithm,
                whole: Some(d.clone()),
                ranges: Vec::new(),
            });
        }
        out.push(f);
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

fn shards_of(
    model: &str,
    shard_size: u64,
    algorithm: HashAlgorithm,
    resources: &[Resource],
    digests: &[Vec<u8>],
) -> Result<Vec<FileExpectation>, ManifestError> {
    struct Shard<'a> {
        start: u64,
        end: u64,
        digest: &'a [u8],
        index: usize,
    }
    let mut by_file: BTreeMap<&str, Vec<Shard>> = BTreeMap::new();
    let mut names = Names(HashMap::new());
    let mut single = None;
    for (i, (r, d)) in resources.iter().zip(digests).enumerate() {
        let what = || format!("resource {i} ('{}')", shown(&r.name, 200));
        let mut parts = r.name.split(':');
        let (Some(path), Some(start), Some(end), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid(format!(
                "{}: a shard is named path:start:end",
                what()
            )));
        };
        let num = |s: &str| -> Result<u64, ManifestError> {
            if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid(format!(
                    "{}: '{}' is not an offset",
                    what(),
                    shown(s, 40)
                )));
            }
            s.parse()
                .map_err(|_| invalid(format!("{}: offset {s} is too large", what())))
        };
        let (start, end) = (num(start)?, num(end)?);
        if start >= end {
            return Err(invalid(format!("{}: an empty or reversed shard", what())));
        }
        if *single.get_or_insert(path == ".") != (path == ".") {
            return Err(invalid(format!(
                "{}: '.' (a model of one file) beside other files",
                what()
            )));
        }
        let path = resource_path(path, model, &what)?;
        let list = by_file.entry(path).or_default();
        if list.is_empty() {
            names.add(path, &what)?;
        }
        list.push(Shard {
            start,
            end,
            digest: d,
            index: i,
        });
    }
    let mut out = Vec::with_capacity(by_file.len());
    for (path, mut shards) in by_file {
        shards.sort_by_key(|s| (s.start, s.end));
        let mut at = 0u64;
        for s in &shards {
            let what = || {
                format!(
                    "resource {} ('{}:{}:{}')",
                    s.index,
                    escape(path),
                    s.start,
                    s.end
                )
            };
            if s.start > at {
                return Err(invalid(format!(
                    "{}: bytes {at}..{} of '{}' are in no shard (a gap)",
                    what(),
                    s.start,
                    escape(path)
                )));
            }
            if s.start < at {
                return Err(invalid(format!(
                    "{}: overlaps the shard that ends at byte {at}",
                    what()
                )));
            }
            at = s.end;
        }
        let last = shards.len() - 1;
        let uniform = shards.iter().enumerate().all(|(i, s)| {
            let len = s.end - s.start;
            if i < last {
                len == shard_size
            } else {
                len <= shard_size
            }
        });
        let mut f = FileExpectation {
            path: path.to_string(),
            size: Some(at),
            ..FileExpectation::default()
        };
        if algorithm != HashAlgorithm::Sha256 {
            f.other = Some(OtherDigests {
                algorithm,
                whole: None,
                ranges: shards
                    .iter()
                    .map(|s| (s.start..s.end, s.digest.to_vec()))
                    .collect(),
            });
        } else if uniform {
            f.chunks = Some(ChunkDigests {
                chunk_size: shard_size,
                digests: shards
                    .iter()
                    .map(|s| as_sha256(s.digest))
                    .collect::<Result<_, _>>()?,
            });
        } else {
            f.ranges = shards
                .iter()
                .map(|s| {
                    Ok(RangeDigest {
                        range: s.start..s.end,
                        sha256: as_sha256(s.digest)?,
                    })
                })
                .collect::<Result<_, ManifestError>>()?;
        }
        out.push(f);
    }
    Ok(out)
}

fn v0_1_files(subjects: &[Subject]) -> Result<Vec<FileExpectation>, ManifestError> {
    let mut names = Names(HashMap::new());
    let mut out = Vec::with_capacity(subjects.len());
    for (i, s) in subjects.iter().enumerate() {
        let what = || format!("subject {i} ('{}')", shown(&s.name, 200));
        check_repo_path(&s.name).map_err(|why| invalid(format!("{}: path: {why}", what())))?;
        let Some(d) = s.digest.sha256.as_deref() else {
            return Err(invalid(format!(
                "{}: no sha256 digest (this program checks only SHA-256 digests)",
                what()
            )));
        };
        let d = hex256(d, &what)?;
        names.add(&s.name, &what)?;
        out.push(FileExpectation {
            path: s.name.clone(),
            sha256: Some(d),
            ..FileExpectation::default()
        });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Writes an unsigned in-toto statement of OpenSSF model signing for `paths` (chosen and named
/// as [`crate::manifest::create`] does): `files` serialization, or `shards` with `shard_size`
/// (at least [`MIN_CHUNK_SIZE`]). What `model_signing` leaves out by default (`.git`,
/// `.gitattributes`, `.github`, `.gitignore` at the top of the folder, and `.cache`) is left out
/// and listed in `ignore_paths`; one file alone is named `.` with the subject carrying its
/// name, as `model_signing` names it. The statement is not signed: `model_signing` can sign it,
/// and this program can check files against it.
pub fn create_in_toto(paths: &[PathBuf], shard_size: Option<u64>) -> Result<String, ManifestError> {
    create_in_toto_with(
        paths,
        &InTotoOptions {
            shard_size,
            ..InTotoOptions::default()
        },
    )
}

/// How [`create_in_toto_with`] writes a statement.
#[derive(Debug, Clone, Default)]
pub struct InTotoOptions {
    /// Cut files into shards of this many bytes (`shards` serialization); `None`, `files`.
    pub shard_size: Option<u64>,
    /// The digests' algorithm (`model_signing` writes BLAKE3 by file only: with a shard size,
    /// refused).
    pub algorithm: HashAlgorithm,
    /// Paths relative to the model's folder to leave out too (a file, or a folder and
    /// everything below it), listed in `ignore_paths` after the defaults; a signature written
    /// inside the folder is one.
    pub ignore: Vec<String>,
}

/// [`create_in_toto`], as `opts` say.
pub fn create_in_toto_with(
    paths: &[PathBuf],
    opts: &InTotoOptions,
) -> Result<String, ManifestError> {
    let (shard_size, algorithm, ignore) = (opts.shard_size, opts.algorithm, &opts.ignore);
    if algorithm == HashAlgorithm::Blake3 && shard_size.is_some() {
        return Err(ManifestError::Input(
            "BLAKE3 digests are written by file (model_signing reads no BLAKE3 shards: it hashes \
             a whole file on every core instead); leave out the shard size"
                .into(),
        ));
    }
    if let Some(n) = shard_size {
        if n < MIN_CHUNK_SIZE || n > MAX_FLOAT_INT as u64 {
            return Err(ManifestError::Input(format!(
                "shard size {n} is outside {MIN_CHUNK_SIZE}..=2^53 bytes"
            )));
        }
    }
    let ignored = |rel: &str| {
        IGNORE_PATHS.iter().any(|i| is_within(rel, i)) || ignore.iter().any(|i| is_within(rel, i))
    };
    let sel = match paths {
        // A folder: everything below it but what is left out (and listed in `ignore_paths`),
        // as `model_signing` signs it, so that a verifier finds nothing unsigned.
        [dir] if dir.is_dir() => {
            let walk = crate::manifest::create::walk(dir, &ignored)?;
            if let Some((rel, what)) = walk.other.first() {
                return Err(ManifestError::Input(format!(
                    "'{}' in {} is {what}: it cannot be signed (model_signing refuses it too); \
                     leave it out (--ignore-paths) or replace it with what it stands for",
                    escape(rel),
                    dir.display()
                )));
            }
            for (rel, _) in &walk.files {
                check_repo_path(rel).map_err(|why| {
                    ManifestError::Input(format!(
                        "cannot name '{}' in a statement: {why} (leave it out: --ignore-paths)",
                        escape(rel)
                    ))
                })?;
            }
            crate::manifest::create::Selection {
                base: dir.clone(),
                named: walk.files,
                single_file: false,
            }
        }
        _ => crate::manifest::create::select(paths)?,
    };
    let named: Vec<&(String, PathBuf)> = sel.named.iter().filter(|(r, _)| !ignored(r)).collect();
    if named.is_empty() {
        return Err(ManifestError::Input("no file to describe".into()));
    }
    use rayon::prelude::*;
    let symlinks = named
        .iter()
        .any(|(_, path)| std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()));
    // Files in parallel, each hashed once: whole for `files`, by shard for `shards`.
    let mut files = named
        .par_iter()
        .map(|(rel, path)| {
            crate::manifest::create::file_digests(path, shard_size, algorithm).map(
                |(size, digests)| Hashed {
                    path: rel.clone(),
                    size,
                    digests,
                },
            )
        })
        .collect::<Result<Vec<Hashed>, ManifestError>>()?;
    // model_signing orders resources by path segments, then offsets.
    files.sort_by(|a, b| a.path.split('/').cmp(b.path.split('/')));
    let model_name = if sel.single_file {
        files[0].path.clone()
    } else {
        folder_name(&sel.base)
    };
    let mut resources = Vec::new();
    let mut rooted = Sha256::new();
    for f in &files {
        let name = if sel.single_file {
            "."
        } else {
            f.path.as_str()
        };
        match shard_size {
            None => {
                for d in &f.digests {
                    rooted.update(d);
                    resources.push(serde_json::json!({
                        "name": name, "algorithm": algorithm.name(), "digest": hex::encode(d)
                    }));
                }
            }
            Some(n) => {
                for (i, d) in f.digests.iter().enumerate() {
                    let start = i as u64 * n;
                    let r = start..(start + n).min(f.size);
                    rooted.update(d);
                    resources.push(serde_json::json!({
                        "name": format!("{name}:{}:{}", r.start, r.end),
                        "algorithm": format!("{algorithm}-sharded-{n}"),
                        "digest": hex::encode(d),
                    }));
                }
            }
        }
    }
    let root = Sha256Hex(rooted.finalize().into());
    let mut serialization = serde_json::json!({
        "method": if shard_size.is_some() { "shards" } else { "files" },
        "hash_type": algorithm.name(),
    });
    if let Some(n) = shard_size {
        serialization["shard_size"] = n.into();
    }
    serialization["allow_symlinks"] = symlinks.into();
    let mut listed: Vec<&str> = IGNORE_PATHS.to_vec();
    listed.extend(
        ignore
            .iter()
            .map(String::as_str)
            .filter(|i| !IGNORE_PATHS.contains(i)),
    );
    serialization["ignore_paths"] = serde_json::json!(listed);
    let statement = serde_json::json!({
        "_type": STATEMENT_TYPE,
        "subject": [{"name": model_name, "digest": {"sha256": root.to_string()}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {"serialization": serialization, "resources": resources},
    });
    let mut s = serde_json::to_string_pretty(&statement).unwrap_or_default();
    s.push('\n');
    Ok(s)
}

/// A file of a statement being written: its size, and its one digest (`files`) or its shards'.
struct Hashed {
    path: String,
    size: u64,
    digests: Vec<Vec<u8>>,
}

/// Whether the relative path `rel` is `prefix` or below it (`prefix` a relative path, `/`
/// separated; a trailing `/` and a leading `./` ignored).
pub(crate) fn is_within(rel: &str, prefix: &str) -> bool {
    let p = prefix.trim_start_matches("./").trim_end_matches('/');
    !p.is_empty() && (rel == p || rel.strip_prefix(p).is_some_and(|r| r.starts_with('/')))
}

/// The final component of a folder (of its absolute form for `.`), as `model_signing` names a
/// model.
fn folder_name(dir: &Path) -> String {
    let named = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    named(dir)
        .or_else(|| dir.canonicalize().ok().as_deref().and_then(named))
        .unwrap_or_else(|| "model".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn d(b: u8) -> Sha256Hex {
        Sha256Hex([b; 32])
    }

    /// A statement of `resources` (name, digest) with a consistent subject digest.
    fn statement(method: &str, shard_size: Value, resources: &[(&str, Sha256Hex)]) -> Value {
        let mut h = Sha256::new();
        for (_, x) in resources {
            h.update(x.0);
        }
        let alg = match &shard_size {
            Value::Null => "sha256".to_string(),
            n => format!("sha256-sharded-{}", n.as_f64().unwrap() as u64),
        };
        json!({
            "_type": STATEMENT_TYPE,
            "subject": [{"name": "model", "digest": {"sha256": hex::encode(h.finalize())}}],
            "predicateType": PREDICATE_TYPE,
            "predicate": {
                "serialization": {"method": method, "hash_type": "sha256", "shard_size": shard_size,
                                  "allow_symlinks": false},
                "resources": resources.iter().map(|(n, x)| json!({
                    "name": n, "algorithm": alg, "digest": x.to_string()
                })).collect::<Vec<_>>(),
            }
        })
    }

    fn parse(v: &Value) -> Result<OpenSsfDocument, ManifestError> {
        OpenSsfDocument::parse_statement(&serde_json::to_vec(v).unwrap(), false)
    }

    fn err(v: &Value) -> String {
        parse(v).unwrap_err().to_string()
    }

    #[test]
    fn files_and_folder_relative_names() {
        let v = statement(
            "files",
            Value::Null,
            &[("a.bin", d(1)), ("sub/b.txt", d(2))],
        );
        let doc = parse(&v).unwrap();
        assert_eq!(doc.model_name(), "model");
        let f = doc.files();
        assert_eq!((f[0].path.as_str(), f[0].sha256), ("a.bin", Some(d(1))));
        assert_eq!(f[1].path, "sub/b.txt");
        assert!(f[0].chunks.is_none() && f[0].size.is_none());
        // A model of one file: '.' is the subject's name.
        let mut v = statement("files", Value::Null, &[(".", d(1))]);
        v["subject"][0]["name"] = "m.gguf".into();
        assert_eq!(parse(&v).unwrap().files()[0].path, "m.gguf");
        v["subject"][0]["name"] = "../m.gguf".into();
        assert!(err(&v).contains("cannot name a file"));
    }

    #[test]
    fn shards_become_chunks_with_a_float_shard_size() {
        let v = statement(
            "shards",
            json!(100000.0),
            &[
                ("w.bin:100000:200000", d(2)),
                ("w.bin:0:100000", d(1)),
                ("w.bin:200000:250000", d(3)),
                ("x:0:5", d(4)),
            ],
        );
        let doc = parse(&v).unwrap();
        assert_eq!(doc.shard_size(), Some(100_000));
        let w = &doc.files()[0];
        assert_eq!(w.size, Some(250_000));
        let c = w.chunks.as_ref().unwrap();
        assert_eq!(c.chunk_size, 100_000);
        assert_eq!(c.digests, [d(1), d(2), d(3)]);
        assert!(c.fits(250_000));
        assert_eq!(doc.files()[1].size, Some(5));
        // Contiguous but not uniform: ranges.
        let v = statement(
            "shards",
            json!(100000),
            &[("w.bin:0:10", d(1)), ("w.bin:10:30", d(2))],
        );
        let doc = parse(&v).unwrap();
        let w = &doc.files()[0];
        assert!(w.chunks.is_none());
        assert_eq!(w.ranges[1].range, 10..30);
        assert_eq!(w.size, Some(30));
    }

    /// A statement of BLAKE2b (files, shards) or BLAKE3 digests: read into
    /// [`FileExpectation::other`], the subject still the SHA-256 of the digests.
    #[test]
    fn blake2b_and_blake3_statements_are_read_as_other_digests() {
        let b2 = |b: u8| hex::encode([b; 64]);
        let b3 = hex::encode([3u8; 32]);
        let mk = |method: &str, hash: &str, shard: Value, res: Vec<(String, String, String)>| {
            let mut h = Sha256::new();
            for (_, _, x) in &res {
                h.update(hex::decode(x).unwrap());
            }
            json!({
                "_type": STATEMENT_TYPE,
                "subject": [{"name": "m", "digest": {"sha256": hex::encode(h.finalize())}}],
                "predicateType": PREDICATE_TYPE,
                "predicate": {
                    "serialization": {"method": method, "hash_type": hash, "shard_size": shard},
                    "resources": res.iter().map(|(n, a, x)| json!({
                        "name": n, "algorithm": a, "digest": x})).collect::<Vec<_>>(),
                },
            })
        };
        let parse =
            |v: &Value| OpenSsfDocument::parse_statement(v.to_string().as_bytes(), false).unwrap();
        let doc = parse(&mk(
            "files",
            "blake3",
            Value::Null,
            vec![("a".into(), "blake3".into(), b3.clone())],
        ));
        assert_eq!(doc.algorithm(), HashAlgorithm::Blake3);
        let f = &doc.files()[0];
        assert_eq!((f.sha256, f.chunks.is_some()), (None, false));
        let o = f.other.as_ref().unwrap();
        assert_eq!(o.algorithm, HashAlgorithm::Blake3);
        assert_eq!(o.whole.as_deref(), Some(&[3u8; 32][..]));
        let alg = "blake2b-sharded-10".to_string();
        let doc = parse(&mk(
            "shards",
            "blake2b",
            json!(10.0),
            vec![
                ("w:0:10".into(), alg.clone(), b2(1)),
                ("w:10:15".into(), alg, b2(2)),
            ],
        ));
        let f = &doc.files()[0];
        assert_eq!(f.size, Some(15));
        assert!(f.covered() && f.ranges.is_empty() && f.chunks.is_none());
        let o = f.other.as_ref().unwrap();
        assert_eq!(o.whole, None);
        assert_eq!(
            o.ranges,
            vec![(0..10, vec![1u8; 64]), (10..15, vec![2u8; 64])]
        );
    }

    #[test]
    fn hostile_statements_are_refused() {
        let shards = |r: &[(&str, Sha256Hex)]| statement("shards", json!(10.0), r);
        assert!(err(&shards(&[("w:0:10", d(1)), ("w:20:25", d(2))])).contains("gap"));
        assert!(err(&shards(&[("w:5:10", d(1))])).contains("gap"));
        assert!(err(&shards(&[("w:0:10", d(1)), ("w:5:15", d(2))])).contains("overlaps"));
        assert!(err(&shards(&[("w:0:10", d(1)), ("w:0:10", d(2))])).contains("overlaps"));
        assert!(err(&shards(&[("w:10:10", d(1))])).contains("empty or reversed"));
        assert!(err(&shards(&[("w:0", d(1))])).contains("path:start:end"));
        assert!(err(&shards(&[("w:0:1:2", d(1))])).contains("path:start:end"));
        assert!(err(&shards(&[("w:-1:2", d(1))])).contains("not an offset"));
        assert!(err(&shards(&[("w:0:99999999999999999999", d(1))])).contains("too large"));
        assert!(err(&shards(&[("../w:0:10", d(1))])).contains("'..'"));
        assert!(err(&shards(&[(".:0:10", d(1)), ("w:0:10", d(1))])).contains("beside"));
        let files = |r: &[(&str, Sha256Hex)]| statement("files", Value::Null, r);
        assert!(err(&files(&[("/etc/passwd", d(1))])).contains("absolute"));
        assert!(err(&files(&[("a\\..\\b", d(1))])).contains("backslash"));
        assert!(err(&files(&[("a", d(1)), ("a", d(2))])).contains("listed twice"));
        assert!(err(&files(&[("a", d(1)), ("A", d(2))])).contains("only by case"));
        let mut v = files(&[("a", d(1))]);
        v["subject"][0]["digest"]["sha256"] = d(9).to_string().into();
        assert!(err(&v).contains("inconsistent"));
        let mut v = files(&[("a", d(1))]);
        v["predicate"]["serialization"]["hash_type"] = "md5".into();
        assert!(err(&v).contains("hash_type 'md5'"));
        // A resource of another algorithm than the statement's, or of the wrong length.
        let mut v = files(&[("a", d(1))]);
        v["predicate"]["resources"][0]["algorithm"] = "blake3".into();
        assert!(err(&v).contains("algorithm 'blake3' in a statement of sha256 digests"));
        let mut v = files(&[("a", d(1))]);
        v["predicate"]["serialization"]["hash_type"] = "blake2b".into();
        v["predicate"]["resources"][0]["algorithm"] = "blake2b".into();
        assert!(err(&v).contains("a BLAKE2b has 128 hex digits, not 64"));
        let mut v = files(&[("a", d(1))]);
        v["predicate"]["resources"][0]["digest"] = "zz".into();
        assert!(err(&v).contains("resource 0 ('a')"));
        for bad in [
            json!(0),
            json!(-5),
            json!(1.5),
            json!(1e300),
            json!("10"),
            Value::Null,
        ] {
            let mut v = shards(&[("w:0:10", d(1))]);
            v["predicate"]["serialization"]["shard_size"] = bad.clone();
            assert!(parse(&v).is_err(), "{bad}");
        }
        let mut v = files(&[("a", d(1))]);
        v["predicateType"] = "https://model_signing/signature/v2.0".into();
        assert!(err(&v).contains("predicate type"));
        v["predicateType"] = "https://model_signing/signature/v1.1".into();
        assert!(parse(&v).is_ok());
        let mut v = files(&[("a", d(1))]);
        v["predicate"]["serialization"]["method"] = "tree".into();
        assert!(err(&v).contains("serialization method"));
        let mut v = files(&[("a", d(1))]);
        v["subject"] = json!([]);
        assert!(err(&v).contains("0 subjects"));
        let mut v = files(&[("a", d(1))]);
        v["_type"] = "x".into();
        assert!(err(&v).contains("type 'x'"));
        // Deep nesting in an ignored field: an error, never a stack overflow.
        let deep = format!(
            "{{\"_type\": {}1{}}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert!(OpenSsfDocument::parse_statement(deep.as_bytes(), false).is_err());
    }

    #[test]
    fn bundles_and_their_payloads() {
        let st = statement("files", Value::Null, &[("a", d(1))]);
        let payload = base64::engine::general_purpose::STANDARD.encode(st.to_string());
        let bundle = |payload: &str, ty: &str| {
            serde_json::to_vec(&json!({
                "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
                "verificationMaterial": {"publicKey": {"hint": "x"}, "tlogEntries": []},
                "dsseEnvelope": {"payload": payload, "payloadType": ty,
                                  "signatures": [{"sig": "AAAA", "keyid": ""}]}
            }))
            .unwrap()
        };
        let doc = OpenSsfDocument::parse_bundle(&bundle(&payload, PAYLOAD_TYPE)).unwrap();
        assert!(doc.is_bundle());
        assert!(doc.notes()[0].contains("NOT verified"));
        let e = OpenSsfDocument::parse_bundle(&bundle("@@@not base64", PAYLOAD_TYPE)).unwrap_err();
        assert!(e.to_string().contains("not base64"), "{e}");
        let e = OpenSsfDocument::parse_bundle(&bundle(&payload, "text/plain")).unwrap_err();
        assert!(e.to_string().contains("not an in-toto statement"), "{e}");
        let junk = base64::engine::general_purpose::STANDARD.encode("{\"_type\": 1}");
        let e = OpenSsfDocument::parse_bundle(&bundle(&junk, PAYLOAD_TYPE)).unwrap_err();
        assert!(e.to_string().contains("in the bundle's statement"), "{e}");
        let e = OpenSsfDocument::parse_bundle(br#"{"messageSignature": {}}"#).unwrap_err();
        assert!(e.to_string().contains("without a dsseEnvelope"), "{e}");
    }

    #[test]
    fn the_v0_1_predicate_lists_files_as_subjects() {
        let v = json!({
            "_type": STATEMENT_TYPE,
            "subject": [{"name": "b", "digest": {"sha256": d(2).to_string()}},
                        {"name": "a", "digest": {"sha256": d(1).to_string()}}],
            "predicateType": PREDICATE_TYPE_V0_1,
            "predicate": {"unused": true},
        });
        let doc = parse(&v).unwrap();
        assert_eq!(doc.files()[0].path, "a");
        assert_eq!(doc.files()[1].sha256, Some(d(2)));
    }
}
