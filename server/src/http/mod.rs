//! The HTTP API: routes (one module per resource, each with its `router()`), the middleware
//! every route shares, and the OpenAPI document generated from the handlers.
//!
//! Handlers are thin: extract, call one [`App`] method, shape the response. Every error goes
//! through [`crate::error::ApiError`].

mod audit;
mod auth;
pub mod client_addr;
mod dashboard;
mod deploy_pipeline;
mod deployments;
mod domains;
mod edges;
mod environments;
pub mod extract;
mod invitations;
mod lean;
mod members;
pub mod middleware;
pub mod openapi_v30;
mod ops;
mod plugins;
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
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi as OpenApiDoc, PathItem, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_swagger_ui::SwaggerUi;

use crate::app::pagination::Page;
use crate::app::{App, etag_for};
use crate::error::Problem;

#[derive(OpenApi)]
#[openapi(
    info(title = "Bulkhead control-plane API", description = "The REST API behind the hosting platform's dashboard: projects, environments, services, domains, users, API tokens, terms of service, the audit log and the providers with their plugins.\n\nErrors are `application/problem+json` with a stable `code`. Lists use cursor pagination (`limit`, `cursor` → `next_cursor`). Reads return an `ETag`; the updates and deletes that document `If-Match` honour it (412 when it no longer matches). Creates accept `Idempotency-Key`."),
    components(schemas(Problem)),
    tags(
        (name = "auth", description = "Log in, refresh and log out"),
        (name = "users", description = "The caller's account and user administration"),
        (name = "tokens", description = "API tokens"),
        (name = "projects"), (name = "members"), (name = "environments"), (name = "services"),
        (name = "deployments", description = "Deployments of services, their instances and events, and the deploy pipeline"),
        (name = "domains"),
        (name = "routing", description = "The signed routing table edge proxies route by, its keys, and the edges' reports"),
        (name = "terms", description = "Terms of service"),
        (name = "audit", description = "The audit log"),
        (name = "providers", description = "Cloud and fleet providers, and the plugin binaries they run"),
        (name = "operations", description = "Health, readiness, metrics, and the replicas with their leaders"),
    )
)]
struct ApiDoc;

/// Adds the bearer security scheme and the error responses shared by every operation, so
/// that each handler documents only what is particular to it. Applied once all routes are
/// merged (a `modifiers(...)` attribute would run before the routes are added).
struct Conventions;

impl Modify for Conventions {
    fn modify(&self, doc: &mut OpenApiDoc) {
        if let Some(components) = doc.components.as_mut() {
            components.add_security_scheme(
                "bearer",
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .description(Some(
                            "A JWT access token from /v1/auth/login, or an API token",
                        ))
                        .build(),
                ),
            );
        }
        for (path, item) in doc.paths.paths.iter_mut() {
            operations_annotate(path, item);
        }
    }
}

fn operations_annotate(path: &str, item: &mut PathItem) {
    let operations = [
        (Method::GET, item.get.as_mut()),
        (Method::POST, item.post.as_mut()),
        (Method::PUT, item.put.as_mut()),
        (Method::PATCH, item.patch.as_mut()),
        (Method::DELETE, item.delete.as_mut()),
    ];
    for (method, operation) in operations {
        let Some(operation) = operation else { continue };
        let public = operation.security.as_ref().is_some_and(|reqs| {
            reqs.iter()
                .all(|req| *req == SecurityRequirement::default())
        });
        let mut errors: Vec<(u16, &str)> =
            vec![(400, "Malformed request"), (500, "Internal error")];
        if public {
            operation.security = None;
        } else {
            operation.security = Some(vec![SecurityRequirement::new(
                "bearer",
                Vec::<String>::new(),
            )]);
            errors.extend([
                (401, "Missing or invalid credential"),
                (403, "Role or token scope insufficient"),
            ]);
        }
        if path.contains('{') || !public {
            errors.push((404, "Not found, or not visible to the caller"));
        }
        if method == Method::DELETE {
            errors.push((409, "Conflict with existing state"));
        }
        if matches!(method, Method::POST | Method::PATCH | Method::PUT) {
            errors.extend([
                (409, "Conflict with existing state"),
                (413, "Body too large"),
                (415, "Not JSON"),
                (422, "Invalid values"),
            ]);
        }
        // A handler that honours `If-Match` declares it; its description is the same everywhere.
        if header_parameter_declared(operation, "If-Match") {
            errors.push((412, "If-Match does not match the current ETag"));
            header_parameter_ensure(
                operation,
                "If-Match",
                "The ETag the change is based on: 412 when the resource changed since",
                None,
            );
        }
        if method == Method::POST && !public && path != plugins::UPLOAD_PATH {
            header_parameter_ensure(
                operation,
                middleware::IDEMPOTENCY_KEY.as_str(),
                "Makes a retry safe: the same key and body replay the stored response (with \
                 `Idempotent-Replayed: true`), the same key with another body is 422, the same \
                 key while the first request runs is 409",
                Some(255),
            );
        }
        header_parameters_not_null(operation);
        if method == Method::GET {
            conditional_get_document(operation);
        }
        if path.contains('{') {
            // Path values are validated too (names, keys).
            errors.push((422, "Invalid values"));
        }
        errors.push((408, "Request timed out"));
        if !matches!(path, "/healthz" | "/metrics") {
            // Whatever reads the database: this replica cannot reach it (see `Retry-After`;
            // another replica may answer).
            errors.push((503, "The database is unreachable from this replica"));
        }
        // Every response has a description (OpenAPI requires one): the status's reason phrase
        // where the operation gives none.
        for (status, response) in operation.responses.responses.iter_mut() {
            if let RefOr::T(response) = response {
                problem_content_type_fix(response);
            }
            if let RefOr::T(response) = response
                && response.description.is_empty()
            {
                response.description = status
                    .parse::<u16>()
                    .ok()
                    .and_then(|code| http::StatusCode::from_u16(code).ok())
                    .and_then(|code| code.canonical_reason())
                    .unwrap_or("Response")
                    .to_owned();
            }
        }
        for (status, description) in errors {
            let status = status.to_string();
            operation
                .responses
                .responses
                .entry(status)
                .or_insert_with(|| {
                    RefOr::T(
                        ResponseBuilder::new()
                            .description(description)
                            .content(
                                "application/problem+json",
                                ContentBuilder::new()
                                    .schema(Some(RefOr::Ref(
                                        utoipa::openapi::Ref::from_schema_name("Problem"),
                                    )))
                                    .build(),
                            )
                            .build(),
                    )
                });
        }
    }
}

/// What [`middleware::conditional_get`] does, in the document: a page of a list carries a weak
/// `ETag` (see `Page`'s response), and every GET whose answer has an `ETag` takes
/// `If-None-Match` and may answer 304.
fn conditional_get_document(operation: &mut utoipa::openapi::path::Operation) {
    use utoipa::openapi::header::HeaderBuilder;
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    let Some(RefOr::T(ok)) = operation.responses.responses.get_mut("200") else {
        return;
    };
    let is_page = ok.content.get("application/json").is_some_and(|content| {
        matches!(content, RefOr::T(content)
            if matches!(&content.schema, Some(RefOr::Ref(r)) if r.ref_location.starts_with("#/components/schemas/Page_")))
    });
    if is_page && !ok.headers.contains_key("ETag") {
        ok.headers.insert(
            "ETag".to_owned(),
            RefOr::T(
                HeaderBuilder::new()
                    .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
                    .description(Some(
                        "A weak tag of this page: send it as `If-None-Match` to get 304 while \
                         it is unchanged",
                    ))
                    .build(),
            ),
        );
    }
    if !ok.headers.contains_key("ETag") {
        return;
    }
    header_parameter_ensure(
        operation,
        "If-None-Match",
        "A tag of an earlier answer: 304, without a body, while the answer would be the same",
        None,
    );
    operation
        .responses
        .responses
        .entry("304".to_owned())
        .or_insert_with(|| {
            RefOr::T(
                ResponseBuilder::new()
                    .description("Not modified: the `If-None-Match` tag is current (no body)")
                    .header(
                        "ETag",
                        HeaderBuilder::new()
                            .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
                            .build(),
                    )
                    .build(),
            )
        });
}

/// A problem is answered as `application/problem+json` (see `ApiError`'s response): a handler
/// that documents a `Problem` body as plain JSON is corrected here, in one place.
fn problem_content_type_fix(response: &mut utoipa::openapi::Response) {
    let problem = RefOr::Ref(utoipa::openapi::Ref::from_schema_name("Problem"));
    let is_problem = response.content.get("application/json").is_some_and(
        |content| matches!(content, RefOr::T(content) if content.schema.as_ref() == Some(&problem)),
    );
    if is_problem && let Some(content) = response.content.shift_remove("application/json") {
        response
            .content
            .insert("application/problem+json".to_owned(), content);
    }
}

/// A header is present or absent, never `null`: an optional header parameter declared as
/// `Option<T>` is documented as `T` (it is `required: false` already).
fn header_parameters_not_null(operation: &mut utoipa::openapi::path::Operation) {
    use utoipa::openapi::path::ParameterIn;
    use utoipa::openapi::schema::{Schema, SchemaType, Type};
    for parameter in operation.parameters.iter_mut().flatten() {
        let RefOr::T(parameter) = parameter else {
            continue;
        };
        if parameter.parameter_in != ParameterIn::Header {
            continue;
        }
        if let Some(RefOr::T(Schema::Object(schema))) = parameter.schema.as_mut()
            && let SchemaType::Array(types) = &schema.schema_type
            && let [only] = types
                .iter()
                .filter(|t| **t != Type::Null)
                .collect::<Vec<_>>()
                .as_slice()
        {
            schema.schema_type = SchemaType::Type((*only).clone());
        }
    }
}

/// Whether `operation` declares the header parameter `name`.
fn header_parameter_declared(operation: &utoipa::openapi::path::Operation, name: &str) -> bool {
    operation
        .parameters
        .iter()
        .flatten()
        .any(|p| is_header_parameter(p, name))
}

fn is_header_parameter(parameter: &RefOr<utoipa::openapi::path::Parameter>, name: &str) -> bool {
    use utoipa::openapi::path::ParameterIn;
    matches!(parameter, RefOr::T(p) if p.name.eq_ignore_ascii_case(name) && p.parameter_in == ParameterIn::Header)
}

/// Adds an optional string header parameter `name` to `operation`, or describes the one it
/// declares.
fn header_parameter_ensure(
    operation: &mut utoipa::openapi::path::Operation,
    name: &str,
    description: &str,
    max_length: Option<usize>,
) {
    use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    let parameters = operation.parameters.get_or_insert_with(Vec::new);
    parameters.retain(|p| !is_header_parameter(p, name));
    let mut schema = ObjectBuilder::new().schema_type(Type::String);
    if let Some(max) = max_length {
        schema = schema.min_length(Some(1)).max_length(Some(max));
    }
    parameters.push(RefOr::T(
        ParameterBuilder::new()
            .name(name)
            .parameter_in(ParameterIn::Header)
            .required(utoipa::openapi::Required::False)
            .description(Some(description))
            .schema(Some(schema))
            .build(),
    ));
}

fn api_router() -> OpenApiRouter<App> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(auth::router())
        .merge(session_cookie::router())
        .merge(users::router())
        .merge(tokens::router())
        .merge(projects::router())
        .merge(members::router())
        .merge(invitations::router())
        .merge(environments::router())
        .merge(services::router())
        .merge(deployments::router())
        .merge(deploy_pipeline::router())
        .merge(domains::router())
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
    Conventions.modify(&mut doc);
    flattened_options_expand(&mut doc);
    (routes, doc)
}

/// A struct flattened into another as an `Option` (`#[serde(flatten)] details:
/// Option<ProviderDetails>`) has its fields present or absent together. utoipa describes it as
/// `allOf: [oneOf: [$ref, null], {…}]`, which says the fields are always there (the object is
/// not null, so it must match the `$ref`): an answer without them does not match its own schema,
/// and generated clients fail to decode it. Each such `allOf` becomes one object whose
/// flattened fields are optional.
fn flattened_options_expand(doc: &mut OpenApiDoc) {
    let Some(components) = doc.components.as_mut() else {
        return;
    };
    let known = components.schemas.clone();
    for schema in components.schemas.values_mut() {
        flattened_option_rewrite(schema, &known);
    }
}

fn flattened_option_rewrite(
    schema: &mut RefOr<utoipa::openapi::schema::Schema>,
    known: &std::collections::BTreeMap<String, RefOr<utoipa::openapi::schema::Schema>>,
) {
    use utoipa::openapi::schema::{ArrayItems, Object, Schema, SchemaType, Type};
    let flattened_ref = |member: &RefOr<Schema>| match member {
        RefOr::T(Schema::OneOf(one_of)) => match one_of.items.as_slice() {
            [RefOr::Ref(reference), RefOr::T(Schema::Object(null))]
                if null.schema_type == SchemaType::Type(Type::Null) =>
            {
                Some(reference.ref_location.clone())
            }
            _ => None,
        },
        _ => None,
    };
    if let RefOr::T(Schema::AllOf(all_of)) = schema {
        let flattened: Vec<String> = all_of.items.iter().filter_map(flattened_ref).collect();
        let objects: Vec<&Object> = all_of
            .items
            .iter()
            .filter_map(|m| match m {
                RefOr::T(Schema::Object(o)) => Some(o),
                _ => None,
            })
            .collect();
        if flattened.len() == 1 && objects.len() + 1 == all_of.items.len() {
            let name = flattened[0].trim_start_matches("#/components/schemas/");
            if let Some(RefOr::T(Schema::Object(details))) = known.get(name) {
                let mut merged = Object::with_type(Type::Object);
                merged.description = all_of.description.clone();
                merged.properties = details.properties.clone();
                for object in objects {
                    merged.properties.extend(object.properties.clone());
                    merged.required.extend(object.required.iter().cloned());
                }
                *schema = RefOr::T(Schema::Object(merged));
            }
        }
    }
    match schema {
        RefOr::T(Schema::Object(object)) => {
            for property in object.properties.values_mut() {
                flattened_option_rewrite(property, known);
            }
        }
        RefOr::T(Schema::Array(array)) => {
            if let ArrayItems::RefOrSchema(items) = &mut array.items {
                flattened_option_rewrite(items, known);
            }
        }
        _ => {}
    }
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
        .merge(SwaggerUi::new("/docs").url("/openapi.json", doc))
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

/// A page of a list as JSON, with a weak `ETag` from a hash of exactly these bytes: lists have
/// no revision of their own, and this is where their serialized body is at hand (middleware
/// never buffers a body to tag it).
impl<T: Serialize> IntoResponse for Page<T> {
    fn into_response(self) -> Response {
        digest_tagged(&self)
    }
}

/// `body` as JSON with a weak `ETag` made from its bytes, for answers that have no revision
/// to tag them with (pages of lists, deployments): a 304 then saves the body.
pub(crate) fn digest_tagged(body: &impl Serialize) -> Response {
    let body = match serde_json::to_vec(body) {
        Ok(body) => body,
        Err(err) => return crate::error::ApiError::internal(err).into_response(),
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
