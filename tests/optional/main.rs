//! The optional tests: those that need what the repository does not hold — another tool to
//! compare with, a server, real files — one module per feature, as in `tests/tests.rs`.
//!
//! Each test runs where its input is found and shows as *ignored*, with what it needs and how to
//! get it, where it is not; with `CI` set (`.ci/run`) a missing input fails it. Whether an input
//! is there is looked at when the tests run, not when they are built (a `cfg` from a build
//! script would make each change of a `WI_*` variable rebuild the crate): this binary has its own
//! harness (`harness = false`, libtest-mimic; see `support/optional.rs`) and the list below says
//! what each test needs. `docs/developing.md` says how to get each input.
// Tests may print notes.
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "../support/mod.rs"]
mod support;

mod cache_manage;
mod gguf;
mod inspect;
mod manifest;
mod manifest_interop;
mod metrics;
mod pull_through;
mod remote_cache;
mod safetensors;
mod serve_changes;
mod shared_blobs;
mod signature;
mod transfer;
mod wi_fetch;
mod xet;

use support::optional::{Input, Test};

/// The tests, each named `module::function` and with what it needs.
macro_rules! tests {
    ($($input:ident: $module:ident::$test:ident,)*) => {
        vec![$(Test {
            name: concat!(stringify!($module), "::", stringify!($test)),
            needs: Input::$input,
            run: $module::$test,
        },)*]
    };
}

fn main() -> std::process::ExitCode {
    support::optional::main(tests![
        Python: cache_manage::a_huggingface_hub_cache_is_listed_removed_and_pruned,
        SharedData: gguf::real_vocabulary_files_are_valid,
        SharedData: inspect::real_vocab_files_are_valid_with_the_documented_counts,
        Python: inspect::gguf_py_files_read_the_same_as_gguf_py_reads_them,
        Python: manifest::manifests_validate_against_the_schema,
        Python: manifest_interop::real_model_signing_bundles_and_gguf_py_lines,
        Python: manifest_interop::the_demo_sidecars_agree_with_an_independent_writer,
        Prometheus: metrics::prometheus_scrapes_serve,
        Python: pull_through::huggingface_hub_behind_a_size_lie_keeps_no_wrong_blob,
        Garage: remote_cache::garage_is_filled_once_and_credentials_stay_secret,
        Garage: remote_cache::a_bucket_that_does_not_exist_is_said_once_with_how_to_create_it,
        Garage: remote_cache::a_node_killed_mid_upload_leaves_nothing_in_garage,
        Garage: remote_cache::garage_ignores_conditional_writes_and_the_probe_says_so,
        Python: remote_cache::moto_honours_conditional_writes_and_one_of_eight_nodes_leads,
        Python: remote_cache::eight_wi_fetch_nodes_started_together_fill_from_the_hub_once,
        Python: remote_cache::a_leader_killed_at_30_percent_is_taken_over,
        Python: remote_cache::hostile_leases_in_the_bucket_hold_no_node_for_long,
        Python: remote_cache::one_node_alone_fills_with_chunks_fetched_in_several_ranges,
        MiniLm: safetensors::real_minilm_checkpoint,
        Python: safetensors::files_written_by_the_reference_writer,
        Python: serve_changes::huggingface_hub_never_takes_a_damaged_blob,
        Python: signature::model_signing_and_this_program_verify_each_others_signatures,
        Python: signature::certificate_chains_are_judged_as_model_signing_judges_them,
        Python: signature::unsigned_content_is_refused_as_model_signing_refuses_it,
        Python: signature::a_repository_signed_by_model_signing_is_fetched_whole,
        SigstoreAssets: signature::real_keyless_signatures_verify_offline,
        SigstoreAssets: signature::wi_fetch_checks_a_keyless_signature,
        SigstoreAssets: signature::sigstore_conformance_cases_of_a_dsse_bundle,
        Tmpfs: transfer::a_full_disk_names_the_file_and_the_local_path,
        Tmpfs: wi_fetch::disk_full_fails_up_front,
        Tmpfs: wi_fetch::disk_fills_up_mid_download_then_resumes,
        Python: wi_fetch::huggingface_hub_reads_our_cache,
        Python: wi_fetch::we_read_a_huggingface_hub_cache,
        Python: wi_fetch::huggingface_hub_keeps_a_renamed_repository_where_we_do,
        Python: xet::huggingface_hub_and_hf_xet_download_through_the_cas,
        Python: xet::hf_xet_downloads_files_of_every_era_byte_exact,
        Python: shared_blobs::hf_first_then_wi_fetch_fetches_nothing,
        Python: shared_blobs::wi_fetch_first_then_hf_fetches_nothing,
        Python: shared_blobs::the_switches_keep_files_out_of_the_store,
        Python: shared_blobs::rm_by_either_tool_keeps_what_a_link_uses,
        Python: shared_blobs::prune_collects_only_what_no_link_uses,
        Python: shared_blobs::both_tools_at_once_keep_one_copy,
    ])
}

/// Runs `f` to the end on a runtime of two worker threads (what `#[tokio::test(flavor =
/// "multi_thread", worker_threads = 2)]` gives the tests of `tests/tests.rs`).
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(f)
}
