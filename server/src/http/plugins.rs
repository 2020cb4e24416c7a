//! `/v1/plugins`: provider plugin binaries (administrators only).

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::{ApiPath, ApiQuery};
use crate::app::App;
use crate::app::providers::plugin_binaries::{PluginBinaryView, Stored};
use crate::app::shared::pagination::{Page, PageParams};
use crate::authz::{OpContext, Principal};
use crate::error::{AppError, AppResult, ErrorCode};

/// Where binaries are uploaded: the one route whose body may be larger than the usual limit.
pub const UPLOAD_PATH: &str = "/v1/plugins";

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(plugin_binary_list, plugin_binary_upload))
        .routes(routes!(plugin_binary_view))
}

/// List stored plugin binaries (administrators).
#[utoipa::path(get, path = "/v1/plugins", tag = "providers", params(PageParams),
    responses((status = 200, body = Page<PluginBinaryView>)))]
async fn plugin_binary_list(
    State(app): State<App>,
    principal: Principal,
    ApiQuery(params): ApiQuery<PageParams>,
) -> AppResult<Page<PluginBinaryView>> {
    Ok(app
        .plugin_binary_list(&principal, params)
        .await?
        .map(PluginBinaryView::from))
}

/// Upload a plugin binary (administrators). The body is the component itself
/// (`application/wasm` or `application/octet-stream`, at most 32 MiB). It is validated (a component of the provider world at
/// a supported contract version, importing only what the host grants, whose `info` answers)
/// and stored by SHA-256; uploading a stored binary again answers 200 with it.
#[utoipa::path(post, path = "/v1/plugins", tag = "providers",
    request_body(content(("application/wasm"), ("application/octet-stream")), description = "The WebAssembly component"),
    responses(
        (status = 201, body = PluginBinaryView, headers(("Location" = String))),
        (status = 200, body = PluginBinaryView, description = "Already stored"),
    ))]
async fn plugin_binary_upload(
    State(app): State<App>,
    ctx: OpContext,
    headers: HeaderMap,
    body: Body,
) -> AppResult<Response> {
    // Authorized before the body is read: a non-administrator must not make the server buffer
    // up to 32 MiB. (The application checks again, close to the action.)
    ctx.principal.require_admin()?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    let media_type = content_type.split(';').next().unwrap_or_default().trim();
    if !["application/wasm", "application/octet-stream"]
        .iter()
        .any(|accepted| media_type.eq_ignore_ascii_case(accepted))
    {
        return Err(AppError::new(
            ErrorCode::UnsupportedMediaType,
            "upload the component as `Content-Type: application/wasm` (or `application/octet-stream`)",
        ));
    }
    let body = body_read(body).await?;
    let (status, binary) = match app.plugin_binary_upload(&ctx, &body).await? {
        Stored::Created(binary) => (StatusCode::CREATED, binary),
        Stored::AlreadyStored(binary) => (StatusCode::OK, binary),
    };
    let location = format!("{UPLOAD_PATH}/{}", binary.digest);
    Ok((
        status,
        [(header::LOCATION, location)],
        Json(PluginBinaryView::from(binary)),
    )
        .into_response())
}

/// The whole body, already bounded by the body-limit middleware: past the limit is 413.
async fn body_read(body: Body) -> AppResult<axum::body::Bytes> {
    axum::body::to_bytes(body, usize::MAX).await.map_err(|err| {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&err);
        let mut too_large = false;
        while let Some(error) = cause {
            too_large |= error.is::<http_body_util::LengthLimitError>();
            cause = error.source();
        }
        if too_large {
            AppError::new(
                ErrorCode::BodyTooLarge,
                "the request body is larger than the limit",
            )
        } else {
            AppError::new(
                ErrorCode::BodyUnreadable,
                format!("the request body could not be read: {err}"),
            )
        }
    })
}

/// Get a stored plugin binary's description (administrators).
#[utoipa::path(get, path = "/v1/plugins/{digest}", tag = "providers",
    params(("digest" = String, Path, description = "Hex SHA-256 of the binary", pattern = "^[0-9a-fA-F]{64}$")),
    responses((status = 200, body = PluginBinaryView)))]
async fn plugin_binary_view(
    State(app): State<App>,
    principal: Principal,
    ApiPath(digest): ApiPath<String>,
) -> AppResult<Json<PluginBinaryView>> {
    Ok(Json(PluginBinaryView::from(
        app.plugin_binary_view(&principal, &digest).await?,
    )))
}
