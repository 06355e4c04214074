//! Model files shaped like real Llama checkpoints, at 0.1B, 1B, 7B and 13B parameters, written
//! as sparse files: the header (every tensor, and for GGUF the tokenizer's arrays) is real, the
//! data a hole, so a 26 GB file costs a few megabytes of disk.
//!
//! - safetensors in BF16, sharded as the Hub's checkpoints are (`save_pretrained`'s 5 GB
//!   shards, `model-0000i-of-0000N.safetensors` and `model.safetensors.index.json`, Hugging
//!   Face tensor names);
//! - GGUF in F16 and in Q4_K_M (llama.cpp's mix: Q6_K for the output, for `attn_v` and
//!   `ffn_down` in the layers llama.cpp gives more bits, Q4_K elsewhere, F32 norms), with
//!   llama.cpp's metadata and a tokenizer of the vocabulary's size.
//!
//! Reading a hole reads zeros without touching the disk: "cold" reads of these files measure
//! the page cache's work, not the disk's.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::gguf::{ggml, GgufWriter, Val};

/// The shape of a Llama-style model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// A name for it: `0.1B`, `1B`, `7B`, `13B`.
    pub name: &'static str,
    /// Vocabulary size.
    pub vocab: u64,
    /// Hidden size.
    pub hidden: u64,
    /// Transformer blocks.
    pub layers: u64,
    /// Attention heads.
    pub heads: u64,
    /// Key/value heads (grouped-query attention when fewer than `heads`).
    pub kv_heads: u64,
    /// Feed-forward size.
    pub ffn: u64,
    /// Whether the output projection is the embedding (no `lm_head`).
    pub tied: bool,
}

/// The four sizes: a 0.1B model (GPT-2-small-like widths, Llama layout), Llama-3.2-1B,
/// Llama-2-7B and Llama-2-13B.
pub const SHAPES: [Shape; 4] = [
    Shape {
        name: "0.1B",
        vocab: 32_000,
        hidden: 768,
        layers: 12,
        heads: 12,
        kv_heads: 12,
        ffn: 2_048,
        tied: false,
    },
    Shape {
        name: "1B",
        vocab: 128_256,
        hidden: 2_048,
        layers: 16,
        heads: 32,
        kv_heads: 8,
        ffn: 8_192,
        tied: true,
    },
    Shape {
        name: "7B",
        vocab: 32_000,
        hidden: 4_096,
        layers: 32,
        heads: 32,
        kv_heads: 32,
        ffn: 11_008,
        tied: false,
    },
    Shape {
        name: "13B",
        vocab: 32_000,
        hidden: 5_120,
        layers: 40,
        heads: 40,
        kv_heads: 40,
        ffn: 13_824,
        tied: false,
    },
];

/// How a model is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// BF16 safetensors, sharded at 5 GB.
    Safetensors,
    /// GGUF, F16.
    GgufF16,
    /// GGUF, Q4_K_M.
    GgufQ4KM,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 3] = [Kind::Safetensors, Kind::GgufF16, Kind::GgufQ4KM];

    /// `safetensors`, `f16.gguf`, `q4_k_m.gguf`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Safetensors => "safetensors",
            Kind::GgufF16 => "f16.gguf",
            Kind::GgufQ4KM => "q4_k_m.gguf",
        }
    }
}

/// One tensor: Hugging Face name, GGUF name, shape in PyTorch order (rows, columns).
struct Tensor {
    hf: String,
    gguf: String,
    shape: Vec<u64>,
    /// Which role, for Q4_K_M's choice of type.
    role: Role,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Norm,
    Embedding,
    Output,
    AttnV(u64),
    FfnDown(u64),
    Other,
}

impl Shape {
    fn head_dim(&self) -> u64 {
        self.hidden / self.heads
    }

    /// The tensors, in the order checkpoints list them.
    fn tensors(&self) -> Vec<Tensor> {
        let (h, kv) = (self.hidden, self.kv_heads * self.head_dim());
        let t = |hf: String, gguf: String, shape: Vec<u64>, role| Tensor {
            hf,
            gguf,
            shape,
            role,
        };
        let mut out = vec![t(
            "model.embed_tokens.weight".into(),
            "token_embd.weight".into(),
            vec![self.vocab, h],
            Role::Embedding,
        )];
        for i in 0..self.layers {
            let hf = |s: &str| format!("model.layers.{i}.{s}.weight");
            let gg = |s: &str| format!("blk.{i}.{s}.weight");
            out.push(t(
                hf("input_layernorm"),
                gg("attn_norm"),
                vec![h],
                Role::Norm,
            ));
            out.push(t(
                hf("self_attn.q_proj"),
                gg("attn_q"),
                vec![h, h],
                Role::Other,
            ));
            out.push(t(
                hf("self_attn.k_proj"),
                gg("attn_k"),
                vec![kv, h],
                Role::Other,
            ));
            out.push(t(
                hf("self_attn.v_proj"),
                gg("attn_v"),
                vec![kv, h],
                Role::AttnV(i),
            ));
            out.push(t(
                hf("self_attn.o_proj"),
                gg("attn_output"),
                vec![h, h],
                Role::Other,
            ));
            out.push(t(
                hf("post_attention_layernorm"),
                gg("ffn_norm"),
                vec![h],
                Role::Norm,
            ));
            out.push(t(
                hf("mlp.gate_proj"),
                gg("ffn_gate"),
                vec![self.ffn, h],
                Role::Other,
            ));
            out.push(t(
                hf("mlp.up_proj"),
                gg("ffn_up"),
                vec![self.ffn, h],
                Role::Other,
            ));
            out.push(t(
                hf("mlp.down_proj"),
                gg("ffn_down"),
                vec![h, self.ffn],
                Role::FfnDown(i),
            ));
        }
        out.push(t(
            "model.norm.weight".into(),
            "output_norm.weight".into(),
            vec![h],
            Role::Norm,
        ));
        if !self.tied {
            out.push(t(
                "lm_head.weight".into(),
                "output.weight".into(),
                vec![self.vocab, h],
                Role::Output,
            ));
        }
        out
    }

    /// Parameters (elements of every tensor).
    pub fn parameters(&self) -> u64 {
        self.tensors()
            .iter()
            .map(|t| t.shape.iter().product::<u64>())
            .sum()
    }

    /// llama.cpp's "more bits" layers of Q4_K_M: the first and last eighth, and every third
    /// in between.
    fn more_bits(&self, layer: u64) -> bool {
        let n = self.layers;
        layer < n / 8 || layer >= 7 * n / 8 || (layer - n / 8) % 3 == 2
    }

    fn ggml_type(&self, kind: Kind, role: Role) -> u32 {
        match (kind, role) {
            (_, Role::Norm) => ggml::F32,
            (Kind::GgufF16, _) | (Kind::Safetensors, _) => ggml::F16,
            (Kind::GgufQ4KM, Role::Output) => ggml::Q6_K,
            (Kind::GgufQ4KM, Role::AttnV(i) | Role::FfnDown(i)) if self.more_bits(i) => ggml::Q6_K,
            (Kind::GgufQ4KM, _) => ggml::Q4_K,
        }
    }
}

/// The folder below `root` that [`write()`] fills for `shape` as `kind`
/// (`llama-7B-q4_k_m-gguf`, …).
pub fn folder(root: &Path, shape: &Shape, kind: Kind) -> PathBuf {
    root.join(format!(
        "llama-{}-{}",
        shape.name,
        kind.name().replace('.', "-")
    ))
}

/// Write `shape` as `kind` into its [`folder`] below `root` (created if missing), as sparse
/// files; returns the path to open (the GGUF file, or the safetensors index). Files already
/// there with the expected size are kept.
pub fn write(root: &Path, shape: &Shape, kind: Kind) -> io::Result<PathBuf> {
    let dir = &folder(root, shape, kind);
    std::fs::create_dir_all(dir)?;
    match kind {
        Kind::Safetensors => write_safetensors(dir, shape),
        _ => write_gguf(dir, shape, kind),
    }
}

/// A file of `head` followed by a hole up to `size` bytes.
fn sparse(path: &Path, head: &[u8], size: u64) -> io::Result<()> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() == size) {
        return Ok(());
    }
    let mut f = File::create(path)?;
    f.write_all(head)?;
    f.set_len(size)?;
    f.sync_all()
}

const SHARD_BYTES: u64 = 5_000_000_000;

fn write_safetensors(dir: &Path, shape: &Shape) -> io::Result<PathBuf> {
    // Filled in order, a new shard when the next tensor would pass 5 GB (save_pretrained's rule).
    let mut shards: Vec<Vec<(String, Vec<u64>)>> = vec![Vec::new()];
    let mut size = 0u64;
    for t in shape.tensors() {
        let n = t.shape.iter().product::<u64>() * 2;
        if size + n > SHARD_BYTES && !shards.last().is_some_and(Vec::is_empty) {
            shards.push(Vec::new());
            size = 0;
        }
        size += n;
        if let Some(s) = shards.last_mut() {
            s.push((t.hf, t.shape));
        }
    }
    let count = shards.len() as u32;
    let mut map = Vec::new();
    let mut total = 0u64;
    for (i, tensors) in shards.iter().enumerate() {
        let name = crate::safetensors::shard_name("model", i as u32 + 1, count);
        let mut w = crate::safetensors::StWriter::new().metadata("format", "pt");
        let mut at = 0u64;
        for (t, s) in tensors {
            let n = s.iter().product::<u64>() * 2;
            w = w.tensor_at(t, "BF16", s, at, at + n);
            at += n;
            map.push((t.clone(), name.clone()));
        }
        total += at;
        let head = w.padded_header();
        let mut bytes = (head.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(&head);
        let len = bytes.len() as u64 + at;
        sparse(&dir.join(&name), &bytes, len)?;
    }
    let pairs: Vec<(&str, &str)> = map.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let index = dir.join("model.safetensors.index.json");
    std::fs::write(&index, crate::safetensors::index_json(Some(total), &pairs))?;
    Ok(index)
}

fn write_gguf(dir: &Path, shape: &Shape, kind: Kind) -> io::Result<PathBuf> {
    let file_type = if kind == Kind::GgufF16 { 1 } else { 15 };
    let tokens: Vec<Val> = (0..shape.vocab)
        .map(|i| Val::Str(format!("<tok{i}>")))
        .collect();
    let mut w = GgufWriter::new()
        .arch("llama")
        .kv("general.name", Val::Str(format!("llama-{}", shape.name)))
        .kv("general.file_type", Val::U32(file_type))
        .kv("llama.context_length", Val::U32(4096))
        .kv("llama.embedding_length", Val::U32(shape.hidden as u32))
        .kv("llama.block_count", Val::U32(shape.layers as u32))
        .kv("llama.feed_forward_length", Val::U32(shape.ffn as u32))
        .kv(
            "llama.rope.dimension_count",
            Val::U32(shape.head_dim() as u32),
        )
        .kv("llama.attention.head_count", Val::U32(shape.heads as u32))
        .kv(
            "llama.attention.head_count_kv",
            Val::U32(shape.kv_heads as u32),
        )
        .kv("llama.attention.layer_norm_rms_epsilon", Val::F32(1e-5))
        .kv("tokenizer.ggml.model", Val::Str("llama".into()))
        .kv("tokenizer.ggml.tokens", Val::Array(8, tokens))
        .kv(
            "tokenizer.ggml.scores",
            Val::Array(6, (0..shape.vocab).map(|i| Val::F32(-(i as f32))).collect()),
        )
        .kv(
            "tokenizer.ggml.token_type",
            Val::Array(5, (0..shape.vocab).map(|_| Val::I32(1)).collect()),
        )
        .kv("tokenizer.ggml.bos_token_id", Val::U32(1))
        .kv("tokenizer.ggml.eos_token_id", Val::U32(2))
        .kv("general.quantization_version", Val::U32(2));
    for t in shape.tensors() {
        // GGUF lists dimensions innermost first.
        let dims: Vec<u64> = t.shape.iter().rev().copied().collect();
        w = w.tensor(&t.gguf, shape.ggml_type(kind, t.role), &dims);
    }
    let path = dir.join(format!("llama-{}.{}", shape.name, kind.name()));
    sparse(&path, &w.header_bytes(), w.file_size())?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_counts_are_the_models() {
        let p: Vec<u64> = SHAPES.iter().map(Shape::parameters).collect();
        // 0.1B: 134M; Llama-3.2-1B: 1.24B; Llama-2-7B: 6.74B; Llama-2-13B: 13.0B.
        assert_eq!(p[1], 1_235_814_400);
        assert_eq!(p[2], 6_738_415_616);
        assert_eq!(p[3], 13_015_864_320);
        assert!((100_000_000..200_000_000).contains(&p[0]));
    }
}
