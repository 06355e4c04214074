//! Tests of the chunk table, kept together: most drive it as a download does, claiming parts,
//! giving them back and resuming, across the files of the module.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::claim::SPLIT_ALIGN;
use super::*;

fn digest(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

fn fed(h: &Sha256, b: &[u8]) -> Sha256 {
    let mut h = h.clone();
    h.update(b);
    h
}

const NEVER: SplitRule = SplitRule::NEVER;
const MIB: u64 = 1 << 20;

#[test]
fn a_chunk_with_all_its_bytes_is_done_whichever_way_it_gets_there() {
    let plan = Plan::new(250, 100);
    let mut t = ChunkTable::new(plan, Vec::new(), None, NEVER);
    // Released with every byte on disk (a cut right after the last byte): done.
    let c = t.claim_next().unwrap();
    assert_eq!((c.range.index, c.from, c.at), (0, 0, 0));
    let h = fed(&c.hasher, &[7u8; 100]);
    let r = t.release(0, 0, 100, h, suspicion::RETRIED);
    assert!(matches!(r, Released::Done));
    assert!(t.is_done(0));
    assert!(
        t.claim(0).is_none(),
        "a done chunk is never handed out again"
    );
    // Released half-way: pending, first in line, with its bytes and hash state.
    let c = t.claim_next().unwrap();
    assert_eq!(c.range.index, 1);
    let h = fed(&c.hasher, &[1u8; 40]);
    assert!(matches!(t.release(1, 0, 40, h, 0), Released::Pending));
    assert_eq!(t.first_missing(), Some((1, 40)));
    assert_eq!(t.bytes_on_disk(), 140);
    let c = t.claim_next().unwrap();
    assert_eq!((c.range.index, c.at), (1, 40));
    let h = fed(&c.hasher, &[1u8; 60]);
    assert!(matches!(t.release(1, 0, 100, h, 0), Released::Done));
    assert_eq!(t.digests()[1], digest(&[1u8; 100]));
    let c = t.claim_next().unwrap();
    assert_eq!(c.range.len, 50);
    assert!(t.claim_next().is_none(), "chunk 2 is held");
    assert!(
        t.steal(Instant::now() + Duration::from_secs(9)).is_none(),
        "never split"
    );
    let h = fed(&c.hasher, &[0u8; 50]);
    assert!(matches!(t.release(2, 0, 50, h, 0), Released::Done));
    assert!(t.all_done());
    assert_eq!(t.records().len(), 3);
    assert!(t.records().iter().all(|r| r.complete));
    assert_eq!(t.by_suspicion()[0], 0);
}

#[test]
fn presplit_gives_every_connection_a_part_at_the_start() {
    // Three 16 MiB chunks and a 1 MiB one, for 12 connections.
    let plan = Plan::new(49 * MIB, 16 * MIB);
    let rule = SplitRule {
        min: MIB,
        after: Duration::ZERO,
    };
    let mut t = ChunkTable::new(plan, Vec::new(), None, rule);
    assert_eq!(t.presplit(12), 8);
    let parts: Vec<Vec<(u64, u64)>> = t
        .chunks
        .iter()
        .map(|c| c.parts.iter().map(|p| (p.from, p.to)).collect())
        .collect();
    for (i, ps) in parts.iter().enumerate() {
        // Each chunk is still covered end to end, in order, by parts of at least 2 MiB
        // starting on 64 KiB boundaries.
        assert_eq!(ps[0].0, 0);
        assert_eq!(ps.last().unwrap().1, plan.chunk(i).unwrap().len);
        for w in ps.windows(2) {
            assert_eq!(w[0].1, w[1].0);
        }
        if ps.len() > 1 {
            assert!(ps
                .iter()
                .all(|&(a, b)| b - a >= 4 * MIB && a % SPLIT_ALIGN == 0));
        }
    }
    assert_eq!(parts[3], [(0, MIB)], "too small to cut");
    assert_eq!(parts.iter().map(Vec::len).sum::<usize>(), 12);
    // Twelve connections each find a part; nothing is counted as a split.
    let claims: Vec<Claim> = (0..12).map(|_| t.claim_next().unwrap()).collect();
    assert!(t.claim_next().is_none());
    assert_eq!(t.splits, 0);
    // Cut as far as it goes (parts of 4 MiB), and no further.
    let mut t = ChunkTable::new(plan, Vec::new(), None, rule);
    assert_eq!(t.presplit(16), 3 * 3);
    assert_eq!(t.presplit(1000), 0);
    // Already enough waiting, or no split rule: nothing to do.
    let mut t = ChunkTable::new(plan, Vec::new(), None, rule);
    assert_eq!(t.presplit(4), 0);
    let mut t = ChunkTable::new(plan, Vec::new(), None, NEVER);
    assert_eq!(t.presplit(16), 0);
    drop(claims);
}

#[test]
fn parts_are_handed_out_in_file_order() {
    // Three 16 MiB chunks cut for 6 connections (as for a ceiling the count may never
    // reach), fetched by 2: the parts of chunk 0 come before those of chunk 1, so that
    // chunk 0 completes first and the whole-file hash can follow it.
    let plan = Plan::new(48 * MIB, 16 * MIB);
    let rule = SplitRule {
        min: MIB,
        after: Duration::ZERO,
    };
    let mut t = ChunkTable::new(plan, Vec::new(), None, rule);
    assert_eq!(t.presplit(6), 3);
    let order = |t: &mut ChunkTable, n| {
        (0..n)
            .map(|_| {
                let c = t.claim_next().unwrap();
                (c.range.index, c.from / MIB)
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(order(&mut t, 2), [(0, 0), (0, 8)]);
    // Chunk 0's first half is given back half-way (its connection was one too many): it
    // comes before chunk 1, and chunk 0 is done before chunk 1 is started.
    let bytes = vec![3u8; (4 * MIB) as usize];
    let h = fed(&Sha256::new(), &bytes);
    assert!(matches!(
        t.release(0, 0, 4 * MIB, h, 0),
        Released::Pending
    ));
    let again = t.claim_next().unwrap();
    assert_eq!((again.range.index, again.from, again.at), (0, 0, 4 * MIB));
    drop(again);
    assert_eq!(order(&mut t, 4), [(1, 0), (1, 8), (2, 0), (2, 8)]);
    assert!(t.claim_next().is_none());
    // A chunk fetched again after a wrong copy still comes first, before an earlier part.
    let plan = Plan::new(300, 100);
    let expected = ExpectedChunks {
        chunk_size: 100,
        sha256: vec![digest(&[1; 100]); 3],
    };
    let mut t = ChunkTable::new(plan, Vec::new(), Some(Arc::new(expected)), NEVER);
    let (a, b) = (t.claim_next().unwrap(), t.claim_next().unwrap());
    let h = fed(&a.hasher, &[1; 40]);
    assert!(matches!(t.release(0, 0, 40, h, 0), Released::Pending));
    let h = fed(&b.hasher, &[7; 100]);
    assert!(matches!(
        t.release(1, 0, 100, h, 0),
        Released::Rejected { .. }
    ));
    let next: Vec<(usize, u64)> = (0..3)
        .map(|_| {
            let c = t.claim_next().unwrap();
            (c.range.index, c.at)
        })
        .collect();
    assert_eq!(next, [(1, 0), (0, 40), (2, 0)]);
}

#[test]
fn a_presplit_chunk_is_assembled_from_its_parts() {
    let plan = Plan::new(8 * MIB, 8 * MIB);
    let rule = SplitRule {
        min: MIB,
        after: Duration::ZERO,
    };
    let mut t = ChunkTable::new(plan, Vec::new(), None, rule);
    assert_eq!(t.presplit(2), 1);
    let a = t.claim_next().unwrap();
    let b = t.claim_next().unwrap();
    assert_eq!((a.from, b.from), (0, 4 * MIB));
    let bytes = vec![9u8; (4 * MIB) as usize];
    let hb = fed(&b.hasher, &bytes);
    assert!(matches!(
        t.release(0, b.from, 8 * MIB, hb, 0),
        Released::PartDone
    ));
    let ha = fed(&a.hasher, &bytes);
    let Released::Assemble { start, hasher } = t.release(0, 0, 4 * MIB, ha, 0) else {
        panic!("the last part assembles the chunk");
    };
    assert_eq!(start, 4 * MIB);
    let d: [u8; 32] = fed(&hasher, &bytes).finalize().into();
    assert!(matches!(t.assembled(0, d), Released::Done));
    assert_eq!(t.digests()[0], digest(&vec![9u8; (8 * MIB) as usize]));
}

/// Fetches chunk 0 (100 bytes) whole and gives it back with `bytes`.
fn copy_of_chunk_0(t: &mut ChunkTable, bytes: &[u8]) -> Released {
    let c = t.claim(0).expect("chunk 0 waits");
    let h = fed(&c.hasher, bytes);
    t.release(0, 0, 100, h, 0)
}

fn verdict(r: Released) -> Rejection {
    match r {
        Released::Rejected { verdict, .. } => verdict,
        _ => panic!("not rejected"),
    }
}

#[test]
fn wrong_copies_that_differ_are_fetched_again_within_the_budget() {
    let plan = Plan::new(300, 100);
    let manifest = || {
        Arc::new(ExpectedChunks {
            chunk_size: 100,
            sha256: vec![digest(&[1; 100]), digest(&[2; 100]), digest(&[3; 100])],
        })
    };
    // Corrupted on the way: every wrong copy differs, and a right one comes at last.
    let mut t = ChunkTable::new(plan, Vec::new(), Some(manifest()), NEVER);
    t.set_corrupt_budget(4);
    for k in 0..3u8 {
        let mut bad = [1u8; 100];
        bad[usize::from(k)] = 0;
        assert_eq!(verdict(copy_of_chunk_0(&mut t, &bad)), Rejection::Again);
    }
    assert!(matches!(copy_of_chunk_0(&mut t, &[1; 100]), Released::Done));
    // Four chunks at least, but twice the file is more.
    assert_eq!(t.corrupt_spent(), (300, 600));
    // The same wrong bytes twice: the source is wrong, whatever the budget left.
    let mut t = ChunkTable::new(plan, Vec::new(), Some(manifest()), NEVER);
    assert_eq!(
        verdict(copy_of_chunk_0(&mut t, &[9; 100])),
        Rejection::Again
    );
    assert_eq!(
        verdict(copy_of_chunk_0(&mut t, &[8; 100])),
        Rejection::Again
    );
    match copy_of_chunk_0(&mut t, &[9; 100]) {
        Released::Rejected {
            rejections,
            actual,
            verdict,
            ..
        } => {
            assert_eq!(verdict, Rejection::SameWrongBytes);
            assert_eq!((rejections, actual), (3, digest(&[9; 100])));
        }
        _ => panic!("not rejected"),
    }
    // No count of copies per chunk: differing wrong copies of one chunk until the bytes
    // thrown away pass twice the file's size.
    let mut t = ChunkTable::new(plan, Vec::new(), Some(manifest()), NEVER);
    t.set_corrupt_budget(4);
    for k in 0..6u8 {
        assert_eq!(
            verdict(copy_of_chunk_0(&mut t, &[10 + k; 100])),
            Rejection::Again,
            "copy {k}"
        );
    }
    assert_eq!(
        verdict(copy_of_chunk_0(&mut t, &[7; 100])),
        Rejection::Spent
    );
    assert_eq!(t.corrupt_spent(), (700, 600));
}

/// The budget of bytes thrown away for corruption: twice the file's size, at least
/// `min_copies` chunks (a chunk no larger than the file), saturating.
#[test]
fn the_corrupt_budget_is_bytes_against_the_file_size() {
    use super::super::corrupt_budget;
    // Ten chunks: twice the file.
    assert_eq!(corrupt_budget(1000, 100, 3), 2000);
    assert_eq!(corrupt_budget(1000, 100, 8), 2000);
    // A file of a few chunks gets `min_copies` chunks.
    assert_eq!(corrupt_budget(100, 100, 8), 800);
    assert_eq!(corrupt_budget(250, 100, 8), 800);
    assert_eq!(corrupt_budget(250, 100, 5), 500);
    // A file smaller than a chunk is its own chunk.
    assert_eq!(corrupt_budget(50, 100, 8), 400);
    // At least one copy; nothing for an empty file; no overflow.
    assert_eq!(corrupt_budget(100, 100, 0), 200);
    assert_eq!(corrupt_budget(0, 100, 8), 0);
    assert_eq!(corrupt_budget(u64::MAX / 2 + 1, 1 << 24, 8), u64::MAX);
    // 16 GiB in 16 MiB chunks: 32 GiB may be thrown away, wherever it falls.
    assert_eq!(corrupt_budget(16 << 30, 16 << 20, 8), 32 << 30);

    // The table charges each wrong copy its chunk's length, the short last one included.
    let plan = Plan::new(250, 100);
    let expected = ExpectedChunks {
        chunk_size: 100,
        sha256: vec![digest(&[1; 100]), digest(&[1; 100]), digest(&[1; 50])],
    };
    let mut t = ChunkTable::new(plan, Vec::new(), Some(Arc::new(expected)), NEVER);
    t.set_corrupt_budget(2);
    assert_eq!(t.corrupt_spent(), (0, 500));
    let wrong = |t: &mut ChunkTable, i: usize, byte: u8| {
        let c = t.claim(i).unwrap();
        let len = c.range.len;
        let h = fed(&c.hasher, &vec![byte; len as usize]);
        verdict(t.release(i, 0, len, h, 0))
    };
    // Spread over the chunks: 100 + 100 + 50 + 100 + 50 + 100 = 500, within.
    for (i, byte) in [(0, 2), (1, 2), (2, 2), (0, 3), (2, 3), (1, 3)] {
        assert_eq!(wrong(&mut t, i, byte), Rejection::Again, "chunk {i}");
    }
    assert_eq!(t.corrupt_spent(), (500, 500));
    // One byte more than the budget is too many.
    assert_eq!(wrong(&mut t, 2, 4), Rejection::Spent);
    assert_eq!(t.corrupt_spent(), (550, 500));
}

/// A chunk that did not match the manifest is fetched again as one request: its claim says
/// so, and it is neither cut at the start nor split for an idle connection.
#[test]
fn a_chunk_that_did_not_match_is_fetched_again_whole() {
    let rule = SplitRule {
        min: MIB,
        after: Duration::ZERO,
    };
    let plan = Plan::new(16 * MIB, 8 * MIB);
    let good = vec![1u8; (8 * MIB) as usize];
    let expected = ExpectedChunks {
        chunk_size: 8 * MIB,
        sha256: vec![digest(&good), digest(&good)],
    };
    let mut t = ChunkTable::new(plan, Vec::new(), Some(Arc::new(expected)), rule);
    let a = t.claim(0).unwrap();
    assert!(!a.whole);
    let h = fed(&a.hasher, &vec![2u8; (8 * MIB) as usize]);
    assert_eq!(verdict(t.release(0, 0, 8 * MIB, h, 0)), Rejection::Again);
    // Not cut in parts for idle connections at the start (chunk 1 is).
    assert_eq!(t.presplit(4), 1);
    assert!(t.chunks[0].parts.len() == 1 && t.chunks[1].parts.len() == 2);
    let a = t.claim(0).unwrap();
    assert!(a.whole && (a.from, a.at) == (0, 0));
    assert_eq!(a.limit.load(Ordering::Acquire), 8 * MIB);
    // Held, slow: never split (the parts of chunk 1 are, once held).
    assert!(t.steal(Instant::now() + Duration::from_secs(1)).is_none());
    let b = t.claim(1).unwrap();
    assert!(!b.whole);
    let stolen = t.steal(Instant::now() + Duration::from_secs(1)).unwrap();
    assert_eq!(stolen.range.index, 1);
    // Cut short and taken up again: still whole, from where it stopped.
    let h = fed(&a.hasher, &good[..MIB as usize]);
    assert!(matches!(t.release(0, 0, MIB, h, 0), Released::Pending));
    let a = t.claim(0).unwrap();
    assert!(a.whole && a.at == MIB);
    let h = fed(&a.hasher, &good[MIB as usize..]);
    assert!(matches!(t.release(0, 0, 8 * MIB, h, 0), Released::Done));
}

#[test]
fn resumed_chunks() {
    let plan = Plan::new(250, 100);
    let full = Resumed {
        index: 1,
        written: 100,
        complete: true,
        sha256: [1; 32],
        hasher: None,
        spans: Vec::new(),
    };
    let part = Resumed {
        index: 2,
        written: 10,
        complete: false,
        sha256: digest(&[2; 10]),
        hasher: Some(fed(&Sha256::new(), &[2u8; 10])),
        spans: Vec::new(),
    };
    // An incomplete chunk without its hash state is fetched afresh.
    let lost = Resumed {
        index: 0,
        written: 5,
        complete: false,
        sha256: [0; 32],
        hasher: None,
        spans: Vec::new(),
    };
    let mut t = ChunkTable::new(plan, vec![lost, full, part], None, NEVER);
    assert!(t.is_done(1));
    assert_eq!(t.bytes_on_disk(), 110);
    let c = t.claim_next().unwrap();
    assert_eq!((c.range.index, c.at), (0, 0));
    let c = t.claim_next().unwrap();
    assert_eq!((c.range.index, c.at), (2, 10));
}

#[test]
fn with_a_manifest_a_chunk_is_done_only_when_it_matches() {
    let plan = Plan::new(250, 100);
    let expected = ExpectedChunks {
        chunk_size: 100,
        sha256: vec![digest(&[1; 100]), digest(&[2; 100]), digest(&[3; 50])],
    };
    // A resumed complete chunk that does not match the manifest is fetched again.
    let resumed = Resumed {
        index: 1,
        written: 100,
        complete: true,
        sha256: digest(&[9; 100]),
        hasher: None,
        spans: Vec::new(),
    };
    let mut t = ChunkTable::new(plan, vec![resumed], Some(Arc::new(expected)), NEVER);
    assert!(t.has_manifest());
    assert!(!t.is_done(1));
    let c = t.claim_next().unwrap();
    let h = fed(&c.hasher, &[7u8; 100]);
    match t.release(0, 0, 100, h, 0) {
        Released::Rejected {
            rejections,
            actual,
            verdict,
            discarded,
            budget,
        } => {
            assert_eq!((rejections, actual), (1, digest(&[7; 100])));
            // Twice the file, more than the default eight chunks.
            assert_eq!((discarded, budget), (100, 800));
            assert_eq!(verdict, Rejection::Again);
        }
        _ => panic!("not rejected"),
    }
    assert_eq!(t.first_missing(), Some((0, 0)), "nothing kept of it");
    let c = t.claim_next().unwrap();
    assert_eq!(c.range.index, 0, "first in line again");
    let h = fed(&c.hasher, &[1u8; 100]);
    assert!(matches!(t.release(0, 0, 100, h, 0), Released::Done));
    // A manifest cut otherwise is not used.
    let other = ExpectedChunks {
        chunk_size: 50,
        sha256: vec![[0; 32]; 5],
    };
    assert!(!ChunkTable::new(plan, Vec::new(), Some(Arc::new(other)), NEVER).has_manifest());
}

/// A table of one 8 MiB chunk split in two at once: the first part's claim, the second's.
fn split_in_two() -> (ChunkTable, Claim, Claim) {
    let rule = SplitRule {
        min: MIB,
        after: Duration::ZERO,
    };
    let mut t = ChunkTable::new(Plan::new(8 * MIB, 8 * MIB), Vec::new(), None, rule);
    let a = t.claim_next().unwrap();
    let b = t.steal(Instant::now() + Duration::from_secs(1)).unwrap();
    (t, a, b)
}

/// An 8 MiB chunk of bytes `i % 251`.
fn data() -> Vec<u8> {
    (0..8 * MIB).map(|i| (i % 251) as u8).collect()
}

#[test]
fn a_slow_part_is_split_and_the_chunk_assembled_from_both_halves() {
    let data = data();
    let plan = Plan::new(8 * MIB, 8 * MIB);
    let rule = SplitRule {
        min: MIB,
        after: Duration::from_millis(300),
    };
    let expected = ExpectedChunks {
        chunk_size: 8 * MIB,
        sha256: vec![digest(&data)],
    };
    let mut t = ChunkTable::new(plan, Vec::new(), Some(Arc::new(expected)), rule);
    let a = t.claim_next().unwrap();
    let t0 = Instant::now();
    // Too early to judge the holder's pace.
    assert!(t.steal(t0).is_none());
    // 1 MiB in 1 s: 7 MiB left would take 7 s; it is split. 1 MiB is being written.
    let h = fed(&a.hasher, &data[..MIB as usize]);
    t.progress(0, 0, MIB, h.clone().finalize().into());
    assert_eq!(t.reserve(0, 0, 2 * MIB), Some(2 * MIB));
    let b = t.steal(t0 + Duration::from_secs(1)).expect("split");
    assert_eq!(t.splits(), 1);
    // Half of what is left past the reservation, aligned.
    assert_eq!(b.from, 5 * MIB);
    assert_eq!(b.at, b.from);
    assert_eq!(a.limit.load(Ordering::Acquire), 5 * MIB);
    assert_eq!(b.limit.load(Ordering::Acquire), 8 * MIB);
    // The holder may not write past its new end.
    assert_eq!(t.reserve(0, 0, 6 * MIB), Some(5 * MIB));
    // The second half arrives first: the chunk waits for the first.
    let hb = fed(&b.hasher, &data[5 * MIB as usize..]);
    assert!(matches!(
        t.release(0, 5 * MIB, 8 * MIB, hb, 0),
        Released::PartDone
    ));
    assert!(!t.is_done(0));
    let ha = fed(&h, &data[MIB as usize..5 * MIB as usize]);
    let Released::Assemble { start, hasher } = t.release(0, 0, 5 * MIB, ha, 0) else {
        panic!("not assembled");
    };
    assert_eq!(start, 5 * MIB);
    // The holder reads the rest back into the first part's hash state.
    let whole: [u8; 32] = fed(&hasher, &data[start as usize..]).finalize().into();
    assert!(matches!(t.assembled(0, whole), Released::Done));
    assert!(t.all_done());
    assert_eq!(t.digests(), vec![digest(&data)]);
}

/// A part whose bytes are all on disk but that its holder has not given back yet is not
/// finished: the chunk is assembled once, by whoever gives back its last part, and late or
/// repeated calls change nothing.
#[test]
fn a_split_chunk_is_assembled_once_by_its_last_holder() {
    let data = data();
    let (mut t, a, b) = split_in_two();
    let half = b.from as usize;
    // A's last write is on disk, A has not given its part back yet.
    let ha = fed(&a.hasher, &data[..half]);
    t.progress(0, 0, b.from, ha.clone().finalize().into());
    let hb = fed(&b.hasher, &data[half..]);
    assert!(matches!(
        t.release(0, b.from, 8 * MIB, hb.clone(), 0),
        Released::PartDone
    ));
    // Given back twice: the second changes nothing.
    assert!(matches!(
        t.release(0, b.from, 8 * MIB, hb, 0),
        Released::Pending
    ));
    let Released::Assemble { start, hasher } = t.release(0, 0, b.from, ha.clone(), 0) else {
        panic!("not assembled by the last holder");
    };
    assert_eq!(start, b.from);
    assert!(matches!(t.release(0, 0, b.from, ha, 0), Released::Pending));
    assert_eq!(t.reserve(0, 0, 8 * MIB), None, "nothing held");
    let whole: [u8; 32] = fed(&hasher, &data[half..]).finalize().into();
    assert!(matches!(t.assembled(0, whole), Released::Done));
    assert!(matches!(t.assembled(0, whole), Released::PartDone));
    assert_eq!(t.digests(), vec![digest(&data)]);
}

/// The bytes missing are shared among the connections at work (those holding a part, or
/// the workers the count lets run), and are kept count of as parts move.
#[test]
fn what_is_missing_is_shared_among_the_connections() {
    let rule = SplitRule {
        min: MIB,
        after: Duration::ZERO,
    };
    let mut t = ChunkTable::new(Plan::new(32 * MIB, 8 * MIB), Vec::new(), None, rule);
    t.set_workers(4);
    assert_eq!(t.share(32), 8 * MIB);
    assert_eq!(t.share(2), 16 * MIB, "two may run");
    let a = t.claim_next().unwrap();
    t.progress(0, 0, 2 * MIB, [0; 32]);
    assert_eq!((t.bytes_missing(), t.share(1)), (30 * MIB, 30 * MIB));
    // A split adds a holder.
    let b = t.steal(Instant::now() + Duration::from_secs(1)).unwrap();
    assert_eq!(t.share(1), 15 * MIB);
    // Given back short, then fetched whole.
    t.release(0, 0, 3 * MIB, a.hasher, 0);
    assert_eq!((t.bytes_missing(), t.share(1)), (29 * MIB, 29 * MIB));
    t.release(0, b.from, 8 * MIB, b.hasher, 0);
    assert_eq!(t.bytes_missing(), 29 * MIB - (8 * MIB - b.from));
}

/// A request promised to the table (reserved up to its end) is never cut: the split falls
/// past it, so the holder reads every byte it asked for.
#[test]
fn a_split_falls_past_the_request_in_flight() {
    let rule = SplitRule {
        min: MIB,
        after: Duration::ZERO,
    };
    let mut t = ChunkTable::new(Plan::new(8 * MIB, 8 * MIB), Vec::new(), None, rule);
    let a = t.claim_next().unwrap();
    assert_eq!(t.reserve(0, 0, 6 * MIB), Some(6 * MIB));
    let b = t.steal(Instant::now() + Duration::from_secs(1)).unwrap();
    assert_eq!(b.from, 7 * MIB, "half of what is past the request");
    assert_eq!(a.limit.load(Ordering::Acquire), 7 * MIB);
    // With less than two smallest parts past the request, nothing is split.
    let mut t = ChunkTable::new(Plan::new(8 * MIB, 8 * MIB), Vec::new(), None, rule);
    let _a = t.claim_next().unwrap();
    assert_eq!(t.reserve(0, 0, 7 * MIB), Some(7 * MIB));
    assert!(t.steal(Instant::now() + Duration::from_secs(1)).is_none());
}

#[test]
fn only_slow_parts_with_enough_left_are_split() {
    let plan = Plan::new(8 * MIB, 8 * MIB);
    // `done` bytes of the 8 MiB in the first second: is the rest split?
    let split = |done: u64, after_ms: u64| {
        let rule = SplitRule {
            min: MIB,
            after: Duration::from_millis(after_ms),
        };
        let mut t = ChunkTable::new(plan, Vec::new(), None, rule);
        let _a = t.claim_next().unwrap();
        let t0 = Instant::now();
        t.progress(0, 0, done, [0; 32]);
        t.steal(t0 + Duration::from_secs(1)).is_some()
    };
    // 4 MiB left at 4 MiB/s: a second to go.
    assert!(split(4 * MIB, 300));
    assert!(!split(4 * MIB, 1500), "it would be done sooner than that");
    // 1.5 MiB left: too little to cut in two 1 MiB parts.
    assert!(!split(6 * MIB + MIB / 2, 0));
    // Nothing received yet: as slow as can be.
    assert!(split(0, 300));
}

#[test]
fn the_spans_of_a_split_chunk_are_recorded_and_resumed() {
    let data = data();
    let (mut t, a, b) = split_in_two();
    assert_eq!(b.from, 4 * MIB);
    // Both cut: 1 MiB of the first half and 2 MiB of the second are on disk.
    let ha = fed(&a.hasher, &data[..MIB as usize]);
    assert!(matches!(t.release(0, 0, MIB, ha, 0), Released::Pending));
    let hb = fed(&b.hasher, &data[4 * MIB as usize..6 * MIB as usize]);
    assert!(matches!(
        t.release(0, 4 * MIB, 6 * MIB, hb.clone(), 0),
        Released::Pending
    ));
    assert_eq!(t.bytes_on_disk(), 3 * MIB);
    let rec = t.records();
    assert_eq!(rec.len(), 1);
    assert_eq!(rec[0].written, MIB);
    assert_eq!(rec[0].sha256, hex::encode(digest(&data[..MIB as usize])));
    assert_eq!(rec[0].spans.len(), 1);
    assert_eq!(
        (rec[0].spans[0].start, rec[0].spans[0].written),
        (4 * MIB, 2 * MIB)
    );
    assert_eq!(
        rec[0].spans[0].sha256,
        hex::encode(digest(&data[4 * MIB as usize..6 * MIB as usize]))
    );
    // Resumed from that record: the two gaps are what is left to fetch.
    let plan = Plan::new(8 * MIB, 8 * MIB);
    let rule = SplitRule {
        min: MIB,
        after: Duration::ZERO,
    };
    let resumed = Resumed {
        index: 0,
        written: MIB,
        complete: false,
        sha256: digest(&data[..MIB as usize]),
        hasher: Some(fed(&Sha256::new(), &data[..MIB as usize])),
        spans: vec![(4 * MIB, 2 * MIB, hb)],
    };
    let mut t = ChunkTable::new(plan, vec![resumed], None, rule);
    assert_eq!(t.bytes_on_disk(), 3 * MIB);
    let a = t.claim_next().unwrap();
    assert_eq!(
        (a.from, a.at, a.limit.load(Ordering::Acquire)),
        (0, MIB, 4 * MIB)
    );
    let b = t.claim_next().unwrap();
    assert_eq!(
        (b.from, b.at, b.limit.load(Ordering::Acquire)),
        (4 * MIB, 6 * MIB, 8 * MIB)
    );
    let ha = fed(&a.hasher, &data[MIB as usize..4 * MIB as usize]);
    assert!(matches!(
        t.release(0, 0, 4 * MIB, ha, 0),
        Released::PartDone
    ));
    let hb = fed(&b.hasher, &data[6 * MIB as usize..]);
    let Released::Assemble { start, hasher } = t.release(0, 4 * MIB, 8 * MIB, hb, 0) else {
        panic!("not assembled");
    };
    let whole: [u8; 32] = fed(&hasher, &data[start as usize..]).finalize().into();
    assert_eq!(whole, digest(&data));
    // A resumed chunk whose parts are all on disk fetches its last span again.
    let all = Resumed {
        index: 0,
        written: 4 * MIB,
        complete: false,
        sha256: [0; 32],
        hasher: Some(Sha256::new()),
        spans: vec![(4 * MIB, 4 * MIB, Sha256::new())],
    };
    let mut t = ChunkTable::new(plan, vec![all], None, rule);
    assert_eq!(t.bytes_on_disk(), 4 * MIB);
    assert_eq!(t.claim_next().unwrap().from, 4 * MIB);
    assert!(t.claim_next().is_none());
}
