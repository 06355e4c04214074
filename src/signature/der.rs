//! DER read from a bundle, a trusted root or a timestamp, checked before it is decoded: the
//! decoders of owned ASN.1 values (`x509-cert`, `cms`, `x509-tsp`, through `der`) allocate the
//! length a header declares before they find that the input is shorter, so 700 hostile bytes
//! could make them ask for 256 MiB. Every length is checked against what holds it first.

use x509_cert::der::oid::AssociatedOid;
use x509_cert::der::Decode;
use x509_cert::Certificate;

/// Deepest nesting of constructed values walked (certificates and CMS need about a dozen).
const MAX_DEPTH: u32 = 64;

/// Whether every value in `bytes` (a sequence of DER values, walked into every constructed
/// one) declares a length that its container holds: definite lengths of at most four bytes,
/// tags of at most five.
pub(super) fn lengths_fit(bytes: &[u8]) -> bool {
    fits(bytes, 0)
}

fn fits(mut b: &[u8], depth: u32) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    while let Some(&first) = b.first() {
        let mut i = 1;
        if first & 0x1f == 0x1f {
            loop {
                let Some(&c) = b.get(i) else { return false };
                i += 1;
                if c & 0x80 == 0 {
                    break;
                }
                if i > 5 {
                    return false;
                }
            }
        }
        let Some(&l0) = b.get(i) else { return false };
        i += 1;
        let len = if l0 & 0x80 == 0 {
            usize::from(l0)
        } else {
            let n = usize::from(l0 & 0x7f);
            let Some(digits) = b.get(i..i + n).filter(|_| (1..=4).contains(&n)) else {
                return false;
            };
            i += n;
            digits
                .iter()
                .fold(0usize, |v, &d| (v << 8) | usize::from(d))
        };
        let Some(content) = b.get(i..).and_then(|rest| rest.get(..len)) else {
            return false;
        };
        if first & 0x20 != 0 && !fits(content, depth + 1) {
            return false;
        }
        b = &b[i + len..];
    }
    true
}

/// A certificate read from DER whose lengths fit (see the module docs).
pub(super) fn certificate(der: &[u8]) -> Result<Certificate, String> {
    if !lengths_fit(der) {
        return Err("malformed DER (a length past the end of what holds it)".into());
    }
    Certificate::from_der(der).map_err(|e| e.to_string())
}

/// The public key of `cert` (an EC key: what model signing and Sigstore sign with).
pub(super) fn certificate_key(cert: &Certificate) -> Result<super::key::PublicKey, String> {
    use x509_cert::der::Encode as _;
    let spki = cert
        .tbs_certificate
        .subject_public_key_info
        .to_der()
        .map_err(|e| e.to_string())?;
    super::key::PublicKey::from_spki(&spki)
}

/// The extension `T` of `cert` (`None` when it has none), its value's lengths checked before it
/// is decoded; one named twice is refused (RFC 5280).
pub(super) fn extension<T>(cert: &Certificate) -> Result<Option<T>, String>
where
    T: AssociatedOid + for<'a> Decode<'a>,
{
    let mut found = cert
        .tbs_certificate
        .extensions
        .iter()
        .flatten()
        .filter(|e| e.extn_id == T::OID);
    let Some(ext) = found.next() else {
        return Ok(None);
    };
    if found.next().is_some() {
        return Err(format!("the extension {} is there twice", T::OID));
    }
    let value = ext.extn_value.as_bytes();
    if !lengths_fit(value) {
        return Err("malformed DER (a length past the end of what holds it)".into());
    }
    T::from_der(value).map(Some).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_length_past_its_container_is_refused_before_decoding() {
        // SEQUENCE { OCTET STRING "ab" }, then the same with the string claiming 10 MB.
        assert!(lengths_fit(&[0x30, 0x04, 0x04, 0x02, b'a', b'b']));
        assert!(!lengths_fit(&[
            0x30, 0x06, 0x04, 0x83, 0xa4, 0x30, 0x81, b'a'
        ]));
        assert!(!lengths_fit(&[0x30, 0x80, 0x00, 0x00])); // indefinite
        assert!(!lengths_fit(&[0x30, 0x85, 1, 0, 0, 0, 0])); // a five-byte length
        assert!(!lengths_fit(&[0x30])); // no length
        assert!(lengths_fit(&[]));
        // Nesting: a dozen levels are read, past the bound refused.
        let nested = |levels: u32| {
            let mut v = vec![0x05, 0x00];
            for _ in 0..levels {
                let n = v.len();
                let mut outer = vec![0x30, 0x82, (n >> 8) as u8, n as u8];
                outer.extend_from_slice(&v);
                v = outer;
            }
            v
        };
        assert!(lengths_fit(&nested(12)));
        assert!(!lengths_fit(&nested(MAX_DEPTH + 2)));
        let err = certificate(&[0x30, 0x83, 0xff, 0xff, 0xff]).unwrap_err();
        assert!(err.contains("a length past"), "{err}");
    }
}
