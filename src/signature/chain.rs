//! Certificates: the signing certificate checked to a trusted root (`model_signing`'s
//! `certificate` method) and its fields read.
//!
//! The path is built and checked by `rustls-webpki` (signatures, validity, basic constraints,
//! name constraints), at the moment the signing certificate's validity begins, as
//! `model_signing` checks it (an OpenSSL store set to that time), and then held to the rules of
//! OpenSSL's verification that webpki leaves out (see [`openssl_rules`]): a trust anchor is a
//! self-issued certificate the user gives (an intermediate given is used to build the path,
//! never trusted alone), it must be a CA (basicConstraints CA=true, or no basicConstraints with
//! keyCertSign, or a version 1 certificate), valid at that moment, and its pathLen holds; every
//! issuer's key usage, when it has one, allows keyCertSign. The signing certificate must allow
//! signing: its key usage has `digitalSignature`, or its extended key usage `codeSigning`.

use std::path::{Path, PathBuf};

use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, UnixTime};
use webpki::{EndEntityCert, KeyPurposeIdIter};
use x509_cert::der::asn1::ObjectIdentifier;
use x509_cert::ext::pkix::{BasicConstraints, ExtendedKeyUsage, KeyUsage};
use x509_cert::Certificate;

use super::key::{read_small, PublicKey};
use super::{SignatureError, Signer};

const CODE_SIGNING: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.3.3");

/// The certificates a signing certificate must chain to.
#[derive(Debug, Clone)]
pub struct CertificateRoots {
    /// The self-issued certificates given: the trust anchors.
    anchors: Vec<CertificateDer<'static>>,
    /// The other certificates given (intermediates): used to build a path to an anchor, never
    /// trusted alone (as OpenSSL's store, without its partial-chain flag, trusts them).
    intermediates: Vec<CertificateDer<'static>>,
}

impl CertificateRoots {
    /// Every certificate in the PEM files `paths`: roots (self-issued), and intermediates that
    /// lead to one.
    pub fn read(paths: &[PathBuf]) -> Result<CertificateRoots, SignatureError> {
        let mut roots = CertificateRoots {
            anchors: Vec::new(),
            intermediates: Vec::new(),
        };
        for path in paths {
            for c in read_certificates(path)? {
                webpki::anchor_from_trusted_cert(&c).map_err(|e| {
                    SignatureError::material(
                        path,
                        format!("a certificate that cannot be trusted: {e}"),
                    )
                })?;
                let tbs = super::der::certificate(&c)
                    .map_err(|e| SignatureError::material(path, e))?
                    .tbs_certificate;
                if tbs.subject == tbs.issuer {
                    roots.anchors.push(c);
                } else {
                    roots.intermediates.push(c);
                }
            }
        }
        Ok(roots)
    }

    /// Mozilla's root certificates (what `model_signing` trusts when no chain is given: the
    /// `certifi` bundle, which is Mozilla's).
    pub fn mozilla() -> CertificateRoots {
        CertificateRoots {
            anchors: webpki_root_certs::TLS_SERVER_ROOT_CERTS.to_vec(),
            intermediates: Vec::new(),
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
    if roots.anchors.is_empty() {
        return Err(untrusted(
            "none of the certificates given is a root (self-issued): an intermediate is \
             trusted only through its root, as model_signing trusts it; give the root",
        ));
    }
    // Each anchor beside the certificate it was read from (its constraints are checked here,
    // and it names the root the path ends at).
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
        .chain(roots.intermediates.iter().cloned())
        .collect();
    let anchor_index =
        |a: &rustls_pki_types::TrustAnchor<'_>| anchors.iter().position(|x| std::ptr::eq(x, a));
    // Why the last path webpki found was refused by OpenSSL's rules (webpki then tries others).
    let refused: std::cell::RefCell<Option<String>> = std::cell::RefCell::new(None);
    let check = |path: &webpki::VerifiedPath<'_>| -> Result<(), webpki::Error> {
        let issuers: Vec<CertificateDer<'_>> =
            path.intermediate_certificates().map(|c| c.der()).collect();
        let Some(anchor) = anchor_index(path.anchor()).map(|i| anchor_certs[i]) else {
            *refused.borrow_mut() = Some("the path ends at no certificate given".into());
            return Err(webpki::Error::UnknownIssuer);
        };
        match openssl_rules(&issuers, anchor, not_before) {
            Ok(()) => Ok(()),
            Err(why) => {
                *refused.borrow_mut() = Some(why);
                Err(webpki::Error::UnknownIssuer)
            }
        }
    };
    let path = ee
        .verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &anchors,
            &intermediates,
            UnixTime::since_unix_epoch(not_before),
            AnyUsage,
            None,
            Some(&check),
        )
        .map_err(|e| match refused.borrow_mut().take() {
            Some(why) => untrusted(why),
            None => untrusted(path_error(&e, not_before)),
        })?;
    let root_subject = anchor_index(path.anchor())
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

/// What OpenSSL's verification (`model_signing`'s `X509Store`, default flags) asks of a path
/// that webpki does not: `issuers` the path's intermediates from the signing certificate's
/// issuer up, `anchor` the root it ends at, `at` the moment it is checked at.
///
/// - every issuer's key usage, when it has one, allows `keyCertSign` (OpenSSL's
///   `X509_V_ERR_KEYUSAGE_NO_CERTSIGN`, or "invalid CA certificate");
/// - the root is a CA: basicConstraints CA=true; without basicConstraints, a key usage (which
///   then allows keyCertSign) or a version 1 certificate ("invalid CA certificate");
/// - the root's pathLen, when it has one, is at least the number of intermediates that are not
///   self-issued below it ("path length constraint exceeded");
/// - the root was valid at `at`.
///
/// webpki checks the intermediates' basicConstraints, pathLen and validity itself, and trusts
/// an anchor for its name and key alone.
fn openssl_rules(
    issuers: &[CertificateDer<'_>],
    anchor: &[u8],
    at: std::time::Duration,
) -> Result<(), String> {
    let read = |der: &[u8]| {
        super::der::certificate(der).map_err(|e| format!("a certificate of the chain: {e}"))
    };
    let root = read(anchor)?;
    let mut below = Vec::with_capacity(issuers.len());
    for der in issuers {
        below.push(read(der)?);
    }
    for c in below.iter().chain(std::iter::once(&root)) {
        let ku = super::der::extension::<KeyUsage>(c)
            .map_err(|e| format!("the key usage of '{}': {e}", c.tbs_certificate.subject))?;
        if ku.is_some_and(|ku| !ku.key_cert_sign()) {
            return Err(format!(
                "'{}' issued a certificate of the chain, and its key usage does not allow it \
                 (no keyCertSign)",
                c.tbs_certificate.subject
            ));
        }
    }
    let name = root.tbs_certificate.subject.to_string();
    let bc = super::der::extension::<BasicConstraints>(&root)
        .map_err(|e| format!("the basic constraints of '{name}': {e}"))?;
    match &bc {
        Some(bc) if !bc.ca => {
            return Err(format!(
                "the root '{name}' is not a CA (its basicConstraints say CA=false)"
            ))
        }
        Some(_) => {}
        None => {
            let v1 = root.tbs_certificate.version == x509_cert::Version::V1;
            let has_ku = super::der::extension::<KeyUsage>(&root)
                .ok()
                .flatten()
                .is_some();
            if !v1 && !has_ku {
                return Err(format!(
                    "the root '{name}' is not a CA (no basicConstraints, and no key usage \
                     allowing keyCertSign)"
                ));
            }
        }
    }
    if let Some(limit) = bc.and_then(|bc| bc.path_len_constraint) {
        let cas = below
            .iter()
            .filter(|c| c.tbs_certificate.subject != c.tbs_certificate.issuer)
            .count();
        if cas > usize::from(limit) {
            return Err(format!(
                "the root '{name}' allows {limit} intermediate(s) below it (pathLen), and the \
                 chain has {cas}"
            ));
        }
    }
    let validity = &root.tbs_certificate.validity;
    let (start, end) = (
        validity.not_before.to_unix_duration(),
        validity.not_after.to_unix_duration(),
    );
    if at < start || at > end {
        let date = |d: std::time::Duration| {
            humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + d).to_string()
        };
        return Err(format!(
            "the root '{name}' was not valid ({} to {}) when the signing certificate was \
             issued ({})",
            date(start),
            date(end),
            date(at)
        ));
    }
    Ok(())
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
        webpki::Error::PathLenConstraintViolated => {
            "an intermediate allows fewer certificates below it (pathLen) than the chain has".into()
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

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::encoding::AsDer as _;
    use aws_lc_rs::signature::{EcdsaKeyPair, KeyPair as _, ECDSA_P256_SHA256_ASN1_SIGNING};
    use std::str::FromStr as _;
    use std::time::{Duration, SystemTime};
    use x509_cert::der::asn1::{BitString, OctetString};
    use x509_cert::der::{Decode as _, Encode as _};
    use x509_cert::ext::Extension;
    use x509_cert::name::Name;
    use x509_cert::serial_number::SerialNumber;
    use x509_cert::spki::{AlgorithmIdentifierOwned, SubjectPublicKeyInfoOwned};
    use x509_cert::time::{Time, Validity};

    const ECDSA_WITH_SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.2");
    const DAY: Duration = Duration::from_secs(86_400);

    fn key() -> EcdsaKeyPair {
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, doc.as_ref()).unwrap()
    }

    /// What a test certificate says of itself.
    #[derive(Clone)]
    struct Spec {
        subject: &'static str,
        /// basicConstraints: `None` for none, else (CA, pathLen).
        bc: Option<(bool, Option<u8>)>,
        /// Key usage: `None` for none.
        ku: Option<KeyUsage>,
        /// Validity, from now.
        from: i64,
        to: i64,
        v1: bool,
    }

    use x509_cert::ext::pkix::KeyUsages;

    fn ca(subject: &'static str) -> Spec {
        Spec {
            subject,
            bc: Some((true, None)),
            ku: Some(KeyUsage(KeyUsages::KeyCertSign | KeyUsages::CRLSign)),
            from: -100,
            to: 100,
            v1: false,
        }
    }

    fn signer() -> Spec {
        Spec {
            subject: "CN=signer",
            bc: Some((false, None)),
            ku: Some(KeyUsage(KeyUsages::DigitalSignature.into())),
            from: -1,
            to: 10,
            v1: false,
        }
    }

    fn time(days: i64) -> Time {
        let now = SystemTime::now();
        let t = if days >= 0 {
            now + DAY * days as u32
        } else {
            now - DAY * (-days) as u32
        };
        Time::try_from(t).unwrap()
    }

    fn ext<T: x509_cert::der::Encode>(oid: ObjectIdentifier, critical: bool, v: &T) -> Extension {
        Extension {
            extn_id: oid,
            critical,
            extn_value: OctetString::new(v.to_der().unwrap()).unwrap(),
        }
    }

    /// The certificate of `spec` for `subject_key`, issued by `issuer` (its name and key).
    fn cert(spec: &Spec, subject_key: &EcdsaKeyPair, issuer: (&str, &EcdsaKeyPair)) -> Vec<u8> {
        use x509_cert::der::oid::AssociatedOid as _;
        let mut exts = Vec::new();
        if let Some((is_ca, path_len)) = spec.bc {
            let bc = BasicConstraints {
                ca: is_ca,
                path_len_constraint: path_len,
            };
            exts.push(ext(BasicConstraints::OID, true, &bc));
        }
        if let Some(ku) = &spec.ku {
            exts.push(ext(KeyUsage::OID, true, ku));
        }
        let spki = subject_key.public_key().as_der().unwrap();
        let alg = AlgorithmIdentifierOwned {
            oid: ECDSA_WITH_SHA256,
            parameters: None,
        };
        let tbs = x509_cert::TbsCertificate {
            version: if spec.v1 {
                x509_cert::Version::V1
            } else {
                x509_cert::Version::V3
            },
            serial_number: SerialNumber::new(&[1, 2, 3]).unwrap(),
            signature: alg.clone(),
            issuer: Name::from_str(issuer.0).unwrap(),
            validity: Validity {
                not_before: time(spec.from),
                not_after: time(spec.to),
            },
            subject: Name::from_str(spec.subject).unwrap(),
            subject_public_key_info: SubjectPublicKeyInfoOwned::from_der(spki.as_ref()).unwrap(),
            issuer_unique_id: None,
            subject_unique_id: None,
            extensions: (!spec.v1).then_some(exts),
        };
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let sig = issuer.1.sign(&rng, &tbs.to_der().unwrap()).unwrap();
        Certificate {
            tbs_certificate: tbs,
            signature_algorithm: alg,
            signature: BitString::from_bytes(sig.as_ref()).unwrap(),
        }
        .to_der()
        .unwrap()
    }

    fn roots(certs: &[&[u8]]) -> CertificateRoots {
        let d = tempfile::tempdir().unwrap();
        let pem: String = certs
            .iter()
            .map(|c| {
                let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, c);
                format!("-----BEGIN CERTIFICATE-----\n{b64}\n-----END CERTIFICATE-----\n")
            })
            .collect();
        let path = d.path().join("roots.pem");
        std::fs::write(&path, pem).unwrap();
        CertificateRoots::read(&[path]).unwrap()
    }

    /// The verdict on a chain root → intermediate → signer (or root → signer without
    /// `inter`), with the root given as trusted: `Ok(root's subject)` or the refusal.
    fn chain(root: &Spec, inter: Option<&Spec>, leaf: &Spec) -> Result<String, String> {
        let (rk, ik, lk) = (key(), key(), key());
        let root_der = cert(root, &rk, (root.subject, &rk));
        let mut ders = Vec::new();
        match inter {
            Some(i) => {
                ders.push(cert(leaf, &lk, (i.subject, &ik)));
                ders.push(cert(i, &ik, (root.subject, &rk)));
            }
            None => ders.push(cert(leaf, &lk, (root.subject, &rk))),
        }
        verify_chain(&ders, &roots(&[&root_der]))
            .map(|(_, who)| who.certificate.unwrap().root)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_good_chain_is_trusted_through_its_root() {
        assert_eq!(
            chain(&ca("CN=root"), Some(&ca("CN=inter")), &signer()).unwrap(),
            "CN=root"
        );
        assert_eq!(chain(&ca("CN=root"), None, &signer()).unwrap(), "CN=root");
        // No basicConstraints, but a key usage with keyCertSign: OpenSSL takes it as a CA.
        let no_bc = Spec {
            bc: None,
            ..ca("CN=root")
        };
        assert!(chain(&no_bc, Some(&ca("CN=inter")), &signer()).is_ok());
        // A pathLen of 0 allows the signing certificate directly below.
        let pl0 = Spec {
            bc: Some((true, Some(0))),
            ..ca("CN=root")
        };
        assert!(chain(&pl0, None, &signer()).is_ok());
    }

    #[test]
    fn an_issuer_without_key_cert_sign_is_refused() {
        let no_sign = |s| Spec {
            ku: Some(KeyUsage(KeyUsages::CRLSign.into())),
            ..ca(s)
        };
        let e = chain(&ca("CN=root"), Some(&no_sign("CN=inter")), &signer()).unwrap_err();
        assert!(
            e.contains("'CN=inter' issued") && e.contains("keyCertSign"),
            "{e}"
        );
        let e = chain(&no_sign("CN=root"), None, &signer()).unwrap_err();
        assert!(
            e.contains("'CN=root' issued") && e.contains("keyCertSign"),
            "{e}"
        );
        // Nor may the root issue the intermediate.
        let e = chain(&no_sign("CN=root"), Some(&ca("CN=inter")), &signer()).unwrap_err();
        assert!(e.contains("'CN=root' issued"), "{e}");
    }

    #[test]
    fn a_roots_path_length_holds() {
        let pl0 = Spec {
            bc: Some((true, Some(0))),
            ..ca("CN=root")
        };
        let e = chain(&pl0, Some(&ca("CN=inter")), &signer()).unwrap_err();
        assert!(
            e.contains("allows 0 intermediate(s)") && e.contains("has 1"),
            "{e}"
        );
        let pl1 = Spec {
            bc: Some((true, Some(1))),
            ..ca("CN=root")
        };
        assert!(chain(&pl1, Some(&ca("CN=inter")), &signer()).is_ok());
    }

    #[test]
    fn a_root_that_is_not_a_ca_is_refused() {
        let not_ca = Spec {
            bc: Some((false, None)),
            ..ca("CN=root")
        };
        for inter in [None, Some(&ca("CN=inter"))] {
            let e = chain(&not_ca, inter, &signer()).unwrap_err();
            assert!(
                e.contains("'CN=root' is not a CA") && e.contains("CA=false"),
                "{e}"
            );
        }
        let bare = Spec {
            bc: None,
            ku: None,
            ..ca("CN=root")
        };
        let e = chain(&bare, Some(&ca("CN=inter")), &signer()).unwrap_err();
        assert!(e.contains("not a CA (no basicConstraints"), "{e}");
        // A version 1 root (no extensions at all) is a CA to OpenSSL.
        let v1 = Spec {
            v1: true,
            ..ca("CN=root")
        };
        assert!(chain(&v1, Some(&ca("CN=inter")), &signer()).is_ok());
    }

    #[test]
    fn a_root_expired_when_the_certificate_was_issued_is_refused() {
        let old = Spec {
            from: -100,
            to: -50,
            ..ca("CN=root")
        };
        let inter = Spec {
            from: -100,
            to: 100,
            ..ca("CN=inter")
        };
        let e = chain(&old, Some(&inter), &signer()).unwrap_err();
        assert!(e.contains("the root 'CN=root' was not valid"), "{e}");
    }

    #[test]
    fn an_intermediate_given_alone_is_not_trusted() {
        let (rk, ik, lk) = (key(), key(), key());
        let root = cert(&ca("CN=root"), &rk, ("CN=root", &rk));
        let inter = cert(&ca("CN=inter"), &ik, ("CN=root", &rk));
        let leaf = cert(&signer(), &lk, ("CN=inter", &ik));
        let e = verify_chain(std::slice::from_ref(&leaf), &roots(&[&inter])).unwrap_err();
        assert!(
            e.to_string()
                .contains("none of the certificates given is a root"),
            "{e}"
        );
        // Given with its root, it builds the path (the bundle carries the signing
        // certificate alone).
        let (_, who) = verify_chain(&[leaf], &roots(&[&inter, &root])).unwrap();
        assert_eq!(who.certificate.unwrap().root, "CN=root");
    }
}
