//! What the upstream answered, remembered by key (`Memory`): at most so many answers and so
//! many entries in all (`Weight`), the oldest forgotten first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::upstream::Listing;
use crate::hub::Refs;

/// Answers remembered per kind (listings, refs, access); past this many, or past
/// [`REMEMBERED_WEIGHT`] entries in all, the oldest are forgotten.
const REMEMBERED: usize = 1024;

/// Entries (a listing's files, a repository's refs) remembered per kind in all: a bound on the
/// memory of what is remembered (about 150 bytes an entry), whatever the repositories asked
/// about.
const REMEMBERED_WEIGHT: usize = 1_000_000;

pub(super) struct Remembered<T> {
    at: Instant,
    pub(super) value: Arc<T>,
    weight: usize,
}

/// Answers kept by key, at most [`REMEMBERED`] of them and [`REMEMBERED_WEIGHT`] in weight.
pub(crate) struct Memory<K, T> {
    pub(super) map: Mutex<HashMap<K, Remembered<T>>>,
}

/// How many entries an answer holds (what [`REMEMBERED_WEIGHT`] bounds).
pub(crate) trait Weight {
    fn weight(&self) -> usize;
}

impl Weight for Listing {
    fn weight(&self) -> usize {
        self.entries.len().max(1)
    }
}

impl Weight for Refs {
    fn weight(&self) -> usize {
        (self.branches.len() + self.tags.len()).max(1)
    }
}

impl Weight for () {
    fn weight(&self) -> usize {
        1
    }
}

impl Weight for std::collections::HashMap<String, (String, u64)> {
    fn weight(&self) -> usize {
        self.len().max(1)
    }
}

impl Weight for String {
    fn weight(&self) -> usize {
        1
    }
}

impl Weight for bool {
    fn weight(&self) -> usize {
        1
    }
}

impl<K: std::hash::Hash + Eq + Clone, T: Weight> Memory<K, T> {
    pub(crate) fn new() -> Self {
        Memory {
            map: Mutex::new(HashMap::new()),
        }
    }

    /// The answer for `key` and its age.
    pub(crate) fn get(&self, key: &K) -> Option<(Arc<T>, Duration)> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key).map(|r| (r.value.clone(), r.at.elapsed()))
    }

    pub(super) fn forget(&self, key: &K) {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    pub(crate) fn put(&self, key: K, value: Arc<T>) {
        let weight = value.weight();
        if weight > REMEMBERED_WEIGHT {
            return;
        }
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(&key);
        let mut total: usize = map.values().map(|r| r.weight).sum();
        while !map.is_empty() && (map.len() >= REMEMBERED || total + weight > REMEMBERED_WEIGHT) {
            let Some(oldest) = map.iter().min_by_key(|(_, r)| r.at).map(|(k, _)| k.clone()) else {
                break;
            };
            if let Some(r) = map.remove(&oldest) {
                total -= r.weight;
            }
        }
        map.insert(
            key,
            Remembered {
                at: Instant::now(),
                value,
                weight,
            },
        );
    }
}
