//! The one place with `unsafe`: memory-mapping a model file read-only ([`Mmap`]) or
//! copy-on-write under a read lease ([`LeasedMap`]), and asking the kernel for the pages of
//! memory about to be written (`prefault`).

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
        // SAFETY: `first..last` lies within the mapping (page-aligned, and the mapping covers
        // the whole pages of the file's length), `copied` bytes of it inside the map's length;
        // the map was made read-only and stays so. memmap2 unmaps the whole original range
        // when the map is dropped, which unmaps the moved pages too.
        #[allow(unsafe_code)]
        unsafe {
            swap_in_copy(map.as_ptr(), first, len, copied, libc::PROT_READ)
        }
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

/// Replaces the `len` bytes of mapping at `base + first` (page-aligned) with new anonymous
/// pages holding a copy of their first `copied` bytes (the rest zeros), protected `prot`.
///
/// # Safety
///
/// `base + first .. base + first + len` must be whole pages of one live mapping of this
/// process, its first `copied` bytes readable. The addresses stay valid and read the same
/// bytes: `mremap` with `MREMAP_FIXED` swaps the new pages in atomically. A write to those
/// bytes by another thread between the copy and the swap is lost: the caller makes sure
/// there is none, or accepts that.
#[allow(unsafe_code)]
unsafe fn swap_in_copy(
    base: *const u8,
    first: usize,
    len: usize,
    copied: usize,
    prot: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the caller's contract. The anonymous pages are new and private; `copied`
    // bytes are read from the mapping into them before they are made `prot` and moved over
    // the old pages, whose addresses so stay mapped throughout.
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
        if libc::mprotect(anon, len, prot) != 0 {
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

/// A private, writable (copy-on-write) map of a whole file, held under a read lease so that
/// no change to the file can fault or change it: the page cache's own pages, shared with
/// every other reader of the file until somebody writes them.
///
/// This is what a loader that hands out tensors sharing memory with the file needs (PyTorch
/// tensors as safetensors' mmap makes them: writable, their writes private). What keeps the
/// process alive is the lease (`fcntl(F_SETLEASE, F_RDLCK)`): the kernel grants it only while
/// nobody has the file open for writing, and before anybody opens it for writing or truncates
/// it, the kernel signals the holder (`SIGIO`) and holds the writer back (up to
/// `/proc/sys/fs/lease-break-time` seconds, 45 by default). A thread of this module then
/// replaces every page of every map of that file with anonymous copies of its bytes, 2 MiB at
/// a time at the same addresses (as [`Mmap::detach`] does), and lets the writer go. The map so
/// keeps the bytes it had, whatever the writer does: [`LeaseState::Copied`]. Copying costs
/// anonymous memory of the map's size, once, and only when the file is written. A write into
/// the map by another thread of the process while its 2 MiB are being copied may be lost.
///
/// A lease is granted on a local file system to the file's owner (or a process with
/// `CAP_LEASE`), never while the file is open for writing: [`LeasedMap::open`] fails
/// otherwise (`WouldBlock` for a writer, the system's error for the rest), and a caller
/// reads the file by position instead. The first map installs a handler for `SIGIO` (which
/// otherwise ends the process): a program that replaces it loses the copies (the writer then
/// goes on after the lease-break time), and so does a map larger than can be copied in that
/// time ([`LeaseState::Lost`] when copying failed).
///
/// Bytes are read through [`LeasedMap::bytes`] and handed out through [`LeasedMap::as_ptr`];
/// the promise between the two (never a range borrowed for reading while it may be written
/// through a pointer handed out) is the caller's, as each says.
#[derive(Debug)]
pub struct LeasedMap {
    map: Option<memmap2::MmapMut>,
    /// The file's own open description: it holds the lease and the shared `flock`.
    file: File,
    len: usize,
    id: u64,
    state: Mutex<LeaseState>,
}

/// What became of a [`LeasedMap`]'s lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// Held: the map's pages are the page cache's, and nobody can write the file.
    Held,
    /// Somebody opened the file for writing: every page of the map was made a private copy
    /// first, the lease given up. The bytes are those the file had.
    Copied,
    /// Somebody opened the file for writing and the pages could not all be copied (memory
    /// refused): what the map reads may change, or fault.
    Lost,
}

/// Maps holding a lease, for the thread that answers lease breaks.
static LEASED: Mutex<Vec<(u64, std::sync::Weak<LeasedMap>)>> = Mutex::new(Vec::new());
/// The thread that answers lease breaks, started with the first lease (its outcome kept).
static WATCHER: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();

impl LeasedMap {
    /// Map the file open as `file` (a new open description of it, so that the lease and the
    /// lock live exactly as long as the map), under a read lease and a shared `flock`.
    ///
    /// Fails, without mapping, where a lease cannot be had: the file open for writing
    /// anywhere (`WouldBlock`), a writer holding `flock`'s exclusive lock (`WouldBlock`),
    /// another owner, a network or FUSE file system, a system without leases (their error).
    pub fn open(file: &File) -> io::Result<std::sync::Arc<LeasedMap>> {
        #[cfg(target_os = "linux")]
        {
            Self::open_linux(file)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = file;
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "read leases are a Linux facility",
            ))
        }
    }

    #[cfg(target_os = "linux")]
    fn open_linux(file: &File) -> io::Result<std::sync::Arc<LeasedMap>> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        if let Err(why) = WATCHER.get_or_init(start_watcher) {
            return Err(io::Error::other(why.clone()));
        }
        // A new open description of the same file (not a duplicate descriptor: leases and
        // `flock` belong to the description, and the caller's may outlive the map).
        let own = File::open(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
        let (a, b) = (file.metadata()?, own.metadata()?);
        if (a.dev(), a.ino()) != (b.dev(), b.ino()) || !b.is_file() {
            return Err(io::Error::other("the file reopened is not the file given"));
        }
        // Registered under the lock, before the lease exists: a break arriving meanwhile
        // waits for the lock and then finds the map.
        let mut leased = LEASED.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: F_SETLEASE takes an int argument and touches no memory of ours.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::fcntl(own.as_raw_fd(), libc::F_SETLEASE, libc::F_RDLCK) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EAGAIN) => io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "the file is open for writing (no read lease while it is)",
                ),
                _ => io::Error::new(e.kind(), format!("no read lease on the file: {e}")),
            });
        }
        let unlease = |own: &File| {
            // SAFETY: as above.
            #[allow(unsafe_code)]
            unsafe {
                libc::fcntl(own.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK)
            };
        };
        // A file system without `flock` has no writer holding it either.
        if let Ok(false) = fs4::fs_std::FileExt::try_lock_shared(&own) {
            unlease(&own);
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "another process holds an exclusive lock on the file (it is being written)",
            ));
        }
        // The length now that nobody can write it.
        let len = match usize::try_from(own.metadata()?.len()) {
            Ok(n) => n,
            Err(_) => {
                unlease(&own);
                return Err(io::Error::other("the file is larger than memory can map"));
            }
        };
        let map = if len == 0 {
            None
        } else {
            // SAFETY: the map is private (copy-on-write): writes through it never reach the
            // file. Nobody can write or truncate the file without breaking the lease just
            // taken, and a break makes every page of the map a private copy before the
            // writer goes on (the watcher thread): no read of the map can fault or see bytes
            // change behind a reference.
            #[allow(unsafe_code)]
            match unsafe { memmap2::MmapOptions::new().len(len).map_copy(&own) } {
                Ok(m) => Some(m),
                Err(e) => {
                    unlease(&own);
                    return Err(e);
                }
            }
        };
        let map = std::sync::Arc::new(LeasedMap {
            map,
            file: own,
            len,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            state: Mutex::new(LeaseState::Held),
        });
        leased.retain(|(_, w)| w.strong_count() > 0);
        leased.push((map.id, std::sync::Arc::downgrade(&map)));
        Ok(map)
    }

    /// The number of bytes mapped (the file's length when it was mapped).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the file was empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What became of the lease.
    pub fn state(&self) -> LeaseState {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The bytes of `range` (`None` outside the map), to read (to hash).
    ///
    /// The map is writable through the pointers [`LeasedMap::as_ptr`] hands out: the caller
    /// borrows here only bytes it has not handed out (a loader hashes a tensor before it
    /// hands it out, never after), so no write can alias the borrow.
    pub fn bytes(&self, range: Range<usize>) -> Option<&[u8]> {
        if range.start > range.end || range.end > self.len {
            return None;
        }
        let Some(map) = &self.map else {
            return Some(&[]);
        };
        // SAFETY: `range` lies inside the mapping (checked), which lives as long as `self`.
        // Its bytes cannot change behind the borrow: the file cannot be written while the
        // lease is held, a break copies pages without changing a byte, and writes through
        // the pointers handed out touch only ranges the caller no longer borrows (this
        // function's contract).
        #[allow(unsafe_code)]
        Some(unsafe { std::slice::from_raw_parts(map.as_ptr().add(range.start), range.len()) })
    }

    /// The address of byte `offset` (at most the length), for memory handed out to be read
    /// and written as the caller's own (a tensor's storage). Valid as long as the map lives.
    pub fn as_ptr(&self, offset: usize) -> Option<*mut u8> {
        let map = self.map.as_ref()?;
        (offset <= self.len).then(|| map.as_ptr().wrapping_add(offset).cast_mut())
    }

    /// Has the kernel read `range` in and map its pages now, on the calling thread
    /// (`MADV_POPULATE_READ`), as reading it would, without reading it: a helper thread so
    /// takes the page faults (and the page cache's filling) off the thread that reads next.
    /// Returns false where the kernel cannot (older than 5.14); a range past the end is clipped.
    pub fn populate(&self, range: Range<usize>) -> bool {
        let Some(map) = &self.map else {
            return true;
        };
        let page = page_size();
        let end = range.end.min(self.len);
        if range.start >= end {
            return true;
        }
        let first = range.start / page * page;
        let last = end.div_ceil(page) * page;
        #[cfg(target_os = "linux")]
        {
            // SAFETY: `first..last` are whole pages of the mapping (it covers the whole pages of
            // its length). MADV_POPULATE_READ faults them in readable as a read would, without
            // touching their bytes or replacing the mapping; a failure (a page the file no
            // longer has) is an error, never a signal.
            #[allow(unsafe_code)]
            let rc = unsafe {
                libc::madvise(
                    map.as_ptr().add(first).cast_mut().cast::<libc::c_void>(),
                    last - first,
                    libc::MADV_POPULATE_READ,
                )
            };
            rc == 0
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (map, first, last);
            false
        }
    }

    /// Every page replaced by an anonymous copy of its bytes, 2 MiB at a time: what a lease
    /// break needs before the writer may go on (a private file mapping's own copies of written
    /// pages do not survive a truncation: the kernel unmaps them too).
    fn copy_all(&self) -> LeaseState {
        let Some(map) = &self.map else {
            return LeaseState::Copied;
        };
        let page = page_size();
        let whole = self.len.div_ceil(page) * page;
        let step = (2 << 20) / page * page;
        let mut at = 0;
        while at < whole {
            let len = step.min(whole - at);
            let copied = len.min(self.len - at);
            // SAFETY: `at..at + len` are whole pages of the mapping (it covers the whole pages
            // of its length), `copied` of its bytes inside that length, readable: the file
            // is unchanged while the writer waits for the lease. The pages stay writable, as
            // the map was. A write into these pages by another thread during the copy of
            // this step may be lost (documented on the type).
            #[allow(unsafe_code)]
            let r = unsafe {
                swap_in_copy(
                    map.as_ptr(),
                    at,
                    len,
                    copied,
                    libc::PROT_READ | libc::PROT_WRITE,
                )
            };
            if r.is_err() {
                return LeaseState::Lost;
            }
            at += len;
        }
        LeaseState::Copied
    }

    /// Answer a break of this map's lease, if there is one: copy, then let go of the lease.
    #[cfg(target_os = "linux")]
    fn answer_break(&self) {
        use std::os::fd::AsRawFd;
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if *state != LeaseState::Held {
            return;
        }
        let fd = self.file.as_raw_fd();
        // SAFETY: F_GETLEASE takes no argument and touches no memory of ours.
        #[allow(unsafe_code)]
        let held = unsafe { libc::fcntl(fd, libc::F_GETLEASE) };
        if held == libc::F_RDLCK {
            return; // not this one: a break asks for F_UNLCK
        }
        *state = self.copy_all();
        // SAFETY: as above.
        #[allow(unsafe_code)]
        unsafe {
            libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK)
        };
    }
}

impl Drop for LeasedMap {
    fn drop(&mut self) {
        LEASED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(id, _)| *id != self.id);
        // Unmapped before the lease goes (the file's description closes after this).
        drop(self.map.take());
    }
}

/// Installs the `SIGIO` handler (it writes a byte to a pipe) and starts the thread that reads
/// the pipe and answers every lease break.
#[cfg(target_os = "linux")]
fn start_watcher() -> Result<(), String> {
    use std::io::Read;
    use std::os::fd::IntoRawFd;
    let (mut rx, tx) = std::os::unix::net::UnixStream::pair().map_err(|e| e.to_string())?;
    tx.set_nonblocking(true).map_err(|e| e.to_string())?;
    // Kept open for the life of the process: the handler writes to it.
    let tx = tx.into_raw_fd();
    // SAFETY: the action only calls `write(2)`, which is async-signal-safe, on a descriptor
    // that is never closed, with a static byte; it allocates nothing, takes no lock and
    // ignores the outcome (a full pipe already says a break is pending).
    #[allow(unsafe_code)]
    unsafe {
        signal_hook_registry::register(libc::SIGIO, move || {
            libc::write(tx, b"!".as_ptr().cast(), 1);
        })
    }
    .map_err(|e| format!("cannot handle SIGIO for read leases: {e}"))?;
    std::thread::Builder::new()
        .name("wi-lease-breaks".into())
        .spawn(move || {
            let mut buf = [0u8; 64];
            loop {
                match rx.read(&mut buf) {
                    Ok(0) => return,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => return,
                }
                let maps: Vec<std::sync::Arc<LeasedMap>> = LEASED
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .filter_map(|(_, w)| w.upgrade())
                    .collect();
                for map in maps {
                    map.answer_break();
                }
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn start_watcher() -> Result<(), String> {
    Err("read leases are a Linux facility".into())
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
    /// A leased map keeps the bytes it had when another program truncates and rewrites the
    /// file (without the lease this read would be SIGBUS); its pages are then copies.
    #[test]
    fn a_leased_map_outlives_the_file_truncated_and_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        let data: Vec<u8> = (0..3 * 4096 + 77).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let map = super::LeasedMap::open(&file).unwrap();
        assert_eq!(map.state(), super::LeaseState::Held);
        assert!(map.bytes(0..data.len()).unwrap() == &data[..]);
        // A write of the process's own, before the break, is kept through it.
        let p = map.as_ptr(4096).unwrap();
        // SAFETY: byte 4096 lies inside the map, which lives; nothing borrows it now.
        #[allow(unsafe_code)]
        unsafe {
            p.write(0xAB)
        };
        let mut data = data;
        data[4096] = 0xAB;
        // Another process truncates the file (the shell's `>`: an open that blocks, where
        // `truncate(1)` opens without blocking and is refused once): the kernel holds it back
        // until the map's pages are copies.
        let status = std::process::Command::new("sh")
            .args(["-c", ": > \"$1\"", "sh"])
            .arg(&path)
            .status()
            .unwrap();
        assert!(status.success());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        std::fs::write(&path, vec![0xEEu8; data.len()]).unwrap();
        assert_eq!(map.state(), super::LeaseState::Copied);
        assert!(map.bytes(0..data.len()).unwrap() == &data[..]);
        assert!(map.bytes(0..data.len() + 1).is_none());
    }

    /// No lease on a file open for writing: the caller is told so (and reads by position).
    #[test]
    fn no_lease_while_the_file_is_open_for_writing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        std::fs::write(&path, b"0123456789").unwrap();
        let writer = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let e = super::LeasedMap::open(&file).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
        drop(writer);
        let map = super::LeasedMap::open(&file).unwrap();
        assert_eq!(map.bytes(2..4).unwrap(), b"23");
        // Writes through the map are the process's own: the file keeps its bytes.
        let p = map.as_ptr(2).unwrap();
        // SAFETY: byte 2 lies inside the map, which lives; nothing borrows it now.
        #[allow(unsafe_code)]
        unsafe {
            p.write(b'X')
        };
        assert_eq!(map.bytes(2..3).unwrap(), b"X");
        assert_eq!(std::fs::read(&path).unwrap(), b"0123456789");
    }
}
