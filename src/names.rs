//! Names that come from users, servers and files: repository ids, types, revisions and paths,
//! content hashes, and how any of them is shown on a terminal.
//!
//! Every name a server lists is hostile until checked here: a repository path becomes a local
//! file name (so no `..`, no absolute path, no backslash, no percent-encoded dot or slash, no
//! control character), and any name printed goes through [`escape`] (so `name\n/etc/passwd`
//! cannot forge an output line and `\x1b[…` cannot drive the terminal).

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

/// Longest repository path accepted, in bytes.
pub const MAX_PATH_LEN: usize = 4096;
/// Longest segment of a repository path, in bytes (what file systems allow for a name).
pub const MAX_SEGMENT_LEN: usize = 255;

/// The kind of a repository.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum RepoType {
    /// A model repository (the default).
    #[default]
    Model,
    /// A dataset repository.
    Dataset,
    /// A Space (an app's repository): files only, as `hf download --repo-type space` fetches
    /// them.
    Space,
}

impl RepoType {
    /// The API segment: `models`, `datasets` or `spaces`.
    pub fn api_segment(self) -> &'static str {
        match self {
            RepoType::Model => "models",
            RepoType::Dataset => "datasets",
            RepoType::Space => "spaces",
        }
    }

    /// The prefix of file URLs: `""` for models, `"datasets/"`, `"spaces/"`.
    pub fn url_prefix(self) -> &'static str {
        match self {
            RepoType::Model => "",
            RepoType::Dataset => "datasets/",
            RepoType::Space => "spaces/",
        }
    }

    /// The name used in cache folder names: `model`, `dataset` or `space`.
    pub fn as_str(self) -> &'static str {
        match self {
            RepoType::Model => "model",
            RepoType::Dataset => "dataset",
            RepoType::Space => "space",
        }
    }
}

impl fmt::Display for RepoType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RepoType {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "model" | "models" => Ok(RepoType::Model),
            "dataset" | "datasets" => Ok(RepoType::Dataset),
            "space" | "spaces" => Ok(RepoType::Space),
            _ => Err(ParseError::new(
                "repository type",
                format!(
                    "unknown repository type '{}' (expected 'model', 'dataset' or 'space')",
                    escape(s)
                ),
            )),
        }
    }
}

/// A value that cannot be read as what it should be (a repository type, a commit id, an ETag,
/// a digest…): what was being read, and why, with the value escaped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ParseError {
    what: &'static str,
    message: String,
}

impl ParseError {
    /// A failure to read a `what` (the message says why and quotes the value, escaped).
    pub fn new(what: &'static str, message: impl Into<String>) -> Self {
        ParseError {
            what,
            message: message.into(),
        }
    }

    /// What was being read: `"repository type"`, `"commit id"`, `"ETag"`, ….
    pub fn what(&self) -> &'static str {
        self.what
    }
}

/// A string checked once, when it is made, and then carried as its type says.
macro_rules! hex_id {
    ($(#[$doc:meta])* $name:ident, $what:literal, $valid:path, $expected:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Reads one (surrounding white space and case are not forgiven: the Hub's
            /// answers are normalised before they get here).
            pub fn parse(s: &str) -> Result<Self, ParseError> {
                if $valid(s) {
                    Ok($name(s.to_string()))
                } else {
                    Err(ParseError::new(
                        $what,
                        format!(
                            concat!("'{}' is not a ", $what, " (", $expected, ")"),
                            escape(s)
                        ),
                    ))
                }
            }

            /// The lowercase hex digits.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The lowercase hex digits, owned.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<std::path::Path> for $name {
            fn as_ref(&self) -> &std::path::Path {
                self.0.as_ref()
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl FromStr for $name {
            type Err = ParseError;
            fn from_str(s: &str) -> Result<Self, ParseError> {
                $name::parse(s)
            }
        }

        impl TryFrom<String> for $name {
            type Error = ParseError;
            fn try_from(s: String) -> Result<Self, ParseError> {
                if $valid(&s) {
                    Ok($name(s))
                } else {
                    $name::parse(&s)
                }
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.0
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                $name::try_from(s).map_err(serde::de::Error::custom)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }
    };
}

hex_id!(
    /// A full commit id: 40 lowercase hex digits, checked when made (see [`is_commit_hash`]).
    CommitId,
    "commit id",
    is_commit_hash,
    "40 lowercase hex digits"
);

hex_id!(
    /// An ETag as the Hub gives it for a file and the cache names its blob by: the SHA-256 of
    /// the content (LFS and Xet files, 64 lowercase hex digits) or the git blob SHA-1 (40),
    /// checked when made (see [`etag_kind`]).
    Etag,
    "ETag",
    is_blob_etag,
    "a SHA-256 or git SHA-1 in lowercase hex"
);

impl Etag {
    /// Which hash it is.
    pub fn kind(&self) -> EtagKind {
        etag_kind(&self.0).unwrap_or(EtagKind::GitSha1)
    }
}

fn is_blob_etag(s: &str) -> bool {
    etag_kind(s).is_some()
}

/// Characters that change the direction of the text around them (overrides and isolates):
/// invisible, and able to make a name read as another.
fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}'
    )
}

/// `s` as it may be shown on a terminal or in a one-line message: control characters (C0, DEL,
/// C1) and direction controls are escaped (`\n`, `\x1b`, `\u{202e}`); everything else is kept.
/// Escaping twice changes nothing (the output has no character left to escape), so text escaped
/// by the library can be escaped again by a program that prints it. Borrowed when nothing needs
/// escaping.
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c.is_control() || is_bidi_control(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 && c.is_control() => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() || is_bidi_control(c) => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Decodes `%XX` escapes once (invalid ones are kept as they are).
fn percent_decode_once(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// Checks a repository path (a file inside a repository, as listed or asked for) before it can
/// become a local file name: relative and `/`-separated; no `.`, `..` or empty segment, also
/// once percent-decoded (`%2e%2e`); no backslash or encoded slash; no NUL, control character or
/// direction control; no drive prefix; at most [`MAX_PATH_LEN`] bytes, segments at most
/// [`MAX_SEGMENT_LEN`]; no `.git` segment, in any of the spellings git itself guards against
/// (any case, trailing dots or spaces, the short name `git~1`, invisible characters: written
/// into a local folder that is a git work tree, `.git/config` would hand the next `git` command
/// to the server); nothing in `.cache/huggingface/` (a local folder's own metadata: saved
/// listings and what each file is). Returns the reason when it is refused.
pub fn check_repo_path(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("empty path");
    }
    if path.len() > MAX_PATH_LEN {
        return Err("path too long");
    }
    if path.starts_with('/') {
        return Err("absolute path");
    }
    if path.contains('\\') {
        return Err("backslash in path");
    }
    if path.contains('\0') {
        return Err("NUL in path");
    }
    if path.chars().any(char::is_control) {
        return Err("control character in path");
    }
    if path.chars().any(is_bidi_control) {
        return Err("text-direction control character in path");
    }
    if path.len() >= 2 && path.as_bytes()[1] == b':' {
        return Err("drive prefix in path");
    }
    let mut segments = path.split('/');
    if let (Some(first), Some(second)) = (segments.next(), segments.next()) {
        if folded(first) == ".cache" && folded(second) == "huggingface" {
            return Err("path in '.cache/huggingface/', a local folder's own metadata");
        }
    }
    for seg in path.split('/') {
        match seg {
            "" => return Err("empty path segment"),
            "." | ".." => return Err("'.' or '..' segment"),
            _ => {}
        }
        let f = folded(seg);
        if f == ".git" || f == "git~1" {
            return Err("'.git' segment in path, a git repository's own folder");
        }
        if seg.len() > MAX_SEGMENT_LEN {
            return Err("path segment longer than 255 bytes");
        }
        if seg.contains('%') {
            // What another tool (or a careless server) might decode it to, up to three times.
            let mut s = seg.to_string();
            for _ in 0..3 {
                let d = percent_decode_once(&s);
                if d == s {
                    break;
                }
                if d == "." || d == ".." || d.contains(['/', '\\', '\0']) {
                    return Err("percent-encoded '.', '..', '/' or '\\' in path");
                }
                s = d;
            }
        }
    }
    Ok(())
}

/// A path segment as a case-insensitive file system, Windows or macOS may take it: lowercase,
/// without the characters HFS+ ignores (zero-width ones), without trailing dots and spaces
/// (dropped by Windows).
fn folded(seg: &str) -> String {
    let mut f: String = seg
        .chars()
        .filter(|c| {
            !matches!(
                c,
                '\u{200b}'..='\u{200d}' | '\u{2060}' | '\u{feff}' | '\u{ad}'
            )
        })
        .flat_map(char::to_lowercase)
        .collect();
    while f.ends_with(['.', ' ']) && f.len() > 1 && f != ".." {
        f.pop();
    }
    f
}

/// Why a repository id is refused, or `Ok`: `name` or `org/name`, each part made of ASCII
/// letters, digits, `-`, `_` and `.`, not starting or ending with `-` or `.`, no `--` or `..`,
/// at most 96 characters (huggingface_hub's rule).
pub fn check_repo_id(repo: &str) -> Result<(), &'static str> {
    if repo.is_empty() {
        return Err("empty");
    }
    if repo.len() > 96 {
        return Err("longer than 96 characters");
    }
    if repo.contains("--") || repo.contains("..") {
        return Err("'--' and '..' are not allowed");
    }
    let parts: Vec<&str> = repo.split('/').collect();
    if parts.len() > 2 {
        return Err("expected 'name' or 'org/name'");
    }
    for p in parts {
        if p.is_empty() {
            return Err("empty part");
        }
        if !p
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return Err("only letters, digits, '-', '_' and '.' are allowed");
        }
        if p.starts_with(['-', '.']) || p.ends_with(['-', '.']) {
            return Err("a part may not start or end with '-' or '.'");
        }
    }
    Ok(())
}

/// A revision (branch, tag, commit, `refs/pr/1`) names a file under `refs/`, so it must be a
/// safe relative path ([`check_repo_path`]).
pub fn check_revision(revision: &str) -> Result<(), &'static str> {
    check_repo_path(revision)
}

/// True for a full commit id: 40 lowercase hex digits.
pub fn is_commit_hash(s: &str) -> bool {
    s.len() == 40 && is_lower_hex(s)
}

/// True when `s` is non-empty and only lowercase hex digits.
pub fn is_lower_hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The kind of hash an ETag is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtagKind {
    /// 64 hex digits: SHA-256 of the content (LFS and Xet files).
    Sha256,
    /// 40 hex digits: git blob SHA-1 (`sha1("blob {len}\0" + content)`).
    GitSha1,
}

/// Which hash `etag` (lowercase hex) is, if it is one of the two the Hub uses. Only such ETags
/// name blobs in the cache.
pub fn etag_kind(etag: &str) -> Option<EtagKind> {
    if !is_lower_hex(etag) {
        return None;
    }
    match etag.len() {
        64 => Some(EtagKind::Sha256),
        40 => Some(EtagKind::GitSha1),
        _ => None,
    }
}

/// The key two paths collide under on a case-insensitive file system (macOS, Windows): the
/// lowercase form.
pub fn case_fold(path: &str) -> String {
    path.to_lowercase()
}

/// An ETag without `W/`, quotes or surrounding white space (as huggingface_hub reads it), in
/// lowercase: the Hub's ETags are hex digests, compared without regard to case.
pub fn normalize_etag(etag: &str) -> String {
    let e = etag.trim();
    let e = e.strip_prefix("W/").unwrap_or(e);
    e.trim_matches('"').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_ids_and_etags_are_checked_once_when_made() {
        let c = "a".repeat(40);
        let id = CommitId::parse(&c).unwrap();
        assert_eq!(id, c.as_str());
        assert_eq!(id.to_string(), c);
        for bad in [
            "",
            "A".repeat(40).as_str(),
            &"a".repeat(39),
            &"a".repeat(64),
            "main",
        ] {
            let e = CommitId::parse(bad).unwrap_err();
            assert_eq!(e.what(), "commit id");
            assert!(e.to_string().contains("is not a commit id"), "{e}");
        }
        // Names from the network are escaped in the message.
        let e = Etag::parse("x\u{1b}[31m").unwrap_err();
        assert!(!e.to_string().contains('\u{1b}'), "{e}");
        assert_eq!(
            Etag::parse(&"b".repeat(64)).unwrap().kind(),
            EtagKind::Sha256
        );
        assert_eq!(
            Etag::parse(&"b".repeat(40)).unwrap().kind(),
            EtagKind::GitSha1
        );
        assert!(Etag::parse(&"b".repeat(41)).is_err());
        // Deserialised values are checked too.
        let ok: Etag = serde_json::from_str(&format!("\"{}\"", "c".repeat(40))).unwrap();
        assert_eq!(
            serde_json::to_string(&ok).unwrap(),
            format!("\"{}\"", "c".repeat(40))
        );
        assert!(serde_json::from_str::<CommitId>("\"../../etc\"").is_err());
        assert_eq!("model".parse::<RepoType>(), Ok(RepoType::Model));
        assert_eq!(
            "bucket".parse::<RepoType>().unwrap_err().what(),
            "repository type"
        );
    }

    #[test]
    fn unsafe_paths_are_refused() {
        for p in [
            "",
            "../evil",
            "a/../b",
            "a/..",
            "/etc/passwd",
            "a//b",
            "a/",
            "./a",
            "a\\b",
            "..\\evil",
            "C:/x",
            "a\0b",
            "name\n/etc/passwd",
            "x\u{1b}[31m.gguf",
            "x\r.gguf",
            "x\u{7f}",
            "x\u{9b}31m",
            "evil\u{202e}fpp.gguf",
            "%2e%2e/x",
            "%2E%2e/x",
            "a/%2e",
            "%252e%252e/x",
            "a%2fb",
            "a%5cb",
            &"x".repeat(256),
            &format!("a/{}", "b".repeat(5000)),
            ".git/config",
            "sub/.git/hooks/post-checkout",
            ".GIT/config",
            ".Git./config",
            ".git /config",
            "GIT~1/config",
            ".g\u{200c}it/config",
            ".git",
            ".cache/huggingface/download/model.gguf.metadata",
            ".cache/huggingface",
            ".Cache/HuggingFace/wi-trees/x.json",
        ] {
            assert!(check_repo_path(p).is_err(), "{p:?} should be refused");
        }
        for p in [
            "model.gguf",
            "sub/dir/x.safetensors",
            ".gitattributes",
            "a..b",
            "...x",
            "100%.txt",
            "%41.txt",
            "модель.gguf",
            &"x".repeat(255),
            ".github/workflows/ci.yml",
            ".gitignore",
            "x.git/config",
            ".cache/other/file",
            "sub/.cache/huggingface/x",
        ] {
            assert!(check_repo_path(p).is_ok(), "{p:?} should be accepted");
        }
    }

    #[test]
    fn escaping_for_terminals() {
        assert!(matches!(escape("plain/path.gguf"), Cow::Borrowed(_)));
        assert_eq!(escape("name\n/etc/passwd"), "name\\n/etc/passwd");
        assert_eq!(escape("x\u{1b}[31m"), "x\\x1b[31m");
        assert_eq!(escape("a\\b\t"), "a\\b\\t");
        // Idempotent.
        let once = escape("x\n\u{1b}\u{9b}\u{202e}y").into_owned();
        assert_eq!(escape(&once), once);
        assert_eq!(escape("x\u{9b}y\u{202e}z"), "x\\u{9b}y\\u{202e}z");
        assert_eq!(escape("модель"), "модель");
        assert_eq!(
            escape("token_embd.weight ключ 😀"),
            "token_embd.weight ключ 😀"
        );
        assert_eq!(escape("\x1b]0;title\x07"), "\\x1b]0;title\\x07");
        assert_eq!(escape("\r\t\0"), "\\r\\t\\x00");
        assert_eq!(
            escape("a\u{202e}b\u{2066}\u{61c}"),
            "a\\u{202e}b\\u{2066}\\u{61c}"
        );

        // Nothing printable is left of a control character.
        for c in (0u32..0x20).chain(0x7f..0xa0) {
            let s = char::from_u32(c).unwrap().to_string();
            assert!(!escape(&s).chars().any(char::is_control), "{c:#x}");
        }
    }

    #[test]
    fn repo_ids_and_revisions() {
        for ok in ["gpt2", "org/name", "Org-1/na_me.v2"] {
            assert!(check_repo_id(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "a/b/c", "a//b", "/a", "a--b/c", "a/../b", "a b/c", "-a/b", "a/b.",
        ] {
            assert!(check_repo_id(bad).is_err(), "{bad}");
        }
        assert!(check_revision("main").is_ok());
        assert!(check_revision("refs/pr/1").is_ok());
        assert!(check_revision("../x").is_err());
        assert!(is_commit_hash(&"a".repeat(40)));
        assert!(!is_commit_hash(&"A".repeat(40)));
        assert!(!is_commit_hash("main"));
        assert_eq!(etag_kind(&"a".repeat(64)), Some(EtagKind::Sha256));
        assert_eq!(etag_kind(&"0".repeat(40)), Some(EtagKind::GitSha1));
        assert_eq!(etag_kind("../x"), None);
        assert_eq!(etag_kind(&"g".repeat(40)), None);
        assert_eq!(case_fold("Model.GGUF"), case_fold("model.gguf"));
    }
}
