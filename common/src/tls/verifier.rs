//! How a client verifies a server's certificate ([`ServerTrust`]), and what it says when it
//! refuses one ([`CertificateRefused`], found in an error's causes by [`failure_explained`]).
//!
//! - **The platform's roots** (the default): the platform's verifier.
//! - **A CA file** (`--ca-file`, as `curl --cacert`): the file's certificates are the roots of
//!   webpki's verification. A server whose certificate is, byte for byte, one of the file's is
//!   accepted as itself, even self-signed and marked CA:TRUE (as `openssl req -x509` makes it,
//!   which webpki refuses as a server's), once it is checked to be valid for the server's name
//!   and at this time.
//! - **A pinned key** (`--pin-sha256`, [`PublicKeyPin`]): a server whose key is the pinned one
//!   is accepted whatever signed its certificate, once the same name and time checks pass; no
//!   CA is consulted.
//!
//! In every case the handshake's signatures are verified with the certificate's key, so a copy
//! of a certificate without its key does not pass. A refusal names the server, says what was
//! wrong and what to do, with the pin of the key the server presented, ready to copy.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, OtherError, SignatureScheme};
use x509_parser::time::ASN1Time;

use super::PublicKeyPin;

/// What a client trusts a server's certificate by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ServerTrust {
    /// The platform's root certificates.
    #[default]
    PlatformRoots,
    /// The certificates of a PEM file: a private CA's, or the server's own (self-signed).
    CaFile(PathBuf),
    /// The server's public key, whatever signed its certificate.
    PublicKeyPin(PublicKeyPin),
}

impl ServerTrust {
    /// A pin when there is one (it decides alone), else the CA file, else the platform's roots.
    pub fn of(ca_file: Option<PathBuf>, pin_sha256: Option<PublicKeyPin>) -> Self {
        match (pin_sha256, ca_file) {
            (Some(pin), _) => Self::PublicKeyPin(pin),
            (None, Some(path)) => Self::CaFile(path),
            (None, None) => Self::PlatformRoots,
        }
    }

    /// The CA file, if that is what is trusted.
    pub fn ca_file(&self) -> Option<&Path> {
        match self {
            Self::CaFile(path) => Some(path),
            _ => None,
        }
    }

    /// The pinned key, if that is what is trusted.
    pub fn pin_sha256(&self) -> Option<PublicKeyPin> {
        match self {
            Self::PublicKeyPin(pin) => Some(*pin),
            _ => None,
        }
    }
}

/// The verifier of a client's configuration: [`ServerTrust`] put to work.
#[derive(Debug)]
pub(super) enum ServerVerifier {
    /// The platform's verifier, or one that refuses every server when the platform has no
    /// roots.
    PlatformRoots(Arc<dyn ServerCertVerifier>),
    CaFile {
        path: PathBuf,
        /// The file's certificates, each accepted as the server's own.
        certificates: Vec<CertificateDer<'static>>,
        /// webpki's verification of a chain to one of them.
        chains: Arc<WebPkiServerVerifier>,
        provider: Arc<CryptoProvider>,
    },
    PublicKeyPin {
        pin: PublicKeyPin,
        provider: Arc<CryptoProvider>,
    },
}

impl ServerVerifier {
    /// What this verifier trusts, for the messages.
    fn trust(&self) -> ServerTrust {
        match self {
            Self::PlatformRoots(_) => ServerTrust::PlatformRoots,
            Self::CaFile { path, .. } => ServerTrust::CaFile(path.clone()),
            Self::PublicKeyPin { pin, .. } => ServerTrust::PublicKeyPin(*pin),
        }
    }
}

impl ServerCertVerifier for ServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let chain_verified = |verifier: &dyn ServerCertVerifier| {
            match verifier.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            ) {
                Ok(_) => Ok(None),
                Err(rustls::Error::InvalidCertificate(reason)) => {
                    Ok(Some(Refusal::Certificate(reason)))
                }
                // Not about the certificate (no roots on this machine): said as it is.
                Err(other) => Err(other),
            }
        };
        let refusal = match self {
            Self::PlatformRoots(platform) => chain_verified(platform.as_ref())?,
            Self::CaFile { certificates, .. } if certificates.contains(end_entity) => {
                certificate_itself_check(end_entity, server_name, now)
                    .err()
                    .map(Refusal::Certificate)
            }
            Self::CaFile { chains, .. } => chain_verified(chains.as_ref())?,
            Self::PublicKeyPin { pin, .. } => match PublicKeyPin::of_certificate(end_entity) {
                Ok(presented) if presented == *pin => {
                    certificate_itself_check(end_entity, server_name, now)
                        .err()
                        .map(Refusal::Certificate)
                }
                Ok(_) => Some(Refusal::KeyNotPinned),
                Err(_) => Some(Refusal::Certificate(CertificateError::BadEncoding)),
            },
        };
        match refusal {
            None => Ok(ServerCertVerified::assertion()),
            Some(refusal) => Err(CertificateRefused {
                server_name: server_name.to_str().into_owned(),
                trust: self.trust(),
                refusal,
                presented_pin: PublicKeyPin::of_certificate(end_entity).ok(),
                presented_names: names_of(end_entity),
            }
            .into()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        match self {
            Self::PlatformRoots(platform) => platform.verify_tls12_signature(message, cert, dss),
            Self::CaFile { provider, .. } | Self::PublicKeyPin { provider, .. } => {
                verify_tls12_signature(
                    message,
                    cert,
                    dss,
                    &provider.signature_verification_algorithms,
                )
            }
        }
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        match self {
            Self::PlatformRoots(platform) => platform.verify_tls13_signature(message, cert, dss),
            Self::CaFile { provider, .. } | Self::PublicKeyPin { provider, .. } => {
                verify_tls13_signature(
                    message,
                    cert,
                    dss,
                    &provider.signature_verification_algorithms,
                )
            }
        }
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        match self {
            Self::PlatformRoots(platform) => platform.supported_verify_schemes(),
            Self::CaFile { provider, .. } | Self::PublicKeyPin { provider, .. } => provider
                .signature_verification_algorithms
                .supported_schemes(),
        }
    }
}

/// The checks of a certificate trusted as itself (given in the CA file, or of the pinned key),
/// without a chain: valid for `server_name` (webpki's check) and at `now` (its validity
/// period, read by x509-parser).
fn certificate_itself_check(
    certificate: &CertificateDer<'_>,
    server_name: &ServerName<'_>,
    now: UnixTime,
) -> Result<(), CertificateError> {
    let parsed =
        webpki::EndEntityCert::try_from(certificate).map_err(|_| CertificateError::BadEncoding)?;
    parsed
        .verify_is_valid_for_subject_name(server_name)
        .map_err(|err| match err {
            webpki::Error::CertNotValidForName(context) => {
                CertificateError::NotValidForNameContext {
                    expected: context.expected,
                    presented: context.presented,
                }
            }
            other => CertificateError::Other(OtherError(Arc::new(other))),
        })?;
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate)
        .map_err(|_| CertificateError::BadEncoding)?;
    let validity = parsed.validity();
    let now_seconds = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    let unix_time = |time: &ASN1Time| {
        UnixTime::since_unix_epoch(Duration::from_secs(
            u64::try_from(time.timestamp()).unwrap_or(0),
        ))
    };
    if now_seconds < validity.not_before.timestamp() {
        return Err(CertificateError::NotValidYetContext {
            time: now,
            not_before: unix_time(&validity.not_before),
        });
    }
    if now_seconds > validity.not_after.timestamp() {
        return Err(CertificateError::ExpiredContext {
            time: now,
            not_after: unix_time(&validity.not_after),
        });
    }
    Ok(())
}

/// The DNS names and IP addresses of a certificate's subjectAltName (none when it does not
/// parse).
fn names_of(certificate: &CertificateDer<'_>) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(certificate) else {
        return Vec::new();
    };
    let Ok(Some(names)) = parsed.subject_alternative_name() else {
        return Vec::new();
    };
    names
        .value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::DNSName(name) => Some(name.to_string()),
            GeneralName::IPAddress(address) => <[u8; 4]>::try_from(*address)
                .map(std::net::IpAddr::from)
                .or_else(|_| <[u8; 16]>::try_from(*address).map(std::net::IpAddr::from))
                .ok()
                .map(|address| address.to_string()),
            _ => None,
        })
        .collect()
}

/// Why a server's certificate was refused.
#[derive(Debug)]
pub enum Refusal {
    /// What webpki found wrong with it, or the checks of a certificate trusted as itself.
    Certificate(CertificateError),
    /// Its key is not the pinned one.
    KeyNotPinned,
}

/// A server's certificate refused, with what a person needs to act on it. It travels in
/// `rustls::Error::InvalidCertificate(CertificateError::Other(..))`; its text is the message
/// to show.
#[derive(Debug)]
pub struct CertificateRefused {
    /// The name the server was reached by (the URL's host).
    pub server_name: String,
    /// What it was verified against.
    pub trust: ServerTrust,
    pub refusal: Refusal,
    /// The pin of the key the server presented (`None` when its certificate does not parse).
    pub presented_pin: Option<PublicKeyPin>,
    /// The names its certificate is for (subjectAltName: DNS names and IP addresses).
    pub presented_names: Vec<String>,
}

impl From<CertificateRefused> for rustls::Error {
    fn from(refused: CertificateRefused) -> Self {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(refused))))
    }
}

impl std::error::Error for CertificateRefused {}

impl fmt::Display for CertificateRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = &self.server_name;
        let presented_pin = match self.presented_pin {
            Some(pin) => pin.to_string(),
            None => "<its sha256>".to_owned(),
        };
        let or_pin = format!("or pin its key with --pin-sha256 {presented_pin}");
        let reason = match &self.refusal {
            Refusal::KeyNotPinned => {
                let pinned = match &self.trust {
                    ServerTrust::PublicKeyPin(pin) => pin.to_string(),
                    _ => "the pinned one".to_owned(),
                };
                return write!(
                    f,
                    "the server's key for {name} is not the pinned one: its pin is \
                     {presented_pin}, not {pinned}. If its key was changed on purpose (ask its \
                     operator), give --pin-sha256 {presented_pin}"
                );
            }
            Refusal::Certificate(reason) => reason,
        };
        let issuers = match &self.trust {
            ServerTrust::CaFile(path) => format!("a CA in {}", path.display()),
            _ => "a CA this machine trusts".to_owned(),
        };
        match reason {
            CertificateError::UnknownIssuer => write!(
                f,
                "the server's certificate for {name} is not signed by {issuers}: give the CA \
                 that signed it with --ca-file, {or_pin}"
            ),
            CertificateError::Other(OtherError(cause))
                if cause.downcast_ref::<webpki::Error>()
                    == Some(&webpki::Error::CaUsedAsEndEntity) =>
            {
                let not_given = match &self.trust {
                    ServerTrust::CaFile(path) => format!("and is not itself in {}", path.display()),
                    _ => format!("and is not signed by {issuers}"),
                };
                write!(
                    f,
                    "the server's certificate for {name} is a CA certificate (CA:TRUE, as \
                     `openssl req -x509` makes it) {not_given}: to trust it as it is, give that \
                     very certificate with --ca-file, {or_pin}"
                )
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                let names = match self.presented_names.as_slice() {
                    [] => "no name (it has no subjectAltName)".to_owned(),
                    names => names.join(", "),
                };
                write!(
                    f,
                    "the server's certificate is not valid for {name}, only for {names}: use a \
                     server URL with one of those names, or give the server a certificate for \
                     {name}"
                )
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                let since = match reason {
                    CertificateError::ExpiredContext { not_after, .. } => {
                        format!(" on {}", time_text(*not_after))
                    }
                    _ => String::new(),
                };
                write!(
                    f,
                    "the server's certificate for {name} expired{since}: renew it on the \
                     server (or, if it did not expire, set this machine's clock right)"
                )
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                let until = match reason {
                    CertificateError::NotValidYetContext { not_before, .. } => {
                        format!(" until {}", time_text(*not_before))
                    }
                    _ => " yet".to_owned(),
                };
                write!(
                    f,
                    "the server's certificate for {name} is not valid{until}: set this \
                     machine's clock right, or give the server a certificate valid now"
                )
            }
            other => write!(
                f,
                "the server's certificate for {name} is refused ({other}): give the server a \
                 valid certificate, {or_pin} if you trust it"
            ),
        }
    }
}

/// A time of a certificate as openssl shows it (`Jan  2 03:04:05 2026 +00:00`).
fn time_text(time: UnixTime) -> String {
    i64::try_from(time.as_secs())
        .ok()
        .and_then(|seconds| ASN1Time::from_timestamp(seconds).ok())
        .map_or_else(
            || format!("{} (Unix time)", time.as_secs()),
            |time| time.to_string(),
        )
}

/// What a TLS failure among `error` and its causes means, in plain words and with what to do;
/// `None` when none of them is a TLS error. A refused certificate says it with
/// [`CertificateRefused`]'s text.
pub fn failure_explained(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if let Some(refused) = error.downcast_ref::<CertificateRefused>() {
            return Some(refused.to_string());
        }
        if let Some(tls) = error.downcast_ref::<rustls::Error>() {
            return Some(tls_error_explained(tls));
        }
        // An I/O error's `source()` skips the error it wraps (the rustls one, or another I/O
        // error wrapping it): go into it.
        cause = match error
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            Some(wrapped) => Some(wrapped),
            None => error.source(),
        };
    }
    None
}

fn tls_error_explained(error: &rustls::Error) -> String {
    match error {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(cause)))
            if cause.is::<CertificateRefused>() =>
        {
            cause.to_string()
        }
        rustls::Error::InvalidCertificate(reason) => {
            format!("the server's certificate is refused: {reason}")
        }
        // The verifier's own words (no CA certificates on this machine).
        rustls::Error::General(text) => text.clone(),
        rustls::Error::InvalidMessage(_) => "the server does not speak TLS there (a plain HTTP \
                                              server?): check the URL's scheme and port"
            .to_owned(),
        rustls::Error::AlertReceived(alert) => format!(
            "the server ended the TLS handshake ({alert:?}): it may want a client certificate, \
             or share no TLS version or cipher with this client"
        ),
        other => format!("TLS failed: {other}"),
    }
}

/// Real handshakes: a server of [`crate::serve::serve`] on 127.0.0.1:0, with certificates
/// made here (rcgen), and a reqwest client of [`crate::tls::http_client_builder_trusting`], as
/// the CLI has.
#[cfg(all(test, feature = "tls-server", feature = "http-client"))]
mod tests {
    use super::*;
    use crate::serve::{ConnectionLimits, serve};
    use crate::tls::server::ServerTls;

    /// A server's certificate and its key.
    struct Identity {
        certificate: rcgen::Certificate,
        key: rcgen::KeyPair,
    }

    impl Identity {
        /// Self-signed and marked CA:TRUE, as `openssl req -x509 -newkey ec -pkeyopt
        /// ec_paramgen_curve:P-256 -subj /CN=NAME -addext subjectAltName=...` makes it;
        /// `edit` changes the rest.
        fn self_signed(names: &[&str], edit: impl FnOnce(&mut rcgen::CertificateParams)) -> Self {
            let mut params = params_for(names);
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            edit(&mut params);
            let key = rcgen::KeyPair::generate().unwrap();
            let certificate = params.self_signed(&key).unwrap();
            Self { certificate, key }
        }

        fn pin(&self) -> PublicKeyPin {
            PublicKeyPin::of_certificate(self.certificate.der()).unwrap()
        }

        /// Its certificate written to a PEM file of `dir`, as a CA file.
        fn pem_write(&self, dir: &tempfile::TempDir, name: &str) -> PathBuf {
            let path = dir.path().join(name);
            std::fs::write(&path, self.certificate.pem()).unwrap();
            path
        }
    }

    fn params_for(names: &[&str]) -> rcgen::CertificateParams {
        let mut params = rcgen::CertificateParams::new(
            names
                .iter()
                .map(|name| name.to_string())
                .collect::<Vec<_>>(),
        )
        .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, names[0]);
        params
    }

    /// A private CA, signing servers' certificates (not CA:TRUE).
    struct TestCa {
        certificate: rcgen::Certificate,
        issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    }

    impl TestCa {
        fn new() -> Self {
            let mut params = params_for(&["Bulkhead test CA"]);
            params.subject_alt_names.clear();
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params.key_usages = vec![
                rcgen::KeyUsagePurpose::KeyCertSign,
                rcgen::KeyUsagePurpose::CrlSign,
            ];
            let key = rcgen::KeyPair::generate().unwrap();
            let certificate = params.self_signed(&key).unwrap();
            Self {
                certificate,
                issuer: rcgen::Issuer::new(params, key),
            }
        }

        fn server(
            &self,
            names: &[&str],
            edit: impl FnOnce(&mut rcgen::CertificateParams),
        ) -> Identity {
            let mut params = params_for(names);
            edit(&mut params);
            let key = rcgen::KeyPair::generate().unwrap();
            let certificate = params.signed_by(&key, &self.issuer).unwrap();
            Identity { certificate, key }
        }

        fn pem_write(&self, dir: &tempfile::TempDir, name: &str) -> PathBuf {
            let path = dir.path().join(name);
            std::fs::write(&path, self.certificate.pem()).unwrap();
            path
        }
    }

    fn expired(params: &mut rcgen::CertificateParams) {
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    }

    fn not_valid_yet(params: &mut rcgen::CertificateParams) {
        params.not_before = rcgen::date_time_ymd(2090, 1, 1);
        params.not_after = rcgen::date_time_ymd(2091, 1, 1);
    }

    /// Serves `identity` over TLS on 127.0.0.1 until the test ends; its URL.
    async fn served(identity: &Identity) -> String {
        let dir = tempfile::tempdir().unwrap();
        let tls = ServerTls {
            certificate: dir.path().join("server.pem"),
            key: dir.path().join("server.key"),
        };
        std::fs::write(&tls.certificate, identity.certificate.pem()).unwrap();
        std::fs::write(&tls.key, identity.key.serialize_pem()).unwrap();
        std::fs::set_permissions(
            &tls.key,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let router = axum::Router::new().route("/", axum::routing::get(async || "ok"));
        tokio::spawn(async move {
            // The files are read when serving starts.
            let _dir = dir;
            serve(
                listener,
                router,
                Some(tls),
                ConnectionLimits::for_this_process(),
                std::future::pending(),
            )
            .await
        });
        format!("https://127.0.0.1:{port}/")
    }

    /// Whether a client trusting `trust` gets `url`'s answer; else the explanation of why not.
    async fn reached(url: &str, trust: &ServerTrust) -> Result<(), String> {
        let client = crate::tls::http_client_builder_trusting(trust)
            .unwrap()
            .build()
            .unwrap();
        match client.get(url).send().await {
            Ok(answer) => {
                assert_eq!(answer.text().await.unwrap(), "ok");
                Ok(())
            }
            Err(err) => {
                Err(failure_explained(&err).unwrap_or_else(|| panic!("not a TLS failure: {err:?}")))
            }
        }
    }

    #[tokio::test]
    async fn a_self_signed_ca_certificate_given_as_the_ca_file_is_trusted_as_itself() {
        let dir = tempfile::tempdir().unwrap();
        let server = Identity::self_signed(&["127.0.0.1"], |_| {});
        let url = served(&server).await;
        let trust = ServerTrust::CaFile(server.pem_write(&dir, "cert.pem"));
        reached(&url, &trust).await.unwrap();
        // Among other certificates, too.
        let bundle = dir.path().join("bundle.pem");
        let other = Identity::self_signed(&["127.0.0.1"], |_| {});
        std::fs::write(
            &bundle,
            format!("{}{}", other.certificate.pem(), server.certificate.pem()),
        )
        .unwrap();
        reached(&url, &ServerTrust::CaFile(bundle)).await.unwrap();
    }

    #[tokio::test]
    async fn another_self_signed_certificate_is_refused_with_the_pin_of_the_servers() {
        let dir = tempfile::tempdir().unwrap();
        let server = Identity::self_signed(&["127.0.0.1"], |_| {});
        let url = served(&server).await;
        let other = Identity::self_signed(&["127.0.0.1"], |_| {});
        let ca_file = other.pem_write(&dir, "other.pem");
        let why = reached(&url, &ServerTrust::CaFile(ca_file.clone()))
            .await
            .unwrap_err();
        assert!(
            why.starts_with("the server's certificate for 127.0.0.1 is a CA certificate"),
            "{why}"
        );
        assert!(
            why.contains(&format!("not itself in {}", ca_file.display())),
            "{why}"
        );
        assert!(
            why.contains(&format!("--pin-sha256 {}", server.pin())),
            "{why}"
        );
        // A server's certificate of a CA not in the file.
        let unknown = TestCa::new().server(&["127.0.0.1"], |_| {});
        let url = served(&unknown).await;
        let why = reached(&url, &ServerTrust::CaFile(ca_file.clone()))
            .await
            .unwrap_err();
        assert_eq!(
            why,
            format!(
                "the server's certificate for 127.0.0.1 is not signed by a CA in {}: give the \
                 CA that signed it with --ca-file, or pin its key with --pin-sha256 {}",
                ca_file.display(),
                unknown.pin()
            )
        );
    }

    #[tokio::test]
    async fn a_certificate_of_another_name_is_refused_even_given_itself() {
        let dir = tempfile::tempdir().unwrap();
        let server = Identity::self_signed(&["bulkhead.test"], |_| {});
        let url = served(&server).await;
        for trust in [
            ServerTrust::CaFile(server.pem_write(&dir, "cert.pem")),
            ServerTrust::PublicKeyPin(server.pin()),
        ] {
            let why = reached(&url, &trust).await.unwrap_err();
            assert!(
                why.starts_with(
                    "the server's certificate is not valid for 127.0.0.1, only for bulkhead.test"
                ),
                "{trust:?}: {why}"
            );
        }
        let ca = TestCa::new();
        let url = served(&ca.server(&["bulkhead.test"], |_| {})).await;
        let why = reached(&url, &ServerTrust::CaFile(ca.pem_write(&dir, "ca.pem")))
            .await
            .unwrap_err();
        assert!(
            why.contains("not valid for 127.0.0.1, only for bulkhead.test"),
            "{why}"
        );
    }

    #[tokio::test]
    async fn an_expired_certificate_or_one_not_valid_yet_is_refused_even_given_itself() {
        let dir = tempfile::tempdir().unwrap();
        let old = Identity::self_signed(&["127.0.0.1"], expired);
        let url = served(&old).await;
        for trust in [
            ServerTrust::CaFile(old.pem_write(&dir, "old.pem")),
            ServerTrust::PublicKeyPin(old.pin()),
        ] {
            let why = reached(&url, &trust).await.unwrap_err();
            assert!(
                why.starts_with(
                    "the server's certificate for 127.0.0.1 expired on Jan  1 00:00:00 2021"
                ),
                "{trust:?}: {why}"
            );
        }
        let early = Identity::self_signed(&["127.0.0.1"], not_valid_yet);
        let url = served(&early).await;
        let why = reached(&url, &ServerTrust::PublicKeyPin(early.pin()))
            .await
            .unwrap_err();
        assert!(
            why.starts_with(
                "the server's certificate for 127.0.0.1 is not valid until Jan  1 00:00:00 2090"
            ),
            "{why}"
        );
        // Through a CA, webpki says it.
        let ca = TestCa::new();
        let url = served(&ca.server(&["127.0.0.1"], expired)).await;
        let why = reached(&url, &ServerTrust::CaFile(ca.pem_write(&dir, "ca.pem")))
            .await
            .unwrap_err();
        assert!(why.contains("expired on Jan  1 00:00:00 2021"), "{why}");
    }

    #[tokio::test]
    async fn a_pinned_key_is_trusted_whatever_signed_it_and_another_is_refused_with_its_pin() {
        let server = TestCa::new().server(&["127.0.0.1"], |_| {});
        let url = served(&server).await;
        reached(&url, &ServerTrust::PublicKeyPin(server.pin()))
            .await
            .unwrap();
        let self_signed = Identity::self_signed(&["127.0.0.1"], |_| {});
        reached(
            &served(&self_signed).await,
            &ServerTrust::PublicKeyPin(self_signed.pin()),
        )
        .await
        .unwrap();
        let other = Identity::self_signed(&["127.0.0.1"], |_| {});
        let why = reached(&url, &ServerTrust::PublicKeyPin(other.pin()))
            .await
            .unwrap_err();
        assert_eq!(
            why,
            format!(
                "the server's key for 127.0.0.1 is not the pinned one: its pin is {}, not {}. \
                 If its key was changed on purpose (ask its operator), give --pin-sha256 {}",
                server.pin(),
                other.pin(),
                server.pin()
            )
        );
    }

    #[tokio::test]
    async fn a_server_certificate_signed_by_the_ca_of_the_file_is_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new();
        let url = served(&ca.server(&["localhost", "127.0.0.1"], |_| {})).await;
        reached(&url, &ServerTrust::CaFile(ca.pem_write(&dir, "ca.pem")))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn the_platforms_roots_refuse_a_self_signed_certificate_saying_what_to_do() {
        let server = Identity::self_signed(&["127.0.0.1"], |_| {});
        let url = served(&server).await;
        let why = reached(&url, &ServerTrust::PlatformRoots)
            .await
            .unwrap_err();
        // A machine without CA certificates says that instead.
        assert!(why.contains("--ca-file"), "{why}");
        if !why.contains("no CA certificates") {
            assert!(
                why.contains(&format!("--pin-sha256 {}", server.pin())),
                "{why}"
            );
        }
    }
}
