//! A bound on how much tensor data a process keeps resident: [`Residency`].
//!
//! # What the kernel already does, and what this adds
//!
//! A memory-mapped model is read through the page cache: touching a tensor's bytes faults its
//! pages in (read from storage unless already cached) and maps them into the process, where
//! they count in its resident set (`RssFile`) and in its cgroup's memory (the page cache is
//! charged to the cgroup that read it). The kernel reclaims such clean file pages under memory
//! pressure, so a model larger than memory can be read without the OOM killer, but it decides
//! alone which pages go and when: the process's resident set grows to whatever the machine
//! lets it, another process's memory is pushed out first, and near a cgroup's `memory.max` the
//! reader stalls in reclaim (or, with anonymous memory beside it, is killed).
//!
//! A [`Residency`] keeps the process's share bounded and predictable: each tensor read through
//! it is recorded in least-recently-used order, and once the bytes recorded pass the limit, the
//! least recently used tensors that no view holds are released at once: their pages leave the
//! process (`madvise(MADV_DONTNEED)`) and, where no other process maps them, the page cache
//! (`posix_fadvise(POSIX_FADV_DONTNEED)`). Views of released bytes stay valid (the file is
//! unchanged; reading them faults them back in) so a release is never a correctness question,
//! only a cost.
//!
//! The kernel maps the page cache's large folios whole on a fault (Linux 6.18 maps up to 2 MiB
//! around the page asked for, pages of the neighbouring tensors included), so a release also
//! takes the pages within 2 MiB of the tensor that no recorded tensor holds, and a model read
//! through a limit is mapped in small pages (`MADV_NOHUGEPAGE`): a 2 MiB mapping cannot be
//! released in part. While a tensor is read, the process may thus hold up to a folio beyond
//! each of its ends: the limit plus about 4 MiB is the bound, measured in `tests/residency.rs`
//! and `benches/residency.py`.
//!
//! What it does not bound: bytes read without it (another view of the same file, the header
//! pages), pages another process keeps in the page cache, and a tensor held while larger than
//! the limit on its own (it stays until its last view goes). Bytes are counted in whole pages.

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::mmap::Mmap;

/// One tensor's pages in one map.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    map: u64,
    start: usize,
    end: usize,
}

#[derive(Debug)]
struct Entry {
    map: Weak<Mmap>,
    bytes: u64,
}

#[derive(Debug)]
struct State {
    /// Tensors no view holds, least recently used first.
    idle: lru::LruCache<Key, Entry>,
    /// Tensors held, with how many holds.
    held: HashMap<Key, (Entry, u64)>,
    /// The bytes of both.
    resident: u64,
    /// The pages of every tensor recorded (held or not), by map: (start, end), with the
    /// longest span, to find those near a range.
    spans: HashMap<u64, (BTreeSet<(usize, usize)>, usize)>,
}

impl State {
    fn record(&mut self, key: Key) {
        let (set, longest) = self.spans.entry(key.map).or_default();
        set.insert((key.start, key.end));
        *longest = (*longest).max(key.end - key.start);
    }

    fn forget(&mut self, key: Key) {
        if let Some((set, _)) = self.spans.get_mut(&key.map) {
            set.remove(&(key.start, key.end));
            if set.is_empty() {
                self.spans.remove(&key.map);
            }
        }
    }

    /// The parts of `range` (of map `map`) that no recorded tensor's pages overlap.
    fn unrecorded(&self, map: u64, range: Range<usize>) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        let mut at = range.start;
        if let Some((set, longest)) = self.spans.get(&map) {
            let from = range.start.saturating_sub(*longest);
            for &(a, b) in set.range((from, 0)..(range.end, 0)) {
                if b <= at {
                    continue;
                }
                if a > at {
                    out.push(at..a);
                }
                at = at.max(b);
            }
        }
        if at < range.end {
            out.push(at..range.end);
        }
        out
    }
}

/// A tensor taken out of the record: the map, and the ranges of it to release.
struct Victim {
    map: Weak<Mmap>,
    bytes: u64,
    ranges: Vec<Range<usize>>,
}

/// How far around a released tensor pages no recorded tensor holds are released too: the
/// largest folio the kernel maps whole on a fault (a PMD: 2 MiB with 4 KiB pages). A fault
/// in one tensor maps the rest of its folio, pages of neighbours included; without this, a
/// neighbour released before would stay mapped, uncounted.
fn around() -> usize {
    let page = super::mmap::page_size();
    page * (page / 8)
}

/// A limit on the tensor bytes kept resident, shared by every model that reads through it (see
/// the module docs): [`super::Model::with_residency`] makes one for a model,
/// [`super::Model::share_residency`] shares one among models (`serve --max-resident`).
#[derive(Debug)]
pub struct Residency {
    limit: u64,
    state: Mutex<State>,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
    evicted_bytes: AtomicU64,
    paged_in: AtomicU64,
}

/// What a [`Residency`] has done so far (serialized: the dict `Model.residency` gives Python).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct ResidencyStats {
    /// The limit, in bytes.
    pub limit: u64,
    /// Bytes of the tensors recorded as resident now (held or not), in whole pages.
    pub resident: u64,
    /// Bytes of the tensors held now (by views not yet dropped).
    pub held: u64,
    /// Reads of a tensor recorded as resident.
    pub hits: u64,
    /// Reads of a tensor that was not.
    pub misses: u64,
    /// Tensors released to stay under the limit.
    pub evictions: u64,
    /// Their bytes, in whole pages.
    pub evicted_bytes: u64,
    /// Bytes of the tensors missed that were not in memory (not even in the page cache) when
    /// they were asked for: what reading them read from storage.
    pub paged_in: u64,
}

/// A tensor held resident: its pages are not released while this lives (see
/// [`super::Model::hold`]). Dropping the last hold of a tensor makes it the most recently used
/// of the tensors not held, and releases the least recently used ones while the bytes resident
/// pass the limit.
#[derive(Debug)]
pub struct Hold {
    residency: Arc<Residency>,
    key: Key,
}

impl Residency {
    /// A limit of `limit` bytes (a limit of 0 keeps only the tensors held).
    pub fn new(limit: u64) -> Arc<Residency> {
        Arc::new(Residency {
            limit,
            state: Mutex::new(State {
                idle: lru::LruCache::unbounded(),
                held: HashMap::new(),
                resident: 0,
                spans: HashMap::new(),
            }),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            evicted_bytes: AtomicU64::new(0),
            paged_in: AtomicU64::new(0),
        })
    }

    /// The limit, in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What it has done so far.
    pub fn stats(&self) -> ResidencyStats {
        let (resident, held) = {
            let st = self.lock();
            (st.resident, st.held.values().map(|(e, _)| e.bytes).sum())
        };
        ResidencyStats {
            limit: self.limit,
            resident,
            held,
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            evicted_bytes: self.evicted_bytes.load(Ordering::Relaxed),
            paged_in: self.paged_in.load(Ordering::Relaxed),
        }
    }

    /// Record a read of `range` (one tensor's bytes) of `map`: a hit if it is recorded as
    /// resident, else a miss (its bytes not in memory counted as paged in). It becomes the most
    /// recently used tensor, held if `hold` (until the [`Hold`] is dropped); then the least
    /// recently used tensors not held, other than this one, are released while the bytes
    /// resident pass the limit. `None` for an empty range, or when not `hold`.
    pub fn touch(
        self: &Arc<Self>,
        map: &Arc<Mmap>,
        range: Range<usize>,
        hold: bool,
    ) -> Option<Hold> {
        let pages = map.pages(range)?;
        let key = Key {
            map: map.id(),
            start: pages.start,
            end: pages.end,
        };
        let bytes = (pages.end - pages.start) as u64;
        let metrics = crate::metrics::global();
        let victims = {
            let mut st = self.lock();
            if let Some((_, n)) = st.held.get_mut(&key) {
                *n += u64::from(hold);
                self.hit();
            } else if let Some(entry) = st.idle.pop(&key) {
                self.hit();
                if hold {
                    st.held.insert(key, (entry, 1));
                } else {
                    st.idle.put(key, entry);
                }
            } else {
                map.small_pages();
                self.misses.fetch_add(1, Ordering::Relaxed);
                metrics.residency_miss();
                // Best effort: a failed `mincore` counts nothing.
                let missing = map.not_resident(pages).unwrap_or(0);
                self.paged_in.fetch_add(missing, Ordering::Relaxed);
                metrics.paged_in(missing);
                let entry = Entry {
                    map: Arc::downgrade(map),
                    bytes,
                };
                st.resident += bytes;
                st.record(key);
                metrics.resident(bytes as i64);
                if hold {
                    st.held.insert(key, (entry, 1));
                } else {
                    st.idle.put(key, entry);
                }
            }
            self.over_limit(&mut st, Some(key))
        };
        self.release(victims);
        hold.then(|| Hold {
            residency: Arc::clone(self),
            key,
        })
    }

    fn hit(&self) {
        self.hits.fetch_add(1, Ordering::Relaxed);
        crate::metrics::global().residency_hit();
    }

    /// Take the least recently used tensors not held (never `keep`) out of the record while
    /// the bytes resident pass the limit, with what to release of each: its pages, and the
    /// pages [`around`] it that no tensor still recorded holds. They are released by
    /// [`Residency::release`], outside the lock.
    fn over_limit(&self, st: &mut State, keep: Option<Key>) -> Vec<Victim> {
        let mut gone = Vec::new();
        while st.resident > self.limit {
            match st.idle.peek_lru() {
                Some((k, _)) if Some(*k) != keep => {
                    if let Some((k, e)) = st.idle.pop_lru() {
                        st.resident -= e.bytes;
                        crate::metrics::global().resident(-(e.bytes as i64));
                        st.forget(k);
                        gone.push((k, e));
                    }
                }
                _ => break,
            }
        }
        let near = around();
        gone.into_iter()
            .map(|(k, e)| Victim {
                ranges: st.unrecorded(
                    k.map,
                    k.start.saturating_sub(near)..k.end.saturating_add(near),
                ),
                map: e.map,
                bytes: e.bytes,
            })
            .collect()
    }

    /// Release the pages of tensors taken out of the record. A map already dropped took its
    /// pages with it. Another thread may have read a tensor again meanwhile: its pages are then
    /// dropped while recorded as resident, which costs it a fault, never a wrong byte.
    fn release(&self, victims: Vec<Victim>) {
        let metrics = crate::metrics::global();
        for v in victims {
            if let Some(map) = v.map.upgrade() {
                for r in v.ranges {
                    // Best effort: a map that cannot release keeps its pages for the kernel.
                    let _ = map.release(r);
                }
            }
            self.evictions.fetch_add(1, Ordering::Relaxed);
            self.evicted_bytes.fetch_add(v.bytes, Ordering::Relaxed);
            metrics.residency_evicted(v.bytes);
        }
    }

    /// Release the least recently used tensors not held until the bytes resident are within
    /// the limit (they are after every read, unless tensors held pass it on their own).
    pub fn trim(&self) {
        let victims = self.over_limit(&mut self.lock(), None);
        self.release(victims);
    }
}

impl Drop for Residency {
    /// The process's gauge of resident bytes forgets what this limit still recorded (its maps
    /// are gone, or going, with it).
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        crate::metrics::global().resident(-(st.resident as i64));
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let r = &self.residency;
        let victims = {
            let mut st = r.lock();
            let last = match st.held.get_mut(&self.key) {
                Some((_, n)) => {
                    *n -= 1;
                    *n == 0
                }
                None => false,
            };
            if last {
                if let Some((entry, _)) = st.held.remove(&self.key) {
                    st.idle.put(self.key, entry);
                }
            }
            r.over_limit(&mut st, None)
        };
        r.release(victims);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A file of `n` pages, mapped.
    fn mapped(n: usize) -> (tempfile::NamedTempFile, Arc<Mmap>) {
        let page = super::super::mmap::page_size();
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&vec![7u8; n * page]).unwrap();
        f.flush().unwrap();
        let map = Arc::new(Mmap::open_path(f.path()).unwrap());
        (f, map)
    }

    /// Least recently used first; a held tensor is never released; its last hold dropped
    /// releases it when over the limit.
    #[test]
    fn releases_the_least_recently_used_tensors_not_held() {
        let page = super::super::mmap::page_size();
        let (_f, map) = mapped(8);
        let r = Residency::new(3 * page as u64);
        let t = |i: usize| i * page..(i + 1) * page;
        r.touch(&map, t(0), false);
        r.touch(&map, t(1), false);
        r.touch(&map, t(2), false);
        r.touch(&map, t(0), false); // 0 is now the most recent: 1 goes next
        let s = r.stats();
        assert_eq!((s.hits, s.misses, s.evictions), (1, 3, 0));
        let held = r.touch(&map, t(3), true).unwrap();
        let s = r.stats();
        assert_eq!(
            (s.evictions, s.resident, s.held),
            (1, 3 * page as u64, page as u64)
        );
        // 2, 0 and 3 remain; 1 was released. Reading 1 again is a miss.
        r.touch(&map, t(1), false);
        assert_eq!(r.stats().misses, 5);
        // Two more: everything but the held 3 goes before it does.
        r.touch(&map, t(4), false);
        r.touch(&map, t(5), false);
        let s = r.stats();
        assert_eq!(s.resident, 3 * page as u64);
        assert!(s.held == page as u64);
        // A hold of a second tensor over a limit of one page: both stay while held.
        let r1 = Residency::new(page as u64);
        let a = r1.touch(&map, t(6), true).unwrap();
        let b = r1.touch(&map, t(7), true).unwrap();
        assert_eq!(r1.stats().resident, 2 * page as u64);
        drop(a);
        assert_eq!(r1.stats().resident, page as u64);
        assert_eq!(r1.stats().evictions, 1);
        drop(b);
        assert_eq!(r1.stats().resident, page as u64); // within the limit: kept
        drop(held);
    }

    /// A tensor read without a hold is kept even when it alone passes the limit, until the
    /// next read (its reader is about to read it).
    #[test]
    fn the_tensor_just_read_is_kept() {
        let page = super::super::mmap::page_size();
        let (_f, map) = mapped(4);
        let r = Residency::new(page as u64);
        r.touch(&map, 0..3 * page, false);
        assert_eq!(r.stats().resident, 3 * page as u64);
        r.touch(&map, 3 * page..4 * page, false);
        let s = r.stats();
        assert_eq!((s.resident, s.evictions), (page as u64, 1));
        r.trim();
        assert_eq!(r.stats().resident, page as u64);
    }
}
