//! Checks on names that come from users or servers and end up as local file names.

use super::HubError;

/// Checks a repository path (a file inside a repository, as listed or asked for) before it is
/// used to build a local path: relative, `/`-separated, no `..` or `.` segment, no empty segment,
/// no backslash, no NUL, no Windows drive prefix. Returns the reason when it is refused.
pub fn check_repo_path(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("empty path");
    }
    if path.len() > 4096 {
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
    if path.len() >= 2 && path.as_bytes()[1] == b':' {
        return Err("drive prefix in path");
    }
    for seg in path.split('/') {
        match seg {
            "" => return Err("empty path segment"),
            "." | ".." => return Err("'.' or '..' segment"),
            _ => {}
        }
    }
    Ok(())
}

/// [`check_repo_path`] as a [`HubError::UnsafePath`] naming the repository.
pub fn validate_repo_path(repo: &str, path: &str) -> Result<(), HubError> {
    check_repo_path(path).map_err(|reason| HubError::UnsafePath {
        repo: repo.to_string(),
        path: path.to_string(),
        reason,
    })
}

/// Checks a repository id as huggingface_hub does: `name` or `org/name`, each part made of
/// ASCII letters, digits, `-`, `_` and `.`, not starting or ending with `-` or `.`, no `--` or
/// `..`, at most 96 characters.
pub fn validate_repo_id(repo: &str) -> Result<(), HubError> {
    let err = |reason| {
        Err(HubError::InvalidRepoId {
            repo: repo.to_string(),
            reason,
        })
    };
    if repo.is_empty() {
        return err("empty");
    }
    if repo.len() > 96 {
        return err("longer than 96 characters");
    }
    if repo.contains("--") || repo.contains("..") {
        return err("'--' and '..' are not allowed");
    }
    let parts: Vec<&str> = repo.split('/').collect();
    if parts.len() > 2 {
        return err("expected 'name' or 'org/name'");
    }
    for p in parts {
        if p.is_empty() {
            return err("empty part");
        }
        if !p
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return err("only letters, digits, '-', '_' and '.' are allowed");
        }
        if p.starts_with(['-', '.']) || p.ends_with(['-', '.']) {
            return err("a part may not start or end with '-' or '.'");
        }
    }
    Ok(())
}

/// Checks a revision (branch, tag, commit, `refs/pr/1`): it names a file under `refs/`, so it
/// must be a safe relative path.
pub fn validate_revision(revision: &str) -> Result<(), HubError> {
    check_repo_path(revision).map_err(|reason| HubError::InvalidRevision {
        revision: revision.to_string(),
        reason,
    })
}

/// True for a full commit id: 40 lowercase hex digits.
pub fn is_commit_hash(s: &str) -> bool {
    s.len() == 40 && is_lower_hex(s)
}

/// True when `s` is non-empty and only lowercase hex digits.
pub fn is_lower_hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        ] {
            assert!(check_repo_path(p).is_err(), "{p:?} should be refused");
        }
        for p in [
            "model.gguf",
            "sub/dir/x.safetensors",
            ".gitattributes",
            "a..b",
            "...x",
        ] {
            assert!(check_repo_path(p).is_ok(), "{p:?} should be accepted");
        }
    }

    #[test]
    fn repo_ids() {
        for ok in ["gpt2", "org/name", "Org-1/na_me.v2"] {
            assert!(validate_repo_id(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "a/b/c", "a//b", "/a", "a--b/c", "a/../b", "a b/c", "-a/b", "a/b.",
        ] {
            assert!(validate_repo_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn revisions() {
        assert!(validate_revision("main").is_ok());
        assert!(validate_revision("refs/pr/1").is_ok());
        assert!(validate_revision("../x").is_err());
        assert!(is_commit_hash(&"a".repeat(40)));
        assert!(!is_commit_hash(&"A".repeat(40)));
        assert!(!is_commit_hash("main"));
    }
}
