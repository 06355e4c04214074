//! What `cache rm` is asked to remove ([`Target`]).

use super::*;

/// What `cache rm` is asked to remove: a commit (in any repository), or a repository, one of its
/// revisions, or files in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A commit hash, looked for in every repository.
    Commit(String),
    /// A repository, one of its revisions, or files in it.
    Repo {
        /// `model`, `dataset` or `space`; `None` when the form left it open (`model/x` may be
        /// the model `model/x` or the model `x`).
        repo_type: Option<String>,
        /// `org/name` (or `name`).
        id: String,
        /// For the ambiguous form `TYPE/name`: the typed reading, tried when the model
        /// `TYPE/name` is not in the cache.
        alt: Option<(String, String)>,
        /// A branch, tag, commit or commit prefix.
        revision: Option<String>,
        /// A file path in the repository.
        path: Option<String>,
    },
}

pub(super) fn type_keyword(s: &str) -> Option<&'static str> {
    match s.to_ascii_lowercase().as_str() {
        "model" | "models" => Some("model"),
        "dataset" | "datasets" => Some("dataset"),
        "space" | "spaces" => Some("space"),
        _ => None,
    }
}

impl Target {
    /// Reads a target as given on the command line.
    pub fn parse(s: &str) -> Result<Target, ManageError> {
        let bad = |reason: &str| ManageError::BadTarget {
            target: crate::names::escape(s).into_owned(),
            reason: reason.to_string(),
        };
        let t = s.trim();
        if t.len() == 40 && t.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(Target::Commit(t.to_ascii_lowercase()));
        }
        let (repo_part, path) = match t.split_once(':') {
            Some((r, p)) => {
                check_repo_path(p).map_err(bad)?;
                (r, Some(p.to_string()))
            }
            None => (t, None),
        };
        let (spec, revision) = match repo_part.split_once('@') {
            Some((r, rev)) => {
                crate::names::check_revision(rev).map_err(bad)?;
                (r, Some(rev.to_string()))
            }
            None => (repo_part, None),
        };
        if let Some((ty, id)) = parse_folder_name(spec) {
            return Ok(Target::Repo {
                repo_type: Some(ty.to_string()),
                id,
                alt: None,
                revision,
                path,
            });
        }
        let parts: Vec<&str> = spec.split('/').collect();
        let (repo_type, id, alt) = match parts.as_slice() {
            [ty, org, name] => {
                let ty = type_keyword(ty).ok_or_else(|| {
                    bad("expected org/name, TYPE/org/name (model, dataset, space) or a commit hash")
                })?;
                (Some(ty.to_string()), format!("{org}/{name}"), None)
            }
            [a, b] => (
                None,
                format!("{a}/{b}"),
                type_keyword(a).map(|ty| (ty.to_string(), b.to_string())),
            ),
            [one] => (Some("model".to_string()), one.to_string(), None),
            _ => return Err(bad("too many '/'")),
        };
        check_repo_id(&id).map_err(bad)?;
        Ok(Target::Repo {
            repo_type,
            id,
            alt,
            revision,
            path,
        })
    }
}
