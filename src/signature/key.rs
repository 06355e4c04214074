//! Elliptic-curve keys as `model_signing` uses them (P-256, P-384, P-521; ECDSA with SHA-256,
//! SHA-384 and SHA-512 by the curve's size), read from PEM; signatures in ASN.1 DER.

use std::path::Path;

use aws_lc_rs::encoding::AsDer as _;
use aws_lc_rs::signature::{self as sig, EcdsaKeyPair, KeyPair as _, UnparsedPublicKey};
use base64::Engine as _;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{PrivateKeyDer, SubjectPublicKeyInfoDer};
use sha2::{Digest as _, Sha256};
use x509_cert::der::asn1::ObjectIdentifier;
use x509_cert::der::Decode as _;
use x509_cert::spki::SubjectPublicKeyInfoRef;

use super::SignatureError;

/// The largest key or certificate file read.
pub(crate) const MAX_PEM_BYTES: u64 = 1 << 20;

const ID_EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const SECP256R1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
const SECP384R1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");
const SECP521R1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.35");

/// The curves `model_signing` signs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Curve {
    /// NIST P-256 (secp256r1), signed with SHA-256.
    P256,
    /// NIST P-384 (secp384r1), signed with SHA-384.
    P384,
    /// NIST P-521 (secp521r1), signed with SHA-512.
    P521,
}

/// The digest an ECDSA signature is made over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hash {
    Sha256,
    Sha384,
    Sha512,
}

impl Curve {
    /// The curve's name, as OpenSSL names it.
    pub fn name(self) -> &'static str {
        match self {
            Curve::P256 => "secp256r1",
            Curve::P384 => "secp384r1",
            Curve::P521 => "secp521r1",
        }
    }

    /// The digest `model_signing` pairs with the curve.
    pub(crate) fn hash(self) -> Hash {
        match self {
            Curve::P256 => Hash::Sha256,
            Curve::P384 => Hash::Sha384,
            Curve::P521 => Hash::Sha512,
        }
    }

    fn signing(self) -> &'static sig::EcdsaSigningAlgorithm {
        match self {
            Curve::P256 => &sig::ECDSA_P256_SHA256_ASN1_SIGNING,
            Curve::P384 => &sig::ECDSA_P384_SHA384_ASN1_SIGNING,
            Curve::P521 => &sig::ECDSA_P521_SHA512_ASN1_SIGNING,
        }
    }

    fn verifying(self, hash: Hash) -> &'static sig::EcdsaVerificationAlgorithm {
        match (self, hash) {
            (Curve::P256, Hash::Sha256) => &sig::ECDSA_P256_SHA256_ASN1,
            (Curve::P256, Hash::Sha384) => &sig::ECDSA_P256_SHA384_ASN1,
            (Curve::P256, Hash::Sha512) => &sig::ECDSA_P256_SHA512_ASN1,
            (Curve::P384, Hash::Sha256) => &sig::ECDSA_P384_SHA256_ASN1,
            (Curve::P384, Hash::Sha384) => &sig::ECDSA_P384_SHA384_ASN1,
            (Curve::P384, Hash::Sha512) => &sig::ECDSA_P384_SHA512_ASN1,
            (Curve::P521, Hash::Sha256) => &sig::ECDSA_P521_SHA256_ASN1,
            (Curve::P521, Hash::Sha384) => &sig::ECDSA_P521_SHA384_ASN1,
            (Curve::P521, Hash::Sha512) => &sig::ECDSA_P521_SHA512_ASN1,
        }
    }

    fn of(oid: ObjectIdentifier) -> Option<Curve> {
        match oid {
            SECP256R1 => Some(Curve::P256),
            SECP384R1 => Some(Curve::P384),
            SECP521R1 => Some(Curve::P521),
            _ => None,
        }
    }
}

/// Reads a small file the user named (a key, a certificate), at most [`MAX_PEM_BYTES`].
pub(crate) fn read_small(path: &Path) -> Result<Vec<u8>, SignatureError> {
    read_at_most(path, MAX_PEM_BYTES)
}

/// Reads a file whole (a link followed, a FIFO refused), refusing one larger than `limit`.
pub(crate) fn read_at_most(path: &Path, limit: u64) -> Result<Vec<u8>, SignatureError> {
    let file =
        crate::safe_fs::open_read_following(path).map_err(|e| SignatureError::io(path, e))?;
    crate::safe_fs::read_limited(file, limit).map_err(|e| match e {
        crate::safe_fs::Limited::TooLarge(size) => SignatureError::material(
            path,
            format!("{size} bytes or more, larger than the {limit} read for this kind of file"),
        ),
        crate::safe_fs::Limited::Io(e) => SignatureError::io(path, e),
    })
}

/// An elliptic-curve public key (a `BEGIN PUBLIC KEY` PEM, or a certificate's key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    spki: Vec<u8>,
    point: Vec<u8>,
    curve: Curve,
}

impl PublicKey {
    /// Reads a PEM public key file (`-----BEGIN PUBLIC KEY-----`, as `openssl ec -pubout` and
    /// Python's `cryptography` write it).
    pub fn read(path: &Path) -> Result<PublicKey, SignatureError> {
        let pem = read_small(path)?;
        PublicKey::from_pem(&pem).map_err(|e| match e {
            SignatureError::Key { reason } => SignatureError::material(path, reason),
            other => other,
        })
    }

    /// A key from PEM text (`-----BEGIN PUBLIC KEY-----`).
    pub fn from_pem(pem: &[u8]) -> Result<PublicKey, SignatureError> {
        let key = |reason: String| SignatureError::Key { reason };
        let der = SubjectPublicKeyInfoDer::from_pem_slice(pem)
            .map_err(|e| key(format!("not a PEM public key (BEGIN PUBLIC KEY): {e}")))?;
        PublicKey::from_spki(der.as_ref()).map_err(key)
    }

    /// A key from its DER `SubjectPublicKeyInfo`; the reason when it is not an EC key on a
    /// curve `model_signing` uses.
    pub(crate) fn from_spki(der: &[u8]) -> Result<PublicKey, String> {
        let spki = SubjectPublicKeyInfoRef::from_der(der)
            .map_err(|e| format!("not a DER SubjectPublicKeyInfo ({e})"))?;
        if spki.algorithm.oid != ID_EC_PUBLIC_KEY {
            return Err(format!(
                "a {} key, not an elliptic-curve key (model signing uses P-256, P-384 or P-521)",
                spki.algorithm.oid
            ));
        }
        let curve = spki
            .algorithm
            .parameters
            .and_then(|p| p.decode_as::<ObjectIdentifier>().ok())
            .and_then(Curve::of)
            .ok_or("an elliptic-curve key on a curve other than P-256, P-384 or P-521")?;
        let point = spki
            .subject_public_key
            .as_bytes()
            .ok_or("a public key that is not a whole number of bytes")?
            .to_vec();
        Ok(PublicKey {
            spki: der.to_vec(),
            point,
            curve,
        })
    }

    /// Whether `other` is the same key (the same curve and point, however encoded).
    pub(crate) fn same_key(&self, other: &PublicKey) -> bool {
        self.curve == other.curve && self.point == other.point
    }

    /// Its curve.
    pub fn curve(&self) -> Curve {
        self.curve
    }

    /// Its PEM encoding as Python's `cryptography` writes it (64-character lines, `\n`).
    pub fn to_pem(&self) -> String {
        let b64 = base64::engine::general_purpose::STANDARD.encode(&self.spki);
        let mut out = String::from("-----BEGIN PUBLIC KEY-----\n");
        for line in b64.as_bytes().chunks(64) {
            out.push_str(std::str::from_utf8(line).unwrap_or_default());
            out.push('\n');
        }
        out.push_str("-----END PUBLIC KEY-----\n");
        out
    }

    /// The key's fingerprint as `model_signing` records it in a bundle (`publicKey.hint`): the
    /// hex SHA-256 of [`Self::to_pem`].
    pub fn fingerprint(&self) -> String {
        hex::encode(Sha256::digest(self.to_pem().as_bytes()))
    }

    /// Whether `signature` (ASN.1 DER) is this key's over `message` with `hash`.
    pub(crate) fn verifies(&self, message: &[u8], signature: &[u8], hash: Hash) -> bool {
        UnparsedPublicKey::new(self.curve.verifying(hash), &self.point)
            .verify(message, signature)
            .is_ok()
    }
}

/// An elliptic-curve private key that signs (PKCS#8 `BEGIN PRIVATE KEY` or SEC1
/// `BEGIN EC PRIVATE KEY`, unencrypted).
pub struct SigningKey {
    pair: EcdsaKeyPair,
    public: PublicKey,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("public", &self.public.fingerprint())
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// Reads a PEM private key file.
    pub fn read(path: &Path) -> Result<SigningKey, SignatureError> {
        let pem = read_small(path)?;
        if pem
            .windows(b"ENCRYPTED PRIVATE KEY".len())
            .any(|w| w == b"ENCRYPTED PRIVATE KEY")
        {
            return Err(SignatureError::material(
                path,
                "an encrypted private key: decrypt it first (openssl pkcs8 -in KEY -out PLAIN)",
            ));
        }
        let der = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
            SignatureError::material(
                path,
                format!("not a PEM private key (BEGIN PRIVATE KEY or BEGIN EC PRIVATE KEY): {e}"),
            )
        })?;
        SigningKey::from_der(der.secret_der()).map_err(|why| SignatureError::material(path, why))
    }

    pub(crate) fn from_der(der: &[u8]) -> Result<SigningKey, String> {
        for curve in [Curve::P256, Curve::P384, Curve::P521] {
            if let Ok(pair) = EcdsaKeyPair::from_private_key_der(curve.signing(), der) {
                let spki = pair
                    .public_key()
                    .as_der()
                    .map_err(|_| "its public key cannot be encoded".to_string())?;
                let public = PublicKey::from_spki(spki.as_ref())?;
                return Ok(SigningKey { pair, public });
            }
        }
        Err("not an elliptic-curve private key on P-256, P-384 or P-521".into())
    }

    /// Its public key.
    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// An ECDSA signature (ASN.1 DER) over `message`, with the curve's digest.
    pub(crate) fn sign(&self, message: &[u8]) -> Result<Vec<u8>, SignatureError> {
        let rng = aws_lc_rs::rand::SystemRandom::new();
        self.pair
            .sign(&rng, message)
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| SignatureError::bundle("the key could not sign"))
    }
}
