//! Any bytes as a manifest document (`manifest::Document::parse`: a weight-inspect manifest,
//! llama-gguf-hash lines, an OpenSSF in-toto statement), and the same bytes as the payload of a
//! Sigstore bundle (so the statement parser is reached through the bundle too): `Ok` or `Err`,
//! never a panic; every expectation of an accepted document names a safe path, its chunks fit
//! its size, its ranges (and another algorithm's: BLAKE2b, BLAKE3) are contiguous from 0, of
//! their algorithm's length; peak heap within `fuzz_support::within_budget`'s
//! bound.
#![no_main]

use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use weight_inspect::manifest::{Document, MAX_CHUNKS, MAX_FILES, MAX_TENSORS};
use weight_inspect::names;

fn checked(doc: &Document) {
    let files = doc.expectations();
    assert!(files.len() <= MAX_FILES);
    let (mut chunks, mut tensors) = (0usize, 0usize);
    for f in &files {
        assert!(names::check_repo_path(&f.path).is_ok(), "{:?}", f.path);
        if let Some(c) = &f.chunks {
            assert!(c.chunk_size > 0);
            if let Some(size) = f.size {
                assert!(
                    c.fits(size),
                    "{} chunks of {} for {size}",
                    c.digests.len(),
                    c.chunk_size
                );
            }
            assert!(f.ranges.is_empty());
            chunks += c.digests.len();
        }
        let mut at = 0;
        for r in &f.ranges {
            assert_eq!(r.range.start, at);
            assert!(r.range.end > r.range.start);
            at = r.range.end;
        }
        if !f.ranges.is_empty() {
            assert_eq!(f.size, Some(at));
        }
        chunks += f.ranges.len();
        if let Some(o) = &f.other {
            // Another algorithm's digests: of its length, whole or contiguous ranges from 0.
            let len = o.algorithm.digest_len();
            assert!(o.whole.as_ref().is_none_or(|d| d.len() == len));
            assert!(o.whole.is_none() || o.ranges.is_empty());
            let mut at = 0;
            for (r, d) in &o.ranges {
                assert_eq!((r.start, d.len()), (at, len));
                assert!(r.end > r.start);
                at = r.end;
            }
            if !o.ranges.is_empty() {
                assert_eq!(f.size, Some(at));
            }
            assert!(f.sha256.is_none() && f.chunks.is_none() && f.ranges.is_empty());
            chunks += o.ranges.len();
        }
        tensors += f.tensors.len();
        assert_eq!(
            doc.expectation(&f.path).as_ref().map(|e| &e.path),
            Some(&f.path)
        );
    }
    assert!(chunks <= MAX_CHUNKS && tensors <= MAX_TENSORS);
    let _ = doc.notes();
    let _ = doc.kind();
}

fuzz_target!(|data: &[u8]| {
    fuzz_support::within_budget(data, |data| {
        if let Ok(doc) = Document::parse(data) {
            checked(&doc);
        }
        let payload = base64::engine::general_purpose::STANDARD.encode(data);
        let bundle = format!(
            "{{\"mediaType\":\"application/vnd.dev.sigstore.bundle.v0.3+json\",\
             \"dsseEnvelope\":{{\"payload\":\"{payload}\",\
             \"payloadType\":\"application/vnd.in-toto+json\",\"signatures\":[]}}}}"
        );
        drop(payload);
        if let Ok(doc) = Document::parse(bundle.as_bytes()) {
            assert!(doc.signature_verified() == Some(false));
            checked(&doc);
        }
    });
});
