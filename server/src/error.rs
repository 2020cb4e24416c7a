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
    pub code: ErrorCode,
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
    pub code: ErrorCode,
    /// What went wrong, for people.
    pub detail: String,
    /// The `x-request-id` of the request, to quote when reporting the problem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// Declares [`ErrorCode`] from one list of `Variant = "code"`.
macro_rules! error_codes {
    ($($variant:ident = $code:literal,)*) => {
        /// Every `code` a problem response can carry: one list, in the OpenAPI document as an
        /// enum, so that clients match on codes the compiler knows.
        /// (Each variant is its code in CamelCase: serde and the OpenAPI document name it
        /// `snake_case`, and a unit test checks that this is the code.)
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize, ToSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum ErrorCode {
            $($variant,)*
        }

        impl ErrorCode {
            /// Every code, in the order of the list.
            pub const ALL: &[ErrorCode] = &[$(ErrorCode::$variant),*];

            /// The code as it appears in a problem's `code`.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $code,)*
                }
            }
        }
    };
}

error_codes! {
    AlreadyExists = "already_exists",
    AlreadyInvited = "already_invited",
    AlreadyMember = "already_member",
    BadRequest = "bad_request",
    BodyTooLarge = "body_too_large",
    BodyUnreadable = "body_unreadable",
    Busy = "busy",
    ConfigurationMissing = "configuration_missing",
    Conflict = "conflict",
    CsrfFailed = "csrf_failed",
    DeploymentFinished = "deployment_finished",
    DnsUnavailable = "dns_unavailable",
    DomainUnverified = "domain_unverified",
    EdgeOwned = "edge_owned",
    EmailTaken = "email_taken",
    EnvironmentNotEmpty = "environment_not_empty",
    Error = "error",
    EvacuationRunning = "evacuation_running",
    Forbidden = "forbidden",
    HostnameTaken = "hostname_taken",
    IdentityNotLinked = "identity_not_linked",
    IdentityTaken = "identity_taken",
    IdempotencyInProgress = "idempotency_in_progress",
    IdempotencyKeyReused = "idempotency_key_reused",
    InstanceNotFound = "instance_not_found",
    InstancesRunning = "instances_running",
    InsufficientScope = "insufficient_scope",
    Internal = "internal",
    InvalidBody = "invalid_body",
    InvalidCursor = "invalid_cursor",
    InvalidHeader = "invalid_header",
    InvalidPath = "invalid_path",
    InvalidQuery = "invalid_query",
    InvalidRequest = "invalid_request",
    InvalidSignature = "invalid_signature",
    InvalidSpec = "invalid_spec",
    LastOwner = "last_owner",
    MalformedJson = "malformed_json",
    MethodNotAllowed = "method_not_allowed",
    NameTaken = "name_taken",
    NoHealthyDeployment = "no_healthy_deployment",
    NotFound = "not_found",
    NotReady = "not_ready",
    NothingToRollBack = "nothing_to_roll_back",
    PasswordChanged = "password_changed",
    PluginExists = "plugin_exists",
    PluginFailed = "plugin_failed",
    PluginRejected = "plugin_rejected",
    PluginUnhealthy = "plugin_unhealthy",
    PreconditionFailed = "precondition_failed",
    ProviderAccountSuspended = "provider_account_suspended",
    ProviderChanged = "provider_changed",
    ProviderDisabled = "provider_disabled",
    ProviderDrained = "provider_drained",
    ProviderError = "provider_error",
    ProviderExists = "provider_exists",
    ProviderForbidden = "provider_forbidden",
    ProviderMisconfigured = "provider_misconfigured",
    ProviderNotServing = "provider_not_serving",
    ProviderQuotaExceeded = "provider_quota_exceeded",
    ProviderRateLimited = "provider_rate_limited",
    ProviderTimeout = "provider_timeout",
    ProviderUnauthorized = "provider_unauthorized",
    ProviderUnavailable = "provider_unavailable",
    RoutingHistoryGone = "routing_history_gone",
    RoutingKeyActive = "routing_key_active",
    RoutingTableNotReady = "routing_table_not_ready",
    SessionRequired = "session_required",
    SignInFailed = "sign_in_failed",
    SignInUnavailable = "sign_in_unavailable",
    StaleDelivery = "stale_delivery",
    Timeout = "timeout",
    TooManyAttempts = "too_many_attempts",
    Unauthenticated = "unauthenticated",
    UnsupportedMediaType = "unsupported_media_type",
    VersionExists = "version_exists",
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(status: StatusCode, code: ErrorCode, detail: impl Into<String>) -> Self {
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
    pub fn bad_request(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, detail)
    }

    /// The request is well formed but its values are not acceptable.
    pub fn invalid(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::InvalidRequest,
            detail,
        )
    }

    pub fn unauthenticated(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthenticated, detail)
    }

    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, ErrorCode::Forbidden, detail)
    }

    /// `resource` is the kind of thing that was looked for, e.g. `project`.
    pub fn not_found(resource: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            ErrorCode::NotFound,
            format!("{resource} not found"),
        )
    }

    pub fn conflict(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, detail)
    }

    pub fn precondition_failed() -> Self {
        Self::new(
            StatusCode::PRECONDITION_FAILED,
            ErrorCode::PreconditionFailed,
            "the resource changed since it was read: If-Match does not match its current ETag",
        )
    }

    /// A failure of Bulkhead itself. `cause` is logged, never sent to the client.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(%cause, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Internal,
            "internal error; quote the request id when reporting it",
        )
    }

    /// The same error with another machine-readable code.
    pub fn with_code(mut self, code: ErrorCode) -> Self {
        self.code = code;
        self
    }

    /// The problem body, without the request id.
    pub fn problem(&self) -> Problem {
        Problem {
            problem_type: "about:blank".into(),
            title: self.status.canonical_reason().unwrap_or("Error").into(),
            status: self.status.as_u16(),
            code: self.code,
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

/// Whether `err` says the database could not be reached (not that a statement failed): no
/// connection to be had, the one in use broke, or the server ended it as it shut down or
/// while it starts (SQLSTATE class 08, connection exception, and 57P, e.g. `57P01
/// admin_shutdown` on every session of a restarted PostgreSQL).
pub fn database_unreachable(err: &DbErr) -> bool {
    use sea_orm::RuntimeErr;
    use sea_orm::sqlx::Error;
    let runtime = match err {
        // No connection to be had, however it failed (refused, reset, or closed before the
        // server's first answer: `unexpected response from SSLRequest`).
        DbErr::ConnectionAcquire(_) | DbErr::Conn(_) => return true,
        DbErr::Exec(runtime) | DbErr::Query(runtime) => runtime,
        _ => return false,
    };
    let RuntimeErr::SqlxError(sqlx) = runtime else {
        return false;
    };
    match &**sqlx {
        Error::Io(_)
        | Error::Tls(_)
        | Error::PoolTimedOut
        | Error::PoolClosed
        | Error::WorkerCrashed => true,
        Error::Database(db) => db
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P")),
        _ => false,
    }
}

impl From<DbErr> for ApiError {
    fn from(err: DbErr) -> Self {
        if database_unreachable(&err) {
            // This replica is cut off from the database (or it restarts): another replica
            // may answer, or this one shortly.
            tracing::warn!(error = %err, "database unreachable");
            return Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::NotReady,
                "the database is unreachable; try again shortly",
            )
            .retry_after(1);
        }
        match err.sql_err() {
            Some(SqlErr::UniqueConstraintViolation(_)) => Self::conflict(
                ErrorCode::AlreadyExists,
                "a resource with these unique values already exists",
            ),
            Some(SqlErr::ForeignKeyConstraintViolation(_)) => Self::conflict(
                ErrorCode::Conflict,
                "the resource refers to, or is referred to by, another resource",
            ),
            _ => Self::internal(format!("database: {err}")),
        }
    }
}

/// For `map_err` on an insert or update: a unique-constraint violation becomes 409 with `code`
/// and `detail` (which say which value is taken); any other error maps as usual.
pub fn unique_violation_as(
    code: ErrorCode,
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

#[cfg(test)]
mod tests {
    use super::ErrorCode;

    #[test]
    fn a_connection_that_cannot_be_had_is_unreachable_and_a_failed_statement_is_not() {
        use sea_orm::{DbErr, RuntimeErr};
        let unreachable = [
            DbErr::Conn(RuntimeErr::Internal(
                "unexpected response from SSLRequest".into(),
            )),
            DbErr::Query(RuntimeErr::SqlxError(std::sync::Arc::new(
                sea_orm::sqlx::Error::PoolTimedOut,
            ))),
            DbErr::Exec(RuntimeErr::SqlxError(std::sync::Arc::new(
                sea_orm::sqlx::Error::Io(std::io::ErrorKind::ConnectionReset.into()),
            ))),
        ];
        for err in &unreachable {
            assert!(super::database_unreachable(err), "{err}");
        }
        let failed = [
            DbErr::RecordNotFound("project".into()),
            DbErr::Query(RuntimeErr::Internal("syntax error".into())),
            DbErr::Exec(RuntimeErr::SqlxError(std::sync::Arc::new(
                sea_orm::sqlx::Error::RowNotFound,
            ))),
        ];
        for err in &failed {
            assert!(!super::database_unreachable(err), "{err}");
        }
    }

    #[test]
    fn each_code_serializes_as_itself() {
        for code in ErrorCode::ALL {
            let json = serde_json::to_value(code).unwrap();
            assert_eq!(json, code.as_str(), "{code:?}");
            assert_eq!(serde_json::from_value::<ErrorCode>(json).unwrap(), *code);
        }
    }
}
