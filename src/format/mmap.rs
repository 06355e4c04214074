//! The one place with `unsafe`: memory-mapping a model file read-only.

use std::fs::File;
use std::io;
use std::path::Path;

/// A read-only memory map of a whole file.
///
/// Tensor views borrow from it (`&'map [u8]`), so the borrow checker keeps every view from
/// outliving the map. An empty file is represented without a mapping (`mmap` of length 0
/// is an error on Linux).
#[derive(Debug)]
pub struct Mmap {
    map: Option<memmap2::Mmap>,
}

impl Mmap {
    /// Map `file` read-only.
    ///
    /// # Safety contract (upheld by the caller's environment, not by Rust)
    ///
    /// A memory map is only sound while nobody truncates or rewrites the file: a truncation
    /// turns reads of the lost pages into `SIGBUS`, a rewrite changes bytes under a `&[u8]`.
    /// weight-inspect maps files that it only reads, and wi-fetch maps a blob only after it
    /// has been completed, synced and renamed into place under its lock; blobs are never
    /// modified in place afterwards (a new version is a new blob). A caller that maps files
    /// that other programs may rewrite concurrently accepts that risk, as every
    /// memory-mapping reader (llama.cpp, safetensors, ripgrep) does.
    pub fn open(file: &File) -> io::Result<Mmap> {
        let len = file.metadata()?.len();
        if len == 0 {
            return Ok(Mmap { map: None });
        }
        // SAFETY: the map is read-only and private to this process; the file is not
        // modified by this crate while mapped (see the contract above). All access goes
        // through `&[u8]` with bounds checked by slice indexing, so no read can go beyond
        // the mapped length.
        #[allow(unsafe_code)]
        let map = unsafe { memmap2::MmapOptions::new().map(file)? };
        Ok(Mmap { map: Some(map) })
    }

    /// Map the file at `path`.
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
