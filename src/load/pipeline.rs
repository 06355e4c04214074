//! One pass over a file: its bytes read by position, in order, into the caller's memory (or a
//! scratch block for bytes nobody keeps), and handed as they arrive to hashing threads that
//! check each region (a tensor, a chunk, the whole file) against its digest while the next
//! block is read. Reading takes one core, hashing the others; a helper thread asks the kernel
//! for the destinations' fresh pages ahead of the reader, so that their page faults (the
//! largest cost of reading into new memory) are not paid on the reader's thread.

use std::collections::VecDeque;
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::manifest::{HashAlgorithm, Hasher};

/// Bytes read at once (a tensor larger than this is read in pieces of it).
const BLOCK: usize = 8 << 20;

/// Blocks waiting for each hashing thread: what the reader may be ahead by.
const QUEUE: usize = 3;

/// Where bytes are read from.
pub(crate) trait Source: Sync {
    /// Fills `buf` from byte `at` (an error when the source ends before).
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()>;
}

impl Source for crate::format::positional::FileReader {
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        self.read_exact(buf, at)
    }
}

impl Source for [u8] {
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        let start = usize::try_from(at).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let bytes = start
            .checked_add(buf.len())
            .and_then(|end| self.get(start..end))
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(bytes);
        Ok(())
    }
}

/// A byte range hashed in one pass: checked against `expect`, or its digest recorded when
/// `expect` is `None`.
#[derive(Debug, Clone)]
pub(crate) struct Region {
    pub range: Range<u64>,
    pub algorithm: HashAlgorithm,
    pub expect: Option<Vec<u8>>,
}

/// What a pass found: the regions whose digest differs (index, digest found), and the digests
/// recorded (index, digest).
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    pub failed: Vec<(usize, Vec<u8>)>,
    pub recorded: Vec<(usize, Vec<u8>)>,
}

/// A block on its way to the hashing threads.
#[derive(Clone)]
enum Block<'d> {
    /// Bytes read into the caller's memory.
    Kept(&'d [u8]),
    /// Bytes read into a scratch block (returned to the pool when every thread is done).
    Scratch(Arc<Vec<u8>>, usize),
}

impl Block<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Block::Kept(b) => b,
            Block::Scratch(v, n) => &v[..*n],
        }
    }
}

/// Reads `spans ∪ regions` of `src` once, in order: the bytes of each destination (a byte range
/// and the memory it is read into, ranges not overlapping) into it, others into scratch
/// blocks; every region hashed on `threads` hashing threads (at least one when there are
/// regions). Stops at the first region that differs. The caller checks that the source did
/// not change meanwhile.
pub(crate) fn run<'d>(
    src: &(impl Source + ?Sized),
    regions: &[Region],
    mut dests: Vec<(Range<u64>, &'d mut [u8])>,
    threads: usize,
) -> io::Result<Outcome> {
    dests.sort_by_key(|(r, _)| r.start);
    if let Some((r, _)) = dests
        .iter()
        .find(|(r, buf)| r.end.checked_sub(r.start) != Some(buf.len() as u64))
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "memory for bytes {}..{} is not of their length",
                r.start, r.end
            ),
        ));
    }
    let spans = spans(regions, &dests);
    let stop = AtomicBool::new(false);
    let outcome = Mutex::new(Outcome::default());
    // Empty regions are known without reading.
    for (i, r) in regions.iter().enumerate() {
        if r.range.is_empty() {
            finish(i, r, Hasher::new(r.algorithm), &outcome, &stop);
        }
    }
    let owners = assign(regions, threads);
    let ranges: Vec<Range<u64>> = dests.iter().map(|(r, _)| r.clone()).collect();
    let pieces = Pieces::new(dests);
    let read_done = AtomicBool::new(false);
    std::thread::scope(|s| -> io::Result<()> {
        let mut senders: Vec<SyncSender<(u64, Block<'d>)>> = Vec::new();
        for mine in owners.iter().filter(|m| !m.is_empty()) {
            let (tx, rx) = sync_channel::<(u64, Block<'d>)>(QUEUE);
            senders.push(tx);
            let (stop, outcome) = (&stop, &outcome);
            s.spawn(move || hash_regions(regions, mine, rx, stop, outcome));
        }
        let send = |at: u64, block: Block<'d>| {
            for tx in &senders {
                if tx.send((at, block.clone())).is_err() {
                    stop.store(true, Ordering::Relaxed);
                }
            }
        };
        if pieces.worth_prefaulting() {
            let (pieces, stop, read_done) = (&pieces, &stop, &read_done);
            s.spawn(move || pieces.prefault_ahead(stop, read_done));
        }
        let read = || -> io::Result<()> {
            let mut pool: Vec<Arc<Vec<u8>>> = Vec::new();
            let mut dests = ranges.iter().peekable();
            for span in &spans {
                let mut at = span.start;
                while at < span.end {
                    if stop.load(Ordering::Relaxed) {
                        return Ok(());
                    }
                    if let Some(r) = dests.next_if(|r| r.start == at) {
                        for _ in 0..r.end.saturating_sub(r.start).div_ceil(BLOCK as u64) {
                            if stop.load(Ordering::Relaxed) {
                                return Ok(());
                            }
                            let (pos, piece) = pieces.next().ok_or_else(|| {
                                io::Error::other(
                                    "the destinations' pieces ran out before their bytes",
                                )
                            })?;
                            src.read_at(piece, pos)?;
                            let piece: &'d [u8] = piece;
                            if !senders.is_empty() {
                                send(pos, Block::Kept(piece));
                            }
                        }
                        at = r.end;
                        continue;
                    }
                    // Bytes nobody keeps: up to the next destination or the span's end.
                    let until = dests.peek().map_or(span.end, |r| r.start.min(span.end));
                    let n = usize::try_from(until - at).unwrap_or(usize::MAX).min(BLOCK);
                    let mut buf = take_scratch(&mut pool, n);
                    let v = Arc::get_mut(&mut buf).expect("a scratch block no thread holds");
                    src.read_at(&mut v[..n], at)?;
                    send(at, Block::Scratch(Arc::clone(&buf), n));
                    pool.push(buf);
                    at += n as u64;
                }
            }
            Ok(())
        };
        let result = read();
        // Whatever happened, the helper has nothing left to prepare.
        read_done.store(true, Ordering::Relaxed);
        result
    })?;
    Ok(outcome.into_inner().unwrap_or_else(|e| e.into_inner()))
}

/// The destinations cut into blocks of at most [`BLOCK`] bytes, in file order, each handed to
/// the reader once ([`Pieces::next`]). A helper thread ([`Pieces::prefault_ahead`]) takes
/// them from the front first and has their pages faulted in before passing them on; when the
/// reader catches up with it, the reader takes the next piece as it is (and faults its pages
/// in itself while reading), so the helper only ever saves time.
struct Pieces<'d> {
    state: Mutex<PieceState<'d>>,
    ready: Condvar,
}

struct PieceState<'d> {
    /// Not yet taken, in order.
    pending: VecDeque<(u64, &'d mut [u8])>,
    /// Prefaulted, in order; every one of them precedes every pending one.
    prepared: VecDeque<(u64, &'d mut [u8])>,
    /// The helper holds the piece between `prepared` and `pending`.
    busy: bool,
}

impl<'d> Pieces<'d> {
    fn new(dests: Vec<(Range<u64>, &'d mut [u8])>) -> Pieces<'d> {
        let mut pending = VecDeque::new();
        for (r, mut rest) in dests {
            let mut pos = r.start;
            while !rest.is_empty() {
                let n = rest.len().min(BLOCK);
                let (piece, tail) = std::mem::take(&mut rest).split_at_mut(n);
                rest = tail;
                pending.push_back((pos, piece));
                pos += n as u64;
            }
        }
        Pieces {
            state: Mutex::new(PieceState {
                pending,
                prepared: VecDeque::new(),
                busy: false,
            }),
            ready: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PieceState<'d>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// More than one block to read into: a helper thread pays for itself.
    fn worth_prefaulting(&self) -> bool {
        self.lock().pending.len() > 1
    }

    /// The next piece in file order (`None` when none is left).
    fn next(&self) -> Option<(u64, &'d mut [u8])> {
        let mut st = self.lock();
        loop {
            if let Some(p) = st.prepared.pop_front() {
                return Some(p);
            }
            if !st.busy {
                return st.pending.pop_front();
            }
            st = self.ready.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The helper: faults in the pending pieces' pages, front first, until none is left, the
    /// pass stops or the reader is done (or the kernel cannot: then the reader faults them).
    fn prefault_ahead(&self, stop: &AtomicBool, read_done: &AtomicBool) {
        loop {
            let (at, piece) = {
                let mut st = self.lock();
                if stop.load(Ordering::Relaxed) || read_done.load(Ordering::Relaxed) {
                    return;
                }
                let Some(p) = st.pending.pop_front() else {
                    return;
                };
                st.busy = true;
                p
            };
            let faulted = crate::format::mmap::prefault(piece);
            {
                let mut st = self.lock();
                st.prepared.push_back((at, piece));
                st.busy = false;
            }
            self.ready.notify_all();
            if !faulted {
                return;
            }
        }
    }
}

/// A scratch block of at least `n` bytes no hashing thread holds any more (a new one when
/// all are in use: at most [`QUEUE`] + 2 per thread exist at once).
fn take_scratch(pool: &mut Vec<Arc<Vec<u8>>>, n: usize) -> Arc<Vec<u8>> {
    if let Some(i) = pool
        .iter()
        .position(|b| Arc::strong_count(b) == 1 && b.len() >= n)
    {
        return pool.swap_remove(i);
    }
    Arc::new(vec![0u8; n.clamp(1 << 16, BLOCK.max(n))])
}

/// The byte ranges read: the regions' and the destinations', merged, in order.
fn spans(regions: &[Region], dests: &[(Range<u64>, &mut [u8])]) -> Vec<Range<u64>> {
    let mut all: Vec<Range<u64>> = regions
        .iter()
        .map(|r| r.range.clone())
        .chain(dests.iter().map(|(r, _)| r.clone()))
        .filter(|r| !r.is_empty())
        .collect();
    all.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(all.len());
    for r in all {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// The regions each hashing thread takes, in offset order, balanced by bytes.
fn assign(regions: &[Region], threads: usize) -> Vec<Vec<usize>> {
    let threads = threads.max(1);
    let mut owners = vec![Vec::new(); threads];
    let mut load = vec![0u64; threads];
    let mut order: Vec<usize> = (0..regions.len())
        .filter(|&i| !regions[i].range.is_empty())
        .collect();
    order.sort_by_key(|&i| regions[i].range.start);
    for i in order {
        let t = (0..threads).min_by_key(|&t| load[t]).unwrap_or(0);
        load[t] += regions[i].range.end - regions[i].range.start;
        owners[t].push(i);
    }
    owners
}

/// A hashing thread: feeds each of its regions the bytes of it in each block, and checks
/// (or records) each digest when its last byte has arrived.
fn hash_regions(
    regions: &[Region],
    mine: &[usize],
    blocks: std::sync::mpsc::Receiver<(u64, Block<'_>)>,
    stop: &AtomicBool,
    outcome: &Mutex<Outcome>,
) {
    let mut next = 0;
    let mut active: Vec<(usize, Hasher)> = Vec::new();
    for (at, block) in blocks {
        let bytes = block.bytes();
        let end = at + bytes.len() as u64;
        while next < mine.len() && regions[mine[next]].range.start < end {
            active.push((mine[next], Hasher::new(regions[mine[next]].algorithm)));
            next += 1;
        }
        let mut done = Vec::new();
        for (k, (i, h)) in active.iter_mut().enumerate() {
            let r = &regions[*i].range;
            let (lo, hi) = (r.start.max(at), r.end.min(end));
            if lo < hi {
                h.update(&bytes[(lo - at) as usize..(hi - at) as usize]);
            }
            if r.end <= end {
                done.push(k);
            }
        }
        for k in done.into_iter().rev() {
            let (i, h) = active.swap_remove(k);
            finish(i, &regions[i], h, outcome, stop);
        }
        if stop.load(Ordering::Relaxed) {
            return;
        }
    }
}

/// Checks (or records) the digest of region `i`.
fn finish(i: usize, r: &Region, h: Hasher, outcome: &Mutex<Outcome>, stop: &AtomicBool) {
    let got = h.finalize();
    let mut o = outcome.lock().unwrap_or_else(|e| e.into_inner());
    match &r.expect {
        None => o.recorded.push((i, got)),
        Some(want) if *want == got => {}
        Some(_) => {
            o.failed.push((i, got));
            stop.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(range: Range<u64>, bytes: &[u8], alg: HashAlgorithm) -> Region {
        let want = alg.digest(&bytes[range.start as usize..range.end as usize]);
        Region {
            range,
            algorithm: alg,
            expect: Some(want),
        }
    }

    #[test]
    fn destinations_get_their_bytes_and_every_region_is_checked() {
        let bytes: Vec<u8> = (0..(BLOCK * 2 + 777))
            .map(|i| (i * 7 % 253) as u8)
            .collect();
        let n = bytes.len() as u64;
        for threads in [1, 3] {
            let mut a = vec![0u8; BLOCK + 10];
            let mut b = vec![0u8; 5];
            let regions = vec![
                region(0..n, &bytes, HashAlgorithm::Sha256),
                region(100..100 + BLOCK as u64 + 10, &bytes, HashAlgorithm::Blake3),
                region(7..7, &bytes, HashAlgorithm::Sha256),
                Region {
                    range: 3..9,
                    algorithm: HashAlgorithm::Sha256,
                    expect: None,
                },
            ];
            let dests = vec![
                (n - 5..n, &mut b[..]),
                (100..100 + BLOCK as u64 + 10, &mut a[..]),
            ];
            let out = run(&bytes[..], &regions, dests, threads).unwrap();
            assert!(out.failed.is_empty(), "{:?}", out.failed);
            assert_eq!(a, &bytes[100..100 + BLOCK + 10]);
            assert_eq!(b, &bytes[bytes.len() - 5..]);
            assert_eq!(
                out.recorded,
                vec![(3, HashAlgorithm::Sha256.digest(&bytes[3..9]))]
            );
        }
    }

    #[test]
    fn a_region_that_differs_is_found_and_stops_the_pass() {
        let bytes = vec![1u8; BLOCK * 3];
        let mut regions = vec![region(0..10, &bytes, HashAlgorithm::Sha256)];
        regions[0].expect = Some(vec![0; 32]);
        regions.push(region(
            10..bytes.len() as u64,
            &bytes,
            HashAlgorithm::Sha256,
        ));
        let out = run(&bytes[..], &regions, Vec::new(), 1).unwrap();
        assert_eq!(out.failed.len(), 1);
        assert_eq!(out.failed[0].0, 0);
    }

    #[test]
    fn pieces_come_in_order_whoever_prepares_them() {
        let mut a = vec![0u8; BLOCK * 3 + 1];
        let mut b = [0u8; 7];
        let mut c = [0u8; 0];
        let n = a.len() as u64;
        let pieces = Pieces::new(vec![
            (0..n, &mut a[..]),
            (n..n, &mut c[..]),
            (n + 10..n + 17, &mut b[..]),
        ]);
        assert!(pieces.worth_prefaulting());
        let (stop, done) = (AtomicBool::new(false), AtomicBool::new(false));
        let got: Vec<(u64, usize)> = std::thread::scope(|s| {
            s.spawn(|| pieces.prefault_ahead(&stop, &done));
            std::iter::from_fn(|| pieces.next())
                .map(|(at, p)| (at, p.len()))
                .collect()
        });
        let b = BLOCK as u64;
        assert_eq!(
            got,
            vec![
                (0, BLOCK),
                (b, BLOCK),
                (2 * b, BLOCK),
                (3 * b, 1),
                (n + 10, 7)
            ]
        );
    }

    #[test]
    fn a_source_that_ends_early_stops_the_helper_too() {
        // Three blocks to read into, the source holding one and a half: an error, no hang.
        let bytes = vec![5u8; BLOCK + BLOCK / 2];
        let mut dest = vec![0u8; BLOCK * 3];
        let regions = [region(0..bytes.len() as u64, &bytes, HashAlgorithm::Sha256)];
        let e = run(
            &bytes[..],
            &regions,
            vec![(0..BLOCK as u64 * 3, &mut dest[..])],
            1,
        )
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(dest[..BLOCK].iter().all(|&x| x == 5));
    }

    #[test]
    fn memory_not_of_its_range_length_is_refused() {
        let bytes = [0u8; 100];
        let mut dest = [0u8; 10];
        let e = run(&bytes[..], &[], vec![(0..20, &mut dest[..])], 1).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn a_source_that_ends_early_is_an_error() {
        let bytes = [0u8; 100];
        let mut dest = [0u8; 50];
        let e = run(&bytes[..], &[], vec![(80..130, &mut dest[..])], 1).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}
