//! Any bytes as one page of a Hub tree listing, and as a listing saved beside the cache
//! (`hub::load_tree`): `Ok` or `Err`, never a panic; every file kept has a path that is safe as
//! a local file name and no two kept paths collide once case is folded; every refused name is
//! safe to print; peak heap within `fuzz_support::within_budget`'s bound.
#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use weight_inspect::names;

fuzz_target!(|data: &[u8]| {
    fuzz_support::within_budget(data, |data| {
        let page = weight_inspect::fuzzing::listing_page(data);
        let saved = weight_inspect::hub::load_tree(data);
        for (files, refused) in [page.ok(), saved.ok()].into_iter().flatten() {
            let mut seen = HashSet::new();
            for f in &files {
                assert!(names::check_repo_path(&f.path).is_ok(), "{:?}", f.path);
                assert!(seen.insert(names::case_fold(&f.path)), "{:?}", f.path);
                assert!(f.size <= i64::MAX as u64);
                assert!(names::etag_kind(f.etag()).is_some());
            }
            for r in &refused {
                assert!(!r.path.chars().any(char::is_control), "{:?}", r.path);
            }
        }
    });
});
