//! Outbound HTTP for plugins, over the host's standard `wasi:http/outgoing-handler`.
//!
//! ```ignore
//! use bulkhead_sdk::http::Request;
//!
//! let zones: Zones = Request::get("https://compute.googleapis.com/compute/v1/projects/p/zones")
//!     .bearer(&token)
//!     .send()?            // transport errors and refusals become `ProviderError`s
//!     .error_for_status()? // 401/403 → unauthorized, 404 → not found, 429 → rate limited, ...
//!     .json()?;
//! ```
//!
//! The host sends a request only to the `host:port` destinations on the provider's allowlist;
//! any other request fails with [`HttpError::Denied`]. Response bodies are capped by the host.
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
        #[cfg(not(target_family = "wasm"))]
        return crate::testing::http_send(self);
    }
}

/// A response with its whole body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
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
    /// 401 and 403 → unauthorized, 404 → not found, 429 → rate limited (with `Retry-After`),
    /// 400 and 422 → invalid spec, 5xx → unavailable, anything else → internal. Providers that
    /// say more (e.g. "account suspended" in a 403 body) should look at the body first.
    pub fn error_for_status(self) -> Result<Self, ProviderError> {
        if (200..300).contains(&self.status) {
            return Ok(self);
        }
        let message = format!("HTTP {}: {}", self.status, self.text_excerpt());
        Err(match self.status {
            401 | 403 => ProviderError::Unauthorized(message),
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

#[cfg(target_family = "wasm")]
mod wasi_transport {
    //! The request over `wasi:http`: build it, hand it to the outgoing handler, stream the
    //! body out, wait for the response and read its body to the end.

    use super::{HttpError, Method, Request, Response};
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
        assert!(matches!(status(403), Err(ProviderError::Unauthorized(_))));
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
    }
}
