//! What `wi-fetch` prints when it is done: the local paths or the JSON summary on stdout, the
//! summary line of each repository on stderr, and a dry run's plan.

use super::*;

/// Prints the local paths (or the JSON summary: one object, or an array under a lock file) and
/// the summary lines.
pub(super) fn print_summaries(
    summaries: &[FetchSummary],
    json: bool,
    show: bool,
) -> Result<(), Failure> {
    // Whatever the output mode: the files are the cache's, not the Hub's answer.
    warn_unreachable(summaries);
    write_stdout(|out| {
        if json {
            let s = match summaries {
                [one] => serde_json::to_string_pretty(one),
                many => serde_json::to_string_pretty(many),
            }
            .map_err(io::Error::other)?;
            writeln!(out, "{s}")
        } else {
            for f in summaries.iter().flat_map(|s| &s.files) {
                writeln!(out, "{}", escape(&f.local_path.to_string_lossy()))?;
            }
            Ok(())
        }
    })?;
    if show {
        for s in summaries {
            print_summary(s);
        }
    }
    Ok(())
}

/// `wi-fetch download`'s output, as `hf download` prints it: the file's path when one file was
/// asked for by name, else the folder holding the files (snapshot or local folder); the
/// summary line on stderr as usual.
pub(super) fn print_as_hf_download(
    summary: &FetchSummary,
    selection: &Selection,
    show: bool,
) -> Result<(), Failure> {
    let one_file = match (&selection.files[..], &summary.files[..]) {
        ([asked], [got]) if !asked.ends_with('/') && selection.include.is_empty() => Some(got),
        _ => None,
    };
    let path = match one_file {
        Some(f) => &f.local_path,
        None => &summary.folder,
    };
    warn_unreachable(std::slice::from_ref(summary));
    write_stdout(|out| writeln!(out, "{}", escape(&path.to_string_lossy())))?;
    if show {
        print_summary(summary);
    }
    Ok(())
}

/// The warning line of a fetch the cache answered because the Hub could not be reached.
fn warn_unreachable(summaries: &[FetchSummary]) {
    for s in summaries {
        if let Some(why) = &s.unreachable {
            eprintln!(
                "wi-fetch: warning: the Hub could not be reached ({}); answered {} from the cache \
                 (--no-cache-fallback refuses instead)",
                escape(why),
                s.repo
            );
        }
    }
}

/// Writes to stdout with `f`, then flushes: a write that fails (a full disk) is an error (exit
/// 1) naming stdout; a closed pipe (`wi-fetch … | head -1`) just ends the output.
pub(super) fn write_stdout(
    f: impl FnOnce(&mut io::StdoutLock<'_>) -> io::Result<()>,
) -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    match f(&mut out).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err((format!("cannot write the output to stdout: {e}"), 1)),
    }
}

pub(super) fn print_plan(plan: &Plan, json: bool, show: bool) -> Result<(), Failure> {
    write_stdout(|out| {
        if json {
            let s = serde_json::to_string_pretty(plan).map_err(io::Error::other)?;
            writeln!(out, "{s}")
        } else {
            for f in &plan.files {
                let state = if f.cached {
                    "cached".to_string()
                } else if f.partial_bytes > 0 {
                    format!("partial {}", human_bytes(f.partial_bytes))
                } else {
                    "fetch".to_string()
                };
                writeln!(out, "{}\t{}\t{}", escape(&f.path), f.size, state)?;
            }
            Ok(())
        }
    })?;
    if show {
        if let Some(n) = &plan.notice {
            eprintln!("wi-fetch: note: {}", escape(n));
        }
        if let Some(w) = &plan.witness {
            eprintln!("wi-fetch: note: {}", escape(&w.message));
        }
        for r in &plan.refused {
            eprintln!(
                "wi-fetch: note: left out '{}' of the listing: {}",
                escape(&r.path),
                escape(&r.reason)
            );
        }
        eprintln!(
            "wi-fetch: {} at {} → commit {}: {} file(s), {}; {} cached, {} to fetch (dry run: nothing downloaded)",
            plan.repo,
            escape(&plan.revision),
            short(&plan.commit),
            plan.files.len(),
            human_bytes(plan.total_bytes()),
            human_bytes(plan.cached_bytes()),
            human_bytes(plan.bytes_to_fetch()),
        );
    }
    Ok(())
}

pub(super) fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

pub(super) fn print_summary(s: &FetchSummary) {
    // The notice (if any) was shown when it came, as a reporter event.
    let fetched = s.files.len() - s.cached_count();
    let secs = s.elapsed.as_secs_f64().max(1e-3);
    let mut line = format!(
        "wi-fetch: {} at {} ({}): {} file(s), {}",
        s.repo,
        escape(&s.revision),
        short(&s.commit),
        s.files.len(),
        human_bytes(s.total_bytes())
    );
    if fetched > 0 {
        line.push_str(&format!(
            "; fetched {} ({}) in {:.1}s at {}/s",
            fetched,
            human_bytes(s.transferred()),
            secs,
            human_bytes((s.transferred() as f64 / secs) as u64),
        ));
        // Where the bytes came from: the remote cache (named), the Hub for the rest.
        let reads: Vec<&crate::fetch::RemoteRead> = s
            .files
            .iter()
            .filter_map(|f| f.remote_read.as_ref())
            .filter(|r| r.bytes > 0)
            .collect();
        if let Some(first) = reads.first() {
            let from_remote: u64 = reads.iter().map(|r| r.bytes).sum();
            let from_hub = s.transferred().saturating_sub(from_remote);
            line.push_str(&format!(
                ", {} of it from the remote cache {}",
                human_bytes(from_remote),
                first.store()
            ));
            if from_hub > 0 {
                line.push_str(&format!(" and {} from the Hub", human_bytes(from_hub)));
            }
        } else {
            let xet: Vec<&crate::fetch::XetRead> =
                s.files.iter().filter_map(|f| f.xet.as_ref()).collect();
            let through: u64 = xet.iter().map(|x| x.bytes).sum();
            if through > 0 {
                let xorbs: u64 = xet.iter().map(|x| x.xorb_bytes).sum();
                let reused: u64 = xet.iter().map(|x| x.reused.min(x.bytes)).sum();
                let copied = if reused > 0 {
                    format!(
                        ", {} copied from the version the cache held",
                        human_bytes(reused)
                    )
                } else {
                    String::new()
                };
                let unchecked = xet.iter().filter(|x| !x.checked).count();
                let hashes = if unchecked == 0 {
                    "every file's Xet hash checked".to_string()
                } else {
                    format!(
                        "{unchecked} of {} file(s) held to their SHA-256 alone: {}",
                        xet.len(),
                        xet.iter()
                            .find_map(|x| x.unchecked.as_deref())
                            .map(escape)
                            .unwrap_or_default()
                    )
                };
                line.push_str(&format!(
                    " from the Hub, {} of it through its CAS (Xet: {} of xorbs{copied}, \
                     {hashes})",
                    human_bytes(through),
                    human_bytes(xorbs)
                ));
                if let Some(why) = xet.iter().find_map(|x| x.left.as_deref()) {
                    line.push_str(&format!(", the rest through its bridge ({})", escape(why)));
                }
            } else if let Some(why) = xet.iter().find_map(|x| x.left.as_deref()) {
                line.push_str(&format!(
                    " from the Hub through its bridge (its CAS failed: {})",
                    escape(why)
                ));
            } else {
                line.push_str(" from the Hub");
            }
        }
        // Worth a word only when more than one connection was used at once.
        if s.connections.peak > 1 {
            line.push_str(&format!(
                " over {:.1} connection(s) on average ({} at most; count {})",
                s.connections.mean,
                s.connections.peak,
                s.connection_path.describe()
            ));
        }
        if s.files_at_once.peak > 1 {
            line.push_str(&format!(
                ", {} file(s) at once at most ({:.1} on average)",
                s.files_at_once.peak, s.files_at_once.mean
            ));
        }
    }
    if s.cached_count() > 0 {
        line.push_str(&format!(
            "; {} already in the local cache",
            s.cached_count()
        ));
    }
    // Bytes kept on disk: what an earlier run left, and the good part of a damaged copy
    // (there may have been no earlier run).
    let kept = s.kept_from_damaged();
    if s.resumed() > kept {
        line.push_str(&format!(
            "; resumed {} from an earlier run",
            human_bytes(s.resumed() - kept)
        ));
    }
    if kept > 0 {
        line.push_str(&format!(
            "; kept {} of the damaged copy (its chunks that still matched)",
            human_bytes(kept)
        ));
    }
    if s.refetched() > 0 {
        line.push_str(&format!(
            "; re-fetched {} after faults",
            human_bytes(s.refetched())
        ));
    }
    // Chunks wrong in the bucket are the bucket's, not the network's.
    let in_bucket = s.bucket_damaged_chunks();
    let on_the_way = s.corrupt_copies().saturating_sub(u64::from(in_bucket));
    if on_the_way > 0 {
        line.push_str(&format!(
            "; {} corrupt cop{} of chunks thrown away (each unlike the others: corrupted on the way)",
            on_the_way,
            if on_the_way == 1 { "y" } else { "ies" }
        ));
    }
    if in_bucket > 0 {
        line.push_str(&format!(
            "; {in_bucket} chunk(s) wrong in the remote cache, fetched from the Hub instead"
        ));
    }

    if s.splits() > 0 {
        line.push_str(&format!(
            "; {} slow range(s) split between connections",
            s.splits()
        ));
    }
    let causes = s.retry_causes();
    if causes.total() > 0 {
        line.push_str(&format!(
            "; {} retries ({})",
            causes.total(),
            causes.describe()
        ));
    }
    let (n, ok) = s.verified();
    if n > 0 {
        line.push_str(&format!("; verification: {ok}/{n} model file(s) valid"));
    } else {
        line.push_str("; no model file to verify");
    }
    if let Some(sig) = &s.signature {
        line.push_str(&signature_part(sig));
    }
    eprintln!("{line}");
    for f in &s.files {
        if let Some(part) = &f.fill {
            eprintln!("wi-fetch: {}: {}", escape(&f.path), fill_line(part));
        }
        if let Some(v) = f.verification.as_ref().filter(|v| v.covered_by.is_none()) {
            for w in &v.warnings {
                eprintln!("wi-fetch: warning: {}: {}", escape(&f.path), escape(w));
            }
        }
    }
}

/// What the signature check did, never more: who signed, what the statement is, which files
/// were hashed against it now and which were taken from the cache as checked before
/// ("; the model's signature, made by the key 3f…, holds (statement sha256:9a1c…, model
/// 'm'): 2 file(s) hashed against it, 1 from the cache as checked before (--verify full
/// hashes them again)").
fn signature_part(sig: &crate::fetch::SignatureCheck) -> String {
    let mut part = format!("; the model's signature, made by {}, holds", sig.signer);
    let mut about = Vec::new();
    if let Some(d) = &sig.statement_sha256 {
        about.push(format!("statement sha256:{}", &d[..d.len().min(16)]));
    }
    if !sig.model.is_empty() {
        about.push(format!("model '{}'", escape(&sig.model)));
    }
    if !about.is_empty() {
        part.push_str(&format!(" ({})", about.join(", ")));
    }
    let (cached, left) = (sig.files_from_cache.len(), sig.files_not_covered.len());
    match (sig.files_hashed, cached, left) {
        (0, 0, _) => part.push_str(": no file of this fetch is one it names"),
        (n, 0, 0) => part.push_str(&format!(": every file hashed against it ({n})")),
        (n, 0, _) => part.push_str(&format!(": {n} file(s) hashed against it")),
        (n, c, _) => part.push_str(&format!(
            ": {n} file(s) hashed against it, {c} taken from the cache as checked before, not \
             hashed now (--verify full hashes them)"
        )),
    }
    if left > 0 {
        let shown: Vec<String> = sig
            .files_not_covered
            .iter()
            .take(4)
            .map(|p| escape(p).into_owned())
            .collect();
        part.push_str(&format!(
            "; {left} file(s) its signer left out, not checked against it ({}{})",
            shown.join(", "),
            if left > 4 { ", …" } else { "" }
        ));
    }
    part
}

/// A file filled together with other nodes: who fetched what from the Hub, who read what from
/// the bucket ("filled with other nodes: 3 chunk(s) fetched from the Hub by node-1 (this node),
/// 9 read from the bucket (node-3: 5, node-2: 4)").
fn fill_line(part: &crate::remote_cache::FillReport) -> String {
    let read: u64 = part.read_from.values().sum();
    let mut line = format!(
        "filled with other nodes: {} chunk(s) fetched from the Hub by {} (this node)",
        part.fetched,
        escape(&part.node)
    );
    if part.taken_over > 0 {
        line.push_str(&format!(
            ", {} of them taken over from a node that stopped",
            part.taken_over
        ));
    }
    if part.waited_out > 0 {
        line.push_str(&format!(
            ", {} more fetched by this node after waiting past the bound for another's",
            part.waited_out
        ));
    }
    if read > 0 {
        let who: Vec<String> = part
            .read_from
            .iter()
            .map(|(n, c)| format!("{}: {c}", escape(n)))
            .collect();
        line.push_str(&format!(
            ", {read} read from the bucket ({})",
            who.join(", ")
        ));
    }
    if !part.damaged.is_empty() {
        line.push_str(&format!(
            "; damaged pieces deleted: {}",
            part.damaged.join(", ")
        ));
    }
    if let Some(t) = &part.trouble {
        line.push_str(&format!("; {}", escape(t)));
    }
    line
}
