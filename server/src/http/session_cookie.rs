//! `/v1/auth/session`: the cookie mode of sessions, for the dashboard. The refresh token lives
//! in an `HttpOnly; Secure; SameSite=Strict` cookie scoped to this path, so no script (and no
//! other path of the origin) ever sees it; the access token is answered in the body, for the
//! page to keep in memory only.
//!
//! CSRF: the refresh and the logout need `X-CSRF-Token`, a digest of the refresh token that the
//! page reads from the `bulkhead_csrf` cookie. It is a double-submit cookie bound to the session:
//! a cookie planted by a sibling domain cannot match a refresh token it does not know, and a page
//! of another origin can neither read the cookie nor send the header without a CORS preflight.
//! Besides, every request a browser marks with `Sec-Fetch-Site` other than `same-origin` is
//! refused.

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cookie::{Cookie, SameSite};
use serde::Serialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::client_addr::ClientAddr;
use super::extract::{ApiJson, ApiPath};
use crate::app::App;
use crate::app::identity::sessions::{LoginRequest, RefreshRequest, SessionTokens};
use crate::app::identity::sign_in::outside::SignInFinish;
use crate::error::{AppError, AppResult, ErrorCode};

/// The path the refresh cookie is scoped to (the endpoints of this module).
pub const SESSION_PATH: &str = "/v1/auth/session";
/// The refresh token. `__Secure-`: a browser takes it only with `Secure`, from a secure origin.
pub const REFRESH_COOKIE: &str = "__Secure-bulkhead_refresh";
/// The CSRF token, readable by the page's script (it is no credential by itself).
pub const CSRF_COOKIE: &str = "bulkhead_csrf";
/// The header that must repeat [`CSRF_COOKIE`].
pub const CSRF_HEADER: HeaderName = HeaderName::from_static("x-csrf-token");

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(browser_session_login, browser_session_logout))
        .routes(routes!(browser_session_refresh))
        .routes(routes!(browser_session_provider_finish))
}

/// A session in cookie mode: the refresh token is in the `HttpOnly` cookie, not here.
#[derive(Debug, Serialize, ToSchema)]
pub struct BrowserSession {
    /// A JWT to send as `Authorization: Bearer`; keep it in memory only.
    pub access_token: String,
    /// Always `Bearer`.
    pub token_type: String,
    /// Seconds until `access_token` expires: refresh before then.
    pub expires_in: u64,
    /// The value to send as `X-CSRF-Token` to refresh or log out (also in the `bulkhead_csrf`
    /// cookie, for a page that was reloaded).
    pub csrf_token: String,
}

/// Log in with email and password in cookie mode (for a browser on this origin): sets the
/// refresh token as an `HttpOnly; Secure; SameSite=Strict` cookie for `/v1/auth/session` and
/// the CSRF token as the `bulkhead_csrf` cookie, and returns the access token. Attempts are
/// limited as at `/v1/auth/login`.
#[utoipa::path(post, path = "/v1/auth/session", tag = "auth", security(()), request_body = LoginRequest,
    responses((status = 200, body = BrowserSession, headers(
            ("Cache-Control" = String, description = "`no-store`"),
            ("Set-Cookie" = String, description = "`__Secure-bulkhead_refresh` (HttpOnly, Secure, SameSite=Strict, Path=/v1/auth/session) and `bulkhead_csrf` (Secure, SameSite=Strict, Path=/)"))),
        (status = 401, description = "Wrong email or password", body = crate::http::problem::Problem),
        (status = 403, description = "A cross-site request (`Sec-Fetch-Site`)", body = crate::http::problem::Problem),
        (status = 429, description = "Too many attempts from this address or for this account (see Retry-After)", body = crate::http::problem::Problem),
        (status = 503, description = "Too many password checks running (see Retry-After)", body = crate::http::problem::Problem)))]
async fn browser_session_login(
    State(app): State<App>,
    client: Option<Extension<ClientAddr>>,
    headers: HeaderMap,
    ApiJson(login): ApiJson<LoginRequest>,
) -> AppResult<Response> {
    same_origin_check(&headers)?;
    let request_id = super::middleware::current_request_id().unwrap_or_default();
    let tokens = app
        .session_login(login, super::auth::client_ip(client), &request_id)
        .await?;
    Ok(session_response(&app, tokens))
}

/// Finish signing in with an outside provider in cookie mode (the dashboard's callback page):
/// as `POST /v1/auth/providers/{provider}/finish`, but the session's refresh token is set as
/// the `HttpOnly` cookie, as at `POST /v1/auth/session`.
#[utoipa::path(post, path = "/v1/auth/session/providers/{provider}/finish", tag = "auth", security(()), request_body = SignInFinish,
    params(("provider" = String, Path, description = "The provider's name")),
    responses((status = 200, body = BrowserSession, headers(
            ("Cache-Control" = String, description = "`no-store`"),
            ("Set-Cookie" = String, description = "`__Secure-bulkhead_refresh` (HttpOnly, Secure, SameSite=Strict, Path=/v1/auth/session) and `bulkhead_csrf` (Secure, SameSite=Strict, Path=/)"))),
        (status = 400, description = "The state is unknown, expired or used; the provider refused the code; or its answer is refused, as at `POST /v1/auth/providers/{provider}/finish` (`sign_in_failed`, saying why)", body = crate::http::problem::Problem),
        (status = 403, description = "No user linked this account (`identity_not_linked`), theirs is disabled, or a cross-site request (`csrf_failed`)", body = crate::http::problem::Problem),
        (status = 404, description = "No such provider", body = crate::http::problem::Problem),
        (status = 503, description = "The provider is down or limiting us (`sign_in_unavailable`; see Retry-After)", body = crate::http::problem::Problem,
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying")))))]
async fn browser_session_provider_finish(
    State(app): State<App>,
    client: Option<Extension<ClientAddr>>,
    headers: HeaderMap,
    ApiPath(provider): ApiPath<String>,
    ApiJson(finish): ApiJson<SignInFinish>,
) -> AppResult<Response> {
    same_origin_check(&headers)?;
    let request_id = super::middleware::current_request_id().unwrap_or_default();
    let tokens = app
        .sign_in_finish(
            &provider,
            finish,
            super::auth::client_ip(client),
            &request_id,
        )
        .await?;
    Ok(session_response(&app, tokens))
}

/// Exchange the refresh cookie for a new access token (and a new refresh cookie: each works
/// once, and reusing one revokes the whole session). Needs `X-CSRF-Token`.
#[utoipa::path(post, path = "/v1/auth/session/refresh", tag = "auth", security(()),
    params(("X-CSRF-Token" = String, Header, description = "The `csrf_token` of the session (the `bulkhead_csrf` cookie)")),
    responses((status = 200, body = BrowserSession, headers(
            ("Cache-Control" = String, description = "`no-store`"),
            ("Set-Cookie" = String, description = "The rotated cookies"))),
        (status = 401, description = "No refresh cookie, or it is invalid, expired, revoked or reused (the cookies are cleared)", body = crate::http::problem::Problem),
        (status = 403, description = "`X-CSRF-Token` missing or not the session's, or a cross-site request (`csrf_failed`)", body = crate::http::problem::Problem)))]
async fn browser_session_refresh(State(app): State<App>, headers: HeaderMap) -> Response {
    let refreshed = async {
        same_origin_check(&headers)?;
        let refresh_token = refresh_cookie(&headers)
            .ok_or_else(|| AppError::unauthenticated("no session cookie: log in"))?;
        csrf_check(&headers, &refresh_token)?;
        app.session_refresh(RefreshRequest { refresh_token }).await
    }
    .await;
    match refreshed {
        Ok(tokens) => session_response(&app, tokens),
        // A refresh token that no longer works is of no use to keep.
        Err(err) if err.kind == crate::error::ErrorKind::Unauthenticated => {
            cookies_clear(err.into_response())
        }
        Err(err) => err.into_response(),
    }
}

/// Log out: revoke the session of the refresh cookie and clear the cookies. Needs
/// `X-CSRF-Token` when there is a session cookie.
#[utoipa::path(delete, path = "/v1/auth/session", tag = "auth", security(()),
    params(("X-CSRF-Token" = Option<String>, Header, description = "The `csrf_token` of the session (the `bulkhead_csrf` cookie)")),
    responses((status = 204, description = "Session revoked and cookies cleared"),
        (status = 403, description = "`X-CSRF-Token` missing or not the session's, or a cross-site request (`csrf_failed`)", body = crate::http::problem::Problem)))]
async fn browser_session_logout(State(app): State<App>, headers: HeaderMap) -> AppResult<Response> {
    same_origin_check(&headers)?;
    if let Some(refresh_token) = refresh_cookie(&headers) {
        csrf_check(&headers, &refresh_token)?;
        app.session_logout(RefreshRequest { refresh_token }).await?;
    }
    Ok(cookies_clear(StatusCode::NO_CONTENT.into_response()))
}

/// The CSRF token of a refresh token: a digest, so that it tells nothing of the token.
fn csrf_token_for(refresh_token: &str) -> String {
    let digest = Sha256::new()
        .chain_update(b"bulkhead-csrf\0")
        .chain_update(refresh_token.as_bytes())
        .finalize();
    hex::encode(&digest[..20])
}

fn csrf_failed(detail: &str) -> AppError {
    AppError::new(ErrorCode::CsrfFailed, detail)
}

/// Refuses what a browser says comes from another origin. Requests without `Sec-Fetch-Site`
/// (other clients, older browsers) are left to the CSRF token.
fn same_origin_check(headers: &HeaderMap) -> AppResult<()> {
    match headers.get("sec-fetch-site").map(HeaderValue::as_bytes) {
        None | Some(b"same-origin") => Ok(()),
        Some(_) => Err(csrf_failed(
            "the session endpoints answer requests from this origin only",
        )),
    }
}

fn csrf_check(headers: &HeaderMap, refresh_token: &str) -> AppResult<()> {
    let sent = headers.get(CSRF_HEADER).ok_or_else(|| {
        csrf_failed("X-CSRF-Token is missing: send the bulkhead_csrf cookie's value")
    })?;
    let expected = csrf_token_for(refresh_token);
    if bool::from(sent.as_bytes().ct_eq(expected.as_bytes())) {
        Ok(())
    } else {
        Err(csrf_failed("X-CSRF-Token does not match the session"))
    }
}

/// The refresh token of the request's cookie, if any.
fn refresh_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|cookie| cookie.name() == REFRESH_COOKIE)
        .map(|cookie| cookie.value().to_owned())
        .filter(|value| !value.is_empty() && value.len() <= 512)
}

fn session_response(app: &App, tokens: SessionTokens) -> Response {
    let csrf_token = csrf_token_for(&tokens.refresh_token);
    let max_age = cookie::time::Duration::seconds(
        i64::try_from(app.settings.refresh_token_ttl.as_secs()).unwrap_or(i64::MAX),
    );
    let refresh = Cookie::build((REFRESH_COOKIE, tokens.refresh_token))
        .path(SESSION_PATH)
        .http_only(true)
        .secure(true)
        .same_site(SameSite::Strict)
        .max_age(max_age);
    let csrf = Cookie::build((CSRF_COOKIE, csrf_token.clone()))
        .path("/")
        .secure(true)
        .same_site(SameSite::Strict)
        .max_age(max_age);
    let body = BrowserSession {
        access_token: tokens.access_token,
        token_type: tokens.token_type,
        expires_in: tokens.expires_in,
        csrf_token,
    };
    let mut response = ([(header::CACHE_CONTROL, "no-store")], Json(body)).into_response();
    cookies_set(&mut response, [refresh.build(), csrf.build()]);
    response
}

/// Clears both cookies (an expired cookie of the same name and path replaces each).
fn cookies_clear(mut response: Response) -> Response {
    let expired = |name: &'static str, path: &'static str, http_only: bool| {
        Cookie::build((name, ""))
            .path(path)
            .http_only(http_only)
            .secure(true)
            .same_site(SameSite::Strict)
            .max_age(cookie::time::Duration::ZERO)
            .build()
    };
    cookies_set(
        &mut response,
        [
            expired(REFRESH_COOKIE, SESSION_PATH, true),
            expired(CSRF_COOKIE, "/", false),
        ],
    );
    response
}

fn cookies_set<const N: usize>(response: &mut Response, cookies: [Cookie<'static>; N]) {
    for cookie in cookies {
        if let Ok(value) = HeaderValue::from_str(&cookie.to_string()) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    #[test]
    fn the_refresh_cookie_is_found_among_others_and_nothing_else_is_taken_for_it() {
        let found = refresh_cookie(&headers(&[(
            "cookie",
            "a=1; __Secure-bulkhead_refresh=bhr_abc; bulkhead_csrf=x",
        )]));
        assert_eq!(found.as_deref(), Some("bhr_abc"));
        assert_eq!(
            refresh_cookie(&headers(&[("cookie", "bulkhead_refresh=bhr_abc")])),
            None
        );
        assert_eq!(
            refresh_cookie(&headers(&[("cookie", "__Secure-bulkhead_refresh=")])),
            None
        );
        assert_eq!(refresh_cookie(&HeaderMap::new()), None);
    }

    #[test]
    fn the_csrf_token_must_be_the_sessions_own() {
        let token = csrf_token_for("bhr_abc");
        assert_ne!(token, csrf_token_for("bhr_abd"));
        assert!(!token.contains("bhr_abc"));
        assert!(csrf_check(&headers(&[("x-csrf-token", &token)]), "bhr_abc").is_ok());
        let other = csrf_token_for("bhr_other");
        let refused = csrf_check(&headers(&[("x-csrf-token", &other)]), "bhr_abc").unwrap_err();
        assert_eq!(refused.kind, crate::error::ErrorKind::Forbidden);
        assert_eq!(refused.code, ErrorCode::CsrfFailed);
        assert!(csrf_check(&HeaderMap::new(), "bhr_abc").is_err());
    }

    #[test]
    fn a_request_a_browser_marks_as_cross_site_is_refused() {
        assert!(same_origin_check(&HeaderMap::new()).is_ok());
        assert!(same_origin_check(&headers(&[("sec-fetch-site", "same-origin")])).is_ok());
        for site in ["same-site", "cross-site", "none"] {
            assert!(
                same_origin_check(&headers(&[("sec-fetch-site", site)])).is_err(),
                "{site}"
            );
        }
    }
}
