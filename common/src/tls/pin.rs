//! A pin of a server's public key: the SHA-256 of its certificate's SubjectPublicKeyInfo, as
//! HPKP and `curl --pinnedpubkey sha256//...` take it. It stays the same across a renewal
//! that keeps the key, and is what
//! `openssl x509 -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64`
//! prints.
//!
//! Written in base64 (as that command prints it, `sha256//` before it allowed, as curl takes
//! it) or in hex (64 digits, colons allowed, as the `metal` provider's `tls_certificate_sha256`
//! takes its pins); shown in base64.

use std::fmt;
use std::str::FromStr;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use rustls::pki_types::CertificateDer;

/// The SHA-256 of a certificate's SubjectPublicKeyInfo (DER).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKeyPin([u8; 32]);

impl PublicKeyPin {
    /// The pin of the key of `certificate`; an error when it is not an X.509 certificate.
    pub fn of_certificate(certificate: &CertificateDer<'_>) -> Result<Self, webpki::Error> {
        let parsed = webpki::EndEntityCert::try_from(certificate)?;
        Ok(Self::of_public_key(
            parsed.subject_public_key_info().as_ref(),
        ))
    }

    /// The pin of a SubjectPublicKeyInfo (DER, with its outer SEQUENCE).
    pub fn of_public_key(subject_public_key_info: &[u8]) -> Self {
        let digest = ring::digest::digest(&ring::digest::SHA256, subject_public_key_info);
        Self(digest.as_ref().try_into().expect("a SHA-256 is 32 bytes"))
    }

    /// The 32 bytes of the SHA-256.
    pub fn sha256(&self) -> &[u8; 32] {
        &self.0
    }
}

/// A pin that is not a SHA-256 in base64 or hex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKeyPinInvalid(String);

impl fmt::Display for PublicKeyPinInvalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not the SHA-256 of a public key: give it in base64 (44 characters, as \
             `openssl x509 -pubkey -noout -in cert.pem | openssl pkey -pubin -outform der | \
             openssl dgst -sha256 -binary | base64` prints it) or in hex (64 digits)",
            self.0
        )
    }
}

impl std::error::Error for PublicKeyPinInvalid {}

impl FromStr for PublicKeyPin {
    type Err = PublicKeyPinInvalid;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let pin = text.trim();
        let pin = pin.strip_prefix("sha256//").unwrap_or(pin);
        let hex_digits: String = pin.chars().filter(|c| *c != ':').collect();
        let bytes = if hex_digits.len() == 64 {
            hex::decode(&hex_digits).ok()
        } else {
            BASE64.decode(pin).ok()
        };
        bytes
            .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
            .map(Self)
            .ok_or_else(|| PublicKeyPinInvalid(text.to_owned()))
    }
}

impl fmt::Display for PublicKeyPin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&BASE64.encode(self.0))
    }
}

impl fmt::Debug for PublicKeyPin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKeyPin({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_is_base64_or_hex_and_shown_in_base64() {
        let pin = PublicKeyPin([0xab; 32]);
        let base64 = pin.to_string();
        assert_eq!(base64.len(), 44);
        let hex = "ab".repeat(32);
        let colons = vec!["AB"; 32].join(":");
        for text in [
            base64.clone(),
            format!("sha256//{base64}"),
            format!(" {base64}\n"),
            hex,
            colons,
        ] {
            assert_eq!(text.parse::<PublicKeyPin>(), Ok(pin), "{text}");
        }
        for bad in ["", "abcd", &"zz".repeat(32), &"ab".repeat(33), "c2hvcnQ="] {
            let err = bad.parse::<PublicKeyPin>().unwrap_err().to_string();
            assert!(err.contains("not the SHA-256 of a public key"), "{err}");
        }
    }

    /// `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout key.pem
    /// -out cert.pem -days 30 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1`
    const OPENSSL_CERTIFICATE: &str = "-----BEGIN CERTIFICATE-----
MIIBjzCCATSgAwIBAgIUT7fmPXkrYwuJT1j40KYmujg+qfowCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJMTI3LjAuMC4xMB4XDTI2MTIwNjA5Mjg1NloXDTI3MDEwNTA5
Mjg1NlowFDESMBAGA1UEAwwJMTI3LjAuMC4xMFkwEwYHKoZIzj0CAQYIKoZIzj0D
AQcDQgAEzoBLRPT+uRcwCqFXV+qnjVSibemZkN81YEOs9FECeDU4DztFG5vJdL3T
UrqXMujEkVDQZzNcanNtUucF+wtxe6NkMGIwHQYDVR0OBBYEFBKZTuYfHFEm/+cM
2UfCxiHdgR++MB8GA1UdIwQYMBaAFBKZTuYfHFEm/+cM2UfCxiHdgR++MA8GA1Ud
EwEB/wQFMAMBAf8wDwYDVR0RBAgwBocEfwAAATAKBggqhkjOPQQDAgNJADBGAiEA
gEKGg6O2Tkwg0D8oyqgElu62ax2FPn6ByKzDFCi4soUCIQDzVHGMNMU0GISULeuX
aAwkdU4M9jBGUQC1qouIUKqx0w==
-----END CERTIFICATE-----
";

    #[test]
    fn the_pin_is_what_openssl_prints_for_the_key() {
        use rustls::pki_types::pem::PemObject;
        let certificate = CertificateDer::from_pem_slice(OPENSSL_CERTIFICATE.as_bytes()).unwrap();
        // `openssl x509 -pubkey -noout -in cert.pem | openssl pkey -pubin -outform der |
        // openssl dgst -sha256 -binary | base64`
        assert_eq!(
            PublicKeyPin::of_certificate(&certificate)
                .unwrap()
                .to_string(),
            "daU0xNNUfFv9EdXyQZ2sLalK0gQDerPhq7i55/bk5SE="
        );
    }

    #[test]
    fn the_pin_of_a_certificate_is_the_sha256_of_its_public_key_info() {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["bulkhead.test".into()]).unwrap();
        let certificate = params.self_signed(&key).unwrap();
        let pin = PublicKeyPin::of_certificate(certificate.der()).unwrap();
        // rcgen writes the key's SubjectPublicKeyInfo on its own.
        let public_key_info = rcgen::PublicKeyData::subject_public_key_info(&key);
        assert_eq!(pin, PublicKeyPin::of_public_key(&public_key_info));
        // Another certificate of the same key has the same pin.
        let renewed = rcgen::CertificateParams::new(vec!["other.test".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        assert_eq!(PublicKeyPin::of_certificate(renewed.der()).unwrap(), pin);
    }
}
