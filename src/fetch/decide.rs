//! A file's fate, decided in one place: what the store holds for it ([`OnDisk`], observed at
//! the fetcher's verification level) and the fetcher's [`Mode`] give one [`Action`] — use the
//! copy on disk, download (resuming a partial download, or repairing a damaged copy chunk by
//! chunk), or refuse. The decision is a pure function, tested with a table below; `run.rs`
//! observes the store, decides, and carries the action out, and emits each file's final event
//! in one place. A new source of bytes (a bucket, a mirror) is another way to carry out
//! [`Action::Download`], not another branch here.

use super::error::FetchError;

/// What a fetcher may do with the files it is given, fixed when it is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Use a sound copy on disk; download (or repair) the others.
    Fetch,
    /// Download every file again; nothing on disk is reused (`--force-download`).
    Force,
    /// Write nothing: offline, or only checking (`cache verify`). A file is what is on disk.
    ReadOnly,
}

impl Mode {
    /// The mode of a fetcher's settings; forcing a download offline is refused. Offline with
    /// a remote cache (`bucket`), files are still fetched — from the bucket alone.
    pub(crate) fn of(
        offline: bool,
        check_only: bool,
        force: bool,
        bucket: bool,
    ) -> Result<Mode, FetchError> {
        match (offline, check_only, force) {
            (true, _, true) => Err(FetchError::Invalid(
                "--force-download needs the network (offline mode is on)".into(),
            )),
            (true, false, false) if bucket => Ok(Mode::Fetch),
            (true, _, false) | (false, true, _) => Ok(Mode::ReadOnly),
            (false, false, true) => Ok(Mode::Force),
            (false, false, false) => Ok(Mode::Fetch),
        }
    }
}

/// What the store holds for a file, as observed before deciding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OnDisk {
    /// No complete copy: nothing, or a partial download (which a download resumes). Also what
    /// [`Mode::Force`] assumes without looking.
    Absent,
    /// A file at the path whose size is not the expected one.
    WrongSize {
        /// Its size.
        len: u64,
        /// The size it should have.
        size: u64,
    },
    /// A complete copy that passes the check at the fetcher's level.
    Sound,
    /// A complete copy that fails it.
    Damaged {
        /// What is wrong, as the check says it.
        damage: String,
        /// Whether the check that failed is a manifest the user gave while the copy is byte
        /// for byte what the Hub's digest says: fetching the Hub's bytes again cannot help.
        hubs_own_bytes: bool,
    },
}

/// What to do with a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// The copy on disk, as it is.
    Cached,
    /// Download the file, reusing what [`Reuse`] says of what is on disk.
    Download(Reuse),
    /// Fail the file.
    Refuse(Refusal),
}

/// What a download reuses of what is on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reuse {
    /// A partial download of it, when there is one (resumed).
    Partial,
    /// A damaged copy (what is wrong with it): a copy of it becomes the partial download,
    /// whose matching chunks are kept, and the result is renamed over it.
    Damaged(String),
    /// Nothing, not even a partial download.
    Nothing,
}

/// Why a file fails without a transfer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Not on disk, and the mode forbids downloading it.
    NotCached,
    /// On disk but damaged (what is wrong), and the mode forbids repairing it.
    Damaged(String),
    /// The copy on disk is the Hub's, and the manifest the user gave disagrees with it.
    HubDisagreesWithManifest(String),
}

/// The one decision (see the module docs).
pub(crate) fn decide(on_disk: &OnDisk, mode: Mode) -> Action {
    use Action::{Cached, Download, Refuse};
    match (mode, on_disk) {
        (Mode::Force, _) => Download(Reuse::Nothing),
        (Mode::Fetch | Mode::ReadOnly, OnDisk::Sound) => Cached,
        (Mode::ReadOnly, OnDisk::Absent) => Refuse(Refusal::NotCached),
        (Mode::ReadOnly, OnDisk::WrongSize { len, size }) => {
            Refuse(Refusal::Damaged(format!("{len} bytes instead of {size}")))
        }
        (Mode::ReadOnly, OnDisk::Damaged { damage, .. }) => {
            Refuse(Refusal::Damaged(damage.clone()))
        }
        (Mode::Fetch, OnDisk::Absent | OnDisk::WrongSize { .. }) => Download(Reuse::Partial),
        (
            Mode::Fetch,
            OnDisk::Damaged {
                damage,
                hubs_own_bytes: true,
            },
        ) => Refuse(Refusal::HubDisagreesWithManifest(damage.clone())),
        (
            Mode::Fetch,
            OnDisk::Damaged {
                damage,
                hubs_own_bytes: false,
            },
        ) => Download(Reuse::Damaged(damage.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_is_read_once_from_the_settings() {
        assert_eq!(Mode::of(false, false, false, false).unwrap(), Mode::Fetch);
        assert_eq!(Mode::of(false, false, true, false).unwrap(), Mode::Force);
        assert_eq!(Mode::of(true, false, false, false).unwrap(), Mode::ReadOnly);
        // Offline with a remote cache: fetched from the bucket; only checking, still read-only.
        assert_eq!(Mode::of(true, false, false, true).unwrap(), Mode::Fetch);
        assert_eq!(Mode::of(true, true, false, true).unwrap(), Mode::ReadOnly);
        assert_eq!(Mode::of(false, true, false, false).unwrap(), Mode::ReadOnly);
        // Only checking never writes, forced or not.
        assert_eq!(Mode::of(false, true, true, false).unwrap(), Mode::ReadOnly);
        let e = Mode::of(true, false, true, true).unwrap_err();
        assert!(e.to_string().contains("needs the network"), "{e}");
    }

    #[test]
    fn every_state_on_disk_in_every_mode() {
        let damaged = |hubs_own_bytes| OnDisk::Damaged {
            damage: "chunk 3 differs".into(),
            hubs_own_bytes,
        };
        let download = Action::Download(Reuse::Partial);
        let repair = Action::Download(Reuse::Damaged("chunk 3 differs".into()));
        let force = Action::Download(Reuse::Nothing);
        let short = OnDisk::WrongSize { len: 5, size: 9 };
        let table = [
            // Fetch: a sound copy is used, anything else downloaded or repaired, unless the
            // user's manifest disagrees with the Hub's own bytes.
            (Mode::Fetch, OnDisk::Absent, download.clone()),
            (Mode::Fetch, short.clone(), download.clone()),
            (Mode::Fetch, OnDisk::Sound, Action::Cached),
            (Mode::Fetch, damaged(false), repair),
            (
                Mode::Fetch,
                damaged(true),
                Action::Refuse(Refusal::HubDisagreesWithManifest("chunk 3 differs".into())),
            ),
            // Force: whatever is on disk.
            (Mode::Force, OnDisk::Absent, force.clone()),
            (Mode::Force, OnDisk::Sound, force.clone()),
            (Mode::Force, damaged(false), force.clone()),
            (Mode::Force, damaged(true), force),
            // Read-only: what is on disk, or a refusal that says what is wrong.
            (
                Mode::ReadOnly,
                OnDisk::Absent,
                Action::Refuse(Refusal::NotCached),
            ),
            (
                Mode::ReadOnly,
                short,
                Action::Refuse(Refusal::Damaged("5 bytes instead of 9".into())),
            ),
            (Mode::ReadOnly, OnDisk::Sound, Action::Cached),
            (
                Mode::ReadOnly,
                damaged(false),
                Action::Refuse(Refusal::Damaged("chunk 3 differs".into())),
            ),
            (
                Mode::ReadOnly,
                damaged(true),
                Action::Refuse(Refusal::Damaged("chunk 3 differs".into())),
            ),
        ];
        for (mode, on_disk, want) in table {
            assert_eq!(decide(&on_disk, mode), want, "{mode:?} × {on_disk:?}");
        }
    }
}
