//! The one place with `unsafe`: memory-mapping a model file read-only, and asking the kernel
//! for the pages of memory about to be written (`prefault`).

use std::fs::File;
use std::io;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Each map's number, for [`Mmap::id`].
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The size of a page of memory.
pub(crate) fn page_size() -> usize {
    // SAFETY: `sysconf` has no preconditions.
    #[allow(unsafe_code)]
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as usize,
        _ => 4096,
    }
}

/// Asks the kernel to back the whole pages inside `buf` with memory now, as a first write
/// would, without changing a byte (`MADV_POPULATE_WRITE`, Linux 5.14): fresh memory costs its
/// page faults here, on the calling thread, instead of in whoever writes it next. Returns
/// false where the kernel cannot (an older kernel, another system, memory it refuses), in
/// which case nothing happened and the first write faults the pages in as usual.
pub(crate) fn prefault(buf: &mut [u8]) -> bool {
    #[cfg(target_os = "linux")]
    {
        let page = page_size();
        let start = buf.as_mut_ptr() as usize;
        let Some(end) = start.checked_add(buf.len()) else {
            return false;
        };
        let first = start.div_ceil(page) * page;
        let last = end / page * page;
        if first >= last {
            return true;
        }
        #[allow(unsafe_code)]
        // SAFETY: `first..last` is page-aligned and lies inside `buf`, which the caller holds
        // exclusively (`&mut`) for the whole call, so no other reference observes the pages.
        // MADV_POPULATE_WRITE only populates page tables writable, as a write would, "without
        // the actual memory access": no byte of `buf` changes and no mapping is replaced, so
        // every pointer into it stays valid. Failure is reported as an error, never a signal.
        let r = unsafe {
            libc::madvise(
                first as *mut libc::c_void,
                last - first,
                libc::MADV_POPULATE_WRITE,
            )
        };
        r == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = buf;
        false
    }
}

/// A read-only memory map of a whole file.
///
/// Tensor views borrow from it (`&'map [u8]`), so the borrow checker keeps every view from
/// outliving the map. An empty file is represented without a mapping (`mmap` of length 0
/// is an error on Linux).
///
/// # What is promised, and by whom
///
/// A memory map is only sound while nobody truncates or rewrites the file: a truncation turns
/// reads of the lost pages into `SIGBUS`, a rewrite changes bytes under a `&[u8]`. Rust cannot
/// check that, so the promise is made in three parts:
///
/// - **This crate never writes a file it maps in place.** `wi-fetch` maps a blob (or a
///   `--local-dir` file) only once it has been completed, synced and renamed into place under
///   its lock; a repair writes a new file beside it and renames that over the old name, so
///   whoever has the old file mapped keeps its bytes, unchanged, until they unmap it (the
///   inode lives until then). Removing a file (`cache rm`, `cache prune`) unlinks it, which a
///   map survives the same way.
/// - **[`Mmap::open`] holds a shared advisory lock** (`flock(LOCK_SH)`) on the file for as
///   long as the map lives. Another program that must rewrite a file in place can take an
///   exclusive lock first: it then waits for the readers, and a reader does not map a file
///   whose writer holds that lock (an error saying so, never a wait).
/// - **A program that truncates or rewrites the file without that lock** makes reading its
///   lost pages fault, as it does for every memory-mapping reader (`numpy.memmap`,
///   llama.cpp, safetensors' mmap). [`Mmap::detach`] takes a range out of that risk by
///   copying it (what the Python package does for the views that outlive a closed model).
///   [`Mmap::open_unlocked`] maps without the lock, for a caller that guarantees it itself.
#[derive(Debug)]
pub struct Mmap {
    map: Option<memmap2::Mmap>,
    /// The file, kept open for its shared lock (released when the map is dropped; no lock for
    /// [`Mmap::open_unlocked`]) and for [`Mmap::release`]'s advice.
    file: Option<File>,
    /// This map's number (unique in the process).
    id: u64,
    /// Whether some range was [`Mmap::detach`]ed (its pages are anonymous copies, which
    /// [`Mmap::release`] must never drop); held by both for their whole work.
    detached: Mutex<bool>,
    /// Whether [`Mmap::small_pages`] was asked.
    small_pages: std::sync::Once,
}

impl Mmap {
    /// Map `file` read-only, holding a shared advisory lock on it while the map lives (see
    /// the type's docs for what that promises). A file another process holds an exclusive
    /// lock on (a writer at work) is refused with [`io::ErrorKind::WouldBlock`]. On a file
    /// system that has no such locks (some network and FUSE file systems answer `ENOLCK` or
    /// `EOPNOTSUPP`) the file is mapped without one: no writer there could take the lock
    /// either.
    pub fn open(file: &File) -> io::Result<Mmap> {
        let locked = file.try_clone()?;
        let held = match fs4::fs_std::FileExt::try_lock_shared(&locked) {
            Ok(true) => true,
            Ok(false) => {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "another process holds an exclusive lock on the file (it is being written)",
                ))
            }
            Err(_) => false,
        };
        // SAFETY: the shared lock is held for the life of the map (where the file system
        // has locks), and this crate never writes a mapped file in place (see the type's
        // docs): the contract of `open_unlocked` is met as far as any cooperating writer goes.
        #[allow(unsafe_code)]
        let mut map = unsafe { Mmap::open_unlocked(file)? };
        if held {
            map.file = Some(locked);
        }
        Ok(map)
    }

    /// Map `file` read-only, without the shared lock of [`Mmap::open`].
    ///
    /// # Safety
    ///
    /// Nobody may truncate or write the file while the map (or any view borrowed from it)
    /// lives: a truncation makes reads of the lost pages raise `SIGBUS`, a write changes bytes
    /// that Rust assumes immutable behind a `&[u8]`.
    #[allow(unsafe_code)]
    pub unsafe fn open_unlocked(file: &File) -> io::Result<Mmap> {
        let len = file.metadata()?.len();
        if len == 0 {
            return Ok(Mmap::from_map(None));
        }
        // SAFETY: the map is read-only and private to this process; the caller guarantees the
        // file is not modified while mapped (this function's contract). All access goes
        // through `&[u8]` with bounds checked by slice indexing, so no read can go beyond the
        // mapped length.
        let map = unsafe { memmap2::MmapOptions::new().map(file)? };
        let mut map = Mmap::from_map(Some(map));
        map.file = file.try_clone().ok();
        Ok(map)
    }

    fn from_map(map: Option<memmap2::Mmap>) -> Mmap {
        Mmap {
            map,
            file: None,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            detached: Mutex::new(false),
            small_pages: std::sync::Once::new(),
        }
    }

    /// The file mapped (the descriptor the map was made from, kept open with it), if it could
    /// be kept: what a reader that must not fault reads by position instead of through the map.
    pub fn file(&self) -> Option<&File> {
        self.file.as_ref()
    }

    /// A number for this map, unique among the maps of the process.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Replace the pages that hold `range` (bytes of the map) with private copies of their
    /// bytes, at the same addresses: every view into them reads the same bytes ever after,
    /// whatever then happens to the file (truncated or rewritten by a program that ignores
    /// the lock). Costs anonymous memory for the pages copied (the range, rounded out to
    /// whole pages). A range outside the map is clipped; an empty one does nothing.
    ///
    /// The copy reads the file's bytes as they are now: call it before they may change (the
    /// Python package calls it when a model is closed, for the views that outlive it).
    pub fn detach(&self, range: Range<usize>) -> io::Result<()> {
        let Some(map) = &self.map else {
            return Ok(());
        };
        let Some(pages) = self.pages(range) else {
            return Ok(());
        };
        // From now on nothing is released (see `release`), and not while this runs.
        let mut detached = self.detached.lock().unwrap_or_else(|e| e.into_inner());
        *detached = true;
        let (first, last) = (pages.start, pages.end);
        let len = last - first;
        let copied = map.len().min(last) - first;
        let base = map.as_ptr();
        #[allow(unsafe_code)]
        // SAFETY: `first..last` lies within the mapping (page-aligned, and the mapping covers
        // the whole pages of the file's length). The anonymous pages are new and private;
        // `copied` bytes are read from the map (inside its length) into them. `mremap` with
        // MREMAP_FIXED atomically replaces the mapping at `base + first` with them: the
        // addresses stay valid and hold the same bytes, so every `&[u8]` borrowed from the map
        // still reads exactly what it read. The pages are made read-only before the swap, as
        // the map was. memmap2 unmaps the whole original range when the map is dropped, which
        // unmaps the moved pages too.
        unsafe {
            let anon = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if anon == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            std::ptr::copy_nonoverlapping(base.add(first), anon.cast::<u8>(), copied);
            let fail = |anon| {
                let e = io::Error::last_os_error();
                libc::munmap(anon, len);
                Err(e)
            };
            if libc::mprotect(anon, len, libc::PROT_READ) != 0 {
                return fail(anon);
            }
            let target = base.add(first).cast_mut().cast::<libc::c_void>();
            let moved = libc::mremap(
                anon,
                len,
                len,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                target,
            );
            if moved == libc::MAP_FAILED {
                return fail(anon);
            }
        }
        Ok(())
    }

    /// The whole pages that hold `range` (clipped to the map): `None` when that is empty.
    /// The end may pass the map's length, within its last page (the mapping covers it).
    pub fn pages(&self, range: Range<usize>) -> Option<Range<usize>> {
        let len = self.map.as_ref()?.len();
        let page = page_size();
        let end = range.end.min(len);
        (range.start < end).then(|| range.start / page * page..end.div_ceil(page) * page)
    }

    /// Release the pages that hold `range` (rounded out to whole pages, clipped to the map):
    /// they leave this process's memory (`madvise(MADV_DONTNEED)`), then those of them no
    /// process maps any more leave the page cache (`posix_fadvise(POSIX_FADV_DONTNEED)`: clean
    /// file pages are dropped, never written; pages another view or process still maps stay).
    /// Views of those bytes stay valid: reading them again faults the same bytes back in from
    /// the file. Returns the bytes released; nothing once a range of the map has been
    /// [`Mmap::detach`]ed (its private copies would be lost).
    ///
    /// (`MADV_PAGEOUT` is not used: it reclaims whole large folios, which takes pages of the
    /// neighbouring tensors, held ones included, out of the process too.)
    pub fn release(&self, range: Range<usize>) -> io::Result<usize> {
        let (Some(map), Some(pages)) = (&self.map, self.pages(range)) else {
            return Ok(0);
        };
        let detached = self.detached.lock().unwrap_or_else(|e| e.into_inner());
        if *detached {
            return Ok(0);
        }
        let len = pages.end - pages.start;
        #[allow(unsafe_code)]
        // SAFETY: `pages` lies within the mapping (page-aligned, whole pages of its length).
        // The map is a read-only private mapping of the file whose pages are never written
        // (PROT_READ), and no range of it has been detached (checked above, under the lock
        // `detach` takes): every page in it is the file's page, so dropping it loses nothing.
        // The next read of those addresses faults the same bytes back in from the file, which
        // nobody may change while it is mapped (the type's contract): every `&[u8]` into the
        // range keeps reading exactly what it read.
        unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, pages.start, len)?;
        }
        if let Some(file) = &self.file {
            use std::os::fd::AsRawFd;
            let file_len = map.len().min(pages.end) - pages.start;
            // Best effort (the page cache keeps them otherwise); only advice, never contents.
            // SAFETY: `posix_fadvise` reads no memory of ours; the descriptor is open.
            #[allow(unsafe_code)]
            unsafe {
                libc::posix_fadvise(
                    file.as_raw_fd(),
                    pages.start as libc::off_t,
                    file_len as libc::off_t,
                    libc::POSIX_FADV_DONTNEED,
                );
            }
        }
        Ok(len)
    }

    /// Map the file in small pages only from now on (`MADV_NOHUGEPAGE`), once. A page cache
    /// kept in large folios may otherwise be mapped 2 MiB at a time (a PMD), and releasing
    /// part of such a mapping ([`Mmap::release`]) unmaps all of it, neighbours included. What
    /// is mapped already (the header's pages, perhaps in a PMD) is unmapped, to fault back in
    /// small pages. Best effort.
    pub fn small_pages(&self) {
        self.small_pages.call_once(|| {
            let Some(map) = &self.map else {
                return;
            };
            let _ = map.advise(memmap2::Advice::NoHugePage);
            let detached = self.detached.lock().unwrap_or_else(|e| e.into_inner());
            if !*detached {
                #[allow(unsafe_code)]
                // SAFETY: as in `release`: the whole map, never written and never detached
                // (checked under the lock), read-only and unchanged: its pages fault back in.
                unsafe {
                    let _ = map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed);
                }
            }
        });
    }

    /// How many bytes of the pages that hold `range` are not in memory (not in the page cache):
    /// what reading `range` will read from storage. `mincore`, asked a bounded number of pages
    /// at a time.
    pub fn not_resident(&self, range: Range<usize>) -> io::Result<u64> {
        let (Some(map), Some(pages)) = (&self.map, self.pages(range)) else {
            return Ok(0);
        };
        let page = page_size();
        const STEP: usize = 1 << 16; // pages a call (256 MiB of 4 KiB pages)
        let mut vec = vec![0u8; STEP.min((pages.end - pages.start) / page)];
        let mut missing = 0u64;
        let mut at = pages.start;
        while at < pages.end {
            let n = STEP.min((pages.end - at) / page);
            #[allow(unsafe_code)]
            // SAFETY: `at` is page-aligned and `at..at + n * page` lies within the mapping
            // (inside `pages`); `vec` has room for the `n` entries mincore writes.
            let rc = unsafe {
                libc::mincore(
                    map.as_ptr().add(at).cast_mut().cast::<libc::c_void>(),
                    n * page,
                    vec.as_mut_ptr(),
                )
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
            missing += vec[..n].iter().filter(|&&v| v & 1 == 0).count() as u64;
            at += n * page;
        }
        Ok(missing * page as u64)
    }

    /// Map the file at `path` (with the shared lock of [`Mmap::open`]).
    pub fn open_path(path: &Path) -> io::Result<Mmap> {
        Mmap::open(&File::open(path)?)
    }

    /// The mapped bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    /// Tell the kernel `len` bytes from `offset` will be read soon, so that it starts reading
    /// them in (a tensor handed to a caller who will read it). Best effort: errors, and a range
    /// past the end, are ignored.
    pub fn advise_will_need(&self, offset: usize, len: usize) {
        if let Some(map) = &self.map {
            let end = offset.saturating_add(len).min(map.len());
            if offset < end {
                let _ = map.advise_range(memmap2::Advice::WillNeed, offset, end - offset);
            }
        }
    }

    /// Tell the kernel the map will be read sequentially (larger read-ahead) (used before hashing
    /// every tensor). Best effort: errors are ignored.
    pub fn advise_sequential(&self) {
        if let Some(map) = &self.map {
            let _ = map.advise(memmap2::Advice::Sequential);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Mmap;
    use std::io::Write;

    /// Prefaulting changes no byte, whatever the alignment, and Linux does it.
    #[test]
    fn prefault_keeps_every_byte() {
        let page = super::page_size();
        let mut fresh = vec![0u8; page * 64 + 3];
        let mut old: Vec<u8> = (0..page * 5 + 11).map(|i| (i % 251) as u8).collect();
        let before = old.clone();
        let faulted = super::prefault(&mut fresh[1..]) && super::prefault(&mut old[3..]);
        assert!(fresh.iter().all(|&b| b == 0));
        assert_eq!(old, before);
        assert!(
            super::prefault(&mut old[..1]),
            "less than a page: nothing to do"
        );
        assert_eq!(faulted, cfg!(target_os = "linux"));
    }

    /// Detached bytes are the process's own: the file truncated and rewritten afterwards, a
    /// slice borrowed before reads what it read (without the copy, this read would be SIGBUS).
    #[test]
    fn detached_bytes_survive_the_file_truncated() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        let page = 4096;
        let data: Vec<u8> = (0..5 * page + 100).map(|i| (i % 251) as u8).collect();
        f.write_all(&data).unwrap();
        f.flush().unwrap();
        let map = Mmap::open_path(f.path()).unwrap();
        let view = &map.as_bytes()[page + 10..4 * page + 50];
        map.detach(page + 10..4 * page + 50).unwrap();
        // The end of the file too: the last, partial page.
        map.detach(5 * page..data.len()).unwrap();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(f.path())
            .unwrap();
        file.set_len(0).unwrap();
        file.set_len(data.len() as u64).unwrap(); // zeros where the bytes were
        assert!(view == &data[page + 10..4 * page + 50]);
        assert!(map.as_bytes()[5 * page..] == data[5 * page..]);
        // Outside the detached pages, the map reads the file as it is now.
        assert_eq!(map.as_bytes()[10], 0);
    }

    /// Released pages read back the same bytes; detached ones are never released (their
    /// private copies would read as zeros).
    #[test]
    fn released_pages_read_back_and_detached_ones_are_kept() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        let page = super::page_size();
        let data: Vec<u8> = (0..8 * page).map(|i| (i % 251) as u8 + 1).collect();
        f.write_all(&data).unwrap();
        f.flush().unwrap();
        let map = Mmap::open_path(f.path()).unwrap();
        let view = map.as_bytes();
        assert!(view == &data[..]);
        assert_eq!(map.release(page + 1..3 * page).unwrap(), 2 * page);
        assert!(view == &data[..]);
        assert_eq!(map.release(10 * page..11 * page).unwrap(), 0); // past the end
        map.detach(4 * page..5 * page).unwrap();
        assert_eq!(map.release(0..8 * page).unwrap(), 0);
        std::fs::OpenOptions::new()
            .write(true)
            .open(f.path())
            .unwrap()
            .set_len(0)
            .unwrap();
        assert!(view[4 * page..5 * page] == data[4 * page..5 * page]);
    }

    /// A reader holds a shared lock while the map lives; a writer's exclusive lock refuses
    /// new readers.
    #[test]
    fn the_map_holds_a_shared_lock() {
        use fs4::fs_std::FileExt;
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), b"0123456789").unwrap();
        let writer = std::fs::File::open(f.path()).unwrap();
        let map = Mmap::open_path(f.path()).unwrap();
        assert!(!FileExt::try_lock_exclusive(&writer).unwrap());
        drop(map);
        assert!(FileExt::try_lock_exclusive(&writer).unwrap());
        let e = Mmap::open_path(f.path()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
    }
}
