//! Split GGUF models: shard names and the checks across shards.

use std::collections::HashMap;

use super::value::ValueType;
use super::GgufHeader;
use crate::format::{Diagnostic, Diagnostics};

/// Split a shard file name `NAME-%05d-of-%05d.gguf` into `(NAME, number, count)`, numbers
/// counting from 1. Any directory part stays in `NAME`. `None` when the name does not
/// follow the pattern or the numbers are inconsistent (0, above the count, above 65535).
pub fn parse_split_name(name: &str) -> Option<(&str, u32, u32)> {
    let stem = name.strip_suffix(".gguf")?;
    let (left, count) = stem.rsplit_once("-of-")?;
    let (prefix, no) = left.rsplit_once('-')?;
    let num = |s: &str| -> Option<u32> {
        (s.len() >= 5 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let (no, count) = (num(no)?, num(count)?);
    (no >= 1 && no <= count && count <= u32::from(u16::MAX)).then_some((prefix, no, count))
}

/// All shard names of the split model one of whose shards is `first` (usually
/// `NAME-00001-of-00003.gguf`): `NAME-00001-of-00003.gguf` … `NAME-00003-of-00003.gguf`.
pub fn split_shard_names(first: &str) -> Option<Vec<String>> {
    let (prefix, _, count) = parse_split_name(first)?;
    Some(
        (1..=count)
            .map(|i| format!("{prefix}-{i:05}-of-{count:05}.gguf"))
            .collect(),
    )
}

/// Check a set of split shards, each given with its file name (a path is fine).
///
/// Codes (all errors): `gguf.split.missing-key` (`split.no`, `split.count` or
/// `split.tensors.count` absent), `gguf.split.key-type` (not u16 / u16 / i32 as
/// llama.cpp's loader requires), `gguf.split.count-mismatch` (shards disagree on
/// `split.count` or `split.tensors.count`, or the number of shards given differs),
/// `gguf.split.missing-shard`, `gguf.split.duplicate-shard`, `gguf.split.bad-number`
/// (`split.no ≥ split.count`), `gguf.split.bad-name` (not `NAME-%05d-of-%05d.gguf`),
/// `gguf.split.name-mismatch` (the name's numbers or prefix disagree with the metadata or the
/// other shards), `gguf.split.duplicate-tensor`, `gguf.split.tensor-count` (the total number
/// of tensors differs from `split.tensors.count`).
pub fn check_split(shards: &[(String, &GgufHeader)]) -> Vec<Diagnostic> {
    let mut d = Diagnostics::new();
    if shards.is_empty() {
        return Vec::new();
    }
    let mut nos: Vec<Option<u64>> = Vec::with_capacity(shards.len());
    let mut count: Option<(u64, String)> = None;
    let mut total: Option<(i64, String)> = None;
    for (file, h) in shards {
        let file = base(file);
        let mut int = |key: &str, want: ValueType| -> Option<i64> {
            match h.get(key) {
                None => {
                    d.error(
                        "gguf.split.missing-key",
                        format!("shard {file} has no {key}"),
                    );
                    None
                }
                Some(v) => {
                    if v.value_type() != want {
                        d.error(
                            "gguf.split.key-type",
                            format!(
                                "shard {file}: {key} is a {} but llama.cpp requires a {want}",
                                v.value_type()
                            ),
                        );
                    }
                    v.as_i64()
                }
            }
        };
        let no = int("split.no", ValueType::U16);
        let c = int("split.count", ValueType::U16);
        let t = int("split.tensors.count", ValueType::I32);
        nos.push(no.and_then(|n| u64::try_from(n).ok()));
        if let Some(c) = c.and_then(|c| u64::try_from(c).ok()) {
            match &count {
                None => count = Some((c, file.clone())),
                Some((c0, f0)) if *c0 != c => d.error(
                    "gguf.split.count-mismatch",
                    format!("shard {file} says split.count = {c}, shard {f0} says {c0}"),
                ),
                _ => {}
            }
        }
        if let Some(t) = t {
            match &total {
                None => total = Some((t, file.clone())),
                Some((t0, f0)) if *t0 != t => d.error(
                    "gguf.split.count-mismatch",
                    format!("shard {file} says split.tensors.count = {t}, shard {f0} says {t0}"),
                ),
                _ => {}
            }
        }
    }

    let prefix0 = parse_split_name(&base(&shards[0].0)).map(|(p, _, _)| p.to_string());
    let count = count.map(|(c, _)| c);
    if let Some(count) = count {
        check_numbers(&mut d, shards, &nos, count, prefix0.as_deref());
    }
    check_names(&mut d, shards, &nos, count, prefix0.as_deref());
    check_tensors(&mut d, shards, total.map(|(t, _)| t));
    d.finish()
}

/// A shard's file name, without its folder.
fn base(p: &str) -> String {
    std::path::Path::new(p)
        .file_name()
        .map_or_else(|| p.to_string(), |f| f.to_string_lossy().into_owned())
}

/// The shards' numbers (`nos`, `split.no` of each) against `count` (`split.count`): as many
/// shards as it says, each number below it and once, none missing (named after the first
/// shard's `prefix0` when its name has one).
fn check_numbers(
    d: &mut Diagnostics,
    shards: &[(String, &GgufHeader)],
    nos: &[Option<u64>],
    count: u64,
    prefix0: Option<&str>,
) {
    if shards.len() as u64 != count {
        d.error(
            "gguf.split.count-mismatch",
            format!("{} shard(s) given but split.count = {count}", shards.len()),
        );
    }
    let mut present: HashMap<u64, &str> = HashMap::new();
    for ((file, _), no) in shards.iter().zip(nos) {
        let Some(no) = *no else { continue };
        if no >= count {
            d.error(
                "gguf.split.bad-number",
                format!("shard {file} has split.no = {no}, not below split.count = {count}"),
            );
            continue;
        }
        if let Some(prev) = present.insert(no, file) {
            d.error(
                "gguf.split.duplicate-shard",
                format!("shards {prev} and {file} both have split.no = {no}"),
            );
        }
    }
    for no in 0..count.min(u64::from(u16::MAX) + 1) {
        if !present.contains_key(&no) {
            let name = prefix0.map_or(String::new(), |p| {
                format!(" ({p}-{:05}-of-{count:05}.gguf)", no + 1)
            });
            d.error(
                "gguf.split.missing-shard",
                format!("shard with split.no = {no}{name} is missing"),
            );
        }
    }
}

/// The shards' file names: each `NAME-%05d-of-%05d.gguf`, its numbers those of its `split.no`
/// (`nos`) and of `count`, its prefix that of the first shard (`prefix0`).
fn check_names(
    d: &mut Diagnostics,
    shards: &[(String, &GgufHeader)],
    nos: &[Option<u64>],
    count: Option<u64>,
    prefix0: Option<&str>,
) {
    for ((file, _), no) in shards.iter().zip(nos) {
        let name = base(file);
        match parse_split_name(&name) {
            None => d.error(
                "gguf.split.bad-name",
                format!("shard file name '{name}' is not NAME-%05d-of-%05d.gguf"),
            ),
            Some((prefix, n, of)) => {
                if let Some(no) = no {
                    if u64::from(n) != no + 1 {
                        d.error(
                            "gguf.split.name-mismatch",
                            format!("shard '{name}' is number {n} by name but has split.no = {no} (expected {})", no + 1),
                        );
                    }
                }
                if let Some(c) = count {
                    if u64::from(of) != c {
                        d.error(
                            "gguf.split.name-mismatch",
                            format!("shard '{name}' says -of-{of} but split.count = {c}"),
                        );
                    }
                }
                if let Some(p0) = prefix0 {
                    if prefix != p0 {
                        d.error(
                            "gguf.split.name-mismatch",
                            format!("shard '{name}' has prefix '{prefix}', other shards '{p0}'"),
                        );
                    }
                }
            }
        }
    }
}

/// The shards' tensors: each name in one shard only, and as many in all as `total`
/// (`split.tensors.count`) says.
fn check_tensors(d: &mut Diagnostics, shards: &[(String, &GgufHeader)], total: Option<i64>) {
    let mut owner: HashMap<&str, &str> = HashMap::new();
    let mut n_tensors: u64 = 0;
    for (file, h) in shards {
        n_tensors += h.tensors.len() as u64;
        for t in &h.tensors {
            if let Some(prev) = owner.insert(&t.name, file) {
                d.error(
                    "gguf.split.duplicate-tensor",
                    format!("tensor '{}' appears in shards {prev} and {file}", t.name),
                );
            }
        }
    }
    if let Some(t) = total {
        if i64::try_from(n_tensors).ok() != Some(t) {
            d.error(
                "gguf.split.tensor-count",
                format!("the shards hold {n_tensors} tensors but split.tensors.count = {t}"),
            );
        }
    }
}
