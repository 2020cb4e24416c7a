//! A server's certificate, re-read when its files change.
//!
//! [`ServerTls`] names the PEM certificate chain and private key; [`crate::serve::serve`]
//! compares the files' size and modification time with what was loaded every
//! [`RELOAD_INTERVAL`], and loads a change for the connections that follow. A change that does
//! not load (a key written before its certificate, say) is logged and tried again; the
//! certificate already loaded stays in use.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;

/// How often the certificate's files are checked for a change.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(1);

/// Where a server's certificate chain and private key are (PEM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTls {
    pub certificate: PathBuf,
    pub key: PathBuf,
}

impl ServerTls {
    /// Both files, or neither (`--tls-cert` and `--tls-key` go together).
    pub fn from_flags(
        certificate: Option<PathBuf>,
        key: Option<PathBuf>,
    ) -> anyhow::Result<Option<Self>> {
        match (certificate, key) {
            (Some(certificate), Some(key)) => Ok(Some(Self { certificate, key })),
            (None, None) => Ok(None),
            _ => anyhow::bail!("--tls-cert and --tls-key go together: give both, or neither"),
        }
    }

    /// A server configuration from the files as they are now.
    pub fn config_load(&self) -> anyhow::Result<Arc<rustls::ServerConfig>> {
        let chain = super::certificates_read(&self.certificate)?;
        key_privacy_warn(&self.key);
        let key = super::private_key_read(&self.key)?;
        let mut config = rustls::ServerConfig::builder_with_provider(super::crypto_provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .with_context(|| {
                format!(
                    "the key {} does not go with the certificate {}",
                    self.key.display(),
                    self.certificate.display()
                )
            })?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// What tells a change of the files: each one's size and modification time.
    pub(crate) fn stamp(&self) -> Option<[(u64, SystemTime); 2]> {
        let stamp = |path: &Path| {
            let metadata = std::fs::metadata(path).ok()?;
            Some((metadata.len(), metadata.modified().ok()?))
        };
        Some([stamp(&self.certificate)?, stamp(&self.key)?])
    }
}

/// Warns when others may read the private key (a server often runs where a secret store
/// mounts it group-readable, so it is not refused).
fn key_privacy_warn(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(metadata) = std::fs::metadata(path)
        && metadata.permissions().mode() & 0o004 != 0
    {
        tracing::warn!(key = %path.display(), "the TLS private key may be read by every user of this machine: chmod o-r it");
    }
}
