//! OpenSSF model signatures (`sigstore/model-transparency`, the `model_signing` package),
//! verified and written natively.
//!
//! A signature (`model.sig`) is a Sigstore bundle holding a DSSE envelope of an in-toto
//! statement: the model's files (or shards) and their digests ([`OpenSsfDocument`]). Verifying
//! it has two halves:
//!
//! 1. **The signature**: whom it must come from is the caller's [`TrustPolicy`]. With a public
//!    key (`model_signing`'s `key` method) the bundle's key hint must be the key's
//!    [`PublicKey::fingerprint`] and the envelope's ECDSA signature must verify with it; with
//!    certificates (the `certificate` method) the bundle's signing certificate must chain to one
//!    of them and allow signing, and the signature must verify with its key
//!    ([`CertificateRoots`]). [`verify_signature`] gives the statement only when it holds.
//! 2. **The model**: every file the statement names is re-hashed against it, and a file present
//!    that it does not name is refused unless told otherwise ([`verify_model`]).
//!
//! [`sign_model`] writes what `model_signing verify` accepts: the statement of
//! [`crate::manifest::create_in_toto`], signed with an EC key (P-256, P-384, P-521), with the
//! key's hint or the certificate chain as the bundle's material.
//!
//! Sigstore's keyless method (a Fulcio certificate for an OIDC identity and a Rekor entry) is
//! verified offline against a trusted root and an identity policy ([`KeylessPolicy`]; see the
//! `sigstore` module's steps).

mod bundle;
mod chain;
mod der;
mod error;
mod key;
mod model;
mod sigstore;
mod timestamp;

use std::path::Path;

use serde::Serialize;

pub use bundle::BUNDLE_MEDIA_TYPE;
pub use chain::{CertificateRoots, CertificateSigner};
pub use error::SignatureError;
pub use key::{Curve, PublicKey, SigningKey};
pub(crate) use model::left_out_by_signer;
pub use model::{
    sign_model, verify_model, LeftOut, LeftOutReason, ModelVerdict, SignOptions, VerifyOptions,
};
pub use sigstore::{KeylessPolicy, TrustedRoot};

use crate::manifest::OpenSsfDocument;
use bundle::{pae, pae_v0_2, Bundle, Material};
use key::Hash;

/// The largest signature file read: 32 MiB, a statement of about 200,000 files (a signature
/// past it is refused unread, never parsed).
pub const MAX_SIGNATURE_BYTES: u64 = 32 << 20;

/// Whom a signature must come from.
#[derive(Debug, Clone)]
pub enum TrustPolicy {
    /// Signed with the private half of this key (`model_signing verify key --public_key`).
    Key(PublicKey),
    /// Signed by a certificate that chains to one of these (`model_signing verify certificate
    /// --certificate_chain`).
    Certificates(CertificateRoots),
    /// Signed keyless through Sigstore by an identity (`model_signing verify sigstore
    /// --identity --identity_provider`), checked offline against a trusted root.
    Sigstore(KeylessPolicy),
}

/// How a model was signed (`model_signing`'s methods).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum SigningMethod {
    /// A bare public key.
    Key,
    /// A key with its certificate, checked to a trusted one.
    Certificate,
    /// Keyless, through Sigstore: a short-lived certificate for an identity, and a
    /// transparency-log entry.
    Sigstore,
}

/// Who signed, as the signature showed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Signer {
    /// How.
    pub method: SigningMethod,
    /// The key's fingerprint ([`PublicKey::fingerprint`], `model_signing`'s key hint), or the
    /// hex SHA-256 of the signing certificate's DER.
    pub fingerprint: String,
    /// The signing key's curve (`secp256r1`, `secp384r1`, `secp521r1`).
    pub curve: String,
    /// With a certificate: whose, and the trusted certificate it chains to (keyless: the
    /// identity as `subject` and its OIDC issuer as `issuer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<CertificateSigner>,
}

impl Signer {
    /// A signer by bare key.
    pub fn key(k: &PublicKey) -> Signer {
        Signer {
            method: SigningMethod::Key,
            fingerprint: k.fingerprint(),
            curve: k.curve().name().to_string(),
            certificate: None,
        }
    }

    /// A signer by certificate (`leaf_der` the signing certificate's DER, `k` its key).
    pub(crate) fn certificate(k: &PublicKey, leaf_der: &[u8], who: CertificateSigner) -> Signer {
        use sha2::Digest as _;
        Signer {
            method: SigningMethod::Certificate,
            fingerprint: hex::encode(sha2::Sha256::digest(leaf_der)),
            curve: k.curve().name().to_string(),
            certificate: Some(who),
        }
    }
}

impl Signer {
    /// Whether `other` is the same signer: the same key, or a certificate of the same subject
    /// chaining to the same trusted certificate (a renewed certificate is the same signer).
    pub fn same_as(&self, other: &Signer) -> bool {
        match (
            self.method,
            &self.certificate,
            other.method,
            &other.certificate,
        ) {
            (SigningMethod::Key, _, SigningMethod::Key, _) => {
                self.fingerprint.eq_ignore_ascii_case(&other.fingerprint)
            }
            (SigningMethod::Certificate, Some(a), SigningMethod::Certificate, Some(b)) => {
                a.subject == b.subject && a.root == b.root
            }
            (SigningMethod::Sigstore, Some(a), SigningMethod::Sigstore, Some(b)) => {
                a.subject == b.subject && a.issuer == b.issuer
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::names::escape;
        match (&self.certificate, self.method) {
            (Some(c), SigningMethod::Sigstore) => write!(
                f,
                "'{}' (vouched for by '{}', keyless through Sigstore)",
                escape(&c.subject),
                escape(&c.issuer)
            ),
            (Some(c), _) => write!(
                f,
                "the certificate '{}' (issued by '{}', trusted through '{}')",
                escape(&c.subject),
                escape(&c.issuer),
                escape(&c.root)
            ),
            (None, _) => write!(f, "the key {}", self.fingerprint),
        }
    }
}

/// A signature that holds: who signed, and what they signed.
#[derive(Debug, Clone)]
pub struct VerifiedSignature {
    /// Who signed.
    pub signer: Signer,
    /// The signed statement: the model's files (or shards) and their digests.
    pub statement: OpenSsfDocument,
    /// What the reader should know (a bundle in `model_signing`'s older format).
    pub notes: Vec<String>,
}

/// Reads a signature file (at most [`MAX_SIGNATURE_BYTES`]).
pub fn read_signature(path: &Path) -> Result<Vec<u8>, SignatureError> {
    key::read_at_most(path, MAX_SIGNATURE_BYTES)
}

/// A DSSE envelope whose signature holds: who signed, and what (see [`verify_envelope`]).
#[derive(Debug, Clone)]
pub struct VerifiedEnvelope {
    /// Who signed.
    pub signer: Signer,
    /// The envelope's payload type (`application/vnd.in-toto+json`).
    pub payload_type: String,
    /// The signed payload: an in-toto statement.
    pub payload: Vec<u8>,
    /// What the reader should know (a bundle in `model_signing`'s older format).
    pub notes: Vec<String>,
}

/// Checks a Sigstore bundle's DSSE envelope against `policy`, whatever statement it carries
/// (a model's, or another in-toto statement such as a package's attestation); the payload when
/// the signature holds. [`verify_signature`] reads the payload as a model's statement.
pub fn verify_envelope(
    bytes: &[u8],
    policy: &TrustPolicy,
) -> Result<VerifiedEnvelope, SignatureError> {
    if bytes.len() as u64 > MAX_SIGNATURE_BYTES {
        return Err(SignatureError::bundle(format!(
            "larger than {MAX_SIGNATURE_BYTES} bytes"
        )));
    }
    let b = Bundle::parse(bytes)?;
    let mut notes = Vec::new();
    if b.version < 3 && !matches!(policy, TrustPolicy::Sigstore(_)) {
        return Err(SignatureError::bundle(format!(
            "an older Sigstore bundle: model_signing's keys and certificates write {BUNDLE_MEDIA_TYPE}"
        )));
    }
    let signer = match (policy, &b.material) {
        (TrustPolicy::Sigstore(p), _) => sigstore::verify(&b, p)?,
        (TrustPolicy::Key(k), Material::Key { hint }) => {
            let given = k.fingerprint();
            match hint {
                Some(h) if !h.eq_ignore_ascii_case(&given) => {
                    return Err(SignatureError::KeyMismatch {
                        bundle_hint: crate::manifest::interop::shown(h, 80),
                        given_hint: given,
                    })
                }
                Some(_) => {}
                None => notes.push(
                    "the signature names no key (model_signing's format before 1.0): it was \
                     checked with the given key; sign it again to record the key's hint"
                        .to_string(),
                ),
            }
            let hash = k.curve().hash();
            check(k, &b, hash, hash, "the given key")?;
            Signer::key(k)
        }
        (TrustPolicy::Certificates(roots), Material::Certificates(ders)) => {
            let (k, who) = chain::verify_chain(ders, roots)?;
            // model_signing 0.2 signed with SHA-256 whatever the curve.
            check(
                &k,
                &b,
                k.curve().hash(),
                Hash::Sha256,
                "the signing certificate's key",
            )?;
            who
        }
        (TrustPolicy::Key(_), Material::Certificates(_)) => {
            return Err(SignatureError::Method {
                reason: "it was signed with a certificate, not a bare key: verify it with the \
                         certificates it must chain to (or, keyless, with the signer's identity)"
                    .into(),
            })
        }
        (TrustPolicy::Certificates(_), Material::Key { .. }) => {
            return Err(SignatureError::Method {
                reason: "it was signed with a bare key, not a certificate: verify it with the \
                         public key"
                    .into(),
            })
        }
    };
    Ok(VerifiedEnvelope {
        signer,
        payload_type: b.payload_type,
        payload: b.payload,
        notes,
    })
}

/// Checks a signature's bytes (a `model.sig`) against `policy`; the signed statement when it
/// holds (see the module docs). The model itself is not looked at ([`verify_model`] does).
pub fn verify_signature(
    bytes: &[u8],
    policy: &TrustPolicy,
) -> Result<VerifiedSignature, SignatureError> {
    let v = verify_envelope(bytes, policy)?;
    let statement =
        OpenSsfDocument::parse_statement(&v.payload, true).map_err(SignatureError::Statement)?;
    Ok(VerifiedSignature {
        signer: v.signer,
        statement,
        notes: v.notes,
    })
}

/// Checks the envelope's signature over the payload's PAE, then over `model_signing` 0.2's
/// encoding of it (with `v0_2_hash`), as `model_signing` does.
fn check(
    k: &PublicKey,
    b: &Bundle,
    hash: Hash,
    v0_2_hash: Hash,
    with: &str,
) -> Result<(), SignatureError> {
    if k.verifies(&pae(&b.payload), &b.signature, hash)
        || k.verifies(&pae_v0_2(&b.payload), &b.signature, v0_2_hash)
    {
        Ok(())
    } else {
        Err(SignatureError::Invalid { with: with.into() })
    }
}

/// Signs an in-toto statement (its exact bytes) with `key`: the bundle's JSON. With
/// `certificates` (the signing certificate, then the rest of its chain, DER) the bundle carries
/// the chain, and the signing certificate's key must be `key`'s; without, the key's hint.
pub fn sign_statement(
    statement: &[u8],
    key: &SigningKey,
    certificates: Option<Vec<Vec<u8>>>,
) -> Result<String, SignatureError> {
    let material = match certificates {
        Some(ders) => {
            let leaf = ders
                .first()
                .ok_or_else(|| SignatureError::bundle("no signing certificate"))?;
            let k = chain::certificate_key(leaf).map_err(|why| {
                SignatureError::bundle(format!("the signing certificate's key: {why}"))
            })?;
            if !k.same_key(key.public_key()) {
                return Err(SignatureError::bundle(
                    "the signing certificate's key is not the private key's public half",
                ));
            }
            Material::Certificates(ders)
        }
        None => Material::Key {
            hint: Some(key.public_key().fingerprint()),
        },
    };
    let signature = key.sign(&pae(statement))?;
    // What is written is checked as a verifier checks it.
    if !key
        .public_key()
        .verifies(&pae(statement), &signature, key.public_key().curve().hash())
    {
        return Err(SignatureError::Invalid {
            with: "the key that made it".into(),
        });
    }
    Ok(Bundle {
        version: 3,
        material,
        payload_type: crate::manifest::interop::openssf::PAYLOAD_TYPE.to_string(),
        payload: statement.to_vec(),
        signature,
        tlog_entries: Vec::new(),
        timestamps: Vec::new(),
    }
    .to_json())
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::signature::{
        EcdsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING, ECDSA_P384_SHA384_ASN1_SIGNING,
        ECDSA_P521_SHA512_ASN1_SIGNING,
    };

    fn key(curve: Curve) -> SigningKey {
        let alg = match curve {
            Curve::P256 => &ECDSA_P256_SHA256_ASN1_SIGNING,
            Curve::P384 => &ECDSA_P384_SHA384_ASN1_SIGNING,
            Curve::P521 => &ECDSA_P521_SHA512_ASN1_SIGNING,
        };
        let doc = EcdsaKeyPair::generate_pkcs8(alg, &aws_lc_rs::rand::SystemRandom::new()).unwrap();
        SigningKey::from_der(doc.as_ref()).unwrap()
    }

    fn statement() -> String {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("w.bin"), b"weights").unwrap();
        crate::manifest::create_in_toto(&[d.path().to_path_buf()], None).unwrap()
    }

    fn policy(k: &SigningKey) -> TrustPolicy {
        TrustPolicy::Key(k.public_key().clone())
    }

    #[test]
    fn what_is_signed_verifies_with_its_key_on_every_curve() {
        let st = statement();
        for curve in [Curve::P256, Curve::P384, Curve::P521] {
            let k = key(curve);
            let bundle = sign_statement(st.as_bytes(), &k, None).unwrap();
            let v = verify_signature(bundle.as_bytes(), &policy(&k)).unwrap();
            assert_eq!(v.signer, Signer::key(k.public_key()));
            assert_eq!(v.signer.curve, curve.name());
            assert_eq!(v.statement.files()[0].path, "w.bin");
            assert!(v.notes.is_empty());
            // Another key on the same curve: refused by the hint, before any signature check.
            let other = key(curve);
            let e = verify_signature(bundle.as_bytes(), &policy(&other)).unwrap_err();
            assert!(matches!(e, SignatureError::KeyMismatch { .. }), "{e}");
            assert!(e.is_refusal());
        }
    }

    fn edit(bundle: &str, f: impl FnOnce(&mut serde_json::Value)) -> String {
        let mut v: serde_json::Value = serde_json::from_str(bundle).unwrap();
        f(&mut v);
        v.to_string()
    }

    #[test]
    fn a_statement_edited_after_signing_is_refused() {
        use base64::Engine as _;
        let k = key(Curve::P256);
        let st = statement();
        let bundle = sign_statement(st.as_bytes(), &k, None).unwrap();
        let edited = st.replace("w.bin", "x.bin");
        let b = edit(&bundle, |v| {
            v["dsseEnvelope"]["payload"] = base64::engine::general_purpose::STANDARD
                .encode(&edited)
                .into();
        });
        let e = verify_signature(b.as_bytes(), &policy(&k)).unwrap_err();
        assert!(matches!(e, SignatureError::Invalid { .. }), "{e}");
        // The signature's bytes changed: refused too.
        let b = edit(&bundle, |v| {
            let s = v["dsseEnvelope"]["signatures"][0]["sig"].as_str().unwrap();
            let mut raw = base64::engine::general_purpose::STANDARD.decode(s).unwrap();
            let last = raw.len() - 1;
            raw[last] ^= 1;
            v["dsseEnvelope"]["signatures"][0]["sig"] =
                base64::engine::general_purpose::STANDARD.encode(raw).into();
        });
        let e = verify_signature(b.as_bytes(), &policy(&k)).unwrap_err();
        assert!(matches!(e, SignatureError::Invalid { .. }), "{e}");
    }

    #[test]
    fn a_bundle_without_a_hint_is_checked_with_the_key_and_says_so() {
        let k = key(Curve::P384);
        let bundle = sign_statement(statement().as_bytes(), &k, None).unwrap();
        let b = edit(&bundle, |v| {
            v["verificationMaterial"]["publicKey"] = serde_json::json!({});
        });
        let v = verify_signature(b.as_bytes(), &policy(&k)).unwrap();
        assert!(v.notes[0].contains("names no key"), "{:?}", v.notes);
        let e = verify_signature(b.as_bytes(), &policy(&key(Curve::P384))).unwrap_err();
        assert!(matches!(e, SignatureError::Invalid { .. }), "{e}");
    }

    #[test]
    fn model_signing_0_2_encoding_is_accepted() {
        use base64::Engine as _;
        let k = key(Curve::P256);
        let st = statement();
        let good = sign_statement(st.as_bytes(), &k, None).unwrap();
        let old_sig = k.sign(&bundle::pae_v0_2(st.as_bytes())).unwrap();
        let b = edit(&good, |v| {
            v["dsseEnvelope"]["signatures"][0]["sig"] = base64::engine::general_purpose::STANDARD
                .encode(old_sig)
                .into();
        });
        verify_signature(b.as_bytes(), &policy(&k)).unwrap();
    }

    #[test]
    fn the_other_method_is_named_and_size_is_bounded() {
        let k = key(Curve::P256);
        let bundle = sign_statement(statement().as_bytes(), &k, None).unwrap();
        let roots = TrustPolicy::Certificates(CertificateRoots::mozilla());
        let e = verify_signature(bundle.as_bytes(), &roots).unwrap_err();
        assert!(e.to_string().contains("bare key, not a certificate"), "{e}");
        let huge = vec![b' '; MAX_SIGNATURE_BYTES as usize + 1];
        let e = verify_signature(&huge, &policy(&k)).unwrap_err();
        assert!(e.to_string().contains("larger than"), "{e}");
    }

    #[test]
    fn a_chain_whose_leaf_is_not_the_key_is_not_written() {
        let k = key(Curve::P256);
        let e =
            sign_statement(statement().as_bytes(), &k, Some(vec![vec![0x30, 0x00]])).unwrap_err();
        assert!(e.to_string().contains("signing certificate"), "{e}");
    }
}
