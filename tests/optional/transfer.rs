//! The transfer engine on a full disk (a small tmpfs: root and `WI_TMPFS_TESTS=1`).

use std::sync::Mutex;

use weight_inspect::transfer::TransferError;

use crate::support::transfer::{
    config, engine, fixture, fixture_with, Fixture, Recorder, LFS, SIZE,
};

/// A full disk is `DiskFull`, naming the file in the repository and the local file that could
/// not be written: the partial file when it is preallocated, the state when a checkpoint cannot
/// be saved. Needs root (a small tmpfs is mounted) and `WI_TMPFS_TESTS=1`.
pub fn a_full_disk_names_the_file_and_the_local_path() {
    crate::block_on(async {
        crate::wi_fetch::require_tmpfs();
        struct Mount(std::path::PathBuf);
        impl Drop for Mount {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg(&self.0).status();
            }
        }
        let mount = |fx: &Fixture, size: &str| {
            let dir = fx.dir.path().to_path_buf();
            let ok = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
                .arg(&dir)
                .status()
                .unwrap()
                .success();
            assert!(ok, "mount tmpfs (needs root)");
            Mount(dir)
        };

        // Too small for the file: the preallocation fails, before any request.
        let fx = fixture().await;
        let m = mount(&fx, "1m");
        let spec = fx.spec(LFS);
        let e = engine(config())
            .download(&spec, &Recorder::default())
            .await
            .unwrap_err();
        drop(m);
        match &e {
            TransferError::DiskFull {
                file, path, needed, ..
            } => {
                assert_eq!(file, LFS);
                assert_eq!(path, &spec.partial_path);
                assert_eq!(*needed, SIZE as u64);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(fx.sent(LFS), 0);

        // Room for the file, then the disk fills up mid-download: the next checkpoint fails.
        let fx = fixture_with(|b| b.bandwidth(2 << 20)).await;
        let m = mount(&fx, "3m");
        let spec = fx.spec(LFS);
        let filler = fx.dir.path().join("filler");
        let rec = Recorder {
            hook_after: Some(SIZE as u64 / 4),
            hook: Mutex::new(Some(Box::new(move || {
                use std::io::Write;
                let mut f = std::fs::File::create(&filler).unwrap();
                while f.write_all(&[0u8; 4096]).is_ok() {}
            }))),
            ..Recorder::default()
        };
        let e = engine(config()).download(&spec, &rec).await.unwrap_err();
        drop(m);
        match &e {
            TransferError::DiskFull { file, path, .. } => {
                assert_eq!(file, LFS);
                assert_eq!(path, &spec.state_path);
            }
            other => panic!("{other:?}"),
        }
        assert!(e.is_disk_full() && e.exit_code() == 1);
        let msg = e.to_string();
        assert!(msg.contains("no space left") && msg.contains(LFS), "{msg}");
    })
}
