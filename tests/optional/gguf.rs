//! The real vocabulary files of `../shared/data` (written by llama.cpp's tools).

use weight_inspect::format::gguf::{self, GgufHeader};

fn ok(bytes: &[u8]) -> GgufHeader {
    match gguf::parse(bytes) {
        Ok(h) => h,
        Err(e) => panic!("parse failed: {e}"),
    }
}

pub fn real_vocabulary_files_are_valid() {
    let dir = crate::support::shared_data();
    let table: [(&str, usize, u64, &str); 12] = [
        ("baichuan", 18, 64000, "baichuan"),
        ("bert-bge", 20, 30522, "bert"),
        ("deepseek-coder", 25, 32256, "llama"),
        ("deepseek-llm", 23, 102400, "llama"),
        ("falcon", 18, 65024, "falcon"),
        ("gpt-2", 16, 50257, "gpt2"),
        ("gpt-neox", 17, 50432, "gptneox"),
        ("llama-spm", 22, 32000, "llama"),
        ("mpt", 17, 50432, "mpt"),
        ("phi-3", 26, 32064, "phi3"),
        ("refact", 18, 49216, "refact"),
        ("starcoder", 19, 49152, "starcoder2"),
    ];
    for (name, kvs, tokens, arch) in table {
        let path = dir.join(format!("gguf-vocab/ggml-vocab-{name}.gguf"));
        let bytes = std::fs::read(&path).unwrap();
        let h = ok(&bytes);
        assert!(h.diagnostics.is_empty(), "{name}: {:#?}", h.diagnostics);
        assert!(h.llama_cpp_loadable, "{name}");
        assert_eq!(h.metadata_count(), kvs, "{name}");
        assert_eq!(h.architecture(), Some(arch), "{name}");
        assert_eq!(h.token_count(), Some(tokens), "{name}");
        assert_eq!((h.version, h.alignment), (3, 32), "{name}");
        assert!(h.tensors.is_empty());
        assert_eq!(
            h.data_offset,
            bytes.len() as u64,
            "{name}: ends after the metadata"
        );
        let toks = h.get("tokenizer.ggml.tokens").unwrap().as_array().unwrap();
        assert_eq!(
            toks.strings(&bytes).filter(|s| s.is_ok()).count() as u64,
            tokens
        );
    }
}
