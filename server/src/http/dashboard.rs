//! The web dashboard: the single-page app built in `dashboard/` (its `dist/` is committed and
//! embedded here, so the server needs no Node), served at `/` on the API's own origin, with
//! the security headers that keep a page holding an access token safe: a Content-Security-Policy
//! that admits no inline script and no other origin, no framing, no MIME sniffing, no referrer.
//! The API reference (`/docs/`) shares the origin, and gets the same headers
//! ([`docs_headers`]).

use std::sync::LazyLock;

use axum::Router;
use axum::extract::{Path, Request};
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

use crate::error::AppError;

/// The page's policy: its own script and style only, calls to its own origin only.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; \
     object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// One built file of the dashboard.
struct Asset {
    bytes: &'static [u8],
    content_type: &'static str,
    etag: HeaderValue,
}

impl Asset {
    fn new(bytes: &'static [u8], content_type: &'static str) -> Self {
        let digest = hex::encode(&Sha256::digest(bytes)[..16]);
        let etag = HeaderValue::from_str(&format!("\"{digest}\"")).expect("hex is a valid header");
        Self {
            bytes,
            content_type,
            etag,
        }
    }
}

macro_rules! built {
    ($file:literal) => {
        include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../dashboard/dist/",
            $file
        ))
    };
}

static INDEX: LazyLock<Asset> =
    LazyLock::new(|| Asset::new(built!("index.html"), "text/html; charset=utf-8"));
static SCRIPT: LazyLock<Asset> =
    LazyLock::new(|| Asset::new(built!("app.js"), "text/javascript; charset=utf-8"));
static STYLE: LazyLock<Asset> =
    LazyLock::new(|| Asset::new(built!("app.css"), "text/css; charset=utf-8"));

/// `/`, `/assets/{file}` and `/sign-in/callback` (the page an outside identity provider sends
/// the browser back to: the app finishes the sign-in from its query). The app routes by the
/// URL's fragment, so no other path is its.
/// Responses carry an `ETag` (the conditional-GET middleware answers 304 to a match) and
/// `Cache-Control: no-cache`, so that a browser revalidates and never runs a stale build.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index_get))
        .route("/sign-in/callback", get(index_get))
        .route("/assets/{file}", get(asset_get))
        .layer(axum::middleware::from_fn(
            super::middleware::conditional_get,
        ))
}

async fn index_get() -> Response {
    asset_response(&INDEX)
}

async fn asset_get(Path(file): Path<String>) -> Response {
    match file.as_str() {
        "app.js" => asset_response(&SCRIPT),
        "app.css" => asset_response(&STYLE),
        _ => AppError::not_found("file").into_response(),
    }
}

fn asset_response(asset: &Asset) -> Response {
    let mut response = asset.bytes.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    headers.insert(header::ETAG, asset.etag.clone());
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    security_headers_set(headers, CONTENT_SECURITY_POLICY);
    response
}

/// The API reference's policy (Swagger UI at `/docs/`, on the dashboard's origin): the same
/// as the dashboard's, but for the inline styles Swagger UI sets from its script and the fonts
/// and images it embeds as `data:` URLs. No inline script runs either way.
pub const DOCS_CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; \
     font-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

/// Gives every answer of `/docs/` the dashboard's security headers (the reference shares the
/// dashboard's origin: a script injected there could read what the dashboard keeps).
pub async fn docs_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    security_headers_set(response.headers_mut(), DOCS_CONTENT_SECURITY_POLICY);
    response
}

/// The headers that keep a page on the dashboard's origin safe: `policy`, no framing, no MIME
/// sniffing, no referrer, no opener or embedder from another origin, no powerful features.
fn security_headers_set(headers: &mut HeaderMap, policy: &'static str) {
    let set = [
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(policy),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (
            HeaderName::from_static("cross-origin-opener-policy"),
            HeaderValue::from_static("same-origin"),
        ),
        (
            HeaderName::from_static("cross-origin-resource-policy"),
            HeaderValue::from_static("same-origin"),
        ),
        (
            HeaderName::from_static("permissions-policy"),
            HeaderValue::from_static("camera=(), microphone=(), geolocation=(), payment=()"),
        ),
    ];
    for (name, value) in set {
        headers.insert(name, value);
    }
}
