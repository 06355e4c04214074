//! The resume log of a Xet file's framing: the chunks' boundaries its xorbs delivered (see
//! [`crate::xet::framing`]), appended beside the resume state at each checkpoint, so that a
//! download stopped and resumed still hashes the bytes it kept over their own chunks. Read back
//! (bounded by the file's size, for this file's Xet hash only) when the state's bytes are
//! resumed; removed with the state. Like the state, it is a hint: a wrong boundary can only make
//! the Xet hash differ, never make wrong bytes pass (the SHA-256 decides).

use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::safe_fs;
use crate::xet::framing::{log_header, log_records, max_log_bytes, Framing, LOG_RECORD};
use crate::xet::XetHash;

/// See the module docs.
pub(crate) struct FramingLog {
    framing: Arc<Framing>,
    file_hash: XetHash,
    path: PathBuf,
    /// Bytes of the log written (0: not started, the next append starts it afresh).
    end: Mutex<u64>,
}

impl FramingLog {
    /// The log at `path` of `framing`, the chunks of the file of Xet hash `file_hash`.
    pub(crate) fn new(framing: Arc<Framing>, file_hash: XetHash, path: PathBuf) -> FramingLog {
        FramingLog {
            framing,
            file_hash,
            path,
            end: Mutex::new(0),
        }
    }

    fn end(&self) -> std::sync::MutexGuard<'_, u64> {
        self.end.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Before the bytes on disk are hashed (blocking): when `resuming`, what an earlier run
    /// logged is read into the framing (a log of another file, unreadable or too large, is
    /// started afresh); else the log is removed.
    pub(crate) fn open(&self, resuming: bool) -> io::Result<()> {
        let mut end = self.end();
        *end = 0;
        if !resuming {
            return safe_fs::remove_file_if_exists(&self.path);
        }
        let limit = max_log_bytes(self.framing.size());
        if let Ok(Some(bytes)) = safe_fs::read_bounded(&self.path, limit) {
            if self.framing.load_log(&bytes, &self.file_hash) {
                let head = log_header(&self.file_hash).len();
                // Whole records only: one cut short by a crash is written over.
                *end = (head + (bytes.len() - head) / LOG_RECORD * LOG_RECORD) as u64;
            }
        }
        Ok(())
    }

    /// Appends the chunks recorded since the last append and syncs them (blocking; at a
    /// checkpoint, before the state).
    pub(crate) fn append(&self) -> io::Result<()> {
        let mut end = self.end();
        let new = self.framing.take_new();
        if new.is_empty() && *end > 0 {
            return Ok(());
        }
        let file = safe_fs::open_rw(&self.path)?;
        if *end == 0 {
            file.set_len(0)?;
            let head = log_header(&self.file_hash);
            file.write_all_at(&head, 0)?;
            *end = head.len() as u64;
        }
        let records = log_records(&new);
        file.write_all_at(&records, *end)?;
        file.sync_data()?;
        *end += records.len() as u64;
        Ok(())
    }
}
