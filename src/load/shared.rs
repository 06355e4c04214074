//! Tensors that share the page cache's memory: the file mapped copy-on-write under a read
//! lease ([`LeasedMap`]), each tensor checked through the map before it is handed out.
//!
//! This is the loader safetensors' mmap is, verified: no tensor's bytes are copied to be
//! loaded, and checking them costs their hash only, on every core. What is checked is what is
//! handed out: nobody can write the file while the lease is held, and the lease's break turns
//! the map's pages into copies of the bytes they held before the writer may go on. A tensor is
//! hashed only before it is handed out, never after (the caller may write into it then).
//!
//! With per-tensor digests each tensor is checked when first asked for; with per-chunk digests
//! or one digest for the whole file, the whole file is checked at the first tensor asked for,
//! and every tensor may then be handed out.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use rayon::prelude::*;

use crate::format::mmap::{LeaseState, LeasedMap};
use crate::manifest::Hasher;

use super::pipeline::Region;
use super::reference::Digests;
use super::{LoadError, Planned, VerifiedFile};

/// A tensor's state in a [`SharedFile`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Unchecked,
    /// Being hashed by some thread (the others wait for it).
    Checking,
    /// Checked: its bytes may be handed out.
    Checked,
}

/// A file's tensors as views of a map of the file (see the module's docs): made by
/// [`VerifiedFile::share`], checked by [`VerifiedFile::check_shared`], handed out by
/// [`SharedFile::hand_out`].
#[derive(Debug)]
pub struct SharedFile {
    map: Arc<LeasedMap>,
    /// Each tensor's bytes in the map.
    ranges: Vec<Range<usize>>,
    states: Mutex<Vec<State>>,
    changed: Condvar,
    /// Held while the whole file is checked (a chunk or file reference).
    whole: Mutex<()>,
}

impl SharedFile {
    /// The map the tensors are views of.
    pub fn map(&self) -> &Arc<LeasedMap> {
        &self.map
    }

    /// Tensor `index`'s memory (address and length) once it has been checked: the caller may
    /// read and write it as its own while the map lives (its writes are private: the file is
    /// never written). `None` for a tensor not checked (or not in the file): nothing unchecked
    /// is ever handed out.
    pub fn hand_out(&self, index: usize) -> Option<(*mut u8, usize)> {
        let states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        if states.get(index) != Some(&State::Checked) {
            return None;
        }
        let r = self.ranges.get(index)?;
        Some((self.map.as_ptr(r.start)?, r.len()))
    }

    /// Whether the map's pages are still the page cache's (`Held`), or were copied when
    /// somebody opened the file for writing.
    pub fn lease(&self) -> LeaseState {
        self.map.state()
    }

    fn mark_all_checked(&self) {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        states.iter_mut().for_each(|s| *s = State::Checked);
        self.changed.notify_all();
    }
}

impl VerifiedFile {
    /// Maps the file for tensors that share its memory ([`SharedFile`]). Fails with
    /// [`LoadError::Unshared`] where the file cannot be held under a read lease (open for
    /// writing elsewhere, another owner, a network file system): the caller reads by position
    /// instead ([`VerifiedFile::read_into`]).
    pub fn share(&self) -> Result<SharedFile, LoadError> {
        let unshared = |source| LoadError::Unshared {
            path: self.path.clone(),
            source,
        };
        let map = LeasedMap::open(self.reader.file()).map_err(unshared)?;
        // The file under the lease is the one whose header was read, unchanged.
        self.reader.unchanged().map_err(|e| self.io(e))?;
        if map.len() as u64 != self.size() {
            return Err(self.io(std::io::Error::other(
                "it changed while it was read (its size differs from the map's)",
            )));
        }
        let mut ranges = Vec::with_capacity(self.tensors().len());
        for t in self.tensors() {
            let r = t.byte_range();
            match (usize::try_from(r.start), usize::try_from(r.end)) {
                (Ok(s), Ok(e)) if e <= map.len() => ranges.push(s..e),
                _ => {
                    return Err(self.request(format!(
                        "tensor '{}' lies outside the file",
                        crate::names::escape(&t.name)
                    )))
                }
            }
        }
        let shared = SharedFile {
            states: Mutex::new(vec![State::Unchecked; ranges.len()]),
            map,
            ranges,
            changed: Condvar::new(),
            whole: Mutex::new(()),
        };
        if self.reference.is_none() {
            shared.mark_all_checked(); // nothing to check against (said by `verification`)
        }
        Ok(shared)
    }

    /// Checks the tensors `indices` of `shared` through its map, so that they may be handed
    /// out: with per-tensor digests those not yet checked, on every core; with chunk or file
    /// digests the whole file, once. A tensor that does not match is an error naming it, and
    /// stays unchecked (never handed out).
    pub fn check_shared(&self, shared: &SharedFile, indices: &[usize]) -> Result<(), LoadError> {
        let n = shared.ranges.len();
        if let Some(&bad) = indices.iter().find(|&&i| i >= n) {
            return Err(self.request(format!("no tensor number {bad}")));
        }
        if shared.map.state() == LeaseState::Lost {
            return Err(self.io(std::io::Error::other(
                "it was opened for writing while mapped, and its pages could not be copied",
            )));
        }
        let Some(reference) = &self.reference else {
            return Ok(());
        };
        match &reference.digests {
            Digests::Tensors(_) => self.check_tensors(shared, indices),
            Digests::Chunks(_) | Digests::File(_) => {
                let _whole = shared.whole.lock().unwrap_or_else(|e| e.into_inner());
                {
                    let states = shared.states.lock().unwrap_or_else(|e| e.into_inner());
                    if states.iter().all(|s| *s == State::Checked) {
                        return Ok(());
                    }
                }
                let all: Vec<usize> = (0..n).collect();
                let planned = self.regions(&all)?;
                self.hash_planned(shared, &planned)?;
                shared.mark_all_checked();
                Ok(())
            }
        }
    }

    /// Per-tensor digests: the tensors of `indices` nobody has checked yet are hashed here, in
    /// parallel; those another thread is hashing are waited for (and hashed here if that
    /// failed).
    fn check_tensors(&self, shared: &SharedFile, indices: &[usize]) -> Result<(), LoadError> {
        loop {
            let mine: Vec<usize> = {
                let mut states = shared.states.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if indices.iter().all(|&i| states[i] == State::Checked) {
                        return Ok(());
                    }
                    let mine: Vec<usize> = indices
                        .iter()
                        .copied()
                        .filter(|&i| states[i] == State::Unchecked)
                        .collect();
                    if !mine.is_empty() {
                        for &i in &mine {
                            states[i] = State::Checking;
                        }
                        break mine;
                    }
                    states = shared
                        .changed
                        .wait(states)
                        .unwrap_or_else(|e| e.into_inner());
                }
            };
            let outcome = self
                .regions(&mine)
                .and_then(|planned| self.hash_planned(shared, &planned));
            let mut states = shared.states.lock().unwrap_or_else(|e| e.into_inner());
            let next = if outcome.is_ok() {
                State::Checked
            } else {
                State::Unchecked
            };
            for &i in &mine {
                states[i] = next;
            }
            shared.changed.notify_all();
            outcome?;
        }
    }

    /// Hashes every region of `planned` through the map (a single large region in order, its
    /// pages read in ahead by a helper; several on every core): the first that differs is the
    /// error.
    fn hash_planned(&self, shared: &SharedFile, planned: &Planned) -> Result<(), LoadError> {
        let map = &shared.map;
        let failed: Option<(usize, Vec<u8>)> = if planned.regions.len() == 1 {
            hash_one(map, &planned.regions[0]).map(|got| (0, got))
        } else {
            planned
                .regions
                .par_iter()
                .enumerate()
                .filter_map(|(i, r)| hash_one(map, r).map(|got| (i, got)))
                .min_by_key(|(i, _)| *i)
        };
        match failed {
            None => Ok(()),
            Some((i, got)) => Err(self.located(self.mismatch(planned, i, &got))),
        }
    }
}

/// The digest of `region` read through `map` when it differs from the expected one (`None`
/// when it matches). A range outside the map differs (an empty digest). A large region is
/// hashed in order while a helper thread has the kernel read its pages in, at most 64 MiB
/// ahead ([`LeasedMap::populate`]): the page cache's filling and the page faults take the other
/// core, not the hashing one.
fn hash_one(map: &LeasedMap, region: &Region) -> Option<Vec<u8>> {
    const STEP: usize = 8 << 20;
    const AHEAD: usize = 64 << 20;
    let expect = region.expect.as_deref()?;
    let (Ok(start), Ok(end)) = (
        usize::try_from(region.range.start),
        usize::try_from(region.range.end),
    ) else {
        return Some(Vec::new());
    };
    if end.saturating_sub(start) <= AHEAD {
        let got = map.bytes(start..end).map(|b| {
            let mut hasher = Hasher::new(region.algorithm);
            hasher.update(b);
            hasher.finalize()
        });
        return match got {
            Some(got) if got == expect => None,
            other => Some(other.unwrap_or_default()),
        };
    }
    // How far the hashing has gone; `usize::MAX` once it stops.
    let hashed = AtomicUsize::new(start);
    std::thread::scope(|scope| {
        let helper = scope.spawn(|| {
            let mut at = start;
            while at < end {
                let done = hashed.load(Ordering::Acquire);
                if done == usize::MAX {
                    return;
                }
                if at >= done.saturating_add(AHEAD) {
                    std::thread::park();
                    continue;
                }
                let to = end.min(at + STEP);
                if !map.populate(at..to) {
                    return; // the kernel cannot: the hashing thread faults them in itself
                }
                at = to;
            }
        });
        let mut hasher = Hasher::new(region.algorithm);
        let mut at = start;
        let mut ok = true;
        while at < end {
            let to = end.min(at + STEP);
            let Some(bytes) = map.bytes(at..to) else {
                ok = false;
                break;
            };
            hasher.update(bytes);
            at = to;
            hashed.store(at, Ordering::Release);
            helper.thread().unpark();
        }
        hashed.store(usize::MAX, Ordering::Release);
        helper.thread().unpark();
        let got = if ok { hasher.finalize() } else { Vec::new() };
        (got != expect).then_some(got)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::HashAlgorithm;

    /// A region larger than the read-ahead window is hashed with the helper reading ahead: the
    /// same digest as in one piece, a wrong expectation found, and the helper stops either way.
    #[test]
    fn a_large_region_is_hashed_with_its_pages_read_ahead() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.bin");
        let data: Vec<u8> = (0..(72 << 20) + 4099).map(|i| (i % 253) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let map = LeasedMap::open(&std::fs::File::open(&path).unwrap()).unwrap();
        let want = HashAlgorithm::Sha256.digest(&data[5..]);
        let region = |expect: Vec<u8>| Region {
            range: 5..data.len() as u64,
            algorithm: HashAlgorithm::Sha256,
            expect: Some(expect),
        };
        assert_eq!(hash_one(&map, &region(want.clone())), None);
        let mut wrong = want.clone();
        wrong[0] ^= 1;
        assert_eq!(hash_one(&map, &region(wrong)), Some(want));
        // Past the map: an empty digest, never a read outside it.
        let outside = Region {
            range: 0..data.len() as u64 + 1,
            algorithm: HashAlgorithm::Sha256,
            expect: Some(vec![0; 32]),
        };
        assert_eq!(hash_one(&map, &outside), Some(Vec::new()));
    }
}
