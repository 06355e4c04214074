//! Coordination through the bucket itself: a lease on a piece of work (filling a blob) held by
//! one node at a time, made of the store's own conditional writes. No daemon, no lock server:
//! what AWS S3, R2, GCS, Azure and MinIO honour (`If-None-Match: *` to create, `If-Match` with
//! the ETag to replace), through object_store's `PutMode::Create` and `PutMode::Update`.
//!
//! - **Claim**: the lease object (`leases/sha256/{sha}.json`) is created only if absent: of the
//!   nodes that try at once, one wins; the others read who holds it and until when.
//! - **Renew**: the holder rewrites it with a later expiry, only if it is still the version it
//!   wrote (`If-Match`): a holder that lost it (it lapsed and another took it over) finds out.
//! - **Take over**: a lease found lapsed is replaced, only if it is still the version read: of
//!   the nodes that find it lapsed at once, one wins.
//! - **Release**: the holder deletes it when the work is done.
//!
//! The expiry is the holder's clock (milliseconds since the epoch) plus the time to live: nodes'
//! clocks must agree to well within the time to live (NTP does). A store that ignores the
//! conditions (Garage 2.5 ignores `If-None-Match`) would let two nodes both believe they won:
//! [`RemoteCache::conditional_writes`] finds that out first, by trying.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};

use super::{RemoteCache, RemoteCacheError};
use crate::manifest::Sha256Hex;
use crate::names::escape;

/// What a lease object holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseRecord {
    /// Who holds it (a node's name: its host name and process, or what the user set).
    pub holder: String,
    /// Until when, in milliseconds since the Unix epoch, by the holder's clock.
    pub expires_ms: u64,
    /// The work is done, and this is what it made (a fill's piece: its object's key): the
    /// lease then never lapses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<String>,
}

/// A lease this node holds.
#[derive(Debug, Clone)]
pub struct Lease {
    key: String,
    version: UpdateVersion,
    record: LeaseRecord,
}

impl Lease {
    /// Who holds it (this node).
    pub fn holder(&self) -> &str {
        &self.record.holder
    }

    /// Until when it holds, in milliseconds since the Unix epoch.
    pub fn expires_ms(&self) -> u64 {
        self.record.expires_ms
    }
}

/// What a claim found.
#[derive(Debug, Clone)]
pub enum Claim {
    /// This node holds the lease now (created, or taken over from a lapsed holder).
    Won(Lease),
    /// Another node holds it, until the time it says.
    Held(LeaseRecord),
}

/// Milliseconds since the Unix epoch, by this node's clock.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl RemoteCache {
    /// The key of the lease on filling the blob with this SHA-256.
    pub fn lease_key(sha256: &Sha256Hex) -> String {
        format!("leases/sha256/{sha256}.json")
    }

    /// Claims the lease at `key` for `holder`, for `ttl`: creates it if there is none, takes it
    /// over if it has lapsed (`now_ms` past its expiry), else says who holds it. Only one of
    /// the nodes that try at once wins, on a store that honours conditional writes.
    pub async fn claim(
        &self,
        key: &str,
        holder: &str,
        ttl: Duration,
        now_ms: u64,
    ) -> Result<Claim, RemoteCacheError> {
        let record = LeaseRecord {
            holder: holder.to_string(),
            expires_ms: now_ms.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)),
            done: None,
        };
        if let Some(version) = self.put_lease(key, &record, PutMode::Create).await? {
            return Ok(Claim::Won(self.lease(key, version, record)));
        }
        // Someone holds it (or held it): who, until when, and which version that is.
        let Some((current, version)) = self.read_lease(key).await? else {
            // Released between the two requests: try again once, as a new claim.
            return match self.put_lease(key, &record, PutMode::Create).await? {
                Some(version) => Ok(Claim::Won(self.lease(key, version, record))),
                None => Ok(Claim::Held(self.read_lease(key).await?.map_or(
                    LeaseRecord {
                        holder: "another node".into(),
                        expires_ms: record.expires_ms,
                        done: None,
                    },
                    |(r, _)| r,
                ))),
            };
        };
        if current.expires_ms > now_ms || current.done.is_some() {
            return Ok(Claim::Held(current));
        }
        // Lapsed: replaced only if it is still the version read.
        match self
            .put_lease(key, &record, PutMode::Update(version))
            .await?
        {
            Some(version) => Ok(Claim::Won(self.lease(key, version, record))),
            None => Ok(Claim::Held(
                self.read_lease(key).await?.map_or(current, |(r, _)| r),
            )),
        }
    }

    /// Extends `lease` to `now_ms + ttl`, only if the object is still the version this node
    /// wrote. `Ok(false)`: the lease was lost (it lapsed and another node took it over).
    pub async fn renew(
        &self,
        lease: &mut Lease,
        ttl: Duration,
        now_ms: u64,
    ) -> Result<bool, RemoteCacheError> {
        let record = LeaseRecord {
            holder: lease.record.holder.clone(),
            expires_ms: now_ms.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)),
            done: None,
        };
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
    /// lapse, so that a node claiming it later learns at once where the result is. `Ok(false)`:
    /// the lease was lost before (another node took it over).
    pub async fn finish(&self, lease: Lease, done: &str) -> Result<bool, RemoteCacheError> {
        let record = LeaseRecord {
            holder: lease.record.holder.clone(),
            expires_ms: u64::MAX,
            done: Some(done.to_string()),
        };
        let mode = PutMode::Update(lease.version.clone());
        Ok(self.put_lease(&lease.key, &record, mode).await?.is_some())
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
    /// at all.
    pub async fn conditional_writes(&self, probe_name: &str) -> Result<bool, RemoteCacheError> {
        let key = format!("leases/probe/{probe_name}.json");
        let record = LeaseRecord {
            holder: probe_name.to_string(),
            expires_ms: 0,
            done: None,
        };
        let honoured = async {
            let Some(first) = self.put_lease(&key, &record, PutMode::Create).await? else {
                // A probe of this name already there: the store refused, as it should; the
                // replace below decides.
                return self.stale_update_refused(&key, &record).await;
            };
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

    /// The lease at `key` and its version, or `None` when there is none (read bounded, as
    /// every small object of the store).
    async fn read_lease(
        &self,
        key: &str,
    ) -> Result<Option<(LeaseRecord, UpdateVersion)>, RemoteCacheError> {
        let Some((bytes, version)) = self.read_small_versioned(key).await? else {
            return Ok(None);
        };
        let record: LeaseRecord = serde_json::from_slice(&bytes)
            .map_err(|e| self.invalid(format!("{}: not a lease ({e})", escape(key))))?;
        Ok(Some((record, version)))
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
                match cache.renew(&mut lease, ttl, now).await {
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
        }
    }

    const TTL: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn of_nodes_claiming_at_once_one_wins_and_the_others_see_it() {
        let cache = honouring();
        let key = "leases/sha256/x.json";
        let names: Vec<String> = (0..8).map(|n| format!("node-{n}")).collect();
        let claims =
            futures::future::join_all(names.iter().map(|n| cache.claim(key, n, TTL, 1_000))).await;
        let winners: Vec<&Lease> = claims
            .iter()
            .filter_map(|c| match c.as_ref().unwrap() {
                Claim::Won(l) => Some(l),
                Claim::Held(_) => None,
            })
            .collect();
        assert_eq!(winners.len(), 1, "{claims:?}");
        for c in &claims {
            if let Claim::Held(r) = c.as_ref().unwrap() {
                assert_eq!(r.holder, winners[0].holder());
                assert_eq!(r.expires_ms, 11_000);
            }
        }
    }

    #[tokio::test]
    async fn a_lapsed_lease_is_taken_over_once_and_its_old_holder_finds_out() {
        let cache = honouring();
        let key = "leases/sha256/y.json";
        let Claim::Won(mut first) = cache.claim(key, "node-1", TTL, 0).await.unwrap() else {
            panic!("the first claim wins");
        };
        // Held, then renewed by its holder.
        assert!(matches!(
            cache.claim(key, "node-2", TTL, 5_000).await.unwrap(),
            Claim::Held(r) if r.holder == "node-1"
        ));
        assert!(cache.renew(&mut first, TTL, 9_000).await.unwrap());
        assert_eq!(first.expires_ms(), 19_000);
        assert!(matches!(
            cache.claim(key, "node-2", TTL, 15_000).await.unwrap(),
            Claim::Held(_)
        ));
        // Lapsed: of two nodes taking it over at once, one wins.
        let (a, b) = futures::join!(
            cache.claim(key, "node-2", TTL, 20_000),
            cache.claim(key, "node-3", TTL, 20_000)
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
        assert!(!cache.renew(&mut first, TTL, 21_000).await.unwrap());
        // Released, the next claim wins at once.
        cache
            .release(won.into_iter().next().unwrap())
            .await
            .unwrap();
        assert!(matches!(
            cache.claim(key, "node-4", TTL, 21_000).await.unwrap(),
            Claim::Won(_)
        ));
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
