//! Outbound HTTP for plugins, over the host's standard `wasi:http/outgoing-handler`.
//!
//! ```
//! use bulkhead_sdk::ProviderError;
//! use bulkhead_sdk::http::Request;
//!
//! #[derive(serde::Deserialize)]
//! struct Zone { name: String }
//!
//! fn zone(endpoint: &str, token: &str) -> Result<Zone, ProviderError> {
//!     let zone: Zone = Request::get(format!("{endpoint}/zones/z1"))
//!         .bearer(token)
//!         .send()?             // transport errors and refusals become `ProviderError`s
//!         .error_for_status()? // 401 → unauthorized, 403 → forbidden, 404 → not found, ...
//!         .json()?;
//!     Ok(zone)
//! }
//! # bulkhead_sdk::testing::set_http_handler(|_| Ok(bulkhead_sdk::http::Response::json_body(200, &serde_json::json!({"name": "z1"}))));
//! # assert_eq!(zone("http://api", "t").unwrap().name, "z1");
//! ```
//!
//! The host sends a request only to the `host:port` destinations on the provider's allowlist;
//! any other request fails with [`HttpError::Denied`]. Response bodies are capped by the host.
//! Bodies go out with a `Content-Length` (never chunked), which every HTTP/1.1 server accepts.
//! On a native target (unit tests) requests go to the handler set with
//! [`crate::testing::set_http_handler`] instead.

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{ProviderError, RateLimit};

/// An HTTP method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Put,
    Patch,
    Delete,
    Head,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
            Method::Head => "HEAD",
        }
    }
}

/// A request to send with [`Request::send`].
#[derive(Debug, Clone)]
pub struct Request {
    pub method: Method,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Why a request got no response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// The host refused it: the destination is not on this provider's allowlist.
    Denied(String),
    /// The URL could not be parsed or used.
    InvalidUrl(String),
    /// The response body was larger than the host's cap.
    ResponseTooLarge(String),
    /// Connection, TLS, DNS or protocol failure.
    Transport(String),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Denied(url) => write!(
                f,
                "the host refused the request to {url}: its destination is not on this provider's allowlist"
            ),
            HttpError::InvalidUrl(message) => write!(f, "invalid URL: {message}"),
            HttpError::ResponseTooLarge(url) => {
                write!(f, "the response of {url} is larger than the host allows")
            }
            HttpError::Transport(message) => write!(f, "HTTP request failed: {message}"),
        }
    }
}

impl std::error::Error for HttpError {}

impl From<HttpError> for ProviderError {
    /// A refused destination or an invalid URL is the plugin's or its configuration's fault
    /// (internal); network failures are transient (unavailable).
    fn from(err: HttpError) -> Self {
        match err {
            HttpError::Transport(_) => ProviderError::Unavailable(err.to_string()),
            _ => ProviderError::Internal(err.to_string()),
        }
    }
}

impl Request {
    pub fn new(method: Method, url: impl Into<String>) -> Self {
        Self {
            method,
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn get(url: impl Into<String>) -> Self {
        Self::new(Method::Get, url)
    }

    pub fn post(url: impl Into<String>) -> Self {
        Self::new(Method::Post, url)
    }

    pub fn put(url: impl Into<String>) -> Self {
        Self::new(Method::Put, url)
    }

    pub fn patch(url: impl Into<String>) -> Self {
        Self::new(Method::Patch, url)
    }

    pub fn delete(url: impl Into<String>) -> Self {
        Self::new(Method::Delete, url)
    }

    /// Adds a header (names are case-insensitive; adding a name twice sends both).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Adds `Authorization: Bearer <token>`.
    pub fn bearer(self, token: &str) -> Self {
        self.header("authorization", format!("Bearer {token}"))
    }

    /// Sets a raw body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets a JSON body and its content type.
    pub fn json<T: Serialize + ?Sized>(self, value: &T) -> Self {
        let body = serde_json::to_vec(value).expect("a serializable value");
        self.header("content-type", "application/json").body(body)
    }

    /// Sets an `application/x-www-form-urlencoded` body from pairs.
    pub fn form(self, pairs: &[(&str, &str)]) -> Self {
        let body = pairs
            .iter()
            .map(|(key, value)| format!("{}={}", form_encode(key), form_encode(value)))
            .collect::<Vec<_>>()
            .join("&");
        self.header("content-type", "application/x-www-form-urlencoded")
            .body(body)
    }

    /// The first value of header `name`, if set.
    pub fn header_value(&self, name: &str) -> Option<&str> {
        header_find(&self.headers, name)
    }

    /// Sends the request through the host and waits for the whole response.
    pub fn send(self) -> Result<Response, HttpError> {
        #[cfg(target_family = "wasm")]
        return wasi_transport::send(self);
        // The test handler sees the request as it would go out, `Content-Length` included.
        #[cfg(not(target_family = "wasm"))]
        return crate::testing::http_send(if content_length_needed(&self) {
            let length = self.body.len().to_string();
            self.header("content-length", length)
        } else {
            self
        });
    }
}

/// A response with its whole body, as [`Request::send`] returns it for every status (a 404 or
/// a 500 is a `Response` too, not an error: turn it into one with
/// [`Response::error_for_status`]).
///
/// When the provider says more in the body than the status does, read the body first:
///
/// ```
/// use bulkhead_sdk::ProviderError;
/// use bulkhead_sdk::http::Response;
///
/// fn checked(response: Response) -> Result<Response, ProviderError> {
///     // Some APIs answer 403 both for a suspended account and for one forbidden resource.
///     if response.status == 403 && response.text().contains("ACCOUNT_SUSPENDED") {
///         return Err(ProviderError::AccountSuspended(response.text()));
///     }
///     response.error_for_status()
/// }
/// # assert!(matches!(checked(Response::new(403, "ACCOUNT_SUSPENDED")), Err(ProviderError::AccountSuspended(_))));
/// # assert!(matches!(checked(Response::new(403, "no access to disk d1")), Err(ProviderError::Forbidden(_))));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The HTTP status code, e.g. 200.
    pub status: u16,
    /// Every header as received (names lowercase), in order; see [`Response::header`].
    pub headers: Vec<(String, String)>,
    /// The whole body, read to the end (at most the host's cap, 4 MiB by default).
    pub body: Vec<u8>,
}

impl Response {
    /// A response for tests.
    pub fn new(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    /// A JSON response for tests.
    pub fn json_body<T: Serialize + ?Sized>(status: u16, value: &T) -> Self {
        let mut response = Self::new(status, serde_json::to_vec(value).expect("serializable"));
        response
            .headers
            .push(("content-type".into(), "application/json".into()));
        response
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        header_find(&self.headers, name)
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON; a body that does not parse is an internal error naming why.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ProviderError> {
        serde_json::from_slice(&self.body).map_err(|err| {
            ProviderError::Internal(format!(
                "unexpected response (HTTP {}): {err}: {}",
                self.status,
                self.text_excerpt()
            ))
        })
    }

    /// The response if its status is 2xx, otherwise the contract error the status means:
    ///
    /// | status | error | what Bulkhead does |
    /// | --- | --- | --- |
    /// | 401 | `Unauthorized` | takes the provider out of service until a probe succeeds |
    /// | 403 | `Forbidden` | fails this call only: the provider stays in service |
    /// | 404 | `NotFound` | fails this call only |
    /// | 429 | `RateLimited` (with `Retry-After`) | retries later |
    /// | 400, 422 | `InvalidSpec` | fails this call only |
    /// | 5xx | `Unavailable` | retries later; three in a row open the breaker |
    /// | other | `Internal` | counts as a transient failure |
    ///
    /// A 403 is about one operation or resource more often than about the credentials; if your
    /// provider answers 403 for bad credentials or a suspended account, look at the body first
    /// and return `Unauthorized` or `AccountSuspended` yourself (see [`Response`]).
    pub fn error_for_status(self) -> Result<Self, ProviderError> {
        if (200..300).contains(&self.status) {
            return Ok(self);
        }
        let message = format!("HTTP {}: {}", self.status, self.text_excerpt());
        Err(match self.status {
            401 => ProviderError::Unauthorized(message),
            403 => ProviderError::Forbidden(message),
            404 => ProviderError::NotFound(message),
            429 => ProviderError::RateLimited(RateLimit {
                retry_after_secs: self.retry_after_secs().unwrap_or(1),
                message,
            }),
            400 | 422 => ProviderError::InvalidSpec(message),
            500..=599 => ProviderError::Unavailable(message),
            _ => ProviderError::Internal(message),
        })
    }

    /// `Retry-After` in seconds, when given as a number.
    pub fn retry_after_secs(&self) -> Option<u32> {
        self.header("retry-after")?.trim().parse().ok()
    }

    fn text_excerpt(&self) -> String {
        self.text().chars().take(300).collect()
    }
}

fn header_find<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.as_str())
}

/// Percent-encodes for a form body or a query string (unreserved characters kept).
pub fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// Whether a request goes out with a `Content-Length` header: when it has a body, or when its
/// method carries one (an empty POST says `0`), unless the plugin set one itself.
fn content_length_needed(request: &Request) -> bool {
    let method_has_body = matches!(request.method, Method::Post | Method::Put | Method::Patch);
    (method_has_body || !request.body.is_empty())
        && request.header_value("content-length").is_none()
}

#[cfg(target_family = "wasm")]
mod wasi_transport {
    //! The request over `wasi:http`: build it, hand it to the outgoing handler, stream the
    //! body out, wait for the response and read its body to the end.

    use super::{HttpError, Method, Request, Response, content_length_needed};
    use crate::bindings::wasi::http::outgoing_handler;
    use crate::bindings::wasi::http::types::{
        ErrorCode, Fields, IncomingBody, Method as WasiMethod, OutgoingBody, OutgoingRequest,
        RequestOptions, Scheme,
    };
    use crate::bindings::wasi::io::streams::StreamError;

    /// How long a connection may take to open (5 s), in nanoseconds.
    const CONNECT_TIMEOUT_NS: u64 = 5_000_000_000;

    pub(super) fn send(request: Request) -> Result<Response, HttpError> {
        let url = request.url.clone();
        let (scheme, authority, path) = split_url(&url)?;
        let headers = Fields::new();
        for (name, value) in &request.headers {
            headers
                .append(&name.to_ascii_lowercase(), value.as_bytes())
                .map_err(|err| HttpError::InvalidUrl(format!("header `{name}`: {err:?}")))?;
        }
        // The body's size is known: say it, so that it is not sent chunked (which many
        // servers and proxies refuse, or read as an empty body).
        if content_length_needed(&request) {
            headers
                .append("content-length", request.body.len().to_string().as_bytes())
                .map_err(|err| HttpError::InvalidUrl(format!("content-length: {err:?}")))?;
        }
        let outgoing = OutgoingRequest::new(headers);
        let method = match request.method {
            Method::Get => WasiMethod::Get,
            Method::Post => WasiMethod::Post,
            Method::Put => WasiMethod::Put,
            Method::Patch => WasiMethod::Patch,
            Method::Delete => WasiMethod::Delete,
            Method::Head => WasiMethod::Head,
        };
        let invalid = |what: &str| HttpError::InvalidUrl(format!("{what} of {url}"));
        outgoing
            .set_method(&method)
            .map_err(|_| invalid("method"))?;
        outgoing
            .set_scheme(Some(&scheme))
            .map_err(|_| invalid("scheme"))?;
        outgoing
            .set_authority(Some(authority))
            .map_err(|_| invalid("authority"))?;
        outgoing
            .set_path_with_query(Some(path))
            .map_err(|_| invalid("path"))?;
        let body = outgoing
            .body()
            .map_err(|_| HttpError::Transport("request body taken twice".into()))?;

        let options = RequestOptions::new();
        // A machine that never answers fails the request after this, not at the deadline.
        let _ = options.set_connect_timeout(Some(CONNECT_TIMEOUT_NS));
        let pending = outgoing_handler::handle(outgoing, Some(options))
            .map_err(|err| code_error(&url, err))?;
        let written = (|| {
            let stream = body
                .write()
                .map_err(|_| HttpError::Transport("request body stream taken twice".into()))?;
            for chunk in request.body.chunks(4096) {
                stream
                    .blocking_write_and_flush(chunk)
                    .map_err(|err| stream_error(&url, err))?;
            }
            Ok(())
        })();
        // When the host refused the request (or could not connect), the body cannot be
        // written; the response says why, so it is asked first.
        let finished = written
            .and_then(|()| OutgoingBody::finish(body, None).map_err(|err| code_error(&url, err)));

        pending.subscribe().block();
        let response = pending
            .get()
            .ok_or_else(|| HttpError::Transport("response not ready after waiting".into()))?
            .map_err(|_| HttpError::Transport("response taken twice".into()))?
            .map_err(|err| code_error(&url, err))?;
        // The server answered (perhaps early, before the whole body): its answer is the result.
        drop(finished);
        let status = response.status();
        let headers = response
            .headers()
            .entries()
            .into_iter()
            .map(|(name, value)| (name, String::from_utf8_lossy(&value).into_owned()))
            .collect();
        let incoming = response
            .consume()
            .map_err(|_| HttpError::Transport("response body taken twice".into()))?;
        let mut body = Vec::new();
        {
            let stream = incoming
                .stream()
                .map_err(|_| HttpError::Transport("response body stream taken twice".into()))?;
            loop {
                match stream.blocking_read(64 * 1024) {
                    Ok(chunk) => body.extend_from_slice(&chunk),
                    Err(StreamError::Closed) => break,
                    Err(err) => return Err(stream_error(&url, err)),
                }
            }
        }
        drop(IncomingBody::finish(incoming));
        Ok(Response {
            status,
            headers,
            body,
        })
    }

    fn split_url(url: &str) -> Result<(Scheme, &str, &str), HttpError> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| HttpError::InvalidUrl(format!("`{url}` has no scheme")))?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            other => {
                return Err(HttpError::InvalidUrl(format!(
                    "unsupported scheme `{other}`"
                )));
            }
        };
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(split);
        if authority.is_empty() {
            return Err(HttpError::InvalidUrl(format!("`{url}` has no host")));
        }
        Ok((scheme, authority, if path.is_empty() { "/" } else { path }))
    }

    fn code_error(url: &str, code: ErrorCode) -> HttpError {
        match code {
            ErrorCode::HttpRequestDenied => HttpError::Denied(url.to_owned()),
            ErrorCode::HttpResponseBodySize(_) => HttpError::ResponseTooLarge(url.to_owned()),
            other => HttpError::Transport(format!("{url}: {other:?}")),
        }
    }

    fn stream_error(url: &str, err: StreamError) -> HttpError {
        match err {
            StreamError::LastOperationFailed(err) => {
                match crate::bindings::wasi::http::types::http_error_code(&err) {
                    Some(code) => code_error(url, code),
                    None => HttpError::Transport(format!("{url}: {}", err.to_debug_string())),
                }
            }
            StreamError::Closed => HttpError::Transport(format!("{url}: stream closed early")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> Result<Response, ProviderError> {
        let mut response = Response::new(code, "nope");
        response.headers.push(("Retry-After".into(), "7".into()));
        response.error_for_status()
    }

    #[test]
    fn statuses_map_to_contract_errors() {
        assert!(status(204).is_ok());
        assert!(matches!(status(401), Err(ProviderError::Unauthorized(_))));
        assert!(matches!(status(403), Err(ProviderError::Forbidden(_))));
        assert!(matches!(status(404), Err(ProviderError::NotFound(_))));
        assert!(matches!(status(422), Err(ProviderError::InvalidSpec(_))));
        assert!(matches!(status(503), Err(ProviderError::Unavailable(m)) if m == "HTTP 503: nope"));
        assert!(matches!(
            status(429),
            Err(ProviderError::RateLimited(RateLimit {
                retry_after_secs: 7,
                ..
            }))
        ));
        assert!(matches!(status(418), Err(ProviderError::Internal(_))));
    }

    #[test]
    fn json_and_form_bodies() {
        let request = Request::post("http://x/").json(&serde_json::json!({"a": 1}));
        assert_eq!(
            request.header_value("Content-Type"),
            Some("application/json")
        );
        assert_eq!(request.body, br#"{"a":1}"#);
        let form = Request::post("http://x/").form(&[("grant type", "a/b=c")]);
        assert_eq!(form.body, b"grant%20type=a%2Fb%3Dc");
        let bad: Result<serde_json::Value, _> = Response::new(200, "<html>").json();
        assert!(matches!(bad, Err(ProviderError::Internal(m)) if m.contains("<html>")));
    }

    #[test]
    fn bodies_are_sent_with_their_length() {
        assert!(content_length_needed(&Request::post("http://x/").json(&1)));
        assert!(content_length_needed(&Request::post("http://x/")));
        assert!(content_length_needed(&Request::put("http://x/").body("a")));
        assert!(!content_length_needed(&Request::get("http://x/")));
        assert!(!content_length_needed(
            &Request::post("http://x/")
                .header("Content-Length", "1")
                .body("a")
        ));
    }

    #[test]
    fn native_requests_go_to_the_test_handler() {
        assert!(matches!(
            Request::get("http://a/").send(),
            Err(HttpError::Denied(_))
        ));
        crate::testing::set_http_handler(|request| {
            Ok(Response::json_body(
                200,
                &serde_json::json!({"url": request.url}),
            ))
        });
        let answer: serde_json::Value = Request::get("http://a/b").send().unwrap().json().unwrap();
        assert_eq!(answer["url"], "http://a/b");
        crate::testing::set_http_handler(|request| {
            Ok(Response::new(
                200,
                request
                    .header_value("content-length")
                    .unwrap_or("none")
                    .to_owned(),
            ))
        });
        let sent = Request::post("http://a/").json(&[1, 2]).send().unwrap();
        assert_eq!(sent.text(), "5");
    }
}
