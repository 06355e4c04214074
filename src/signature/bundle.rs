//! The Sigstore bundle (media types v0.1 to v0.3): a DSSE envelope of an in-toto statement,
//! signed over DSSE's pre-authentication encoding (PAE), with a public key's hint, a certificate
//! chain or one certificate as verification material, and the transparency-log entries of a
//! keyless signature (`tlogEntries`). `model_signing` writes v0.3 for its key and certificate
//! methods, without a log entry.

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use serde::de::IgnoredAny;
use serde::Deserialize;

use super::SignatureError;
use crate::manifest::interop::openssf::PAYLOAD_TYPE;
use crate::manifest::interop::{shown, Bounded};

/// The bundle media type `model_signing` writes and accepts for keys and certificates.
pub const BUNDLE_MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The bundle media types read, and the minor version of the format each names (v0.1 and v0.2
/// for keyless signatures only; v0.3 also in its older spelling).
const MEDIA_TYPES: [(&str, u8); 4] = [
    (BUNDLE_MEDIA_TYPE, 3),
    ("application/vnd.dev.sigstore.bundle+json;version=0.3", 3),
    ("application/vnd.dev.sigstore.bundle+json;version=0.2", 2),
    ("application/vnd.dev.sigstore.bundle+json;version=0.1", 1),
];
/// Most transparency-log entries a bundle may hold.
const MAX_TLOG_ENTRIES: usize = 8;
/// Most hashes of an inclusion proof (a tree of 2^64 leaves needs 64).
const MAX_PROOF_HASHES: usize = 64;
/// Most RFC 3161 timestamps a bundle may hold.
const MAX_TIMESTAMPS: usize = 8;
/// Most certificates a bundle's chain may hold.
const MAX_CHAIN: usize = 16;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawBundle {
    media_type: String,
    #[serde(default)]
    verification_material: Option<RawMaterial>,
    #[serde(default)]
    dsse_envelope: Option<RawEnvelope>,
    #[serde(default)]
    message_signature: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMaterial {
    #[serde(default)]
    public_key: Option<RawKeyId>,
    #[serde(default)]
    x509_certificate_chain: Option<RawChain>,
    #[serde(default)]
    certificate: Option<RawCert>,
    #[serde(default)]
    tlog_entries: Bounded<RawTlogEntry, MAX_TLOG_ENTRIES>,
    #[serde(default)]
    timestamp_verification_data: Option<RawTimestamps>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawTimestamps {
    #[serde(default)]
    rfc3161_timestamps: Bounded<RawTimestamp, MAX_TIMESTAMPS>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawTimestamp {
    signed_timestamp: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawTlogEntry {
    log_index: Int,
    log_id: RawLogId,
    kind_version: RawKindVersion,
    /// Absent in Rekor v2 (its time comes from timestamps).
    #[serde(default)]
    integrated_time: Option<Int>,
    #[serde(default)]
    inclusion_promise: Option<RawPromise>,
    #[serde(default)]
    inclusion_proof: Option<RawProof>,
    canonicalized_body: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawLogId {
    key_id: String,
}

#[derive(Deserialize)]
struct RawKindVersion {
    kind: String,
    version: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawPromise {
    signed_entry_timestamp: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawProof {
    log_index: Int,
    root_hash: String,
    tree_size: Int,
    #[serde(default)]
    hashes: Bounded<String, MAX_PROOF_HASHES>,
    checkpoint: RawCheckpoint,
}

#[derive(Deserialize)]
struct RawCheckpoint {
    envelope: String,
}

/// A protobuf int64 as JSON writes it: a string of digits (or a number).
#[derive(Deserialize)]
#[serde(untagged)]
enum Int {
    Text(String),
    Number(u64),
}

impl Int {
    fn get(&self, what: &str) -> Result<u64, SignatureError> {
        match self {
            Int::Number(n) => Ok(*n),
            Int::Text(s) => s.parse().map_err(|_| {
                SignatureError::bundle(format!("{what} '{}' is not a number", shown(s, 40)))
            }),
        }
    }
}

/// One transparency-log entry of a bundle, decoded.
#[derive(Debug, Clone)]
pub(crate) struct TlogEntry {
    pub log_index: u64,
    /// The log's id: the SHA-256 of its public key (DER).
    pub log_id: Vec<u8>,
    pub kind: String,
    pub version: String,
    /// When the log recorded it (Rekor v1; Rekor v2 records no time).
    pub integrated_time: Option<u64>,
    /// The log's signature over the entry (its "signed entry timestamp").
    pub promise: Option<Vec<u8>>,
    pub proof: Option<InclusionProof>,
    /// The entry as the log holds it (its JSON), and as the bundle wrote it (base64).
    pub body: Vec<u8>,
    pub body_b64: String,
}

/// A proof that an entry is in the log's tree, with the log's signed checkpoint of that tree.
#[derive(Debug, Clone)]
pub(crate) struct InclusionProof {
    pub log_index: u64,
    pub root_hash: Vec<u8>,
    pub tree_size: u64,
    pub hashes: Vec<Vec<u8>>,
    pub checkpoint: String,
}

#[derive(Deserialize)]
struct RawKeyId {
    #[serde(default)]
    hint: Option<String>,
}

#[derive(Deserialize)]
struct RawChain {
    #[serde(default)]
    certificates: Bounded<RawCert, MAX_CHAIN>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawCert {
    raw_bytes: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEnvelope {
    payload: String,
    payload_type: String,
    #[serde(default)]
    signatures: Bounded<RawSignature, 16>,
}

#[derive(Deserialize)]
struct RawSignature {
    sig: String,
}

/// What the bundle says the signature can be checked with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Material {
    /// A public key, named by its hint (the hex SHA-256 of its PEM), or not named (bundles of
    /// `model_signing` before 1.0).
    Key { hint: Option<String> },
    /// The signing certificate (DER), then the rest of its chain.
    Certificates(Vec<Vec<u8>>),
}

/// A bundle read: its material, and the envelope's payload and signature.
#[derive(Debug)]
pub(crate) struct Bundle {
    /// The minor version of its format (1, 2 or 3: v0.3 is what `model_signing` writes).
    pub version: u8,
    pub material: Material,
    pub payload_type: String,
    pub payload: Vec<u8>,
    pub signature: Vec<u8>,
    pub tlog_entries: Vec<TlogEntry>,
    /// RFC 3161 timestamps of the signature (DER `TimeStampResp`s).
    pub timestamps: Vec<Vec<u8>>,
}

fn b64(s: &str, what: &str) -> Result<Vec<u8>, SignatureError> {
    let lenient = GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(false);
    let standard = GeneralPurpose::new(&base64::alphabet::STANDARD, lenient);
    let url_safe = GeneralPurpose::new(&base64::alphabet::URL_SAFE, lenient);
    standard
        .decode(s.as_bytes())
        .or_else(|_| url_safe.decode(s.as_bytes()))
        .map_err(|e| SignatureError::bundle(format!("{what} is not base64 ({e})")))
}

impl Bundle {
    /// Reads a bundle (its size bounded by the caller).
    pub(crate) fn parse(bytes: &[u8]) -> Result<Bundle, SignatureError> {
        let raw: RawBundle = serde_json::from_slice(bytes)
            .map_err(|e| SignatureError::bundle(format!("malformed Sigstore bundle ({e})")))?;
        let Some(&(_, version)) = MEDIA_TYPES.iter().find(|(t, _)| *t == raw.media_type) else {
            return Err(SignatureError::bundle(format!(
                "media type '{}', not {BUNDLE_MEDIA_TYPE}",
                shown(&raw.media_type, 80)
            )));
        };
        let Some(env) = raw.dsse_envelope else {
            let what = if raw.message_signature.is_some() {
                "it signs a blob (messageSignature), not a model's statement"
            } else {
                "no dsseEnvelope"
            };
            return Err(SignatureError::bundle(what));
        };
        if env.payload_type != PAYLOAD_TYPE {
            return Err(SignatureError::bundle(format!(
                "the envelope's payload is '{}', not an in-toto statement ({PAYLOAD_TYPE})",
                shown(&env.payload_type, 80)
            )));
        }
        let [signature] = env.signatures.0.as_slice() else {
            return Err(SignatureError::bundle(format!(
                "the envelope holds {} signatures (model signing writes exactly one)",
                env.signatures.0.len()
            )));
        };
        let signature = b64(&signature.sig, "the envelope's signature")?;
        let payload = b64(&env.payload, "the envelope's payload")?;
        let Some(m) = raw.verification_material else {
            return Err(SignatureError::bundle("no verificationMaterial"));
        };
        let mut tlog_entries = Vec::with_capacity(m.tlog_entries.0.len());
        for (i, e) in m.tlog_entries.0.iter().enumerate() {
            let what = |f: &str| format!("transparency-log entry {i}: {f}");
            let proof = match &e.inclusion_proof {
                None => None,
                Some(p) => Some(InclusionProof {
                    log_index: p.log_index.get(&what("the proof's logIndex"))?,
                    root_hash: b64(&p.root_hash, &what("rootHash"))?,
                    tree_size: p.tree_size.get(&what("treeSize"))?,
                    hashes: p
                        .hashes
                        .0
                        .iter()
                        .map(|h| b64(h, &what("a proof hash")))
                        .collect::<Result<_, _>>()?,
                    checkpoint: p.checkpoint.envelope.clone(),
                }),
            };
            tlog_entries.push(TlogEntry {
                log_index: e.log_index.get(&what("logIndex"))?,
                log_id: b64(&e.log_id.key_id, &what("logId"))?,
                kind: e.kind_version.kind.clone(),
                version: e.kind_version.version.clone(),
                integrated_time: e
                    .integrated_time
                    .as_ref()
                    .map(|t| t.get(&what("integratedTime")))
                    .transpose()?,
                promise: e
                    .inclusion_promise
                    .as_ref()
                    .map(|p| b64(&p.signed_entry_timestamp, &what("signedEntryTimestamp")))
                    .transpose()?,
                proof,
                body: b64(&e.canonicalized_body, &what("canonicalizedBody"))?,
                body_b64: e.canonicalized_body.clone(),
            });
        }
        let timestamps = m
            .timestamp_verification_data
            .iter()
            .flat_map(|t| t.rfc3161_timestamps.0.iter())
            .enumerate()
            .map(|(i, t)| b64(&t.signed_timestamp, &format!("timestamp {i}")))
            .collect::<Result<Vec<_>, _>>()?;
        let material = match (m.public_key, m.x509_certificate_chain, m.certificate) {
            (Some(k), None, None) => Material::Key { hint: k.hint },
            (None, Some(chain), None) => {
                if chain.certificates.0.is_empty() {
                    return Err(SignatureError::bundle("an empty certificate chain"));
                }
                let mut ders = Vec::with_capacity(chain.certificates.0.len());
                for (i, c) in chain.certificates.0.iter().enumerate() {
                    ders.push(b64(&c.raw_bytes, &format!("certificate {i} of the chain"))?);
                }
                Material::Certificates(ders)
            }
            (None, None, Some(c)) => {
                Material::Certificates(vec![b64(&c.raw_bytes, "the signing certificate")?])
            }
            (None, None, None) => {
                return Err(SignatureError::bundle(
                    "verificationMaterial names no key and no certificate",
                ))
            }
            _ => {
                return Err(SignatureError::bundle(
                    "verificationMaterial names more than one of a key, a chain, a certificate",
                ))
            }
        };
        Ok(Bundle {
            version,
            material,
            payload_type: env.payload_type,
            payload,
            signature,
            tlog_entries,
            timestamps,
        })
    }

    /// The bundle's JSON, as `model_signing` writes it (two-space indents, a final newline).
    pub(crate) fn to_json(&self) -> String {
        let material = match &self.material {
            Material::Key { hint } => serde_json::json!({
                "publicKey": {"hint": hint.clone().unwrap_or_default()},
                "tlogEntries": [],
            }),
            Material::Certificates(ders) => serde_json::json!({
                "x509CertificateChain": {"certificates": ders
                    .iter()
                    .map(|d| serde_json::json!({"rawBytes": STANDARD.encode(d)}))
                    .collect::<Vec<_>>()},
                "tlogEntries": [],
            }),
        };
        let bundle = serde_json::json!({
            "mediaType": BUNDLE_MEDIA_TYPE,
            "verificationMaterial": material,
            "dsseEnvelope": {
                "payload": STANDARD.encode(&self.payload),
                "payloadType": self.payload_type,
                "signatures": [{"sig": STANDARD.encode(&self.signature), "keyid": ""}],
            },
        });
        let mut s = serde_json::to_string_pretty(&bundle).unwrap_or_default();
        s.push('\n');
        s
    }
}

/// DSSE's pre-authentication encoding of an in-toto payload: what is signed.
pub(crate) fn pae(payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {PAYLOAD_TYPE} {} ",
        PAYLOAD_TYPE.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// The encoding `model_signing` 0.2 signed instead of [`pae`] (a bug its later versions still
/// accept): `DSSEV1`, and the payload written as Python writes a `bytes` value (`b'…'`).
pub(crate) fn pae_v0_2(payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEV1 {} {PAYLOAD_TYPE} {} ",
        PAYLOAD_TYPE.len(),
        payload.len()
    );
    out.push_str(&python_bytes_repr(payload));
    out.into_bytes()
}

/// `repr(b)` of a Python `bytes` value.
fn python_bytes_repr(b: &[u8]) -> String {
    let quote = if b.contains(&b'\'') && !b.contains(&b'"') {
        '"'
    } else {
        '\''
    };
    let mut s = String::with_capacity(b.len() + 3);
    s.push('b');
    s.push(quote);
    for &c in b {
        match c {
            b'\\' => s.push_str("\\\\"),
            b'\t' => s.push_str("\\t"),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            c if c == quote as u8 => {
                s.push('\\');
                s.push(quote);
            }
            0x20..=0x7e => s.push(c as char),
            c => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s.push(quote);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_is_dsse_v1() {
        assert_eq!(
            pae(b"{}"),
            b"DSSEv1 28 application/vnd.in-toto+json 2 {}".to_vec()
        );
    }

    #[test]
    fn python_repr_of_bytes() {
        assert_eq!(
            python_bytes_repr(b"a\n'\\\x00\xff"),
            "b\"a\\n'\\\\\\x00\\xff\""
        );
        assert_eq!(python_bytes_repr(b"'\""), "b'\\'\"'");
        assert_eq!(python_bytes_repr(b"{\"a\": 1}"), "b'{\"a\": 1}'");
    }

    #[test]
    fn hostile_bundles_are_refused_with_their_reason() {
        let cases: [(&str, &str); 6] = [
            ("[]", "malformed"),
            (r#"{"mediaType": "x"}"#, "media type 'x'"),
            (
                r#"{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json", "messageSignature": {}}"#,
                "signs a blob",
            ),
            (
                r#"{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json", "dsseEnvelope": {"payload": "e30=", "payloadType": "application/vnd.in-toto+json", "signatures": []}}"#,
                "0 signatures",
            ),
            (
                r#"{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json", "dsseEnvelope": {"payload": "e30=", "payloadType": "application/vnd.in-toto+json", "signatures": [{"sig": "!!"}]}, "verificationMaterial": {}}"#,
                "signature is not base64",
            ),
            (
                r#"{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json", "dsseEnvelope": {"payload": "e30=", "payloadType": "application/vnd.in-toto+json", "signatures": [{"sig": "AA=="}]}, "verificationMaterial": {}}"#,
                "names no key",
            ),
        ];
        for (json, why) in cases {
            let e = Bundle::parse(json.as_bytes()).unwrap_err().to_string();
            assert!(e.contains(why), "{json}: {e}");
        }
        let many = format!(
            r#"{{"mediaType": "{BUNDLE_MEDIA_TYPE}", "verificationMaterial": {{"x509CertificateChain": {{"certificates": [{}]}}}}}}"#,
            vec![r#"{"rawBytes": "AA=="}"#; 17].join(",")
        );
        let e = Bundle::parse(many.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("more than 16"), "{e}");
    }
}
