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
    /// The whole transfer's recent speed, for the total's speed and ETA. Its own lock: the
    /// total bar's template reads it as it draws, which it may do while `state` is held.
    rate: Arc<Mutex<Throughput>>,
    /// The instant `rate`'s times count from.
    epoch: Instant,
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
                last_log: now,
            }),
            rate: Arc::new(Mutex::new(Throughput::new())),
            epoch: now,
        }
    }

    /// Seconds since `epoch`: the times `rate` is given.
    fn secs(&self, at: Instant) -> f64 {
        at.duration_since(self.epoch).as_secs_f64()
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

    /// The total's bar: its speed and ETA are [`Throughput`]'s, over every file, not
    /// indicatif's own estimate (which counts the time before the first byte and smooths
    /// twice over about 15 s: "ETA 5m" for a download of 15 s).
    fn total_style(&self) -> ProgressStyle {
        let rate = Arc::clone(&self.rate);
        let epoch = self.epoch;
        ProgressStyle::with_template(
            "{prefix:30!} [{bar:30.green/white}] {bytes:>10}/{total_bytes:10} {speed_eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .with_key(
            "speed_eta",
            move |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let now = Instant::now().duration_since(epoch).as_secs_f64();
                let rate = rate.lock().unwrap_or_else(|e| e.into_inner());
                let left = s.len().unwrap_or(0).saturating_sub(s.pos());
                if let Some(speed) = rate.rate(now) {
                    let _ = write!(w, "{:>12}", format!("{}/s", human_bytes(speed as u64)));
                    if let Some(eta) = rate.eta(now, left) {
                        let _ = write!(w, " ETA {}", eta_text(eta));
                    }
                }
            },
        )
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
        let at = self.secs(now);
        let rate = self.rate.lock().unwrap_or_else(|e| e.into_inner());
        let left = st.to_fetch.saturating_sub(st.done);
        let (speed, eta) = (rate.rate(at), rate.eta(at, left));
        drop(rate);
        eprintln!("{}", progress_line(st.done, st.to_fetch, speed, eta));
    }
}

/// The log line of the whole transfer: `done` of `to_fetch` bytes of this run (bytes already
/// on disk from an earlier run count in neither, so the speed and the ETA are this run's), at
/// the recent `speed` (bytes per second) and with the `eta` (seconds) [`Throughput`] gives,
/// each said once it has one.
fn progress_line(done: u64, to_fetch: u64, speed: Option<f64>, eta: Option<f64>) -> String {
    let pct = if to_fetch > 0 {
        100.0 * done as f64 / to_fetch as f64
    } else {
        100.0
    };
    let mut line = format!(
        "wi-fetch: {pct:.0}% {}/{}",
        human_bytes(done),
        human_bytes(to_fetch)
    );
    if let Some(speed) = speed {
        line.push_str(&format!(" at {}/s", human_bytes(speed as u64)));
    }
    if let Some(eta) = eta {
        line.push_str(&format!(", ETA {}", eta_text(eta)));
    }
    line
}

/// The whole transfer's recent throughput, over every file: an exponentially weighted average
/// of its speed, the last few seconds weighing most ([`Throughput::TAU`]), from the first bytes
/// on (the time before them, spent asking the Hub, is not a slow start). Times are seconds from
/// any fixed instant, given by the caller (so that tests feed them).
///
/// indicatif's own estimate, which the total's bar showed, counts from the bar's creation (the
/// plan, before the files' first requests) and smooths twice with a weight of about 15 s:
/// 150 MB at 10 MB/s after 3 s of questions to the Hub showed "ETA 7m" at the first bytes,
/// "3m" a second later, and still 30 s with 11 s to go. The log lines divided the bytes by
/// the time since the plan: 56 s a second into those 15.
#[derive(Debug, Clone)]
struct Throughput {
    /// The time of the first bytes (the average counts from then), once they came.
    first: Option<f64>,
    /// The time and the total bytes of the last sample.
    last: (f64, u64),
    /// The weighted sum of the speeds of the intervals since `first`, not yet divided by their
    /// weight (`1 - e^(-(last - first)/TAU)`).
    sum: f64,
}

impl Throughput {
    /// The time constant of the weighting, in seconds: a speed measured that long ago weighs
    /// 1/e of the latest.
    const TAU: f64 = 3.0;
    /// The average is given once the bytes span this long (seconds)…
    const MIN_SPAN: f64 = 1.0;
    /// …and the ETA once they span this long too.
    const MIN_SPAN_ETA: f64 = 2.0;
    /// A pause longer than this (no bytes, seconds) counts as a speed of 0 for its rest: a
    /// stalled transfer's ETA grows; shorter gaps between bursts do not make it jump.
    const GRACE: f64 = 1.0;

    fn new() -> Self {
        Throughput {
            first: None,
            last: (0.0, 0),
            sum: 0.0,
        }
    }

    /// Forget what was measured: a new transfer starts (bytes counted from 0 again).
    fn reset(&mut self) {
        *self = Throughput::new();
    }

    /// At time `at`, `total` bytes transferred in all (never less than before).
    fn record(&mut self, at: f64, total: u64) {
        if self.first.is_none() {
            // The first bytes: how long they took is unknown, so they start the clock.
            if total > 0 {
                self.first = Some(at);
                self.last = (at, total);
            }
            return;
        }
        let (t0, b0) = self.last;
        let dt = at - t0;
        if dt <= 0.0 || total < b0 {
            // Bytes of the same instant join the next interval.
            return;
        }
        let speed = (total - b0) as f64 / dt;
        let decay = (-dt / Self::TAU).exp();
        self.sum = self.sum * decay + speed * (1.0 - decay);
        self.last = (at, total);
    }

    /// Bytes per second at time `at`: `None` until the bytes span [`Self::MIN_SPAN`].
    fn rate(&self, at: f64) -> Option<f64> {
        let first = self.first?;
        let (last, _) = self.last;
        if last - first < Self::MIN_SPAN {
            return None;
        }
        // A stall past the grace weighs as intervals of speed 0.
        let idle = (at - last - Self::GRACE).max(0.0);
        let sum = self.sum * (-idle / Self::TAU).exp();
        let weight = 1.0 - (-(last + idle - first) / Self::TAU).exp();
        Some(sum / weight)
    }

    /// Seconds left for `left` bytes at time `at`: `None` until the bytes span
    /// [`Self::MIN_SPAN_ETA`], and when the speed fell under 1 B/s or would take 100 hours (a
    /// stall, not an estimate).
    fn eta(&self, at: f64, left: u64) -> Option<f64> {
        let span = self.last.0 - self.first?;
        let speed = self.rate(at)?;
        if span < Self::MIN_SPAN_ETA || speed < 1.0 {
            return None;
        }
        let eta = left as f64 / speed;
        (eta < 100.0 * 3600.0).then_some(eta)
    }
}

/// An ETA as read at a glance, rounded the more the longer it is: `15s` (to the second below a
/// minute), `4m30s` (to 10 s below 10 minutes), `12m` (to the minute), `2h05m` (to 5 minutes).
fn eta_text(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    if s < 60 {
        return format!("{s}s");
    }
    let tens = (s + 5) / 10 * 10;
    if tens < 600 {
        return match tens % 60 {
            0 => format!("{}m", tens / 60),
            r => format!("{}m{r:02}s", tens / 60),
        };
    }
    let minutes = (s + 30) / 60;
    if minutes < 60 {
        return format!("{minutes}m");
    }
    let fives = (s + 150) / 300 * 5;
    format!("{}h{:02}m", fives / 60, fives % 60)
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
                let at = self.secs(Instant::now());
                // Released before the bars are moved: drawing the total reads it.
                self.rate
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .record(at, st.done);
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
        st.done = 0;
        self.rate.lock().unwrap_or_else(|e| e.into_inner()).reset();
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
        // A lock file's repositories are fetched one after another, each with its plan.
        if let Some(old) = st.total.take() {
            old.finish_and_clear();
            self.mp.remove(&old);
        }
        if self.mode == Mode::Bars && st.to_fetch > 0 {
            let t = self.mp.add(ProgressBar::new(st.to_fetch));
            t.set_style(self.total_style());
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
        // At 40 MiB/s, the 136 MiB left take 3.4 s more.
        let line = progress_line(st.done, st.to_fetch, Some(40.0 * mib as f64), Some(3.4));
        assert_eq!(
            line,
            "wi-fetch: 23% 40.0 MiB/176.0 MiB at 40.0 MiB/s, ETA 3s"
        );
        // Too soon for a speed: the share only.
        assert_eq!(
            progress_line(st.done, st.to_fetch, None, None),
            "wi-fetch: 23% 40.0 MiB/176.0 MiB"
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
        assert!(progress_line(st.done, st.to_fetch, None, None).starts_with("wi-fetch: 100% "));
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

    const MB: u64 = 1_000_000;

    /// Feeds `rate` a sample every 100 ms from `from` to `to` seconds at `speed` bytes per
    /// second, from `total` bytes; returns the total after.
    fn feed(rate: &mut Throughput, from: f64, to: f64, speed: u64, mut total: u64) -> u64 {
        let steps = ((to - from) * 10.0).round() as u64;
        for i in 1..=steps {
            total += speed / 10;
            rate.record(from + i as f64 / 10.0, total);
        }
        total
    }

    /// Issue 55: "ETA 5m" for a download of 15 s. A steady 10 MB/s with 150 MB left is 15 s,
    /// whatever time went before the first byte (3 s of questions to the Hub here).
    #[test]
    fn a_steady_rate_gives_the_eta_it_implies() {
        let mut rate = Throughput::new();
        // Nothing before the first bytes, at 3 s.
        rate.record(3.0, 0);
        assert_eq!((rate.rate(3.0), rate.eta(3.0, 200 * MB)), (None, None));
        rate.record(3.0, MB);
        let done = feed(&mut rate, 3.0, 3.5, 10 * MB, MB);
        // Half a second of bytes: too soon to say.
        assert_eq!(rate.rate(3.5), None);
        let done = feed(&mut rate, 3.5, 8.0, 10 * MB, done);
        let speed = rate.rate(8.0).unwrap();
        assert!((speed - 10e6).abs() < 1e3, "{speed}");
        let eta = rate.eta(8.0, 150 * MB).unwrap();
        assert!((eta - 15.0).abs() < 0.01, "{eta}");
        assert_eq!(eta_text(eta), "15s");
        // The log line says it so.
        let line = progress_line(done, done + 150 * MB, Some(speed), Some(eta));
        assert!(line.ends_with(" at 9.5 MiB/s, ETA 15s"), "{line}");
    }

    /// A slow start (1 MB/s for 10 s), then 10 MB/s: within a few seconds the estimate is the
    /// new speed's, where the average since the start would still be half of it.
    #[test]
    fn a_slow_start_then_a_fast_rate_converges() {
        let mut rate = Throughput::new();
        rate.record(0.0, 1);
        let done = feed(&mut rate, 0.0, 10.0, MB, 1);
        let slow = rate.rate(10.0).unwrap();
        assert!((slow - 1e6).abs() < 1e3, "{slow}");
        let mut done = done;
        let mut seen = Vec::new();
        for t in 11..=25 {
            done = feed(&mut rate, t as f64 - 1.0, t as f64, 10 * MB, done);
            seen.push((t, rate.eta(t as f64, 100 * MB).unwrap()));
        }
        // 100 MB left at 10 MB/s: 10 s.
        let at = |t: u64| seen.iter().find(|s| s.0 == t).unwrap().1;
        assert!(at(15) < 13.0, "{seen:?}");
        assert!((at(20) - 10.0).abs() < 0.5, "{seen:?}");
        assert!((at(25) - 10.0).abs() < 0.1, "{seen:?}");
        // Each second nearer than the one before: no jump back up.
        assert!(seen.windows(2).all(|w| w[1].1 <= w[0].1), "{seen:?}");
        // The average since the start (6.4 MB/s) would still say over 15 s.
        let average = done as f64 / 25.0;
        assert!(100e6 / average > 15.0);
    }

    /// Bytes in bursts (a chunk of 4 MB every 400 ms, 10 MB/s) read as their average, and a
    /// stall makes the speed fall and the ETA grow, then none (no "ETA 3h" for a stall).
    #[test]
    fn bursts_average_out_and_a_stall_lowers_the_speed() {
        let mut rate = Throughput::new();
        let mut done = 4 * MB;
        rate.record(0.0, done);
        for i in 1..=20 {
            done += 4 * MB;
            rate.record(i as f64 * 0.4, done);
        }
        let speed = rate.rate(8.0).unwrap();
        assert!((speed - 10e6).abs() < 1e3, "{speed}");
        // Between two bursts, within the grace: unchanged.
        assert_eq!(rate.rate(8.3), Some(speed));
        // Stalled for 5 s: slower, and a longer ETA.
        let stalled = rate.rate(13.0).unwrap();
        assert!(stalled < speed / 2.0, "{stalled}");
        assert!(rate.eta(13.0, 100 * MB).unwrap() > 20.0);
        // Stalled for ten minutes: no ETA.
        assert_eq!(rate.eta(608.0, 100 * MB), None);
        // A new transfer starts over.
        rate.reset();
        assert_eq!(rate.rate(700.0), None);
    }

    /// ETAs are rounded the more the longer they are.
    #[test]
    fn etas_are_rounded_for_reading() {
        for (secs, shown) in [
            (0.4, "0s"),
            (14.6, "15s"),
            (59.4, "59s"),
            (59.6, "1m"),
            (64.0, "1m"),
            (66.0, "1m10s"),
            (270.0, "4m30s"),
            (599.0, "10m"),
            (725.0, "12m"),
            (3599.0, "1h00m"),
            (7500.0, "2h05m"),
        ] {
            assert_eq!(eta_text(secs), shown, "{secs}");
        }
    }
}
