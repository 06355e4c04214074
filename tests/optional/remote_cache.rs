//! The remote cache against real S3-compatible servers on loopback: Garage (`WI_GARAGE`), and
//! moto's server (`WI_PYTHON` with `moto[server]`), which honours conditional writes.

use crate::support::cli::{
    demo_file, expect_code, hub_builder, run, start, stderr, stdout, Sandbox, REPO,
};
use crate::support::remote_cache::{fetch_uploading, json, killed_mid_upload};

/// Against a real S3-compatible server (Garage, on loopback): the first node fills the bucket,
/// the second reads every byte from it (none from the Hub) and sends nothing; a node with a
/// wrong secret still gets its download from the Hub, and the failure names the bucket, never
/// the secret; with the bucket stopped, the Hub serves the file and the fetch succeeds.
pub fn garage_is_filled_once_and_credentials_stay_secret() {
    use crate::support::garage::{Garage, BUCKET};
    let garage = Garage::start();
    let endpoint = garage.endpoint.clone();
    let hub = start(hub_builder());
    let file = "tinyllama-q8_0.gguf";
    let size = demo_file(file).len() as u64;
    let url = format!("s3://{BUCKET}/team/models");

    let sb = Sandbox::new();
    let (o, up) = fetch_uploading(&sb, &hub, &url, &[], |c| garage.env(c));
    assert_eq!(up["outcome"], "sent", "{up} {}", stderr(&o));
    assert_eq!(up["bytes"], size);
    // Garage ignores If-None-Match: found out by the probe, said once, today's way kept.
    assert_eq!(
        stderr(&o)
            .matches("does not honour conditional writes")
            .count(),
        1,
        "{}",
        stderr(&o)
    );

    // Cold fleet: the next node gets every byte from the bucket, none from the Hub.
    let sb2 = Sandbox::new();
    hub.reset_stats();
    let (o, up) = fetch_uploading(&sb2, &hub, &url, &[], |c| garage.env(c));
    assert_eq!(
        (up["outcome"].as_str(), up["bytes"].as_u64()),
        (Some("already_there"), Some(0))
    );
    assert_eq!(hub.stats().file(REPO, file).bytes_sent, 0);
    assert_eq!(json(&o)["files"][0]["remote_read"]["bytes"], size);

    // A wrong secret: the bucket is named, never the secret, and the Hub serves the file.
    let sb3 = Sandbox::new();
    hub.reset_stats();
    let (o, up) = fetch_uploading(&sb3, &hub, &url, &[], |c| {
        garage.env_with(c, "not-the-secret-0123456789")
    });
    assert_eq!(up["outcome"], "failed", "{up}");
    let all = format!("{}{}", stdout(&o), stderr(&o));
    assert!(all.contains(&format!("s3://{BUCKET}/team/models")), "{all}");
    assert!(!all.contains("not-the-secret"), "{all}");
    assert_eq!(hub.stats().file(REPO, file).bytes_sent, size);
    assert!(json(&o)["files"][0].get("remote_read").is_none(), "{all}");

    // The bucket stopped: the download is the Hub's, exit 0, the bucket named in a notice.
    drop(garage);
    let sb4 = Sandbox::new();
    hub.reset_stats();
    let mut c = sb4.cmd(&hub);
    c.env("AWS_ACCESS_KEY_ID", crate::support::garage::KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", crate::support::garage::SECRET)
        .env("AWS_REGION", "garage")
        .env("AWS_ENDPOINT_URL", &endpoint)
        .args([REPO, file, "--json", "--remote-cache", &url]);
    let o = run(c);
    expect_code(&o, 0);
    assert_eq!(hub.stats().file(REPO, file).bytes_sent, size);
    assert!(
        stderr(&o).contains(&format!("s3://{BUCKET}/team/models")),
        "{}",
        stderr(&o)
    );
}

/// A bucket that does not exist (Garage answers `NoSuchBucket`): the fetch succeeds, and says
/// once, not per file, that the bucket does not exist and how to create it.
pub fn a_bucket_that_does_not_exist_is_said_once_with_how_to_create_it() {
    use crate::support::garage::Garage;
    let garage = Garage::start();
    let hub = start(hub_builder());
    let url = "s3://no-such-bucket/team";
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    garage.env(&mut c);
    c.args([
        REPO,
        "tinyllama-q8_0.gguf",
        "tinyllama-f16.gguf",
        "--remote-cache",
        url,
    ]);
    let o = run(c);
    expect_code(&o, 0);
    let e = stderr(&o);
    assert_eq!(
        e.matches("the bucket 'no-such-bucket' of the remote cache s3://no-such-bucket/team does not exist")
            .count(),
        1,
        "{e}"
    );
    assert_eq!(e.matches("aws s3 mb s3://no-such-bucket").count(), 1, "{e}");
}

pub fn a_node_killed_mid_upload_leaves_nothing_in_garage() {
    crate::block_on(async {
        use crate::support::garage::{Garage, BUCKET};
        let garage = tokio::task::spawn_blocking(Garage::start).await.unwrap();
        let cache = weight_inspect::remote_cache::RemoteCache::open_with_options(
            &format!("s3://{BUCKET}/killed"),
            garage.options(),
        )
        .unwrap();
        killed_mid_upload(&cache).await;
        drop(garage);
    })
}

/// The lease of [`RemoteCache::claim`], as issue 39's coordination uses it, for this long.
const LEASE_TTL: std::time::Duration = std::time::Duration::from_secs(10);

/// Nodes that start together coordinate through the bucket's own conditional writes: on a
/// store that honours them (moto's S3 server), the probe says so; of eight nodes claiming the
/// lease on one blob at once, exactly one wins and the seven others are told who holds it; the
/// holder renews it; once lapsed, of two nodes taking it over at once one wins, and the old
/// holder's renewal is refused; released, it is claimed at once.
pub fn moto_honours_conditional_writes_and_one_of_eight_nodes_leads() {
    use crate::support::moto::{Moto, BUCKET};
    use weight_inspect::manifest::Sha256Hex;
    use weight_inspect::remote_cache::{Claim, Lease, RemoteCache};
    let moto = Moto::start();
    crate::block_on(async {
        let url = format!("s3://{BUCKET}/team");
        let cache = RemoteCache::open_with_options(&url, moto.options()).unwrap();
        assert!(cache.conditional_writes("node-0").await.unwrap());
        let key = RemoteCache::lease_key(&Sha256Hex([7; 32]));
        let names: Vec<String> = (0..8).map(|n| format!("node-{n}")).collect();
        let now = cache.bucket_now_ms();
        let claims =
            futures::future::join_all(names.iter().map(|n| cache.claim(&key, n, LEASE_TTL, now)))
                .await;
        let mut won: Vec<Lease> = Vec::new();
        let mut held = Vec::new();
        for c in claims {
            match c.unwrap() {
                Claim::Won(l) => won.push(l),
                Claim::Held(r) => held.push(r),
            }
        }
        assert_eq!((won.len(), held.len()), (1, 7), "{won:?} {held:?}");
        let mut leader = won.pop().unwrap();
        assert!(
            held.iter().all(|h| h.record.holder == leader.holder()),
            "{held:?}"
        );
        assert!(cache.renew(&mut leader, LEASE_TTL).await.unwrap());
        // Of two followers taking it over at once from the version they read, one wins.
        let Claim::Held(read) = cache
            .claim(&key, "node-8", LEASE_TTL, cache.bucket_now_ms())
            .await
            .unwrap()
        else {
            panic!("held by the leader");
        };
        let later = cache.bucket_now_ms() + LEASE_TTL.as_millis() as u64 + 2_000;
        let (a, b) = futures::join!(
            cache.take_over(&key, &read, "node-8", LEASE_TTL, later),
            cache.take_over(&key, &read, "node-9", LEASE_TTL, later)
        );
        let mut took: Vec<Lease> = [a.unwrap(), b.unwrap()]
            .into_iter()
            .filter_map(|c| match c {
                Claim::Won(l) => Some(l),
                Claim::Held(_) => None,
            })
            .collect();
        assert_eq!(took.len(), 1);
        assert!(!cache.renew(&mut leader, LEASE_TTL).await.unwrap());
        cache.release(took.pop().unwrap()).await.unwrap();
        assert!(matches!(
            cache.claim(&key, "node-10", LEASE_TTL, now).await.unwrap(),
            Claim::Won(_)
        ));
        // Not rewritten for longer than its term by moto's clock (its Last-Modified, learnt by
        // the probe): a claim takes it over.
        assert!(cache.knows_bucket_clock());
        assert!(matches!(
            cache.claim(&key, "node-11", LEASE_TTL, later).await.unwrap(),
            Claim::Won(l) if l.taken_over()
        ));
    });
}

/// Garage 2.5 ignores `If-None-Match`: the probe finds it out, so that nodes fall back to each
/// fetching what it lacks instead of two of them believing they lead.
pub fn garage_ignores_conditional_writes_and_the_probe_says_so() {
    use crate::support::garage::{Garage, BUCKET};
    use weight_inspect::remote_cache::RemoteCache;
    let garage = Garage::start();
    crate::block_on(async {
        let url = format!("s3://{BUCKET}/team");
        let cache = RemoteCache::open_with_options(&url, garage.options()).unwrap();
        assert!(!cache.conditional_writes("node-0").await.unwrap());
    });
}

/// The fleet tests' repository and file: 12 MiB, no published manifest, cut in 1 MiB chunks.
const FLEET_REPO: &str = "org/fleet";
const FLEET_FILE: &str = "model.bin";

/// A Hub serving the fleet's file, each connection capped at `rate` bytes a second.
fn fleet_hub(rate: u64) -> (mock_server::BackgroundHub, Vec<u8>) {
    let bytes = crate::support::data(12 << 20, 41);
    let hub = start(
        mock_server::MockHub::builder()
            .lfs_threshold(64 << 10)
            .file(FLEET_REPO, FLEET_FILE, bytes.clone())
            .bandwidth(rate),
    );
    (hub, bytes)
}

/// `wi-fetch` in `sb` against `hub`, reading and filling `s3://wi-fleet/team` on `moto`, as
/// node `name`, in 1 MiB chunks over two connections, leases of two seconds.
fn fleet_node(
    sb: &Sandbox,
    hub: &mock_server::MockHub,
    moto: &crate::support::moto::Moto,
    name: &str,
) -> std::process::Command {
    fleet_node_in(sb, hub, moto, name, "team", "2s")
}

/// [`fleet_node`], filling below `prefix` in the bucket, with leases of `lease`.
fn fleet_node_in(
    sb: &Sandbox,
    hub: &mock_server::MockHub,
    moto: &crate::support::moto::Moto,
    name: &str,
    prefix: &str,
    lease: &str,
) -> std::process::Command {
    let mut c = sb.cmd(hub);
    moto.env(&mut c);
    c.args([FLEET_REPO, FLEET_FILE, "--json", "--remote-cache"])
        .arg(format!("s3://{}/{prefix}", crate::support::moto::BUCKET))
        .args([
            "--node-name",
            name,
            "--chunk-size",
            "1MiB",
            "--connections",
            "2",
        ])
        .args(["--fill-lease", lease]);
    c
}

/// Eight `wi-fetch` processes started together on an empty bucket that honours conditional
/// writes (moto): the Hub serves the file about once (not eight times), every node's file is
/// right, each says who fetched what, one node uploads the blob (the others find it there or
/// leave it to that node) and the fill's pieces are gone.
pub fn eight_wi_fetch_nodes_started_together_fill_from_the_hub_once() {
    use crate::support::moto::Moto;
    let moto = Moto::start();
    let (hub, bytes) = fleet_hub(4 << 20);
    let size = bytes.len() as u64;
    let boxes: Vec<Sandbox> = (0..8).map(|_| Sandbox::new()).collect();
    let children: Vec<std::process::Child> = boxes
        .iter()
        .enumerate()
        .map(|(n, sb)| {
            let mut c = fleet_node(sb, &hub, &moto, &format!("node-{n}"));
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    let outputs: Vec<std::process::Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let mut fetched = 0;
    let mut sent = 0;
    for o in &outputs {
        expect_code(o, 0);
        let f = &json(o)["files"][0];
        assert_eq!(
            std::fs::read(f["local_path"].as_str().unwrap()).unwrap(),
            bytes
        );
        fetched += f["fill"]["fetched"].as_u64().expect("each node took part");
        match f["upload"]["outcome"].as_str() {
            Some("sent") => sent += 1,
            Some("another_node" | "already_there") => {}
            _ => panic!("{f}"),
        }
        assert!(
            stderr(o).contains("filled with other nodes:"),
            "{}",
            stderr(o)
        );
    }
    let from_hub = hub.stats().file(FLEET_REPO, FLEET_FILE).bytes_sent;
    assert!(
        from_hub * 100 <= size * 105,
        "the Hub served {from_hub} bytes for a {size}-byte file to eight nodes"
    );
    assert_eq!(
        fetched,
        size.div_ceil(1 << 20),
        "each chunk fetched by one node"
    );
    assert_eq!(sent, 1, "one node uploads the blob");
    let cache = weight_inspect::remote_cache::RemoteCache::open_with_options(
        &format!("s3://{}/team", crate::support::moto::BUCKET),
        moto.options(),
    )
    .unwrap();
    let sha = crate::support::sha256_hex(&bytes).parse().unwrap();
    crate::block_on(async {
        assert!(cache.has_blob(&sha, size).await.unwrap());
        assert_eq!(
            weight_inspect::remote_cache::BucketFill::pieces(&cache, &sha)
                .await
                .unwrap(),
            0
        );
    });
}

/// A chunk's lease written into the bucket by a hostile or careless node (issue 48): an expiry
/// in the far future, a holder whose clock runs an hour ahead and then dies, a "done" mark
/// naming an object that is not a piece, or a piece that is not there. Each holds a node for no
/// longer than a lease's term: it takes the chunk over, fetches it, and finishes.
pub fn hostile_leases_in_the_bucket_hold_no_node_for_long() {
    use crate::support::moto::Moto;
    let moto = Moto::start();
    let (hub, bytes) = fleet_hub(64 << 20);
    let sha = crate::support::sha256_hex(&bytes);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let zeros = "0".repeat(64);
    let cases = [
        (
            "forever",
            r#"{"holder":"ghost","expires_ms":18446744073709551615}"#.to_string(),
        ),
        (
            "an hour ahead",
            format!(
                r#"{{"holder":"ahead","expires_ms":{},"ttl_ms":1000}}"#,
                now_ms + 3_600_000 + 1_000
            ),
        ),
        (
            "done, no piece",
            format!(
                r#"{{"holder":"liar","expires_ms":18446744073709551615,"done":"blobs/sha256/{zeros}"}}"#
            ),
        ),
        (
            "done, piece gone",
            format!(
                r#"{{"holder":"liar","expires_ms":18446744073709551615,"done":"fills/sha256/{sha}/1048576/piece-0-{zeros}.liar"}}"#
            ),
        ),
    ];
    for (n, (name, lease)) in cases.iter().enumerate() {
        let prefix = format!("team-{n}");
        moto.put(
            &format!("{prefix}/fills/sha256/{sha}/1048576/lease-0.json"),
            lease.as_bytes(),
        );
        let sb = Sandbox::new();
        let c = fleet_node_in(&sb, &hub, &moto, "node-b", &prefix, "1s");
        let o = run_within(c, std::time::Duration::from_secs(120));
        expect_code(&o, 0);
        let f = &json(&o)["files"][0];
        assert_eq!(
            std::fs::read(f["local_path"].as_str().unwrap()).unwrap(),
            bytes,
            "{name}"
        );
        assert!(
            f["fill"]["taken_over"].as_u64() >= Some(1),
            "{name}: chunk 0 taken over: {f}"
        );
    }
}

/// The node filling a file alone is killed (SIGKILL) once 30% of its pieces are in the
/// bucket: the next node reads those pieces, takes over the chunks the dead node held once
/// their leases lapse, and the Hub serves nothing twice but what was in flight at the kill.
pub fn a_leader_killed_at_30_percent_is_taken_over() {
    use crate::support::moto::Moto;
    use weight_inspect::remote_cache::{BucketFill, RemoteCache};
    let moto = Moto::start();
    let (hub, bytes) = fleet_hub(1 << 20);
    let size = bytes.len() as u64;
    let chunks = size.div_ceil(1 << 20) as usize;
    let cache = RemoteCache::open_with_options(
        &format!("s3://{}/team", crate::support::moto::BUCKET),
        moto.options(),
    )
    .unwrap();
    let sha = crate::support::sha256_hex(&bytes).parse().unwrap();
    let (a, b) = (Sandbox::new(), Sandbox::new());
    let mut leader = fleet_node(&a, &hub, &moto, "node-a");
    leader
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut leader = leader.spawn().unwrap();
    crate::support::cli::wait_for(
        "30% of the pieces in the bucket",
        std::time::Duration::from_secs(120),
        || {
            crate::block_on(async { BucketFill::pieces(&cache, &sha).await.unwrap() })
                >= chunks * 3 / 10
        },
    );
    leader.kill().unwrap();
    leader.wait().unwrap();
    let shared = crate::block_on(async { BucketFill::pieces(&cache, &sha).await.unwrap() });
    let before = hub.stats().file(FLEET_REPO, FLEET_FILE).bytes_sent;
    let o = run(fleet_node(&b, &hub, &moto, "node-b"));
    expect_code(&o, 0);
    let f = &json(&o)["files"][0];
    assert_eq!(
        std::fs::read(f["local_path"].as_str().unwrap()).unwrap(),
        bytes
    );
    let part = &f["fill"];
    assert!(part["taken_over"].as_u64().unwrap() >= 1, "{part}");
    // Every piece it shared is read; a piece whose PUT was on its way when it was killed can
    // still land (the server finishes a request it received whole): at most one per connection.
    let read = part["read_from"]["node-a"].as_u64().unwrap_or(0);
    assert!(
        (shared as u64..=shared as u64 + 2).contains(&read),
        "{shared} pieces counted after the kill: {part}"
    );
    // Every chunk once from the Hub, but those the leader had in flight (two connections).
    let total = hub.stats().file(FLEET_REPO, FLEET_FILE).bytes_sent;
    assert!(
        total <= size + 2 * (1 << 20),
        "the Hub served {total} bytes ({before} before the kill) for a {size}-byte file"
    );
    assert!(stderr(&o).contains("taken over"), "{}", stderr(&o));
}

/// One node alone on an empty bucket that honours conditional writes, wi-fetch's own chunk
/// size (16 MiB, each chunk fetched in several ranges, split between connections): it fills
/// the bucket by itself and finishes. (Before the engine asked the fill once per chunk, the
/// second part of a chunk waited on the lease its first part had just taken, for ever.)
pub fn one_node_alone_fills_with_chunks_fetched_in_several_ranges() {
    use crate::support::moto::Moto;
    let moto = Moto::start();
    let bytes = crate::support::data(24 << 20, 49);
    let hub = start(
        mock_server::MockHub::builder()
            .lfs_threshold(64 << 10)
            .file(FLEET_REPO, FLEET_FILE, bytes.clone())
            .bandwidth(20 << 20),
    );
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    moto.env(&mut c);
    c.args([FLEET_REPO, FLEET_FILE, "--json", "--remote-cache"])
        .arg(format!("s3://{}/alone", crate::support::moto::BUCKET))
        .args(["--node-name", "node-a"]);
    let o = run_within(c, std::time::Duration::from_secs(120));
    expect_code(&o, 0);
    let f = &json(&o)["files"][0];
    assert_eq!(
        std::fs::read(f["local_path"].as_str().unwrap()).unwrap(),
        bytes
    );
    assert_eq!(f["fill"]["fetched"], 2, "{f}");
    assert_eq!(
        hub.stats().file(FLEET_REPO, FLEET_FILE).bytes_sent,
        bytes.len() as u64
    );
}

/// Runs `c` to the end, killing it (and failing) if it is still running after `most`.
fn run_within(mut c: std::process::Command, most: std::time::Duration) -> std::process::Output {
    use std::process::Stdio;
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = c.spawn().expect("start wi-fetch");
    let pid = child.id().to_string();
    let (done, ended) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        let late = ended.recv_timeout(most).is_err();
        if late {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid])
                .status();
        }
        late
    });
    let o = child.wait_with_output().expect("wait for wi-fetch");
    let _ = done.send(());
    assert!(
        !watchdog.join().unwrap(),
        "still running after {most:?}: killed"
    );
    o
}
