//! AWS Signature Version 4 for the plugin's requests: the canonical request, the string to
//! sign, the derived signing key and the `Authorization` header, as the AWS General Reference
//! specifies them (checked against AWS's published test-suite signatures).
//!
//! The `Host` header is signed but not sent: the host's `wasi:http` forbids guests from setting
//! it and sends the URL's authority, which is exactly the value signed here.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use bulkhead_sdk::ProviderError;
use bulkhead_sdk::http::Request;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// An access key. `Debug` never shows the secret.
#[derive(Clone)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .finish()
    }
}

/// Adds `x-amz-date` and `authorization` to `request`, signing its method, URL, headers (all
/// of them, plus `host`) and body for `service` in `region` at time `now`.
pub fn sign(
    mut request: Request,
    credentials: &Credentials,
    region: &str,
    service: &str,
    now: SystemTime,
) -> Result<Request, ProviderError> {
    let url = request.url.clone();
    let (host, path, query) = split_url(&url)?;
    let amz_date = amz_timestamp(now);
    let date = &amz_date[..8];
    request = request.header("x-amz-date", amz_date.clone());

    let mut headers: Vec<(String, String)> = request
        .headers
        .iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), trim_value(value)))
        .filter(|(name, _)| name != "authorization" && name != "host")
        .collect();
    headers.push(("host".into(), host.to_ascii_lowercase()));
    headers.sort();
    // One line per name, repeated values joined with commas.
    let mut merged: Vec<(String, String)> = Vec::new();
    for (name, value) in headers {
        match merged.last_mut() {
            Some((last, values)) if *last == name => {
                values.push(',');
                values.push_str(&value);
            }
            _ => merged.push((name, value)),
        }
    }
    let canonical_headers: String = merged
        .iter()
        .map(|(name, value)| format!("{name}:{value}\n"))
        .collect();
    let signed_headers = merged
        .iter()
        .map(|(name, _)| name.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let canonical_request = format!(
        "{}\n{}\n{}\n{canonical_headers}\n{signed_headers}\n{}",
        request.method.as_str(),
        canonical_uri(path),
        canonical_query(query),
        sha256_hex(&request.body)
    );
    let scope = format!("{date}/{region}/{service}/aws4_request");
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        sha256_hex(canonical_request.as_bytes())
    );
    let key = signing_key(&credentials.secret_access_key, date, region, service);
    let signature = hex::encode(hmac(&key, string_to_sign.as_bytes()));
    Ok(request.header(
        "authorization",
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
            credentials.access_key_id
        ),
    ))
}

/// (authority, path, query) of an `http(s)://` URL.
fn split_url(url: &str) -> Result<(&str, &str, &str), ProviderError> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| ProviderError::InvalidSpec(format!("`{url}` is not an http(s) URL")))?;
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path_and_query) = rest.split_at(split);
    if authority.is_empty() {
        return Err(ProviderError::InvalidSpec(format!("`{url}` has no host")));
    }
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    Ok((authority, path, query))
}

fn trim_value(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

type HmacSha256 = Hmac<Sha256>;

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any size");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

pub(crate) fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> Vec<u8> {
    let k_date = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k_region = hmac(&k_date, region.as_bytes());
    let k_service = hmac(&k_region, service.as_bytes());
    hmac(&k_service, b"aws4_request")
}

/// SigV4's URI encoding: everything but the unreserved characters, `/` kept in paths.
fn uri_encode(text: &str, path: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            b'/' if path => out.push('/'),
            _ => {
                let _ = write!(out, "%{byte:02X}");
            }
        }
    }
    out
}

/// The canonical URI of every service but S3: the path as sent, URI-encoded once more.
fn canonical_uri(path: &str) -> String {
    if path.is_empty() {
        "/".into()
    } else {
        uri_encode(path, true)
    }
}

/// The query's parameters, decoded, re-encoded and sorted by name, then value.
fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (
                uri_encode(&percent_decode(name), false),
                uri_encode(&percent_decode(value), false),
            )
        })
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect::<Vec<_>>()
        .join("&")
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(byte) = text
                .get(i + 1..i + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `YYYYMMDDTHHMMSSZ` (UTC), the format of `X-Amz-Date`.
pub fn amz_timestamp(time: SystemTime) -> String {
    let secs = time
        .duration_since(UNIX_EPOCH)
        .map(|since| since.as_secs())
        .unwrap_or_default();
    chrono::DateTime::from_timestamp(i64::try_from(secs).unwrap_or_default(), 0)
        .unwrap_or_default()
        .format("%Y%m%dT%H%M%SZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// AWS's test-suite credentials and clock (2015-08-30T12:36:00Z).
    fn example() -> (Credentials, SystemTime) {
        (
            Credentials {
                access_key_id: "AKIDEXAMPLE".into(),
                secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            },
            UNIX_EPOCH + Duration::from_secs(1_440_938_160),
        )
    }

    fn signature(request: Request) -> String {
        let (credentials, now) = example();
        let signed = sign(request, &credentials, "us-east-1", "service", now).unwrap();
        assert_eq!(signed.header_value("x-amz-date"), Some("20150830T123600Z"));
        let authorization = signed.header_value("authorization").unwrap().to_owned();
        assert!(authorization.starts_with(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature="
        ), "{authorization}");
        authorization.rsplit('=').next().unwrap().to_owned()
    }

    #[test]
    fn matches_the_aws_test_suite() {
        // get-vanilla
        assert_eq!(
            signature(Request::get("https://example.amazonaws.com/")),
            "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
        // get-vanilla-query-order-key-case: the query is sorted before signing.
        assert_eq!(
            signature(Request::get(
                "https://example.amazonaws.com/?Param2=value2&Param1=value1"
            )),
            "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"
        );
        // post-vanilla: an empty body hashes as the empty string.
        assert_eq!(
            signature(Request::post("https://example.amazonaws.com/")),
            "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"
        );
    }

    /// The `Authorization` header of `request` signed with the suite's credentials and clock.
    fn suite_authorization(request: Request) -> String {
        let (credentials, now) = example();
        let signed = sign(request, &credentials, "us-east-1", "service", now).unwrap();
        signed.header_value("authorization").unwrap().to_owned()
    }

    const SUITE_SCOPE: &str =
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request";

    #[test]
    fn signs_form_posts_as_the_aws_test_suite_documents() {
        // post-x-www-form-urlencoded: every EC2 call is such a POST.
        assert_eq!(
            suite_authorization(
                Request::post("https://example.amazonaws.com/")
                    .header("Content-Type", "application/x-www-form-urlencoded")
                    .body("Param1=value1")
            ),
            format!(
                "{SUITE_SCOPE}, SignedHeaders=content-type;host;x-amz-date, Signature=ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"
            )
        );
        // post-x-www-form-urlencoded-parameters: a charset in the content type.
        assert_eq!(
            suite_authorization(
                Request::post("https://example.amazonaws.com/")
                    .header(
                        "Content-Type",
                        "application/x-www-form-urlencoded; charset=utf8"
                    )
                    .body("Param1=value1")
            ),
            format!(
                "{SUITE_SCOPE}, SignedHeaders=content-type;host;x-amz-date, Signature=1a72ec8f64bd914b0e42e42607c7fbce7fb2c7465f63e3092b3b0d39fa77a6fe"
            )
        );
        // The suite's current edition of the same case, which signs the length and the body's
        // hash too, with the content type the plugin sends.
        assert_eq!(
            suite_authorization(
                Request::post("https://example.amazonaws.com/")
                    .header(
                        "Content-Type",
                        "application/x-www-form-urlencoded; charset=utf-8"
                    )
                    .header("Content-Length", "13")
                    .header(
                        "x-amz-content-sha256",
                        "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"
                    )
                    .body("Param1=value1")
            ),
            format!(
                "{SUITE_SCOPE}, SignedHeaders=content-length;content-type;host;x-amz-content-sha256;x-amz-date, Signature=328d1b9eaadca9f5818ef05e8392801e091653bafec24fcab71e7344e7f51422"
            )
        );
    }

    #[test]
    fn timestamps_are_utc_basic_format() {
        assert_eq!(amz_timestamp(UNIX_EPOCH), "19700101T000000Z");
        // 2024-02-29T23:59:59Z, a leap day.
        assert_eq!(
            amz_timestamp(UNIX_EPOCH + Duration::from_secs(1_709_251_199)),
            "20240229T235959Z"
        );
    }

    #[test]
    fn the_secret_never_shows() {
        let (credentials, now) = example();
        assert!(!format!("{credentials:?}").contains("EXAMPLEKEY"));
        let signed = sign(
            Request::post("http://127.0.0.1:9000/").body("a=b"),
            &credentials,
            "us-east-1",
            "ec2",
            now,
        )
        .unwrap();
        assert!(
            signed
                .headers
                .iter()
                .all(|(_, value)| !value.contains("EXAMPLEKEY"))
        );
        // The host is signed, never sent (the host's wasi:http forbids it).
        assert!(signed.header_value("host").is_none());
    }
}
