//! The byte cursor of the GGUF reader: the file's byte order and count width, and every
//! length checked against the bytes that remain before it is used.

use std::fmt;

use std::borrow::Cow;

use super::MAX_STRING_LEN;
use crate::format::{FormatError, FormatErrorKind};

/// What is being read, for error messages (cheap to copy; formatted only on error).
#[derive(Debug, Clone, Copy)]
pub(super) enum Ctx<'a> {
    Header(&'static str),
    Key {
        index: u64,
        key: Option<&'a str>,
    },
    Item {
        key: &'a str,
        item: u64,
    },
    Tensor {
        index: u64,
        name: Option<&'a str>,
        part: &'static str,
    },
    ArrayItem(u64),
}

impl fmt::Display for Ctx<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Ctx::Header(what) => f.write_str(what),
            Ctx::Key { index, key: None } => write!(f, "metadata key {index}"),
            Ctx::Key {
                index,
                key: Some(k),
            } => write!(f, "metadata key {index} '{k}'"),
            Ctx::Item { key, item } => write!(f, "key '{key}' array item {item}"),
            Ctx::Tensor {
                index,
                name: None,
                part,
            } => write!(f, "tensor info {index} ({part})"),
            Ctx::Tensor {
                index,
                name: Some(n),
                part,
            } => write!(f, "tensor info {index} '{n}' ({part})"),
            Ctx::ArrayItem(i) => write!(f, "array item {i}"),
        }
    }
}

/// A cursor over the file with the file's byte order and count width.
#[derive(Debug, Clone)]
pub(super) struct Reader<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) pos: usize,
    pub(super) big: bool,
    pub(super) v1: bool,
    pub(super) version: u32,
    pub(super) ctx: Ctx<'a>,
    /// Size of the whole file `bytes` begins (equal to `bytes.len()` unless only a prefix was
    /// read, see [`super::parse_header`]): a length up to it is a cut read, not an absurd one.
    pub(super) file_len: u64,
}

impl<'a> Reader<'a> {
    pub(super) fn new(bytes: &'a [u8], big: bool, version: u32) -> Self {
        Reader {
            bytes,
            pos: 0,
            big,
            v1: version == 1,
            version,
            ctx: Ctx::Header("magic"),
            file_len: bytes.len() as u64,
        }
    }

    pub(super) fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    pub(super) fn truncated(&self, needed: u64) -> FormatError {
        FormatError::new(
            FormatErrorKind::Truncated {
                what: self.ctx.to_string(),
                needed,
                available: self.remaining(),
            },
            self.pos as u64,
        )
    }

    /// `needed` bytes for `count` items (`count` is what the file says) must remain. A need
    /// that no plausible file could meet (beyond both the whole file and 1 GiB, or
    /// overflowing) is `LengthTooLarge`; a smaller shortfall reads as a cut file (or, when
    /// only a prefix of the file was read, a prefix too short), `Truncated`.
    pub(super) fn check_fits(
        &self,
        what: &str,
        count: u64,
        needed: Option<u64>,
        at: usize,
    ) -> Result<(), FormatError> {
        let available = self.remaining();
        match needed {
            Some(n) if n <= available => Ok(()),
            Some(n) if n <= self.file_len.max(MAX_STRING_LEN) => Err(FormatError::new(
                FormatErrorKind::Truncated {
                    what: format!("{} ({what} {count})", self.ctx),
                    needed: n,
                    available,
                },
                at as u64,
            )),
            _ => Err(FormatError::new(
                FormatErrorKind::LengthTooLarge {
                    what: format!("{} ({what})", self.ctx),
                    value: count,
                    available,
                },
                at as u64,
            )),
        }
    }

    pub(super) fn take(&mut self, n: u64) -> Result<&'a [u8], FormatError> {
        if n > self.remaining() {
            return Err(self.truncated(n));
        }
        let end = self.pos + n as usize;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub(super) fn fixed<const N: usize>(&mut self) -> Result<[u8; N], FormatError> {
        let s = self.take(N as u64)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub(super) fn u8(&mut self) -> Result<u8, FormatError> {
        Ok(self.fixed::<1>()?[0])
    }

    pub(super) fn u16(&mut self) -> Result<u16, FormatError> {
        let b = self.fixed()?;
        Ok(if self.big {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        })
    }

    pub(super) fn u32(&mut self) -> Result<u32, FormatError> {
        let b = self.fixed()?;
        Ok(if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    pub(super) fn u64(&mut self) -> Result<u64, FormatError> {
        let b = self.fixed()?;
        Ok(if self.big {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    }

    /// A count, string length or dimension: `u32` in v1, `u64` after.
    pub(super) fn count(&mut self) -> Result<u64, FormatError> {
        if self.v1 {
            self.u32().map(u64::from)
        } else {
            self.u64()
        }
    }

    /// A length-prefixed string's bytes, length checked against 1 GiB and the file.
    pub(super) fn string(&mut self) -> Result<&'a [u8], FormatError> {
        let at = self.pos;
        let len = self.count()?;
        if len > MAX_STRING_LEN {
            return Err(FormatError::new(
                FormatErrorKind::LengthTooLarge {
                    what: format!("{} (string length, limit 1 GiB)", self.ctx),
                    value: len,
                    available: self.remaining(),
                },
                at as u64,
            ));
        }
        self.check_fits("string length", len, Some(len), at)?;
        self.take(len)
    }
}

/// Bytes of a name shown in an error about it.
const PREVIEW_LEN: usize = 64;

/// The first bytes of `b` (at most 64) as text, lossily, with `…` when cut: for messages
/// about a key or name that is not UTF-8, whose length the file chooses.
pub(super) fn preview(b: &[u8]) -> Cow<'_, str> {
    if b.len() <= PREVIEW_LEN {
        String::from_utf8_lossy(b)
    } else {
        Cow::Owned(format!("{}…", String::from_utf8_lossy(&b[..PREVIEW_LEN])))
    }
}
