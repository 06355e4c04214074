//! Whom a model's signature must come from, as both tools take it (`wi-fetch`, `weight-inspect
//! serve` and `weight-inspect signature verify`): a public key, certificates, or a keyless
//! identity; spelt as `model_signing` spells them, its underscore spellings accepted too.

use std::path::PathBuf;

use crate::fetch::SignatureTrust;

/// The signer's options.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct SignerArgs {
    /// The signer's public key (PEM): the `key` method (also WI_SIGNATURE_KEY).
    #[arg(
        long,
        alias = "public_key",
        value_name = "PEM",
        env = "WI_SIGNATURE_KEY"
    )]
    pub(crate) public_key: Option<PathBuf>,
    /// Certificates (PEM) the signing certificate must chain to, each one trusted (repeated for
    /// several files): the `certificate` method.
    #[arg(long, alias = "certificate_chain", value_name = "PEM")]
    pub(crate) certificate_chain: Vec<PathBuf>,
    /// Keyless, through Sigstore: the identity that must have signed, an email or a URI (a CI
    /// workflow's), compared exactly: the `sigstore` method.
    #[arg(long, value_name = "ID")]
    pub(crate) identity: Option<String>,
    /// Keyless: the OIDC issuer that must have vouched for the identity
    /// (<https://accounts.google.com>, <https://token.actions.githubusercontent.com>…).
    #[arg(long, alias = "identity_provider", value_name = "URL")]
    pub(crate) identity_provider: Option<String>,
    /// Keyless: the Sigstore instance's trusted root (trusted_root.json; the public-good
    /// instance's ships in the sigstore Python package), checked offline.
    #[arg(long, alias = "trust_config", value_name = "JSON")]
    pub(crate) trust_config: Option<PathBuf>,
}

impl SignerArgs {
    /// The same, as the library takes it.
    pub(crate) fn trust(&self) -> SignatureTrust {
        SignatureTrust {
            public_key: self.public_key.clone(),
            certificate_chain: self.certificate_chain.clone(),
            identity: self.identity.clone(),
            identity_provider: self.identity_provider.clone(),
            trust_config: self.trust_config.clone(),
        }
    }
}
