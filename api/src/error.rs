//! The one error type of the external API, and its single mapping to HTTP.
//!
//! Every failure a client can see is an [`ApiError`]: a status, a stable machine-readable `code`,
//! and a `detail` written for people. Internal causes (database errors, bugs) are logged with the
//! request id and never shown to the client. The response body is RFC 9457
//! `application/problem+json`; the request id is added by [`crate::http::middleware`].

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sea_orm::{DbErr, SqlErr};
use serde::Serialize;
use utoipa::ToSchema;

/// A failure answered to the client.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub detail: String,
    /// Seconds after which retrying may succeed (sent as `Retry-After`).
    pub retry_after_secs: Option<u64>,
}

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
    pub code: String,
    /// What went wrong, for people.
    pub detail: String,
    /// The `x-request-id` of the request, to quote when reporting the problem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            code,
            detail: detail.into(),
            retry_after_secs: None,
        }
    }

    /// Adds `Retry-After`.
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs);
        self
    }

    /// The request is malformed: bad JSON, wrong types, unknown fields, bad path or query.
    pub fn bad_request(code: &'static str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, detail)
    }

    /// The request is well formed but its values are not acceptable.
    pub fn invalid(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", detail)
    }

    pub fn unauthenticated(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthenticated", detail)
    }

    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", detail)
    }

    /// `resource` is the kind of thing that was looked for, e.g. `project`.
    pub fn not_found(resource: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{resource} not found"),
        )
    }

    pub fn conflict(code: &'static str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, detail)
    }

    pub fn precondition_failed() -> Self {
        Self::new(
            StatusCode::PRECONDITION_FAILED,
            "precondition_failed",
            "the resource changed since it was read: If-Match does not match its current ETag",
        )
    }

    /// A failure of Bulkhead itself. `cause` is logged, never sent to the client.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(%cause, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; quote the request id when reporting it",
        )
    }

    /// The same error with another machine-readable code.
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = code;
        self
    }

    /// The problem body, without the request id.
    pub fn problem(&self) -> Problem {
        Problem {
            problem_type: "about:blank".into(),
            title: self.status.canonical_reason().unwrap_or("Error").into(),
            status: self.status.as_u16(),
            code: self.code.into(),
            detail: self.detail.clone(),
            request_id: None,
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.status, self.code, self.detail)
    }
}

impl From<DbErr> for ApiError {
    fn from(err: DbErr) -> Self {
        match err.sql_err() {
            Some(SqlErr::UniqueConstraintViolation(_)) => Self::conflict(
                "already_exists",
                "a resource with these unique values already exists",
            ),
            Some(SqlErr::ForeignKeyConstraintViolation(_)) => Self::conflict(
                "conflict",
                "the resource refers to, or is referred to by, another resource",
            ),
            _ => Self::internal(format!("database: {err}")),
        }
    }
}

/// For `map_err` on an insert or update: a unique-constraint violation becomes 409 with `code`
/// and `detail` (which say which value is taken); any other error maps as usual.
pub fn unique_violation_as(
    code: &'static str,
    detail: &'static str,
) -> impl FnOnce(DbErr) -> ApiError {
    move |err| match err.sql_err() {
        Some(SqlErr::UniqueConstraintViolation(_)) => ApiError::conflict(code, detail),
        _ => ApiError::from(err),
    }
}

/// The MIME type of problem bodies.
pub const PROBLEM_JSON: HeaderValue = HeaderValue::from_static("application/problem+json");

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut problem = self.problem();
        problem.request_id = crate::http::middleware::current_request_id();
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut response = (self.status, body).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, PROBLEM_JSON);
        if let Some(secs) = self.retry_after_secs {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
