//! `wi-fetch`: fetch files from the Hugging Face Hub into its cache (see
//! `weight_inspect::cli::wi_fetch`).

fn main() -> std::process::ExitCode {
    weight_inspect::cli::wi_fetch::main(std::env::args_os()).into()
}
