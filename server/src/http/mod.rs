//! The HTTP API: routes (one module per resource, each with its `router()`), the middleware
//! every route shares, and the OpenAPI document generated from the handlers.
//!
//! Handlers are thin: extract, call one [`App`] method, shape the response. Every error goes
//! through [`crate::error::AppError`].

mod answer_schemas;
mod audit;
mod auth;
pub mod client_addr;
mod dashboard;
mod deploy_pipeline;
mod deployments;
mod document;
mod domains;
mod edges;
mod environments;
pub mod extract;
mod git;
mod identities;
mod invitations;
mod lean;
mod logs;
mod members;
pub mod middleware;
pub mod openapi_v30;
mod ops;
mod plugins;
pub mod problem;
mod projects;
mod providers;
mod routing;
mod services;
mod session_cookie;
pub mod sse;
mod status;
mod terms;
mod tokens;
mod users;
mod webhooks;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde::Serialize;
use sha2::{Digest, Sha256};
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::compression::CompressionLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tracing::Level;
use utoipa::OpenApi;
use utoipa::openapi::OpenApi as OpenApiDoc;
use utoipa_axum::router::OpenApiRouter;
use utoipa_swagger_ui::SwaggerUi;

use crate::app::App;
use crate::app::shared::pagination::{Page, ViewPage};
use crate::app::shared::validate::etag_for;
use crate::http::problem::Problem;

#[derive(OpenApi)]
#[openapi(
    info(title = "Bulkhead control-plane API", description = "The REST API behind the hosting platform's dashboard: projects, environments, services, domains, users, API tokens, terms of service, the audit log and the providers with their plugins.\n\nErrors are `application/problem+json` with a stable `code`. Lists use cursor pagination (`limit`, `cursor` → `next_cursor`). Reads return an `ETag`; the updates and deletes that document `If-Match` honour it (412 when it no longer matches). Creates accept `Idempotency-Key`."),
    components(schemas(Problem, crate::app::shared::pagination::ListOrder)),
    tags(
        (name = "auth", description = "Log in, refresh and log out"),
        (name = "users", description = "The caller's account and user administration"),
        (name = "tokens", description = "API tokens"),
        (name = "projects"), (name = "members"), (name = "environments"), (name = "services"),
        (name = "deployments", description = "Deployments of services, their instances and events, and the deploy pipeline"),
        (name = "domains"),
        (name = "git", description = "Git installations: pushes to a repository's branch deploy a service"),
        (name = "webhooks", description = "Outbound webhooks of a project's deployment events (Standard Webhooks)"),
        (name = "routing", description = "The signed routing table edge proxies route by, its keys, and the edges' reports"),
        (name = "terms", description = "Terms of service"),
        (name = "audit", description = "The audit log"),
        (name = "providers", description = "Cloud and fleet providers, and the plugin binaries they run"),
        (name = "operations", description = "Health, readiness, metrics, and the replicas with their leaders"),
    )
)]
struct ApiDoc;

fn api_router() -> OpenApiRouter<App> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(auth::router())
        .merge(session_cookie::router())
        .merge(identities::router())
        .merge(users::router())
        .merge(tokens::router())
        .merge(projects::router())
        .merge(members::router())
        .merge(invitations::router())
        .merge(environments::router())
        .merge(services::router())
        .merge(deployments::router())
        .merge(logs::router())
        .merge(deploy_pipeline::router())
        .merge(domains::router())
        .merge(git::router())
        .merge(webhooks::router())
        .merge(routing::router())
        .merge(edges::router())
        .merge(terms::router())
        .merge(audit::router())
        .merge(plugins::router())
        .merge(providers::router())
        .merge(ops::router())
        .merge(status::router())
}

/// The OpenAPI document of the API, as served at `/openapi.json` and committed in `openapi/`.
pub fn openapi_document() -> OpenApiDoc {
    api_router_split().1
}

/// The OpenAPI document in its 3.0 form (see [`openapi_v30`]), committed as
/// `openapi/openapi-3.0.json` for the tools that read only 3.0.
pub fn openapi_document_v30() -> Result<serde_json::Value, openapi_v30::DowngradeError> {
    let doc = serde_json::to_value(openapi_document()).expect("the document serializes");
    openapi_v30::downgrade(doc)
}

fn api_router_split() -> (Router<App>, OpenApiDoc) {
    let (routes, mut doc) = api_router().split_for_parts();
    document::conventions_apply(&mut doc);
    (routes, doc)
}

/// The complete HTTP application: API routes, the reference page and all middleware.
pub fn router(app: App) -> Router {
    let settings = app.settings.clone();
    let lean_app = Arc::new(app.clone());
    let (routes, doc) = api_router_split();
    let routes = routes
        .layer(axum::middleware::from_fn(middleware::conditional_get))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            middleware::idempotency,
        ))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            middleware::authenticate,
        ))
        .with_state(app)
        .merge(
            Router::<()>::from(SwaggerUi::new("/docs").url("/openapi.json", doc))
                .layer(axum::middleware::from_fn(dashboard::docs_headers)),
        )
        .merge(dashboard::router());

    let cors = CorsLayer::new()
        .allow_origin(AllowOrigin::list(
            settings
                .cors_origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o).ok()),
        ))
        .allow_methods([
            Method::GET,
            Method::POST,
            Method::PATCH,
            Method::PUT,
            Method::DELETE,
        ])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header::IF_MATCH,
            header::IF_NONE_MATCH,
            middleware::IDEMPOTENCY_KEY,
            middleware::REQUEST_ID,
            // A dashboard resumes an event stream with it.
            HeaderName::from_static("last-event-id"),
        ])
        .expose_headers([
            header::ETAG,
            header::LOCATION,
            // So that a dashboard can wait as long as a 429 or 503 asks.
            header::RETRY_AFTER,
            middleware::REQUEST_ID,
            middleware::IDEMPOTENT_REPLAYED,
        ]);

    routes
        .layer(
            ServiceBuilder::new()
                .layer(SetSensitiveRequestHeadersLayer::new([
                    header::AUTHORIZATION,
                    header::COOKIE,
                ]))
                .layer(axum::middleware::from_fn_with_state(
                    Arc::new(client_addr::TrustedProxies {
                        proxies: settings.trusted_proxies.clone(),
                        header: settings.client_address_header,
                    }),
                    client_addr::client_addr_resolve,
                ))
                .layer(axum::middleware::from_fn(middleware::request_id_sanitize))
                .layer(SetRequestIdLayer::new(
                    middleware::REQUEST_ID,
                    MakeRequestUuid,
                ))
                .layer(PropagateRequestIdLayer::new(middleware::REQUEST_ID))
                .layer(
                    TraceLayer::new_for_http()
                        .make_span_with(|request: &axum::http::Request<_>| {
                            let request_id = request
                                .headers()
                                .get(middleware::REQUEST_ID)
                                .and_then(|v| v.to_str().ok());
                            let client = request
                                .extensions()
                                .get::<client_addr::ClientAddr>()
                                .map(|client| client.0.to_string());
                            tracing::info_span!(
                                "request",
                                method = %request.method(),
                                path = %request.uri().path(),
                                request_id = request_id.unwrap_or_default(),
                                client = client.unwrap_or_default(),
                            )
                        })
                        .on_response(
                            DefaultOnResponse::new()
                                .level(Level::INFO)
                                .latency_unit(tower_http::LatencyUnit::Micros),
                        ),
                )
                .layer(axum::middleware::from_fn(middleware::request_context))
                .layer(CatchPanicLayer::new())
                .layer(cors)
                .layer(CompressionLayer::new())
                // The timeout bounds the time to the response head, not the body: an event
                // stream answers at once and then streams for as long as the client listens. So no
                // middleware may buffer a response body (it would hold the head back).
                .layer(TimeoutLayer::with_status_code(
                    StatusCode::REQUEST_TIMEOUT,
                    settings.request_timeout,
                ))
                .layer(axum::middleware::from_fn_with_state(
                    settings.body_limit_bytes,
                    middleware::body_limit,
                ))
                .layer(DefaultBodyLimit::disable()),
        )
        // Outermost: the edges' polls of an unchanged table skip everything above.
        .layer(axum::middleware::from_fn_with_state(
            lean_app,
            lean::routing_table_not_modified,
        ))
}

/// A 200 response with the resource's `ETag`.
pub(crate) fn tagged<T: Serialize>(revision: i64, body: T) -> Response {
    let mut response = Json(body).into_response();
    if let Ok(etag) = HeaderValue::from_str(&etag_for(revision)) {
        response.headers_mut().insert(header::ETAG, etag);
    }
    response
}

/// A page of a list as JSON, with a weak `ETag` from a hash of exactly these bytes: for lists
/// whose views are not kept by revision ([`ViewPage`]), this is where their serialized body is
/// at hand (middleware never buffers a body to tag it).
impl<T: Serialize> IntoResponse for Page<T> {
    fn into_response(self) -> Response {
        digest_tagged(&self)
    }
}

/// A page of kept views as JSON, with its weak `ETag` (from its rows' revisions: see
/// [`ViewPage::new`]).
impl IntoResponse for ViewPage {
    fn into_response(self) -> Response {
        let mut response = Json(&self).into_response();
        if let Ok(etag) = HeaderValue::from_str(&self.etag) {
            response.headers_mut().insert(header::ETAG, etag);
        }
        response
    }
}

/// `body` as JSON with a weak `ETag` made from its bytes, for answers that have no revision
/// to tag them with (pages of lists, deployments): a 304 then saves the body.
pub(crate) fn digest_tagged(body: &impl Serialize) -> Response {
    let body = match serde_json::to_vec(body) {
        Ok(body) => body,
        Err(err) => return crate::error::AppError::internal(err).into_response(),
    };
    let digest = hex::encode(&Sha256::digest(&body)[..16]);
    let mut response = (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response();
    if let Ok(etag) = HeaderValue::from_str(&format!("W/\"{digest}\"")) {
        response.headers_mut().insert(header::ETAG, etag);
    }
    response
}

/// A 201 response with `Location` and `ETag`.
pub(crate) fn created<T: Serialize>(location: String, revision: i64, body: T) -> Response {
    let mut response = tagged(revision, body);
    *response.status_mut() = StatusCode::CREATED;
    if let Ok(location) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}
