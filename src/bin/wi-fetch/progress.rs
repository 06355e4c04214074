//! What `wi-fetch` draws from the reporter's events: bars on a terminal, a log line every few
//! seconds otherwise.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Quiet,
    Bars,
    Log,
}

pub(super) struct Progress {
    mode: Mode,
    /// What a file found in the cache is, on its line ("in the cache", or checked in full).
    pub(super) cached_means: &'static str,
    /// Only checking (`cache verify`): the plan's line says so.
    pub(super) checking: bool,
    /// Files that failed and the message each got, in the order they did (for the repair
    /// command, and so that the final error does not repeat them).
    failed: Mutex<Vec<(FileId, String, String)>>,
    mp: MultiProgress,
    state: Mutex<State>,
}

struct State {
    total: Option<ProgressBar>,
    bars: HashMap<FileId, ProgressBar>,
    /// Files whose transfer started (bytes discarded before it were never counted).
    begun: HashSet<FileId>,
    /// Retries per file not shown (after the first one's line), said once as the file ends.
    retries: HashMap<FileId, (u32, String)>,
    /// Bytes this run transfers (not those already on disk).
    to_fetch: u64,
    done: u64,
    started: Instant,
    last_log: Instant,
}

impl Progress {
    pub(super) fn new(mode: Mode) -> Self {
        let mp = MultiProgress::with_draw_target(if mode == Mode::Bars {
            ProgressDrawTarget::stderr_with_hz(10)
        } else {
            ProgressDrawTarget::hidden()
        });
        let now = Instant::now();
        Progress {
            mode,
            cached_means: "in the cache",
            checking: false,
            failed: Mutex::new(Vec::new()),
            mp,
            state: Mutex::new(State {
                total: None,
                bars: HashMap::new(),
                begun: HashSet::new(),
                retries: HashMap::new(),
                to_fetch: 0,
                done: 0,
                started: now,
                last_log: now,
            }),
        }
    }

    /// The files that failed so far.
    pub(super) fn failed_files(&self) -> Vec<String> {
        let failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        failed.iter().map(|(_, f, _)| f.clone()).collect()
    }

    /// The final error of a fetch, as one line: when every failure in it was already shown on a
    /// `FAILED` line, it says how many and points there instead of saying it again.
    pub(super) fn fail(&self, e: FetchError) -> Failure {
        let code = e.exit_code() as u8;
        let failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        let (first, others) = match &e {
            FetchError::Several { first, others } => (first.to_string(), *others),
            other => (other.to_string(), 0),
        };
        // Every failure of the run is a file's (each reported as it failed): the final line
        // names them all, and says what happened to each when it was not shown above.
        let every_file = failed.len() == others + 1 && failed.iter().any(|(_, _, m)| *m == first);
        if every_file {
            let n = failed.len();
            let what = if n == 1 {
                "file failed"
            } else {
                "files failed"
            };
            if self.mode != Mode::Quiet {
                let names: Vec<&str> = failed.iter().map(|(_, f, _)| f.as_str()).collect();
                return (
                    format!("{n} {what}, named above: {}", names.join(", ")),
                    code,
                );
            }
            let each: Vec<String> = failed
                .iter()
                .map(|(_, f, m)| {
                    if m.starts_with(&format!("{f}: ")) {
                        m.clone()
                    } else {
                        format!("{f}: {m}")
                    }
                })
                .collect();
            return (format!("{n} {what}: {}", each.join("; ")), code);
        }
        (e.to_string(), code)
    }

    pub(super) fn line(&self, msg: &str) {
        match self.mode {
            Mode::Quiet => {}
            Mode::Bars => {
                let _ = self.mp.println(escape(msg));
            }
            Mode::Log => eprintln!("{}", escape(msg)),
        }
    }

    pub(super) fn finish(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for (_, b) in st.bars.drain() {
            b.finish_and_clear();
        }
        if let Some(t) = st.total.take() {
            t.finish_and_clear();
        }
        let _ = self.mp.clear();
    }

    /// A file's bar: its speed counts only what this run fetched (`resumed` bytes were on disk
    /// before it started, and fill the bar without a transfer).
    fn file_style(resumed: u64) -> ProgressStyle {
        ProgressStyle::with_template(
            "{msg:30!} [{bar:30.cyan/blue}] {bytes:>10}/{total_bytes:10} {run_rate:>12}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .with_key(
            "run_rate",
            move |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = w.write_str(&run_rate(s.pos(), resumed, s.elapsed()));
            },
        )
        .progress_chars("=> ")
    }

    fn total_style() -> ProgressStyle {
        ProgressStyle::with_template(
            "{prefix:30!} [{bar:30.green/white}] {bytes:>10}/{total_bytes:10} {bytes_per_sec:>12} ETA {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
    }

    /// The retries of a file not shown on their own line, said once as it ends.
    fn more_retries(&self, st: &mut State, id: FileId, file: &str) {
        if let Some((more, last)) = st.retries.remove(&id).filter(|(n, _)| *n > 0) {
            self.line(&format!(
                "wi-fetch: {file}: {more} more failed attempt(s) (the last: {last})"
            ));
        }
    }

    fn log_progress(&self, st: &mut State, force: bool) {
        if self.mode != Mode::Log {
            return;
        }
        let now = Instant::now();
        if !force && now.duration_since(st.last_log) < Duration::from_secs(3) {
            return;
        }
        st.last_log = now;
        let secs = now.duration_since(st.started).as_secs_f64();
        eprintln!("{}", progress_line(st.done, st.to_fetch, secs));
    }
}

/// The log line of the whole transfer: `done` of `to_fetch` bytes of this run after `secs`
/// (bytes already on disk from an earlier run count in neither, so the speed and the ETA are
/// this run's).
fn progress_line(done: u64, to_fetch: u64, secs: f64) -> String {
    let rate = done as f64 / secs.max(1e-3);
    let pct = if to_fetch > 0 {
        100.0 * done as f64 / to_fetch as f64
    } else {
        100.0
    };
    let eta = if rate > 0.0 && to_fetch > done {
        format!(", ETA {:.0}s", (to_fetch - done) as f64 / rate)
    } else {
        String::new()
    };
    format!(
        "wi-fetch: {pct:.0}% {}/{} at {}/s{eta}",
        human_bytes(done),
        human_bytes(to_fetch),
        human_bytes(rate as u64)
    )
}

impl Reporter for Progress {
    fn on_event(&self, event: &Event<'_>) {
        if let Event::FileFailed { id, file, error } = event {
            let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
            if !failed.iter().any(|(i, _, _)| i == id) {
                failed.push((*id, file.to_string(), error.to_string()));
            }
        }
        if self.mode == Mode::Quiet {
            return;
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match event {
            Event::Plan {
                files,
                total_bytes,
                cached_bytes,
                partial_bytes,
                ..
            } => self.on_plan(&mut st, *files, *total_bytes, *cached_bytes, *partial_bytes),
            Event::CachedCopyUnusable { size, .. } => {
                // Counted as in the cache by the plan, to fetch after all: its start subtracts
                // what of it is kept, so that each byte is counted once.
                st.to_fetch += size;
                if let Some(t) = &st.total {
                    t.inc_length(*size);
                }
            }
            Event::FileStart {
                id,
                file,
                size,
                resumed_bytes,
            } => self.on_file_start(&mut st, *id, file, *size, *resumed_bytes),
            Event::Progress { id, bytes, .. } => {
                st.done += bytes;
                if let Some(b) = st.bars.get(id) {
                    b.inc(*bytes);
                }
                if let Some(t) = &st.total {
                    t.inc(*bytes);
                }
                self.log_progress(&mut st, false);
            }
            Event::Discarded {
                id,
                file,
                bytes,
                reason,
            } => self.on_discarded(&mut st, *id, file, *bytes, reason),
            Event::Retry {
                id,
                file,
                attempt,
                delay,
                error,
                ..
            } => self.on_retry(&mut st, *id, file, *attempt, *delay, error),
            Event::FileDownloaded { id, file, .. } => {
                if let Some(b) = st.bars.get(id) {
                    b.set_message(format!("{} (verifying)", escape(file)));
                }
            }
            Event::Verifying { .. } => {}
            Event::FileDone {
                id,
                file,
                cached,
                from_remote,
                ..
            } => {
                self.more_retries(&mut st, *id, file);
                self.end_bar(&mut st, *id, BarEnd::Cleared);
                self.line(&format!(
                    "wi-fetch: {file}: {}",
                    self.done_how(*cached, *from_remote)
                ));
            }
            Event::FileFailed { id, file, error } => {
                self.more_retries(&mut st, *id, file);
                self.end_bar(&mut st, *id, BarEnd::Abandoned);
                // The message names the file already when it starts with it: once is enough.
                let error = error.strip_prefix(&format!("{file}: ")).unwrap_or(error);
                self.line(&format!("wi-fetch: {file}: FAILED: {error}"));
            }
            Event::FileStopped {
                id,
                file,
                kept,
                size,
            } => {
                self.end_bar(&mut st, *id, BarEnd::Abandoned);
                self.line(&format!(
                    "wi-fetch: {file}: stopped; {} of {} kept for the next run",
                    human_bytes(*kept),
                    human_bytes(*size)
                ));
            }
            Event::UploadStart { id, file, size, to } => {
                self.line(&format!("wi-fetch: {file}: uploading to {to}"));
                if self.mode == Mode::Bars {
                    let b = self.mp.add(ProgressBar::new(*size));
                    b.set_style(Self::file_style(0));
                    b.set_message(format!("{} (upload)", escape(file)));
                    st.bars.insert(*id, b);
                }
            }
            Event::UploadProgress { id, bytes, .. } => {
                if let Some(b) = st.bars.get(id) {
                    b.inc(*bytes);
                }
            }
            Event::UploadDone {
                id,
                file,
                sent,
                already_there,
            } => {
                self.end_bar(&mut st, *id, BarEnd::Cleared);
                if *already_there {
                    self.line(&format!("wi-fetch: {file}: already in the remote cache"));
                } else {
                    self.line(&format!(
                        "wi-fetch: {file}: uploaded ({})",
                        human_bytes(*sent)
                    ));
                }
            }
            Event::UploadFailed { id, file, error } => {
                self.end_bar(&mut st, *id, BarEnd::Abandoned);
                self.line(&format!("wi-fetch: {file}: upload FAILED: {error}"));
            }
            Event::Notice { file, message, .. } => match file {
                Some(f) => self.line(&format!("wi-fetch: note: {f}: {message}")),
                None => self.line(&format!("wi-fetch: note: {message}")),
            },
            _ => {}
        }
    }
}

/// How a file's bar goes once the file (or its upload) ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BarEnd {
    /// It ended well: the bar is cleared and taken off the screen.
    Cleared,
    /// It failed or stopped: the bar stays where it got to.
    Abandoned,
}

impl Progress {
    /// The plan's line (what is to fetch, what is in the cache or on disk already), and the
    /// total bar when something is to fetch.
    fn on_plan(&self, st: &mut State, files: usize, total: u64, cached: u64, partial: u64) {
        st.to_fetch = total.saturating_sub(cached);
        st.started = Instant::now();
        if self.checking {
            self.line(&format!(
                "wi-fetch: checking {files} file(s), {}; downloading nothing",
                human_bytes(total)
            ));
        } else if partial > 0 {
            // One true thing: what is complete, and what interrupted downloads left.
            self.line(&format!(
                "wi-fetch: {files} file(s), {}; {} complete in the cache, {} of \
                 interrupted downloads on disk to resume",
                human_bytes(total),
                human_bytes(cached),
                human_bytes(partial)
            ));
        } else if cached > 0 || self.mode == Mode::Log {
            self.line(&format!(
                "wi-fetch: {files} file(s), {}; {} already in the cache",
                human_bytes(total),
                human_bytes(cached)
            ));
        }
        if self.mode == Mode::Bars && st.to_fetch > 0 {
            let t = self.mp.add(ProgressBar::new(st.to_fetch));
            t.set_style(Self::total_style());
            t.set_prefix(format!("total ({files} files)"));
            st.total = Some(t);
        }
    }

    /// A file's transfer starts: the `resumed` bytes on disk leave the totals, a line says
    /// what is resumed, and the file gets its bar.
    fn on_file_start(&self, st: &mut State, id: FileId, file: &str, size: u64, resumed: u64) {
        // The totals count what this run transfers: bytes already on disk are not to
        // fetch, so they neither fill the bar nor inflate its speed and ETA.
        st.begun.insert(id);
        st.to_fetch = st.to_fetch.saturating_sub(resumed);
        if let Some(t) = &st.total {
            t.set_length(t.length().unwrap_or(0).saturating_sub(resumed));
        }
        if resumed >= size {
            self.line(&format!(
                "wi-fetch: {file}: complete on disk from an earlier run; checking it"
            ));
        } else if resumed > 0 {
            self.line(&format!(
                "wi-fetch: {file}: resuming, {} of {} already on disk",
                human_bytes(resumed),
                human_bytes(size)
            ));
        }
        if self.mode == Mode::Bars {
            let b = match &st.total {
                Some(t) => self.mp.insert_before(t, ProgressBar::new(size)),
                None => self.mp.add(ProgressBar::new(size)),
            };
            b.set_style(Self::file_style(resumed));
            b.set_message(escape(file).into_owned());
            b.set_position(resumed);
            st.bars.insert(id, b);
        }
    }

    /// Bytes of a file thrown away: they are to fetch again, and its bar goes back.
    fn on_discarded(&self, st: &mut State, id: FileId, file: &str, bytes: u64, reason: &str) {
        // Counted as on disk (or transferred) once, and to transfer again: more to
        // fetch in this run. Before its start, a file's discarded bytes were never
        // counted as on disk.
        if st.begun.contains(&id) {
            st.to_fetch += bytes;
            if let Some(t) = &st.total {
                t.inc_length(bytes);
            }
        }
        if let Some(b) = st.bars.get(&id) {
            b.set_position(b.position().saturating_sub(bytes));
        }
        self.line(&format!(
            "wi-fetch: {file}: {} to fetch again ({reason})",
            human_bytes(bytes)
        ));
    }

    /// A failed attempt: the file's first has a line, the others are counted.
    fn on_retry(
        &self,
        st: &mut State,
        id: FileId,
        file: &str,
        attempt: u32,
        delay: Duration,
        error: &str,
    ) {
        // One line per file: its first retry; the others are counted and said once,
        // as the file ends (a file in many ranges retries each of them).
        match st.retries.get_mut(&id) {
            Some((more, last)) => {
                *more += 1;
                *last = error.to_string();
            }
            None => {
                st.retries.insert(id, (0, error.to_string()));
                self.line(&format!(
                    "wi-fetch: {file}: attempt {attempt} failed ({error}); retrying in {:.1}s",
                    delay.as_secs_f64()
                ));
            }
        }
    }

    /// Where a done file's bytes came from: the local cache, the remote cache, the Hub.
    fn done_how(&self, cached: bool, from_remote: Option<(&str, u64)>) -> String {
        match (cached, from_remote) {
            (true, _) => self.cached_means.to_string(),
            (false, Some((store, bytes))) => format!(
                "fetched, {} from the remote cache {store}",
                human_bytes(bytes)
            ),
            (false, None) => "fetched from the Hub".to_string(),
        }
    }

    /// Takes a file's bar (if it has one) off the running ones, as `end` says.
    fn end_bar(&self, st: &mut State, id: FileId, end: BarEnd) {
        if let Some(b) = st.bars.remove(&id) {
            match end {
                BarEnd::Cleared => {
                    b.finish_and_clear();
                    self.mp.remove(&b);
                }
                BarEnd::Abandoned => b.abandon(),
            }
        }
    }
}

/// The speed of a file's transfer in this run, for its bar: the bytes fetched since the bar
/// started (its position less the `resumed` bytes already on disk) over the time since then.
fn run_rate(pos: u64, resumed: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    if secs < 0.05 {
        return String::new();
    }
    let rate = pos.saturating_sub(resumed) as f64 / secs;
    format!("{}/s", human_bytes(rate as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes resumed from an earlier run are not this run's: they shrink what is to fetch
    /// and count as neither done nor speed; bytes thrown away after the start are to fetch
    /// again, those thrown away before it (failing their check on resume) were never counted.
    #[test]
    fn totals_count_this_runs_bytes() {
        let p = Progress::new(Mode::Log);
        let mib = 1u64 << 20;
        let (a, b) = (FileId::next(), FileId::next());
        p.on_event(&Event::Plan {
            files: 2,
            total_bytes: 400 * mib,
            cached_bytes: 0,
            partial_bytes: 226 * mib,
        });
        p.on_event(&Event::Discarded {
            id: a,
            file: "a.gguf",
            bytes: mib,
            reason: "failed its hash check on resume",
        });
        p.on_event(&Event::FileStart {
            id: a,
            file: "a.gguf",
            size: 300 * mib,
            resumed_bytes: 226 * mib,
        });
        p.on_event(&Event::FileStart {
            id: b,
            file: "b.gguf",
            size: 100 * mib,
            resumed_bytes: 0,
        });
        p.on_event(&Event::Progress {
            id: b,
            file: "b.gguf",
            bytes: 40 * mib,
        });
        p.on_event(&Event::Discarded {
            id: b,
            file: "b.gguf",
            bytes: 2 * mib,
            reason: "a chunk failed",
        });
        let st = p.state.lock().unwrap();
        assert_eq!(st.to_fetch, 174 * mib + 2 * mib);
        assert_eq!(st.done, 40 * mib);
        // 40 MiB in one second: 40 MiB/s, and the 136 MiB left take 3.4 s more.
        let line = progress_line(st.done, st.to_fetch, 1.0);
        assert_eq!(
            line,
            "wi-fetch: 23% 40.0 MiB/176.0 MiB at 40.0 MiB/s, ETA 3s"
        );
    }

    /// A repair: the plan counted the damaged file as in the cache, then its good chunks are
    /// kept and the bad one fetched. Each byte counts once: never over 100%.
    #[test]
    fn a_repaired_file_is_counted_once() {
        let p = Progress::new(Mode::Log);
        let mib = 1u64 << 20;
        let (a, b) = (FileId::next(), FileId::next());
        p.on_event(&Event::Plan {
            files: 2,
            total_bytes: 100 * mib,
            cached_bytes: 80 * mib,
            partial_bytes: 0,
        });
        p.on_event(&Event::CachedCopyUnusable {
            id: a,
            file: "a.gguf",
            size: 80 * mib,
        });
        p.on_event(&Event::FileStart {
            id: a,
            file: "a.gguf",
            size: 80 * mib,
            resumed_bytes: 70 * mib,
        });
        p.on_event(&Event::FileStart {
            id: b,
            file: "b.gguf",
            size: 20 * mib,
            resumed_bytes: 0,
        });
        for (id, file, n) in [(a, "a.gguf", 10 * mib), (b, "b.gguf", 20 * mib)] {
            p.on_event(&Event::Progress { id, file, bytes: n });
        }
        let st = p.state.lock().unwrap();
        assert_eq!((st.done, st.to_fetch), (30 * mib, 30 * mib));
        assert!(progress_line(st.done, st.to_fetch, 1.0).starts_with("wi-fetch: 100% "));
    }

    /// A resumed file's speed counts only this run's bytes: 8 GiB on disk and 10 MiB fetched in
    /// two seconds is 5 MiB/s, not terabytes per second.
    #[test]
    fn a_resumed_file_s_speed_counts_this_run_only() {
        let resumed = 8 << 30;
        assert_eq!(
            run_rate(resumed + (10 << 20), resumed, Duration::from_secs(2)),
            format!("{}/s", human_bytes(5 << 20))
        );
        assert_eq!(
            run_rate(resumed, resumed, Duration::from_secs(1)),
            format!("{}/s", human_bytes(0))
        );
        // Too soon to say.
        assert_eq!(run_rate(resumed, resumed, Duration::from_millis(1)), "");
    }

    /// Files are told apart by their download's id, not their path: two repositories' `a.gguf`
    /// failing are two failures, and the second one's start is a start of its own.
    #[test]
    fn files_are_keyed_by_id_not_path() {
        let p = Progress::new(Mode::Log);
        let (x, y) = (FileId::next(), FileId::next());
        for id in [x, y] {
            p.on_event(&Event::FileStart {
                id,
                file: "a.gguf",
                size: 10,
                resumed_bytes: 0,
            });
        }
        assert_eq!(p.state.lock().unwrap().begun.len(), 2);
        for id in [x, y, x] {
            p.on_event(&Event::FileFailed {
                id,
                file: "a.gguf",
                error: "boom",
            });
        }
        assert_eq!(p.failed_files(), vec!["a.gguf", "a.gguf"]);
    }
}
