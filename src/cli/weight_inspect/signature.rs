//! `weight-inspect signature verify|sign`: OpenSSF model signatures (`model_signing`'s
//! `model.sig`), natively.

use std::path::{Path, PathBuf};

use crate::fetch::{FetchError, SignaturePolicy};
use crate::manifest::HashAlgorithm;
use crate::names::escape as esc;
use crate::signature::{
    self, CertificateRoots, SignOptions, SignatureError, SigningKey, TrustPolicy, VerifyOptions,
};
use clap::{Args, Subcommand};

use super::manifest::{differences, fail, parse_size, write_out};
use super::{EXIT_INVALID, EXIT_USAGE_OR_IO};

/// What `weight-inspect signature --help` says after the options.
pub(super) const AFTER_HELP: &str = "A signature is a Sigstore bundle as OpenSSF model signing \
(the model_signing tool) writes it: an in-toto statement of the model's files or shards and their \
SHA-256 (or BLAKE2b, or BLAKE3), signed with an elliptic-curve key (P-256, P-384, P-521) alone or with its certificate \
chain; model_signing verifies what `sign` writes, and `verify` what model_signing signs. Options \
are spelt as model_signing's (its underscores accepted too). Sigstore keyless signatures (an OIDC \
identity) are verified offline with --identity, --identity-provider and --trust-config.\n\n\
Exit codes: 0 verified (sign: written); 2 the signature does not hold (another key, an altered \
statement, an untrusted certificate) or the model is not what was signed (a file differs, is \
missing, or is present but not signed); 1 usage or I/O error.";

/// `weight-inspect signature`'s arguments.
#[derive(Debug, Args)]
pub(super) struct SignatureArgs {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Verify a model (its folder, or its one file) against its signature: the signature first
    /// (with the signer's public key, or the certificates its certificate must chain to), then
    /// every file it names re-hashed; a file present that it does not name is refused.
    Verify {
        /// The model's folder, or its one file.
        model: PathBuf,
        /// The signature (default: model.sig in the model's folder, or beside its one file).
        #[arg(long, value_name = "PATH")]
        signature: Option<PathBuf>,
        /// Whom the signature must come from.
        #[command(flatten)]
        signer: crate::cli::signer::SignerArgs,
        /// With the certificate method and no --certificate-chain: trust Mozilla's root
        /// certificates (what model_signing trusts by default).
        #[arg(long, conflicts_with_all = ["public_key", "certificate_chain", "identity"])]
        mozilla_roots: bool,
        /// Paths to leave out of the model, relative to its folder (besides those the signer
        /// left out, the signature itself, and git's files: .git, .gitattributes, .github,
        /// .gitignore); repeated for several.
        #[arg(long, alias = "ignore_paths", value_name = "PATH")]
        ignore_paths: Vec<PathBuf>,
        /// Accept files the signature does not name (they are listed, not refused).
        #[arg(long, alias = "ignore_unsigned_files")]
        ignore_unsigned_files: bool,
        /// Print the verdict as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Sign a model (its folder, or one file): a statement of every file's digest (or of its
    /// shards'), signed with an elliptic-curve private key, written as model_signing writes it.
    Sign {
        /// The model's folder, or its one file.
        model: PathBuf,
        /// Where to write the signature (default: model.sig in the model's folder, or beside
        /// its one file); left out of what is signed when inside the folder.
        #[arg(long, value_name = "PATH")]
        signature: Option<PathBuf>,
        /// The private key (PEM: PKCS#8 or SEC1, unencrypted; P-256, P-384 or P-521).
        #[arg(long, alias = "private_key", value_name = "PEM")]
        private_key: PathBuf,
        /// The certificate of the private key's public half (PEM): the bundle carries it and
        /// --certificate-chain instead of the key's hint (the `certificate` method).
        #[arg(long, alias = "signing_certificate", value_name = "PEM")]
        signing_certificate: Option<PathBuf>,
        /// The rest of the signing certificate's chain (PEM; repeated for several files), with
        /// --signing-certificate.
        #[arg(
            long,
            alias = "certificate_chain",
            value_name = "PEM",
            requires = "signing_certificate"
        )]
        certificate_chain: Vec<PathBuf>,
        /// Cut files into shards of this many bytes (model_signing's shards serialization; at
        /// least 64K); whole files by default.
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        shard_size: Option<u64>,
        /// The digests' algorithm: sha256 (what wi-fetch checks as each shard arrives), blake2b
        /// or blake3 (by file only, as model_signing writes it; checked on the whole file).
        #[arg(
            long,
            alias = "hash_algorithm",
            value_name = "ALGORITHM",
            default_value = "sha256"
        )]
        hash_algorithm: HashAlgorithm,
        /// Paths to leave out, relative to the model's folder (repeated for several).
        #[arg(long, alias = "ignore_paths", value_name = "PATH")]
        ignore_paths: Vec<PathBuf>,
    },
}

/// Runs `weight-inspect signature verify|sign`.
pub(super) fn run(args: SignatureArgs) -> u8 {
    match args.cmd {
        Cmd::Verify {
            model,
            signature,
            signer,
            mozilla_roots,
            ignore_paths,
            ignore_unsigned_files,
            json,
        } => {
            if !mozilla_roots && signer.trust().is_empty() {
                return fail(
                    "whom the signature must come from is not said: give --public-key PEM, \
                     --certificate-chain PEM (or --mozilla-roots), or --identity ID with \
                     --identity-provider URL and --trust-config JSON",
                );
            }
            let policy = if mozilla_roots {
                Ok(Some(SignaturePolicy::new(
                    TrustPolicy::Certificates(CertificateRoots::mozilla()),
                    true,
                )))
            } else {
                SignaturePolicy::from_trust(&signer.trust(), true)
            };
            let policy = match policy {
                Ok(Some(p)) => p.trust,
                Ok(None) => return fail("say whom the signature must come from"),
                Err(FetchError::Signature(e)) => return error(&e),
                Err(e) => return fail(e),
            };
            let opts = VerifyOptions {
                ignore_paths,
                ignore_unsigned_files,
            };
            let sig = signature.unwrap_or_else(|| default_signature(&model));
            verify(&model, &sig, &policy, &opts, json)
        }
        Cmd::Sign {
            model,
            signature,
            private_key,
            signing_certificate,
            certificate_chain,
            shard_size,
            hash_algorithm,
            ignore_paths,
        } => {
            let key = match SigningKey::read(&private_key) {
                Ok(k) => k,
                Err(e) => return error(&e),
            };
            let opts = SignOptions {
                shard_size,
                algorithm: hash_algorithm,
                ignore_paths,
                certificate_chain: signing_certificate.map(|c| (c, certificate_chain)),
            };
            let sig = signature.unwrap_or_else(|| default_signature(&model));
            match signature::sign_model(&model, &sig, &key, &opts) {
                Ok(signer) => {
                    eprintln!(
                        "weight-inspect: wrote {} (signed by {signer})",
                        esc(&sig.display().to_string())
                    );
                    0
                }
                Err(e) => error(&e),
            }
        }
    }
}

/// `model.sig` in the model's folder, or beside its one file.
fn default_signature(model: &Path) -> PathBuf {
    if model.is_dir() {
        model.join("model.sig")
    } else {
        model.parent().unwrap_or(Path::new(".")).join("model.sig")
    }
}

/// One line for an error: a refusal of the signature exits 2, trouble reading what was given 1.
fn error(e: &SignatureError) -> u8 {
    if e.is_refusal() {
        eprintln!("weight-inspect: signature refused: {}", esc(&e.to_string()));
        EXIT_INVALID
    } else {
        eprintln!("weight-inspect: error: {}", esc(&e.to_string()));
        EXIT_USAGE_OR_IO
    }
}

fn verify(model: &Path, sig: &Path, policy: &TrustPolicy, opts: &VerifyOptions, json: bool) -> u8 {
    let v = match signature::verify_model(model, sig, policy, opts) {
        Ok(v) => v,
        Err(e) => return error(&e),
    };
    let ok = v.verified();
    let text = if json {
        let mut value = serde_json::to_value(&v).unwrap_or_default();
        value["verified"] = ok.into();
        let mut t = serde_json::to_string_pretty(&value).unwrap_or_default();
        t.push('\n');
        t
    } else {
        let mut t = differences(&v.report, &v.expected, "shard");
        let refused_unsigned = !v.unsigned_accepted;
        for u in &v.unsigned {
            t.push_str(&format!(
                "{}: present but not signed{}\n",
                esc(u),
                if refused_unsigned { "" } else { " (accepted)" }
            ));
        }
        for l in &v.left_out {
            let folder = if l.folder {
                format!(", a folder of {} file(s)", l.files)
            } else {
                String::new()
            };
            t.push_str(&format!(
                "{}: not checked{folder} ({})\n",
                esc(&l.path),
                l.reason.describe()
            ));
        }
        let n = v.report.files.len();
        let model_shown = esc(&model.display().to_string()).into_owned();
        if ok {
            t.push_str(&format!(
                "verified: {model_shown} ({n} file(s)) is what {} signed\n",
                v.signer
            ));
        } else {
            let differ = v
                .report
                .files
                .iter()
                .filter(|f| f.verdict != crate::manifest::FileVerdict::Match)
                .count();
            let mut why = Vec::new();
            if differ > 0 {
                why.push(format!(
                    "{differ} of {n} signed file(s) differ or are missing"
                ));
            }
            if refused_unsigned && !v.unsigned.is_empty() {
                why.push(format!(
                    "{} file(s) present but not signed (--ignore-unsigned-files accepts them)",
                    v.unsigned.len()
                ));
            }
            t.push_str(&format!(
                "NOT verified: {model_shown} is not what {} signed: {}\n",
                v.signer,
                why.join("; ")
            ));
        }
        for note in &v.notes {
            t.push_str(&format!("note: {}\n", esc(note)));
        }
        t
    };
    if let Err(code) = write_out(&text) {
        return code;
    }
    if ok {
        0
    } else {
        EXIT_INVALID
    }
}
