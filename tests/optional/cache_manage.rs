//! `wi-fetch cache` on a cache written by huggingface_hub.

use std::fs;
use std::process::Command;

use mock_server::MockHub;
use serde_json::Value;

use crate::support::cli::{
    cache_cmd, expect_code, repo_json, revision, run, start, stdout, Sandbox,
};

/// `wi-fetch cache ARGS… --json`, which must exit 0: its report.
fn cache_json(sb: &Sandbox, hub: &MockHub, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let o = run(cache_cmd(sb, hub, &a));
    expect_code(&o, 0);
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)))
}

fn py(python: &str, sb: &Sandbox, hub: &MockHub, script: &str) -> String {
    let o = Command::new(python)
        .arg("-c")
        .arg(script)
        .env("HF_HUB_CACHE", sb.cache())
        .env("HF_HOME", sb.home())
        .env("HF_ENDPOINT", hub.url())
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env("HF_HUB_DISABLE_XET", "1")
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE")
        .output()
        .expect("run python");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// huggingface_hub's own view of the cache: per repository, its revisions with refs, sizes and
/// file counts; and the warnings of its scan.
const SCAN: &str = "import json\n\
from huggingface_hub import scan_cache_dir\n\
info = scan_cache_dir()\n\
print(json.dumps({'warnings': [str(w) for w in info.warnings], 'repos': sorted([\n\
  {'id': r.repo_type + '/' + r.repo_id, 'size': r.size_on_disk, 'nb_files': r.nb_files,\n\
   'revisions': sorted([{'commit': v.commit_hash, 'refs': sorted(v.refs), 'size': v.size_on_disk,\n\
                         'nb_files': v.nb_files} for v in r.revisions], key=lambda v: v['commit'])}\n\
  for r in info.repos], key=lambda r: r['id'])}))\n";

/// Our listing in the shape of [`SCAN`]'s.
fn ours_as_scan(ls: &Value) -> Value {
    let repos: Vec<Value> = ls["repos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let revs: Vec<Value> = r["revisions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| {
                    serde_json::json!({"commit": v["commit"], "refs": v["refs"],
                        "size": v["size_on_disk"], "nb_files": v["nb_files"]})
                })
                .collect();
            serde_json::json!({"id": r["cache_id"], "nb_files": r["nb_files"], "revisions": revs})
        })
        .collect();
    serde_json::json!(repos)
}

/// A cache written by huggingface_hub (two revisions of a repository, one of them detached, and
/// a second repository): our `ls` agrees with its `scan_cache_dir()` on revisions, refs, sizes
/// and file counts; after our `rm` of a repository and `prune`, huggingface_hub still scans the
/// cache without a warning and agrees with us again.
pub fn a_huggingface_hub_cache_is_listed_removed_and_pruned() {
    let python = crate::support::required_env("WI_PYTHON");
    let (r1, r2) = ("hfa/model", "hfb/model");
    let hub = start(
        MockHub::builder()
            .hash_cache(false)
            .lfs_threshold(64 << 10)
            .file(r1, "w.bin", testkit::data(200 << 10, 1))
            .file(r1, "config.json", b"{}".to_vec())
            .file(r2, "v.bin", testkit::data(150 << 10, 1)[3..].to_vec()),
    );
    let sb = Sandbox::new();
    let dl = |repos: &[&str]| {
        let mut s = String::from("from huggingface_hub import snapshot_download\n");
        for r in repos {
            s.push_str(&format!("snapshot_download('{r}')\n"));
        }
        py(&python, &sb, &hub, &s);
    };
    dl(&[r1, r2]);
    let old = hub.commit(r1);
    hub.mutate_file(r1, "w.bin", testkit::data(230 << 10, 1))
        .unwrap();
    dl(&[r1]);

    let scan = |sb: &Sandbox| -> Value {
        serde_json::from_str(py(&python, sb, &hub, SCAN).trim()).unwrap()
    };
    let theirs = scan(&sb);
    assert_eq!(theirs["warnings"].as_array().unwrap().len(), 0, "{theirs}");
    let ls = cache_json(&sb, &hub, &["ls"]);
    let mut theirs_repos = theirs["repos"].clone();
    for r in theirs_repos.as_array_mut().unwrap() {
        r.as_object_mut().unwrap().remove("size");
    }
    assert_eq!(ours_as_scan(&ls), theirs_repos);
    let a = repo_json(&ls, &format!("model/{r1}"));
    assert_eq!(revision(a, &old)["refs"].as_array().unwrap().len(), 0);
    for r in ls["repos"].as_array().unwrap() {
        for v in r["revisions"].as_array().unwrap() {
            for f in v["files"].as_array().unwrap() {
                assert_eq!(f["state"], "complete", "{f}");
            }
        }
    }

    // Our rm and prune on their cache: they still scan it cleanly, and agree.
    let o = run(cache_cmd(&sb, &hub, &["rm", &format!("model/{r2}"), "-y"]));
    expect_code(&o, 0);
    let dry = cache_json(&sb, &hub, &["prune", "--dry-run"]);
    assert!(
        dry["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["kind"] == "revision" && i["what"] == old.as_str()),
        "{dry}"
    );
    let done = cache_json(&sb, &hub, &["prune"]);
    assert_eq!(done["freed_bytes"], dry["freed_bytes"]);
    let theirs = scan(&sb);
    assert_eq!(theirs["warnings"].as_array().unwrap().len(), 0, "{theirs}");
    let ls = cache_json(&sb, &hub, &["ls"]);
    let mut theirs_repos = theirs["repos"].clone();
    for r in theirs_repos.as_array_mut().unwrap() {
        r.as_object_mut().unwrap().remove("size");
    }
    assert_eq!(ours_as_scan(&ls), theirs_repos);
    assert_eq!(ls["repos"].as_array().unwrap().len(), 1);
    assert_eq!(
        repo_json(&ls, &format!("model/{r1}"))["revisions"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // And huggingface_hub still finds the file offline.
    let p = py(
        &python,
        &sb,
        &hub,
        &format!(
            "from huggingface_hub import hf_hub_download\n\
             print(hf_hub_download('{r1}', 'w.bin', local_files_only=True))\n"
        ),
    );
    assert_eq!(fs::read(p.trim()).unwrap().len(), 230 << 10);
}
