//! `/v1/projects/{project_id}/git-installations`: a project's installations of a forge's push
//! webhook and the deliveries they received; and `/v1/hooks/github`, where the forge posts
//! them (signed, not authenticated).

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::{ApiJson, ApiPath, ApiQuery, IfMatch};
use super::{created, tagged};
use crate::app::App;
use crate::app::git::github::{GithubPushEvent, GithubPushForm};
use crate::app::git::installations::{
    GitInstallationCreate, GitInstallationCreated, GitInstallationUpdate, GitInstallationView,
};
use crate::app::git::intake::{GitDeliveryView, HookDelivery, HookOutcome, HookReceipt};
use crate::app::shared::pagination::{OrderedPageParams, Page, PageParams};
use crate::authz::{OpContext, Principal};
use crate::error::{AppError, AppResult, ErrorCode};
use crate::http::problem::Problem;
use crate::ids::ProjectId;

/// The largest delivery accepted (GitHub's pushes of 20 commits with long messages stay far
/// below it); the API's other bodies keep the server's limit.
pub const HOOK_MAX_BYTES: usize = 1024 * 1024;

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(git_installation_list, git_installation_create))
        .routes(routes!(
            git_installation_view,
            git_installation_update,
            git_installation_delete
        ))
        .routes(routes!(git_installation_secret_rotate))
        .routes(routes!(git_delivery_list))
        .routes(routes!(github_hook_receive))
}

/// An answer holding a secret: never stored by a cache.
fn with_secret(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// List a project's git installations.
#[utoipa::path(get, path = "/v1/projects/{project_id}/git-installations", tag = "git",
    params(("project_id" = Uuid, Path, description = "Project id"), PageParams),
    responses((status = 200, body = Page<GitInstallationView>)))]
async fn git_installation_list(
    State(app): State<App>,
    principal: Principal,
    ApiPath(project_id): ApiPath<ProjectId>,
    ApiQuery(params): ApiQuery<PageParams>,
) -> AppResult<Page<GitInstallationView>> {
    app.git_installation_list(&principal, project_id, params)
        .await?
        .try_map(|m| app.git_installation_present(m))
}

/// Install a push webhook (admins and owners). The answer holds its secret, once: set it,
/// and `hook_path` on this server's origin, in the repository's webhook settings.
#[utoipa::path(post, path = "/v1/projects/{project_id}/git-installations", tag = "git", request_body = GitInstallationCreate,
    params(("project_id" = Uuid, Path, description = "Project id")),
    responses((status = 201, body = GitInstallationCreated, headers(("Location" = String), ("ETag" = String)))))]
async fn git_installation_create(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(project_id): ApiPath<ProjectId>,
    ApiJson(create): ApiJson<GitInstallationCreate>,
) -> AppResult<Response> {
    let (installation, secret) = app
        .git_installation_create(&ctx, project_id, create)
        .await?;
    Ok(with_secret(created(
        format!(
            "/v1/projects/{project_id}/git-installations/{}",
            installation.id
        ),
        installation.revision,
        GitInstallationCreated {
            installation: app.git_installation_present(installation)?,
            secret,
        },
    )))
}

/// Get a git installation (never its secret).
#[utoipa::path(get, path = "/v1/projects/{project_id}/git-installations/{installation_id}", tag = "git",
    params(("project_id" = Uuid, Path, description = "Project id"), ("installation_id" = Uuid, Path, description = "Installation id")),
    responses((status = 200, body = GitInstallationView, headers(("ETag" = String)))))]
async fn git_installation_view(
    State(app): State<App>,
    principal: Principal,
    ApiPath((project_id, id)): ApiPath<(ProjectId, Uuid)>,
) -> AppResult<Response> {
    let installation = app
        .git_installation_view(&principal, project_id, id)
        .await?;
    Ok(tagged(
        installation.revision,
        app.git_installation_present(installation)?,
    ))
}

/// Replace the bindings of a git installation (admins and owners).
#[utoipa::path(patch, path = "/v1/projects/{project_id}/git-installations/{installation_id}", tag = "git", request_body = GitInstallationUpdate,
    params(("project_id" = Uuid, Path, description = "Project id"), ("installation_id" = Uuid, Path, description = "Installation id"), ("If-Match" = Option<String>, Header)),
    responses((status = 200, body = GitInstallationView, headers(("ETag" = String)))))]
async fn git_installation_update(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath((project_id, id)): ApiPath<(ProjectId, Uuid)>,
    if_match: IfMatch,
    ApiJson(update): ApiJson<GitInstallationUpdate>,
) -> AppResult<Response> {
    let installation = app
        .git_installation_update(&ctx, project_id, id, if_match.as_deref(), update)
        .await?;
    Ok(tagged(
        installation.revision,
        app.git_installation_present(installation)?,
    ))
}

/// Delete a git installation and its deliveries (admins and owners); the deployments made
/// from them stay. Deliveries to it are refused from then on.
#[utoipa::path(delete, path = "/v1/projects/{project_id}/git-installations/{installation_id}", tag = "git",
    params(("project_id" = Uuid, Path, description = "Project id"), ("installation_id" = Uuid, Path, description = "Installation id"), ("If-Match" = Option<String>, Header)),
    responses((status = 204, description = "Deleted")))]
async fn git_installation_delete(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath((project_id, id)): ApiPath<(ProjectId, Uuid)>,
    if_match: IfMatch,
) -> AppResult<StatusCode> {
    app.git_installation_delete(&ctx, project_id, id, if_match.as_deref())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Give a git installation a new secret (admins and owners), shown in this answer only; the
/// previous one is still accepted for an hour, while the forge's settings are updated.
#[utoipa::path(post, path = "/v1/projects/{project_id}/git-installations/{installation_id}/secret", tag = "git",
    params(("project_id" = Uuid, Path, description = "Project id"), ("installation_id" = Uuid, Path, description = "Installation id")),
    responses((status = 200, body = GitInstallationCreated, headers(("ETag" = String)))))]
async fn git_installation_secret_rotate(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath((project_id, id)): ApiPath<(ProjectId, Uuid)>,
) -> AppResult<Response> {
    let (installation, secret) = app
        .git_installation_secret_rotate(&ctx, project_id, id)
        .await?;
    Ok(with_secret(tagged(
        installation.revision,
        GitInstallationCreated {
            installation: app.git_installation_present(installation)?,
            secret,
        },
    )))
}

/// List the deliveries a git installation received (kept for 7 days), in the order received.
#[utoipa::path(get, path = "/v1/projects/{project_id}/git-installations/{installation_id}/deliveries", tag = "git",
    params(("project_id" = Uuid, Path, description = "Project id"), ("installation_id" = Uuid, Path, description = "Installation id"), OrderedPageParams),
    responses((status = 200, body = Page<GitDeliveryView>)))]
async fn git_delivery_list(
    State(app): State<App>,
    principal: Principal,
    ApiPath((project_id, id)): ApiPath<(ProjectId, Uuid)>,
    ApiQuery(params): ApiQuery<OrderedPageParams>,
) -> AppResult<Page<GitDeliveryView>> {
    app.git_delivery_list(&principal, project_id, id, params)
        .await?
        .try_map(GitDeliveryView::try_from)
}

/// Which installation a delivery is for.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct HookParams {
    /// The installation's id (its `hook_path` says so).
    installation: Uuid,
}

/// Receive a delivery of GitHub's webhook (the forge calls this, signing the body with the
/// installation's secret; no credential). A `push` to a branch is stored and answered at once
/// (202 `queued`), then deploys the services the installation binds to that repository and
/// branch, exactly once; the same delivery or body again is 200 `duplicate`. `ping` is 200
/// `pong`; other events are 200 `ignored`. At most 1 MiB.
#[utoipa::path(post, path = "/v1/hooks/github", tag = "git", security(()), params(HookParams,
        ("X-Hub-Signature-256" = String, Header, description = "`sha256=` and the hex HMAC-SHA256 of the raw body with the installation's secret"),
        ("X-GitHub-Event" = String, Header, description = "`push`, `ping`, or another event (ignored)"),
        ("X-GitHub-Delivery" = String, Header, description = "The forge's id of the delivery (at most 100 characters); a second delivery with it is a duplicate"),
    ),
    request_body(description = "The event's JSON, or a form whose `payload` field holds it (GitHub's default content type)", content(
        (GithubPushEvent = "application/json"),
        (GithubPushForm = "application/x-www-form-urlencoded")
    )),
    responses(
        (status = 200, description = "A duplicate, a ping, or an event that deploys nothing", body = HookReceipt),
        (status = 202, description = "Stored: it deploys once the pipeline takes it", body = HookReceipt),
        (status = 400, description = "A header is missing (`invalid_header`), or the body is not a `push` event (`invalid_body`)", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "No installation with this id, or the signature is missing or wrong (`invalid_signature`)", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is over 1 MiB", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Neither JSON nor a form", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The push is more than 72 hours old (`stale_delivery`), or its `repository.pushed_at` is more than 5 minutes ahead of the server's clock (`future_delivery`)", body = Problem, content_type = "application/problem+json"),
    ))]
async fn github_hook_receive(
    State(app): State<App>,
    ApiQuery(params): ApiQuery<HookParams>,
    headers: HeaderMap,
    body: Body,
) -> AppResult<Response> {
    let body = axum::body::to_bytes(body, usize::MAX).await.map_err(|_| {
        AppError::new(
            ErrorCode::BodyTooLarge,
            format!("a delivery is at most {HOOK_MAX_BYTES} bytes"),
        )
    })?;
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let receipt = app
        .github_hook_receive(HookDelivery {
            installation: params.installation,
            event: text("x-github-event"),
            delivery: text("x-github-delivery"),
            signature: text("x-hub-signature-256"),
            content_type: text(header::CONTENT_TYPE.as_str()),
            body: &body,
        })
        .await?;
    let status = if receipt.outcome == HookOutcome::Queued {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(receipt)).into_response())
}
