//! Certificates: the signing certificate checked to a trusted root (`model_signing`'s
//! `certificate` method) and its fields read.
//!
//! The path is built and checked by `rustls-webpki` (signatures, validity, basic constraints,
//! name constraints), at the moment the signing certificate's validity begins, as
//! `model_signing` checks it (an OpenSSL store set to that time). Every certificate the user
//! gives is a trust anchor. The signing certificate must allow signing: its key usage has
//! `digitalSignature`, or its extended key usage `codeSigning`.

use std::path::{Path, PathBuf};

use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, UnixTime};
use webpki::{EndEntityCert, KeyPurposeIdIter};
use x509_cert::der::asn1::ObjectIdentifier;
use x509_cert::ext::pkix::{ExtendedKeyUsage, KeyUsage};
use x509_cert::Certificate;

use super::key::{read_small, PublicKey};
use super::{SignatureError, Signer};

const CODE_SIGNING: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.3.3");

/// The certificates a signing certificate must chain to.
#[derive(Debug, Clone)]
pub struct CertificateRoots {
    anchors: Vec<CertificateDer<'static>>,
}

impl CertificateRoots {
    /// Every certificate in the PEM files `paths` (a root, or an intermediate trusted as one).
    pub fn read(paths: &[PathBuf]) -> Result<CertificateRoots, SignatureError> {
        let mut anchors = Vec::new();
        for path in paths {
            for c in read_certificates(path)? {
                webpki::anchor_from_trusted_cert(&c).map_err(|e| {
                    SignatureError::material(
                        path,
                        format!("a certificate that cannot be trusted: {e}"),
                    )
                })?;
                anchors.push(c);
            }
        }
        Ok(CertificateRoots { anchors })
    }

    /// Mozilla's root certificates (what `model_signing` trusts when no chain is given: the
    /// `certifi` bundle, which is Mozilla's).
    pub fn mozilla() -> CertificateRoots {
        CertificateRoots {
            anchors: webpki_root_certs::TLS_SERVER_ROOT_CERTS.to_vec(),
        }
    }
}

/// Who signed, by certificate.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CertificateSigner {
    /// The signing certificate's subject (RFC 4514).
    pub subject: String,
    /// Its issuer (RFC 4514).
    pub issuer: String,
    /// The subject of the trusted certificate the path ends at.
    pub root: String,
}

/// Accepts any extended key usage: the signing use is checked apart (see the module docs).
pub(super) struct AnyUsage;

impl webpki::ExtendedKeyUsageValidator for AnyUsage {
    fn validate(&self, iter: KeyPurposeIdIter<'_, '_>) -> Result<(), webpki::Error> {
        for purpose in iter {
            purpose?;
        }
        Ok(())
    }
}

fn untrusted(reason: impl Into<String>) -> SignatureError {
    SignatureError::Untrusted {
        reason: reason.into(),
    }
}

fn parse(der: &[u8], what: &str) -> Result<Certificate, SignatureError> {
    super::der::certificate(der).map_err(|e| SignatureError::bundle(format!("{what}: {e}")))
}

/// Checks the bundle's chain (`ders[0]` the signing certificate) to `roots`; the signing key
/// and who it belongs to.
pub(crate) fn verify_chain(
    ders: &[Vec<u8>],
    roots: &CertificateRoots,
) -> Result<(PublicKey, Signer), SignatureError> {
    let Some((leaf_der, rest)) = ders.split_first() else {
        return Err(SignatureError::bundle("an empty certificate chain"));
    };
    let leaf = parse(leaf_der, "the signing certificate")?;
    let tbs = &leaf.tbs_certificate;
    let not_before = tbs.validity.not_before.to_unix_duration();
    // Each anchor beside the certificate it was read from (to name the one the path ends at).
    let (anchors, anchor_certs): (Vec<_>, Vec<_>) = roots
        .anchors
        .iter()
        .filter_map(|c| webpki::anchor_from_trusted_cert(c).ok().map(|a| (a, c)))
        .unzip();
    let leaf_cert = CertificateDer::from(leaf_der.as_slice());
    let ee = EndEntityCert::try_from(&leaf_cert)
        .map_err(|e| untrusted(format!("the signing certificate cannot be used: {e}")))?;
    let intermediates: Vec<CertificateDer<'_>> = rest
        .iter()
        .map(|d| CertificateDer::from(d.as_slice()))
        .collect();
    let path = ee
        .verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &anchors,
            &intermediates,
            UnixTime::since_unix_epoch(not_before),
            AnyUsage,
            None,
            None,
        )
        .map_err(|e| untrusted(path_error(&e, not_before)))?;
    let root_subject = anchors
        .iter()
        .position(|a| a.subject.as_ref() == path.anchor().subject.as_ref())
        .and_then(|i| super::der::certificate(anchor_certs[i]).ok())
        .map(|c| c.tbs_certificate.subject.to_string())
        .unwrap_or_default();
    may_sign(&leaf)?;
    let key = super::der::certificate_key(&leaf)
        .map_err(|why| untrusted(format!("the signing certificate's key: {why}")))?;
    let who = Signer::certificate(
        &key,
        leaf_der,
        CertificateSigner {
            subject: tbs.subject.to_string(),
            issuer: tbs.issuer.to_string(),
            root: root_subject,
        },
    );
    Ok((key, who))
}

/// What a failed path means, in words (webpki's errors print as Rust debug output).
fn path_error(e: &webpki::Error, at: std::time::Duration) -> String {
    let date = |t: &UnixTime| {
        let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(t.as_secs());
        humantime::format_rfc3339_seconds(when).to_string()
    };
    let issued = date(&UnixTime::since_unix_epoch(at));
    match e {
        webpki::Error::UnknownIssuer => {
            "no path to a trusted certificate: the chain does not lead to any certificate given"
                .into()
        }
        webpki::Error::CertExpired { not_after, .. } => format!(
            "a certificate of the chain had expired ({}) when the signing certificate was \
             issued ({issued})",
            date(not_after)
        ),
        webpki::Error::CertNotValidYet { not_before, .. } => format!(
            "a certificate of the chain was not valid yet ({}) when the signing certificate \
             was issued ({issued})",
            date(not_before)
        ),
        webpki::Error::InvalidSignatureForPublicKey => {
            "a certificate's signature does not verify with its issuer's key".into()
        }
        webpki::Error::CaUsedAsEndEntity => "the signing certificate is a CA certificate".into(),
        webpki::Error::EndEntityUsedAsCa => {
            "a certificate that is not a CA issued another in the chain".into()
        }
        other => format!("the chain is not valid ({other:?})"),
    }
}

/// Whether the certificate may sign: `digitalSignature` in its key usage, or `codeSigning` in
/// its extended key usage.
fn may_sign(cert: &Certificate) -> Result<(), SignatureError> {
    let ku = super::der::extension::<KeyUsage>(cert)
        .map_err(|e| SignatureError::bundle(format!("the signing certificate's key usage: {e}")))?;
    if ku.is_some_and(|ku| ku.digital_signature()) {
        return Ok(());
    }
    let eku = super::der::extension::<ExtendedKeyUsage>(cert).map_err(|e| {
        SignatureError::bundle(format!("the signing certificate's extended key usage: {e}"))
    })?;
    if eku.is_some_and(|eku| eku.0.contains(&CODE_SIGNING)) {
        return Ok(());
    }
    Err(untrusted(
        "the signing certificate may not sign (neither digitalSignature in its key usage nor \
         codeSigning in its extended key usage)",
    ))
}

/// Every certificate of a PEM file (at least one), each one readable.
fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, SignatureError> {
    let pem = read_small(path)?;
    let mut out = Vec::new();
    for c in CertificateDer::pem_slice_iter(&pem) {
        let c =
            c.map_err(|e| SignatureError::material(path, format!("not PEM certificates: {e}")))?;
        super::der::certificate(&c).map_err(|e| {
            SignatureError::material(path, format!("a certificate that cannot be read: {e}"))
        })?;
        out.push(c);
    }
    if out.is_empty() {
        return Err(SignatureError::material(path, "no PEM certificate in it"));
    }
    Ok(out)
}

/// Reads the signing certificate and the rest of its chain (PEM files) for signing; the
/// certificates in order, as DER.
pub(crate) fn read_chain(
    certificate: &Path,
    chain: &[PathBuf],
) -> Result<Vec<Vec<u8>>, SignatureError> {
    let mut out = Vec::new();
    for path in std::iter::once(certificate).chain(chain.iter().map(PathBuf::as_path)) {
        out.extend(read_certificates(path)?.into_iter().map(|c| c.to_vec()));
    }
    Ok(out)
}

/// Who signs with the chain `ders` (the signing certificate first; the root named is the
/// chain's last certificate's subject, as the signer gave it: nothing is checked here).
pub(crate) fn describe(ders: &[Vec<u8>], key: &PublicKey) -> Result<Signer, SignatureError> {
    let leaf_der = ders.first().map_or(&[][..], Vec::as_slice);
    let leaf = parse(leaf_der, "the signing certificate")?;
    let last = match ders.last() {
        Some(d) => parse(d, "the chain's last certificate")?,
        None => leaf.clone(),
    };
    Ok(Signer::certificate(
        key,
        leaf_der,
        CertificateSigner {
            subject: leaf.tbs_certificate.subject.to_string(),
            issuer: leaf.tbs_certificate.issuer.to_string(),
            root: last.tbs_certificate.subject.to_string(),
        },
    ))
}

/// The public key of a certificate (DER).
pub(crate) fn certificate_key(der: &[u8]) -> Result<PublicKey, String> {
    super::der::certificate_key(&super::der::certificate(der)?)
}
