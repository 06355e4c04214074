//! Any bytes as a model signature (`signature::verify_signature`): as the bundle itself, checked
//! with a key and, keyless, with a trusted root whose log is that key (the log entries, their
//! inclusion proofs, checkpoints and bodies on hostile input); and as the signing certificate of
//! a bundle checked with Mozilla's roots (the X.509 parser and the path check on hostile DER)
//! and as the RFC 3161 timestamp of a Rekor v2 entry (CMS and TSTInfo on hostile DER). `Ok` is impossible without the key's private
//! half, so every input must come back as `Err`, never a panic; peak heap within
//! `fuzz_support::within_budget`'s bound.
#![no_main]

use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use weight_inspect::signature::{
    verify_signature, CertificateRoots, KeylessPolicy, PublicKey, TrustPolicy, TrustedRoot,
};

/// A P-256 public key whose private half was thrown away.
const KEY: &[u8] = b"-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEeLzfO7KYMfJQY5+plJw8Pg8HZl78
ZUwLpcYI5IEmlx4RJuV9UcxdOxdMDPUVD2xUovrui9c4NoyIOwyJm1R/Dg==
-----END PUBLIC KEY-----
";

/// A trusted root whose one log is `KEY` (its id the key's SHA-256), and a certificate
/// authority and a timestamping authority that are no certificates.
const ROOT: &str = r#"{"tlogs": [{"publicKey": {"rawBytes": "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEeLzfO7KYMfJQY5+plJw8Pg8HZl78ZUwLpcYI5IEmlx4RJuV9UcxdOxdMDPUVD2xUovrui9c4NoyIOwyJm1R/Dg=="}, "logId": {"keyId": "1lY5S1xeVoO9M/8un9nBBIv8e8FVs1SGk5G++6ymv2Q="}}], "certificateAuthorities": [{"certChain": {"certificates": [{"rawBytes": "MAA="}]}}], "timestampAuthorities": [{"certChain": {"certificates": [{"rawBytes": "MAA="}]}}]}"#;

fuzz_target!(|data: &[u8]| {
    fuzz_support::within_budget(data, |data| {
        let key = TrustPolicy::Key(PublicKey::from_pem(KEY).expect("the key"));
        assert!(verify_signature(data, &key).is_err());
        let keyless = TrustPolicy::Sigstore(KeylessPolicy {
            root: TrustedRoot::parse(ROOT.as_bytes()).expect("the root"),
            identity: "someone@example.com".into(),
            issuer: "https://accounts.example.com".into(),
        });
        assert!(verify_signature(data, &keyless).is_err());
        let cert = base64::engine::general_purpose::STANDARD.encode(data);
        let bundle = format!(
            "{{\"mediaType\":\"application/vnd.dev.sigstore.bundle.v0.3+json\",\
             \"verificationMaterial\":{{\"x509CertificateChain\":{{\"certificates\":\
             [{{\"rawBytes\":\"{cert}\"}}]}}}},\
             \"dsseEnvelope\":{{\"payload\":\"e30=\",\
             \"payloadType\":\"application/vnd.in-toto+json\",\"signatures\":[{{\"sig\":\"MAA=\"}}]}}}}"
        );
        let roots = TrustPolicy::Certificates(CertificateRoots::mozilla());
        assert!(verify_signature(bundle.as_bytes(), &roots).is_err());
        // The same bytes as the RFC 3161 timestamp of a Rekor v2 entry of the root's log (the
        // TimeStampResp, CMS and TSTInfo readers on hostile DER).
        let v2 = format!(
            "{{\"mediaType\":\"application/vnd.dev.sigstore.bundle.v0.3+json\",\
             \"verificationMaterial\":{{\"certificate\":{{\"rawBytes\":\"MAA=\"}},\
             \"tlogEntries\":[{{\"logIndex\":\"1\",\"logId\":{{\"keyId\":\
             \"1lY5S1xeVoO9M/8un9nBBIv8e8FVs1SGk5G++6ymv2Q=\"}},\"kindVersion\":{{\"kind\":\
             \"hashedrekord\",\"version\":\"0.0.2\"}},\"canonicalizedBody\":\"e30=\"}}],\
             \"timestampVerificationData\":{{\"rfc3161Timestamps\":[{{\"signedTimestamp\":\
             \"{cert}\"}}]}}}},\
             \"dsseEnvelope\":{{\"payload\":\"e30=\",\
             \"payloadType\":\"application/vnd.in-toto+json\",\"signatures\":[{{\"sig\":\"MAA=\"}}]}}}}"
        );
        drop(cert);
        assert!(verify_signature(v2.as_bytes(), &keyless).is_err());
    });
});
