//! The flat files older llama.cpp versions kept in their cache folder.

use super::*;

/// A flat file of an older llama.cpp cache.
#[derive(Debug, Clone, Serialize)]
pub struct LegacyFile {
    /// The file name.
    pub name: String,
    /// Its path.
    pub path: PathBuf,
    /// Its size.
    pub size: u64,
    /// `model` (a finished download), `partial` (`.downloadInProgress`), `note` (`.etag` or
    /// `.json` beside a download) or `manifest` (`manifest=…json`).
    pub kind: String,
    /// For a note: the download it describes is neither there nor in progress.
    pub orphaned: bool,
}

/// Lists the flat files older llama.cpp versions kept at the top of `dir` (folders, such as
/// the Hugging Face layout newer versions write there, are left out).
pub fn scan_llama_cpp_legacy(dir: &Path) -> Vec<LegacyFile> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let Ok(m) = fs::symlink_metadata(e.path()) else {
            continue;
        };
        if !m.is_file() {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        let exists = |n: &str| fs::symlink_metadata(dir.join(n)).is_ok();
        let (kind, orphaned) = if name.starts_with("manifest=") && name.ends_with(".json") {
            ("manifest", false)
        } else if name.ends_with(LLAMA_IN_PROGRESS_SUFFIX) {
            ("partial", false)
        } else if let Some(base) = name
            .strip_suffix(LLAMA_ETAG_SUFFIX)
            .or_else(|| name.strip_suffix(".json"))
        {
            let in_progress = format!("{base}{LLAMA_IN_PROGRESS_SUFFIX}");
            ("note", !exists(base) && !exists(&in_progress))
        } else if name.ends_with(".gguf") {
            ("model", false)
        } else {
            continue;
        };
        out.push(LegacyFile {
            path: e.path(),
            name,
            size: m.len(),
            kind: kind.to_string(),
            orphaned,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Plans the removal of the orphaned notes in an older llama.cpp cache folder.
pub fn plan_legacy_prune(dir: &Path) -> Removal {
    let mut out = Removal::new(dir);
    for f in scan_llama_cpp_legacy(dir)
        .into_iter()
        .filter(|f| f.orphaned)
    {
        out.items.push(Item {
            kind: ItemKind::Note,
            repo: None,
            what: f.name,
            path: f.path,
            bytes: f.size,
            lock: None,
        });
    }
    out.freed_bytes = out.items.iter().map(|i| i.bytes).sum();
    out
}

/// Plans the removal of flat downloads of an older llama.cpp by file name (`NAME.gguf`), with
/// their notes and partial download.
pub fn plan_legacy_removal(dir: &Path, names: &[String]) -> Removal {
    let mut out = Removal::new(dir);
    let files = scan_llama_cpp_legacy(dir);
    for n in names {
        let mut found = false;
        for f in &files {
            let base = f
                .name
                .strip_suffix(LLAMA_IN_PROGRESS_SUFFIX)
                .or_else(|| f.name.strip_suffix(LLAMA_ETAG_SUFFIX))
                .or_else(|| f.name.strip_suffix(".json"))
                .unwrap_or(&f.name);
            if base == n && f.kind != "manifest" {
                found = true;
                out.items.push(Item {
                    kind: ItemKind::LegacyFile,
                    repo: None,
                    what: f.name.clone(),
                    path: f.path.clone(),
                    bytes: f.size,
                    lock: None,
                });
            }
        }
        if !found {
            out.not_found.push(n.clone());
        }
    }
    out.freed_bytes = out.items.iter().map(|i| i.bytes).sum();
    out
}
