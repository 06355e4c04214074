//! `wi-fetch cache verify | push | pull | ls | rm | prune` (verify, push and pull run the main
//! command line: see `FetchArgs::checking`).

use super::*;

/// Manage the Hugging Face cache, as `hf cache` does: list, remove, prune, verify.
#[derive(Debug, clap::Args)]
#[command(long_about = None)]
#[command(after_help = "\
The cache is --cache-dir, else HF_HUB_CACHE, else $HF_HOME/hub (as for downloads); with \
--llama-cpp, --cache-dir, else LLAMA_CACHE, else the same Hugging Face cache (llama.cpp's own \
order), plus the flat files older llama.cpp versions left in LLAMA_CACHE or ~/.cache/llama.cpp.

Nothing outside the cache is ever removed (links are removed, never followed), and nothing a \
running download holds the lock of.

Exit codes: 0 done; 1 usage or local error (no cache folder, a removal failed); 4 a target is \
not in the cache.")]
pub(super) struct CacheCli {
    #[command(subcommand)]
    command: CacheCommand,
}

#[derive(Debug, clap::Subcommand)]
enum CacheCommand {
    /// Verify what is cached (like `hf cache verify`), against what the Hub says of each file
    /// (a lock file's pins with --locked, the cache's own records with --offline); download
    /// nothing: see `wi-fetch --help`.
    Verify(Box<VerifyArgs>),
    /// Upload what is cached to the remote cache (--remote-cache URL or WI_REMOTE_CACHE): each
    /// selected file is verified as `cache verify` does, then uploaded (blob, manifest, index),
    /// nothing sent for a blob the bucket has. For an air-gapped cluster: fill the bucket on one
    /// machine, fetch with `--offline --remote-cache` on the others.
    Push(Box<FetchArgs>),
    /// Fill the cache from the remote cache (--remote-cache URL or WI_REMOTE_CACHE) without the
    /// Hub: a fetch with --offline and --no-upload. Each file is read from the bucket, every
    /// chunk checked against its manifest and the whole file against its SHA-256 (a lock
    /// file's pins with --locked, else the bucket's index, a hint as the cache's own records
    /// are).
    Pull(Box<FetchArgs>),
    /// List cached repositories (or revisions), their size, files and state (like `hf cache ls`).
    Ls(LsArgs),
    /// Remove repositories, revisions or files (like `hf cache rm`).
    Rm(RmArgs),
    /// Remove what nothing uses: detached revisions, orphaned blobs, stale partial downloads,
    /// unused manifests, listings and locks (like `hf cache prune`, and more).
    Prune(PruneArgs),
}

/// `cache verify`: the fetch's own arguments, and what only a check takes.
#[derive(Debug, clap::Args)]
struct VerifyArgs {
    #[command(flatten)]
    fetch: FetchArgs,
    /// Fail (exit 2) when a snapshot folder holds a file that neither the listing (the Hub's,
    /// else the one saved for the commit; offline without one, nothing is judged) nor the lock
    /// file knows: something else put it there. Without --strict such files are named and the
    /// check passes.
    #[arg(long)]
    strict: bool,
}

#[derive(Debug, clap::Args)]
struct CacheDirArgs {
    /// Cache folder (default: HF_HUB_CACHE, else $HF_HOME/hub).
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Work on llama.cpp's cache: LLAMA_CACHE (else the Hugging Face cache), plus the flat files
    /// of older llama.cpp versions.
    #[arg(long)]
    llama_cpp: bool,
    /// Print one JSON document on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Each file is complete, partial (an interrupted or running download; its resumable bytes are \
what its resume state records) or damaged (its snapshot link dangles or leaves blobs/, or its \
blob's size differs from the manifest recorded when it was verified). Nothing is hashed: \
`wi-fetch cache verify` does that.

--json prints {root, size_on_disk, repos: [{cache_id, repo_id, repo_type, path, size_on_disk, \
shared_bytes, nb_files, last_accessed, last_modified, refs: {ref: commit}, in_use, revisions: \
[{commit, refs, snapshot_path, size_on_disk, nb_files, last_modified, files: [{path, etag, size, \
state, resumable_bytes?, problem?, shared?}]}], partials: [{etag, tool, data_path, state_path, \
path, commit, size, bytes_on_disk, resumable_bytes, in_use, stale}], unreferenced_blobs: {etag: \
size}}], shared_store?: {path, entries, size_on_disk, unreferenced: {xet_hash: size}}, warnings, \
llama_cpp_legacy?}; times are Unix seconds. A file kept in huggingface_hub's shared blob store \
counts at its size in each repository that links to it (shared_bytes) and once in the total.")]
struct LsArgs {
    /// Only these repositories (org/name, model/org/name, dataset/org/name).
    #[arg(value_name = "REPO")]
    repos: Vec<String>,
    /// One row per revision (commit), with its refs and files.
    #[arg(long)]
    revisions: bool,
    #[command(flatten)]
    common: CacheDirArgs,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
TARGET is a repository (org/name, or hf's cache ids model/org/name, dataset/org/name), a \
revision (org/name@REVISION: a branch, tag, commit or unique commit prefix; or a bare 40-digit \
commit hash, found in any repository), or files (org/name:PATH in every cached revision, \
org/name@REVISION:PATH in one; a folder PATH takes the files below it). With --llama-cpp, a \
file name ending in .gguf names a flat download of an older llama.cpp.

Removing a revision removes its snapshot, the refs naming it and the blobs no other revision \
uses; removing every revision removes the repository.")]
struct RmArgs {
    /// What to remove.
    #[arg(value_name = "TARGET", required = true)]
    targets: Vec<String>,
    /// Show what would be removed and how many bytes it frees; remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(long, short)]
    yes: bool,
    #[command(flatten)]
    common: CacheDirArgs,
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Removes detached revisions (snapshots no ref names, as `hf cache prune` does) and the blobs \
only they used; blobs no snapshot links to; partial downloads of an older version of a file \
whose newer version is complete (and their resume states); manifests, saved listings and \
.no_exist markers nothing uses any more; lock files no process holds. A partial download \
whose lock is held (a running download) is never touched.

With --remote-cache URL, also what nodes filling a file together left in that bucket: a fill \
whose blob is complete there (its pieces and leases), a fill none of whose objects changed for \
--abandoned-after (its nodes stopped), a lease on uploading a blob unchanged as long.")]
struct PruneArgs {
    /// Only these repositories.
    #[arg(value_name = "REPO")]
    repos: Vec<String>,
    /// Also remove the abandoned fills of this remote cache (s3://, gs://, az://, file://).
    #[arg(long, value_name = "URL")]
    remote_cache: Option<String>,
    /// With --remote-cache: a fill none of whose objects changed for this long is abandoned (a
    /// fill under way renews its leases every few seconds).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", default_value = "1h")]
    abandoned_after: Duration,
    /// Show what would be removed and how many bytes it frees; remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Accepted for `hf cache prune` compatibility (prune never asks).
    #[arg(long, short, hide = true)]
    yes: bool,
    #[command(flatten)]
    common: CacheDirArgs,
}

/// `wi-fetch cache …`: runs `ls`, `rm` or `prune` and gives their exit code; `verify` is
/// handed back, its arguments to run as a fetch that only checks.
pub(super) fn cache_main(cli: CacheCli) -> Result<FetchArgs, u8> {
    let result = match cli.command {
        CacheCommand::Verify(args) => {
            let VerifyArgs { mut fetch, strict } = *args;
            fetch.strict = strict;
            return Ok(fetch);
        }
        CacheCommand::Push(args) => {
            let mut args = *args;
            args.push = true;
            return Ok(args);
        }
        CacheCommand::Pull(args) => {
            let mut args = *args;
            args.pull = true;
            args.offline = true;
            args.no_upload = true;
            return Ok(args);
        }
        CacheCommand::Ls(a) => cache_ls(a),
        CacheCommand::Rm(a) => cache_rm(a),
        CacheCommand::Prune(a) => cache_prune(a),
    };
    Err(match result {
        Ok(code) => code,
        Err((msg, code)) => {
            eprintln!("wi-fetch: error: {}", escape(&msg));
            code
        }
    })
}

fn env_lookup(k: &str) -> Option<std::ffi::OsString> {
    std::env::var_os(k)
}

fn cache_root(a: &CacheDirArgs) -> PathBuf {
    manage::cache_root_from(a.cache_dir.as_deref(), a.llama_cpp, &env_lookup)
}

fn manage_fail(e: manage::ManageError) -> Failure {
    (e.to_string(), 1)
}

/// "3d ago", "5m ago" from Unix seconds.
fn ago(t: Option<u64>) -> String {
    let Some(t) = t else {
        return "-".to_string();
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let d = now.saturating_sub(t);
    match d {
        0..60 => format!("{d}s ago"),
        60..3600 => format!("{}m ago", d / 60),
        3600..86400 => format!("{}h ago", d / 3600),
        _ => format!("{}d ago", d / 86400),
    }
}

/// Prints rows as columns separated by two spaces (every cell already escaped).
fn print_table(out: &mut impl Write, headers: &[&str], rows: &[Vec<String>]) -> io::Result<()> {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                l.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        l.trim_end().to_string()
    };
    writeln!(out, "{}", line(headers.to_vec()))?;
    for r in rows {
        writeln!(out, "{}", line(r.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}

fn cache_ls(a: LsArgs) -> Result<u8, Failure> {
    let root = cache_root(&a.common);
    let legacy = a
        .common
        .llama_cpp
        .then(|| manage::llama_cpp_legacy_dir_from(&env_lookup))
        .flatten()
        .map(|d| manage::scan_llama_cpp_legacy(&d))
        .unwrap_or_default();
    let mut report = match manage::scan(&root, &a.repos) {
        Ok(r) => r,
        Err(manage::ManageError::NoCache { .. }) if !legacy.is_empty() => manage::CacheReport {
            root: root.clone(),
            size_on_disk: 0,
            repos: Vec::new(),
            shared_store: None,
            warnings: Vec::new(),
            llama_cpp_legacy: Vec::new(),
        },
        Err(e) => return Err(manage_fail(e)),
    };
    report.llama_cpp_legacy = legacy;
    let missing = not_found(&a.repos, &report);
    write_stdout(|out| {
        if a.common.json {
            let s = serde_json::to_string_pretty(&report).map_err(io::Error::other)?;
            return writeln!(out, "{s}");
        }
        if report.repos.is_empty() {
            writeln!(
                out,
                "No cached repositories found in {}.",
                escape(&report.root.to_string_lossy())
            )?;
        } else if a.revisions {
            print_revisions(out, &report)?;
        } else {
            print_repos(out, &report)?;
        }
        if !report.repos.is_empty() {
            let revisions: usize = report.repos.iter().map(|r| r.revisions.len()).sum();
            writeln!(
                out,
                "\nFound {} repo(s) for a total of {} revision(s) and {} on disk.",
                report.repos.len(),
                revisions,
                human_bytes(report.size_on_disk)
            )?;
        }
        if let Some(s) = &report.shared_store {
            let mut line = format!(
                "Shared blob store (huggingface_hub's): {} file(s), {}",
                s.entries,
                human_bytes(s.size_on_disk)
            );
            if !s.unreferenced.is_empty() {
                line.push_str(&format!(
                    "; {} unreferenced ({}): remove them with 'wi-fetch cache prune'",
                    s.unreferenced.len(),
                    human_bytes(s.unreferenced.values().sum())
                ));
            }
            writeln!(out, "{line}.")?;
        }
        if !report.llama_cpp_legacy.is_empty() {
            print_legacy(out, &report.llama_cpp_legacy)?;
        }
        Ok(())
    })?;
    for w in &report.warnings {
        eprintln!("wi-fetch: warning: {}", escape(w));
    }
    for m in &missing {
        eprintln!("wi-fetch: not in the cache: {}", escape(m));
    }
    Ok(if missing.is_empty() { 0 } else { 4 })
}

/// The repositories asked for (`asked`) that the scan did not find, by any of the names
/// one may give: its cache id, a model's id, the folder's name.
fn not_found<'a>(asked: &'a [String], report: &manage::CacheReport) -> Vec<&'a String> {
    asked
        .iter()
        .filter(|o| {
            !report.repos.iter().any(|r| {
                r.cache_id.eq_ignore_ascii_case(o)
                    || (r.repo_type == "model" && r.repo_id.eq_ignore_ascii_case(o))
                    || r.cache_id
                        .replace("model/", "models/")
                        .eq_ignore_ascii_case(o)
                    || r.cache_id
                        .replace("dataset/", "datasets/")
                        .eq_ignore_ascii_case(o)
                    || r.path.file_name().is_some_and(|n| n == o.as_str())
            })
        })
        .collect()
}

/// `cache ls --revisions`: a row per revision, then each revision's files and their state.
fn print_revisions(out: &mut impl Write, report: &manage::CacheReport) -> io::Result<()> {
    let mut rows = Vec::new();
    for r in &report.repos {
        for v in &r.revisions {
            rows.push(vec![
                escape(&r.cache_id).into_owned(),
                escape(&v.commit).into_owned(),
                human_bytes(v.size_on_disk),
                v.nb_files.to_string(),
                ago(v.last_modified),
                escape(&v.refs.join(" ")).into_owned(),
            ]);
        }
    }
    print_table(
        out,
        &["ID", "REVISION", "SIZE", "FILES", "LAST_MODIFIED", "REFS"],
        &rows,
    )?;
    for r in &report.repos {
        for v in &r.revisions {
            writeln!(out, "\n{} @ {}", escape(&r.cache_id), short(&v.commit))?;
            for f in &v.files {
                let state = match f.state {
                    manage::FileState::Complete => "complete".to_string(),
                    manage::FileState::Partial => format!(
                        "partial ({} resumable)",
                        human_bytes(f.resumable_bytes.unwrap_or(0))
                    ),
                    manage::FileState::Damaged => {
                        format!("DAMAGED: {}", escape(f.problem.as_deref().unwrap_or("?")))
                    }
                };
                let size = f.size.map(human_bytes).unwrap_or_else(|| "-".into());
                let shared = if f.shared.is_some() { " (shared)" } else { "" };
                writeln!(
                    out,
                    "  {:>10}  {}  {}{shared}",
                    size,
                    escape(&f.path),
                    state
                )?;
            }
        }
    }
    Ok(())
}

/// `cache ls`: a row per repository.
fn print_repos(out: &mut impl Write, report: &manage::CacheReport) -> io::Result<()> {
    let rows: Vec<Vec<String>> = report
        .repos
        .iter()
        .map(|r| {
            let refs: Vec<&str> = r.refs.keys().map(String::as_str).collect();
            vec![
                escape(&r.cache_id).into_owned(),
                human_bytes(r.size_on_disk),
                r.nb_files.to_string(),
                ago(r.last_accessed),
                ago(r.last_modified),
                escape(&refs.join(" ")).into_owned(),
                repo_notes(r),
            ]
        })
        .collect();
    print_table(
        out,
        &[
            "ID",
            "SIZE",
            "FILES",
            "LAST_ACCESSED",
            "LAST_MODIFIED",
            "REFS",
            "NOTES",
        ],
        &rows,
    )?;
    Ok(())
}

/// The flat downloads of an older llama.cpp, one line each.
fn print_legacy(out: &mut impl Write, legacy: &[manage::LegacyFile]) -> io::Result<()> {
    writeln!(out, "\nOlder llama.cpp downloads:")?;
    for f in legacy {
        let orphan = if f.orphaned {
            " (orphaned: prune removes it)"
        } else {
            ""
        };
        writeln!(
            out,
            "  {:>10}  {:<8}  {}{orphan}",
            human_bytes(f.size),
            f.kind,
            escape(&f.name)
        )?;
    }
    Ok(())
}

/// Partial, damaged, unreferenced and in-use notes of a repository row.
fn repo_notes(r: &manage::RepoReport) -> String {
    let mut notes = Vec::new();
    if !r.partials.is_empty() {
        let resumable: u64 = r.partials.iter().map(|p| p.resumable_bytes).sum();
        let stale = r.partials.iter().filter(|p| p.stale).count();
        let mut n = format!(
            "{} partial ({} resumable)",
            r.partials.len(),
            human_bytes(resumable)
        );
        if stale > 0 {
            n.push_str(&format!(", {stale} stale"));
        }
        notes.push(n);
    }
    let damaged = r
        .revisions
        .iter()
        .flat_map(|v| &v.files)
        .filter(|f| f.state == manage::FileState::Damaged)
        .count();
    if damaged > 0 {
        notes.push(format!("{damaged} DAMAGED"));
    }
    if r.shared_bytes > 0 {
        notes.push(format!("{} shared", human_bytes(r.shared_bytes)));
    }
    if !r.unreferenced_blobs.is_empty() {
        notes.push(format!(
            "{} unreferenced blob(s)",
            r.unreferenced_blobs.len()
        ));
    }
    let detached = r.revisions.iter().filter(|v| v.refs.is_empty()).count();
    if detached > 0 {
        notes.push(format!("{detached} detached"));
    }
    if r.in_use {
        notes.push("downloading now".to_string());
    }
    notes.join("; ")
}

/// Prints a planned or done removal: one line per item, then what was skipped and the total.
fn print_removal(r: &manage::Removal, json: bool, verb: &str) -> Result<(), Failure> {
    write_stdout(|out| {
        if json {
            let s = serde_json::to_string_pretty(r).map_err(io::Error::other)?;
            return writeln!(out, "{s}");
        }
        for i in &r.items {
            let kind = serde_json::to_value(i.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            writeln!(
                out,
                "  {kind:<13} {:>10}  {}  {}",
                human_bytes(i.bytes),
                escape(i.repo.as_deref().unwrap_or("-")),
                escape(&i.what)
            )?;
        }
        if r.dry_run {
            writeln!(
                out,
                "Dry run: {} item(s) would be {verb}, freeing {} ({} bytes); nothing removed.",
                r.items.len(),
                human_bytes(r.freed_bytes),
                r.freed_bytes
            )
        } else {
            writeln!(
                out,
                "{} {} item(s); freed {} ({} bytes).",
                capitalize(verb),
                r.items.len(),
                human_bytes(r.freed_bytes),
                r.freed_bytes
            )
        }
    })?;
    for s in &r.skipped {
        eprintln!(
            "wi-fetch: left {}: {}",
            escape(&s.path.to_string_lossy()),
            escape(&s.reason)
        );
    }
    for n in &r.not_found {
        eprintln!("wi-fetch: not in the cache: {}", escape(n));
    }
    Ok(())
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// Merges a second plan (older llama.cpp files) into the first.
fn cache_rm(a: RmArgs) -> Result<u8, Failure> {
    let root = cache_root(&a.common);
    let (legacy_names, targets): (Vec<String>, Vec<String>) = a
        .targets
        .iter()
        .cloned()
        .partition(|t| a.common.llama_cpp && !t.contains('/') && t.ends_with(".gguf"));
    let parsed: Vec<manage::Target> = targets
        .iter()
        .map(|t| manage::Target::parse(t))
        .collect::<Result<_, _>>()
        .map_err(manage_fail)?;
    let mut plan = if targets.is_empty() {
        manage::plan_removal(
            &manage::CacheReport {
                root: root.clone(),
                size_on_disk: 0,
                repos: Vec::new(),
                shared_store: None,
                warnings: Vec::new(),
                llama_cpp_legacy: Vec::new(),
            },
            &[],
            &[],
        )
    } else {
        let report = manage::scan(&root, &[]).map_err(manage_fail)?;
        manage::plan_removal(&report, &parsed, &targets)
    };
    let mut legacy_plan = None;
    if !legacy_names.is_empty() {
        match manage::llama_cpp_legacy_dir_from(&env_lookup) {
            Some(dir) => {
                let lp = manage::plan_legacy_removal(&dir, &legacy_names);
                plan.not_found.extend(lp.not_found.iter().cloned());
                legacy_plan = Some(lp);
            }
            None => plan.not_found.extend(legacy_names.iter().cloned()),
        }
    }
    let n_items = plan.items.len() + legacy_plan.as_ref().map_or(0, |p| p.items.len());
    let missing = !plan.not_found.is_empty();
    if a.dry_run || n_items == 0 {
        let shown = match legacy_plan {
            Some(lp) => plan.merge(lp),
            None => plan,
        };
        if n_items == 0 && !a.common.json {
            for n in &shown.not_found {
                eprintln!("wi-fetch: not in the cache: {}", escape(n));
            }
            eprintln!("wi-fetch: nothing to remove");
            return Ok(if missing { 4 } else { 0 });
        }
        print_removal(&shown, a.common.json, "removed")?;
        return Ok(if missing { 4 } else { 0 });
    }
    if !a.yes {
        if !io::stdin().is_terminal() {
            return Err((
                "cache rm asks for confirmation: pass -y (stdin is not a terminal)".to_string(),
                1,
            ));
        }
        let preview = match legacy_plan.clone() {
            Some(lp) => plan.clone().merge(lp),
            None => plan.clone(),
        };
        print_removal(&preview, false, "removed")?;
        eprint!("Proceed with the removal? [y/N] ");
        let mut answer = String::new();
        let _ = io::stdin().read_line(&mut answer);
        if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
            eprintln!("wi-fetch: removal cancelled");
            return Ok(0);
        }
    }
    let mut done = manage::execute(plan);
    if let Some(lp) = legacy_plan {
        let l = manage::execute(lp);
        done.freed_bytes += l.freed_bytes;
        done.items.extend(l.items);
        done.skipped.extend(l.skipped);
    }
    print_removal(&done, a.common.json, "removed")?;
    Ok(if missing { 4 } else { 0 })
}

fn cache_prune(a: PruneArgs) -> Result<u8, Failure> {
    let root = cache_root(&a.common);
    let legacy_dir = a
        .common
        .llama_cpp
        .then(|| manage::llama_cpp_legacy_dir_from(&env_lookup))
        .flatten();
    let mut plan = match manage::scan(&root, &a.repos) {
        Ok(report) => manage::plan_prune(&report, !a.repos.is_empty()),
        // No Hugging Face layout there: only the older llama.cpp files (an empty plan here).
        Err(manage::ManageError::NoCache { .. }) if legacy_dir.is_some() => {
            manage::plan_legacy_prune(&root)
        }
        Err(e) => return Err(manage_fail(e)),
    };
    let legacy = legacy_dir.map(|d| manage::plan_legacy_prune(&d));
    if !a.dry_run {
        plan = manage::execute(plan);
    }
    let plan = match legacy {
        Some(l) if a.dry_run => plan.merge(l),
        Some(l) => plan.merge(manage::execute(l)),
        None => plan,
    };
    let Some(url) = &a.remote_cache else {
        print_removal(&plan, a.common.json, "removed")?;
        return Ok(0);
    };
    let remote = prune_remote(url, a.abandoned_after, a.dry_run)?;
    if a.common.json {
        let mut doc = serde_json::to_value(&plan).map_err(|e| (e.to_string(), 1))?;
        doc["remote_cache"] = serde_json::json!({
            "url": remote.0,
            "dry_run": a.dry_run,
            "abandoned": remote.1,
        });
        let s = serde_json::to_string_pretty(&doc).map_err(|e| (e.to_string(), 1))?;
        write_stdout(|out| writeln!(out, "{s}"))?;
        return Ok(0);
    }
    print_removal(&plan, false, "removed")?;
    let (url, found) = remote;
    write_stdout(|out| {
        for f in &found {
            writeln!(
                out,
                "  {:<13} {:>10}  {url}/{}  ({} object(s): {})",
                "remote-fill",
                human_bytes(f.bytes),
                escape(&f.key),
                f.objects,
                f.why
            )?;
        }
        let bytes: u64 = found.iter().map(|f| f.bytes).sum();
        let verb = if a.dry_run {
            "would be removed"
        } else {
            "removed"
        };
        writeln!(
            out,
            "Remote cache {url}: {} abandoned fill(s) {verb} ({}).",
            found.len(),
            human_bytes(bytes)
        )
    })?;
    Ok(0)
}

/// `cache prune --remote-cache URL`: the bucket's abandoned fills, removed unless `dry_run`;
/// the store's URL (without credentials) and what was found.
fn prune_remote(
    url: &str,
    untouched_for: Duration,
    dry_run: bool,
) -> Result<(String, Vec<crate::remote_cache::Abandoned>), Failure> {
    use crate::remote_cache::RemoteCache;
    let cache = RemoteCache::open(url.trim()).map_err(|e| fail(e.into()))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| (format!("cannot start the async runtime: {e}"), 1))?;
    rt.block_on(async {
        let found = cache
            .abandoned_fills(untouched_for)
            .await
            .map_err(|e| fail(e.into()))?;
        if !dry_run {
            for f in &found {
                cache
                    .remove_abandoned(f)
                    .await
                    .map_err(|e| fail(e.into()))?;
            }
        }
        Ok((cache.url().to_string(), found))
    })
}
