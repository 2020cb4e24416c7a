//! The one error type of Bulkhead's application code, [`AppError`]: a stable,
//! machine-readable [`ErrorCode`], a `detail` written for the client, and, when something went
//! wrong inside, its cause. The cause is kept for logs and operators (a background task's
//! status, the reconciler's recent errors) and never sent to a client: a client sees an
//! incident id it can quote, and the log line with that id holds the cause.
//!
//! The mapping to HTTP (each code's status, the problem body) is in one place:
//! [`crate::http::problem`].

use std::sync::Arc;

use sea_orm::{DbErr, SqlErr};
use serde::Serialize;
use utoipa::ToSchema;

/// A failure of an application method: what the client is told, and what went wrong inside.
#[derive(Debug, Clone)]
pub struct AppError {
    pub code: ErrorCode,
    /// What kind of failure it is: its code's kind unless said otherwise.
    pub kind: ErrorKind,
    /// What went wrong, for the client (never a secret, never an internal cause).
    pub detail: String,
    /// Seconds after which retrying may succeed (sent as `Retry-After`).
    pub retry_after_secs: Option<u64>,
    /// What went wrong inside, for logs and operators only.
    cause: Option<Arc<Cause>>,
}

#[derive(Debug)]
struct Cause {
    /// Quoted to the client in place of the cause, and logged with it.
    incident: Option<String>,
    text: String,
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
    FutureDelivery = "future_delivery",
    HostnameTaken = "hostname_taken",
    IdentityNotLinked = "identity_not_linked",
    IdentityTaken = "identity_taken",
    IdempotencyInProgress = "idempotency_in_progress",
    IdempotencyKeyReused = "idempotency_key_reused",
    IdempotencyResponseLost = "idempotency_response_lost",
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
    LimitReached = "limit_reached",
    MalformedJson = "malformed_json",
    MethodNotAllowed = "method_not_allowed",
    NameTaken = "name_taken",
    NoCommit = "no_commit",
    NoHealthyDeployment = "no_healthy_deployment",
    NoLogs = "no_logs",
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

/// What kind of failure an error is, apart from its code: what the client did wrong, or what
/// is not possible now. [`crate::http::problem`] gives each kind its HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request cannot be read: syntax, types, a missing header.
    Malformed,
    /// No credential, or one that is not valid.
    Unauthenticated,
    /// The caller may not do this.
    Forbidden,
    NotFound,
    /// The endpoint does not take this method.
    MethodNotAllowed,
    /// The request took too long to arrive.
    RequestTimeout,
    /// The request conflicts with the state of a resource.
    Conflict,
    /// What was asked for is no longer kept.
    Gone,
    /// An `If-Match` that does not match.
    PreconditionFailed,
    TooLarge,
    UnsupportedMediaType,
    /// The request is readable but its values are not acceptable.
    Invalid,
    TooManyRequests,
    /// A failure of Bulkhead itself.
    Internal,
    /// A provider (through its plugin) refused or failed.
    Upstream,
    /// Not now: retrying later may succeed.
    Unavailable,
    /// A provider (through its plugin) did not answer in time.
    UpstreamTimeout,
}

impl ErrorCode {
    /// The kind of failure a code is (an error may say otherwise: [`AppError::malformed`]).
    pub const fn kind(self) -> ErrorKind {
        use ErrorCode::*;
        use ErrorKind as K;
        match self {
            BadRequest | BodyUnreadable | InvalidCursor | InvalidHeader | InvalidPath
            | InvalidQuery | MalformedJson | SignInFailed => K::Malformed,
            Unauthenticated | InvalidSignature => K::Unauthenticated,
            Forbidden | CsrfFailed | EdgeOwned | IdentityNotLinked | InsufficientScope
            | SessionRequired => K::Forbidden,
            NotFound | InstanceNotFound => K::NotFound,
            MethodNotAllowed => K::MethodNotAllowed,
            Timeout => K::RequestTimeout,
            AlreadyExists
            | AlreadyInvited
            | AlreadyMember
            | Conflict
            | DeploymentFinished
            | EmailTaken
            | EnvironmentNotEmpty
            | EvacuationRunning
            | HostnameTaken
            | IdentityTaken
            | IdempotencyInProgress
            | IdempotencyResponseLost
            | InstancesRunning
            | LastOwner
            | LimitReached
            | NameTaken
            | NoCommit
            | NoHealthyDeployment
            | NoLogs
            | NothingToRollBack
            | PasswordChanged
            | PluginExists
            | PluginUnhealthy
            | ProviderChanged
            | ProviderDisabled
            | ProviderDrained
            | ProviderExists
            | ProviderNotServing
            | ProviderQuotaExceeded
            | RoutingKeyActive
            | VersionExists => K::Conflict,
            RoutingHistoryGone => K::Gone,
            PreconditionFailed => K::PreconditionFailed,
            BodyTooLarge => K::TooLarge,
            UnsupportedMediaType => K::UnsupportedMediaType,
            // `invalid_body`: a body whose values the endpoint does not take (serde's data
            // errors); one that cannot be read at all is `malformed_json`.
            ConfigurationMissing | DomainUnverified | IdempotencyKeyReused | InvalidBody
            | InvalidRequest | InvalidSpec | PluginRejected | StaleDelivery | FutureDelivery => {
                K::Invalid
            }
            TooManyAttempts => K::TooManyRequests,
            Internal | Error => K::Internal,
            PluginFailed
            | ProviderAccountSuspended
            | ProviderError
            | ProviderForbidden
            | ProviderMisconfigured
            | ProviderUnauthorized => K::Upstream,
            Busy | DnsUnavailable | NotReady | ProviderRateLimited | ProviderUnavailable
            | RoutingTableNotReady | SignInUnavailable => K::Unavailable,
            ProviderTimeout => K::UpstreamTimeout,
        }
    }
}

pub type AppResult<T> = Result<T, AppError>;

impl AppError {
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self {
            code,
            kind: code.kind(),
            detail: detail.into(),
            retry_after_secs: None,
            cause: None,
        }
    }

    /// Adds `Retry-After`.
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs);
        self
    }

    /// Keeps `cause` (what went wrong inside) with the error, for logs and operators.
    pub fn with_cause(mut self, cause: impl std::fmt::Display) -> Self {
        self.cause = Some(Arc::new(Cause {
            incident: None,
            text: cause.to_string(),
        }));
        self
    }

    /// The request cannot be read, with `code` (for a code that usually means a request that
    /// can be read but not accepted, such as `invalid_body` of a delivery that is not JSON).
    pub fn malformed(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Malformed,
            ..Self::new(code, detail)
        }
    }

    /// The request's values are not acceptable (malformed requests have codes of their own).
    pub fn invalid(detail: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, detail)
    }

    pub fn unauthenticated(detail: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthenticated, detail)
    }

    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(ErrorCode::Forbidden, detail)
    }

    /// `resource` is the kind of thing that was looked for, e.g. `project`.
    pub fn not_found(resource: &str) -> Self {
        Self::new(ErrorCode::NotFound, format!("{resource} not found"))
    }

    pub fn precondition_failed() -> Self {
        Self::new(
            ErrorCode::PreconditionFailed,
            "the resource changed since it was read: If-Match does not match its current ETag",
        )
    }

    /// Not now: this replica cannot serve it (the database unreachable, a lease lost, a
    /// table not built yet); retrying shortly may succeed.
    pub fn not_ready(detail: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotReady, detail).retry_after(1)
    }

    /// A failure of Bulkhead itself. The client is told an incident id; `cause` is logged with
    /// it now and kept with the error.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        let incident = format!("{:08x}", rand::random::<u32>());
        let text = cause.to_string();
        tracing::error!(%incident, cause = %text, "internal error");
        Self {
            code: ErrorCode::Internal,
            kind: ErrorKind::Internal,
            detail: format!("internal error (incident {incident}); quote it when reporting it"),
            retry_after_secs: None,
            cause: Some(Arc::new(Cause {
                incident: Some(incident),
                text,
            })),
        }
    }

    /// The same error with another code (and that code's kind).
    pub fn with_code(mut self, code: ErrorCode) -> Self {
        self.code = code;
        self.kind = code.kind();
        self
    }

    /// What went wrong inside, if it is known.
    pub fn cause(&self) -> Option<&str> {
        self.cause.as_deref().map(|cause| cause.text.as_str())
    }
}

/// For operators and logs: the detail, and the cause when there is one (never send this to a
/// client; send [`AppError::detail`]).
impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.cause.as_deref() {
            None => f.write_str(&self.detail),
            Some(Cause {
                incident: Some(incident),
                text,
            }) => write!(f, "{text} (incident {incident})"),
            Some(Cause {
                incident: None,
                text,
            }) => write!(f, "{}: {text}", self.detail),
        }
    }
}

impl std::error::Error for AppError {}

/// Whether `err` says the database could not be reached (not that a statement failed): no
/// connection to be had, the one in use broke, or the server ended it as it shut down or
/// while it starts (SQLSTATE class 08, connection exception, and 57P, e.g. `57P01
/// admin_shutdown` on every session of a restarted PostgreSQL), or it is a standby now
/// (`25006`: a failover turned it read-only; [`crate::db::primary`] finds the new primary).
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
        // 25006 read_only_sql_transaction: the server it reached became a standby.
        Error::Database(db) => db.code().is_some_and(|code| {
            code.starts_with("08") || code.starts_with("57P") || code == "25006"
        }),
        _ => false,
    }
}

/// For conversions that cannot fail (a `From` where a `TryFrom` is asked for).
impl From<std::convert::Infallible> for AppError {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

impl From<DbErr> for AppError {
    fn from(err: DbErr) -> Self {
        if database_unreachable(&err) {
            // This replica is cut off from the database (or it restarts): another replica
            // may answer, or this one shortly.
            tracing::warn!(error = %err, "database unreachable");
            return Self::not_ready("the database is unreachable; try again shortly")
                .with_cause(err);
        }
        match err.sql_err() {
            Some(SqlErr::UniqueConstraintViolation(_)) => Self::new(
                ErrorCode::AlreadyExists,
                "a resource with these unique values already exists",
            )
            .with_cause(err),
            Some(SqlErr::ForeignKeyConstraintViolation(_)) => Self::new(
                ErrorCode::Conflict,
                "the resource refers to, or is referred to by, another resource",
            )
            .with_cause(err),
            _ => Self::internal(format!("database: {err}")),
        }
    }
}

/// For `map_err` on an insert or update: a unique-constraint violation becomes `code` with
/// `detail` (which say which value is taken); any other error maps as usual.
pub fn unique_violation_as(
    code: ErrorCode,
    detail: &'static str,
) -> impl FnOnce(DbErr) -> AppError {
    move |err| match err.sql_err() {
        Some(SqlErr::UniqueConstraintViolation(_)) => AppError::new(code, detail),
        _ => AppError::from(err),
    }
}

#[cfg(test)]
mod tests {
    use super::{AppError, ErrorCode};

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
    fn an_internal_cause_is_kept_for_operators_and_not_in_the_detail() {
        let err = AppError::internal("database: connection reset by peer");
        assert!(!err.detail.contains("connection reset"), "{}", err.detail);
        assert!(
            err.detail.starts_with("internal error (incident "),
            "{}",
            err.detail
        );
        assert_eq!(err.cause(), Some("database: connection reset by peer"));
        let shown = err.to_string();
        assert!(
            shown.starts_with("database: connection reset by peer (incident "),
            "{shown}"
        );
        let incident = &err.detail["internal error (incident ".len()..][..8];
        assert!(shown.contains(incident), "{shown} names {incident}");
        let plain = AppError::not_ready("try again").with_cause("pool timed out");
        assert_eq!(plain.to_string(), "try again: pool timed out");
        assert_eq!(plain.detail, "try again");
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
