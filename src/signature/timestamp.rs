//! RFC 3161 timestamps in a Sigstore bundle (`timestampVerificationData.rfc3161Timestamps`): a
//! timestamping authority's signed statement that the envelope's signature existed at a time.
//! A Rekor v2 entry carries no time of its own: these are where its time comes from.
//!
//! One timestamp holds when, in order:
//! 1. it is a granted `TimeStampResp` whose token is CMS signed data of a `TSTInfo`;
//! 2. the `TSTInfo`'s message imprint is the digest (SHA-256, -384 or -512, as it names) of the
//!    envelope's signature;
//! 3. its one signer's signed attributes name that content type and its digest, and their
//!    signature (ECDSA with SHA-256, -384 or -512) verifies with the signer's certificate (one
//!    carried in the token, or a timestamping authority's own) — which names the
//!    `timeStamping` extended key usage and chains to one of the trusted root's timestamping
//!    authorities at the time stamped, an authority valid then.
//!
//! The time returned is the `TSTInfo`'s `genTime`.

use cms::cert::CertificateChoices;
use cms::content_info::ContentInfo;
use cms::signed_data::{SignedData, SignerIdentifier, SignerInfo};
use rustls_pki_types::{CertificateDer, UnixTime};
use sha2::{Digest as _, Sha256, Sha384, Sha512};
use x509_cert::der::asn1::{ObjectIdentifier, OctetString};
use x509_cert::der::{Decode as _, Encode as _};
use x509_cert::ext::pkix::{ExtendedKeyUsage, SubjectKeyIdentifier};
use x509_cert::Certificate;
use x509_tsp::{TimeStampResp, TstInfo};

use super::key::Hash;
use super::sigstore::Authority;

const SIGNED_DATA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.7.2");
const TST_INFO: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.16.1.4");
const CONTENT_TYPE: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.3");
const MESSAGE_DIGEST: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.4");
const TIME_STAMPING: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.3.8");
const SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.16.840.1.101.3.4.2.1");
const SHA384: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.16.840.1.101.3.4.2.2");
const SHA512: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.16.840.1.101.3.4.2.3");
const ECDSA_SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.2");
const ECDSA_SHA384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.3");
const ECDSA_SHA512: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.4");
/// Most certificates a token may carry that are looked at.
const MAX_TOKEN_CERTIFICATES: usize = 16;

/// The digest of `bytes` by the hash algorithm `oid` names.
fn digest(oid: &ObjectIdentifier, bytes: &[u8]) -> Result<Vec<u8>, String> {
    Ok(match *oid {
        SHA256 => Sha256::digest(bytes).to_vec(),
        SHA384 => Sha384::digest(bytes).to_vec(),
        SHA512 => Sha512::digest(bytes).to_vec(),
        other => {
            return Err(format!(
                "a digest algorithm this program does not read ({other})"
            ))
        }
    })
}

/// Verifies one signed timestamp (`resp`, a DER `TimeStampResp`) of `signature` against the
/// timestamping `authorities` (see the module docs): the time it vouches for, in seconds since
/// the epoch, or why it does not hold.
pub(super) fn verify(
    resp: &[u8],
    signature: &[u8],
    authorities: &[Authority],
) -> Result<u64, String> {
    if !super::der::lengths_fit(resp) {
        return Err(
            "not a TimeStampResp (malformed DER: a length past the end of what holds it)".into(),
        );
    }
    let resp = TimeStampResp::from_der(resp).map_err(|e| format!("not a TimeStampResp ({e})"))?;
    if (resp.status.status as u8) > 1 {
        return Err("the timestamping authority did not grant it".into());
    }
    let token: ContentInfo = resp.time_stamp_token.ok_or("it holds no token")?;
    if token.content_type != SIGNED_DATA {
        return Err("its token is not CMS signed data".into());
    }
    let signed: SignedData = token
        .content
        .decode_as()
        .map_err(|e| format!("its signed data is malformed ({e})"))?;
    let info = &signed.encap_content_info;
    if info.econtent_type != TST_INFO {
        return Err("its token does not sign a TSTInfo".into());
    }
    let tst_der = info
        .econtent
        .as_ref()
        .ok_or("its token holds no TSTInfo")?
        .decode_as::<OctetString>()
        .map_err(|e| format!("its TSTInfo is malformed ({e})"))?;
    let tst_der = tst_der.as_bytes();
    if !super::der::lengths_fit(tst_der) {
        return Err("its TSTInfo is malformed (a length past the end of what holds it)".into());
    }
    let tst = TstInfo::from_der(tst_der).map_err(|e| format!("its TSTInfo is malformed ({e})"))?;
    let imprint = &tst.message_imprint;
    if digest(&imprint.hash_algorithm.oid, signature)? != imprint.hashed_message.as_bytes() {
        return Err("it stamps another signature than the bundle's".into());
    }
    let time = tst.gen_time.to_unix_duration().as_secs();
    let [signer] = signed.signer_infos.0.as_slice() else {
        return Err("its token has other than one signer".into());
    };
    check_attributes(signer, tst_der)?;
    let carried: Vec<Vec<u8>> = signed
        .certificates
        .iter()
        .flat_map(|set| set.0.iter())
        .take(MAX_TOKEN_CERTIFICATES)
        .filter_map(|c| match c {
            CertificateChoices::Certificate(c) => c.to_der().ok(),
            CertificateChoices::Other(_) => None,
        })
        .collect();
    let own = authorities.iter().filter_map(|a| a.chain.first().cloned());
    let mut last = "no certificate of the timestamping authority that signed it (the token \
                    carries none, and the trusted root's are others)"
        .to_string();
    for der in carried.iter().cloned().chain(own) {
        let Ok(cert) = super::der::certificate(&der) else {
            continue;
        };
        if !names(&signer.sid, &cert) {
            continue;
        }
        match check_signer(signer, &cert, &der, &carried, authorities, time) {
            Ok(()) => return Ok(time),
            Err(why) => last = why,
        }
    }
    Err(last)
}

/// The signed attributes name a TSTInfo and hold its digest.
fn check_attributes(signer: &SignerInfo, tst_der: &[u8]) -> Result<(), String> {
    let attrs = signer
        .signed_attrs
        .as_ref()
        .ok_or("its signer signed no attributes")?;
    let value = |oid: ObjectIdentifier| {
        attrs
            .iter()
            .find(|a| a.oid == oid)
            .and_then(|a| a.values.iter().next())
    };
    let content_type = value(CONTENT_TYPE)
        .and_then(|v| v.decode_as::<ObjectIdentifier>().ok())
        .ok_or("its signed attributes name no content type")?;
    if content_type != TST_INFO {
        return Err("its signed attributes name another content than a TSTInfo".into());
    }
    let want = value(MESSAGE_DIGEST)
        .and_then(|v| v.decode_as::<OctetString>().ok())
        .ok_or("its signed attributes hold no digest")?;
    if digest(&signer.digest_alg.oid, tst_der)? != want.as_bytes() {
        return Err("its signed attributes hold the digest of another TSTInfo".into());
    }
    Ok(())
}

/// Whether `cert` is the one the signer identifier names.
fn names(sid: &SignerIdentifier, cert: &Certificate) -> bool {
    match sid {
        SignerIdentifier::IssuerAndSerialNumber(i) => {
            i.issuer == cert.tbs_certificate.issuer
                && i.serial_number == cert.tbs_certificate.serial_number
        }
        SignerIdentifier::SubjectKeyIdentifier(ski) => {
            super::der::extension::<SubjectKeyIdentifier>(cert)
                .ok()
                .flatten()
                .is_some_and(|own| own == *ski)
        }
    }
}

/// The signer's signature verifies with `cert`, which may stamp time and chains to a trusted
/// timestamping authority at `time`.
fn check_signer(
    signer: &SignerInfo,
    cert: &Certificate,
    der: &[u8],
    carried: &[Vec<u8>],
    authorities: &[Authority],
    time: u64,
) -> Result<(), String> {
    let hash = match signer.signature_algorithm.oid {
        ECDSA_SHA256 => Hash::Sha256,
        ECDSA_SHA384 => Hash::Sha384,
        ECDSA_SHA512 => Hash::Sha512,
        other => {
            return Err(format!(
                "it is signed with an algorithm this program does not read ({other})"
            ))
        }
    };
    let key = super::der::certificate_key(cert)
        .map_err(|why| format!("the timestamping authority's key: {why}"))?;
    let attrs = signer
        .signed_attrs
        .as_ref()
        .ok_or("its signer signed no attributes")?
        .to_der()
        .map_err(|e| e.to_string())?;
    if !key.verifies(&attrs, signer.signature.as_bytes(), hash) {
        return Err("its signature does not verify".into());
    }
    let eku = super::der::extension::<ExtendedKeyUsage>(cert)
        .map_err(|e| format!("the timestamping certificate's extended key usage: {e}"))?;
    if !eku.is_some_and(|u| u.0.contains(&TIME_STAMPING)) {
        return Err("its certificate may not stamp time (no timeStamping usage)".into());
    }
    let leaf = CertificateDer::from(der);
    let ee = webpki::EndEntityCert::try_from(&leaf)
        .map_err(|e| format!("its certificate cannot be used: {e:?}"))?;
    let at = UnixTime::since_unix_epoch(std::time::Duration::from_secs(time));
    let mut last =
        "no timestamping authority of the trusted root was valid at the time stamped".to_string();
    for a in authorities.iter().filter(|a| a.valid.covers(time)) {
        let Some((root_der, rest)) = a.chain.split_last() else {
            continue;
        };
        if root_der.as_slice() == der {
            return Ok(());
        }
        let root_cert = CertificateDer::from(root_der.as_slice());
        let Ok(anchor) = webpki::anchor_from_trusted_cert(&root_cert) else {
            continue;
        };
        let inter: Vec<CertificateDer<'_>> = rest
            .iter()
            .chain(carried)
            .filter(|c| c.as_slice() != der)
            .map(|c| CertificateDer::from(c.as_slice()))
            .collect();
        match ee.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &[anchor],
            &inter,
            at,
            super::chain::AnyUsage,
            None,
            None,
        ) {
            Ok(_) => return Ok(()),
            Err(e) => {
                last = format!(
                    "its certificate does not chain to a trusted timestamping authority at the \
                     time stamped ({e:?})"
                )
            }
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_not_a_granted_timestamp_is_refused_with_its_reason() {
        let err = verify(b"not DER", b"sig", &[]).unwrap_err();
        assert!(err.contains("not a TimeStampResp"), "{err}");
        // A TimeStampResp that is refused (status 2, rejection) and carries no token.
        let rejected = [0x30, 0x05, 0x30, 0x03, 0x02, 0x01, 0x02];
        let err = verify(&rejected, b"sig", &[]).unwrap_err();
        assert!(err.contains("did not grant"), "{err}");
        // Granted, without a token.
        let empty = [0x30, 0x05, 0x30, 0x03, 0x02, 0x01, 0x00];
        let err = verify(&empty, b"sig", &[]).unwrap_err();
        assert!(err.contains("no token"), "{err}");
        let md5 = ObjectIdentifier::new_unwrap("1.2.840.113549.2.5");
        assert!(digest(&md5, b"x").is_err());
        assert_eq!(
            digest(&SHA256, b"abc").unwrap(),
            Sha256::digest(b"abc").to_vec()
        );
    }
}
