//! The xorb format: chunks back to back, each an 8-byte header — version (0), compressed
//! length (3 bytes, little-endian), compression scheme, uncompressed length (3 bytes) — then its
//! payload. Schemes: none, LZ4 (the frame format), and byte grouping by 4 then LZ4 (the bytes
//! at positions ≡ 0, 1, 2, 3 mod 4 gathered in that order, which suits floating-point tensors).
//! A download asks for a byte range that starts at a chunk's header and ends at a chunk's last
//! byte; [`ChunkDecoder`] takes its body in pieces as they arrive and gives each chunk's bytes,
//! decompressed, with no more than one chunk held.

use std::io::Read as _;

/// A chunk header's length.
pub const HEADER_LEN: usize = 8;
/// The longest chunk, uncompressed.
pub const MAX_CHUNK_LEN: usize = super::chunking::MAX_CHUNK;
/// The longest payload a header may announce (a chunk compressed badly may grow, a little).
pub const MAX_PAYLOAD_LEN: usize = 2 * MAX_CHUNK_LEN;

/// How a chunk's payload is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Stored as is.
    None,
    /// An LZ4 frame.
    Lz4,
    /// Grouped by byte position modulo 4, then an LZ4 frame.
    ByteGrouping4Lz4,
}

impl Scheme {
    fn byte(self) -> u8 {
        match self {
            Scheme::None => 0,
            Scheme::Lz4 => 1,
            Scheme::ByteGrouping4Lz4 => 2,
        }
    }
}

/// Why bytes are not a chunk.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XorbError {
    /// The header is not one this reader knows.
    #[error("chunk header: {0}")]
    Header(String),
    /// The payload does not decompress to the length the header says.
    #[error("chunk payload: {0}")]
    Payload(String),
    /// The body ended inside a chunk.
    #[error("the body ended inside a chunk ({0} byte(s) of it)")]
    Truncated(usize),
}

/// A chunk's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// The payload's length.
    pub compressed_len: usize,
    /// How it is compressed.
    pub scheme: Scheme,
    /// The chunk's length once decompressed.
    pub uncompressed_len: usize,
}

fn u24(b: &[u8]) -> usize {
    usize::from(b[0]) | usize::from(b[1]) << 8 | usize::from(b[2]) << 16
}

impl ChunkHeader {
    /// Reads a header, refusing what no writer makes: another version, an unknown scheme, a
    /// chunk longer than 128 KiB or a payload longer than twice that.
    pub fn parse(b: &[u8; HEADER_LEN]) -> Result<ChunkHeader, XorbError> {
        if b[0] != 0 {
            return Err(XorbError::Header(format!("version {} (0 is read)", b[0])));
        }
        let scheme = match b[4] {
            0 => Scheme::None,
            1 => Scheme::Lz4,
            2 => Scheme::ByteGrouping4Lz4,
            s => return Err(XorbError::Header(format!("compression scheme {s}"))),
        };
        let (compressed_len, uncompressed_len) = (u24(&b[1..4]), u24(&b[5..8]));
        if uncompressed_len > MAX_CHUNK_LEN || compressed_len > MAX_PAYLOAD_LEN {
            return Err(XorbError::Header(format!(
                "{compressed_len} byte(s) of payload for a chunk of {uncompressed_len}: more \
                 than a chunk may have"
            )));
        }
        if scheme == Scheme::None && compressed_len != uncompressed_len {
            return Err(XorbError::Header(format!(
                "an uncompressed chunk of {uncompressed_len} byte(s) with {compressed_len} of \
                 payload"
            )));
        }
        Ok(ChunkHeader {
            compressed_len,
            scheme,
            uncompressed_len,
        })
    }

    /// The header's bytes.
    pub fn to_bytes(self) -> [u8; HEADER_LEN] {
        let c = u32::try_from(self.compressed_len)
            .unwrap_or(u32::MAX)
            .to_le_bytes();
        let u = u32::try_from(self.uncompressed_len)
            .unwrap_or(u32::MAX)
            .to_le_bytes();
        [0, c[0], c[1], c[2], self.scheme.byte(), u[0], u[1], u[2]]
    }
}

/// Gathers the bytes at positions ≡ 0, 1, 2, 3 (mod 4), in that order.
fn group4(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    for g in 0..4 {
        out.extend(data.iter().skip(g).step_by(4));
    }
    out
}

/// The inverse of [`group4`]: the four groups read side by side, four bytes written at a time.
fn ungroup4(grouped: &[u8]) -> Vec<u8> {
    let n = grouped.len();
    let (split, rem) = (n / 4, n % 4);
    let mut starts = [0usize; 4];
    for g in 1..4 {
        starts[g] = starts[g - 1] + split + usize::from(g - 1 < rem);
    }
    let mut out = Vec::with_capacity(n);
    let (g0, g1, g2, g3) = (
        &grouped[starts[0]..],
        &grouped[starts[1]..],
        &grouped[starts[2]..],
        &grouped[starts[3]..],
    );
    for k in 0..split {
        out.extend_from_slice(&[g0[k], g1[k], g2[k], g3[k]]);
    }
    for group in [g0, g1, g2].iter().take(rem) {
        out.push(group[split]);
    }
    out
}

fn lz4_frame(data: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut enc = lz4_flex::frame::FrameEncoder::new(Vec::new());
    // Writing to a Vec does not fail.
    let _ = enc.write_all(data);
    enc.finish().unwrap_or_default()
}

/// An LZ4 frame's content, refused unless it is exactly `len` bytes (never more is produced).
fn unlz4_frame(payload: &[u8], len: usize) -> Result<Vec<u8>, XorbError> {
    let mut out = Vec::with_capacity(len);
    lz4_flex::frame::FrameDecoder::new(payload)
        .take(len as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| XorbError::Payload(format!("not an LZ4 frame: {e}")))?;
    if out.len() != len {
        return Err(XorbError::Payload(format!(
            "it decompresses to {} byte(s), the header says {len}",
            if out.len() > len {
                format!("more than {len}")
            } else {
                out.len().to_string()
            }
        )));
    }
    Ok(out)
}

/// A chunk as a xorb stores it: header and payload.
pub fn encode_chunk(data: &[u8], scheme: Scheme) -> Vec<u8> {
    let payload = match scheme {
        Scheme::None => data.to_vec(),
        Scheme::Lz4 => lz4_frame(data),
        Scheme::ByteGrouping4Lz4 => lz4_frame(&group4(data)),
    };
    let header = ChunkHeader {
        compressed_len: payload.len(),
        scheme,
        uncompressed_len: data.len(),
    };
    let mut out = header.to_bytes().to_vec();
    out.extend_from_slice(&payload);
    out
}

/// A chunk's bytes from its header and payload.
pub fn decode_payload(h: &ChunkHeader, payload: &[u8]) -> Result<Vec<u8>, XorbError> {
    match h.scheme {
        Scheme::None => Ok(payload.to_vec()),
        Scheme::Lz4 => unlz4_frame(payload, h.uncompressed_len),
        Scheme::ByteGrouping4Lz4 => Ok(ungroup4(&unlz4_frame(payload, h.uncompressed_len)?)),
    }
}

/// Chunks out of a body that arrives in pieces (see the module docs): [`push`](Self::push) each
/// piece, then take every chunk complete with [`next_chunk`](Self::next_chunk); at the end,
/// [`finish`](Self::finish) says whether the body stopped inside a chunk.
#[derive(Debug, Default)]
pub struct ChunkDecoder {
    buf: Vec<u8>,
    /// Where the next chunk starts in `buf` (what is before it was given; dropped once it is
    /// more than half of `buf`, so that bytes are moved about once, not once per chunk).
    at: usize,
    /// Chunks given so far.
    taken: usize,
}

impl ChunkDecoder {
    /// A decoder at the start of a body.
    pub fn new() -> Self {
        ChunkDecoder::default()
    }

    /// Adds the body's next bytes.
    pub fn push(&mut self, piece: &[u8]) {
        if self.at > 0 && self.at * 2 >= self.buf.len() {
            self.buf.drain(..self.at);
            self.at = 0;
        }
        self.buf.extend_from_slice(piece);
    }

    /// Bytes held that are not a whole chunk yet (at most one chunk's, plus the last piece).
    pub fn held(&self) -> usize {
        self.buf.len() - self.at
    }

    /// The next chunk, decompressed, once all of it has arrived; `Ok(None)` until then. A
    /// header or payload that is wrong is an error naming the chunk (by its place in the body).
    pub fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, XorbError> {
        let rest = &self.buf[self.at..];
        if rest.len() < HEADER_LEN {
            return Ok(None);
        }
        let mut head = [0u8; HEADER_LEN];
        head.copy_from_slice(&rest[..HEADER_LEN]);
        let at = self.taken;
        let h = ChunkHeader::parse(&head).map_err(|e| name(at, e))?;
        let end = HEADER_LEN + h.compressed_len;
        if rest.len() < end {
            return Ok(None);
        }
        let data = decode_payload(&h, &rest[HEADER_LEN..end]).map_err(|e| name(at, e))?;
        self.at += end;
        self.taken += 1;
        Ok(Some(data))
    }

    /// The body ended: an error when it ended inside a chunk.
    pub fn finish(&self) -> Result<(), XorbError> {
        match self.held() {
            0 => Ok(()),
            n => Err(XorbError::Truncated(n)),
        }
    }
}

/// `e`, naming the chunk (its place in the body) it is about.
fn name(at: usize, e: XorbError) -> XorbError {
    match e {
        XorbError::Header(m) => XorbError::Header(format!("chunk {at} of the body: {m}")),
        XorbError::Payload(m) => XorbError::Payload(format!("chunk {at} of the body: {m}")),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| ((i * 31) % 251) as u8 ^ (i / 1000) as u8)
            .collect()
    }

    #[test]
    fn every_scheme_round_trips_through_a_body_cut_anywhere() {
        for n in [0usize, 1, 3, 4, 5, 1000, 65_537, MAX_CHUNK_LEN] {
            let data = sample(n);
            let mut body = Vec::new();
            for scheme in [Scheme::None, Scheme::Lz4, Scheme::ByteGrouping4Lz4] {
                body.extend(encode_chunk(&data, scheme));
            }
            for piece in [1usize, 9, 4096, body.len().max(1)] {
                let mut d = ChunkDecoder::new();
                let mut got = Vec::new();
                for p in body.chunks(piece) {
                    d.push(p);
                    while let Some(c) = d.next_chunk().unwrap() {
                        got.push(c);
                    }
                }
                d.finish().unwrap();
                assert_eq!(got, vec![data.clone(); 3], "{n} bytes in pieces of {piece}");
            }
        }
    }

    #[test]
    fn byte_grouping_gathers_positions_modulo_4() {
        assert_eq!(group4(b"abcdefghij"), b"aeibfjcgdh");
        for n in 0..20 {
            let d = sample(n);
            assert_eq!(ungroup4(&group4(&d)), d);
        }
    }

    #[test]
    fn wrong_headers_and_payloads_are_refused_naming_the_chunk() {
        let good = encode_chunk(&sample(5000), Scheme::Lz4);
        let refused = |mutate: &dyn Fn(&mut Vec<u8>)| {
            let mut b = encode_chunk(b"first", Scheme::None);
            let mut c = good.clone();
            mutate(&mut c);
            b.extend(c);
            let mut d = ChunkDecoder::new();
            d.push(&b);
            assert_eq!(d.next_chunk().unwrap().unwrap(), b"first");
            d.next_chunk().unwrap_err().to_string()
        };
        assert!(refused(&|c| c[0] = 1).contains("chunk 1 of the body: version 1"));
        assert!(refused(&|c| c[4] = 9).contains("compression scheme 9"));
        // A header announcing more than a chunk may have.
        assert!(refused(&|c| c[7] = 0xff).contains("more than a chunk may have"));
        // A length that is not the payload's.
        assert!(refused(&|c| c[5] = c[5].wrapping_add(1)).contains("decompresses to"));
        // A payload that is not LZ4.
        assert!(refused(&|c| c[HEADER_LEN + 4] ^= 0xff).contains("chunk 1 of the body"));
        // A body that stops inside a chunk.
        let mut d = ChunkDecoder::new();
        d.push(&good[..good.len() - 1]);
        assert_eq!(d.next_chunk().unwrap(), None);
        assert!(matches!(d.finish(), Err(XorbError::Truncated(_))));
    }

    /// A small payload that claims to decompress to the most a chunk may have is not allowed to
    /// produce more.
    #[test]
    fn a_payload_never_decompresses_past_its_header() {
        let big = encode_chunk(&vec![0u8; MAX_CHUNK_LEN], Scheme::Lz4);
        let mut h = ChunkHeader::parse(big[..HEADER_LEN].try_into().unwrap()).unwrap();
        h.uncompressed_len = 10;
        let e = decode_payload(&h, &big[HEADER_LEN..]).unwrap_err();
        assert!(e.to_string().contains("more than 10"), "{e}");
    }
}
