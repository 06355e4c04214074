//! `weight-inspect`: parse, verify and serve GGUF and safetensors files (see
//! `weight_inspect::cli::weight_inspect`).

fn main() -> std::process::ExitCode {
    weight_inspect::cli::weight_inspect::main(std::env::args_os()).into()
}
