//! Signature Version 4 verification of the requests the EC2 simulator receives, in EC2's order
//! and with EC2's error codes: the `Authorization` header's structure, the access key id, the
//! request date, the credential scope, then the signature itself.
//!
//! The expected signature is computed by AWS's own signer (the `aws-sigv4` crate) over the
//! request as received — its method, path, query, the headers it names as signed with the
//! values received, and its body — never by the plugin's signer or a copy of it, so that a
//! mistake in the plugin's signing shows here as `SignatureDoesNotMatch`. This module reads no
//! parameters and keeps no state.

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::SigningOutput;
use aws_sigv4::http_request::{
    SignableBody, SignableRequest, SigningError, SigningInstructions, SigningSettings, sign,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use chrono::{DateTime, NaiveDateTime, Utc};
use subtle::ConstantTimeEq;

use super::{AwsCredentials, Ec2Error};

/// The service EC2's credential scopes name (CloudWatch Logs' is `logs`).
pub(super) const SERVICE: &str = "ec2";
/// How far the request date may be from the simulator's clock.
const MAX_CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);
/// `X-Amz-Date`: ISO 8601 basic format, UTC.
const AMZ_DATE_FORMAT: &str = "%Y%m%dT%H%M%SZ";

/// The parts of `Authorization: AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...`.
struct Authorization<'a> {
    access_key_id: &'a str,
    date: &'a str,
    region: &'a str,
    service: &'a str,
    terminator: &'a str,
    signed_headers: Vec<&'a str>,
    signature: &'a str,
}

fn parse_authorization(value: &str) -> Result<Authorization<'_>, Ec2Error> {
    let rest = value.strip_prefix("AWS4-HMAC-SHA256 ").ok_or_else(|| {
        let algorithm = value.split_whitespace().next().unwrap_or_default();
        Ec2Error::incomplete_signature(format!("Unsupported AWS 'algorithm': '{algorithm}'"))
    })?;
    let mut credential = None;
    let mut signed_headers = None;
    let mut signature = None;
    for part in rest.split(',') {
        let (name, value) = part.trim().split_once('=').unwrap_or((part.trim(), ""));
        match name {
            "Credential" => credential = Some(value),
            "SignedHeaders" => signed_headers = Some(value),
            "Signature" => signature = Some(value),
            _ => {}
        }
    }
    let missing = |name: &str| {
        Ec2Error::incomplete_signature(format!(
            "Authorization header requires '{name}' parameter. Authorization={value}"
        ))
    };
    let credential = credential.ok_or_else(|| missing("Credential"))?;
    let signed_headers = signed_headers.ok_or_else(|| missing("SignedHeaders"))?;
    let signature = signature.ok_or_else(|| missing("Signature"))?;
    let scope: Vec<&str> = credential.split('/').collect();
    let [access_key_id, date, region, service, terminator] = scope[..] else {
        return Err(Ec2Error::incomplete_signature(format!(
            "Credential should have 5 slash-separated parts: access key id/date/region/service/aws4_request, not '{credential}'"
        )));
    };
    Ok(Authorization {
        access_key_id,
        date,
        region,
        service,
        terminator,
        signed_headers: signed_headers.split(';').collect(),
        signature,
    })
}

/// `YYYYMMDDTHHMMSSZ` of a time.
pub(super) fn amz_date(time: SystemTime) -> String {
    DateTime::<Utc>::from(time)
        .format(AMZ_DATE_FORMAT)
        .to_string()
}

/// The time of an `X-Amz-Date`, which must be exactly `YYYYMMDDTHHMMSSZ`.
fn amz_date_parse(text: &str) -> Option<SystemTime> {
    let time = NaiveDateTime::parse_from_str(text, AMZ_DATE_FORMAT)
        .ok()?
        .and_utc();
    // The parser takes more than the format says (a sign, more digits): only the exact
    // rendering of the time it read is the date.
    (time.format(AMZ_DATE_FORMAT).to_string() == text).then(|| time.into())
}

fn mismatch() -> Ec2Error {
    Ec2Error::signature_mismatch(
        "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.",
    )
}

/// Checks the request's SigV4 signature as EC2 does, for the account `credentials` in
/// `region` and the API `service` (`ec2`, `logs`), at time `now`. The refusals are EC2's
/// codes; an API of another protocol renders them in its own (CloudWatch Logs' JSON).
#[allow(clippy::too_many_arguments)]
pub(super) fn verify(
    credentials: &AwsCredentials,
    region: &str,
    service: &str,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
) -> Result<(), Ec2Error> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(Ec2Error::new(
            StatusCode::UNAUTHORIZED,
            "MissingAuthenticationToken",
            "Request is missing Authentication Token",
        ));
    };
    let value = value
        .to_str()
        .map_err(|_| Ec2Error::incomplete_signature("The Authorization header is not ASCII"))?;
    let auth = parse_authorization(value)?;
    if auth.access_key_id != credentials.access_key_id {
        return Err(Ec2Error::new(
            StatusCode::UNAUTHORIZED,
            "AuthFailure",
            "AWS was not able to validate the provided access credentials",
        ));
    }
    let (amz_date_header, signed_at) = request_date(headers, now)?;
    scope_check(&auth, region, service, amz_date_header)?;

    // Only the headers the client says it signed take part, with every value received.
    let mut signed: Vec<(&str, &str)> = Vec::new();
    for name in &auth.signed_headers {
        for value in headers.get_all(*name) {
            signed.push((name, value.to_str().map_err(|_| mismatch())?));
        }
    }
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .ok_or_else(mismatch)?;
    let path_and_query = uri.path_and_query().map_or("/", |pq| pq.as_str());
    let expected = expected_signature(
        credentials,
        region,
        service,
        signed_at,
        Received {
            method: method.as_str(),
            url: &format!("http://{host}{path_and_query}"),
            headers: &signed,
            body,
        },
    )
    .map_err(|err| {
        tracing::debug!(%err, "aws-sigv4 could not sign the request as received");
        mismatch()
    })?;
    if bool::from(expected.as_bytes().ct_eq(auth.signature.as_bytes())) {
        Ok(())
    } else {
        Err(mismatch())
    }
}

/// The request's `X-Amz-Date`, as sent and as a time, if it is within the allowed skew of `now`.
fn request_date(headers: &HeaderMap, now: SystemTime) -> Result<(&str, SystemTime), Ec2Error> {
    let text = headers
        .get("x-amz-date")
        .and_then(|value| value.to_str().ok())
        .ok_or_else(|| {
            Ec2Error::incomplete_signature(
                "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.",
            )
        })?;
    let signed_at = amz_date_parse(text).ok_or_else(|| {
        Ec2Error::incomplete_signature(format!(
            "Date must be in ISO-8601 'basic format'. Got '{text}'."
        ))
    })?;
    let skew = now
        .duration_since(signed_at)
        .unwrap_or_else(|err| err.duration());
    if skew > MAX_CLOCK_SKEW {
        return Err(Ec2Error::bad_request(
            "RequestExpired",
            format!(
                "Request has expired. Timestamp date is {text}, now is {}.",
                amz_date(now)
            ),
        ));
    }
    Ok((text, signed_at))
}

/// The credential scope must be `YYYYMMDD/region/service/aws4_request` (the day of the
/// `X-Amz-Date`), and the signed headers sorted, without duplicates, and include `host` and
/// `x-amz-date`.
fn scope_check(
    auth: &Authorization<'_>,
    region: &str,
    service: &str,
    amz_date_header: &str,
) -> Result<(), Ec2Error> {
    let day = &amz_date_header[..8];
    if auth.date != day {
        return Err(Ec2Error::signature_mismatch(format!(
            "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '{}' != '{day}', from '{amz_date_header}'.",
            auth.date
        )));
    }
    if auth.region != region {
        return Err(Ec2Error::signature_mismatch(format!(
            "Credential should be scoped to a valid region, not '{}'.",
            auth.region
        )));
    }
    if auth.service != service {
        return Err(Ec2Error::signature_mismatch(format!(
            "Credential should be scoped to correct service: '{service}'. Got '{}'.",
            auth.service
        )));
    }
    if auth.terminator != "aws4_request" {
        return Err(Ec2Error::signature_mismatch(format!(
            "Credential should be scoped with a valid terminator: 'aws4_request', not '{}'.",
            auth.terminator
        )));
    }
    if !auth.signed_headers.contains(&"host") {
        return Err(Ec2Error::incomplete_signature(
            "'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.",
        ));
    }
    if !auth.signed_headers.contains(&"x-amz-date") {
        return Err(Ec2Error::incomplete_signature(
            "'X-Amz-Date' must be a 'SignedHeader' in the AWS Authorization.",
        ));
    }
    let mut sorted = auth.signed_headers.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted != auth.signed_headers {
        return Err(Ec2Error::signature_mismatch(
            "The SignedHeaders must be lowercase, sorted and without duplicates.",
        ));
    }
    Ok(())
}

/// A request as it arrived: `url` is absolute (its authority is the `Host` header), `headers`
/// are the signed ones.
struct Received<'a> {
    method: &'a str,
    url: &'a str,
    headers: &'a [(&'a str, &'a str)],
    body: &'a [u8],
}

/// The signature `aws-sigv4` gives `request` at `signed_at`, signing exactly its `headers`
/// (plus `x-amz-date`, which it sets from `signed_at`).
fn expected_signature(
    credentials: &AwsCredentials,
    region: &str,
    service: &str,
    signed_at: SystemTime,
    request: Received<'_>,
) -> Result<String, SigningError> {
    let mut settings = SigningSettings::default();
    // By default the signer leaves out headers that proxies change (user-agent, ...); here the
    // client's list of signed headers is the one that counts.
    settings.excluded_headers = None;
    let signable = SignableRequest::new(
        request.method,
        request.url,
        request.headers.iter().copied(),
        SignableBody::Bytes(request.body),
    )?;
    let signed = aws_sign(credentials, region, service, signed_at, settings, signable)?;
    Ok(signed.signature().to_owned())
}

/// `request` signed by `aws-sigv4` with `credentials` for `service` in `region` at `at`.
fn aws_sign(
    credentials: &AwsCredentials,
    region: &str,
    service: &str,
    at: SystemTime,
    settings: SigningSettings,
    request: SignableRequest<'_>,
) -> Result<SigningOutput<SigningInstructions>, SigningError> {
    let identity: Identity = Credentials::new(
        &credentials.access_key_id,
        &credentials.secret_access_key,
        None,
        None,
        "bulkhead-simulator",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(at)
        .settings(settings)
        .build()
        .expect("identity, region, name, time and settings are all set")
        .into();
    sign(request, &params)
}

/// Signing with `aws-sigv4` for the tests: the headers to add to a form POST to `url`.
#[cfg(test)]
pub(super) fn sign_for_test(
    credentials: &AwsCredentials,
    region: &str,
    service: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    at: SystemTime,
) -> Vec<(String, String)> {
    let signable = SignableRequest::new(
        "POST",
        url,
        headers.iter().copied(),
        SignableBody::Bytes(body),
    )
    .unwrap();
    let signed = aws_sign(
        credentials,
        region,
        service,
        at,
        SigningSettings::default(),
        signable,
    )
    .unwrap();
    let (instructions, _) = signed.into_parts();
    instructions
        .headers()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use axum::http::{HeaderName, HeaderValue};

    use super::*;

    /// AWS's test-suite credentials and clock (2015-08-30T12:36:00Z).
    fn suite() -> (AwsCredentials, SystemTime) {
        (
            AwsCredentials {
                access_key_id: "AKIDEXAMPLE".into(),
                secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            },
            UNIX_EPOCH + Duration::from_secs(1_440_938_160),
        )
    }

    #[test]
    fn the_expected_signature_is_awss_documented_one_for_form_posts() {
        let (credentials, at) = suite();
        let signature = |headers: &[(&str, &str)]| {
            expected_signature(
                &credentials,
                "us-east-1",
                "service",
                at,
                Received {
                    method: "POST",
                    url: "http://example.amazonaws.com/",
                    headers,
                    body: b"Param1=value1",
                },
            )
            .unwrap()
        };
        // The SigV4 test suite's post-x-www-form-urlencoded (2015 edition).
        assert_eq!(
            signature(&[
                ("content-type", "application/x-www-form-urlencoded"),
                ("host", "example.amazonaws.com"),
            ]),
            "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"
        );
        // post-x-www-form-urlencoded-parameters (2015 edition).
        assert_eq!(
            signature(&[
                (
                    "content-type",
                    "application/x-www-form-urlencoded; charset=utf8"
                ),
                ("host", "example.amazonaws.com"),
            ]),
            "1a72ec8f64bd914b0e42e42607c7fbce7fb2c7465f63e3092b3b0d39fa77a6fe"
        );
        // post-x-www-form-urlencoded-parameters (current edition: the length and the body's
        // hash are signed too).
        assert_eq!(
            signature(&[
                ("content-length", "13"),
                (
                    "content-type",
                    "application/x-www-form-urlencoded; charset=utf-8"
                ),
                ("host", "example.amazonaws.com"),
                (
                    "x-amz-content-sha256",
                    "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"
                ),
            ]),
            "328d1b9eaadca9f5818ef05e8392801e091653bafec24fcab71e7344e7f51422"
        );
    }

    #[test]
    fn x_amz_dates_are_exactly_basic_format() {
        let at = UNIX_EPOCH + Duration::from_secs(1_709_251_199);
        assert_eq!(amz_date(at), "20240229T235959Z");
        assert_eq!(amz_date_parse("20240229T235959Z"), Some(at));
        assert_eq!(amz_date_parse("20150830T123600Z"), Some(suite().1));
        for bad in [
            "2024-02-29T23:59:59Z",
            "20240229T235959",
            "+20240229T235959Z",
            "020240229T235959Z",
            "20240230T000000Z",
            "20240229T245959Z",
            "",
        ] {
            assert_eq!(amz_date_parse(bad), None, "{bad}");
        }
    }

    const REGION: &str = "eu-west-1";
    const HOST: &str = "127.0.0.1:9000";
    const CONTENT_TYPE: &str = "application/x-www-form-urlencoded; charset=utf-8";
    const BODY: &[u8] = b"Action=DescribeAvailabilityZones&Version=2016-11-15";

    fn account() -> AwsCredentials {
        AwsCredentials {
            access_key_id: "AKIDSIMULATOR".into(),
            secret_access_key: "sim/Secret+Access/KEY".into(),
        }
    }

    /// A form POST as the plugin sends it, signed by `aws-sigv4` at `at`.
    fn signed_post(at: SystemTime) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static(HOST));
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
        let signing = sign_for_test(
            &account(),
            REGION,
            SERVICE,
            &format!("http://{HOST}/"),
            &[("content-type", CONTENT_TYPE)],
            BODY,
            at,
        );
        for (name, value) in signing {
            headers.insert(
                HeaderName::try_from(name).unwrap(),
                HeaderValue::try_from(value).unwrap(),
            );
        }
        headers
    }

    fn check(headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), &'static str> {
        let uri = Uri::from_static("/");
        verify(
            &account(),
            REGION,
            SERVICE,
            &Method::POST,
            &uri,
            headers,
            body,
            now,
        )
        .map_err(|e| e.code)
    }

    #[test]
    fn a_request_signed_by_aws_sigv4_is_accepted_and_a_tampered_one_refused() {
        let now = SystemTime::now();
        let headers = signed_post(now);
        assert!(
            headers["authorization"]
                .to_str()
                .unwrap()
                .contains("SignedHeaders=content-type;host;x-amz-date,"),
            "{headers:?}"
        );
        assert_eq!(check(&headers, BODY, now), Ok(()));

        // A header nobody signed may be added (EC2 ignores it).
        let mut unsigned = headers.clone();
        unsigned.insert("x-forwarded-for", HeaderValue::from_static("10.1.1.1"));
        assert_eq!(check(&unsigned, BODY, now), Ok(()));

        // Another body.
        let other_body = b"Action=TerminateInstances&Version=2016-11-15&InstanceId.1=i-1";
        assert_eq!(
            check(&headers, other_body, now),
            Err("SignatureDoesNotMatch")
        );
        // Another date, a second later: well within the allowed skew, and refused all the same
        // (by the signature, or by the scope's date if that second crosses midnight).
        let mut later = headers.clone();
        let second_later = amz_date(now + Duration::from_secs(1));
        later.insert("x-amz-date", HeaderValue::try_from(second_later).unwrap());
        assert_eq!(check(&later, BODY, now), Err("SignatureDoesNotMatch"));
        // A signed header changed, removed, or sent twice.
        let mut retyped = headers.clone();
        retyped.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        assert_eq!(check(&retyped, BODY, now), Err("SignatureDoesNotMatch"));
        let mut untyped = headers.clone();
        untyped.remove(header::CONTENT_TYPE);
        assert_eq!(check(&untyped, BODY, now), Err("SignatureDoesNotMatch"));
        let mut twice = headers.clone();
        twice.append(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert_eq!(check(&twice, BODY, now), Err("SignatureDoesNotMatch"));
        let mut rehosted = headers.clone();
        rehosted.insert(header::HOST, HeaderValue::from_static("127.0.0.1:9001"));
        assert_eq!(check(&rehosted, BODY, now), Err("SignatureDoesNotMatch"));
        // Another method or path.
        let uri = Uri::from_static("/");
        let got = verify(
            &account(),
            REGION,
            SERVICE,
            &Method::GET,
            &uri,
            &headers,
            BODY,
            now,
        );
        assert_eq!(got.map_err(|e| e.code), Err("SignatureDoesNotMatch"));
        let elsewhere = Uri::from_static("/other");
        let got = verify(
            &account(),
            REGION,
            SERVICE,
            &Method::POST,
            &elsewhere,
            &headers,
            BODY,
            now,
        );
        assert_eq!(got.map_err(|e| e.code), Err("SignatureDoesNotMatch"));
        // Another secret.
        let mut stranger = account();
        stranger.secret_access_key = "not-the-secret".into();
        let got = verify(
            &stranger,
            REGION,
            SERVICE,
            &Method::POST,
            &uri,
            &headers,
            BODY,
            now,
        );
        assert_eq!(got.map_err(|e| e.code), Err("SignatureDoesNotMatch"));
    }

    #[test]
    fn stale_dates_and_foreign_scopes_are_refused_before_the_signature() {
        let now = SystemTime::now();
        let stale = signed_post(now - Duration::from_secs(6 * 60));
        assert_eq!(check(&stale, BODY, now), Err("RequestExpired"));
        let early = signed_post(now + Duration::from_secs(6 * 60));
        assert_eq!(check(&early, BODY, now), Err("RequestExpired"));

        let headers = signed_post(now);
        let got = verify(
            &account(),
            "us-east-1",
            SERVICE,
            &Method::POST,
            &Uri::from_static("/"),
            &headers,
            BODY,
            now,
        );
        assert_eq!(got.map_err(|e| e.code), Err("SignatureDoesNotMatch"));

        let mut undated = headers.clone();
        undated.remove("x-amz-date");
        assert_eq!(check(&undated, BODY, now), Err("IncompleteSignature"));
        let mut misdated = headers.clone();
        misdated.insert(
            "x-amz-date",
            HeaderValue::from_static("2024-02-29T23:59:59Z"),
        );
        assert_eq!(check(&misdated, BODY, now), Err("IncompleteSignature"));
    }
}
