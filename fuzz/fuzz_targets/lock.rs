//! Any bytes as a lock file (`fetch::lock::LockFile::parse`): `Ok` or `Err`, never a panic;
//! a lock file accepted names only safe paths and commit ids, and writes back to text that
//! parses to the same lock; peak heap within `fuzz_support::within_budget`'s bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weight_inspect::fetch::lock::LockFile;
use weight_inspect::names;

fuzz_target!(|data: &[u8]| {
    fuzz_support::within_budget(data, |data| {
        if let Ok(lock) = LockFile::parse(data) {
            for r in &lock.repos {
                assert!(names::is_commit_hash(&r.commit), "{:?}", r.commit);
                for f in &r.files {
                    assert!(names::check_repo_path(&f.path).is_ok(), "{:?}", f.path);
                }
            }
            let again = LockFile::parse(lock.to_json().as_bytes()).expect("round trip");
            assert_eq!(again.repos.len(), lock.repos.len());
        }
    });
});
