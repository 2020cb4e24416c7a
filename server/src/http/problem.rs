//! Errors as HTTP answers, in one place: the status of each [`ErrorKind`], and the RFC 9457
//! `application/problem+json` body of every error response (with the request id, added by
//! [`crate::http::middleware`]). An error's cause never reaches the body.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::{AppError, ErrorCode, ErrorKind};

/// The MIME type of problem bodies.
pub const PROBLEM_JSON: HeaderValue = HeaderValue::from_static("application/problem+json");

/// The body of every error response (RFC 9457 problem details).
#[derive(Debug, Serialize, serde::Deserialize, ToSchema)]
pub struct Problem {
    /// Always `about:blank`: `code` identifies the kind of problem.
    #[serde(rename = "type")]
    pub problem_type: String,
    /// The HTTP reason phrase of `status`.
    pub title: String,
    pub status: u16,
    /// A stable, machine-readable identifier of the problem, e.g. `not_found`.
    pub code: ErrorCode,
    /// What went wrong, for people.
    pub detail: String,
    /// The `x-request-id` of the request, to quote when reporting the problem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// The status of each kind of error.
pub const fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Malformed => StatusCode::BAD_REQUEST,
        ErrorKind::Unauthenticated => StatusCode::UNAUTHORIZED,
        ErrorKind::Forbidden => StatusCode::FORBIDDEN,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        ErrorKind::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::Gone => StatusCode::GONE,
        ErrorKind::PreconditionFailed => StatusCode::PRECONDITION_FAILED,
        ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ErrorKind::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorKind::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorKind::Upstream => StatusCode::BAD_GATEWAY,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
    }
}

/// The problem body of an answer with `status` and `code`, without the request id.
pub fn problem(status: StatusCode, code: ErrorCode, detail: &str) -> Problem {
    Problem {
        problem_type: "about:blank".into(),
        title: status.canonical_reason().unwrap_or("Error").into(),
        status: status.as_u16(),
        code,
        detail: detail.to_owned(),
        request_id: None,
    }
}

/// A problem answer with `status`: the body, its content type, and `WWW-Authenticate` on 401.
pub fn problem_response(status: StatusCode, code: ErrorCode, detail: &str) -> Response {
    let mut problem = problem(status, code, detail);
    problem.request_id = crate::http::middleware::current_request_id();
    let body = serde_json::to_vec(&problem).unwrap_or_default();
    let mut response = (status, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, PROBLEM_JSON);
    if status == StatusCode::UNAUTHORIZED {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let mut response = problem_response(status_of(self.kind), self.code, &self.detail);
        if let Some(secs) = self.retry_after_secs {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each code's usual status, as the OpenAPI document and the clients know them.
    #[test]
    fn codes_have_the_statuses_clients_know() {
        let expected = [
            (ErrorCode::InvalidRequest, 422),
            (ErrorCode::InvalidBody, 422),
            (ErrorCode::MalformedJson, 400),
            (ErrorCode::NotFound, 404),
            (ErrorCode::NotReady, 503),
            (ErrorCode::LastOwner, 409),
            (ErrorCode::RoutingHistoryGone, 410),
            (ErrorCode::PreconditionFailed, 412),
            (ErrorCode::InvalidSignature, 401),
            (ErrorCode::ProviderTimeout, 504),
            (ErrorCode::PluginFailed, 502),
            (ErrorCode::TooManyAttempts, 429),
        ];
        for (code, status) in expected {
            assert_eq!(status_of(code.kind()).as_u16(), status, "{code}");
        }
        let malformed = AppError::malformed(ErrorCode::InvalidBody, "not JSON");
        assert_eq!(status_of(malformed.kind), StatusCode::BAD_REQUEST);
    }
}
