//! The one owner of the environment's rules: the variables huggingface_hub reads (`HF_ENDPOINT`,
//! `HF_TOKEN`, `HF_HOME`, `HF_HUB_CACHE`, `HF_HUB_OFFLINE`, …), read the same way, and
//! llama.cpp's (`LLAMA_CACHE`, its older flat folder).
//!
//! Every function here has a `*_from` twin taking a lookup function, so that tests (and
//! programs that keep their own environment) do not touch the process environment.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

/// The public Hub.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// A lookup of one environment variable.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<OsString>;

/// The process environment, as an [`EnvLookup`].
pub(crate) fn process_env(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}

fn non_empty(v: Option<OsString>) -> Option<OsString> {
    v.filter(|v| !v.is_empty())
}

/// A Hub access token, and where it came from (to name it when it is refused). Its `Debug`
/// output hides the value; nothing of this crate prints it.
///
/// A token goes into an `Authorization: Bearer` header, so it must be one word of visible
/// ASCII: [`Token::check`] says so, naming its [`TokenSource`], and every client that sends one
/// (`HubClient::new`, so `wi-fetch`, `weight-inspect` on `hf://`, `serve --upstream` and the
/// Python package) refuses to start with a token that is not, rather than going on without it.
#[derive(Clone)]
pub struct Token {
    value: String,
    source: TokenSource,
}

/// Where a [`Token`] came from: said when it is refused (its value never is).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenSource {
    /// An environment variable (`HF_TOKEN`, `HUGGING_FACE_HUB_TOKEN`).
    Var(&'static str),
    /// The token file (`$HF_TOKEN_PATH`, else `$HF_HOME/token`).
    File(PathBuf),
    /// A command-line option (`--token`).
    Option(&'static str),
    /// A keyword argument (Python's `token=`).
    Keyword(&'static str),
    /// Given to the library ([`Token::new`]).
    Given,
}

impl fmt::Display for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenSource::Var(v) => write!(f, "the token in {v}"),
            TokenSource::File(p) => write!(
                f,
                "the token in the token file {}",
                crate::names::escape(&p.to_string_lossy())
            ),
            TokenSource::Option(o) => write!(f, "the token given with {o}"),
            TokenSource::Keyword(k) => write!(f, "the token given as {k}="),
            TokenSource::Given => f.write_str("the token given"),
        }
    }
}

/// A token that cannot be sent in a header: where it came from and what it holds (never the
/// token itself).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{from} contains {what}: a token is one word of visible ASCII, sent as a header; it was \
     not used"
)]
pub struct TokenError {
    /// Where the token came from.
    pub from: TokenSource,
    /// What it holds that a token cannot: "a line break", "a control character", "a space",
    /// "a character that is not ASCII".
    pub what: &'static str,
}

impl Token {
    /// Wraps a token given to the library ([`TokenSource::Given`]); surrounding whitespace is
    /// removed. `None` when nothing is left. It is [checked](Token::check) when a client that
    /// would send it is made.
    pub fn new(token: impl AsRef<str>) -> Option<Token> {
        Token::from_source(token, TokenSource::Given)
    }

    /// [`Token::new`] of a token that came from `source`.
    pub fn from_source(token: impl AsRef<str>, source: TokenSource) -> Option<Token> {
        let t = token.as_ref().trim();
        (!t.is_empty()).then(|| Token {
            value: t.to_string(),
            source,
        })
    }

    /// [`Token::from_source`], [checked](Token::check): `Ok(None)` when the value is empty.
    pub fn parse(token: impl AsRef<str>, source: TokenSource) -> Result<Option<Token>, TokenError> {
        let t = Token::from_source(token, source);
        if let Some(t) = &t {
            t.check()?;
        }
        Ok(t)
    }

    /// Whether the token can be sent: one word of visible ASCII (no line break, control
    /// character, space or other character), as a bearer token is (RFC 6750); else why not,
    /// naming where it came from.
    pub fn check(&self) -> Result<(), TokenError> {
        let bad = self.value.chars().find(|c| !c.is_ascii_graphic());
        match bad {
            None => Ok(()),
            Some(c) => Err(TokenError {
                from: self.source.clone(),
                what: match c {
                    '\r' | '\n' => "a line break",
                    ' ' => "a space",
                    c if c.is_ascii() => "a control character",
                    _ => "a character that is not ASCII",
                },
            }),
        }
    }

    /// Where the token came from.
    pub fn source(&self) -> &TokenSource {
        &self.source
    }

    /// The token's value, to put in an `Authorization: Bearer` header.
    pub fn expose(&self) -> &str {
        &self.value
    }
}

/// Two tokens are equal when their values are, wherever they came from.
impl PartialEq for Token {
    fn eq(&self, other: &Token) -> bool {
        self.value == other.value
    }
}

impl Eq for Token {}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(***)")
    }
}

/// `HF_HOME`, else `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`.
pub fn hf_home() -> PathBuf {
    hf_home_from(&process_env)
}

/// [`hf_home`] with an explicit environment.
pub fn hf_home_from(env: EnvLookup<'_>) -> PathBuf {
    if let Some(h) = non_empty(env("HF_HOME")) {
        return expand_tilde(PathBuf::from(h), env);
    }
    let xdg = non_empty(env("XDG_CACHE_HOME"))
        .map(|x| expand_tilde(PathBuf::from(x), env))
        .unwrap_or_else(|| home_dir(env).join(".cache"));
    xdg.join("huggingface")
}

fn home_dir(env: EnvLookup<'_>) -> PathBuf {
    non_empty(env("HOME"))
        .or_else(|| non_empty(env("USERPROFILE")))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Expands a leading `~/` as Python's `os.path.expanduser` does for these variables.
fn expand_tilde(p: PathBuf, env: EnvLookup<'_>) -> PathBuf {
    match p.strip_prefix("~") {
        Ok(rest) => home_dir(env).join(rest),
        Err(_) => p,
    }
}

/// The Hugging Face cache root: `HF_HUB_CACHE` (or the older `HUGGINGFACE_HUB_CACHE`), else
/// `$HF_HOME/hub` ([`hf_home_from`]); a leading `~/` expanded.
pub fn hub_cache_from(env: EnvLookup<'_>) -> PathBuf {
    ["HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"]
        .into_iter()
        .find_map(|var| non_empty(env(var)))
        .map(|v| expand_tilde(PathBuf::from(v), env))
        .unwrap_or_else(|| hf_home_from(env).join("hub"))
}

/// llama.cpp's cache folder when `LLAMA_CACHE` names one.
pub fn llama_cache_from(env: EnvLookup<'_>) -> Option<PathBuf> {
    non_empty(env("LLAMA_CACHE")).map(PathBuf::from)
}

/// The folder older llama.cpp versions kept their flat downloads in: `LLAMA_CACHE`, else
/// `$XDG_CACHE_HOME/llama.cpp`, else `~/.cache/llama.cpp` (`~/Library/Caches/llama.cpp` on
/// macOS).
pub fn llama_cpp_legacy_dir_from(env: EnvLookup<'_>) -> Option<PathBuf> {
    if let Some(dir) = llama_cache_from(env) {
        return Some(dir);
    }
    let home = non_empty(env("HOME")).map(PathBuf::from);
    if cfg!(target_os = "macos") {
        return home.map(|h| h.join("Library/Caches/llama.cpp"));
    }
    match non_empty(env("XDG_CACHE_HOME")) {
        Some(x) => Some(PathBuf::from(x).join("llama.cpp")),
        None => home.map(|h| h.join(".cache/llama.cpp")),
    }
}

/// The Hub endpoint: `HF_ENDPOINT`, else [`DEFAULT_ENDPOINT`], without a trailing `/`.
pub fn endpoint() -> String {
    endpoint_from(&process_env)
}

/// [`endpoint`] with an explicit environment.
pub fn endpoint_from(env: EnvLookup<'_>) -> String {
    let e = non_empty(env("HF_ENDPOINT"))
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
    normalize_endpoint(&e)
}

/// Strips trailing `/` from an endpoint.
pub fn normalize_endpoint(e: &str) -> String {
    e.trim().trim_end_matches('/').to_string()
}

/// The token: `HF_TOKEN` (or the older `HUGGING_FACE_HUB_TOKEN`), else the content of the file
/// `$HF_TOKEN_PATH`, else `$HF_HOME/token`. Whitespace around it is ignored; an empty value
/// counts as none. The token says where it came from; one that is not text (not UTF-8) is kept
/// as read, for [`Token::check`] to refuse.
pub fn token() -> Option<Token> {
    token_from(&process_env)
}

/// [`token`] with an explicit environment.
pub fn token_from(env: EnvLookup<'_>) -> Option<Token> {
    for var in ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"] {
        let found =
            env(var).and_then(|v| Token::from_source(v.to_string_lossy(), TokenSource::Var(var)));
        if found.is_some() {
            return found;
        }
    }
    let path = non_empty(env("HF_TOKEN_PATH"))
        .map(|p| expand_tilde(PathBuf::from(p), env))
        .unwrap_or_else(|| hf_home_from(env).join("token"));
    // A token file is small: refuse anything large, and anything but a regular file (a FIFO
    // would block the read).
    let bytes = crate::safe_fs::read_bounded(&path, 64 * 1024).ok()??;
    Token::from_source(String::from_utf8_lossy(&bytes), TokenSource::File(path))
}

/// Whether `HF_HUB_OFFLINE` asks for offline mode (`1`, `ON`, `YES`, `TRUE`, any case), as
/// huggingface_hub reads it.
pub fn offline() -> bool {
    offline_from(&process_env)
}

/// [`offline`] with an explicit environment.
pub fn offline_from(env: EnvLookup<'_>) -> bool {
    flag_from(env, "HF_HUB_OFFLINE")
}

/// Whether the boolean variable `var` is set true (`1`, `ON`, `YES`, `TRUE`, any case), as
/// huggingface_hub reads its flags (`HF_HUB_OFFLINE`, `HF_HUB_DISABLE_PROGRESS_BARS`, …).
pub fn flag_from(env: EnvLookup<'_>, var: &str) -> bool {
    env(var)
        .map(|v| {
            matches!(
                v.to_string_lossy().trim().to_ascii_uppercase().as_str(),
                "1" | "ON" | "YES" | "TRUE"
            )
        })
        .unwrap_or(false)
}

/// [`flag_from`] in the process environment.
pub fn flag(var: &str) -> bool {
    flag_from(&process_env, var)
}

/// A duration in seconds from the variable `var` (`10`, `2.5`), as huggingface_hub reads
/// `HF_HUB_DOWNLOAD_TIMEOUT` and `HF_HUB_ETAG_TIMEOUT`; `None` when unset, not a number, not
/// positive, or more than a week.
pub fn seconds_from(env: EnvLookup<'_>, var: &str) -> Option<std::time::Duration> {
    let v = env(var)?;
    let secs: f64 = v.to_string_lossy().trim().parse().ok()?;
    (secs > 0.0 && secs <= 7.0 * 86_400.0).then(|| std::time::Duration::from_secs_f64(secs))
}

/// [`seconds_from`] in the process environment.
pub fn seconds(var: &str) -> Option<std::time::Duration> {
    seconds_from(&process_env, var)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let m: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn hf_home_order() {
        let e = env_of(&[
            ("HF_HOME", "/h"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/home/u"),
        ]);
        assert_eq!(hf_home_from(&e), PathBuf::from("/h"));
        let e = env_of(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/home/u")]);
        assert_eq!(hf_home_from(&e), PathBuf::from("/x/huggingface"));
        let e = env_of(&[("HOME", "/home/u")]);
        assert_eq!(
            hf_home_from(&e),
            PathBuf::from("/home/u/.cache/huggingface")
        );
        let e = env_of(&[("HF_HOME", "~/hf"), ("HOME", "/home/u")]);
        assert_eq!(hf_home_from(&e), PathBuf::from("/home/u/hf"));
    }

    #[test]
    fn endpoint_strips_slash() {
        let e = env_of(&[("HF_ENDPOINT", "http://127.0.0.1:8080//")]);
        assert_eq!(endpoint_from(&e), "http://127.0.0.1:8080");
        let e = env_of(&[]);
        assert_eq!(endpoint_from(&e), DEFAULT_ENDPOINT);
    }

    #[test]
    fn token_lookup_order() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("hfhome");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join("token"), "  home-token\n").unwrap();
        let other = dir.path().join("other-token");
        std::fs::write(&other, "path-token\n").unwrap();
        let h = home.to_str().unwrap();
        let o = other.to_str().unwrap();

        let e = env_of(&[("HF_TOKEN", "env"), ("HF_HOME", h), ("HF_TOKEN_PATH", o)]);
        assert_eq!(token_from(&e).unwrap().expose(), "env");
        let e = env_of(&[("HF_TOKEN", " "), ("HF_HOME", h), ("HF_TOKEN_PATH", o)]);
        assert_eq!(token_from(&e).unwrap().expose(), "path-token");
        let e = env_of(&[("HF_HOME", h)]);
        assert_eq!(token_from(&e).unwrap().expose(), "home-token");
        let e = env_of(&[("HF_HOME", dir.path().join("none").to_str().unwrap())]);
        assert!(token_from(&e).is_none());
        assert_eq!(format!("{:?}", Token::new("secret")), "Some(Token(***))");
    }

    /// A token that cannot be a header is refused by its source, never shown; one read from
    /// the environment or the file says which.
    #[test]
    fn tokens_that_cannot_be_headers_are_named_by_their_source() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, b"hf_se\xffcret\n").unwrap();
        let f = file.to_str().unwrap();
        let e = env_of(&[("HF_TOKEN", "hf_se\ncret\n")]);
        let err = token_from(&e).unwrap().check().unwrap_err();
        assert_eq!(err.from, TokenSource::Var("HF_TOKEN"));
        let message = err.to_string();
        assert!(
            message.starts_with("the token in HF_TOKEN contains a line break"),
            "{message}"
        );
        assert!(!message.contains("cret"), "{message}");
        let e = env_of(&[("HUGGING_FACE_HUB_TOKEN", "a\rb")]);
        let err = token_from(&e).unwrap().check().unwrap_err();
        assert_eq!(err.from, TokenSource::Var("HUGGING_FACE_HUB_TOKEN"));
        let e = env_of(&[("HF_TOKEN_PATH", f)]);
        let err = token_from(&e).unwrap().check().unwrap_err();
        assert_eq!(err.what, "a character that is not ASCII");
        assert!(
            err.to_string()
                .starts_with(&format!("the token in the token file {f} contains")),
            "{err}"
        );
        for (value, what) in [
            ("a b", "a space"),
            ("a\0b", "a control character"),
            ("a\tb", "a control character"),
            ("a\u{7f}b", "a control character"),
            ("a\u{e9}b", "a character that is not ASCII"),
        ] {
            let err = Token::parse(value, TokenSource::Option("--token")).unwrap_err();
            assert_eq!(err.what, what, "{value:?}");
            assert!(err
                .to_string()
                .starts_with("the token given with --token contains"));
        }
        let k = Token::parse("x\ny", TokenSource::Keyword("token")).unwrap_err();
        assert!(k
            .to_string()
            .starts_with("the token given as token= contains a line break"));
        assert_eq!(Token::parse(" \n", TokenSource::Given), Ok(None));
        let ok = Token::parse(" hf_Ab-._~+/= \n", TokenSource::Given)
            .unwrap()
            .unwrap();
        assert_eq!(ok.expose(), "hf_Ab-._~+/=");
    }

    #[test]
    fn offline_values() {
        for v in ["1", "true", "ON", "yes"] {
            assert!(offline_from(&env_of(&[("HF_HUB_OFFLINE", v)])), "{v}");
        }
        for v in ["0", "", "false", "no"] {
            assert!(!offline_from(&env_of(&[("HF_HUB_OFFLINE", v)])), "{v}");
        }
        assert!(!offline_from(&env_of(&[])));
    }

    #[test]
    fn timeouts_and_flags_read_as_huggingface_hub_does() {
        let e = env_of(&[
            ("HF_HUB_DOWNLOAD_TIMEOUT", "2.5"),
            ("HF_HUB_ETAG_TIMEOUT", "x"),
            ("HF_HUB_DISABLE_PROGRESS_BARS", "yes"),
        ]);
        assert_eq!(
            seconds_from(&e, "HF_HUB_DOWNLOAD_TIMEOUT"),
            Some(std::time::Duration::from_millis(2500))
        );
        assert_eq!(seconds_from(&e, "HF_HUB_ETAG_TIMEOUT"), None);
        assert_eq!(seconds_from(&e, "UNSET"), None);
        assert!(flag_from(&e, "HF_HUB_DISABLE_PROGRESS_BARS"));
        assert!(!flag_from(&e, "UNSET"));
    }
}
