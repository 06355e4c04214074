//! Coordination through the bucket itself: a lease on a piece of work (filling a blob) held by
//! one node at a time, made of the store's own conditional writes. No daemon, no lock server:
//! what AWS S3, R2, GCS, Azure and MinIO honour (`If-None-Match: *` to create, `If-Match` with
//! the ETag to replace), through object_store's `PutMode::Create` and `PutMode::Update`.
//!
//! - **Claim**: the lease object (`leases/sha256/{sha}.json`) is created only if absent: of the
//!   nodes that try at once, one wins; the others read who holds it and for how long.
//! - **Renew**: the holder rewrites it, only if it is still the version it wrote (`If-Match`):
//!   a holder that lost it (it lapsed and another took it over) finds out.
//! - **Take over**: a lease found lapsed is replaced, only if it is still the version read: of
//!   the nodes that find it lapsed at once, one wins.
//! - **Release**: the holder deletes it when the work is done.
//!
//! **Time is the bucket's.** A lease lapses once the store has not seen it rewritten for its
//! term: the object's `Last-Modified` (the store's clock) against the store's now, which a node
//! learns once from an object it writes itself ([`RemoteCache::conditional_writes`]); a peer's
//! clock, which may run an hour ahead, decides nothing. The term is the time to live its holder
//! asked for, never less than this node's own nor more than [`MAX_LEASE`] (a record asking for
//! longer, or saying nothing, is judged by those bounds), so a lease that is no longer renewed
//! lapses within a bounded time whatever it says. A store that ignores the conditions (Garage
//! 2.5 ignores `If-None-Match`) would let two nodes both believe they won:
//! [`RemoteCache::conditional_writes`] finds that out first, by trying.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};

use super::{RemoteCache, RemoteCacheError};
use crate::manifest::Sha256Hex;
use crate::names::escape;

/// The longest time to live a lease may have: a node asks for at most this (a fetch asking for
/// a longer one is refused), and another node's lease is never judged to hold longer than this
/// since the store last saw it written.
pub const MAX_LEASE: Duration = Duration::from_secs(120);

/// How far a lease's age by the store's clock may be off: `Last-Modified` is kept to the
/// second by S3, and a node learns the store's clock from one.
const CLOCK_SLACK: Duration = Duration::from_secs(1);

/// What a lease object holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// Who holds it (a node's name: its host name and process, or what the user set).
    pub holder: String,
    /// Until when, in milliseconds since the Unix epoch, by the holder's clock: what it meant
    /// to hold it for, for people reading the bucket. Other nodes judge a lease by the store's
    /// clock and its term ([`LeaseRecord::term`]), never by this.
    pub expires_ms: u64,
    /// The time to live its holder asked for, in milliseconds (absent in the leases of older
    /// nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// The work is done, and this is what it made (a fill's piece: its object's key): the
    /// lease then never lapses while what it names is there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<String>,
}

impl LeaseRecord {
    /// The term this lease is judged by, by a node whose own time to live is `own`: the time to
    /// live it records, at least `own` (a holder that asked for less is given the fleet's) and
    /// at most [`MAX_LEASE`]; `own` when it records none.
    pub fn term(&self, own: Duration) -> Duration {
        let asked = self.ttl_ms.map_or(own, Duration::from_millis);
        asked.max(own).min(MAX_LEASE.max(own))
    }
}

/// A lease this node holds.
#[derive(Debug, Clone)]
pub struct Lease {
    key: String,
    version: UpdateVersion,
    record: LeaseRecord,
    taken_over: bool,
}

impl Lease {
    /// Whether this node took it over from another holder (rather than creating it).
    pub fn taken_over(&self) -> bool {
        self.taken_over
    }

    /// Who holds it (this node).
    pub fn holder(&self) -> &str {
        &self.record.holder
    }

    /// Until when it holds, in milliseconds since the Unix epoch, by this node's clock.
    pub fn expires_ms(&self) -> u64 {
        self.record.expires_ms
    }
}

/// A lease another node holds, as read.
#[derive(Debug, Clone)]
pub struct Held {
    /// What it says.
    pub record: LeaseRecord,
    /// How long ago the store last saw it written, by the store's clock (`None` when this node
    /// does not know that clock).
    pub age: Option<Duration>,
    version: UpdateVersion,
}

impl Held {
    /// The version read (its ETag), to tell it from a later one.
    pub fn e_tag(&self) -> Option<String> {
        self.version.e_tag.clone()
    }
}

/// What a claim found.
#[derive(Debug, Clone)]
pub enum Claim {
    /// This node holds the lease now (created, or taken over from a lapsed holder).
    Won(Lease),
    /// Another node holds it.
    Held(Held),
}

/// Milliseconds since the Unix epoch, by this node's clock.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The store's clock as this node knows it: how far it is ahead of this node's (learnt once,
/// from an object this node wrote).
#[derive(Debug, Default)]
pub(super) struct BucketClock {
    known: AtomicBool,
    ahead_ms: AtomicI64,
}

impl BucketClock {
    /// The store's now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64 {
        let ahead = self.ahead_ms.load(Ordering::Relaxed);
        now_ms().saturating_add_signed(ahead)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Milliseconds since the Unix epoch of a time the store gave.
fn ms_of(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, millis)
}

impl RemoteCache {
    /// The key of the lease on filling the blob with this SHA-256.
    pub fn lease_key(sha256: &Sha256Hex) -> String {
        format!("leases/sha256/{sha256}.json")
    }

    /// Now, by the store's clock as far as this node knows it (this node's clock until
    /// [`conditional_writes`](Self::conditional_writes) has learnt the store's), in milliseconds
    /// since the Unix epoch: what [`claim`](Self::claim) is given.
    pub fn bucket_now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Whether this node knows the store's clock.
    pub fn knows_bucket_clock(&self) -> bool {
        self.clock.known.load(Ordering::Relaxed)
    }

    /// The record this node writes for `holder` and `ttl`.
    fn record(holder: &str, ttl: Duration) -> LeaseRecord {
        LeaseRecord {
            holder: holder.to_string(),
            expires_ms: now_ms().saturating_add(millis(ttl)),
            ttl_ms: Some(millis(ttl)),
            done: None,
        }
    }

    /// Claims the lease at `key` for `holder`, for `ttl` (at most [`MAX_LEASE`]): creates it if
    /// there is none, takes it over if it has lapsed (the store has not seen it written for its
    /// [term](LeaseRecord::term), judged at `now_ms` by the store's clock: see
    /// [`bucket_now_ms`](Self::bucket_now_ms)), else says who holds it. Only one of the nodes
    /// that try at once wins, on a store that honours conditional writes. A lease marked done
    /// is never taken over here (its result is there; [`take_over`](Self::take_over) replaces
    /// one whose result is not).
    pub async fn claim(
        &self,
        key: &str,
        holder: &str,
        ttl: Duration,
        now_ms: u64,
    ) -> Result<Claim, RemoteCacheError> {
        let ttl = ttl.min(MAX_LEASE);
        let record = Self::record(holder, ttl);
        if let Some(version) = self.put_lease(key, &record, PutMode::Create).await? {
            return Ok(Claim::Won(self.lease(key, version, record)));
        }
        // Someone holds it (or held it): who, since when, and which version that is.
        let Some(held) = self.read_lease(key, now_ms).await? else {
            // Released between the two requests: try again once, as a new claim.
            return match self.put_lease(key, &record, PutMode::Create).await? {
                Some(version) => Ok(Claim::Won(self.lease(key, version, record))),
                None => match self.read_lease(key, now_ms).await? {
                    Some(held) => Ok(Claim::Held(held)),
                    // Created and released again under our feet: a busy key; held, as far as
                    // this node knows, for one term from now.
                    None => Ok(Claim::Held(Held {
                        record: LeaseRecord {
                            holder: "another node".into(),
                            ..record
                        },
                        age: Some(Duration::ZERO),
                        version: UpdateVersion {
                            e_tag: None,
                            version: None,
                        },
                    })),
                },
            };
        };
        let lapsed = held.record.done.is_none()
            && held
                .age
                .is_some_and(|age| age > held.record.term(ttl) + CLOCK_SLACK);
        if !lapsed {
            return Ok(Claim::Held(held));
        }
        self.take_over(key, &held, holder, ttl, now_ms).await
    }

    /// Replaces the lease `held` (read from `key`) with one for `holder`, only if it is still
    /// that version: the caller judged it lapsed, or found that the result it names is not
    /// there. Of the nodes that try at once, one wins; the others see who did.
    pub async fn take_over(
        &self,
        key: &str,
        held: &Held,
        holder: &str,
        ttl: Duration,
        now_ms: u64,
    ) -> Result<Claim, RemoteCacheError> {
        let record = Self::record(holder, ttl.min(MAX_LEASE));
        let mode = PutMode::Update(held.version.clone());
        match self.put_lease(key, &record, mode).await? {
            Some(version) => {
                let mut lease = self.lease(key, version, record);
                lease.taken_over = true;
                Ok(Claim::Won(lease))
            }
            None => Ok(Claim::Held(
                self.read_lease(key, now_ms)
                    .await?
                    .unwrap_or_else(|| held.clone()),
            )),
        }
    }

    /// Extends `lease` for `ttl`, only if the object is still the version this node wrote.
    /// `Ok(false)`: the lease was lost (it lapsed and another node took it over).
    pub async fn renew(&self, lease: &mut Lease, ttl: Duration) -> Result<bool, RemoteCacheError> {
        let record = Self::record(&lease.record.holder, ttl.min(MAX_LEASE));
        let mode = PutMode::Update(lease.version.clone());
        match self.put_lease(&lease.key, &record, mode).await? {
            Some(version) => {
                lease.version = version;
                lease.record = record;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Marks the work of `lease` done, naming what it made (`done`): the lease stays, never to
    /// lapse while what it names is there, so that a node claiming it later learns at once
    /// where the result is. `Ok(false)`: the lease was lost before (another node took it over).
    pub async fn finish(&self, lease: Lease, done: &str) -> Result<bool, RemoteCacheError> {
        let record = LeaseRecord {
            done: Some(done.to_string()),
            expires_ms: u64::MAX,
            ..lease.record.clone()
        };
        let mode = PutMode::Update(lease.version.clone());
        Ok(self.put_lease(&lease.key, &record, mode).await?.is_some())
    }

    /// Whether the object at `key` is in the store.
    pub(super) async fn exists(&self, key: &str) -> Result<bool, RemoteCacheError> {
        match self.store.head(&self.object(key)?).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.fail("look up", key, e)),
        }
    }

    /// Gives the lease up (its work done, or abandoned): the object deleted, so the next claim
    /// creates it at once.
    pub async fn release(&self, lease: Lease) -> Result<(), RemoteCacheError> {
        match self.store.delete(&self.object(&lease.key)?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.fail("delete", &lease.key, e)),
        }
    }

    /// Whether the store honours conditional writes, found out by trying: a probe object
    /// created twice with `If-None-Match: *` (the second must be refused) and replaced with a
    /// stale `If-Match` (refused too), then deleted. `false` on a store that ignores either
    /// (nodes then cannot coordinate through it: each fetches what it lacks) or cannot do them
    /// at all. The probe's `Last-Modified` also tells this node the store's clock (see the
    /// module docs).
    pub async fn conditional_writes(&self, probe_name: &str) -> Result<bool, RemoteCacheError> {
        let key = format!("leases/probe/{probe_name}.json");
        let record = LeaseRecord {
            holder: probe_name.to_string(),
            expires_ms: 0,
            ttl_ms: None,
            done: None,
        };
        let honoured = async {
            let before = now_ms();
            let Some(first) = self.put_lease(&key, &record, PutMode::Create).await? else {
                // A probe of this name already there: the store refused, as it should; the
                // replace below decides.
                return self.stale_update_refused(&key, &record).await;
            };
            self.learn_clock(&key, before).await;
            if self
                .put_lease(&key, &record, PutMode::Create)
                .await?
                .is_some()
            {
                return Ok(false);
            }
            // Replaced with the version it has, it is accepted; with another, refused.
            Ok(self
                .put_lease(&key, &record, PutMode::Update(first))
                .await?
                .is_some()
                && self.stale_update_refused(&key, &record).await?)
        }
        .await;
        if let Ok(path) = self.object(&key) {
            let _ = self.store.delete(&path).await;
        }
        match honoured {
            Err(RemoteCacheError::Store { source, .. })
                if matches!(
                    *source,
                    object_store::Error::NotImplemented { .. }
                        | object_store::Error::NotSupported { .. }
                ) =>
            {
                Ok(false)
            }
            other => other,
        }
    }

    /// Whether replacing `key` with a version it does not have is refused.
    async fn stale_update_refused(
        &self,
        key: &str,
        record: &LeaseRecord,
    ) -> Result<bool, RemoteCacheError> {
        let stale = UpdateVersion {
            e_tag: Some("\"0000000000000000000000000000000a\"".into()),
            version: None,
        };
        Ok(self
            .put_lease(key, record, PutMode::Update(stale))
            .await?
            .is_none())
    }

    fn lease(&self, key: &str, version: UpdateVersion, record: LeaseRecord) -> Lease {
        Lease {
            key: key.to_string(),
            version,
            record,
            taken_over: false,
        }
    }

    /// Writes `record` at `key` under `mode`: the new version, or `None` when the store refused
    /// the condition (the object exists, or is not the version given).
    async fn put_lease(
        &self,
        key: &str,
        record: &LeaseRecord,
        mode: PutMode,
    ) -> Result<Option<UpdateVersion>, RemoteCacheError> {
        let body = serde_json::to_vec(record)
            .map_err(|e| self.invalid(format!("cannot write the lease {}: {e}", escape(key))))?;
        let opts = PutOptions {
            mode,
            ..PutOptions::default()
        };
        match self
            .store
            .put_opts(&self.object(key)?, PutPayload::from(body), opts)
            .await
        {
            Ok(r) => Ok(Some(r.into())),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => Ok(None),
            Err(e) => Err(self.fail("write", key, e)),
        }
    }

    /// The lease at `key`, its version and age at `now_ms` by the store's clock, or `None` when
    /// there is none (read bounded, as every small object of the store).
    async fn read_lease(&self, key: &str, now_ms: u64) -> Result<Option<Held>, RemoteCacheError> {
        let Some((bytes, meta)) = self.read_bounded_meta(key, super::MAX_ENTRY_BYTES).await? else {
            return Ok(None);
        };
        let record: LeaseRecord = serde_json::from_slice(&bytes)
            .map_err(|e| self.invalid(format!("{}: not a lease ({e})", escape(key))))?;
        let age = self.knows_bucket_clock().then(|| {
            Duration::from_millis(now_ms.saturating_sub(ms_of(meta.last_modified.into())))
        });
        Ok(Some(Held {
            record,
            age,
            version: UpdateVersion {
                e_tag: meta.e_tag,
                version: meta.version,
            },
        }))
    }

    /// Learns the store's clock from the object at `key`, which this node has just written
    /// (asked at `before`, by this node's clock): its `Last-Modified` is the store's time of the
    /// write, taken as the middle of the request.
    async fn learn_clock(&self, key: &str, before: u64) {
        let Ok(path) = self.object(key) else { return };
        let Ok(meta) = self.store.head(&path).await else {
            return;
        };
        let mid = before + now_ms().saturating_sub(before) / 2;
        let written = i64::try_from(ms_of(meta.last_modified.into())).unwrap_or(i64::MAX);
        let ahead = written.saturating_sub(i64::try_from(mid).unwrap_or(i64::MAX));
        self.clock.ahead_ms.store(ahead, Ordering::Relaxed);
        self.clock.known.store(true, Ordering::Relaxed);
    }

    /// How long ago, by the store's clock, the objects listed were last written (`None` when
    /// this node does not know the store's clock).
    pub(super) fn age_of(&self, meta: &object_store::ObjectMeta) -> Option<Duration> {
        self.knows_bucket_clock().then(|| {
            Duration::from_millis(
                self.bucket_now_ms()
                    .saturating_sub(ms_of(meta.last_modified.into())),
            )
        })
    }
}

/// A lease kept renewed while its work goes on ([`RemoteCache::keep`]).
#[derive(Debug)]
pub struct LeaseKeeper {
    lost: tokio_util::sync::CancellationToken,
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<Option<Lease>>,
}

impl LeaseKeeper {
    /// Cancelled when the lease is lost: another node took it over (it lapsed), or it could
    /// not be renewed before it lapsed. The work it covered is another node's from then on.
    pub fn lost(&self) -> tokio_util::sync::CancellationToken {
        self.lost.clone()
    }

    /// Stops renewing; the lease, when it is still held (to [`release`](RemoteCache::release)
    /// once the work is done).
    pub async fn stop(self) -> Option<Lease> {
        self.stop.cancel();
        self.task.await.ok().flatten()
    }
}

impl RemoteCache {
    /// Keeps `lease` renewed for `ttl` every third of it, waiting on `clock`, until
    /// [`LeaseKeeper::stop`]; a renewal refused (the lease lost) or failing until the lease
    /// lapsed cancels [`LeaseKeeper::lost`]. Needs a tokio runtime.
    pub fn keep(&self, lease: Lease, ttl: Duration, clock: crate::net::SharedClock) -> LeaseKeeper {
        let ttl = ttl.min(MAX_LEASE);
        let (lost, stop) = (
            tokio_util::sync::CancellationToken::new(),
            tokio_util::sync::CancellationToken::new(),
        );
        let (cache, lost2, stop2) = (self.clone(), lost.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let mut lease = lease;
            loop {
                tokio::select! {
                    biased;
                    () = stop2.cancelled() => return Some(lease),
                    () = clock.sleep(ttl / 3) => {}
                }
                let now = now_ms();
                match cache.renew(&mut lease, ttl).await {
                    Ok(true) => {}
                    // Lost, or not renewed in time: the work is no longer this node's.
                    Ok(false) => break,
                    Err(_) if now >= lease.expires_ms() => break,
                    // A passing failure: tried again at the next third.
                    Err(_) => {}
                }
                tokio::task::yield_now().await;
            }
            lost2.cancel();
            None
        });
        LeaseKeeper { lost, stop, task }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use object_store::path::Path as ObjectPath;

    use super::*;

    /// A store that honours conditional writes (object_store's in-memory one).
    fn honouring() -> RemoteCache {
        RemoteCache {
            store: Arc::new(object_store::memory::InMemory::new()),
            url: "memory://test".into(),
            local_root: None,
            clock: Arc::default(),
        }
    }

    /// [`honouring`], knowing the store's clock (as every node does once it has probed it).
    async fn probed() -> RemoteCache {
        let cache = honouring();
        assert!(cache.conditional_writes("probe").await.unwrap());
        assert!(cache.knows_bucket_clock());
        cache
    }

    /// Writes `record` at `key` as a hostile or careless node would, unconditionally.
    async fn plant(cache: &RemoteCache, key: &str, record: &LeaseRecord) {
        cache
            .store
            .put(
                &ObjectPath::from(key),
                PutPayload::from(serde_json::to_vec(record).unwrap()),
            )
            .await
            .unwrap();
    }

    const SEC: u64 = 1_000;

    const TTL: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn of_nodes_claiming_at_once_one_wins_and_the_others_see_it() {
        let cache = probed().await;
        let key = "leases/sha256/x.json";
        let names: Vec<String> = (0..8).map(|n| format!("node-{n}")).collect();
        let now = cache.bucket_now_ms();
        let claims =
            futures::future::join_all(names.iter().map(|n| cache.claim(key, n, TTL, now))).await;
        let winners: Vec<&Lease> = claims
            .iter()
            .filter_map(|c| match c.as_ref().unwrap() {
                Claim::Won(l) => Some(l),
                Claim::Held(_) => None,
            })
            .collect();
        assert_eq!(winners.len(), 1, "{claims:?}");
        for c in &claims {
            if let Claim::Held(h) = c.as_ref().unwrap() {
                assert_eq!(h.record.holder, winners[0].holder());
                assert_eq!(h.record.ttl_ms, Some(10_000));
            }
        }
    }

    #[tokio::test]
    async fn a_lapsed_lease_is_taken_over_once_and_its_old_holder_finds_out() {
        let cache = probed().await;
        let key = "leases/sha256/y.json";
        let t = cache.bucket_now_ms();
        let Claim::Won(mut first) = cache.claim(key, "node-1", TTL, t).await.unwrap() else {
            panic!("the first claim wins");
        };
        // Held within its term, and after its holder renews it.
        assert!(matches!(
            cache.claim(key, "node-2", TTL, t + 5 * SEC).await.unwrap(),
            Claim::Held(h) if h.record.holder == "node-1"
        ));
        assert!(cache.renew(&mut first, TTL).await.unwrap());
        assert!(matches!(
            cache.claim(key, "node-2", TTL, t + 10 * SEC).await.unwrap(),
            Claim::Held(_)
        ));
        // Of two nodes taking it over at once from the version they read, one wins.
        let later = t + 12 * SEC;
        let Claim::Held(read) = cache.claim(key, "node-9", TTL, t + 10 * SEC).await.unwrap() else {
            panic!("held");
        };
        let (a, b) = futures::join!(
            cache.take_over(key, &read, "node-2", TTL, later),
            cache.take_over(key, &read, "node-3", TTL, later)
        );
        let won: Vec<Lease> = [a.unwrap(), b.unwrap()]
            .into_iter()
            .filter_map(|c| match c {
                Claim::Won(l) => Some(l),
                Claim::Held(_) => None,
            })
            .collect();
        assert_eq!(won.len(), 1);
        // The old holder's renewal is refused: it lost the lease.
        assert!(!cache.renew(&mut first, TTL).await.unwrap());
        // Released, the next claim wins at once.
        cache
            .release(won.into_iter().next().unwrap())
            .await
            .unwrap();
        assert!(matches!(
            cache.claim(key, "node-4", TTL, later).await.unwrap(),
            Claim::Won(l) if !l.taken_over()
        ));
        // Not written for longer than its term by the store's clock: a claim takes it over.
        let key = "leases/sha256/y2.json";
        assert!(matches!(
            cache.claim(key, "node-1", TTL, t).await.unwrap(),
            Claim::Won(_)
        ));
        assert!(matches!(
            cache.claim(key, "node-2", TTL, later).await.unwrap(),
            Claim::Won(l) if l.taken_over()
        ));
    }

    /// A lease whose holder's clock says it holds for ever (or an hour more), or that asks for a
    /// term of ages, lapses by the store's clock: its term is at most the longest a node may ask
    /// for, and the fleet's own when it says none.
    #[tokio::test]
    async fn a_lease_is_judged_by_the_stores_clock_and_its_term_is_bounded() {
        let cache = probed().await;
        let cases = [
            // A far-future expiry, no time to live: the fleet's own term.
            (
                LeaseRecord {
                    holder: "forever".into(),
                    expires_ms: u64::MAX,
                    ttl_ms: None,
                    done: None,
                },
                TTL,
            ),
            // A holder whose clock runs an hour ahead, then dies: its own term, by the store.
            (
                LeaseRecord {
                    holder: "ahead".into(),
                    expires_ms: now_ms() + 3_600 * SEC + 10 * SEC,
                    ttl_ms: Some(10 * SEC),
                    done: None,
                },
                TTL,
            ),
            // A time to live of ages: at most MAX_LEASE.
            (
                LeaseRecord {
                    holder: "greedy".into(),
                    expires_ms: u64::MAX,
                    ttl_ms: Some(u64::MAX),
                    done: None,
                },
                MAX_LEASE,
            ),
        ];
        for (n, (record, term)) in cases.into_iter().enumerate() {
            let key = format!("leases/sha256/hostile-{n}.json");
            plant(&cache, &key, &record).await;
            let t = cache.bucket_now_ms();
            let term_ms = millis(term);
            assert!(
                matches!(
                    cache.claim(&key, "node-1", TTL, t + term_ms - SEC).await.unwrap(),
                    Claim::Held(h) if h.record.holder == record.holder
                ),
                "{} holds within its term",
                record.holder
            );
            assert!(
                matches!(
                    cache
                        .claim(&key, "node-1", TTL, t + term_ms + 2 * SEC)
                        .await
                        .unwrap(),
                    Claim::Won(_)
                ),
                "{} lapses after its term",
                record.holder
            );
        }
    }

    /// Without the store's clock (never probed), a claim never takes a lease over on what the
    /// lease says: the fill judges it by watching it (see `fill`).
    #[tokio::test]
    async fn without_the_stores_clock_a_claim_takes_nothing_over() {
        let cache = honouring();
        let key = "leases/sha256/u.json";
        let record = LeaseRecord {
            holder: "node-0".into(),
            expires_ms: 0,
            ttl_ms: Some(1),
            done: None,
        };
        plant(&cache, key, &record).await;
        match cache.claim(key, "node-1", TTL, u64::MAX).await.unwrap() {
            Claim::Held(h) => assert_eq!(h.age, None),
            Claim::Won(_) => panic!("taken over on the lease's own word"),
        }
        // Taken over when the caller decides, only from the version read.
        let Claim::Held(h) = cache.claim(key, "node-1", TTL, 0).await.unwrap() else {
            panic!("held");
        };
        plant(&cache, key, &record).await;
        assert!(matches!(
            cache.take_over(key, &h, "node-1", TTL, 0).await.unwrap(),
            Claim::Held(_)
        ));
        let Claim::Held(h) = cache.claim(key, "node-1", TTL, 0).await.unwrap() else {
            panic!("held");
        };
        assert!(matches!(
            cache.take_over(key, &h, "node-1", TTL, 0).await.unwrap(),
            Claim::Won(l) if l.holder() == "node-1"
        ));
    }

    /// The probe tells a node the store's clock, from the object it wrote.
    #[tokio::test]
    async fn the_probe_learns_the_stores_clock() {
        let cache = honouring();
        assert!(!cache.knows_bucket_clock());
        cache.conditional_writes("p").await.unwrap();
        assert!(cache.knows_bucket_clock());
        // The in-memory store's clock is this machine's.
        let off = i128::from(cache.bucket_now_ms()) - i128::from(now_ms());
        assert!(off.abs() < 1_000, "{off} ms");
    }

    #[tokio::test]
    async fn the_probe_tells_a_store_that_honours_conditional_writes_from_one_that_does_not() {
        assert!(honouring().conditional_writes("node-1").await.unwrap());
        // A folder: creating only if absent works, replacing only a given version does not.
        let dir = tempfile::tempdir().unwrap();
        let url = url::Url::from_directory_path(dir.path()).unwrap();
        let folder = RemoteCache::open(url.as_str()).unwrap();
        assert!(!folder.conditional_writes("node-1").await.unwrap());
        // The probe leaves nothing behind.
        let left: Vec<_> = walk(dir.path());
        assert!(left.is_empty(), "{left:?}");
    }

    #[tokio::test]
    async fn a_lease_object_that_is_not_a_lease_is_refused_naming_it() {
        let cache = honouring();
        let key = "leases/sha256/z.json";
        cache
            .store
            .put(
                &ObjectPath::from(key),
                PutPayload::from_static(b"{\"holder\": 3}"),
            )
            .await
            .unwrap();
        let e = cache.claim(key, "node-1", TTL, 0).await.unwrap_err();
        assert!(e.to_string().contains(key), "{e}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_kept_lease_is_renewed_and_its_loss_is_said() {
        let cache = honouring();
        let key = "leases/sha256/k.json";
        let Claim::Won(lease) = cache.claim(key, "node-1", TTL, now_ms()).await.unwrap() else {
            panic!("the first claim wins");
        };
        // Waits recorded, not waited: the keeper renews as fast as the store answers.
        let clock = std::sync::Arc::new(crate::net::RecordingClock::new());
        let keeper = cache.keep(lease, TTL, clock.clone());
        let renewed = async {
            while clock.waits().len() < 3 {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), renewed)
            .await
            .expect("three renewals");
        assert!(!keeper.lost().is_cancelled());
        // Another node writes over it (a takeover): the next renewal is refused, the loss said.
        let other = LeaseRecord {
            holder: "node-2".into(),
            expires_ms: u64::MAX,
            ttl_ms: None,
            done: None,
        };
        cache
            .store
            .put(
                &ObjectPath::from(key),
                PutPayload::from(serde_json::to_vec(&other).unwrap()),
            )
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(30), keeper.lost().cancelled())
            .await
            .expect("the loss is said");
        assert!(keeper.stop().await.is_none());
    }

    #[tokio::test]
    async fn a_stopped_keeper_hands_the_lease_back_to_release() {
        let cache = honouring();
        let key = "leases/sha256/s.json";
        let Claim::Won(lease) = cache.claim(key, "node-1", TTL, now_ms()).await.unwrap() else {
            panic!("the first claim wins");
        };
        let keeper = cache.keep(lease, TTL, crate::net::SystemClock::shared());
        let lease = keeper.stop().await.expect("still held");
        cache.release(lease).await.unwrap();
        assert!(matches!(
            cache.claim(key, "node-2", TTL, now_ms()).await.unwrap(),
            Claim::Won(_)
        ));
    }

    fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            if e.path().is_dir() {
                out.extend(walk(&e.path()));
            } else {
                out.push(e.path());
            }
        }
        out
    }
}
