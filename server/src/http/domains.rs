//! `/v1/projects/{project_id}/domains`: domains of a project.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::extract::{ApiJson, ApiPath, ApiQuery, IfMatch};
use super::{created, tagged};
use crate::app::App;
use crate::app::projects::domains::{DomainCreate, DomainUpdate, DomainView};
use crate::app::shared::pagination::{Page, PageParams, ViewPage};
use crate::authz::{OpContext, Principal};
use crate::error::AppResult;
use crate::http::problem::Problem;
use crate::ids::ProjectId;

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(domain_list, domain_create))
        .routes(routes!(domain_view, domain_update, domain_delete))
        .routes(routes!(domain_verify))
}

/// List a project's domains.
#[utoipa::path(get, path = "/v1/projects/{project_id}/domains", tag = "domains",
    params(("project_id" = Uuid, Path, description = "Project id"), PageParams),
    responses((status = 200, body = Page<DomainView>)))]
async fn domain_list(
    State(app): State<App>,
    principal: Principal,
    ApiPath(project_id): ApiPath<ProjectId>,
    ApiQuery(params): ApiQuery<PageParams>,
) -> AppResult<ViewPage> {
    app.domain_list(&principal, project_id, params).await
}

/// Bind a hostname to a service of the project (members and above).
#[utoipa::path(post, path = "/v1/projects/{project_id}/domains", tag = "domains", request_body = DomainCreate,
    params(("project_id" = Uuid, Path, description = "Project id")),
    responses((status = 201, body = DomainView, headers(("Location" = String), ("ETag" = String)))))]
async fn domain_create(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath(project_id): ApiPath<ProjectId>,
    ApiJson(create): ApiJson<DomainCreate>,
) -> AppResult<Response> {
    let domain = app.domain_create(&ctx, project_id, create).await?;
    Ok(created(
        format!("/v1/projects/{project_id}/domains/{}", domain.id),
        domain.revision,
        DomainView::from(domain),
    ))
}

/// Get a domain.
#[utoipa::path(get, path = "/v1/projects/{project_id}/domains/{domain_id}", tag = "domains",
    params(("project_id" = Uuid, Path, description = "Project id"), ("domain_id" = Uuid, Path, description = "Domain id")),
    responses((status = 200, body = DomainView, headers(("ETag" = String)))))]
async fn domain_view(
    State(app): State<App>,
    principal: Principal,
    ApiPath((project_id, id)): ApiPath<(ProjectId, Uuid)>,
) -> AppResult<Response> {
    let domain = app.domain_view(&principal, project_id, id).await?;
    Ok(tagged(domain.revision, DomainView::from(domain)))
}

/// Rebind a domain to another service (members and above).
#[utoipa::path(patch, path = "/v1/projects/{project_id}/domains/{domain_id}", tag = "domains", request_body = DomainUpdate,
    params(("project_id" = Uuid, Path, description = "Project id"), ("domain_id" = Uuid, Path, description = "Domain id"), ("If-Match" = Option<String>, Header)),
    responses((status = 200, body = DomainView, headers(("ETag" = String)))))]
async fn domain_update(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath((project_id, id)): ApiPath<(ProjectId, Uuid)>,
    if_match: IfMatch,
    ApiJson(update): ApiJson<DomainUpdate>,
) -> AppResult<Response> {
    let domain = app
        .domain_update(&ctx, project_id, id, if_match.as_deref(), update)
        .await?;
    Ok(tagged(domain.revision, DomainView::from(domain)))
}

/// Delete a domain (members and above).
#[utoipa::path(delete, path = "/v1/projects/{project_id}/domains/{domain_id}", tag = "domains",
    params(("project_id" = Uuid, Path, description = "Project id"), ("domain_id" = Uuid, Path, description = "Domain id"), ("If-Match" = Option<String>, Header)),
    responses((status = 204, description = "Deleted")))]
async fn domain_delete(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath((project_id, id)): ApiPath<(ProjectId, Uuid)>,
    if_match: IfMatch,
) -> AppResult<StatusCode> {
    app.domain_delete(&ctx, project_id, id, if_match.as_deref())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Verify a domain: Bulkhead looks its `challenge` up in DNS (members and above). A verified
/// domain routes; one verified already is answered as it is.
#[utoipa::path(post, path = "/v1/projects/{project_id}/domains/{domain_id}/verify", tag = "domains",
    params(("project_id" = Uuid, Path, description = "Project id"), ("domain_id" = Uuid, Path, description = "Domain id")),
    responses(
        (status = 200, body = DomainView, headers(("ETag" = String))),
        (status = 409, description = "Another project verified the hostname, or a domain it is under (`hostname_taken`)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "DNS does not hold the challenge (`domain_unverified`; the detail says what it holds)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "DNS did not answer (`dns_unavailable`), or the database is unreachable from this replica (`not_ready`); retry after `Retry-After` seconds", body = Problem, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying"))),
    ))]
async fn domain_verify(
    State(app): State<App>,
    ctx: OpContext,
    ApiPath((project_id, id)): ApiPath<(ProjectId, Uuid)>,
) -> AppResult<Response> {
    let domain = app.domain_verify(&ctx, project_id, id).await?;
    Ok(tagged(domain.revision, DomainView::from(domain)))
}
