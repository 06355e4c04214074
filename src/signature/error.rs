//! What can go wrong reading, checking or writing a model signature.

use std::path::{Path, PathBuf};

use crate::manifest::ManifestError;

/// Why a signature was refused, or could not be checked or written.
///
/// [`SignatureError::is_refusal`] tells a verdict on the signature (the tools' exit code 2: it
/// does not hold) from trouble reading what the user gave (exit code 1).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// A key, certificate or signature file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A key or certificate the user gave is not one this program uses.
    #[error("{}: {reason}", path.display())]
    Material {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A key given as text is not one this program uses.
    #[error("not a usable public key: {reason}")]
    Key {
        /// What is wrong with it.
        reason: String,
    },
    /// The bundle is not a signature this program reads (malformed, another media type, no
    /// DSSE envelope…).
    #[error("the signature is not a model signature this program reads: {reason}")]
    Bundle {
        /// What is wrong with it.
        reason: String,
    },
    /// The signature was made by the other method than the one the policy asks for (a bare key
    /// against certificates, or a certificate against a key).
    #[error("{reason}")]
    Method {
        /// Which method made it, and what to verify it with.
        reason: String,
    },
    /// The bundle names a public key other than the one given (`model_signing`'s key hint).
    #[error(
        "key mismatch: the signature was made with the key whose hint is {bundle_hint}, not the \
         given key ({given_hint})"
    )]
    KeyMismatch {
        /// The SHA-256 of the signer's public key, as the bundle records it.
        bundle_hint: String,
        /// The same of the key given.
        given_hint: String,
    },
    /// The signature does not verify with the key (or the certificate's key): the statement
    /// was changed after signing, or another key signed it.
    #[error("the signature does not verify with {with}: the statement was changed after signing, or another key signed it")]
    Invalid {
        /// The key it was checked with ("the given key", "the signing certificate's key").
        with: String,
    },
    /// The signing certificate does not chain to a trusted certificate, or may not sign.
    #[error("the signing certificate is not trusted: {reason}")]
    Untrusted {
        /// Why.
        reason: String,
    },
    /// The signed statement is not a model-signing statement this program reads.
    #[error("the signed statement: {0}")]
    Statement(ManifestError),
    /// The model could not be listed or hashed.
    #[error("{0}")]
    Model(ManifestError),
}

impl SignatureError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> SignatureError {
        SignatureError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn material(path: &Path, reason: impl Into<String>) -> SignatureError {
        SignatureError::Material {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }

    pub(crate) fn bundle(reason: impl Into<String>) -> SignatureError {
        SignatureError::Bundle {
            reason: reason.into(),
        }
    }

    /// Whether this is a verdict on the signature (it was read and does not hold: another
    /// key, an altered statement, an untrusted certificate, a bundle that is not a model
    /// signature), rather than trouble reading what was given.
    pub fn is_refusal(&self) -> bool {
        !matches!(
            self,
            SignatureError::Io { .. }
                | SignatureError::Material { .. }
                | SignatureError::Key { .. }
                | SignatureError::Model(_)
        )
    }
}
