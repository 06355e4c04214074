//! Nodes that start together fill a missing blob from the Hub once, through the bucket itself.
//!
//! Each chunk of the file (as the engine cuts it) has a lease of its own
//! (`fills/sha256/{sha}/{chunk_size}/lease-{index}.json`, see [`super::lease`]): the node that
//! wins it fetches the chunk from the Hub and, once the chunk is on disk and its digest known,
//! writes it as a piece (`…/piece-{index}-{sha256 of the chunk}.{node}`) and marks the lease
//! done, naming the piece. A node that finds a chunk's lease held waits (its other connections
//! take other chunks: the fleet's connections are its bandwidth) and reads the piece once it
//! lands; a chunk whose holder stopped renewing is taken over once its lease lapses, and what
//! the holder had shared is not fetched again. Followers learn what landed by listing the
//! fill's folder with backoff (100 ms doubling to 2 s while nothing changes, kept between
//! waits), never in a busy loop.
//!
//! **No wait is without a bound, whatever the bucket holds.** A lease lapses once it has not
//! been rewritten for its term — judged by the store's clock (its `Last-Modified`), or, where
//! this node does not know that clock, by this node watching the same version for that long —
//! and its term is bounded ([`super::lease::MAX_LEASE`]), so an expiry in the far future, a
//! holder whose clock runs ahead, or one that asked for a term of ages and died, holds nobody
//! for long. A lease marked done is believed only while the piece it names is a piece of that
//! chunk and is in the bucket (or the blob is complete); otherwise it is taken over. A chunk
//! waited on for longer than [`WAIT_BOUND_TERMS`] terms (a holder that renews for ever and
//! never shares) is fetched from the Hub by this node, which says why, once.
//!
//! Trust stays where it was: a piece is read as the bucket's blob is (every chunk checked
//! against the fetch's manifest, or else the digest its writer recorded, and the whole file
//! against the Hub's digest or the lock file's before anything is committed). A piece that does
//! not match is deleted and named, and its chunk fetched from the Hub.
//!
//! Once a node has the whole file, verified, it uploads the blob (one node: the blob's own
//! lease decides, see `fetch`) and removes the fill's pieces (its leases stay, marked done, for
//! the nodes still on their way); a piece read after that comes
//! from the blob instead.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use object_store::{GetOptions, GetRange, ObjectStoreExt};
use serde::Serialize;

use super::{Claim, LeaseKeeper, RemoteCache, RemoteCacheError};
use crate::manifest::Sha256Hex;
use crate::names::escape;
use crate::net::SharedClock;
use crate::transfer::{Assigned, BoxError, Fill, Mirror, MirrorBody};

/// How long a chunk's lease holds without renewal: a node that stops (killed, cut off) has its
/// chunks taken over this long after its last renewal, plus at most one listing's wait.
pub const FILL_LEASE: Duration = Duration::from_secs(10);

/// A chunk is waited on for at most this many terms of this node's lease (5 minutes at the
/// default [`FILL_LEASE`]; never less than twice [`MAX_LEASE`](super::MAX_LEASE)): past that,
/// this node fetches it from the Hub itself.
pub const WAIT_BOUND_TERMS: u32 = 30;

/// The first wait between two listings of a fill's folder, doubled while nothing changes.
const FIRST_POLL: Duration = Duration::from_millis(100);
/// The longest wait between two listings.
const LAST_POLL: Duration = Duration::from_secs(2);
/// Pieces written at once by one node.
const PUBLISHING: usize = 2;
/// A piece up to this size is written in one request; a larger one in parts.
const ONE_REQUEST: u64 = 32 << 20;
/// Written in a fill's folder once its blob is complete in the bucket, before its pieces are
/// removed: a node still waiting for a piece then knows to read the blob.
const COMPLETE: &str = "/complete";

/// The most objects a fill's folder is read for when it is removed: a lease and a piece for
/// each of the most chunks a file is cut into (2^18), for two chunk sizes.
pub(super) const MOST_IN_FOLDER: usize = 1 << 20;

/// This node's name in leases and pieces: `WI_NODE_NAME`, else the host's name and the
/// process's id. Kept to letters, digits, `.`, `_` and `-` (at most 64 of them).
pub fn node_name() -> String {
    let raw = std::env::var("WI_NODE_NAME")
        .ok()
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| {
            let host = rustix::system::uname()
                .nodename()
                .to_string_lossy()
                .into_owned();
            format!("{host}-{}", std::process::id())
        });
    clean_name(&raw)
}

/// `raw` kept to the characters a node's name may have in an object's key.
fn clean_name(raw: &str) -> String {
    let name: String = raw
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .take(64)
        .collect();
    if name.is_empty() {
        "node".into()
    } else {
        name
    }
}

/// What a node's part in a fill was (see [`BucketFill::report`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FillReport {
    /// This node's name.
    pub node: String,
    /// Chunks this node fetched from the Hub for the fleet (their leases won).
    pub fetched: u64,
    /// Of those, chunks taken over from a node that stopped renewing its lease.
    pub taken_over: u64,
    /// Pieces this node wrote to the bucket.
    pub shared: u64,
    /// The nodes whose pieces this node read, with how many each.
    pub read_from: BTreeMap<String, u64>,
    /// Pieces found damaged (deleted from the bucket), by key.
    pub damaged: Vec<String>,
    /// Chunks this node fetched from the Hub itself, without their lease, after waiting for
    /// another node's piece for longer than the bound ([`WAIT_BOUND_TERMS`] terms of its
    /// lease).
    #[serde(default)]
    pub waited_out: u64,
    /// Why coordinating stopped early (the rest came from the Hub), or why a piece could not be
    /// shared; `None` when all went as planned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trouble: Option<String>,
}

/// A chunk's piece in the bucket.
#[derive(Debug, Clone)]
struct Piece {
    key: String,
    sha256: [u8; 32],
    node: String,
}

/// A chunk's lease as this node last saw it: its version, since when (on this node's clock,
/// moved back by its age on the store's clock when that is known) it has not been rewritten,
/// and the term it is judged by.
#[derive(Debug, Clone)]
struct Seen {
    e_tag: Option<String>,
    since: Instant,
    term: Duration,
}

impl Seen {
    fn lapsed(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.since) > self.term
    }
}

#[derive(Default)]
struct State {
    pieces: HashMap<usize, Piece>,
    leases: HashMap<usize, Seen>,
    /// Chunks told to wait, with when they were first told.
    waiting: HashMap<usize, Instant>,
    /// Said to the user, not yet handed to the engine ([`Fill::notices`]).
    notices: Vec<String>,
    /// Whether a chunk fetched after a wait past its bound was said (once a fill).
    said_waited_out: bool,
    /// The wait before the next listing.
    poll: Option<Duration>,
    /// Leases this node holds, kept renewed until their piece is shared.
    held: HashMap<usize, LeaseKeeper>,
    /// The blob is complete in the bucket (its uploader said so in the fill's folder).
    complete: bool,
    /// Chunks whose bytes this node read from a piece.
    read: HashSet<usize>,
    report: FillReport,
}

/// One node's part in filling one blob (see the module docs): it tells the transfer engine
/// where each chunk comes from, and is the mirror the engine reads the others' pieces from.
#[derive(Clone)]
pub struct BucketFill {
    inner: Arc<Inner>,
}

struct Inner {
    cache: RemoteCache,
    sha256: Sha256Hex,
    size: u64,
    ttl: Duration,
    clock: SharedClock,
    name: String,
    chunk_size: OnceLock<u64>,
    state: Mutex<State>,
    sharing: Mutex<tokio::task::JoinSet<()>>,
    slots: tokio::sync::Semaphore,
}

impl std::fmt::Debug for BucketFill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.inner.name)
    }
}

impl BucketFill {
    /// This node's (`node`) part in filling the blob of `sha256` (`size` bytes) in `cache`,
    /// its leases held for `ttl` and renewed on `clock`.
    pub fn new(
        cache: &RemoteCache,
        sha256: Sha256Hex,
        size: u64,
        node: &str,
        ttl: Duration,
        clock: SharedClock,
    ) -> Self {
        let name = format!("{}/fills/sha256/{sha256}", cache.url());
        BucketFill {
            inner: Arc::new(Inner {
                cache: cache.clone(),
                sha256,
                size,
                ttl,
                clock,
                name,
                chunk_size: OnceLock::new(),
                state: Mutex::new(State {
                    report: FillReport {
                        node: clean_name(node),
                        ..FillReport::default()
                    },
                    ..State::default()
                }),
                sharing: Mutex::new(tokio::task::JoinSet::new()),
                slots: tokio::sync::Semaphore::new(PUBLISHING),
            }),
        }
    }

    /// The folder of every fill of the blob of `sha256`.
    pub fn folder(sha256: &Sha256Hex) -> String {
        format!("fills/sha256/{sha256}")
    }

    /// Waits until every piece this node fetched is shared, and gives up the leases of chunks
    /// it won but did not fetch (a download that failed or was stopped): other nodes take them
    /// at once instead of waiting for them to lapse. Then what this node's part was.
    pub async fn settle(&self) -> FillReport {
        let mut sharing = std::mem::take(&mut *lock(&self.inner.sharing));
        while sharing.join_next().await.is_some() {}
        let held: Vec<LeaseKeeper> = lock(&self.inner.state)
            .held
            .drain()
            .map(|(_, k)| k)
            .collect();
        for keeper in held {
            if let Some(lease) = keeper.stop().await {
                let _ = self.inner.cache.release(lease).await;
            }
        }
        lock(&self.inner.state).report.clone()
    }

    /// After the file made of the pieces failed its whole-file check and was fetched from the
    /// Hub instead: every piece this node read whose recorded digest is not the Hub's chunk
    /// (`chunks`, cut by `chunk_size`) lied. Each is deleted from the bucket and named (its
    /// key, and the node that wrote it) in the report and the answer.
    pub async fn condemn(&self, chunk_size: u64, chunks: &[[u8; 32]]) -> Vec<String> {
        if chunk_size != self.inner.chunk_size() {
            return Vec::new();
        }
        let liars: Vec<(usize, Piece)> = {
            let s = lock(&self.inner.state);
            s.read
                .iter()
                .filter_map(|&i| s.pieces.get(&i).map(|p| (i, p)))
                .filter(|(i, p)| chunks.get(*i).is_some_and(|d| *d != p.sha256))
                .map(|(i, p)| (i, p.clone()))
                .collect()
        };
        let mut named = Vec::new();
        for (index, p) in liars {
            // The piece, and the lease that names it (the next node to claim the chunk
            // fetches it from the Hub).
            let keys = vec![p.key.clone(), self.inner.lease_key(index)];
            let _ = self.inner.cache.delete_keys(keys).await;
            let shown = format!("{} (written by {})", escape(&p.key), p.node);
            lock(&self.inner.state).report.damaged.push(shown.clone());
            crate::metrics::global().fill_chunk("damaged");
            named.push(shown);
        }
        named
    }

    /// What this node's part was so far.
    pub fn report(&self) -> FillReport {
        lock(&self.inner.state).report.clone()
    }

    /// How many pieces of the blob of `sha256` the bucket holds (every chunk size's): how far
    /// a fill has come.
    pub async fn pieces(
        cache: &RemoteCache,
        sha256: &Sha256Hex,
    ) -> Result<usize, RemoteCacheError> {
        let keys = cache
            .list_keys(&Self::folder(sha256), MOST_IN_FOLDER)
            .await?;
        Ok(keys
            .iter()
            .filter(|k| {
                k.rsplit('/')
                    .next()
                    .is_some_and(|n| n.starts_with("piece-"))
            })
            .count())
    }

    /// Removes the fill's folder (every chunk size's leases and pieces): the blob is complete
    /// in the bucket. Objects that are not a fill's are not touched.
    pub async fn remove(cache: &RemoteCache, sha256: &Sha256Hex) -> Result<u64, RemoteCacheError> {
        let folder = Self::folder(sha256);
        let keys = cache.list_keys(&folder, MOST_IN_FOLDER).await?;
        cache.delete_keys(keys).await
    }

    /// The blob is complete in the bucket: says so in the fill's folder (a node still waiting
    /// for a piece then reads the blob), then removes the fill's pieces (its bytes). Its leases
    /// stay, each marked done: a node of the fleet still on its way that claims a chunk learns
    /// it is done and reads it from the blob, rather than winning a lease nobody holds any more
    /// and fetching the chunk from the Hub again. They are a few hundred bytes each; `cache
    /// prune --remote-cache` removes them ([`RemoteCache::abandoned_fills`]).
    pub async fn remove_pieces(
        cache: &RemoteCache,
        sha256: &Sha256Hex,
    ) -> Result<u64, RemoteCacheError> {
        let marker = format!("{}{COMPLETE}", Self::folder(sha256));
        cache
            .put_small(&marker, b"the blob is complete\n".to_vec())
            .await?;
        let keys = cache
            .list_keys(&Self::folder(sha256), MOST_IN_FOLDER)
            .await?
            .into_iter()
            .filter(|k| {
                k.rsplit('/')
                    .next()
                    .is_some_and(|n| n.starts_with("piece-"))
            })
            .collect();
        cache.delete_keys(keys).await
    }
}

impl Inner {
    fn chunk_size(&self) -> u64 {
        self.chunk_size.get().copied().unwrap_or(u64::MAX)
    }

    fn chunks(&self) -> usize {
        usize::try_from(self.size.div_ceil(self.chunk_size().max(1))).unwrap_or(usize::MAX)
    }

    fn prefix(&self) -> String {
        format!("{}/{}", BucketFill::folder(&self.sha256), self.chunk_size())
    }

    fn lease_key(&self, index: usize) -> String {
        format!("{}/lease-{index}.json", self.prefix())
    }

    fn piece_key(&self, index: usize, sha256: &[u8; 32], node: &str) -> String {
        format!(
            "{}/piece-{index}-{}.{node}",
            self.prefix(),
            hex::encode(sha256)
        )
    }

    /// Coordinating stopped: every chunk not yet assigned comes from the Hub.
    fn trouble(&self, why: String) {
        let mut s = lock(&self.state);
        if s.report.trouble.is_none() {
            tracing::warn!(fill = self.name.as_str(), "{why}");
            s.report.trouble = Some(why);
        }
    }

    /// A piece named by a lease marked done (or by a listing), if its key is a piece of chunk
    /// `index` of this fill.
    fn parse_piece(&self, index: usize, key: &str) -> Option<Piece> {
        let rest = key.strip_prefix(&format!("{}/piece-", self.prefix()))?;
        let (i, rest) = rest.split_once('-')?;
        let (digest, node) = rest.split_once('.')?;
        if i.parse::<usize>().ok()? != index || clean_name(node) != node {
            return None;
        }
        let mut sha256 = [0u8; 32];
        hex::decode_to_slice(digest, &mut sha256).ok()?;
        Some(Piece {
            key: key.to_string(),
            sha256,
            node: node.to_string(),
        })
    }

    /// Lists the fill's folder once: which pieces landed, which leases changed. Whether a
    /// piece landed since the last listing.
    async fn look(&self) -> Result<bool, RemoteCacheError> {
        let prefix = self.prefix();
        let folder = BucketFill::folder(&self.sha256);
        let count = self.chunks();
        let objects = self.cache.list_objects(&folder, 4 * count + 16).await?;
        let now = self.clock.now();
        let mut s = lock(&self.state);
        let mut leases = HashMap::new();
        let mut landed = false;
        for meta in objects {
            let key = meta.location.to_string();
            if key.strip_prefix(&folder) == Some(COMPLETE) {
                landed |= !s.complete;
                s.complete = true;
                continue;
            }
            let Some(name) = key.strip_prefix(&prefix).and_then(|k| k.strip_prefix('/')) else {
                continue;
            };
            if let Some(i) = name
                .strip_prefix("lease-")
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|&i| i < count)
            {
                let seen = match s.leases.get(&i) {
                    Some(seen) if seen.e_tag == meta.e_tag => seen.clone(),
                    // A new version: unchanged since the store wrote it.
                    previous => Seen {
                        e_tag: meta.e_tag.clone(),
                        since: self.since(now, self.cache.age_of(&meta), previous),
                        term: previous.map_or(self.ttl, |p| p.term),
                    },
                };
                leases.insert(i, seen);
            } else if let Some(i) = name
                .strip_prefix("piece-")
                .and_then(|n| n.split_once('-'))
                .and_then(|(i, _)| i.parse::<usize>().ok())
                .filter(|&i| i < count)
            {
                if let Some(p) = self.parse_piece(i, &key) {
                    if let std::collections::hash_map::Entry::Vacant(e) = s.pieces.entry(i) {
                        landed = true;
                        e.insert(p);
                    }
                }
            }
        }
        s.leases = leases;
        Ok(landed)
    }

    /// Since when a lease version first seen `now`, written `age` ago by the store's clock, has
    /// been unchanged (never further back than its term: a node that has just arrived still
    /// gives a holder that lapsed long ago its term from the write).
    fn since(&self, now: Instant, age: Option<Duration>, previous: Option<&Seen>) -> Instant {
        let term = previous.map_or(self.ttl, |p| p.term);
        let age = age
            .unwrap_or(Duration::ZERO)
            .min(term + Duration::from_secs(1));
        now.checked_sub(age).unwrap_or(now)
    }

    /// The longest this node waits for another's piece of a chunk: [`WAIT_BOUND_TERMS`] terms
    /// of its own lease, and at least twice the longest term any lease may have (a lease that
    /// is not renewed lapses first).
    fn wait_bound(&self) -> Duration {
        self.ttl
            .saturating_mul(WAIT_BOUND_TERMS)
            .max(2 * super::MAX_LEASE)
    }

    /// Whether a chunk told to wait may be asked again: its piece landed, its lease is gone
    /// (given up), its lease has not changed for longer than its term (its holder stopped), or
    /// it has waited for longer than the bound.
    fn any_ready(&self) -> bool {
        let now = self.clock.now();
        let s = lock(&self.state);
        s.waiting.iter().any(|(i, since)| {
            // The blob is complete: its pieces may be gone, its leases say where each chunk is.
            s.complete
                || s.pieces.contains_key(i)
                || s.leases.get(i).is_none_or(|seen| seen.lapsed(now))
                || now.saturating_duration_since(*since) > self.wait_bound()
        })
    }

    async fn assign(self: Arc<Self>, index: usize) -> Assigned {
        if lock(&self.state).report.trouble.is_some() {
            return Assigned::Origin;
        }
        let now = self.clock.now();
        {
            let mut s = lock(&self.state);
            // Asked again while this node holds it (the engine asks once per chunk; a caller
            // may not): this node's.
            if s.held.contains_key(&index) {
                return Assigned::Origin;
            }
            if let Some(sha256) = s.pieces.get(&index).map(|p| p.sha256) {
                s.waiting.remove(&index);
                return Assigned::Mirror { sha256 };
            }
            // Waited on past the bound: this node's, from the Hub, without a lease.
            if let Some(waited) = s
                .waiting
                .get(&index)
                .map(|since| now.saturating_duration_since(*since))
                .filter(|w| *w > self.wait_bound())
            {
                let why = format!(
                    "chunk {index} waited {} for the node holding its lease to share it",
                    secs(waited)
                );
                return self.waited_out(&mut s, index, &why);
            }
            // Held, by the last listing, and rewritten within its term: no request to learn it.
            let live = s.leases.get(&index).is_some_and(|seen| !seen.lapsed(now));
            if live && !s.complete && s.waiting.contains_key(&index) {
                return Assigned::Wait;
            }
        }
        let key = self.lease_key(index);
        let node = lock(&self.state).report.node.clone();
        let claimed = self
            .cache
            .claim(&key, &node, self.ttl, self.cache.bucket_now_ms())
            .await;
        let claimed = match claimed {
            Ok(Claim::Held(held)) => self.judge(index, &key, &node, held).await,
            other => other,
        };
        match claimed {
            Ok(Claim::Won(lease)) => {
                let taken_over = lease.taken_over();
                let keeper = self.cache.keep(lease, self.ttl, self.clock.clone());
                let mut s = lock(&self.state);
                s.waiting.remove(&index);
                let lapsed = taken_over || s.leases.contains_key(&index);
                s.held.insert(index, keeper);
                s.report.fetched += 1;
                crate::metrics::global().fill_chunk("fetched");
                if lapsed {
                    s.report.taken_over += 1;
                    crate::metrics::global().fill_chunk("taken_over");
                }
                Assigned::Origin
            }
            Ok(Claim::Held(held)) => {
                let mut s = lock(&self.state);
                if let Some(p) = held
                    .record
                    .done
                    .as_deref()
                    .and_then(|k| self.parse_piece(index, k))
                {
                    // Judged there (listed, found, or the blob complete).
                    s.waiting.remove(&index);
                    let sha256 = p.sha256;
                    s.pieces.insert(index, p);
                    return Assigned::Mirror { sha256 };
                }
                s.waiting.entry(index).or_insert(now);
                // Asked again once its term has passed without a rewrite (a listing that sees
                // it rewritten first moves that on): never a claim per listing.
                let previous = s.leases.get(&index).filter(|p| p.e_tag == held.e_tag());
                let seen = Seen {
                    e_tag: held.e_tag(),
                    since: previous.map_or_else(|| self.since(now, held.age, None), |p| p.since),
                    term: held.record.term(self.ttl),
                };
                s.leases.insert(index, seen);
                Assigned::Wait
            }
            Err(e) => {
                self.trouble(format!("{e}; the rest comes from the Hub"));
                Assigned::Origin
            }
        }
    }

    /// A lease another node holds on chunk `index`, judged: taken over when this node has
    /// watched the same version for longer than its term (the store's clock unknown, or the
    /// holder's write older than the store said), or when it is marked done but names no piece
    /// of this chunk that the bucket holds; else left as it is.
    async fn judge(
        &self,
        index: usize,
        key: &str,
        node: &str,
        held: super::Held,
    ) -> Result<Claim, RemoteCacheError> {
        let now = self.clock.now();
        if let Some(done) = held.record.done.clone() {
            let Some(piece) = self.parse_piece(index, &done) else {
                let why = format!(
                    "its lease names '{}', which is not a piece of it",
                    escape(&done)
                );
                return self.take_over(index, key, node, &held, Some(&why)).await;
            };
            let (listed, complete) = {
                let s = lock(&self.state);
                (s.pieces.contains_key(&index), s.complete)
            };
            if listed || complete || self.cache.exists(&piece.key).await? {
                return Ok(Claim::Held(held));
            }
            let why = format!(
                "its lease names the piece '{}', which is not in the bucket",
                escape(&done)
            );
            return self.take_over(index, key, node, &held, Some(&why)).await;
        }
        let watched = lock(&self.state)
            .leases
            .get(&index)
            .filter(|seen| seen.e_tag.is_some() && seen.e_tag == held.e_tag())
            .is_some_and(|seen| {
                now.saturating_duration_since(seen.since) > held.record.term(self.ttl)
            });
        if watched {
            return self.take_over(index, key, node, &held, None).await;
        }
        Ok(Claim::Held(held))
    }

    /// Takes the lease `held` on chunk `index` over (from that version only), for `why` when
    /// it did not lapse.
    async fn take_over(
        &self,
        index: usize,
        key: &str,
        node: &str,
        held: &super::Held,
        why: Option<&str>,
    ) -> Result<Claim, RemoteCacheError> {
        if let Some(why) = why {
            tracing::info!(
                fill = self.name.as_str(),
                index,
                "chunk {index}: {why}; taken over"
            );
        }
        self.cache
            .take_over(key, held, node, self.ttl, self.cache.bucket_now_ms())
            .await
    }

    /// Chunk `index` comes from the Hub, fetched by this node without a lease after waiting
    /// past the bound (`why`): counted, and said once a fill.
    fn waited_out(&self, s: &mut State, index: usize, why: &str) -> Assigned {
        s.waiting.remove(&index);
        s.report.waited_out += 1;
        crate::metrics::global().fill_chunk("waited_out");
        if !s.said_waited_out {
            s.said_waited_out = true;
            let line = format!(
                "{}: {why}, past the bound of {}; this node fetches it from the Hub itself \
                 (and any other chunk it has waited on as long)",
                self.name,
                secs(self.wait_bound())
            );
            tracing::warn!(fill = self.name.as_str(), "{line}");
            s.notices.push(line);
        }
        Assigned::Origin
    }

    async fn changed(self: Arc<Self>) {
        loop {
            let wait = lock(&self.state).poll.unwrap_or(FIRST_POLL);
            self.clock.sleep(wait).await;
            let landed = match self.look().await {
                Ok(landed) => landed,
                Err(e) => {
                    // Waiting on a bucket that cannot be listed would never end: what waits
                    // comes from the Hub.
                    self.trouble(format!("{e}; the rest comes from the Hub"));
                    return;
                }
            };
            // The wait between listings grows while nothing lands, across calls: a chunk
            // asked again and told to wait again does not start the backoff over.
            lock(&self.state).poll = Some(if landed {
                FIRST_POLL
            } else {
                (wait * 2).min(LAST_POLL)
            });
            if self.any_ready() {
                return;
            }
        }
    }

    /// Shares chunk `index` (bytes `range` of `file`, digest `sha256`): its piece written, its
    /// lease marked done. A copy that no longer matches on disk is not shared (the lease is
    /// given up for another node to fetch it).
    async fn share(
        self: Arc<Self>,
        index: usize,
        range: std::ops::Range<u64>,
        sha256: [u8; 32],
        file: Arc<std::fs::File>,
    ) {
        // Only a chunk this node holds the lease of is shared (not one fetched after the
        // bucket failed, nor one another node took over meanwhile).
        let Some(keeper) = lock(&self.state).held.remove(&index) else {
            return;
        };
        let _slot = self.slots.acquire().await;
        let node = lock(&self.state).report.node.clone();
        let key = self.piece_key(index, &sha256, &node);
        let written = self
            .cache
            .put_range(&key, file, range, &sha256, ONE_REQUEST)
            .await;
        let lease = keeper.stop().await;
        match written {
            Ok(()) => {
                lock(&self.state).report.shared += 1;
                crate::metrics::global().fill_chunk("shared");
                if let Some(lease) = lease {
                    if let Err(e) = self.cache.finish(lease, &key).await {
                        self.trouble(format!("chunk {index} shared, but its lease: {e}"));
                    }
                }
            }
            Err(e) => {
                self.trouble(format!("chunk {index} could not be shared: {e}"));
                if let Some(lease) = lease {
                    let _ = self.cache.release(lease).await;
                }
            }
        }
    }
}

impl Mirror for BucketFill {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn get_range(
        &self,
        range: std::ops::Range<u64>,
    ) -> BoxFuture<'_, Result<MirrorBody, BoxError>> {
        Box::pin(async move {
            let cs = self.inner.chunk_size();
            let index = usize::try_from(range.start / cs)?;
            let piece = lock(&self.inner.state).pieces.get(&index).cloned();
            let Some(piece) = piece else {
                return Err(format!("no piece of chunk {index}").into());
            };
            let base = index as u64 * cs;
            let within = range.start - base..range.end - base;
            let store = &self.inner.cache.store;
            let opts = |r: std::ops::Range<u64>| GetOptions {
                range: Some(GetRange::Bounded(r)),
                ..Default::default()
            };
            let got = match store
                .get_opts(&self.inner.cache.object(&piece.key)?, opts(within))
                .await
            {
                // The fill is over and its folder removed: the blob is complete.
                Err(object_store::Error::NotFound { .. }) => {
                    let blob = RemoteCache::blob_key(&self.inner.sha256);
                    store
                        .get_opts(&self.inner.cache.object(&blob)?, opts(range))
                        .await?
                }
                r => r?,
            };
            let mut s = lock(&self.inner.state);
            if s.read.insert(index) {
                *s.report.read_from.entry(piece.node).or_insert(0) += 1;
                crate::metrics::global().fill_chunk("read");
            }
            drop(s);
            Ok(got.into_stream().map_err(BoxError::from).boxed())
        })
    }
}

impl Fill for BucketFill {
    fn begin(&self, chunk_size: u64) {
        let _ = self.inner.chunk_size.set(chunk_size);
    }

    fn assign(&self, index: usize) -> BoxFuture<'_, Assigned> {
        Box::pin(self.inner.clone().assign(index))
    }

    fn changed(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.inner.clone().changed())
    }

    fn fetched(
        &self,
        index: usize,
        range: std::ops::Range<u64>,
        sha256: [u8; 32],
        file: Arc<std::fs::File>,
    ) {
        let inner = self.inner.clone();
        lock(&self.inner.sharing).spawn(inner.share(index, range, sha256, file));
    }

    fn notices(&self) -> Vec<String> {
        std::mem::take(&mut lock(&self.inner.state).notices)
    }

    fn damaged(&self, index: usize) {
        let Some(piece) = lock(&self.inner.state).pieces.remove(&index) else {
            return;
        };
        let shown = format!("{} (written by {})", escape(&piece.key), piece.node);
        lock(&self.inner.state).report.damaged.push(shown);
        crate::metrics::global().fill_chunk("damaged");
        let cache = self.inner.cache.clone();
        lock(&self.inner.sharing).spawn(async move {
            if let Ok(path) = cache.object(&piece.key) {
                let _ = cache.store.delete(&path).await;
            }
        });
    }
}

/// A duration as people read it in a notice.
fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use sha2::{Digest as _, Sha256};

    use super::*;
    use crate::net::SystemClock;

    const CHUNK: u64 = 64 << 10;

    fn file_of(bytes: &[u8]) -> Arc<std::fs::File> {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        Arc::new(f)
    }

    fn fill(cache: &RemoteCache, bytes: &[u8], node: &str, ttl: Duration) -> BucketFill {
        let sha: Sha256Hex = hex::encode(Sha256::digest(bytes)).parse().unwrap();
        let f = BucketFill::new(
            cache,
            sha,
            bytes.len() as u64,
            node,
            ttl,
            SystemClock::shared(),
        );
        f.begin(CHUNK);
        f
    }

    async fn read(f: &BucketFill, range: std::ops::Range<u64>) -> Vec<u8> {
        let mut body = f.get_range(range).await.unwrap();
        let mut out = Vec::new();
        while let Some(b) = body.next().await {
            out.extend_from_slice(&b.unwrap());
        }
        out
    }

    /// One node wins a chunk and fetches it; the other waits, learns when its piece lands,
    /// and reads it, checked against the digest its writer recorded.
    #[tokio::test]
    async fn one_node_fetches_a_chunk_the_other_reads_its_piece() {
        let bytes: Vec<u8> = (0..3 * CHUNK).map(|i| (i * 7 % 251) as u8).collect();
        let cache = RemoteCache::in_memory();
        let (a, b) = (
            fill(&cache, &bytes, "node-a", FILL_LEASE),
            fill(&cache, &bytes, "node b/../x", FILL_LEASE),
        );
        assert_eq!(a.assign(1).await, Assigned::Origin);
        assert_eq!(b.assign(1).await, Assigned::Wait);
        assert_eq!(
            b.assign(2).await,
            Assigned::Origin,
            "the others' connections take other chunks"
        );
        let digest: [u8; 32] = Sha256::digest(&bytes[CHUNK as usize..2 * CHUNK as usize]).into();
        a.fetched(1, CHUNK..2 * CHUNK, digest, file_of(&bytes));
        let waited = tokio::time::timeout(Duration::from_secs(30), b.changed()).await;
        waited.expect("the piece's landing is seen");
        assert_eq!(b.assign(1).await, Assigned::Mirror { sha256: digest });
        assert_eq!(
            read(&b, CHUNK + 5..CHUNK + 9).await,
            bytes[CHUNK as usize + 5..CHUNK as usize + 9]
        );
        let (pa, pb) = (a.settle().await, b.settle().await);
        assert_eq!((pa.fetched, pa.shared), (1, 1));
        assert_eq!(pb.read_from.get("node-a"), Some(&1));
        assert_eq!(
            pb.node, "nodeb..x",
            "a node's name is kept to safe characters"
        );
        // A third node, later: the done lease names the piece at once, no wait.
        let c = fill(&cache, &bytes, "node-c", FILL_LEASE);
        assert_eq!(c.assign(1).await, Assigned::Mirror { sha256: digest });
        // b gave its unfetched chunk back when it settled: c wins it at once.
        assert_eq!(c.assign(2).await, Assigned::Origin);
        c.settle().await;
        let sha = bytes_sha(&bytes);
        assert!(BucketFill::remove(&cache, &sha).await.unwrap() >= 2);
        assert_eq!(BucketFill::remove(&cache, &sha).await.unwrap(), 0);
    }

    fn bytes_sha(bytes: &[u8]) -> Sha256Hex {
        hex::encode(Sha256::digest(bytes)).parse().unwrap()
    }

    /// A chunk asked again while this node holds its lease is this node's: never one waiting
    /// on its own lease.
    #[tokio::test]
    async fn a_chunk_asked_again_while_held_is_this_nodes() {
        let bytes = vec![1u8; 2 * CHUNK as usize];
        let cache = RemoteCache::in_memory();
        let a = fill(&cache, &bytes, "node-a", FILL_LEASE);
        assert_eq!(a.assign(0).await, Assigned::Origin);
        assert_eq!(a.assign(0).await, Assigned::Origin, "and again, while held");
        assert_eq!(a.settle().await.fetched, 1);
    }

    /// A node still waiting for a piece when the fill ends (the blob uploaded, the pieces
    /// removed) learns it from the fill's folder at its next listing, not after a lease's
    /// time, and reads the chunk from the blob.
    #[tokio::test]
    async fn a_node_still_waiting_when_the_fill_ends_reads_the_blob() {
        let bytes: Vec<u8> = (0..2 * CHUNK).map(|i| (i % 253) as u8).collect();
        let cache = RemoteCache::in_memory();
        let (a, b) = (
            fill(&cache, &bytes, "node-a", FILL_LEASE),
            fill(&cache, &bytes, "node-b", FILL_LEASE),
        );
        assert_eq!(a.assign(0).await, Assigned::Origin);
        assert_eq!(b.assign(0).await, Assigned::Wait);
        let digest: [u8; 32] = Sha256::digest(&bytes[..CHUNK as usize]).into();
        a.fetched(0, 0..CHUNK, digest, file_of(&bytes));
        a.settle().await;
        let sha = bytes_sha(&bytes);
        cache
            .put_small(&RemoteCache::blob_key(&sha), bytes.clone())
            .await
            .unwrap();
        BucketFill::remove_pieces(&cache, &sha).await.unwrap();
        assert_eq!(BucketFill::pieces(&cache, &sha).await.unwrap(), 0);
        tokio::time::timeout(FILL_LEASE / 2, b.changed())
            .await
            .expect("the end of the fill is seen before any lease could lapse");
        assert_eq!(b.assign(0).await, Assigned::Mirror { sha256: digest });
        assert_eq!(read(&b, 10..20).await, bytes[10..20]);
    }

    /// A node that stops renewing (killed) has its chunk taken over once its lease lapses.
    #[tokio::test]
    async fn a_chunk_whose_holder_stopped_is_taken_over() {
        let bytes = vec![3u8; 2 * CHUNK as usize];
        let cache = RemoteCache::in_memory();
        let ttl = Duration::from_millis(300);
        let b = fill(&cache, &bytes, "node-b", ttl);
        // node-a claims chunk 0 and dies: nothing renews it.
        let key = format!("fills/sha256/{}/{CHUNK}/lease-0.json", bytes_sha(&bytes));
        let won = cache
            .claim(&key, "node-a", ttl, crate::remote_cache::now_ms())
            .await
            .unwrap();
        assert!(matches!(won, Claim::Won(_)));
        assert_eq!(b.assign(0).await, Assigned::Wait);
        tokio::time::timeout(Duration::from_secs(30), b.changed())
            .await
            .expect("the lapse is seen");
        assert_eq!(b.assign(0).await, Assigned::Origin);
        let part = b.settle().await;
        assert_eq!((part.fetched, part.taken_over), (1, 1));
    }

    /// A fill of `bytes` for `node` whose waits are recorded, not waited (virtual time).
    fn virtual_fill(
        cache: &RemoteCache,
        bytes: &[u8],
        node: &str,
    ) -> (BucketFill, Arc<crate::net::RecordingClock>) {
        let clock = Arc::new(crate::net::RecordingClock::new());
        let f = BucketFill::new(
            cache,
            bytes_sha(bytes),
            bytes.len() as u64,
            node,
            FILL_LEASE,
            clock.clone(),
        );
        f.begin(CHUNK);
        (f, clock)
    }

    fn lease_key(bytes: &[u8], index: usize) -> String {
        format!(
            "fills/sha256/{}/{CHUNK}/lease-{index}.json",
            bytes_sha(bytes)
        )
    }

    /// Writes a lease object as a hostile or careless node would, unconditionally.
    async fn plant(cache: &RemoteCache, key: &str, record: &crate::remote_cache::LeaseRecord) {
        cache
            .store
            .put(
                &cache.object(key).unwrap(),
                serde_json::to_vec(record).unwrap().into(),
            )
            .await
            .unwrap();
    }

    /// Asks for chunk `index` until it is not told to wait, waiting for a change in between
    /// (each wait bounded: a wait that never ends fails the test).
    async fn until_assigned(f: &BucketFill, index: usize) -> Assigned {
        for _ in 0..100 {
            match f.assign(index).await {
                Assigned::Wait => {
                    tokio::time::timeout(Duration::from_secs(30), f.changed())
                        .await
                        .expect("a change is seen");
                }
                a => return a,
            }
        }
        panic!("chunk {index} is still waited on after 100 changes");
    }

    /// A lease whose holder says it holds for ever (an expiry of `u64::MAX`, no time to live:
    /// an older node, or a hostile one) and is never rewritten lapses after the fleet's term.
    #[tokio::test]
    async fn a_lease_that_says_it_holds_for_ever_lapses() {
        let bytes = vec![7u8; 2 * CHUNK as usize];
        let cache = RemoteCache::in_memory();
        let record = crate::remote_cache::LeaseRecord {
            holder: "forever".into(),
            expires_ms: u64::MAX,
            ttl_ms: Some(u64::MAX),
            done: None,
        };
        plant(&cache, &lease_key(&bytes, 0), &record).await;
        let (b, clock) = virtual_fill(&cache, &bytes, "node-b");
        assert_eq!(until_assigned(&b, 0).await, Assigned::Origin);
        let part = b.settle().await;
        assert_eq!((part.fetched, part.taken_over), (1, 1));
        // Judged by what this node saw: not rewritten for the longest term a lease may have.
        assert!(
            clock.elapsed() > crate::remote_cache::MAX_LEASE,
            "{:?}",
            clock.elapsed()
        );
        assert!(
            clock.elapsed() < crate::remote_cache::MAX_LEASE + 4 * LAST_POLL,
            "{:?}",
            clock.elapsed()
        );
    }

    /// A lease marked done that names no piece of its chunk, or a piece that is not in the
    /// bucket, is taken over at once: this node fetches the chunk.
    #[tokio::test]
    async fn a_done_mark_is_believed_only_with_its_piece() {
        let bytes = vec![8u8; 3 * CHUNK as usize];
        let cache = RemoteCache::in_memory();
        let sha = bytes_sha(&bytes);
        let gone = format!(
            "fills/sha256/{sha}/{CHUNK}/piece-1-{}.node-a",
            hex::encode([0u8; 32])
        );
        let other_chunk = format!(
            "fills/sha256/{sha}/{CHUNK}/piece-2-{}.node-a",
            hex::encode([0u8; 32])
        );
        for (index, named) in [(0, "blobs/sha256/elsewhere"), (1, &gone), (0, &other_chunk)] {
            let record = crate::remote_cache::LeaseRecord {
                holder: "node-a".into(),
                expires_ms: u64::MAX,
                ttl_ms: None,
                done: Some(named.to_string()),
            };
            plant(&cache, &lease_key(&bytes, index), &record).await;
            let (b, clock) = virtual_fill(&cache, &bytes, "node-b");
            assert_eq!(b.assign(index).await, Assigned::Origin, "{named}");
            assert!(clock.waits().is_empty(), "no wait for {named}");
            let part = b.settle().await;
            assert_eq!((part.fetched, part.taken_over), (1, 1), "{named}");
        }
    }

    /// A holder that renews its lease for ever and never shares the chunk is waited on for the
    /// bound, then this node fetches the chunk from the Hub itself, and says why once.
    #[tokio::test]
    async fn a_chunk_is_waited_on_at_most_the_bound() {
        let bytes = vec![9u8; 2 * CHUNK as usize];
        let cache = RemoteCache::in_memory();
        let key = lease_key(&bytes, 0);
        let mut record = crate::remote_cache::LeaseRecord {
            holder: "node-a".into(),
            expires_ms: u64::MAX,
            ttl_ms: Some(10_000),
            done: None,
        };
        plant(&cache, &key, &record).await;
        let (b, clock) = virtual_fill(&cache, &bytes, "node-b");
        assert_eq!(b.assign(0).await, Assigned::Wait);
        // Rewritten every few seconds (it never lapses), while virtual time passes the bound.
        let bound = FILL_LEASE * WAIT_BOUND_TERMS;
        while clock.elapsed() <= bound {
            record.expires_ms -= 1;
            plant(&cache, &key, &record).await;
            crate::net::RetryClock::sleep(&*clock, Duration::from_secs(3)).await;
        }
        assert_eq!(until_assigned(&b, 0).await, Assigned::Origin);
        let notices = Fill::notices(&b);
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert!(notices[0].contains("chunk 0 waited"), "{}", notices[0]);
        assert!(Fill::notices(&b).is_empty(), "said once");
        let part = b.settle().await;
        assert_eq!((part.fetched, part.waited_out), (0, 1));
    }

    /// The wait between two listings keeps growing across the engine's calls while nothing
    /// lands: a chunk asked again and told to wait again does not start it over.
    #[tokio::test]
    async fn the_backoff_between_listings_is_kept_across_waits() {
        let bytes = vec![4u8; 2 * CHUNK as usize];
        let cache = RemoteCache::in_memory();
        let key = lease_key(&bytes, 0);
        let mut record = crate::remote_cache::LeaseRecord {
            holder: "node-a".into(),
            expires_ms: 1,
            ttl_ms: Some(10_000),
            done: None,
        };
        plant(&cache, &key, &record).await;
        let (b, clock) = virtual_fill(&cache, &bytes, "node-b");
        assert_eq!(b.assign(0).await, Assigned::Wait);
        tokio::time::timeout(Duration::from_secs(30), b.changed())
            .await
            .expect("a lapse is seen");
        let first = clock.waits().len();
        // Renewed just in time: told to wait again.
        record.expires_ms += 1;
        plant(&cache, &key, &record).await;
        assert_eq!(b.assign(0).await, Assigned::Wait);
        tokio::time::timeout(Duration::from_secs(30), b.changed())
            .await
            .expect("a lapse is seen");
        let waits = clock.waits();
        assert_eq!(waits[first], LAST_POLL, "{waits:?}");
    }

    /// A chunk whose bytes on disk no longer match what the engine hashed is not shared, and
    /// its lease is given back for another node to fetch it.
    #[tokio::test]
    async fn a_chunk_changed_on_disk_is_not_shared() {
        let bytes = vec![5u8; CHUNK as usize];
        let cache = RemoteCache::in_memory();
        let a = fill(&cache, &bytes, "node-a", FILL_LEASE);
        assert_eq!(a.assign(0).await, Assigned::Origin);
        a.fetched(0, 0..CHUNK, [9; 32], file_of(&bytes));
        let part = a.settle().await;
        assert_eq!(part.shared, 0);
        assert!(part.trouble.unwrap().contains("changed on disk"));
        let b = fill(&cache, &bytes, "node-b", FILL_LEASE);
        assert_eq!(
            b.assign(0).await,
            Assigned::Origin,
            "the lease was given back"
        );
    }
}
