//! Extractors that answer bad input with problem details instead of axum's plain-text
//! rejections, the caller's identity, and the `If-Match` precondition.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts};
use axum::http::StatusCode;
use axum::http::request::Parts;

use crate::authz::{OpContext, Principal, RouteScope, Scoped, WriteScope};
use crate::error::{AppError, ErrorCode};

/// A JSON body. Malformed JSON is 400, a wrong content type 415, a body over the limit 413, and
/// wrong types, missing or unknown fields 422.
#[derive(Debug, FromRequest)]
#[from_request(via(axum::Json), rejection(AppError))]
pub struct ApiJson<T>(pub T);

/// Path parameters; a malformed id is 400.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(AppError))]
pub struct ApiPath<T>(pub T);

/// Query parameters; unknown or malformed ones are 400.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(AppError))]
pub struct ApiQuery<T>(pub T);

impl From<JsonRejection> for AppError {
    fn from(rejection: JsonRejection) -> Self {
        let code = match rejection.status() {
            StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
            StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::BodyTooLarge,
            StatusCode::UNPROCESSABLE_ENTITY => ErrorCode::InvalidBody,
            // 400: a syntax error, or a body that could not be read.
            _ => ErrorCode::MalformedJson,
        };
        AppError::new(code, rejection.body_text())
    }
}

impl From<PathRejection> for AppError {
    fn from(rejection: PathRejection) -> Self {
        AppError::new(ErrorCode::InvalidPath, rejection.body_text())
    }
}

impl From<QueryRejection> for AppError {
    fn from(rejection: QueryRejection) -> Self {
        AppError::new(ErrorCode::InvalidQuery, rejection.body_text())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Principal {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Principal>().cloned().ok_or_else(|| {
            AppError::unauthenticated("this endpoint needs `Authorization: Bearer <token>`")
        })
    }
}

impl<S: Send + Sync> FromRequestParts<S> for OpContext {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Scoped(ctx, _) = Scoped::<WriteScope>::from_request_parts(parts, state).await?;
        Ok(ctx)
    }
}

impl<S: Send + Sync, R: RouteScope> FromRequestParts<S> for Scoped<R> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let principal = Principal::from_request_parts(parts, state).await?;
        principal.require_scope(R::SCOPE)?;
        let request_id = super::middleware::current_request_id().unwrap_or_default();
        Ok(Scoped(
            OpContext {
                principal,
                request_id,
            },
            std::marker::PhantomData,
        ))
    }
}

/// The caller of a routing route: an administrator's credential with `routing:read`, checked
/// before the request body is read.
pub struct RoutingReader(pub Principal);

impl<S: Send + Sync> FromRequestParts<S> for RoutingReader {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let principal = Principal::from_request_parts(parts, state).await?;
        principal.require_routing_read()?;
        Ok(Self(principal))
    }
}

/// The `If-Match` header, if any.
#[derive(Debug)]
pub struct IfMatch(pub Option<String>);

impl IfMatch {
    pub fn as_deref(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for IfMatch {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        match parts.headers.get(axum::http::header::IF_MATCH) {
            None => Ok(IfMatch(None)),
            Some(value) => value
                .to_str()
                .map(|v| IfMatch(Some(v.to_owned())))
                .map_err(|_| AppError::new(ErrorCode::InvalidHeader, "If-Match is not valid text")),
        }
    }
}
