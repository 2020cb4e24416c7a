//! Serving an axum router over TLS, with the certificate re-read when its files change.
//!
//! [`serve`] takes a bound listener, so that a caller can bind port 0 and learn the address
//! before serving. With [`ServerTls`], connections are TLS (HTTP/1.1 and HTTP/2 by ALPN) from
//! the PEM certificate chain and private key it names; every [`RELOAD_INTERVAL`] the files'
//! size and modification time are compared with what was loaded, and a change is loaded for
//! the connections that follow. A change that does not load (a key written before its
//! certificate, say) is logged and tried again; the certificate already loaded stays in use.
//! Without it, plain HTTP, as behind a proxy that terminates TLS.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use axum_server::tls_rustls::RustlsConfig;

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
    fn stamp(&self) -> Option<[(u64, SystemTime); 2]> {
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

/// Serves `router` on `listener` until `shutdown` completes, then lets open requests finish.
/// The router sees each client's address as `ConnectInfo<SocketAddr>`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    tls: Option<ServerTls>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let service = router.into_make_service_with_connect_info::<SocketAddr>();
    let Some(tls) = tls else {
        axum::serve(listener, service)
            .with_graceful_shutdown(shutdown)
            .await?;
        return Ok(());
    };
    let mut stamp = tls.stamp();
    let config = RustlsConfig::from_config(tls.config_load()?);
    let handle = axum_server::Handle::new();
    let server =
        axum_server::from_tcp_rustls(listener.into_std()?, config.clone())?.handle(handle.clone());
    let reload = tokio::spawn(async move {
        loop {
            tokio::time::sleep(RELOAD_INTERVAL).await;
            let now = tls.stamp();
            if now.is_none() || now == stamp {
                continue;
            }
            match tls.config_load() {
                Ok(loaded) => {
                    config.reload_from_config(loaded);
                    stamp = now;
                    tracing::info!(certificate = %tls.certificate.display(), "loaded the TLS certificate again: its files changed");
                }
                Err(err) => {
                    tracing::warn!(error = %format!("{err:#}"), "the TLS certificate's files changed but do not load; serving the one loaded before")
                }
            }
        }
    });
    let stopper = handle.clone();
    tokio::spawn(async move {
        shutdown.await;
        stopper.graceful_shutdown(None);
    });
    let served = server.serve(service).await;
    reload.abort();
    Ok(served?)
}
