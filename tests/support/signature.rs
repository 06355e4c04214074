//! Keys for the signature tests, made for each test and written as PEM the way `openssl` and
//! Python's `cryptography` write them.

use std::path::{Path, PathBuf};

use aws_lc_rs::encoding::AsDer as _;
use aws_lc_rs::signature::{
    EcdsaKeyPair, KeyPair as _, ECDSA_P256_SHA256_ASN1_SIGNING, ECDSA_P384_SHA384_ASN1_SIGNING,
    ECDSA_P521_SHA512_ASN1_SIGNING,
};
use base64::Engine as _;

/// PEM of `der` under `label`, in 64-character lines.
pub fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// A new EC key pair on the curve of `bits` (256, 384 or 521), written to `dir/NAME.pem`
/// (PKCS#8) and `dir/NAME.pub.pem`; their paths.
pub fn key_pair(dir: &Path, name: &str, bits: u32) -> (PathBuf, PathBuf) {
    let alg = match bits {
        256 => &ECDSA_P256_SHA256_ASN1_SIGNING,
        384 => &ECDSA_P384_SHA384_ASN1_SIGNING,
        521 => &ECDSA_P521_SHA512_ASN1_SIGNING,
        _ => panic!("no P-{bits}"),
    };
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &aws_lc_rs::rand::SystemRandom::new()).unwrap();
    let pair = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref()).unwrap();
    let public = pair.public_key().as_der().unwrap();
    let (private_path, public_path) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.pub.pem")),
    );
    std::fs::write(&private_path, pem("PRIVATE KEY", pkcs8.as_ref())).unwrap();
    std::fs::write(&public_path, pem("PUBLIC KEY", public.as_ref())).unwrap();
    (private_path, public_path)
}
