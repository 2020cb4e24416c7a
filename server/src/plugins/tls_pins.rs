//! Pinned certificates of a provider's servers: the `tls_certificate_sha256` setting of a
//! provider (the SHA-256 of each certificate it may accept, hex, comma-separated; colons
//! allowed, as `openssl x509 -noout -fingerprint -sha256` prints them).
//!
//! With pins, every TLS connection of that provider's plugin must present one of the pinned
//! certificates (and prove it holds its key), whatever its name or issuer: that is how the
//! `metal` provider reaches host agents that serve self-signed certificates. Without, servers
//! are verified against the web's roots. Pins are the host's business: the plugin never sees
//! a certificate, and cannot loosen what the host checks.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use sha2::{Digest, Sha256};

/// The setting that holds the pins.
pub const TLS_PINS_KEY: &str = "tls_certificate_sha256";

/// The pins of a setting's value.
pub fn pins_parse(value: &str) -> Result<Vec<[u8; 32]>, String> {
    let pins = value
        .split(',')
        .map(str::trim)
        .filter(|pin| !pin.is_empty())
        .map(|pin| {
            let digits: String = pin.chars().filter(|c| *c != ':').collect();
            hex::decode(&digits)
                .ok()
                .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
                .ok_or_else(|| {
                    format!("`{TLS_PINS_KEY}`: `{pin}` is not a SHA-256 in hex (64 digits)")
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if pins.is_empty() {
        return Err(format!("`{TLS_PINS_KEY}` names no certificate"));
    }
    Ok(pins)
}

/// The TLS settings of a provider's outbound requests: its pins if its configuration has them,
/// else the web's roots.
pub fn client_config(config: &BTreeMap<String, String>) -> Arc<rustls::ClientConfig> {
    let Some(value) = config.get(TLS_PINS_KEY) else {
        return web_roots_config();
    };
    // Checked when the setting was written; a value that does not parse accepts nothing.
    let pins = pins_parse(value).unwrap_or_default();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default TLS versions")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinnedVerifier { pins, provider }))
            .with_no_client_auth(),
    )
}

/// The web's root certificates, no client auth.
fn web_roots_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.into(),
            };
            Arc::new(
                rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .expect("ring supports the default TLS versions")
                .with_root_certificates(roots)
                .with_no_client_auth(),
            )
        })
        .clone()
}

/// Accepts a server whose certificate is pinned; its handshake signatures are verified with
/// that certificate's key, so a copy of the certificate alone does not pass.
#[derive(Debug)]
struct PinnedVerifier {
    pins: Vec<[u8; 32]>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinnedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let digest: [u8; 32] = Sha256::digest(end_entity.as_ref()).into();
        if self.pins.contains(&digest) {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "the server's certificate (SHA-256 {}) is not one of the provider's `{TLS_PINS_KEY}`",
                hex::encode(digest)
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_sha256_in_hex_with_or_without_colons() {
        let hex64 = "ab".repeat(32);
        let colons = vec!["CD"; 32].join(":");
        let pins = pins_parse(&format!("{hex64}, {colons}")).unwrap();
        assert_eq!(pins, [[0xab; 32], [0xcd; 32]]);
        for bad in ["", " , ", "abcd", &"zz".repeat(32), &"ab".repeat(33)] {
            assert!(pins_parse(bad).is_err(), "{bad}");
        }
    }
}
