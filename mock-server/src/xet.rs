//! Xet-backed files (with [`crate::MockHubBuilder::xet`]): one store of chunks per server, as
//! the Hub deduplicates. A file's content is cut into content-defined chunks the first time it
//! is asked about; chunks the store does not hold yet are appended to new xorbs (at most 64 MiB
//! or 8192 chunks each, as xet-core's), the others are referenced where they already are. The
//! file becomes a list of terms (consecutive chunks of one xorb), which the CAS answers as a
//! reconstruction, trimmed to the range asked. So a revision that changes a few bytes
//! references the old xorbs for everything but the chunks around the change.
//!
//! Each new chunk is compressed with a scheme chosen from its hash (none, LZ4 or byte grouping
//! 4 + LZ4, whether or not it helps), so every scheme occurs in ordinary files. Xorbs are held
//! in memory (their serialized chunks, no footer); reading a file for its chunks streams it.
//!
//! Access tokens and xorb URLs are signed with a secret drawn from the server's seed, and carry
//! their expiry: nothing is stored per token or URL.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read};
use std::ops::Range;
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use weight_inspect::xet::chunking::{ChunkRule, Chunker, MAX_CHUNK};
use weight_inspect::xet::hash::{chunk_hash, MerkleBuilder, XetHash};
use weight_inspect::xet::reconstruction::{ByteRange, ChunkRange, Term};
use weight_inspect::xet::xorb::{encode_chunk, Scheme};

use crate::repo::{self, FileEntry, Source};

/// The most serialized bytes of one xorb (xet-core's limit).
pub const MAX_XORB_BYTES: usize = 64 << 20;
/// The most chunks of one xorb (xet-core's limit).
pub const MAX_XORB_CHUNKS: usize = 8192;

/// Settings of the Xet side, fixed at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct XetConfig {
    /// Seconds an access token is valid.
    pub token_ttl: u64,
    /// Seconds a xorb URL is valid.
    pub url_ttl: u64,
    /// Whether `/v2/reconstructions` is answered (else 404, so a client falls back to v1).
    pub v2: bool,
    /// How files are cut into chunks: the rule of the first pattern their path matches
    /// ([`crate::faults`]' patterns), else today's.
    pub chunking: Vec<XetChunking>,
}

/// Files whose path matches `pattern` are cut into chunks by `rule`: stored as the Hub holds a
/// file uploaded in that era (see [`weight_inspect::xet::chunking::ChunkRule`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XetChunking {
    /// The rule.
    pub rule: ChunkRule,
    /// A path pattern (glob with `*`/`?`, else a substring; empty: every file).
    pub pattern: String,
}

impl std::str::FromStr for XetChunking {
    type Err = String;

    /// `RULE[:PATTERN]`, RULE one of `current`, `before-2025-09` (xet-core before its PR #487)
    /// and `fixed-BYTES`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (rule, pattern) = s.split_once(':').unwrap_or((s, ""));
        let rule = match rule {
            "current" => ChunkRule::Current,
            "before-2025-09" => ChunkRule::BeforeMinimumFix,
            r => match r.strip_prefix("fixed-").map(str::parse::<usize>) {
                Some(Ok(n)) if (1..=MAX_CHUNK).contains(&n) => ChunkRule::Fixed(n),
                _ => {
                    return Err(format!(
                        "'{r}': a chunking rule is current, before-2025-09 or fixed-BYTES \
                         (1 to {MAX_CHUNK})"
                    ))
                }
            },
        };
        Ok(XetChunking {
            rule,
            pattern: pattern.to_string(),
        })
    }
}

/// What the store holds (`MockHub::xet_stored`, `GET /_mock/xet`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct XetStored {
    /// Distinct files (by Xet hash) made into chunks so far.
    pub files: u64,
    /// Xorbs.
    pub xorbs: u64,
    /// Distinct chunks.
    pub chunks: u64,
    /// Serialized bytes of every xorb (chunk headers and compressed payloads).
    pub xorb_bytes: u64,
}

/// One xorb: chunks back to back, each a header and its payload.
#[derive(Debug)]
pub(crate) struct Xorb {
    /// Its hash (the Merkle root of its chunks).
    pub hash: XetHash,
    /// Its serialized chunks.
    pub bytes: Bytes,
    /// Where each chunk starts in `bytes`, and (last) the length of `bytes`.
    offsets: Vec<u64>,
    /// Each chunk's length, uncompressed.
    lens: Vec<u32>,
}

/// A run of consecutive chunks of one xorb, in a file.
#[derive(Debug, Clone)]
struct FileTerm {
    /// The xorb's place in the store.
    xorb: u32,
    /// Its chunks.
    chunks: Range<u32>,
    /// Where the term starts in the file.
    offset: u64,
    /// Its bytes, uncompressed.
    len: u64,
}

/// A file as the CAS knows it.
#[derive(Debug)]
pub(crate) struct XetFile {
    /// Its Xet hash.
    pub hash: XetHash,
    /// Its length.
    pub size: u64,
    terms: Vec<FileTerm>,
}

/// Where a stored chunk is.
#[derive(Debug, Clone, Copy)]
struct ChunkLoc {
    xorb: u32,
    index: u32,
}

/// A reconstruction, before it is written as v1 or v2.
#[derive(Debug)]
pub(crate) struct Answer {
    /// Bytes of the first term before the range asked.
    pub offset_into_first_range: u64,
    /// The terms.
    pub terms: Vec<Term>,
    /// Per xorb, its chunk ranges to fetch (overlapping and adjacent ones merged) with their
    /// bytes in the xorb.
    pub fetches: BTreeMap<XetHash, Vec<(ChunkRange, ByteRange)>>,
}

#[derive(Debug, Default)]
struct Xorbs {
    list: Vec<Arc<Xorb>>,
    by_hash: HashMap<XetHash, u32>,
    bytes: u64,
}

/// Single-flight slot of one file's ingestion (by SHA-256): `None` once it failed.
type Cell = Arc<tokio::sync::OnceCell<Option<Arc<XetFile>>>>;

/// The chunk store, the files made of it, and the signing secret.
#[derive(Debug)]
pub(crate) struct XetStore {
    pub cfg: XetConfig,
    secret: [u8; 32],
    /// Chunk hash → where it is. Held for a whole ingestion, so ingestions run one at a time
    /// and deduplication is exact.
    index: Mutex<HashMap<XetHash, ChunkLoc>>,
    xorbs: RwLock<Xorbs>,
    files: RwLock<HashMap<XetHash, Arc<XetFile>>>,
    cells: Mutex<HashMap<String, Cell>>,
}

/// The scheme a new chunk is stored with, from its hash (each about a third of the chunks).
fn scheme_for(h: &XetHash) -> Scheme {
    match h.0[31] % 3 {
        0 => Scheme::None,
        1 => Scheme::Lz4,
        _ => Scheme::ByteGrouping4Lz4,
    }
}

/// The xorb being filled.
#[derive(Default)]
struct OpenXorb {
    bytes: Vec<u8>,
    offsets: Vec<u64>,
    lens: Vec<u32>,
    tree: MerkleBuilder,
}

impl OpenXorb {
    fn close(&mut self) -> Option<Xorb> {
        if self.lens.is_empty() {
            return None;
        }
        let mut open = std::mem::take(self);
        open.offsets.push(open.bytes.len() as u64);
        open.bytes.shrink_to_fit();
        Some(Xorb {
            hash: open.tree.root(),
            bytes: Bytes::from(open.bytes),
            offsets: open.offsets,
            lens: open.lens,
        })
    }
}

/// One file being made into chunks.
struct Ingest<'a> {
    index: &'a HashMap<XetHash, ChunkLoc>,
    /// Chunks new in this ingestion (published at its end).
    fresh: HashMap<XetHash, ChunkLoc>,
    /// The place in the store of the first xorb this ingestion makes.
    first_id: u32,
    done: Vec<Xorb>,
    open: OpenXorb,
    terms: Vec<FileTerm>,
    tree: MerkleBuilder,
    pos: u64,
}

impl Ingest<'_> {
    fn close_open(&mut self) {
        if let Some(x) = self.open.close() {
            self.done.push(x);
        }
    }

    fn add(&mut self, chunk: &[u8]) {
        let h = chunk_hash(chunk);
        let len = chunk.len() as u64;
        self.tree.push(h, len);
        let known = self.index.get(&h).or_else(|| self.fresh.get(&h)).copied();
        let loc = match known {
            Some(loc) => loc,
            None => {
                let enc = encode_chunk(chunk, scheme_for(&h));
                if self.open.lens.len() >= MAX_XORB_CHUNKS
                    || self.open.bytes.len() + enc.len() > MAX_XORB_BYTES
                {
                    self.close_open();
                }
                let loc = ChunkLoc {
                    xorb: self.first_id + self.done.len() as u32,
                    index: self.open.lens.len() as u32,
                };
                self.open.offsets.push(self.open.bytes.len() as u64);
                self.open.bytes.extend_from_slice(&enc);
                // At most MAX_CHUNK.
                self.open.lens.push(len as u32);
                self.open.tree.push(h, len);
                self.fresh.insert(h, loc);
                loc
            }
        };
        match self.terms.last_mut() {
            Some(t) if t.xorb == loc.xorb && t.chunks.end == loc.index => {
                t.chunks.end += 1;
                t.len += len;
            }
            _ => self.terms.push(FileTerm {
                xorb: loc.xorb,
                chunks: loc.index..loc.index + 1,
                offset: self.pos,
                len,
            }),
        }
        self.pos += len;
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl XetStore {
    pub fn new(cfg: XetConfig, seed: u64) -> Self {
        let mut h = Sha256::new();
        h.update(b"mock-hub xet secret ");
        h.update(seed.to_le_bytes());
        XetStore {
            cfg,
            secret: h.finalize().into(),
            index: Mutex::new(HashMap::new()),
            xorbs: RwLock::new(Xorbs::default()),
            files: RwLock::new(HashMap::new()),
            cells: Mutex::new(HashMap::new()),
        }
    }

    /// The file `entry` as the CAS knows it, made into chunks the first time it is asked for
    /// (one ingestion per content, whoever asks at once). `None` when its bytes cannot be read
    /// (said once, in the log): it is then served as a plain LFS file.
    pub async fn file_for(self: &Arc<Self>, entry: &Arc<FileEntry>) -> Option<Arc<XetFile>> {
        let cell = self
            .cells
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(entry.sha256.clone())
            .or_default()
            .clone();
        cell.get_or_init(|| async {
            let (store, e) = (self.clone(), entry.clone());
            let rule = self.rule_for(&entry.path);
            let made =
                tokio::task::spawn_blocking(move || store.ingest(&e.source, e.size, rule)).await;
            match made {
                Ok(Ok(f)) => Some(f),
                Ok(Err(err)) => {
                    tracing::warn!(path = entry.path.as_str(), "cannot make Xet chunks: {err}");
                    None
                }
                Err(_) => None,
            }
        })
        .await
        .clone()
    }

    /// The file of Xet hash `h`, if one was made into chunks.
    pub fn file(&self, h: &XetHash) -> Option<Arc<XetFile>> {
        self.files
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(h)
            .cloned()
    }

    /// The xorb of hash `h`.
    pub fn xorb(&self, h: &XetHash) -> Option<Arc<Xorb>> {
        let x = self.xorbs.read().unwrap_or_else(|e| e.into_inner());
        x.by_hash.get(h).map(|&i| x.list[i as usize].clone())
    }

    /// What the store holds.
    pub fn stored(&self) -> XetStored {
        let files = self.files.read().unwrap_or_else(|e| e.into_inner()).len() as u64;
        let chunks = self.index.lock().unwrap_or_else(|e| e.into_inner()).len() as u64;
        let x = self.xorbs.read().unwrap_or_else(|e| e.into_inner());
        XetStored {
            files,
            xorbs: x.list.len() as u64,
            chunks,
            xorb_bytes: x.bytes,
        }
    }

    /// The rule a file at `path` is cut by.
    fn rule_for(&self, path: &str) -> ChunkRule {
        self.cfg
            .chunking
            .iter()
            .find(|c| c.pattern.is_empty() || crate::faults::pattern_matches(&c.pattern, path))
            .map_or(ChunkRule::Current, |c| c.rule)
    }

    /// Reads `source` (of `size` bytes), cuts it into chunks by `rule`, stores the new ones,
    /// and returns the file (blocking; one ingestion at a time).
    fn ingest(&self, source: &Source, size: u64, rule: ChunkRule) -> io::Result<Arc<XetFile>> {
        let mut index = self.index.lock().unwrap_or_else(|e| e.into_inner());
        let first_id = self
            .xorbs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .list
            .len();
        let mut ing = Ingest {
            index: &index,
            fresh: HashMap::new(),
            first_id: u32::try_from(first_id).map_err(io::Error::other)?,
            done: Vec::new(),
            open: OpenXorb::default(),
            terms: Vec::new(),
            tree: MerkleBuilder::new(),
            pos: 0,
        };
        let mut reader = repo::open_source(source)?;
        let mut buf = vec![0u8; 1 << 20];
        let mut chunk = Vec::with_capacity(MAX_CHUNK);
        let mut chunker = Chunker::with_rule(rule);
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if ing.pos + (chunk.len() + n) as u64 > size {
                return Err(io::Error::other(
                    "the file is longer than when it was listed",
                ));
            }
            let mut piece = &buf[..n];
            while !piece.is_empty() {
                match chunker.next(piece) {
                    Some(k) => {
                        chunk.extend_from_slice(&piece[..k]);
                        piece = &piece[k..];
                        ing.add(&chunk);
                        chunk.clear();
                    }
                    None => {
                        chunk.extend_from_slice(piece);
                        piece = &[];
                    }
                }
            }
        }
        if !chunk.is_empty() {
            ing.add(&chunk);
        }
        if ing.pos != size {
            return Err(io::Error::other(format!(
                "the file has {} bytes, {size} when it was listed",
                ing.pos
            )));
        }
        ing.close_open();
        let file = XetFile {
            hash: ing.tree.file_hash(),
            size,
            terms: std::mem::take(&mut ing.terms),
        };
        let (fresh, done) = (ing.fresh, ing.done);
        {
            let mut x = self.xorbs.write().unwrap_or_else(|e| e.into_inner());
            for xorb in done {
                let id = x.list.len() as u32;
                x.bytes += xorb.bytes.len() as u64;
                x.by_hash.insert(xorb.hash, id);
                x.list.push(Arc::new(xorb));
            }
        }
        index.extend(fresh);
        let mut files = self.files.write().unwrap_or_else(|e| e.into_inner());
        Ok(files.entry(file.hash).or_insert(Arc::new(file)).clone())
    }

    /// The reconstruction of bytes `first..=last` of `file` (`last` below its size).
    pub fn answer(&self, file: &XetFile, first: u64, last: u64) -> Answer {
        let x = self.xorbs.read().unwrap_or_else(|e| e.into_inner());
        let i0 = file.terms.partition_point(|t| t.offset + t.len <= first);
        let mut offset_into_first_range = 0;
        let mut terms = Vec::new();
        let mut wanted: BTreeMap<u32, Vec<Range<u32>>> = BTreeMap::new();
        for t in file.terms[i0..].iter().take_while(|t| t.offset <= last) {
            let xorb = &x.list[t.xorb as usize];
            let len = |c: u32| u64::from(xorb.lens[c as usize]);
            // Chunks wholly before the range, and after it, are left out.
            let (mut c0, mut p) = (t.chunks.start, t.offset);
            while p + len(c0) <= first {
                p += len(c0);
                c0 += 1;
            }
            let (mut c1, mut q) = (c0, p);
            while c1 < t.chunks.end && q <= last {
                q += len(c1);
                c1 += 1;
            }
            if terms.is_empty() {
                offset_into_first_range = first - p;
            }
            terms.push(Term {
                hash: xorb.hash,
                // A term holds at most 8192 chunks of 128 KiB: 1 GiB.
                unpacked_length: (q - p) as u32,
                range: ChunkRange { start: c0, end: c1 },
            });
            wanted.entry(t.xorb).or_default().push(c0..c1);
        }
        let mut fetches = BTreeMap::new();
        for (id, mut ranges) in wanted {
            let xorb = &x.list[id as usize];
            ranges.sort_by_key(|r| r.start);
            let mut merged: Vec<Range<u32>> = Vec::new();
            for r in ranges {
                match merged.last_mut() {
                    Some(m) if r.start <= m.end => m.end = m.end.max(r.end),
                    _ => merged.push(r),
                }
            }
            let list = merged
                .into_iter()
                .map(|r| {
                    let bytes = ByteRange {
                        start: xorb.offsets[r.start as usize],
                        end: xorb.offsets[r.end as usize] - 1,
                    };
                    (
                        ChunkRange {
                            start: r.start,
                            end: r.end,
                        },
                        bytes,
                    )
                })
                .collect();
            fetches.insert(xorb.hash, list);
        }
        Answer {
            offset_into_first_range,
            terms,
            fetches,
        }
    }

    fn mac(&self, msg: &str) -> String {
        let mut h = Sha256::new();
        h.update(self.secret);
        h.update(msg.as_bytes());
        hex::encode(&h.finalize()[..16])
    }

    /// A new access token and its expiry (Unix seconds).
    pub fn token(&self) -> (String, u64) {
        let exp = now_secs().saturating_add(self.cfg.token_ttl);
        let sig = self.mac(&format!("token {exp}"));
        (format!("xet_{exp}_{sig}"), exp)
    }

    /// Whether `token` is one this server issued and it has not expired.
    pub fn token_valid(&self, token: &str) -> bool {
        let Some((exp, sig)) = token
            .strip_prefix("xet_")
            .and_then(|rest| rest.split_once('_'))
        else {
            return false;
        };
        let Ok(exp_secs) = exp.parse::<u64>() else {
            return false;
        };
        sig == self.mac(&format!("token {exp}")) && exp_secs > now_secs()
    }

    /// A URL of xorb `h` on the CDN at `cdn`, valid for the configured time.
    pub fn xorb_url(&self, cdn: &str, h: &XetHash) -> String {
        let exp = now_secs().saturating_add(self.cfg.url_ttl);
        let sig = self.mac(&format!("xorb {h} {exp}"));
        format!("{cdn}/xorbs/{h}?expires={exp}&sig={sig}")
    }

    /// Why a xorb URL's `expires` and `sig` are refused, if they are.
    pub fn check_xorb_url(&self, h: &XetHash, expires: &str, sig: &str) -> Result<(), String> {
        if sig != self.mac(&format!("xorb {h} {expires}")) {
            return Err(
                "The request signature we calculated does not match the signature you provided."
                    .into(),
            );
        }
        match expires.parse::<u64>() {
            Ok(exp) if exp > now_secs() => Ok(()),
            _ => Err("Request has expired".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::Base;
    use weight_inspect::xet::xorb::ChunkDecoder;

    fn store() -> XetStore {
        XetStore::new(
            XetConfig {
                token_ttl: 600,
                url_ttl: 600,
                v2: true,
                chunking: Vec::new(),
            },
            1,
        )
    }

    fn memory(data: Vec<u8>) -> Source {
        Source {
            base: Base::Memory(data.into()),
            patches: Vec::new(),
        }
    }

    /// The bytes `first..=last` of `file`, put together from its reconstruction.
    fn rebuild(s: &XetStore, file: &XetFile, first: u64, last: u64) -> Vec<u8> {
        let a = s.answer(file, first, last);
        let mut out = Vec::new();
        for t in &a.terms {
            let xorb = s.xorb(&t.hash).unwrap();
            let (cr, br) = a.fetches[&t.hash]
                .iter()
                .find(|(cr, _)| cr.contains(&t.range))
                .unwrap();
            let mut d = ChunkDecoder::new();
            d.push(&xorb.bytes[br.start as usize..=br.end as usize]);
            let mut k = cr.start;
            let mut term = Vec::new();
            while let Some(c) = d.next_chunk().unwrap() {
                if t.range.start <= k && k < t.range.end {
                    term.extend(c);
                }
                k += 1;
            }
            d.finish().unwrap();
            assert_eq!(term.len() as u64, u64::from(t.unpacked_length));
            out.extend(term);
        }
        let skip = a.offset_into_first_range as usize;
        out[skip..skip + (last - first + 1) as usize].to_vec()
    }

    #[test]
    fn files_are_rebuilt_from_their_terms_and_share_chunks() {
        let s = store();
        let a = testkit::data(700_000, 1);
        let fa = s
            .ingest(&memory(a.clone()), a.len() as u64, ChunkRule::Current)
            .unwrap();
        assert_eq!(fa.hash, weight_inspect::xet::hash::file_hash(&a));
        assert_eq!(rebuild(&s, &fa, 0, a.len() as u64 - 1), a);
        for (first, last) in [(0, 0), (1, 100_000), (65_000, 65_001), (699_999, 699_999)] {
            assert_eq!(
                rebuild(&s, &fa, first, last),
                &a[first as usize..=last as usize],
                "{first}-{last}"
            );
        }
        let before = s.stored();
        // Another file that holds it in the middle: only the chunks around its edges are new.
        let mut b = testkit::data(300_000, 2);
        b.extend(&a);
        b.extend(testkit::data(5000, 3));
        let fb = s
            .ingest(&memory(b.clone()), b.len() as u64, ChunkRule::Current)
            .unwrap();
        assert_eq!(rebuild(&s, &fb, 0, b.len() as u64 - 1), b);
        let after = s.stored();
        assert!(
            after.chunks - before.chunks <= 300_000 / 8192 + 3,
            "{before:?} {after:?}"
        );
        assert!(after.xorb_bytes - before.xorb_bytes < 300_000 + 2 * 131_072);
        // The same content again adds nothing.
        s.ingest(&memory(b.clone()), b.len() as u64, ChunkRule::Current)
            .unwrap();
        assert_eq!(s.stored(), after);
    }

    #[test]
    fn every_scheme_is_used_and_xorbs_are_bounded() {
        let s = store();
        // Zeros repeat one chunk: it is stored once (with the shorter last one).
        let z = vec![0u8; 1_000_000];
        let fz = s
            .ingest(&memory(z.clone()), z.len() as u64, ChunkRule::Current)
            .unwrap();
        assert_eq!(s.stored().chunks, 2, "a full chunk of zeros and the tail");
        assert_eq!(rebuild(&s, &fz, 0, 999_999), z);
        let a = testkit::data(3_000_000, 4);
        s.ingest(&memory(a.clone()), a.len() as u64, ChunkRule::Current)
            .unwrap();
        let x = s.xorbs.read().unwrap();
        let mut schemes = [0; 3];
        for xorb in &x.list {
            assert!(xorb.bytes.len() <= MAX_XORB_BYTES && xorb.lens.len() <= MAX_XORB_CHUNKS);
            for &o in &xorb.offsets[..xorb.lens.len()] {
                schemes[usize::from(xorb.bytes[o as usize + 4])] += 1;
            }
        }
        assert!(schemes.iter().all(|&n| n > 0), "{schemes:?}");
    }

    #[test]
    fn a_short_or_long_source_is_refused() {
        let s = store();
        assert!(s
            .ingest(&memory(vec![1; 10]), 11, ChunkRule::Current)
            .is_err());
        assert!(s
            .ingest(&memory(vec![1; 10]), 9, ChunkRule::Current)
            .is_err());
        assert_eq!(s.stored(), XetStored::default());
    }

    #[test]
    fn tokens_and_urls_are_checked() {
        let s = store();
        let (t, exp) = s.token();
        assert!(s.token_valid(&t) && exp > now_secs());
        assert!(!s.token_valid(&t.replace("xet_", "xet_1")));
        assert!(!s.token_valid("xet_99999999999_00"));
        let other = XetStore::new(s.cfg.clone(), 2);
        assert!(!other.token_valid(&t));
        let expired = XetStore::new(
            XetConfig {
                token_ttl: 0,
                url_ttl: 0,
                ..s.cfg.clone()
            },
            1,
        );
        assert!(!expired.token_valid(&expired.token().0));
        let h = XetHash([7; 32]);
        let url = s.xorb_url("http://c", &h);
        let q: HashMap<&str, &str> = url
            .split_once('?')
            .unwrap()
            .1
            .split('&')
            .map(|p| p.split_once('=').unwrap())
            .collect();
        assert!(s.check_xorb_url(&h, q["expires"], q["sig"]).is_ok());
        assert!(s
            .check_xorb_url(&XetHash([8; 32]), q["expires"], q["sig"])
            .is_err());
        let url = expired.xorb_url("http://c", &h);
        let (e, sig) = url
            .split_once("expires=")
            .unwrap()
            .1
            .split_once("&sig=")
            .unwrap();
        assert_eq!(
            expired.check_xorb_url(&h, e, sig).unwrap_err(),
            "Request has expired"
        );
    }
}
