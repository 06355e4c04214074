//! One download's use of a [`Mirror`]: whether it is still read, which chunks must come from the
//! resolve URL instead, which chunks it served, and what it cost.
//!
//! Ranges are asked of the mirror first. With a fallback (see [`MirrorUse::fallback`]) the mirror
//! is left for good at its first failure — an error, a stall, a body of the wrong length — and
//! every later request goes to the resolve URL; a chunk whose bytes came (even in part) from the
//! mirror and fail the manifest's check is fetched again from the resolve URL, alone, and named
//! as damaged. Without a fallback the mirror is the only source.
//!
//! With a [`Fill`] (nodes filling the file together), each chunk comes from where the fill
//! assigned it ([`MirrorState::assigned`]); a failure of the mirror sends that chunk alone to
//! the resolve URL, and the mirror stays in use for the others.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use super::events::Events;
use super::source::{Assigned, Fill, MirrorUse};

/// Chunks a mirror that falls back chunk by chunk (the Hub's CAS) may fail before it is left for
/// good.
const CHUNK_FAILURES: u32 = 3;

/// A chunk's source under a fill: not asked yet, the resolve URL, the mirror.
const UNASKED: u8 = 0;
const ORIGIN: u8 = 1;
const MIRROR: u8 = 2;

/// What a download read from a mirror (see [`super::TransferOutcome::mirror`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorReport {
    /// The mirror's name (see [`super::Mirror::name`]).
    pub name: String,
    /// Body bytes received from it (including copies thrown away).
    pub bytes: u64,
    /// Chunks it served that did not match the manifest (each then came from the resolve URL):
    /// its copy is damaged.
    pub damaged_chunks: Vec<usize>,
    /// Why it was left before the end (the rest came from the resolve URL); under a fill,
    /// why the first chunk it failed came from the resolve URL.
    pub left: Option<String>,
}

/// See the module docs.
pub(crate) struct MirrorState {
    pub(crate) use_: MirrorUse,
    left: AtomicBool,
    why_left: Mutex<Option<String>>,
    /// Per chunk: its bytes come from the resolve URL only.
    hub_only: Mutex<Vec<bool>>,
    /// Per chunk: some of its bytes on disk came from the mirror.
    served: Mutex<Vec<bool>>,
    damaged: Mutex<Vec<usize>>,
    bytes: AtomicU64,
    /// Chunks that failed on a mirror that falls back chunk by chunk (not a fill).
    failed_chunks: std::sync::atomic::AtomicU32,
    /// Per chunk, under a fill: where it comes from ([`UNASKED`], [`ORIGIN`], [`MIRROR`]).
    assigned: Mutex<Vec<u8>>,
    /// Per chunk being asked of the fill: the parts of one chunk (split between connections)
    /// ask one after the other, so the fill is asked once per chunk.
    asking: Mutex<std::collections::HashMap<usize, std::sync::Arc<tokio::sync::Mutex<()>>>>,
}

impl MirrorState {
    pub(crate) fn new(use_: MirrorUse, chunks: usize) -> Self {
        MirrorState {
            use_,
            left: AtomicBool::new(false),
            why_left: Mutex::new(None),
            hub_only: Mutex::new(vec![false; chunks]),
            served: Mutex::new(vec![false; chunks]),
            damaged: Mutex::new(Vec::new()),
            bytes: AtomicU64::new(0),
            failed_chunks: std::sync::atomic::AtomicU32::new(0),
            assigned: Mutex::new(vec![UNASKED; chunks]),
            asking: Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// The fill that assigns each chunk its source, if there is one.
    pub(crate) fn fill(&self) -> Option<&std::sync::Arc<dyn Fill>> {
        self.use_.fill.as_ref()
    }

    /// Whether chunk `index` was assigned a source (under a fill; always without one).
    pub(crate) fn is_assigned(&self, index: usize) -> bool {
        self.fill().is_none()
            || lock(&self.assigned)
                .get(index)
                .is_some_and(|&a| a != UNASKED)
    }

    /// The turn of chunk `index`'s parts to ask the fill where it comes from.
    pub(crate) fn asking(&self, index: usize) -> std::sync::Arc<tokio::sync::Mutex<()>> {
        lock(&self.asking).entry(index).or_default().clone()
    }

    /// Records where the fill said chunk `index` comes from (`Wait` records nothing).
    pub(crate) fn assigned(&self, index: usize, a: Assigned) {
        let v = match a {
            Assigned::Origin => ORIGIN,
            Assigned::Mirror { .. } => MIRROR,
            Assigned::Wait => return,
        };
        if let Some(slot) = lock(&self.assigned).get_mut(index) {
            *slot = v;
        }
    }

    /// Whether this node fetches chunk `index` for the others (the fill assigned it the resolve
    /// URL), so shares it once it is on disk.
    pub(crate) fn fetches_for_others(&self, index: usize) -> bool {
        self.fill().is_some() && lock(&self.assigned).get(index) == Some(&ORIGIN)
    }

    /// The mirror's name.
    pub(crate) fn name(&self) -> &str {
        self.use_.mirror.name()
    }

    /// Whether chunk `index` is asked of the mirror.
    pub(crate) fn serves(&self, index: usize) -> bool {
        if self.fill().is_some() {
            return lock(&self.assigned).get(index) == Some(&MIRROR)
                && !lock(&self.hub_only).get(index).copied().unwrap_or(true);
        }
        if !self.use_.fallback {
            return true;
        }
        !self.left.load(Ordering::Acquire)
            && !lock(&self.hub_only).get(index).copied().unwrap_or(true)
    }

    /// Leaves the mirror (with a fallback), saying why once. `false` without a fallback: the
    /// mirror is the only source, and the failure is retried as any other.
    pub(crate) fn leave(&self, index: usize, why: &str, events: &Events<'_>) -> bool {
        if !self.use_.fallback {
            return false;
        }
        // A source that falls back chunk by chunk (a fill, the Hub's CAS) sends only this chunk
        // to the resolve URL, until it has failed more chunks than it may (a CAS that fails
        // every chunk is left for good, not asked once more per chunk).
        let by_chunk = self.fill().is_some()
            || (self.use_.mirror.repaired_by_chunk()
                && self.failed_chunks.fetch_add(1, Ordering::AcqRel) < CHUNK_FAILURES);
        if by_chunk {
            // Only this chunk goes to the resolve URL; the first such failure is said.
            if let Some(h) = lock(&self.hub_only).get_mut(index) {
                *h = true;
            }
            let mut first = lock(&self.why_left);
            if first.is_none() {
                *first = Some(format!("chunk {index}: {why}"));
                events.notice(&format!(
                    "{}: chunk {index}: {why}; that chunk comes from the Hub",
                    self.name()
                ));
            }
            return true;
        }
        if !self.left.swap(true, Ordering::AcqRel) {
            *lock(&self.why_left) = Some(why.to_string());
            events.notice(&format!(
                "{}: {why}; the rest comes from the Hub",
                self.name()
            ));
        }
        true
    }

    /// Bytes of chunk `index` arrived from the mirror.
    pub(crate) fn received(&self, index: usize, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
        if let Some(s) = lock(&self.served).get_mut(index) {
            *s = true;
        }
    }

    /// Chunk `index` did not match the manifest: when the mirror served it and there is a
    /// fallback, it is the mirror's copy that is damaged — the chunk comes from the resolve URL
    /// from now on (`true`).
    pub(crate) fn rejected(&self, index: usize) -> bool {
        let served = lock(&self.served)
            .get_mut(index)
            .map(std::mem::take)
            .unwrap_or(false);
        if !served || !self.use_.fallback {
            return false;
        }
        if let Some(h) = lock(&self.hub_only).get_mut(index) {
            *h = true;
        }
        lock(&self.damaged).push(index);
        if let Some(fill) = self.fill() {
            fill.damaged(index);
        }
        true
    }

    /// The chunks some of whose bytes on disk came from the mirror, in order.
    pub(crate) fn served_chunks(&self) -> Vec<usize> {
        lock(&self.served)
            .iter()
            .enumerate()
            .filter_map(|(i, &s)| s.then_some(i))
            .collect()
    }

    /// Chunk `index` comes from the resolve URL from now on (a copy to compare with the
    /// mirror's), without saying the mirror's copy is damaged.
    pub(crate) fn send_to_origin(&self, index: usize) {
        if let Some(h) = lock(&self.hub_only).get_mut(index) {
            *h = true;
        }
    }

    /// Whether any byte on disk came from the mirror.
    pub(crate) fn contributed(&self) -> bool {
        lock(&self.served).iter().any(|&s| s)
    }

    pub(crate) fn report(&self) -> MirrorReport {
        let mut damaged_chunks = lock(&self.damaged).clone();
        damaged_chunks.sort_unstable();
        damaged_chunks.dedup();
        MirrorReport {
            name: self.name().to_string(),
            bytes: self.bytes.load(Ordering::Relaxed),
            damaged_chunks,
            left: lock(&self.why_left).clone(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
