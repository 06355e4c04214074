//! Xet (`--xet`): discovery on `resolve` and in the tree, the token endpoint, the CAS's
//! reconstructions (ranges, v1 and v2, tokens), signed xorb URLs, deduplication across
//! revisions, bytes inserted by `/_mock/mutate`, CAS stats and faults.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use weight_inspect::xet::hash::{chunk_hash, MerkleBuilder, XetHash};
use weight_inspect::xet::reconstruction::{Reconstruction, ReconstructionV1, ReconstructionV2};
use weight_inspect::xet::xorb::ChunkDecoder;

use crate::common::*;
use mock_server::{Fault, MockHub, MockHubBuilder, Target};

const REPO: &str = "org/x";

/// 700 000 random bytes.
fn big() -> Vec<u8> {
    noise(700_000, 11)
}

/// Text that compresses, then random bytes.
fn mixed() -> Vec<u8> {
    let mut v: Vec<u8> = (0..40_000)
        .flat_map(|i: u32| format!("line {i}: the quick brown fox\n").into_bytes())
        .take(900_000)
        .collect();
    v.extend(noise(400_000, 12));
    v
}

fn xet_builder() -> MockHubBuilder {
    MockHub::builder()
        .lfs_threshold(THRESHOLD)
        .token(TOKEN)
        .seed(3)
        .xet(true)
        .file(REPO, "big.bin", big())
        .file(REPO, "mixed.bin", mixed())
        .file(REPO, "small.txt", b"small\n".to_vec())
        .file("cas/v1", "a.txt", b"a\n".to_vec())
        .file("org/gated", "w.bin", noise(50_000, 13))
        .gated("org/gated")
        .file("org/private", "w.bin", noise(50_000, 14))
        .private("org/private")
}

fn hdr(r: &reqwest::Response, name: &str) -> String {
    h(r, name).unwrap_or_default()
}

/// What `HEAD` on `resolve` says of a Xet-backed file.
struct Head {
    xet_hash: String,
    token_url: String,
    commit: String,
}

async fn head(hub: &MockHub, repo: &str, rev: &str, path: &str) -> Head {
    let r = client()
        .head(format!("{}/{repo}/resolve/{rev}/{path}", hub.url()))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FOUND, "{path}");
    let link = hdr(&r, "link");
    let token_url = link
        .split(", ")
        .find(|l| l.ends_with("rel=\"xet-auth\""))
        .and_then(|l| l.strip_prefix('<'))
        .and_then(|l| l.split_once('>'))
        .map(|(u, _)| u.to_string())
        .unwrap_or_else(|| panic!("no xet-auth link in {link:?}"));
    Head {
        xet_hash: hdr(&r, "x-xet-hash"),
        token_url,
        commit: hdr(&r, "x-repo-commit"),
    }
}

/// A token and the CAS URL from the token endpoint.
async fn token(url: &str) -> (String, String) {
    let r = client().get(url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), 200, "{url}");
    let (t, cas, exp) = (
        hdr(&r, "x-xet-access-token"),
        hdr(&r, "x-xet-cas-url"),
        hdr(&r, "x-xet-token-expiration"),
    );
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["accessToken"], t.as_str());
    assert_eq!(body["casUrl"], cas.as_str());
    assert_eq!(body["exp"].as_u64().unwrap().to_string(), exp);
    (t, cas)
}

async fn recon_response(
    cas: &str,
    token: &str,
    version: &str,
    hash: &str,
    range: Option<&str>,
) -> reqwest::Response {
    let mut rq = client()
        .get(format!("{cas}/{version}/reconstructions/{hash}"))
        .bearer_auth(token);
    if let Some(r) = range {
        rq = rq.header("range", r);
    }
    rq.send().await.unwrap()
}

async fn recon(
    cas: &str,
    token: &str,
    version: &str,
    hash: &str,
    range: Option<&str>,
) -> Reconstruction {
    let r = recon_response(cas, token, version, hash, range).await;
    assert_eq!(r.status(), 200, "{version} {range:?}");
    let text = r.text().await.unwrap();
    let mut rec: Reconstruction = if version == "v2" {
        serde_json::from_str::<ReconstructionV2>(&text)
            .unwrap()
            .into()
    } else {
        serde_json::from_str::<ReconstructionV1>(&text)
            .unwrap()
            .into()
    };
    rec.check().unwrap();
    rec
}

/// The bytes a reconstruction makes (each fetch asked once, with its exact `Range`), the
/// chunks' hashes and lengths in order, and the compression schemes seen.
struct Rebuilt {
    bytes: Vec<u8>,
    chunks: Vec<(XetHash, u64)>,
    schemes: BTreeSet<u8>,
}

/// The chunks fetched, by URL and first byte: the first chunk's index and every chunk.
type Fetched = BTreeMap<(String, u64), (u32, Vec<Vec<u8>>)>;

async fn rebuild(rec: &Reconstruction) -> Rebuilt {
    let mut got = Fetched::new();
    let mut schemes = BTreeSet::new();
    for i in 0..rec.terms.len() {
        let f = rec.fetch_for(i).unwrap();
        let k = (f.url.clone(), f.bytes.start);
        if got.contains_key(&k) {
            continue;
        }
        let r = client()
            .get(&f.url)
            .header("range", f.bytes.header())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
        assert_eq!(
            hdr(&r, "content-range").split('/').next().unwrap(),
            format!("bytes {}-{}", f.bytes.start, f.bytes.end)
        );
        let body = r.bytes().await.unwrap();
        assert_eq!(body.len() as u64, f.bytes.len());
        let mut at = 0;
        while at < body.len() {
            schemes.insert(body[at + 4]);
            let c = usize::from(body[at + 1])
                | usize::from(body[at + 2]) << 8
                | usize::from(body[at + 3]) << 16;
            at += 8 + c;
        }
        let mut d = ChunkDecoder::new();
        d.push(&body);
        let mut chunks = Vec::new();
        while let Some(c) = d.next_chunk().unwrap() {
            chunks.push(c);
        }
        d.finish().unwrap();
        assert_eq!(chunks.len() as u32, f.chunks.len());
        got.insert(k, (f.chunks.start, chunks));
    }
    let mut out = Rebuilt {
        bytes: Vec::new(),
        chunks: Vec::new(),
        schemes,
    };
    for (i, t) in rec.terms.iter().enumerate() {
        let f = rec.fetch_for(i).unwrap();
        let (first, chunks) = &got[&(f.url.clone(), f.bytes.start)];
        let mut n = 0u64;
        for i in t.range.start..t.range.end {
            let c = &chunks[(i - first) as usize];
            out.chunks.push((chunk_hash(c), c.len() as u64));
            out.bytes.extend(c);
            n += c.len() as u64;
        }
        assert_eq!(n, u64::from(t.unpacked_length));
    }
    out.bytes.drain(..rec.offset_into_first_range as usize);
    out
}

fn file_hash(chunks: &[(XetHash, u64)]) -> String {
    let mut m = MerkleBuilder::new();
    for &(h, n) in chunks {
        m.push(h, n);
    }
    m.file_hash().to_string()
}

/// The whole file `path` of `repo` at `rev`, through the CAS (v2), checked against its
/// announced hash; also returns the xorbs it uses.
async fn through_cas(
    hub: &MockHub,
    repo: &str,
    rev: &str,
    path: &str,
) -> (Vec<u8>, BTreeSet<XetHash>) {
    let hd = head(hub, repo, rev, path).await;
    let (t, cas) = token(&hd.token_url).await;
    let rec = recon(&cas, &t, "v2", &hd.xet_hash, None).await;
    let rb = rebuild(&rec).await;
    assert_eq!(file_hash(&rb.chunks), hd.xet_hash, "{path}");
    (rb.bytes, rec.terms.iter().map(|t| t.hash).collect())
}

#[tokio::test]
async fn xet_files_are_announced_and_rebuilt_from_the_cas() {
    let hub = xet_builder().start().await.unwrap();
    let c = client();
    let commit = hub.commit(REPO);
    let hd = head(&hub, REPO, "main", "big.bin").await;
    assert_eq!(hd.commit, commit);
    assert_eq!(
        hd.token_url,
        format!("{}/api/models/{REPO}/xet-read-token/{commit}", hub.url())
    );
    assert_eq!(
        hd.xet_hash,
        weight_inspect::xet::hash::file_hash(&big()).to_string()
    );
    // GET is still the redirect to the CDN (for clients without Xet), with the same headers.
    let r = c
        .get(format!("{}/{REPO}/resolve/main/big.bin", hub.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FOUND);
    assert_eq!(hdr(&r, "x-xet-hash"), hd.xet_hash);
    assert!(hdr(&r, "link").contains("rel=\"xet-auth\""));
    let cdn = hdr(&r, "location");
    assert_eq!(
        c.get(&cdn).send().await.unwrap().bytes().await.unwrap(),
        big()
    );
    // A repository whose organisation is `cas` is still a repository.
    let r = c
        .get(format!("{}/cas/v1/resolve/main/a.txt", hub.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "a\n");
    // A small file is not Xet-backed.
    let r = c
        .head(format!("{}/{REPO}/resolve/main/small.txt", hub.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(h(&r, "x-xet-hash").is_none() && h(&r, "link").is_none());
    // The tree says the same hashes.
    let tree: Vec<Value> = c
        .get(format!("{}/api/models/{REPO}/tree/main", hub.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let by_path: BTreeMap<&str, &Value> = tree
        .iter()
        .map(|e| (e["path"].as_str().unwrap(), e))
        .collect();
    assert_eq!(by_path["big.bin"]["xetHash"], hd.xet_hash.as_str());
    assert_eq!(
        by_path["mixed.bin"]["xetHash"],
        weight_inspect::xet::hash::file_hash(&mixed())
            .to_string()
            .as_str()
    );
    assert!(by_path["small.txt"].get("xetHash").is_none());

    hub.reset_stats();
    let (t, cas) = token(&hd.token_url).await;
    assert_eq!(cas, format!("{}/cas", hub.url()));
    let mut sent = 0;
    let mut fetches = 0;
    let mut schemes = BTreeSet::new();
    for (version, path, data) in [
        ("v2", "big.bin", big()),
        ("v1", "big.bin", big()),
        ("v2", "mixed.bin", mixed()),
    ] {
        let hash = head(&hub, REPO, "main", path).await.xet_hash;
        let rec = recon(&cas, &t, version, &hash, None).await;
        assert_eq!(rec.offset_into_first_range, 0);
        let rb = rebuild(&rec).await;
        assert!(rb.bytes == data, "{version} {path}");
        assert_eq!(file_hash(&rb.chunks), hash);
        schemes.extend(rb.schemes);
        let fs: Vec<_> = rec.fetches.values().flatten().collect();
        fetches += fs.len() as u64;
        sent += fs.iter().map(|f| f.bytes.len()).sum::<u64>();
    }
    // None, LZ4 and byte grouping + LZ4 all occur.
    assert_eq!(schemes, BTreeSet::from([0, 1, 2]));
    let s = hub.stats();
    assert_eq!(s.cas.reconstructions, 3);
    assert_eq!(s.cas.xorb_requests, fetches);
    assert_eq!(s.cas.xorb_bytes_sent, sent);
    // Xorb bodies are no file's.
    assert_eq!(s.file(REPO, "big.bin").bytes_sent, 0);
    let v: Value = c
        .get(format!("{}/_mock/stats", hub.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["cas"]["xorb_bytes_sent"], sent);
    // Telemetry is taken.
    let r = c
        .post(format!("{}/v1/telemetry", hub.url()))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn reconstructions_are_trimmed_to_the_chunks_of_the_range() {
    let hub = xet_builder().start().await.unwrap();
    let hd = head(&hub, REPO, "main", "mixed.bin").await;
    let (t, cas) = token(&hd.token_url).await;
    let data = mixed();
    let n = data.len() as u64;
    let full = recon(&cas, &t, "v1", &hd.xet_hash, None).await;
    let all_chunks: u32 = full.terms.iter().map(|t| t.range.len()).sum();
    assert!(all_chunks > 8, "{all_chunks} chunks");
    for (first, last) in [
        (0, 0),
        (0, n - 1),
        (1, 100),
        (65_536, 65_536 * 3),
        (500_000, 1_000_000),
        (n - 1, n - 1),
        (n - 10, n + 1000),
    ] {
        for version in ["v1", "v2"] {
            let range = format!("bytes={first}-{last}");
            let rec = recon(&cas, &t, version, &hd.xet_hash, Some(&range)).await;
            let rb = rebuild(&rec).await;
            let want = &data[first as usize..=last.min(n - 1) as usize];
            assert!(&rb.bytes[..want.len()] == want, "{range}");
            // Trimmed: the first chunk holds the first byte, the last chunk the last one.
            let (first_len, last_len) = (rb.chunks[0].1, rb.chunks.last().unwrap().1);
            assert!(rec.offset_into_first_range < first_len, "{range}");
            assert!(
                (rb.bytes.len() as u64) < want.len() as u64 + last_len,
                "{range}: {} bytes for {}",
                rb.bytes.len(),
                want.len()
            );
        }
    }
    let r = recon_response(
        &cas,
        &t,
        "v2",
        &hd.xet_hash,
        Some(&format!("bytes={n}-{}", n + 5)),
    )
    .await;
    assert_eq!(r.status(), StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(hdr(&r, "content-range"), format!("bytes */{n}"));
}

#[tokio::test]
async fn the_cas_wants_a_valid_unexpired_token() {
    let hub = xet_builder().start().await.unwrap();
    let hd = head(&hub, REPO, "main", "big.bin").await;
    let (t, cas) = token(&hd.token_url).await;
    let url = format!("{cas}/v2/reconstructions/{}", hd.xet_hash);
    let c = client();
    assert_eq!(c.get(&url).send().await.unwrap().status(), 401);
    let r = c.get(&url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), 401, "the Hub token is not a CAS token");
    let forged = format!("{}0", t);
    assert_eq!(
        c.get(&url)
            .bearer_auth(forged)
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(
        c.get(&url).bearer_auth(&t).send().await.unwrap().status(),
        200
    );
    let unknown = XetHash([9; 32]).to_string();
    let r = recon_response(&cas, &t, "v1", &unknown, None).await;
    assert_eq!(r.status(), 404);
    let r = recon_response(&cas, &t, "v1", "nothex", None).await;
    assert_eq!(r.status(), 400);
    assert_eq!(hub.stats().cas.reconstructions, 1);

    // A token that expired (lifetime 0) is refused.
    let hub = xet_builder()
        .xet_token_ttl(Duration::ZERO)
        .start()
        .await
        .unwrap();
    let hd = head(&hub, REPO, "main", "big.bin").await;
    let (t, cas) = token(&hd.token_url).await;
    let r = recon_response(&cas, &t, "v2", &hd.xet_hash, None).await;
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn the_cas_knows_a_file_nobody_asked_this_server_about() {
    // A client that saved a listing while talking to an earlier run of the server asks the
    // CAS straight away, with the Xet hash it kept: no HEAD, no tree listing in this run.
    let hub = xet_builder().start().await.unwrap();
    let (t, cas) = token(&format!(
        "{}/api/models/{REPO}/xet-read-token/main",
        hub.url()
    ))
    .await;
    let hash = weight_inspect::xet::hash::file_hash(&mixed()).to_string();
    let rec = recon(&cas, &t, "v2", &hash, Some("bytes=1000-899999")).await;
    let want = &mixed()[1000..900_000];
    assert!(rebuild(&rec).await.bytes[..want.len()] == *want);
    // A hash no file has is still not found.
    let r = recon_response(&cas, &t, "v1", &"ab".repeat(32), None).await;
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn without_v2_a_client_falls_back_to_v1() {
    let hub = xet_builder().xet_v2(false).start().await.unwrap();
    let hd = head(&hub, REPO, "main", "big.bin").await;
    let (t, cas) = token(&hd.token_url).await;
    let r = recon_response(&cas, &t, "v2", &hd.xet_hash, None).await;
    assert_eq!(r.status(), 404);
    let rec = recon(&cas, &t, "v1", &hd.xet_hash, None).await;
    assert!(rebuild(&rec).await.bytes == big());
}

#[tokio::test]
async fn xorb_urls_are_signed_expire_and_answer_the_exact_range() {
    let hub = xet_builder().start().await.unwrap();
    let hd = head(&hub, REPO, "main", "big.bin").await;
    let (t, cas) = token(&hd.token_url).await;
    let rec = recon(&cas, &t, "v2", &hd.xet_hash, None).await;
    let f = rec.fetches.values().flatten().next().unwrap().clone();
    assert!(f
        .url
        .starts_with(&format!("{}/xorbs/{}?", hub.cdn_url(), f.xorb)));
    let c = client();
    // No Range: the whole xorb.
    let whole = c.get(&f.url).send().await.unwrap();
    assert_eq!(whole.status(), 200);
    let whole = whole.bytes().await.unwrap();
    // Any range, exactly.
    let r = c
        .get(&f.url)
        .header("range", "bytes=3-1000")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 206);
    assert_eq!(
        hdr(&r, "content-range"),
        format!("bytes 3-1000/{}", whole.len())
    );
    assert_eq!(r.bytes().await.unwrap(), whole[3..=1000]);
    // A signature for another xorb, expiry or none at all: 403.
    let sig = f.url.rsplit_once("sig=").unwrap().1.to_string();
    let other_sig = format!(
        "{}{}",
        &sig[..sig.len() - 1],
        if sig.ends_with('0') { '1' } else { '0' }
    );
    let expires = f
        .url
        .split_once("expires=")
        .unwrap()
        .1
        .split_once('&')
        .unwrap()
        .0
        .to_string();
    let later = (expires.parse::<u64>().unwrap() + 1000).to_string();
    for bad in [
        f.url.replace(&sig, &other_sig),
        f.url.replace(&expires, &later),
        f.url.split_once('?').unwrap().0.to_string(),
    ] {
        let r = c.get(&bad).send().await.unwrap();
        assert_eq!(r.status(), 403, "{bad}");
    }
    assert_eq!(hub.stats().cas.xorb_requests, 2);

    // A URL that expired (lifetime 0) is refused.
    let hub = xet_builder()
        .xet_url_ttl(Duration::ZERO)
        .start()
        .await
        .unwrap();
    let hd = head(&hub, REPO, "main", "big.bin").await;
    let (t, cas) = token(&hd.token_url).await;
    let rec = recon(&cas, &t, "v2", &hd.xet_hash, None).await;
    let f = rec.fetches.values().flatten().next().unwrap();
    let r = c
        .get(&f.url)
        .header("range", f.bytes.header())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.text().await.unwrap().contains("expired"));
}

#[tokio::test]
async fn the_token_endpoint_follows_the_repository_access_rules() {
    let hub = xet_builder().start().await.unwrap();
    let c = client();
    let url = |repo: &str| format!("{}/api/models/{repo}/xet-read-token/main", hub.url());
    let r = c.get(url("org/gated")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(hdr(&r, "x-error-code"), "GatedRepo");
    assert_eq!(
        c.get(url("org/gated"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let r = c.get(url("org/private")).send().await.unwrap();
    assert_eq!(
        (r.status(), hdr(&r, "x-error-code")),
        (StatusCode::UNAUTHORIZED, "RepoNotFound".into())
    );
    assert_eq!(
        c.get(url("org/private"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let r = c
        .get(url(REPO))
        .bearer_auth("hf_wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = c
        .get(format!(
            "{}/api/models/{REPO}/xet-read-token/nope",
            hub.url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(hdr(&r, "x-error-code"), "RevisionNotFound");

    // Without --xet: no token endpoint, no CAS, no Xet headers, no xetHash.
    let (hub, _d) = start().await;
    let r = c
        .get(format!(
            "{}/api/models/org/model/xet-read-token/main",
            hub.url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = c
        .get(format!(
            "{}/cas/v1/reconstructions/{}",
            hub.url(),
            XetHash([1; 32])
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = c
        .head(format!("{}/org/model/resolve/main/model.bin", hub.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FOUND);
    assert!(h(&r, "x-xet-hash").is_none() && h(&r, "link").is_none());
    let tree = c
        .get(format!("{}/api/models/org/model/tree/main", hub.url()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!tree.contains("xetHash"));
    let r = c
        .post(format!("{}/v1/telemetry", hub.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(hub.xet_stored(), mock_server::XetStored::default());
}

#[tokio::test]
async fn a_revision_that_changes_a_byte_reuses_the_old_xorbs() {
    let hub = xet_builder().start().await.unwrap();
    let c = client();
    let (old, old_xorbs) = through_cas(&hub, REPO, "main", "mixed.bin").await;
    let before = hub.xet_stored();
    let r = c
        .post(format!("{}/_mock/mutate", hub.url()))
        .json(&json!({"repo": REPO, "path": "mixed.bin"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (new, new_xorbs) = through_cas(&hub, REPO, "main", "mixed.bin").await;
    let after = hub.xet_stored();
    assert_eq!(new.len(), old.len());
    assert_eq!(old.iter().zip(&new).filter(|(a, b)| a != b).count(), 1);
    assert_eq!(after.files, before.files + 1);
    assert!(after.chunks - before.chunks <= 2, "{before:?} → {after:?}");
    assert!(after.xorb_bytes - before.xorb_bytes <= 2 * (131_072 + 1024));
    assert_eq!(new_xorbs.difference(&old_xorbs).count(), 1, "one new xorb");
    // The bridge agrees.
    let r = c
        .get(format!("{}/{REPO}/resolve/main/mixed.bin", hub.url()))
        .send()
        .await
        .unwrap();
    let cdn = hdr(&r, "location");
    assert!(c.get(cdn).send().await.unwrap().bytes().await.unwrap() == new);
}

#[tokio::test]
async fn inserted_bytes_shift_the_file_and_cost_a_few_chunks() {
    let hub = xet_builder().start().await.unwrap();
    let c = client();
    let old = big();
    let old_commit = hub.commit(REPO);
    let (got, _) = through_cas(&hub, REPO, "main", "big.bin").await;
    assert!(got == old);
    let before = hub.xet_stored();
    let r = c
        .post(format!("{}/_mock/mutate", hub.url()))
        .json(&json!({"repo": REPO, "path": "big.bin", "insert_at": 300_001, "insert_len": 77}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let commit = r.json::<Value>().await.unwrap()["commit"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(hub.commit(REPO), commit);
    let (new, _) = through_cas(&hub, REPO, "main", "big.bin").await;
    assert_eq!(new.len(), old.len() + 77);
    assert!(new[..300_001] == old[..300_001] && new[300_001 + 77..] == old[300_001..]);
    assert!(new[300_001..300_001 + 77] != [0; 77]);
    let after = hub.xet_stored();
    assert!(after.chunks - before.chunks <= 3, "{before:?} → {after:?}");
    // The CDN streams the spliced file, any range of it.
    let r = c
        .head(format!("{}/{REPO}/resolve/main/big.bin", hub.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(hdr(&r, "x-linked-etag"), format!("\"{}\"", sha256(&new)));
    let cdn = hdr(&r, "location");
    for (a, b) in [
        (0, new.len() - 1),
        (299_000, 300_100),
        (300_050, 400_000),
        (300_078, 300_078),
    ] {
        let r = c
            .get(&cdn)
            .header("range", format!("bytes={a}-{b}"))
            .send()
            .await
            .unwrap();
        assert!(r.bytes().await.unwrap() == new[a..=b], "{a}-{b}");
    }
    // The old commit keeps its bytes; a second insertion stacks on the first.
    let (back, _) = through_cas(&hub, REPO, &old_commit, "big.bin").await;
    assert!(back == old);
    let c2 = hub.insert_bytes(REPO, "big.bin", 0, 5).unwrap();
    let (newer, _) = through_cas(&hub, REPO, &c2, "big.bin").await;
    assert!(newer[5..] == new[..]);
    // Refusals.
    let bad = |body: Value| {
        let c = c.clone();
        let url = format!("{}/_mock/mutate", hub.url());
        async move { c.post(url).json(&body).send().await.unwrap().status() }
    };
    assert_eq!(
        bad(json!({"repo": REPO, "path": "big.bin", "insert_at": 10_000_000, "insert_len": 1}))
            .await,
        400
    );
    assert_eq!(bad(json!({"repo": REPO, "path": "big.bin", "insert_at": 0, "insert_len": (64u64 << 20) + 1})).await, 400);
    assert_eq!(
        bad(json!({"repo": REPO, "path": "big.bin", "insert_at": 0})).await,
        400
    );
    assert_eq!(bad(json!({"repo": REPO, "path": "big.bin", "content": "x", "insert_at": 0, "insert_len": 1})).await, 400);
    assert_eq!(
        bad(json!({"repo": REPO, "path": "nope", "insert_at": 0, "insert_len": 1})).await,
        404
    );
    assert_eq!(
        bad(json!({"repo": "org/nope", "path": "big.bin", "insert_at": 0, "insert_len": 1})).await,
        404
    );
}

#[tokio::test]
async fn faults_with_target_cas_reach_xorbs_and_reconstructions_only() {
    let hub = xet_builder().start().await.unwrap();
    let c = client();
    let hd = head(&hub, REPO, "main", "big.bin").await;
    let (t, cas) = token(&hd.token_url).await;
    let rec = recon(&cas, &t, "v2", &hd.xet_hash, None).await;
    let f = rec.fetches.values().flatten().next().unwrap().clone();
    let fetch = || {
        let (c, f) = (c.clone(), f.clone());
        async move {
            c.get(&f.url)
                .header("range", f.bytes.header())
                .send()
                .await
                .unwrap()
        }
    };
    let good = fetch().await.bytes().await.unwrap();
    // Hub and CDN rules leave the CAS alone.
    hub.faults().push(Fault::status(503).on(Target::Hub));
    hub.faults().push(Fault::status(503).on(Target::Cdn));
    assert_eq!(
        recon_response(&cas, &t, "v2", &hd.xet_hash, None)
            .await
            .status(),
        200
    );
    assert!(fetch().await.bytes().await.unwrap() == good);
    hub.faults().clear();
    // A status on the CAS: the reconstruction, then a xorb.
    hub.faults().push(
        "status=503,target=cas,times=2"
            .parse::<mock_server::FaultRule>()
            .unwrap(),
    );
    assert_eq!(
        recon_response(&cas, &t, "v2", &hd.xet_hash, None)
            .await
            .status(),
        503
    );
    assert_eq!(fetch().await.status(), 503);
    assert_eq!(fetch().await.status(), 206);
    // Flipped bytes, a cut and a hold on xorb bodies.
    hub.faults()
        .push(Fault::FlipBytes { count: 1 }.on(Target::Cas).times(1));
    let flipped = fetch().await.bytes().await.unwrap();
    assert_eq!(flipped.len(), good.len());
    assert_eq!(flipped.iter().zip(&good).filter(|(a, b)| a != b).count(), 1);
    hub.faults()
        .push(Fault::CutAfter { bytes: 100 }.on(Target::Cas).times(1));
    assert!(fetch().await.bytes().await.is_err());
    let sent = hub.stats().cas.xorb_bytes_sent;
    hub.faults()
        .push(Fault::Hold { after_bytes: 10 }.on(Target::Cas).times(1));
    let held = tokio::spawn(fetch());
    hub.wait_for(|s| s.held == 1, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(hub.stats().cas.xorb_bytes_sent, sent + 10);
    hub.release_holds();
    assert!(held.await.unwrap().bytes().await.unwrap() == good);
    // A reconstruction is no body: body faults leave it whole.
    hub.faults()
        .push(Fault::CutAfter { bytes: 1 }.on(Target::Cas).times(1));
    assert_eq!(
        recon_response(&cas, &t, "v2", &hd.xet_hash, None)
            .await
            .status(),
        200
    );
    assert_eq!(hub.faults().list().len(), 1);
}
