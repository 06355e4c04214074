//! Every route, the Range logic, the LFS redirect, errors, auth and revisions.

use reqwest::StatusCode;
use serde_json::Value;

use crate::common::*;
use mock_server::MockHub;

fn h(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

#[tokio::test]
async fn repo_info_lists_siblings_with_blobs() {
    let (hub, _d) = start().await;
    let c = client();
    let v: Value = c
        .get(format!("{}/api/models/org/model", hub.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["id"], "org/model");
    assert_eq!(v["modelId"], "org/model");
    assert_eq!(v["sha"], hub.commit("org/model"));
    assert_eq!(v["gated"], false);
    assert_eq!(v["private"], false);
    let names: Vec<&str> = v["siblings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["rfilename"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "README.md",
            "config.json",
            "model.bin",
            "sub/dir/nested.txt",
            "weights/part-1.bin"
        ]
    );
    assert!(v["siblings"][0].get("size").is_none());

    let v: Value = c
        .get(format!("{}/api/models/org/model?blobs=true", hub.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let model = v["siblings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["rfilename"] == "model.bin")
        .unwrap();
    let data = model_file("model.bin");
    assert_eq!(model["size"], data.len());
    assert_eq!(model["lfs"]["sha256"], sha256(&data));
    assert_eq!(model["lfs"]["size"], data.len());
    assert!(model["lfs"]["pointerSize"].as_u64().unwrap() > 100);
    assert_eq!(model["blobId"].as_str().unwrap().len(), 40);
    let cfg = &v["siblings"][1];
    assert_eq!(cfg["rfilename"], "config.json");
    assert!(cfg.get("lfs").is_none());
    assert_eq!(cfg["size"], model_file("config.json").len());
}

#[tokio::test]
async fn repo_info_at_revisions() {
    let (hub, _d) = start().await;
    let c = client();
    let commit = hub.commit("org/model");
    for rev in ["main", "dev", commit.as_str()] {
        let v: Value = c
            .get(format!("{}/api/models/org/model/revision/{rev}", hub.url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(v["sha"], commit, "{rev}");
    }
    let r = c
        .get(format!("{}/api/models/org/model/revision/nope", hub.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(h(&r, "x-error-code"), "RevisionNotFound");
    let v: Value = r.json().await.unwrap();
    assert!(v["error"].as_str().unwrap().contains("nope"));
}

async fn tree_all(url: String) -> (Vec<Value>, usize) {
    let c = client();
    let mut next = Some(url);
    let mut all = Vec::new();
    let mut pages = 0;
    while let Some(u) = next.take() {
        let r = c.get(&u).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let link = h(&r, "link");
        if !link.is_empty() {
            assert!(link.ends_with("rel=\"next\""), "{link}");
            next = Some(link[1..link.find('>').unwrap()].to_string());
        }
        let page: Vec<Value> = r.json().await.unwrap();
        assert!(page.len() <= 2);
        all.extend(page);
        pages += 1;
    }
    (all, pages)
}

#[tokio::test]
async fn tree_recursive_is_paginated() {
    let (hub, _d) = start().await;
    let (all, pages) = tree_all(format!(
        "{}/api/models/org/model/tree/main?recursive=true",
        hub.url()
    ))
    .await;
    let paths: Vec<(&str, &str)> = all
        .iter()
        .map(|e| (e["type"].as_str().unwrap(), e["path"].as_str().unwrap()))
        .collect();
    assert_eq!(
        paths,
        [
            ("file", "README.md"),
            ("file", "config.json"),
            ("file", "model.bin"),
            ("directory", "sub"),
            ("directory", "sub/dir"),
            ("file", "sub/dir/nested.txt"),
            ("directory", "weights"),
            ("file", "weights/part-1.bin"),
        ]
    );
    assert_eq!(pages, 4);
    let model = all.iter().find(|e| e["path"] == "model.bin").unwrap();
    let data = model_file("model.bin");
    assert_eq!(model["lfs"]["oid"], sha256(&data));
    assert_eq!(model["size"], data.len());
    assert_eq!(model["oid"].as_str().unwrap().len(), 40);
    let readme = all.iter().find(|e| e["path"] == "README.md").unwrap();
    assert!(readme.get("lfs").is_none());
}

#[tokio::test]
async fn tree_top_level_and_subpath() {
    let (hub, _d) = start().await;
    let (all, _) = tree_all(format!("{}/api/models/org/model/tree/main", hub.url())).await;
    let paths: Vec<&str> = all.iter().map(|e| e["path"].as_str().unwrap()).collect();
    assert_eq!(
        paths,
        ["README.md", "config.json", "model.bin", "sub", "weights"]
    );
    let (all, _) = tree_all(format!(
        "{}/api/models/org/model/tree/dev/sub?recursive=false",
        hub.url()
    ))
    .await;
    let paths: Vec<&str> = all.iter().map(|e| e["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["sub/dir"]);
    let (all, _) = tree_all(format!(
        "{}/api/models/org/model/tree/main/sub?recursive=true",
        hub.url()
    ))
    .await;
    assert_eq!(all.len(), 2);
    let r = client()
        .get(format!(
            "{}/api/models/org/model/tree/main/nowhere",
            hub.url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(h(&r, "x-error-code"), "EntryNotFound");
}

#[tokio::test]
async fn small_file_head_and_get() {
    let (hub, _d) = start().await;
    let c = client();
    let url = format!("{}/org/model/resolve/main/config.json", hub.url());
    let data = model_file("config.json");
    let r = c.head(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(h(&r, "x-repo-commit"), hub.commit("org/model"));
    let etag = h(&r, "etag");
    assert_eq!(etag.len(), 42);
    assert_eq!(h(&r, "content-length"), data.len().to_string());
    assert_eq!(h(&r, "accept-ranges"), "bytes");
    let r = c.get(&url).send().await.unwrap();
    assert_eq!(h(&r, "etag"), etag);
    assert_eq!(r.bytes().await.unwrap(), data);
    // Nested paths keep their slashes.
    let r = c
        .get(format!(
            "{}/org/model/resolve/main/sub/dir/nested.txt",
            hub.url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.bytes().await.unwrap(), &b"nested\n"[..]);
}

#[tokio::test]
async fn large_file_redirects_to_the_cdn() {
    let (hub, _d) = start().await;
    let c = client();
    let data = model_file("model.bin");
    let url = format!("{}/org/model/resolve/main/model.bin", hub.url());
    let r = c.head(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FOUND);
    assert_eq!(h(&r, "x-repo-commit"), hub.commit("org/model"));
    assert_eq!(h(&r, "x-linked-etag"), format!("\"{}\"", sha256(&data)));
    assert_eq!(h(&r, "x-linked-size"), data.len().to_string());
    // The redirect's own length and ETag are not the file's: the trap.
    let own_len: usize = h(&r, "content-length").parse().unwrap();
    assert!(own_len > 0 && own_len != data.len());
    assert_ne!(h(&r, "etag"), h(&r, "x-linked-etag"));
    let loc1 = h(&r, "location");
    assert!(loc1.starts_with(&hub.cdn_url()), "{loc1}");
    assert!(loc1.contains("X-Amz-Signature="));
    assert_ne!(hub.cdn_addr().port(), hub.addr().port());
    // A new signature on every request.
    let r2 = c.get(&url).send().await.unwrap();
    assert_eq!(r2.status(), StatusCode::FOUND);
    let loc2 = h(&r2, "location");
    assert_ne!(loc1, loc2);
    assert_eq!(r2.bytes().await.unwrap().len(), own_len);
    // Both URLs serve the file.
    for loc in [&loc1, &loc2] {
        let r = c.head(loc).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(h(&r, "content-length"), data.len().to_string());
        assert_eq!(h(&r, "accept-ranges"), "bytes");
        assert_eq!(h(&r, "etag"), format!("\"{}\"", sha256(&data)));
        let r = c.get(loc).send().await.unwrap();
        assert_eq!(r.bytes().await.unwrap(), data);
    }
    // A client following redirects gets the bytes.
    let follow = reqwest::Client::new();
    let body = follow
        .get(&url)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(body, data);
}

#[tokio::test]
async fn cdn_rejects_authorization_and_unknown_signatures() {
    let (hub, _d) = start().await;
    let c = client();
    let r = c
        .get(format!("{}/org/model/resolve/main/model.bin", hub.url()))
        .send()
        .await
        .unwrap();
    let loc = h(&r, "location");
    let r = c.get(&loc).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let forged = format!("{}0000", &loc[..loc.len() - 4]);
    let r = c.get(&forged).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let unsigned = loc.split('?').next().unwrap();
    let r = c.get(unsigned).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(c.get(&loc).send().await.unwrap().status(), StatusCode::OK);
}

async fn check_ranges(c: &reqwest::Client, url: &str, data: &[u8]) {
    let n = data.len();
    // Numbers of any size are numbers: an end or suffix past u64 is cut to the file.
    let huge = "99999999999999999999999";
    for (range, s, e) in [
        ("bytes=0-9".to_string(), 0, 9),
        (format!("bytes=5-{}", n + 100), 5, n - 1),
        ("bytes=7-".to_string(), 7, n - 1),
        ("bytes=-4".to_string(), n - 4, n - 1),
        (format!("bytes=-{}", n + 5), 0, n - 1),
        (format!("bytes=5-{huge}"), 5, n - 1),
        (format!("bytes=-{huge}"), 0, n - 1),
    ] {
        let r = c.get(url).header("range", &range).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT, "{range}");
        assert_eq!(
            h(&r, "content-range"),
            format!("bytes {s}-{e}/{n}"),
            "{range}"
        );
        assert_eq!(h(&r, "content-length"), (e - s + 1).to_string());
        assert_eq!(r.bytes().await.unwrap(), &data[s..=e], "{range}");
    }
    for range in [
        format!("bytes={n}-"),
        "bytes=-0".into(),
        format!("bytes={}-{}", n + 1, n + 9),
        format!("bytes={huge}-"),
    ] {
        let r = c.get(url).header("range", &range).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::RANGE_NOT_SATISFIABLE, "{range}");
        assert_eq!(h(&r, "content-range"), format!("bytes */{n}"));
    }
    // Multi-range and malformed ranges are ignored: 200 with the whole file.
    for range in ["bytes=0-1,4-5", "bytes=9-3", "lines=1-2"] {
        let r = c.get(url).header("range", range).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{range}");
        assert_eq!(r.bytes().await.unwrap().len(), n);
    }
    // If-Range: the range only for the file whose strong ETag it names (RFC 9110 §13.1.5),
    // else the whole file.
    let etag = h(&c.head(url).send().await.unwrap(), "etag");
    assert!(etag.starts_with('"'), "{etag}");
    let ranged = |if_range: String| {
        c.get(url)
            .header("range", "bytes=0-9")
            .header("if-range", if_range)
            .send()
    };
    let r = ranged(etag.clone()).await.unwrap();
    assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(r.bytes().await.unwrap(), &data[..10]);
    for other in [
        "\"another\"".to_string(),
        format!("W/{etag}"),
        "Wed, 21 Oct 2015 07:28:00 GMT".to_string(),
    ] {
        let r = ranged(other.clone()).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{other}");
        assert!(h(&r, "content-range").is_empty(), "{other}");
        assert_eq!(r.bytes().await.unwrap(), data, "{other}");
    }
}

#[tokio::test]
async fn ranges_on_the_hub_and_the_cdn() {
    let (hub, _d) = start().await;
    let c = client();
    let small = model_file("config.json");
    check_ranges(
        &c,
        &format!("{}/org/model/resolve/main/config.json", hub.url()),
        &small,
    )
    .await;
    let large = model_file("model.bin");
    let r = c
        .head(format!("{}/org/model/resolve/main/model.bin", hub.url()))
        .send()
        .await
        .unwrap();
    check_ranges(&c, &h(&r, "location"), &large).await;
    let s = hub.stats().file("org/model", "model.bin");
    assert_eq!(s.ranges[0].as_deref(), Some("bytes=0-9"));
    assert_eq!(s.served[0], (0, 9));
}

#[tokio::test]
async fn errors_carry_codes_like_the_hub() {
    let (hub, _d) = start().await;
    let c = client();
    let u = hub.url();
    // Missing repository: 401 anonymous, 404 with a valid token.
    for url in [
        format!("{u}/nobody/nothing/resolve/main/x"),
        format!("{u}/api/models/nobody/nothing"),
    ] {
        let r = c.get(&url).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(h(&r, "x-error-code"), "RepoNotFound");
        assert!(!h(&r, "x-error-message").is_empty());
        let v: Value = r.json().await.unwrap();
        assert!(v["error"].is_string());
        let r = c.get(&url).bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert_eq!(h(&r, "x-error-code"), "RepoNotFound");
    }
    let r = c
        .head(format!("{u}/org/model/resolve/main/missing.bin"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(h(&r, "x-error-code"), "EntryNotFound");
    let r = c
        .head(format!("{u}/org/model/resolve/v9/config.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(h(&r, "x-error-code"), "RevisionNotFound");
    // A wrong token is refused even on a public repository, as on the Hub.
    let r = c
        .get(format!("{u}/org/model/resolve/main/config.json"))
        .bearer_auth("hf_wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        h(&r, "x-error-message"),
        "Invalid credentials in Authorization header"
    );
}

#[tokio::test]
async fn gated_and_private_repositories_need_the_token() {
    let (hub, _d) = start().await;
    let c = client();
    let u = hub.url();
    let gated = format!("{u}/org/gated/resolve/main/weights.bin");
    let r = c.get(&gated).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(h(&r, "x-error-code"), "GatedRepo");
    let r = c.get(&gated).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.bytes().await.unwrap(), noise(1000, 3));
    // Metadata of a gated repository stays public.
    let v: Value = c
        .get(format!("{u}/api/models/org/gated"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["gated"], "auto");
    // Not approved: 403.
    hub.set_repo_settings(
        "org/gated",
        mock_server::RepoSettings {
            gated: true,
            approved: Some(false),
            private: false,
        },
    )
    .unwrap();
    let r = c.get(&gated).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(h(&r, "x-error-code"), "GatedRepo");
    // Private: looks absent without the token.
    for url in [
        format!("{u}/api/models/org/private"),
        format!("{u}/org/private/resolve/main/config.json"),
    ] {
        let r = c.get(&url).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(h(&r, "x-error-code"), "RepoNotFound");
        let r = c.get(&url).bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{url}");
    }
}

#[tokio::test]
async fn datasets_are_served_under_their_prefix() {
    let (hub, _d) = start().await;
    let c = client();
    let u = hub.url();
    let v: Value = c
        .get(format!("{u}/api/datasets/org/data"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["id"], "org/data");
    assert!(v.get("modelId").is_none());
    assert_eq!(v["sha"], hub.commit("datasets/org/data"));
    let r = c
        .get(format!("{u}/datasets/org/data/resolve/main/data.csv"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.bytes().await.unwrap(), &b"a,b\n1,2\n"[..]);
    let (all, _) = tree_all(format!(
        "{u}/api/datasets/org/data/tree/main?recursive=true"
    ))
    .await;
    assert_eq!(all.len(), 1);
    // The dataset is not a model.
    let r = c
        .get(format!("{u}/api/models/org/data"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn renamed_repository_redirects_relatively() {
    let d = fixture_root();
    let hub = builder(d.path())
        .rename("old-org/old-name", "org/model")
        .start()
        .await
        .unwrap();
    let c = client();
    let r = c
        .head(format!(
            "{}/old-org/old-name/resolve/main/config.json",
            hub.url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TEMPORARY_REDIRECT);
    assert_eq!(h(&r, "location"), "/org/model/resolve/main/config.json");
    let r = c
        .get(format!(
            "{}/api/models/old-org/old-name/revision/main?blobs=true",
            hub.url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TEMPORARY_REDIRECT);
    assert_eq!(
        h(&r, "location"),
        "/api/models/org/model/revision/main?blobs=true"
    );
    // Following it works.
    let v: Value = reqwest::get(format!("{}/api/models/old-org/old-name", hub.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["id"], "org/model");
    hub.rename("datasets/a/b", "datasets/org/data").unwrap();
    let r = c
        .get(format!("{}/datasets/a/b/resolve/main/data.csv", hub.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(
        h(&r, "location"),
        "/datasets/org/data/resolve/main/data.csv"
    );
}

#[tokio::test]
async fn percent_encoded_revisions_and_new_commits() {
    let (hub, _d) = start().await;
    let c = client();
    let u = hub.url();
    let first = hub.commit("org/model");
    // A `refs/pr/1` branch, addressed percent-encoded.
    let pr = hub
        .commit_file("org/model", "refs/pr/1", "config.json", &b"{\"pr\": 1}"[..])
        .unwrap();
    let r = c
        .get(format!("{u}/org/model/resolve/refs%2Fpr%2F1/config.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(h(&r, "x-repo-commit"), pr);
    assert_eq!(r.bytes().await.unwrap(), &b"{\"pr\": 1}"[..]);
    assert_eq!(hub.commit("org/model"), first);
    // mutate_file: main moves, dev and the old commit id keep the old bytes.
    let old = c
        .head(format!("{u}/org/model/resolve/main/model.bin"))
        .send()
        .await
        .unwrap();
    let new_bytes = noise(70 * 1024, 9);
    let second = hub
        .mutate_file("org/model", "model.bin", new_bytes.clone())
        .unwrap();
    assert_ne!(second, first);
    assert_eq!(hub.commit("org/model"), second);
    let r = c
        .head(format!("{u}/org/model/resolve/main/model.bin"))
        .send()
        .await
        .unwrap();
    assert_eq!(h(&r, "x-repo-commit"), second);
    assert_eq!(
        h(&r, "x-linked-etag"),
        format!("\"{}\"", sha256(&new_bytes))
    );
    assert_ne!(h(&r, "x-linked-etag"), h(&old, "x-linked-etag"));
    let body = reqwest::get(h(&r, "location"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(body, new_bytes);
    for rev in ["dev", first.as_str()] {
        let r = c
            .head(format!("{u}/org/model/resolve/{rev}/model.bin"))
            .send()
            .await
            .unwrap();
        assert_eq!(h(&r, "x-linked-etag"), h(&old, "x-linked-etag"), "{rev}");
    }
    // The old signed URL still serves the old bytes (content-addressed CDN).
    let body = reqwest::get(h(&old, "location"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(body, model_file("model.bin"));
    let gone = hub.delete_file("org/model", "README.md").unwrap();
    let r = c
        .head(format!("{u}/org/model/resolve/{gone}/README.md"))
        .send()
        .await
        .unwrap();
    assert_eq!(h(&r, "x-error-code"), "EntryNotFound");
}

#[tokio::test]
async fn hash_cache_is_written_hidden_and_reused() {
    let d = fixture_root();
    let hub = builder(d.path()).start().await.unwrap();
    let commit = hub.commit("org/model");
    hub.shutdown().await;
    let cache = d.path().join("org/model").join(mock_server::CACHE_FILE);
    assert!(cache.is_file());
    let text = std::fs::read_to_string(&cache).unwrap();
    assert!(text.contains("model.bin"));
    // Poison the cached hash: a restart must trust the cache (same size and mtime)...
    let poisoned = text.replacen(&sha256(&model_file("model.bin")), &"0".repeat(64), 1);
    std::fs::write(&cache, poisoned).unwrap();
    let hub = builder(d.path()).start().await.unwrap();
    assert_ne!(hub.commit("org/model"), commit);
    hub.shutdown().await;
    // ...and not when disabled, and the cache file is never listed.
    let hub = builder(d.path()).hash_cache(false).start().await.unwrap();
    assert_eq!(hub.commit("org/model"), commit);
    let v: Value = reqwest::get(format!("{}/api/models/org/model", hub.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(!v.to_string().contains(".mock-hub"));
}

#[tokio::test]
async fn in_memory_repositories_from_the_builder() {
    let hub = MockHub::builder()
        .file("mem/repo", "a.txt", &b"hello"[..])
        .file("datasets/mem/ds", "d/x.csv", &b"1,2"[..])
        .lfs_threshold(3)
        .start()
        .await
        .unwrap();
    assert_eq!(hub.repos(), ["datasets/mem/ds", "mem/repo"]);
    let body = reqwest::get(format!("{}/mem/repo/resolve/main/a.txt", hub.url()))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(body, &b"hello"[..]);
    let body = reqwest::get(format!("{}/datasets/mem/ds/resolve/dev/d/x.csv", hub.url()))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(body, &b"1,2"[..]);
    assert!(MockHub::builder().gated("no/such").start().await.is_err());
}

#[tokio::test]
async fn small_files_through_resolve_cache_redirects() {
    let d = fixture_root();
    let hub = builder(d.path())
        .resolve_cache_redirects(true)
        .start()
        .await
        .unwrap();
    let c = client();
    let commit = hub.commit("org/model");
    let r = c
        .head(format!(
            "{}/org/model/resolve/main/sub/dir/nested.txt",
            hub.url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TEMPORARY_REDIRECT);
    assert_eq!(h(&r, "x-repo-commit"), commit);
    let loc = h(&r, "location");
    assert_eq!(
        loc,
        format!("/api/resolve-cache/models/org/model/{commit}/sub/dir/nested.txt")
    );
    let r = c.head(format!("{}{loc}", hub.url())).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(h(&r, "x-repo-commit"), commit);
    assert_eq!(h(&r, "content-length"), "7");
    assert_eq!(h(&r, "etag").len(), 42);
    let r = c
        .get(format!("{}{loc}", hub.url()))
        .header("range", "bytes=1-2")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(r.bytes().await.unwrap(), &b"es"[..]);
    // Large files still go to the CDN; gated repos still need the token at the cache URL.
    let r = c
        .head(format!("{}/org/model/resolve/main/model.bin", hub.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FOUND);
    let gated = hub.commit("org/gated");
    let r = c
        .get(format!(
            "{}/api/resolve-cache/models/org/gated/{gated}/weights.bin",
            hub.url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(h(&r, "x-error-code"), "GatedRepo");
}
