//! `/v1/terms`: published versions of the terms of service. (Acceptance is under `/v1/me`.)

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::{ApiJson, ApiQuery};
use crate::app::App;
use crate::app::identity::terms::{TermsPublish, TermsView};
use crate::app::shared::pagination::{Page, PageParams};
use crate::authz::{OpContext, Principal};
use crate::error::AppResult;

pub fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new().routes(routes!(terms_list, terms_publish))
}

/// List published versions of the terms of service, oldest first.
#[utoipa::path(get, path = "/v1/terms", tag = "terms", params(PageParams), responses((status = 200, body = Page<TermsView>)))]
async fn terms_list(
    State(app): State<App>,
    principal: Principal,
    ApiQuery(params): ApiQuery<PageParams>,
) -> AppResult<Page<TermsView>> {
    Ok(app
        .terms_list(&principal, params)
        .await?
        .map(TermsView::from))
}

/// Publish a new version of the terms of service (administrators); it becomes current, and
/// every user must accept it.
#[utoipa::path(post, path = "/v1/terms", tag = "terms", request_body = TermsPublish,
    responses((status = 201, body = TermsView)))]
async fn terms_publish(
    State(app): State<App>,
    ctx: OpContext,
    ApiJson(publish): ApiJson<TermsPublish>,
) -> AppResult<Response> {
    let terms = app.terms_publish(&ctx, publish).await?;
    Ok((StatusCode::CREATED, Json(TermsView::from(terms))).into_response())
}
