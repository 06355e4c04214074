//! Model folders and the `weight-inspect` binary, for the manifest tests.

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use testkit::gguf::{Fill, GgufWriter};
use testkit::safetensors::StWriter;

/// The `weight-inspect` binary.
const EXE: &str = env!("CARGO_BIN_EXE_weight-inspect");

/// The chunk size of the manifests the tests create.
pub const CHUNK: u64 = 64 << 10;

/// `weight-inspect ARGS PATHS…`.
pub fn run(args: &[&str], paths: &[&Path]) -> Output {
    Command::new(EXE)
        .args(args)
        .args(paths)
        .output()
        .expect("run weight-inspect")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A small GGUF of three tensors over several 64 KiB chunks.
pub fn small_gguf() -> Vec<u8> {
    GgufWriter::new()
        .arch("llama")
        .tensor("token_embd.weight", 0, &[256, 256])
        .tensor("blk.0.attn_q.weight", 0, &[128, 64])
        .tensor("output.weight", 0, &[64, 64])
        .fill(Fill::Pattern)
        .build()
}

/// A model folder: a GGUF of several 64 KiB chunks, a sharded safetensors checkpoint (two
/// shards and an index) in a subfolder, a text file.
pub fn model_dir() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let m = d.path().join("model");
    fs::create_dir_all(m.join("st")).unwrap();
    fs::write(m.join("m.gguf"), small_gguf()).unwrap();
    for (i, name) in [
        "st/model-00001-of-00002.safetensors",
        "st/model-00002-of-00002.safetensors",
    ]
    .iter()
    .enumerate()
    {
        let data: Vec<u8> = (0..40_000u32)
            .map(|x| (x as usize * (i + 3) % 251) as u8)
            .collect();
        StWriter::new()
            .tensor(&format!("w{i}"), "U8", &[40_000], &data)
            .write(&m.join(name))
            .unwrap();
    }
    fs::write(
        m.join("st/model.safetensors.index.json"),
        r#"{"metadata": {}, "weight_map": {"w0": "model-00001-of-00002.safetensors", "w1": "model-00002-of-00002.safetensors"}}"#,
    )
    .unwrap();
    fs::write(m.join("README.md"), b"# a model\n").unwrap();
    (d, m)
}

/// The shard size of the model-signing manifests the tests compare.
pub const SHARD: u64 = 64 << 10;

/// A model folder for signing: a GGUF of several 64 KiB shards, a binary file in a subfolder, an empty file.
pub fn signing_model_dir() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let m = d.path().join("model");
    fs::create_dir_all(m.join("sub")).unwrap();
    fs::write(m.join("m.gguf"), small_gguf()).unwrap();
    let data: Vec<u8> = (0..150_000u32).map(|x| (x % 251) as u8).collect();
    fs::write(m.join("sub/w.bin"), data).unwrap();
    fs::write(m.join("empty"), b"").unwrap();
    (d, m)
}

/// Flips the byte at `at` of the file at `path`.
pub fn poke(path: &Path, at: u64) {
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[!b[0]], at).unwrap();
}
