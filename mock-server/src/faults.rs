//! Fault injection: what can go wrong, where, and how often.
//!
//! A [`FaultRule`] is a [`Fault`] plus a scope (a path pattern, the hub or the CDN listener,
//! file-body answers only) and a frequency (`times(n)`: the next `n` matching requests, or
//! `rate(p)`: each matching request with probability `p`, drawn from the server's seeded RNG;
//! neither: every matching request). Rules are checked in the order they were added and all
//! those that fire apply together (a throttle and a cut, say); the first status or redirect
//! fault that fires wins.
//!
//! Body faults ([`Fault::CutAfter`], [`Fault::Stall`], [`Fault::Hold`], …) only concern answers
//! that carry file bytes (a GET of a small file on the hub, a GET on the CDN), and listing faults
//! ([`Fault::ListingSelfLink`], …) only tree listings; neither fires nor uses up its count on
//! other requests. [`Fault::Status`], [`Fault::Redirect`] and [`Fault::Mutate`] concern every
//! matching request.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// One kind of misbehaviour.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Fault {
    /// Send `bytes` bytes of the body, then abort the connection. The headers still announce the
    /// full length, so the client sees a truncated body, never a clean end.
    CutAfter {
        /// Body bytes sent before the cut.
        bytes: u64,
    },
    /// Like [`Fault::CutAfter`] at an offset drawn from the seeded RNG within the body.
    CutRandom,
    /// A flaky link: cut the body (like [`Fault::CutAfter`]) after an exponentially distributed
    /// number of bytes with mean `mean_bytes`, drawn from the server's seeded RNG (so a run
    /// replays under the same `--seed` and the same order of requests). A draw at or beyond the
    /// body's length does not cut. The exponential law is memoryless: cutting each body this
    /// way is the same as a link that fails, on average, once every `mean_bytes` bytes
    /// whatever the sizes of the requests, so ranged and single-stream clients face the same
    /// link. Compact form `cut-exp=MEAN_BYTES` (say `cut-exp=25165824,target=cdn` for 24 MiB).
    /// When several such rules fire together the smallest mean applies, and when a
    /// [`Fault::CutAfter`] or [`Fault::CutRandom`] fires too the earlier offset wins.
    CutExponential {
        /// Mean number of body bytes sent before the cut (0 cuts at once).
        mean_bytes: u64,
    },
    /// Answer this status instead (e.g. 500, 502, 503, or 429), with an empty JSON error.
    Status {
        /// The HTTP status.
        status: u16,
        /// Seconds for a `Retry-After` header (and `RateLimit` on 429).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after: Option<u64>,
    },
    /// Send the headers and `after_bytes` of the body, then nothing for `millis` ms, then the rest.
    Stall {
        /// Body bytes sent before the pause.
        #[serde(default)]
        after_bytes: u64,
        /// Length of the pause in milliseconds.
        millis: u64,
    },
    /// Send the body at no more than `bytes_per_sec` (a trickle, or a CDN's per-connection cap).
    Throttle {
        /// Bytes per second.
        bytes_per_sec: u64,
    },
    /// Ignore `Range`: answer 200 with the whole file.
    IgnoreRange,
    /// Answer 206 with the requested bytes but a `Content-Range` that does not match the request.
    WrongContentRange,
    /// Flip `count` bytes (xor 0xff) at seeded-random positions of the body.
    FlipBytes {
        /// How many bytes to flip.
        count: u32,
    },
    /// Leave out `Content-Length` (the body is sent chunked), as some mirrors and proxies do.
    DropContentLength,
    /// Leave out `Content-Range` on 206 answers.
    DropContentRange,
    /// After answering, push a new commit on `main` in which this file has different bytes (so a
    /// new ETag and commit id): a push in the middle of a download.
    Mutate,
    /// Answer `status` with a `Location` header instead (like [`Fault::Status`], it concerns
    /// every matching request: `HEAD`/`GET` on `resolve`, the API, the CDN). In `location`,
    /// `{hub}` and `{cdn}` become the listeners' `127.0.0.1:PORT` and `{path}` the request's
    /// path and query; everything else is sent byte for byte (a TAB, a backslash, `//host`,
    /// `ftp://…` are all possible; CR, LF and other control bytes cannot be sent in a header and
    /// turn the answer into a 500 saying so).
    Redirect {
        /// The HTTP status (301, 302, 303, 307, 308, or anything else).
        status: u16,
        /// The `Location` template.
        location: String,
    },
    /// Send the body with `Content-Encoding: encoding`. For `gzip` the (ranged) body really is
    /// gzip-compressed, and `Content-Length` is the compressed length (`Content-Range` still
    /// describes the uncompressed span); any other value only sets the header on the unchanged
    /// body.
    ContentEncoding {
        /// The header value (`gzip` compresses).
        encoding: String,
    },
    /// After the promised bytes, send `extra` more (bytes of a fixed pattern: byte `i` of the
    /// excess is `i as u8`). `Content-Length` is left out (the body goes chunked: the server
    /// library would not send more than it announced); `Content-Range` stays as promised.
    Overlong {
        /// Bytes sent beyond the promised ones.
        extra: u64,
    },
    /// Announce no length (chunked) and never end: after the promised bytes comes the pattern
    /// of [`Fault::Overlong`], forever (paced by a [`Fault::Throttle`] if one applies too; the
    /// server holds no more than one 64 KiB piece at a time).
    Endless,
    /// On 206 answers, send this `Content-Range` value instead of the true one (e.g.
    /// `bytes 0-18446744073709551614/*`); the body is unchanged. It wins over
    /// [`Fault::WrongContentRange`] and [`Fault::DropContentRange`].
    ContentRangeHeader {
        /// The literal header value.
        value: String,
    },
    /// Send the headers and `after_bytes` of the body, then wait — no timer — until
    /// [`crate::MockHub::release_holds`] (or `POST /_mock/release`) is called, then send the
    /// rest normally. [`crate::Stats::held`] counts the bodies waiting, so a test can wait for
    /// "the body is being held". A body no longer than `after_bytes` is sent whole, without
    /// waiting. With `times(n)`, n bodies are held.
    Hold {
        /// Body bytes sent before the wait.
        #[serde(default)]
        after_bytes: u64,
    },
    /// Tree API (`/api/{models|datasets}/{repo}/tree/…`): every page's
    /// `Link: <…>; rel="next"` points at the very URL that was asked, a pagination loop.
    ListingSelfLink,
    /// Tree API: every page has a `rel="next"` link with a new cursor, forever; the pages after
    /// the real listing are empty arrays `[]`.
    ListingEndless,
    /// Tree API: the page's JSON followed by spaces up to `bytes` bytes in all, streamed (the
    /// padding is never held in memory) without `Content-Length` (chunked).
    ListingPad {
        /// Total body length (the JSON alone if it is longer).
        bytes: u64,
    },
}

impl Fault {
    /// `Status { status, retry_after: None }`.
    pub fn status(status: u16) -> Fault {
        Fault::Status {
            status,
            retry_after: None,
        }
    }

    /// A 429 with `Retry-After: secs`.
    pub fn too_many_requests(retry_after_secs: u64) -> Fault {
        Fault::Status {
            status: 429,
            retry_after: Some(retry_after_secs),
        }
    }

    /// A pause of `pause` after `after_bytes` body bytes.
    pub fn stall(after_bytes: u64, pause: Duration) -> Fault {
        Fault::Stall {
            after_bytes,
            millis: u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// A redirect answering `status` with `Location: location` (see [`Fault::Redirect`]).
    pub fn redirect(status: u16, location: impl Into<String>) -> Fault {
        Fault::Redirect {
            status,
            location: location.into(),
        }
    }

    /// Whether this fault only concerns answers carrying file bytes.
    pub fn is_body_fault(&self) -> bool {
        !matches!(
            self,
            Fault::Status { .. } | Fault::Mutate | Fault::Redirect { .. }
        ) && !self.is_listing_fault()
    }

    /// Whether this fault only concerns tree listings (it neither fires nor uses up its count
    /// on other requests).
    pub fn is_listing_fault(&self) -> bool {
        matches!(
            self,
            Fault::ListingSelfLink | Fault::ListingEndless | Fault::ListingPad { .. }
        )
    }

    /// Whether this fault replaces the answer ([`Fault::Status`], [`Fault::Redirect`]); the
    /// first such rule that fires wins.
    fn is_answer(&self) -> bool {
        matches!(self, Fault::Status { .. } | Fault::Redirect { .. })
    }

    /// This fault as a rule for every matching request.
    pub fn rule(self) -> FaultRule {
        FaultRule {
            fault: self,
            path: None,
            target: Target::Any,
            body_only: false,
            times: None,
            rate: None,
        }
    }

    /// See [`FaultRule::on_path`].
    pub fn on_path(self, pattern: impl Into<String>) -> FaultRule {
        self.rule().on_path(pattern)
    }

    /// See [`FaultRule::times`].
    pub fn times(self, n: u64) -> FaultRule {
        self.rule().times(n)
    }

    /// See [`FaultRule::rate`].
    pub fn rate(self, p: f64) -> FaultRule {
        self.rule().rate(p)
    }

    /// See [`FaultRule::on`].
    pub fn on(self, target: Target) -> FaultRule {
        self.rule().on(target)
    }

    /// See [`FaultRule::body_only`].
    pub fn body_only(self) -> FaultRule {
        self.rule().body_only()
    }
}

/// Which listener a rule concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// Both.
    #[default]
    Any,
    /// The hub (API and `resolve`).
    Hub,
    /// The CDN that serves large files (but not xorbs).
    Cdn,
    /// The Xet CAS (with `--xet`): reconstructions (on the hub's port) and xorbs (on the CDN's);
    /// neither `hub` nor `cdn` rules concern them. Body faults apply to xorb bodies, matched
    /// against the URL path (`/xorbs/{hash}`, `/cas/v2/reconstructions/{hash}`).
    Cas,
}

/// A fault with its scope and frequency. Build one from a [`Fault`] with its setters, parse one
/// from the command-line syntax (see [`FaultRule::from_str`]) or from JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultRule {
    /// What goes wrong.
    #[serde(flatten)]
    pub fault: Fault,
    /// Pattern the request must match: with `*` or `?` a glob (`*` also crosses `/`), else a
    /// substring. Matched against `{repo}/{file path}` for file requests (e.g.
    /// `org/name/model.gguf`, `datasets/org/name/data.csv`), else against the URL path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Listener concerned (default: both).
    #[serde(default)]
    pub target: Target,
    /// Only GET answers that carry file bytes (default: for status faults, every request).
    #[serde(default)]
    pub body_only: bool,
    /// Remaining number of times this rule fires (default: unlimited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u64>,
    /// Probability of firing on each matching request (default: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
}

impl FaultRule {
    /// Restricts the rule to requests matching `pattern` (glob with `*`/`?`, else substring).
    #[must_use]
    pub fn on_path(mut self, pattern: impl Into<String>) -> Self {
        self.path = Some(pattern.into());
        self
    }

    /// Fires for the next `n` matching requests only.
    #[must_use]
    pub fn times(mut self, n: u64) -> Self {
        self.times = Some(n);
        self
    }

    /// Fires on each matching request with probability `p` (seeded RNG).
    #[must_use]
    pub fn rate(mut self, p: f64) -> Self {
        self.rate = Some(p);
        self
    }

    /// Restricts the rule to one listener.
    #[must_use]
    pub fn on(mut self, target: Target) -> Self {
        self.target = target;
        self
    }

    /// Restricts the rule to GET answers carrying file bytes.
    #[must_use]
    pub fn body_only(mut self) -> Self {
        self.body_only = true;
        self
    }
}

impl From<Fault> for FaultRule {
    fn from(f: Fault) -> Self {
        f.rule()
    }
}

impl fmt::Display for FaultRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match serde_json::to_string(self) {
            Ok(s) => f.write_str(&s),
            Err(_) => write!(f, "{self:?}"),
        }
    }
}

impl FromStr for FaultRule {
    type Err = String;

    /// Parses either JSON (`{"kind":"cut_after","bytes":1000,"times":2}`) or the compact
    /// command-line form: `KIND[=ARG][,OPTION…]` where KIND is one of `cut-after=BYTES`,
    /// `cut-random`, `cut-exp=MEAN_BYTES` (an exponentially distributed cut),
    /// `status=CODE` (with option `retry-after=SECS`), `429=SECS` (429 with Retry-After), `stall=MS` (with option
    /// `after=BYTES`), `throttle=BYTES_PER_SEC`, `ignore-range`, `wrong-content-range`,
    /// `flip=COUNT`, `drop-content-length`, `drop-content-range`, `mutate`,
    /// `redirect=CODE` (with option `location=LOCATION`), `content-encoding=VALUE`,
    /// `overlong=EXTRA`, `endless`, `content-range=VALUE`, `hold` (with option `after=BYTES`,
    /// or `hold=BYTES`), `listing-self-link`, `listing-endless`, `listing-pad=BYTES`; and
    /// OPTIONs are `path=PATTERN`, `times=N`, `rate=P`, `target=hub|cdn|cas|any`, `body-only`.
    ///
    /// A value may be written in double quotes, as a JSON string: then it may hold commas and
    /// escapes such as `\t` (`redirect=302,location="/\t/{cdn}/x"`). Unquoted values end at the
    /// next comma and are trimmed.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.starts_with('{') {
            return serde_json::from_str(s).map_err(|e| format!("bad fault JSON: {e}"));
        }
        let mut parts = split_spec(s)?.into_iter();
        let (kind, arg) = parts.next().unwrap_or_default();
        let kind = kind.as_str();
        let num = |what: &str| -> Result<u64, String> {
            arg.as_deref()
                .ok_or_else(|| format!("fault {kind:?} needs ={what}"))?
                .parse::<u64>()
                .map_err(|e| format!("fault {kind:?}: bad {what}: {e}"))
        };
        let mut after_bytes = 0u64;
        let mut location = None;
        let mut retry_after = None;
        let mut options = Vec::new();
        for (k, v) in parts {
            match k.as_str() {
                "after" => {
                    after_bytes = v
                        .ok_or("after needs =BYTES")?
                        .parse()
                        .map_err(|e| format!("bad after: {e}"))?
                }
                "location" => location = Some(v.ok_or("location needs =LOCATION")?),
                "retry-after" => {
                    retry_after = Some(
                        v.ok_or("retry-after needs =SECS")?
                            .parse::<u64>()
                            .map_err(|e| format!("bad retry-after: {e}"))?,
                    )
                }
                _ => options.push((k, v)),
            }
        }
        let fault = match kind {
            "cut-after" | "cut" => Fault::CutAfter {
                bytes: num("BYTES")?,
            },
            "cut-random" => Fault::CutRandom,
            "cut-exp" | "cut-exponential" => Fault::CutExponential {
                mean_bytes: num("MEAN_BYTES")?,
            },
            "status" => Fault::Status {
                status: u16::try_from(num("CODE")?)
                    .map_err(|_| "status out of range".to_string())?,
                retry_after: retry_after.take(),
            },
            "429" | "too-many-requests" => {
                if retry_after.is_some() {
                    return Err("429=SECS already sets Retry-After".into());
                }
                Fault::too_many_requests(num("SECS")?)
            }
            "stall" => Fault::Stall {
                after_bytes,
                millis: num("MS")?,
            },
            "throttle" | "trickle" => Fault::Throttle {
                bytes_per_sec: num("BYTES_PER_SEC")?,
            },
            "ignore-range" => Fault::IgnoreRange,
            "wrong-content-range" => Fault::WrongContentRange,
            "flip" => Fault::FlipBytes {
                count: u32::try_from(num("COUNT")?).map_err(|_| "flip count too large")?,
            },
            "drop-content-length" => Fault::DropContentLength,
            "drop-content-range" => Fault::DropContentRange,
            "mutate" => Fault::Mutate,
            "redirect" => Fault::Redirect {
                status: u16::try_from(num("CODE")?)
                    .map_err(|_| "status out of range".to_string())?,
                location: location.take().ok_or("redirect needs location=LOCATION")?,
            },
            "content-encoding" => Fault::ContentEncoding {
                encoding: arg.clone().ok_or("content-encoding needs =VALUE")?,
            },
            "overlong" => Fault::Overlong {
                extra: num("EXTRA")?,
            },
            "endless" => Fault::Endless,
            "listing-self-link" => Fault::ListingSelfLink,
            "listing-endless" => Fault::ListingEndless,
            "listing-pad" => Fault::ListingPad {
                bytes: num("BYTES")?,
            },
            "hold" => Fault::Hold {
                after_bytes: match arg {
                    Some(_) => num("BYTES")?,
                    None => after_bytes,
                },
            },
            "content-range" | "content-range-header" => Fault::ContentRangeHeader {
                value: arg.clone().ok_or("content-range needs =VALUE")?,
            },
            other => return Err(format!("unknown fault kind {other:?}")),
        };
        if location.is_some() {
            return Err(format!("location= does not apply to {kind:?}"));
        }
        if retry_after.is_some() {
            return Err(format!("retry-after= does not apply to {kind:?}"));
        }
        let mut rule = fault.rule();
        for (k, v) in options {
            match (k.as_str(), v.as_deref()) {
                ("path", Some(v)) => rule.path = Some(v.to_string()),
                ("times", Some(v)) => {
                    rule.times = Some(v.parse().map_err(|e| format!("bad times: {e}"))?)
                }
                ("rate", Some(v)) => {
                    rule.rate = Some(v.parse().map_err(|e| format!("bad rate: {e}"))?)
                }
                ("target", Some("hub")) => rule.target = Target::Hub,
                ("target", Some("cdn")) => rule.target = Target::Cdn,
                ("target", Some("cas")) => rule.target = Target::Cas,
                ("target", Some("any")) => rule.target = Target::Any,
                ("body-only", None) => rule.body_only = true,
                _ => return Err(format!("unknown fault option {k:?}")),
            }
        }
        Ok(rule)
    }
}

/// Splits a compact spec into `(key, value)` items at the commas outside double quotes. A
/// quoted value is a JSON string (escapes allowed); an unquoted one is trimmed.
fn split_spec(s: &str) -> Result<Vec<(String, Option<String>)>, String> {
    let mut items = Vec::new();
    let mut rest = s;
    loop {
        let key_end = rest.find([',', '=']).unwrap_or(rest.len());
        let key = rest[..key_end].trim().to_string();
        rest = &rest[key_end..];
        let value = if let Some(after_eq) = rest.strip_prefix('=') {
            let v = after_eq.trim_start();
            if v.starts_with('"') {
                let len = quoted_len(v).ok_or_else(|| format!("unterminated quote in {s:?}"))?;
                let value: String = serde_json::from_str(&v[..len])
                    .map_err(|e| format!("bad quoted value {:?}: {e}", &v[..len]))?;
                rest = v[len..].trim_start();
                if !rest.is_empty() && !rest.starts_with(',') {
                    return Err(format!("expected a comma after {:?}", &v[..len]));
                }
                Some(value)
            } else {
                let end = v.find(',').unwrap_or(v.len());
                rest = &v[end..];
                Some(v[..end].trim().to_string())
            }
        } else {
            None
        };
        items.push((key, value));
        match rest.strip_prefix(',') {
            Some(r) => rest = r,
            None => break,
        }
    }
    Ok(items)
}

/// Length of the JSON string literal at the start of `s` (which starts with `"`), quotes
/// included.
fn quoted_len(s: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in s.char_indices().skip(1) {
        match (escaped, c) {
            (true, _) => escaped = false,
            (false, '\\') => escaped = true,
            (false, '"') => return Some(i + 1),
            _ => {}
        }
    }
    None
}

/// What a request is, for matching rules.
#[derive(Debug, Clone)]
pub(crate) struct RequestCtx<'a> {
    pub target: Target,
    /// The request carries (or would carry) file bytes: a GET of a file body.
    pub is_body: bool,
    /// The request is a tree listing.
    pub is_listing: bool,
    /// The string patterns match against.
    pub subject: &'a str,
}

/// An answer that replaces the normal one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Answer {
    /// A status with an optional `Retry-After`.
    Status(u16, Option<u64>),
    /// A status with a `Location` template.
    Redirect(u16, String),
}

/// The combined effect of the rules that fired for one request.
#[derive(Debug, Clone, Default)]
pub(crate) struct Plan {
    pub answer: Option<Answer>,
    pub cut_after: Option<u64>,
    pub cut_random: bool,
    /// Mean of an exponentially distributed cut offset (the smallest of the rules that fired).
    pub cut_exp_mean: Option<u64>,
    pub stall: Option<(u64, Duration)>,
    pub throttle: Option<u64>,
    pub ignore_range: bool,
    pub wrong_content_range: bool,
    pub flip: u32,
    pub drop_content_length: bool,
    pub drop_content_range: bool,
    pub mutate: bool,
    pub content_encoding: Option<String>,
    pub overlong: u64,
    pub endless: bool,
    pub content_range: Option<String>,
    pub hold: Option<u64>,
    pub listing_self_link: bool,
    pub listing_endless: bool,
    pub listing_pad: Option<u64>,
}

/// The live set of fault rules of a server, with its seeded RNG. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct Faults {
    inner: Arc<Mutex<FaultsInner>>,
}

#[derive(Debug)]
struct FaultsInner {
    rules: Vec<FaultRule>,
    rng: ChaCha8Rng,
    /// How many times each kind of fault fired (by its `kind` name).
    fired: std::collections::BTreeMap<String, u64>,
}

impl Faults {
    pub(crate) fn new(seed: u64, rules: Vec<FaultRule>) -> Self {
        Faults {
            inner: Arc::new(Mutex::new(FaultsInner {
                rules,
                rng: ChaCha8Rng::seed_from_u64(seed),
                fired: std::collections::BTreeMap::new(),
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FaultsInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a rule (after the existing ones).
    pub fn push(&self, rule: impl Into<FaultRule>) {
        self.lock().rules.push(rule.into());
    }

    /// Removes every rule.
    pub fn clear(&self) {
        self.lock().rules.clear();
    }

    /// The rules still active (with their remaining `times`).
    pub fn list(&self) -> Vec<FaultRule> {
        self.lock().rules.clone()
    }

    /// How many times each kind of fault fired since the server started (keys are the `kind`
    /// names: `cut_random`, `status`, …).
    pub fn fired(&self) -> std::collections::BTreeMap<String, u64> {
        self.lock().fired.clone()
    }

    /// Restarts the RNG from `seed`, to replay a run.
    pub fn reseed(&self, seed: u64) {
        self.lock().rng = ChaCha8Rng::seed_from_u64(seed);
    }

    /// A number drawn from the shared RNG in `0..n` (`n > 0`).
    pub(crate) fn random_below(&self, n: u64) -> u64 {
        self.lock().rng.random_range(0..n.max(1))
    }

    /// A number drawn from the shared RNG, exponentially distributed with mean `mean` (rounded
    /// down; saturates at `u64::MAX`).
    pub(crate) fn random_exponential(&self, mean: u64) -> u64 {
        let u: f64 = self.lock().rng.random();
        // u is in [0, 1): 1 - u is in (0, 1], its logarithm finite and <= 0.
        let x = -(1.0 - u).ln() * mean as f64;
        // `as` saturates (and maps NaN to 0).
        x as u64
    }

    /// Decides which rules fire for a request, using up their counts.
    pub(crate) fn plan(&self, ctx: &RequestCtx<'_>) -> Plan {
        let mut plan = Plan::default();
        let mut guard = self.lock();
        let inner = &mut *guard;
        let mut exhausted = false;
        // Answers (a status, a redirect) first: a request answered so has no body, and the
        // body faults that match it are left for a request that has one.
        let (answers, others): (Vec<usize>, Vec<usize>) =
            (0..inner.rules.len()).partition(|&i| inner.rules[i].fault.is_answer());
        for i in answers.into_iter().chain(others) {
            let rule = &mut inner.rules[i];
            if rule.target != Target::Any && rule.target != ctx.target {
                continue;
            }
            if rule.fault.is_body_fault() && plan.answer.is_some() {
                continue;
            }
            if (rule.body_only || rule.fault.is_body_fault()) && !ctx.is_body {
                continue;
            }
            if rule.fault.is_listing_fault() && !ctx.is_listing {
                continue;
            }
            if let Some(p) = &rule.path {
                if !pattern_matches(p, ctx.subject) {
                    continue;
                }
            }
            if rule.times == Some(0) {
                continue;
            }
            if rule.fault.is_answer() && plan.answer.is_some() {
                continue;
            }
            if let Some(p) = rule.rate {
                if !inner.rng.random_bool(p.clamp(0.0, 1.0)) {
                    continue;
                }
            }
            if let Some(t) = rule.times.as_mut() {
                *t -= 1;
                exhausted |= *t == 0;
            }
            let kind = serde_json::to_value(&rule.fault)
                .ok()
                .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_string))
                .unwrap_or_else(|| "?".to_string());
            *inner.fired.entry(kind).or_default() += 1;
            match &rule.fault {
                Fault::CutAfter { bytes } => {
                    plan.cut_after = Some(plan.cut_after.map_or(*bytes, |c| c.min(*bytes)))
                }
                Fault::CutRandom => plan.cut_random = true,
                Fault::CutExponential { mean_bytes } => {
                    plan.cut_exp_mean = Some(
                        plan.cut_exp_mean
                            .map_or(*mean_bytes, |m| m.min(*mean_bytes)),
                    )
                }
                Fault::Status {
                    status,
                    retry_after,
                } => plan.answer = Some(Answer::Status(*status, *retry_after)),
                Fault::Redirect { status, location } => {
                    plan.answer = Some(Answer::Redirect(*status, location.clone()))
                }
                Fault::Stall {
                    after_bytes,
                    millis,
                } => plan.stall = Some((*after_bytes, Duration::from_millis(*millis))),
                Fault::Throttle { bytes_per_sec } => {
                    let b = (*bytes_per_sec).max(1);
                    plan.throttle = Some(plan.throttle.map_or(b, |t| t.min(b)))
                }
                Fault::IgnoreRange => plan.ignore_range = true,
                Fault::WrongContentRange => plan.wrong_content_range = true,
                Fault::FlipBytes { count } => plan.flip += count,
                Fault::DropContentLength => plan.drop_content_length = true,
                Fault::DropContentRange => plan.drop_content_range = true,
                Fault::Mutate => plan.mutate = true,
                Fault::ContentEncoding { encoding } => {
                    plan.content_encoding = Some(encoding.clone())
                }
                Fault::Overlong { extra } => plan.overlong = plan.overlong.saturating_add(*extra),
                Fault::Endless => plan.endless = true,
                Fault::ContentRangeHeader { value } => plan.content_range = Some(value.clone()),
                Fault::Hold { after_bytes } => {
                    plan.hold = Some(plan.hold.map_or(*after_bytes, |h| h.min(*after_bytes)))
                }
                Fault::ListingSelfLink => plan.listing_self_link = true,
                Fault::ListingEndless => plan.listing_endless = true,
                Fault::ListingPad { bytes } => {
                    plan.listing_pad = Some(plan.listing_pad.map_or(*bytes, |b| b.max(*bytes)))
                }
            }
        }
        if exhausted {
            inner.rules.retain(|r| r.times != Some(0));
        }
        plan
    }
}

/// Glob (`*` any run of characters including `/`, `?` one character) when the pattern has `*`
/// or `?`, else substring.
pub(crate) fn pattern_matches(pattern: &str, s: &str) -> bool {
    if !pattern.contains(['*', '?']) {
        return s.contains(pattern);
    }
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = s.chars().collect();
    // A glob matches anywhere unless anchored by its own first/last characters: we match the
    // whole subject, or any suffix of it (so `*.gguf` and `model-*.gguf` both work).
    (0..=t.len()).any(|start| glob(&p, &t[start..]))
}

fn glob(p: &[char], t: &[char]) -> bool {
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert!(pattern_matches("model.gguf", "org/name/model.gguf"));
        assert!(pattern_matches("*.gguf", "org/name/model.gguf"));
        assert!(pattern_matches(
            "org/*/model-?.gguf",
            "org/name/model-1.gguf"
        ));
        assert!(!pattern_matches("*.bin", "org/name/model.gguf"));
        assert!(!pattern_matches("x.gguf", "org/name/model.gguf"));
    }

    #[test]
    fn parse_compact() {
        let r: FaultRule = "cut-after=1000,path=model.gguf,times=2".parse().unwrap();
        assert_eq!(
            r,
            Fault::CutAfter { bytes: 1000 }
                .on_path("model.gguf")
                .times(2)
        );
        let r: FaultRule = "stall=500,after=10,target=cdn".parse().unwrap();
        assert_eq!(
            r,
            Fault::stall(10, Duration::from_millis(500)).on(Target::Cdn)
        );
        let r: FaultRule = "flip=2,target=cas,times=1".parse().unwrap();
        assert_eq!(r, Fault::FlipBytes { count: 2 }.on(Target::Cas).times(1));
        assert!("flip=2,target=xorb".parse::<FaultRule>().is_err());
        let r: FaultRule = "429=3,body-only,rate=0.5".parse().unwrap();
        assert_eq!(r, Fault::too_many_requests(3).body_only().rate(0.5));
        let r: FaultRule = r#"{"kind":"status","status":503,"times":1}"#.parse().unwrap();
        assert_eq!(r, Fault::status(503).times(1));
        assert!("bogus".parse::<FaultRule>().is_err());
    }

    #[test]
    fn parse_flaky_link() {
        let p = |s: &str| s.parse::<FaultRule>();
        let exp = |mean_bytes| Fault::CutExponential { mean_bytes };
        assert_eq!(
            p("cut-exp=25165824,target=cdn"),
            Ok(exp(25165824).on(Target::Cdn))
        );
        assert_eq!(p("cut-exponential=4096,rate=0.5"), Ok(exp(4096).rate(0.5)));
        assert_eq!(
            p(r#"{"kind":"cut_exponential","mean_bytes":7,"target":"cdn"}"#),
            Ok(exp(7).on(Target::Cdn))
        );
        assert!(p("cut-exp").is_err());
        assert!(p("cut-exp=1.5").is_err());
        // Refusals with a Retry-After, at a rate, on the CDN.
        let status = |status, retry_after| Fault::Status {
            status,
            retry_after,
        };
        assert_eq!(
            p("status=503,retry-after=1,rate=0.025,target=cdn"),
            Ok(status(503, Some(1)).rate(0.025).on(Target::Cdn))
        );
        assert_eq!(p("status=503"), Ok(Fault::status(503).rule()));
        assert_eq!(
            p("429=0,rate=0.05,target=cdn"),
            Ok(Fault::too_many_requests(0).rate(0.05).on(Target::Cdn))
        );
        assert!(p("429=1,retry-after=2").is_err());
        assert!(p("cut-exp=10,retry-after=2").is_err());
        assert!(p("status=503,retry-after").is_err());
        assert!(p("status=503,retry-after=soon").is_err());
        let json = serde_json::to_string(&exp(10).rule()).unwrap();
        assert_eq!(
            json,
            r#"{"kind":"cut_exponential","mean_bytes":10,"target":"any","body_only":false}"#
        );
    }

    #[test]
    fn exponential_draws_follow_the_seed() {
        let draws = |seed| {
            let f = Faults::new(seed, Vec::new());
            (0..64)
                .map(|_| f.random_exponential(1000))
                .collect::<Vec<_>>()
        };
        assert_eq!(draws(5), draws(5));
        assert_ne!(draws(5), draws(6));
        assert_eq!(Faults::new(5, Vec::new()).random_exponential(0), 0);
    }

    #[test]
    fn parse_redirects_and_quoted_values() {
        let r: FaultRule = "redirect=302,location=http://{cdn}/x,times=1"
            .parse()
            .unwrap();
        assert_eq!(r, Fault::redirect(302, "http://{cdn}/x").times(1));
        // Quoted: JSON escapes, commas and `=` inside.
        let r: FaultRule = r#"redirect=307,path=a.bin,location="/\t/{cdn}/x?a=1,b=2""#
            .parse()
            .unwrap();
        assert_eq!(
            r,
            Fault::redirect(307, "/\t/{cdn}/x?a=1,b=2").on_path("a.bin")
        );
        let r: FaultRule = "redirect=301,location=/\\{cdn}/x".parse().unwrap();
        assert_eq!(r, Fault::redirect(301, "/\\{cdn}/x").rule());
        assert!("redirect=302".parse::<FaultRule>().is_err());
        assert!("status=500,location=x".parse::<FaultRule>().is_err());
        assert!(r#"redirect=302,location="x"#.parse::<FaultRule>().is_err());
        assert!(r#"redirect=302,location="x"y"#.parse::<FaultRule>().is_err());
        let json = serde_json::to_string(&Fault::redirect(302, "//{cdn}/x").times(1)).unwrap();
        assert_eq!(
            json,
            r#"{"kind":"redirect","status":302,"location":"//{cdn}/x","target":"any","body_only":false,"times":1}"#
        );
    }

    #[test]
    fn parse_body_shapes() {
        let p = |s: &str| s.parse::<FaultRule>().unwrap();
        let enc = |e: &str| Fault::ContentEncoding { encoding: e.into() };
        let cr = |v: &str| Fault::ContentRangeHeader { value: v.into() };
        assert_eq!(p("content-encoding=gzip,times=1"), enc("gzip").times(1));
        assert_eq!(p(r#"content-encoding="gzip, br""#), enc("gzip, br").rule());
        assert_eq!(p("overlong=10"), Fault::Overlong { extra: 10 }.rule());
        assert_eq!(p("endless,target=cdn"), Fault::Endless.on(Target::Cdn));
        assert_eq!(
            p("content-range=bytes 0-18446744073709551614/*"),
            cr("bytes 0-18446744073709551614/*").rule()
        );
        assert!("overlong".parse::<FaultRule>().is_err());
        assert!("content-encoding".parse::<FaultRule>().is_err());
        assert_eq!(
            p(r#"{"kind":"content_range_header","value":"bytes */5"}"#),
            cr("bytes */5").rule()
        );
        assert_eq!(p(r#"{"kind":"endless"}"#), Fault::Endless.rule());
        let hold = |after_bytes| Fault::Hold { after_bytes };
        assert_eq!(p("hold,times=4"), hold(0).times(4));
        assert_eq!(p("hold,after=10"), hold(10).rule());
        assert_eq!(p("hold=7,target=cdn"), hold(7).on(Target::Cdn));
        assert_eq!(p(r#"{"kind":"hold"}"#), hold(0).rule());
        assert_eq!(p(r#"{"kind":"hold","after_bytes":5}"#), hold(5).rule());
        assert_eq!(
            p(r#"{"kind":"overlong","extra":3}"#),
            Fault::Overlong { extra: 3 }.rule()
        );
        assert_eq!(
            p(r#"{"kind":"content_encoding","encoding":"br"}"#),
            enc("br").rule()
        );
    }

    #[test]
    fn listing_faults_only_fire_on_listings() {
        let p = |s: &str| s.parse::<FaultRule>().unwrap();
        assert_eq!(
            p("listing-self-link,times=1"),
            Fault::ListingSelfLink.times(1)
        );
        assert_eq!(p("listing-endless"), Fault::ListingEndless.rule());
        assert_eq!(
            p("listing-pad=1000"),
            Fault::ListingPad { bytes: 1000 }.rule()
        );
        assert_eq!(
            p(r#"{"kind":"listing_pad","bytes":9}"#),
            Fault::ListingPad { bytes: 9 }.rule()
        );
        assert!("listing-pad".parse::<FaultRule>().is_err());
        let f = Faults::new(1, vec![Fault::ListingSelfLink.times(1)]);
        let mut ctx = RequestCtx {
            target: Target::Hub,
            is_body: true,
            is_listing: false,
            subject: "/api/models/org/name/tree/main",
        };
        assert!(!f.plan(&ctx).listing_self_link);
        ctx.is_body = false;
        assert!(!f.plan(&ctx).listing_self_link);
        assert_eq!(f.list().len(), 1);
        ctx.is_listing = true;
        assert!(f.plan(&ctx).listing_self_link);
        assert!(f.list().is_empty());
    }

    #[test]
    fn answers_take_the_first_status_or_redirect() {
        let f = Faults::new(
            1,
            vec![Fault::redirect(302, "/x").rule(), Fault::status(503).rule()],
        );
        let ctx = RequestCtx {
            target: Target::Hub,
            is_body: false,
            is_listing: false,
            subject: "/x",
        };
        assert_eq!(
            f.plan(&ctx).answer,
            Some(Answer::Redirect(302, "/x".into()))
        );
    }

    #[test]
    fn times_are_used_up() {
        let f = Faults::new(1, vec![Fault::status(503).times(2)]);
        let ctx = RequestCtx {
            target: Target::Hub,
            is_body: false,
            is_listing: false,
            subject: "/x",
        };
        assert!(f.plan(&ctx).answer.is_some());
        assert!(f.plan(&ctx).answer.is_some());
        assert!(f.plan(&ctx).answer.is_none());
        assert!(f.list().is_empty());
    }
}
