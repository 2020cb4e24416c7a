//! TLS of every Bulkhead process, on one crypto provider (ring).
//!
//! Clients ([`client_config_trusting`], and with the `http-client` feature
//! [`http_client_builder_trusting`]) verify the server's certificate against the platform's
//! roots, or against a PEM file's certificates only (`--ca-file`, as `curl --cacert` does: a
//! private CA's, or the server's own self-signed certificate), or by its pinned public key
//! (`--pin-sha256`, [`PublicKeyPin`]): see [`ServerTrust`]. There is no way to turn
//! verification off. A refused certificate is told in plain words, with what to do
//! ([`failure_explained`]). Plain HTTP goes to loopback addresses only ([`cleartext_refuse`]): a
//! token or a password never crosses a network in clear.
//!
//! Servers (feature `tls-server`, [`server`]) serve an axum router over TLS from PEM files, and
//! re-read them when they change, so that a renewed certificate needs no restart.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

mod pin;
#[cfg(feature = "tls-server")]
pub mod server;
mod verifier;

pub use pin::{PublicKeyPin, PublicKeyPinInvalid};
use verifier::ServerVerifier;
pub use verifier::{CertificateRefused, Refusal, ServerTrust, failure_explained};

/// The crypto provider of every TLS connection Bulkhead makes or accepts.
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Makes ring the process's default provider, for TLS configurations built without one (a
/// `reqwest::Client::new()` of a library). Each binary calls it first; calling it again does
/// nothing.
pub fn crypto_provider_install() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The configuration of a client that verifies servers against the platform's roots, or, with
/// `ca_file`, against the certificates of that PEM file only: [`client_config_trusting`].
pub fn client_config(ca_file: Option<&Path>) -> anyhow::Result<rustls::ClientConfig> {
    client_config_trusting(&ServerTrust::of(ca_file.map(Path::to_path_buf), None))
}

/// The configuration of a client that verifies servers as `trust` says. A CA file is read
/// now: one that is missing or holds no certificate is refused here.
pub fn client_config_trusting(trust: &ServerTrust) -> anyhow::Result<rustls::ClientConfig> {
    let provider = crypto_provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let verifier = match trust {
        ServerTrust::PlatformRoots => {
            ServerVerifier::PlatformRoots(match rustls_platform_verifier::Verifier::new(provider) {
                Ok(verifier) => Arc::new(verifier),
                // A machine with no CA certificates can still reach loopback in plain HTTP;
                // any TLS server is refused, with the reason.
                Err(err) => Arc::new(NoRoots(err.to_string())),
            })
        }
        ServerTrust::CaFile(path) => {
            let certificates = certificates_read(path)?;
            let mut roots = rustls::RootCertStore::empty();
            for certificate in &certificates {
                roots.add(certificate.clone()).with_context(|| {
                    format!(
                        "the CA file {} holds an unusable certificate",
                        path.display()
                    )
                })?;
            }
            ServerVerifier::CaFile {
                path: PathBuf::from(path),
                certificates,
                chains: rustls::client::WebPkiServerVerifier::builder_with_provider(
                    roots.into(),
                    provider.clone(),
                )
                .build()?,
                provider,
            }
        }
        ServerTrust::PublicKeyPin(pin) => ServerVerifier::PublicKeyPin {
            pin: *pin,
            provider,
        },
    };
    let mut config = builder
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A reqwest client builder whose TLS is [`client_config`]`(ca_file)`.
#[cfg(feature = "http-client")]
pub fn http_client_builder(ca_file: Option<&Path>) -> anyhow::Result<reqwest::ClientBuilder> {
    Ok(reqwest::Client::builder().tls_backend_preconfigured(client_config(ca_file)?))
}

/// A reqwest client builder whose TLS is [`client_config_trusting`]`(trust)`.
#[cfg(feature = "http-client")]
pub fn http_client_builder_trusting(trust: &ServerTrust) -> anyhow::Result<reqwest::ClientBuilder> {
    Ok(reqwest::Client::builder().tls_backend_preconfigured(client_config_trusting(trust)?))
}

/// The certificates of a PEM file (a chain, or a CA bundle).
pub fn certificates_read(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certificates = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("reading the certificates of {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{} is not a PEM file of certificates", path.display()))?;
    anyhow::ensure!(
        !certificates.is_empty(),
        "{} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        path.display()
    );
    Ok(certificates)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn private_key_read(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|err| anyhow::anyhow!("{} holds no usable PEM private key: {err}", path.display()))
}

/// Refuses a plain `http://` URL to a host that is not loopback: whatever is sent there (a
/// password, a token) would cross the network in clear. `what` names the URL in the error
/// (`--server`).
pub fn cleartext_refuse(what: &str, url: &str) -> anyhow::Result<()> {
    let parsed = url::Url::parse(url).with_context(|| format!("{what} {url} is not a URL"))?;
    match parsed.scheme() {
        "https" => Ok(()),
        "http" if parsed.host().is_some_and(host_is_loopback) => Ok(()),
        "http" => anyhow::bail!(
            "{what} {url} is plain HTTP to a host that is not loopback: tokens and passwords \
             would cross the network in clear. Use https:// (with --ca-file for a private CA)"
        ),
        scheme => anyhow::bail!(
            "{what} {url}: the scheme must be https (or http to loopback), not {scheme}"
        ),
    }
}

/// Whether `host` is this machine: `localhost`, 127.0.0.0/8 or ::1.
pub fn host_is_loopback(host: url::Host<&str>) -> bool {
    match host {
        url::Host::Domain(name) => {
            let name = name.trim_end_matches('.');
            name.eq_ignore_ascii_case("localhost")
                || name.to_ascii_lowercase().ends_with(".localhost")
        }
        url::Host::Ipv4(ip) => ip.is_loopback(),
        url::Host::Ipv6(ip) => ip.is_loopback(),
    }
}

/// The verifier of a machine that has no CA certificates: it refuses every server, saying so.
#[derive(Debug)]
struct NoRoots(String);

impl ServerCertVerifier for NoRoots {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Err(rustls::Error::General(format!(
            "this machine has no CA certificates to verify the server with ({}): install them \
             (Debian: apt-get install ca-certificates) or give --ca-file",
            self.0
        )))
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("no CA certificates".into()))
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("no CA certificates".into()))
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        crypto_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_goes_to_loopback_only() {
        for ok in [
            "https://cp.example.com",
            "http://127.0.0.1:8080",
            "http://127.5.0.1",
            "http://localhost:8080/",
            "http://[::1]:8080",
            "https://10.0.0.1",
        ] {
            cleartext_refuse("--server", ok).unwrap();
        }
        for bad in [
            "http://cp.example.com",
            "http://10.0.0.1:8080",
            "http://[2001:db8::1]",
            "http://localhost.example.com",
        ] {
            let err = cleartext_refuse("--server", bad).unwrap_err().to_string();
            assert!(err.contains("not loopback"), "{bad}: {err}");
        }
        assert!(cleartext_refuse("--server", "ftp://127.0.0.1").is_err());
        assert!(cleartext_refuse("--server", "not a url").is_err());
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused_clearly() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("ca.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let err = client_config(Some(&empty)).unwrap_err().to_string();
        assert!(err.contains("holds no PEM certificate"), "{err}");
        let err = client_config(Some(&dir.path().join("missing.pem")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing.pem"), "{err}");
        let ca = rcgen::generate_simple_self_signed(vec!["bulkhead.test".into()]).unwrap();
        std::fs::write(&empty, ca.cert.pem()).unwrap();
        client_config(Some(&empty)).unwrap();
    }
}
