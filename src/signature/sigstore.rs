//! Sigstore's keyless signatures, verified offline: a Fulcio certificate for an OIDC identity,
//! and a Rekor transparency-log entry proving the signature was logged while the certificate was
//! valid — checked against a trusted root (the instance's `trusted_root.json`) without asking
//! Fulcio or Rekor anything.
//!
//! In order, for the bundle's first log entry:
//! 1. The log: its key (ECDSA for Rekor v1, Ed25519 for Rekor v2) is the trusted root's log
//!    whose id the entry names, valid when the signature was made: the times the bundle's RFC
//!    3161 timestamps vouch for (`timestamp.rs`: each must hold, against the trusted root's
//!    timestamping authorities) and the entry's time when its promise signs it (Rekor v1; the
//!    inclusion proof does not cover the time) — at least one.
//!    The entry's signed promise (the log's signature over its body, time, id and index, as
//!    canonical JSON) must verify with it; its inclusion proof must lead from the entry's leaf
//!    hash to the proof's root, and the checkpoint (a signed note naming that tree size and
//!    root; witnesses' cosignatures beside the log's are left aside) must be signed by the same
//!    log. A bundle of v0.1 must carry the promise, one of v0.2 or later the proof.
//! 2. The entry is this signature: a `dsse` 0.0.1 entry (Rekor v1) whose payload hash is the
//!    SHA-256 of the envelope's payload, whose one signature is the envelope's, and whose
//!    verifier is the bundle's signing certificate; or a `hashedrekord` 0.0.2 entry (Rekor v2)
//!    of the SHA-256 of the envelope's PAE, its signature and its certificate.
//! 3. The certificate: it chains, through the trusted root's certificate authorities, to one
//!    of their roots at each time the signature was made (the certificate lives minutes; the
//!    log or the timestamps say when it was used), and may sign code (extended key usage
//!    `codeSigning`); one of its
//!    embedded certificate-transparency timestamps (SCTs) is signed by a CT log of the trusted
//!    root, over the certificate as it was submitted (the precertificate's TBS).
//! 4. The identity: its subject alternative name (an email or a URI) is the identity asked for,
//!    and its OIDC issuer extension (1.3.6.1.4.1.57264.1.8, or the older .1.1) the issuer asked
//!    for; both compared exactly.
//! 5. The envelope's signature verifies with the certificate's key.
//!
//! **Why this is ours and not `sigstore-verify`.** sigstore-rust's `sigstore-verify` 0.15.1
//! (aws-lc-rs, rustls-webpki, x509-cert: this crate's own stack) was run on every keyless case
//! the tests have — the real pypi-attestations bundles and PEP 740 attestations and their
//! tampered forms, the conformance suite's DSSE and Rekor v2 cases, the promise-less time, the
//! RFC 3161 cases and the hostile DER inputs (74 cases, issue 48). It agreed on 72 and got two
//! wrong, each against a rule this crate keeps: it accepts a bundle whose chain carries its own
//! root (the suite's `bundle-with-root-cert`), and it allocates the length a certificate's DER
//! declares before checking it (256 MiB for a 700-byte certificate in a bundle, reachable
//! without any valid signature; mutated certificates made it allocate up to 193 MiB). It would
//! add 15 crates (jiff among them; about 30 s of compile on two cores). It is worth taking once
//! it bounds its DER reads and refuses a root in the chain; until then the checks here stay,
//! and [`super::der`]'s length check would have to stay in front of it anyway.

use std::path::Path;

use base64::Engine as _;
use rustls_pki_types::{CertificateDer, UnixTime};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use x509_cert::der::asn1::{Ia5StringRef, ObjectIdentifier, Utf8StringRef};
use x509_cert::der::{Decode as _, Encode as _};
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{ExtendedKeyUsage, SubjectAltName};
use x509_cert::Certificate;

use super::bundle::{Bundle, Material, TlogEntry};
use super::key::{read_at_most, Hash, PublicKey};
use super::{CertificateSigner, SignatureError, Signer, SigningMethod};
use crate::manifest::interop::{shown, Bounded};

const CODE_SIGNING: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.3.3");
const FULCIO_ISSUER_V2: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.57264.1.8");
const FULCIO_ISSUER_V1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.57264.1.1");
const SCT_LIST: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.11129.2.4.2");
/// The largest trusted root read.
const MAX_TRUSTED_ROOT_BYTES: u64 = 4 << 20;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRoot {
    #[serde(default)]
    tlogs: Bounded<RawLog, 64>,
    #[serde(default)]
    certificate_authorities: Bounded<RawCa, 64>,
    #[serde(default)]
    ctlogs: Bounded<RawLog, 64>,
    #[serde(default)]
    timestamp_authorities: Bounded<RawCa, 64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawLog {
    public_key: RawKey,
    log_id: RawKeyId,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawKey {
    raw_bytes: String,
    #[serde(default)]
    valid_for: Option<RawValidity>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawKeyId {
    key_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawCa {
    cert_chain: RawChain,
    #[serde(default)]
    valid_for: Option<RawValidity>,
}

#[derive(Deserialize)]
struct RawChain {
    certificates: Bounded<RawCert, 16>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawCert {
    raw_bytes: String,
}

#[derive(Deserialize)]
struct RawValidity {
    #[serde(default)]
    start: Option<String>,
    #[serde(default)]
    end: Option<String>,
}

/// When something in a trusted root may be used: seconds since the epoch, either end open.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Validity {
    start: Option<u64>,
    end: Option<u64>,
}

impl Validity {
    fn read(v: Option<&RawValidity>) -> Result<Validity, String> {
        let at = |s: &Option<String>| -> Result<Option<u64>, String> {
            s.as_deref()
                .map(|t| {
                    humantime::parse_rfc3339_weak(t.trim_end_matches('Z'))
                        .map_err(|e| format!("time '{}': {e}", shown(t, 40)))
                        .and_then(|t| {
                            t.duration_since(std::time::UNIX_EPOCH)
                                .map(|d| d.as_secs())
                                .map_err(|e| e.to_string())
                        })
                })
                .transpose()
        };
        Ok(match v {
            None => Validity::default(),
            // A period is from a time on: one without its start says nothing usable.
            Some(RawValidity { start: None, .. }) => {
                return Err("a validity period (validFor) without its start".into())
            }
            Some(v) => Validity {
                start: at(&v.start)?,
                end: at(&v.end)?,
            },
        })
    }

    pub(super) fn covers(&self, t: u64) -> bool {
        self.start.is_none_or(|s| s <= t) && self.end.is_none_or(|e| t <= e)
    }
}

/// A log's key: ECDSA (Rekor v1, CT logs) or Ed25519 (Rekor v2).
#[derive(Debug, Clone)]
enum LogKey {
    Ec(PublicKey),
    Ed25519(Vec<u8>),
}

/// Ed25519's OID (RFC 8410).
const ED25519: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.112");

impl LogKey {
    fn from_spki(der: &[u8]) -> Result<LogKey, String> {
        match PublicKey::from_spki(der) {
            Ok(k) => Ok(LogKey::Ec(k)),
            Err(why) => {
                let spki = x509_cert::spki::SubjectPublicKeyInfoRef::from_der(der)
                    .map_err(|e| format!("not a DER SubjectPublicKeyInfo ({e})"))?;
                match spki.subject_public_key.as_bytes() {
                    Some(raw) if spki.algorithm.oid == ED25519 && raw.len() == 32 => {
                        Ok(LogKey::Ed25519(raw.to_vec()))
                    }
                    _ => Err(why),
                }
            }
        }
    }

    /// Whether `signature` is this key's over `message` (`hash`: ECDSA's digest).
    fn verifies(&self, message: &[u8], signature: &[u8], hash: Hash) -> bool {
        match self {
            LogKey::Ec(k) => k.verifies(message, signature, hash),
            LogKey::Ed25519(raw) => {
                use aws_lc_rs::signature::{UnparsedPublicKey, ED25519 as ED25519_ALG};
                UnparsedPublicKey::new(&ED25519_ALG, raw)
                    .verify(message, signature)
                    .is_ok()
            }
        }
    }
}

#[derive(Debug, Clone)]
struct Log {
    id: Vec<u8>,
    key: LogKey,
    valid: Validity,
}

/// A certificate authority (Fulcio) or a timestamping authority of the trusted root.
#[derive(Debug, Clone)]
pub(super) struct Authority {
    /// The chain, the issuing (or timestamping) certificate first and the root last.
    pub(super) chain: Vec<Vec<u8>>,
    pub(super) valid: Validity,
}

/// A Sigstore instance's trusted root (`trusted_root.json`): its transparency logs' keys and
/// its certificate authorities, each with when it may be used.
#[derive(Debug, Clone)]
pub struct TrustedRoot {
    logs: Vec<Log>,
    authorities: Vec<Authority>,
    ct_logs: Vec<Log>,
    timestamp_authorities: Vec<Authority>,
}

fn b64(s: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| format!("not base64 ({e})"))
}

impl TrustedRoot {
    /// Reads a trusted root file (at most 4 MiB).
    pub fn read(path: &Path) -> Result<TrustedRoot, SignatureError> {
        let bytes = read_at_most(path, MAX_TRUSTED_ROOT_BYTES)?;
        TrustedRoot::parse(&bytes).map_err(|why| SignatureError::material(path, why))
    }

    /// Parses a trusted root's JSON; the reason when it cannot be used.
    pub fn parse(bytes: &[u8]) -> Result<TrustedRoot, String> {
        let raw: RawRoot = serde_json::from_slice(bytes)
            .map_err(|e| format!("not a Sigstore trusted root ({e})"))?;
        // A log whose key is neither an EC nor an Ed25519 key is left out: its entries are
        // refused as those of a log the root does not hold.
        let logs_of = |raw: &[RawLog]| -> Result<Vec<Log>, String> {
            let mut out = Vec::new();
            for l in raw {
                let Ok(key) = LogKey::from_spki(&b64(&l.public_key.raw_bytes)?) else {
                    continue;
                };
                out.push(Log {
                    id: b64(&l.log_id.key_id)?,
                    key,
                    valid: Validity::read(l.public_key.valid_for.as_ref())?,
                });
            }
            Ok(out)
        };
        let logs = logs_of(&raw.tlogs.0)?;
        let ct_logs = logs_of(&raw.ctlogs.0)?;
        let authorities_of = |raw: &[RawCa]| -> Result<Vec<Authority>, String> {
            let mut out = Vec::new();
            for ca in raw {
                let chain = ca
                    .cert_chain
                    .certificates
                    .0
                    .iter()
                    .map(|c| b64(&c.raw_bytes))
                    .collect::<Result<Vec<_>, _>>()?;
                if !chain.is_empty() {
                    out.push(Authority {
                        chain,
                        valid: Validity::read(ca.valid_for.as_ref())?,
                    });
                }
            }
            Ok(out)
        };
        let authorities = authorities_of(&raw.certificate_authorities.0)?;
        let timestamp_authorities = authorities_of(&raw.timestamp_authorities.0)?;
        if logs.is_empty() || authorities.is_empty() {
            return Err(
                "a trusted root without a transparency log (with an EC or Ed25519 key) or a \
                 certificate authority"
                    .into(),
            );
        }
        Ok(TrustedRoot {
            logs,
            authorities,
            ct_logs,
            timestamp_authorities,
        })
    }
}

/// Whom a keyless signature must come from: an identity, as its OIDC issuer vouched for it,
/// under a trusted root.
#[derive(Debug, Clone)]
pub struct KeylessPolicy {
    /// The instance's trusted root.
    pub root: TrustedRoot,
    /// The identity: an email address, or a URI (a CI workflow's).
    pub identity: String,
    /// The OIDC issuer that vouched for it (`https://accounts.google.com`,
    /// `https://token.actions.githubusercontent.com`…).
    pub issuer: String,
}

fn refused(reason: impl Into<String>) -> SignatureError {
    SignatureError::Untrusted {
        reason: reason.into(),
    }
}

/// Verifies a keyless bundle against `policy` (see the module docs): the signer, once every
/// check holds.
pub(crate) fn verify(b: &Bundle, policy: &KeylessPolicy) -> Result<Signer, SignatureError> {
    let Material::Certificates(ders) = &b.material else {
        return Err(SignatureError::Method {
            reason: "it was signed with a bare key, not by an identity: verify it with the \
                     public key"
                .into(),
        });
    };
    let leaf_der = &ders[0];
    let Some(entry) = b.tlog_entries.first() else {
        return Err(refused(
            "no transparency-log entry: a keyless signature must have been logged",
        ));
    };
    let log = log_of(entry, &policy.root)?;
    let times = signed_at(entry, b, &policy.root)?;
    check_entry(entry, log, b.version, &times)?;
    check_body(entry, b, leaf_der)?;
    let leaf = super::der::certificate(leaf_der)
        .map_err(|e| SignatureError::bundle(format!("the signing certificate: {e}")))?;
    let mut chained = None;
    for &time in &times {
        chained = Some(check_chain(leaf_der, &ders[1..], &policy.root, time)?);
    }
    let Some((root_subject, issuer_der)) = chained else {
        return Err(refused("no time the signature was made at"));
    };
    check_scts(&leaf, &issuer_der, &policy.root)?;
    let eku = super::der::extension::<ExtendedKeyUsage>(&leaf).map_err(|e| {
        SignatureError::bundle(format!("the signing certificate's extended key usage: {e}"))
    })?;
    if !eku.is_some_and(|u| u.0.contains(&CODE_SIGNING)) {
        return Err(refused(
            "the signing certificate may not sign code (no codeSigning usage)",
        ));
    }
    let (identity, issuer) = identity_of(&leaf)?;
    if identity != policy.identity {
        return Err(refused(format!(
            "signed by '{}', not by '{}'",
            shown(&identity, 200),
            shown(&policy.identity, 200)
        )));
    }
    if issuer != policy.issuer {
        return Err(refused(format!(
            "the identity was vouched for by '{}', not by '{}'",
            shown(&issuer, 200),
            shown(&policy.issuer, 200)
        )));
    }
    let key = super::der::certificate_key(&leaf)
        .map_err(|why| refused(format!("the signing certificate's key: {why}")))?;
    if !key.verifies(
        &super::bundle::pae(&b.payload),
        &b.signature,
        key.curve().hash(),
    ) {
        return Err(SignatureError::Invalid {
            with: "the signing certificate's key".into(),
        });
    }
    Ok(Signer {
        method: SigningMethod::Sigstore,
        fingerprint: hex::encode(Sha256::digest(leaf_der)),
        curve: key.curve().name().to_string(),
        certificate: Some(CertificateSigner {
            subject: identity,
            issuer,
            root: root_subject,
        }),
    })
}

/// When the signature was made, as the bundle proves it: the times its RFC 3161 timestamps
/// vouch for (each must hold), and the log entry's time when the log signed it (its promise,
/// verified with the entry: the inclusion proof does not cover the time). At least one; the
/// log and the certificate must have been valid at each. A Rekor v2 entry records no time, so
/// its time is its timestamps'.
fn signed_at(e: &TlogEntry, b: &Bundle, root: &TrustedRoot) -> Result<Vec<u64>, SignatureError> {
    let mut times = Vec::with_capacity(b.timestamps.len() + 1);
    for (i, ts) in b.timestamps.iter().enumerate() {
        if b.timestamps[..i].contains(ts) {
            return Err(refused(format!("timestamp {i} is there twice")));
        }
        let t = super::timestamp::verify(ts, &b.signature, &root.timestamp_authorities)
            .map_err(|why| refused(format!("timestamp {i} does not hold: {why}")))?;
        times.push(t);
    }
    if let (Some(t), Some(_)) = (e.integrated_time, &e.promise) {
        times.push(t);
    }
    if times.is_empty() {
        return Err(refused(if e.integrated_time.is_some() {
            "nothing proves when it was signed: the log entry's time is signed only by its \
             promise, which the bundle lacks, and it carries no RFC 3161 timestamp"
        } else {
            "the log entry records no time (Rekor v2) and the bundle carries no RFC 3161 \
             timestamp to say when it was signed"
        }));
    }
    Ok(times)
}

/// How far past this machine's clock a log entry's time may be (clocks differ a little).
const MAX_CLOCK_SKEW_SECS: u64 = 60;

/// The trusted root's log that holds the entry.
fn log_of<'r>(e: &TlogEntry, root: &'r TrustedRoot) -> Result<&'r Log, SignatureError> {
    root.logs.iter().find(|l| l.id == e.log_id).ok_or_else(|| {
        refused("the transparency log that holds the entry is not in the trusted root")
    })
}

/// The log entry holds: its log is trusted at `times` (when the signature was made), its promise
/// and its inclusion proof verify (a bundle of v0.1 must carry the promise, one of v0.2 or
/// later the proof). The log.
fn check_entry(e: &TlogEntry, log: &Log, version: u8, times: &[u64]) -> Result<(), SignatureError> {
    if !times.iter().all(|&t| log.valid.covers(t)) {
        return Err(refused(
            "the transparency log's key was not valid when the entry was logged",
        ));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if let Some(t) = e
        .integrated_time
        .filter(|&t| t > now.saturating_add(MAX_CLOCK_SKEW_SECS))
    {
        return Err(refused(format!(
            "the log entry is dated {t}, after this machine's clock: a log does not record the \
             future"
        )));
    }
    if version >= 2 && e.proof.is_none() {
        return Err(refused(format!(
            "the log entry has no inclusion proof, which a bundle of v0.{version} must carry"
        )));
    }
    if version < 2 && e.promise.is_none() {
        return Err(refused(
            "the log entry has no signed promise, which a bundle of v0.1 must carry",
        ));
    }
    if let Some(set) = &e.promise {
        let Some(integrated_time) = e.integrated_time else {
            return Err(refused("the log's signed promise names no time"));
        };
        // The canonical JSON (RFC 8785) of four fields: keys sorted, no whitespace.
        let signed = format!(
            "{{\"body\":{},\"integratedTime\":{},\"logID\":\"{}\",\"logIndex\":{}}}",
            serde_json::to_string(&e.body_b64).unwrap_or_default(),
            integrated_time,
            hex::encode(&e.log_id),
            e.log_index
        );
        if !log.key.verifies(signed.as_bytes(), set, Hash::Sha256) {
            return Err(refused(
                "the log's signed promise of the entry does not verify",
            ));
        }
    }
    if let Some(p) = &e.proof {
        let mut leaf = vec![0u8];
        leaf.extend_from_slice(&e.body);
        let leaf: [u8; 32] = Sha256::digest(&leaf).into();
        let root_hash = root_from_inclusion_proof(p.log_index, p.tree_size, leaf, &p.hashes)
            .ok_or_else(|| refused("the entry's inclusion proof is malformed"))?;
        if root_hash[..] != p.root_hash[..] {
            return Err(refused(
                "the entry's inclusion proof does not lead to the tree's root",
            ));
        }
        check_checkpoint(&p.checkpoint, log, p.tree_size, &p.root_hash)?;
    }
    Ok(())
}

/// RFC 9162's root of a tree of `size` leaves from the inclusion proof of leaf `index`.
fn root_from_inclusion_proof(
    index: u64,
    size: u64,
    leaf: [u8; 32],
    proof: &[Vec<u8>],
) -> Option<[u8; 32]> {
    if index >= size {
        return None;
    }
    let node = |l: &[u8], r: &[u8]| -> [u8; 32] {
        let mut h = Sha256::new();
        h.update([1u8]);
        h.update(l);
        h.update(r);
        h.finalize().into()
    };
    let (mut f, mut s) = (index, size - 1);
    let mut r = leaf;
    for p in proof {
        if p.len() != 32 || s == 0 {
            return None;
        }
        if f & 1 == 1 || f == s {
            r = node(p, &r);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            r = node(&r, p);
        }
        f >>= 1;
        s >>= 1;
    }
    (s == 0).then_some(r)
}

/// The checkpoint is a signed note of the log naming `size` and `root`: its text (origin, size,
/// base64 root, then optional lines) ends at a blank line, after which come signature lines
/// `— NAME BASE64(4-byte key hint || signature)`; one whose hint is the log's must verify.
fn check_checkpoint(note: &str, log: &Log, size: u64, root: &[u8]) -> Result<(), SignatureError> {
    let bad = |why: &str| refused(format!("the log's checkpoint {why}"));
    let Some(split) = note.find("\n\n") else {
        return Err(bad("is malformed (no signature)"));
    };
    let (text, sigs) = (&note[..=split], &note[split + 2..]);
    let mut lines = text.lines();
    let (_origin, n, r) = (lines.next(), lines.next(), lines.next());
    if n.and_then(|n| n.parse::<u64>().ok()) != Some(size) {
        return Err(bad("is of another tree size than the proof"));
    }
    if r.and_then(|r| b64(r).ok()).as_deref() != Some(root) {
        return Err(bad("names another root than the proof"));
    }
    for line in sigs.lines() {
        let Some(rest) = line.strip_prefix("\u{2014} ") else {
            continue;
        };
        let Some((_, sig)) = rest.rsplit_once(' ') else {
            continue;
        };
        let Ok(raw) = b64(sig) else { continue };
        if raw.len() > 4 && raw[..4] == log.id[..4.min(log.id.len())] {
            if log.key.verifies(text.as_bytes(), &raw[4..], Hash::Sha256) {
                return Ok(());
            }
            return Err(bad("signature does not verify"));
        }
    }
    Err(bad("is not signed by the log"))
}

#[derive(Deserialize)]
struct DsseBody {
    kind: String,
    #[serde(rename = "apiVersion")]
    api_version: String,
    spec: DsseSpec,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DsseSpec {
    payload_hash: HashValue,
    signatures: Bounded<DsseSignature, 16>,
}

#[derive(Deserialize)]
struct HashValue {
    algorithm: String,
    value: String,
}

#[derive(Deserialize)]
struct DsseSignature {
    signature: String,
    verifier: String,
}

/// A Rekor v2 `hashedrekord` 0.0.2 entry (for a DSSE envelope: of the SHA-256 of its PAE).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HashedRekordBody {
    kind: String,
    api_version: String,
    spec: HashedRekordSpec,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HashedRekordSpec {
    hashed_rekord_v002: HashedRekordV002,
}

#[derive(Deserialize)]
struct HashedRekordV002 {
    data: HashedRekordData,
    signature: HashedRekordSignature,
}

#[derive(Deserialize)]
struct HashedRekordData {
    algorithm: String,
    digest: String,
}

#[derive(Deserialize)]
struct HashedRekordSignature {
    content: String,
    verifier: HashedRekordVerifier,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HashedRekordVerifier {
    x509_certificate: Option<HashedRekordCert>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HashedRekordCert {
    raw_bytes: String,
}

/// The log entry is this bundle's signature: a `dsse` 0.0.1 entry (Rekor v1) of its payload,
/// its one signature and its signing certificate, or a `hashedrekord` 0.0.2 entry (Rekor v2) of
/// the SHA-256 of the envelope's PAE, its signature and its signing certificate.
fn check_body(e: &TlogEntry, b: &Bundle, leaf_der: &[u8]) -> Result<(), SignatureError> {
    match (e.kind.as_str(), e.version.as_str()) {
        ("dsse", "0.0.1") => {}
        ("hashedrekord", "0.0.2") => return check_hashedrekord(e, b, leaf_der),
        _ => {
            return Err(refused(format!(
                "a log entry of kind {} {}: only dsse 0.0.1 (Rekor v1) and hashedrekord 0.0.2 \
                 (Rekor v2) entries are read",
                shown(&e.kind, 40),
                shown(&e.version, 20)
            )))
        }
    }
    let body: DsseBody = serde_json::from_slice(&e.body)
        .map_err(|err| refused(format!("the log entry's body is malformed ({err})")))?;
    if body.kind != "dsse" || body.api_version != "0.0.1" {
        return Err(refused(
            "the log entry's body is not the dsse 0.0.1 entry it says it is",
        ));
    }
    let payload_hash = hex::encode(Sha256::digest(&b.payload));
    if body.spec.payload_hash.algorithm != "sha256" || body.spec.payload_hash.value != payload_hash
    {
        return Err(refused(
            "the log entry is of another payload than the bundle's",
        ));
    }
    let [sig] = body.spec.signatures.0.as_slice() else {
        return Err(refused("the log entry holds other than one signature"));
    };
    if b64(&sig.signature).ok().as_deref() != Some(&b.signature[..]) {
        return Err(refused(
            "the log entry holds another signature than the bundle's",
        ));
    }
    let verifier =
        b64(&sig.verifier).map_err(|why| refused(format!("the log entry's verifier: {why}")))?;
    let logged: Vec<CertificateDer<'static>> = {
        use rustls_pki_types::pem::PemObject as _;
        CertificateDer::pem_slice_iter(&verifier)
            .filter_map(Result::ok)
            .collect()
    };
    if logged.first().map(|c| c.as_ref()) != Some(leaf_der) {
        return Err(refused(
            "the log entry names another certificate than the bundle's",
        ));
    }
    Ok(())
}

/// A Rekor v2 entry of the envelope: see [`check_body`].
fn check_hashedrekord(e: &TlogEntry, b: &Bundle, leaf_der: &[u8]) -> Result<(), SignatureError> {
    let body: HashedRekordBody = serde_json::from_slice(&e.body)
        .map_err(|err| refused(format!("the log entry's body is malformed ({err})")))?;
    if body.kind != "hashedrekord" || body.api_version != "0.0.2" {
        return Err(refused(
            "the log entry's body is not the hashedrekord 0.0.2 entry it says it is",
        ));
    }
    let v = &body.spec.hashed_rekord_v002;
    let pae = super::bundle::pae(&b.payload);
    if v.data.algorithm != "SHA2_256"
        || b64(&v.data.digest).ok() != Some(Sha256::digest(&pae).to_vec())
    {
        return Err(refused(
            "the log entry is of another envelope than the bundle's",
        ));
    }
    if b64(&v.signature.content).ok().as_deref() != Some(&b.signature[..]) {
        return Err(refused(
            "the log entry holds another signature than the bundle's",
        ));
    }
    let logged = v
        .signature
        .verifier
        .x509_certificate
        .as_ref()
        .and_then(|c| b64(&c.raw_bytes).ok());
    if logged.as_deref() != Some(leaf_der) {
        return Err(refused(
            "the log entry names another certificate than the bundle's",
        ));
    }
    Ok(())
}

/// The leaf chains to a trusted authority's root at `time`; the root's subject, and the
/// certificate that issued the leaf. The bundle's own chain (`extra`, after the leaf) may hold
/// intermediates only: a root there (self-issued, or one of the trusted root's) is refused, as
/// Sigstore's verifiers refuse it — trust comes from the trusted root, never from the bundle.
fn check_chain(
    leaf_der: &[u8],
    extra: &[Vec<u8>],
    root: &TrustedRoot,
    time: u64,
) -> Result<(String, Vec<u8>), SignatureError> {
    for (i, der) in extra.iter().enumerate() {
        let anchor = root.authorities.iter().any(|a| a.chain.last() == Some(der));
        let self_issued = super::der::certificate(der)
            .map(|c| c.tbs_certificate.subject == c.tbs_certificate.issuer)
            .map_err(|e| refused(format!("certificate {} of the bundle's chain: {e}", i + 1)))?;
        if anchor || self_issued {
            return Err(refused(format!(
                "the bundle's certificate chain holds a root certificate (certificate {}): \
                 roots come from the trusted root, not from the bundle",
                i + 1
            )));
        }
    }
    let leaf = CertificateDer::from(leaf_der);
    let ee = webpki::EndEntityCert::try_from(&leaf)
        .map_err(|e| refused(format!("the signing certificate cannot be used: {e:?}")))?;
    let mut last = None;
    for ca in root.authorities.iter().filter(|a| a.valid.covers(time)) {
        let Some((root_der, intermediates)) = ca.chain.split_last() else {
            continue;
        };
        let root_cert = CertificateDer::from(root_der.as_slice());
        let Ok(anchor) = webpki::anchor_from_trusted_cert(&root_cert) else {
            continue;
        };
        let mut inter: Vec<CertificateDer<'_>> = intermediates
            .iter()
            .map(|d| CertificateDer::from(d.as_slice()))
            .collect();
        inter.extend(extra.iter().map(|d| CertificateDer::from(d.as_slice())));
        match ee.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &[anchor],
            &inter,
            UnixTime::since_unix_epoch(std::time::Duration::from_secs(time)),
            super::chain::AnyUsage,
            None,
            None,
        ) {
            Ok(path) => {
                let issuer = path
                    .intermediate_certificates()
                    .next()
                    .map_or_else(|| root_der.clone(), |c| c.der().to_vec());
                let subject = super::der::certificate(root_der)
                    .map(|c| c.tbs_certificate.subject.to_string())
                    .unwrap_or_default();
                return Ok((subject, issuer));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(refused(match last {
        Some(webpki::Error::CertExpired { .. } | webpki::Error::CertNotValidYet { .. }) => {
            "the signing certificate was not valid when the signature was logged".to_string()
        }
        Some(e) => format!("the signing certificate does not chain to a trusted authority ({e:?})"),
        None => {
            "no certificate authority of the trusted root was valid when the signature was logged"
                .to_string()
        }
    }))
}

/// One of the certificate's embedded SCTs is signed by a CT log of the trusted root over the
/// precertificate (RFC 6962 §3.2: the TBS without the SCT list, and the issuer's key hash).
fn check_scts(
    leaf: &Certificate,
    issuer_der: &[u8],
    root: &TrustedRoot,
) -> Result<(), SignatureError> {
    let none = || {
        refused("the signing certificate has no certificate-transparency timestamp signed by a trusted CT log")
    };
    let tbs = &leaf.tbs_certificate;
    let Some(ext) = tbs
        .extensions
        .iter()
        .flatten()
        .find(|e| e.extn_id == SCT_LIST)
    else {
        return Err(none());
    };
    let list = x509_cert::der::asn1::OctetStringRef::from_der(ext.extn_value.as_bytes())
        .map_err(|e| refused(format!("the certificate's SCT list: {e}")))?;
    let issuer = super::der::certificate(issuer_der)
        .map_err(|e| refused(format!("the issuing certificate: {e}")))?;
    let issuer_key = issuer
        .tbs_certificate
        .subject_public_key_info
        .to_der()
        .map_err(|e| refused(format!("the issuing certificate's key: {e}")))?;
    let mut pre = tbs.clone();
    if let Some(exts) = pre.extensions.as_mut() {
        exts.retain(|e| e.extn_id != SCT_LIST);
    }
    let pre = pre
        .to_der()
        .map_err(|e| refused(format!("the precertificate: {e}")))?;
    let pre_len = u32::try_from(pre.len())
        .ok()
        .filter(|&n| n < 1 << 24)
        .ok_or_else(none)?;
    for sct in sct_list(list.as_bytes())
        .ok_or_else(|| refused("the certificate's SCT list is malformed"))?
    {
        let Some(log) = root.ct_logs.iter().find(|l| l.id[..] == sct.log_id[..]) else {
            continue;
        };
        let mut signed = vec![0u8, 0u8];
        signed.extend_from_slice(&sct.timestamp.to_be_bytes());
        signed.extend_from_slice(&[0, 1]);
        signed.extend_from_slice(&Sha256::digest(&issuer_key));
        signed.extend_from_slice(&pre_len.to_be_bytes()[1..]);
        signed.extend_from_slice(&pre);
        signed.extend_from_slice(
            &u16::try_from(sct.extensions.len())
                .unwrap_or(u16::MAX)
                .to_be_bytes(),
        );
        signed.extend_from_slice(sct.extensions);
        let hash = match sct.hash {
            4 => Hash::Sha256,
            5 => Hash::Sha384,
            6 => Hash::Sha512,
            _ => continue,
        };
        if sct.signature_algorithm == 3
            && log.valid.covers(sct.timestamp / 1000)
            && log.key.verifies(&signed, sct.signature, hash)
        {
            return Ok(());
        }
    }
    Err(none())
}

/// One signed certificate timestamp, as RFC 6962 §3.2 lays it out.
struct Sct<'a> {
    log_id: &'a [u8],
    timestamp: u64,
    extensions: &'a [u8],
    hash: u8,
    signature_algorithm: u8,
    signature: &'a [u8],
}

/// The SCTs of a TLS-encoded `SignedCertificateTimestampList`; `None` when it is malformed.
fn sct_list(b: &[u8]) -> Option<Vec<Sct<'_>>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (b.get(..n)?, b.get(n..)?);
        *b = rest;
        Some(head)
    }
    fn u16_of(b: &mut &[u8]) -> Option<usize> {
        take(b, 2).map(|x| usize::from(u16::from_be_bytes([x[0], x[1]])))
    }
    let mut b = b;
    let total = u16_of(&mut b)?;
    let mut list = take(&mut b, total)?;
    let mut out = Vec::new();
    while !list.is_empty() && out.len() < 16 {
        let n = u16_of(&mut list)?;
        let mut s = take(&mut list, n)?;
        if take(&mut s, 1)? != [0] {
            continue; // another SCT version
        }
        let log_id = take(&mut s, 32)?;
        let timestamp = u64::from_be_bytes(take(&mut s, 8)?.try_into().ok()?);
        let ext_len = u16_of(&mut s)?;
        let extensions = take(&mut s, ext_len)?;
        let alg = take(&mut s, 2)?;
        let sig_len = u16_of(&mut s)?;
        let signature = take(&mut s, sig_len)?;
        out.push(Sct {
            log_id,
            timestamp,
            extensions,
            hash: alg[0],
            signature_algorithm: alg[1],
            signature,
        });
    }
    Some(out)
}

/// The certificate's identity (its subject alternative name: an email or a URI) and the OIDC
/// issuer that vouched for it (Fulcio's extension).
fn identity_of(cert: &Certificate) -> Result<(String, String), SignatureError> {
    let tbs = &cert.tbs_certificate;
    let san = super::der::extension::<SubjectAltName>(cert)
        .map_err(|e| SignatureError::bundle(format!("the signing certificate's names: {e}")))?
        .ok_or_else(|| refused("the signing certificate names no identity"))?;
    let identity = san
        .0
        .iter()
        .find_map(|n| match n {
            GeneralName::Rfc822Name(s) => Some(s.to_string()),
            GeneralName::UniformResourceIdentifier(s) => Some(s.to_string()),
            _ => None,
        })
        .ok_or_else(|| refused("the signing certificate names no email or URI identity"))?;
    let mut issuer = None;
    for ext in tbs.extensions.iter().flatten() {
        let v = ext.extn_value.as_bytes();
        if ext.extn_id == FULCIO_ISSUER_V2 {
            issuer = Utf8StringRef::from_der(v)
                .map(|s| s.as_str().to_string())
                .ok()
                .or_else(|| {
                    Ia5StringRef::from_der(v)
                        .map(|s| s.as_str().to_string())
                        .ok()
                });
            break;
        }
        if ext.extn_id == FULCIO_ISSUER_V1 {
            issuer = std::str::from_utf8(v).ok().map(str::to_string);
        }
    }
    let issuer = issuer.ok_or_else(|| refused("the signing certificate names no OIDC issuer"))?;
    Ok((identity, issuer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_validity_period_needs_its_start_and_its_end_is_inclusive() {
        let raw = |start: Option<&str>, end: Option<&str>| RawValidity {
            start: start.map(str::to_string),
            end: end.map(str::to_string),
        };
        let err = Validity::read(Some(&raw(None, Some("2030-01-01T00:00:00Z")))).unwrap_err();
        assert!(err.contains("without its start"), "{err}");
        let v = Validity::read(Some(&raw(
            Some("1970-01-01T00:00:10Z"),
            Some("1970-01-01T00:00:20Z"),
        )))
        .unwrap();
        assert!(!v.covers(9) && v.covers(10) && v.covers(20) && !v.covers(21));
        assert!(Validity::read(None).unwrap().covers(0));
    }

    fn leaf(i: u8) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update([0u8, i]);
        h.finalize().into()
    }

    fn node(l: &[u8; 32], r: &[u8; 32]) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update([1u8]);
        h.update(l);
        h.update(r);
        h.finalize().into()
    }

    #[test]
    fn inclusion_proofs_of_a_tree_of_five() {
        // The tree of RFC 9162 with 5 leaves: ((0 1) (2 3)) 4.
        let l: Vec<[u8; 32]> = (0..5).map(leaf).collect();
        let (a, b) = (node(&l[0], &l[1]), node(&l[2], &l[3]));
        let ab = node(&a, &b);
        let root = node(&ab, &l[4]);
        let proof_2 = vec![l[3].to_vec(), a.to_vec(), l[4].to_vec()];
        assert_eq!(root_from_inclusion_proof(2, 5, l[2], &proof_2), Some(root));
        let proof_4 = vec![ab.to_vec()];
        assert_eq!(root_from_inclusion_proof(4, 5, l[4], &proof_4), Some(root));
        // Another leaf, another index, a short or long proof: not this root.
        assert_ne!(root_from_inclusion_proof(2, 5, l[1], &proof_2), Some(root));
        assert_ne!(root_from_inclusion_proof(3, 5, l[2], &proof_2), Some(root));
        assert_eq!(root_from_inclusion_proof(2, 5, l[2], &proof_2[..2]), None);
        let mut long = proof_2.clone();
        long.push(l[0].to_vec());
        assert_eq!(root_from_inclusion_proof(2, 5, l[2], &long), None);
        assert_eq!(root_from_inclusion_proof(5, 5, l[4], &proof_4), None);
    }
}
