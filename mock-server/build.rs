//! `wi_python`: `WI_PYTHON` names a Python with huggingface_hub (or `CI` is set: `.ci/run`
//! provides it), so the compatibility test runs; without it the test shows as ignored.

fn main() {
    println!("cargo::rerun-if-env-changed=CI");
    println!("cargo::rerun-if-env-changed=WI_PYTHON");
    println!("cargo::rustc-check-cfg=cfg(wi_python)");
    let ci = std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"));
    if ci || std::env::var_os("WI_PYTHON").is_some_and(|s| !s.is_empty()) {
        println!("cargo::rustc-cfg=wi_python");
    }
}
