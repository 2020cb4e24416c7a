//! Terms of service: administrators publish versions; users accept the current one; the
//! dashboard asks whether the current user must accept. Acceptances are never deleted.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::App;
use crate::app::shared::audit::{AuditEntry, audit_record};
use crate::app::shared::pagination::{Page, PageParams, paginate};
use crate::app::shared::validate::text_validate;
use crate::authz::{OpContext, Principal, Scope};
use crate::entity::{terms_acceptance, terms_version};
use crate::error::{AppError, AppResult, ErrorCode, unique_violation_as};

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TermsView {
    pub id: Uuid,
    /// The publisher's name for this version, e.g. `2026-11`.
    pub version: String,
    /// Where the full text is.
    pub url: String,
    /// What changed, for people.
    pub summary: String,
    pub published_at: DateTime<Utc>,
}

impl From<terms_version::Model> for TermsView {
    fn from(m: terms_version::Model) -> Self {
        Self {
            id: m.id,
            version: m.version,
            url: m.url,
            summary: m.summary,
            published_at: m.published_at,
        }
    }
}

/// A new version of the terms; it becomes the current one.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TermsPublish {
    #[schema(min_length = 1, max_length = 64)]
    pub version: String,
    #[schema(min_length = 1, max_length = 2000)]
    pub url: String,
    #[serde(default)]
    pub summary: String,
}

/// Accepts a version of the terms; it must be the current one.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TermsAccept {
    pub version: String,
}

/// The caller's standing with the current terms.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TermsStatus {
    /// The current terms; absent while none are published.
    pub current: Option<TermsView>,
    /// Whether the caller must accept `current` before going on.
    pub must_accept: bool,
    /// When the caller accepted `current`.
    pub accepted_at: Option<DateTime<Utc>>,
}

/// A user's acceptance of a version of the terms.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TermsAcceptanceView {
    pub id: Uuid,
    pub terms_version_id: Uuid,
    pub version: String,
    pub accepted_at: DateTime<Utc>,
}

impl App {
    pub async fn terms_list(
        &self,
        principal: &Principal,
        params: PageParams,
    ) -> AppResult<Page<terms_version::Model>> {
        principal.require_scope(Scope::Read)?;
        paginate(
            &self.db,
            terms_version::Entity::find(),
            terms_version::Column::Id,
            |m| m.id,
            &params,
        )
        .await
    }

    async fn terms_current(&self) -> AppResult<Option<terms_version::Model>> {
        Ok(terms_version::Entity::find()
            .order_by_desc(terms_version::Column::Id)
            .one(&self.db)
            .await?)
    }

    pub async fn terms_publish(
        &self,
        ctx: &OpContext,
        publish: TermsPublish,
    ) -> AppResult<terms_version::Model> {
        ctx.principal.require_admin()?;
        let version = text_validate("version", &publish.version, 64)?;
        let url = text_validate("url", &publish.url, 2000)?;
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(AppError::invalid("`url` must be an http(s) URL"));
        }
        if publish.summary.chars().count() > 4000 {
            return Err(AppError::invalid(
                "`summary` must be at most 4000 characters",
            ));
        }
        let txn = crate::db::begin_write(&self.db).await?;
        let published = terms_version::ActiveModel {
            id: Set(Uuid::now_v7()),
            version: Set(version),
            url: Set(url),
            summary: Set(publish.summary.trim().to_owned()),
            published_by: Set(ctx.principal.user_id()),
            published_at: Set(Utc::now()),
        }
        .insert(&txn)
        .await
        .map_err(unique_violation_as(
            ErrorCode::VersionExists,
            "this version is already published",
        ))?;
        let entry = AuditEntry {
            action: "terms.publish",
            resource_type: "terms",
            resource_id: published.id.to_string(),
            project_id: None,
            details: serde_json::json!({ "version": published.version }),
        };
        audit_record(&txn, ctx, entry).await?;
        txn.commit().await?;
        Ok(published)
    }

    pub async fn terms_status(&self, principal: &Principal) -> AppResult<TermsStatus> {
        principal.require_scope(Scope::Read)?;
        let Some(current) = self.terms_current().await? else {
            return Ok(TermsStatus {
                current: None,
                must_accept: false,
                accepted_at: None,
            });
        };
        let accepted = terms_acceptance::Entity::find()
            .filter(terms_acceptance::Column::UserId.eq(principal.user_id()))
            .filter(terms_acceptance::Column::TermsVersionId.eq(current.id))
            .one(&self.db)
            .await?;
        Ok(TermsStatus {
            must_accept: accepted.is_none(),
            accepted_at: accepted.map(|a| a.accepted_at),
            current: Some(current.into()),
        })
    }

    /// Records the caller's acceptance of the current terms. Accepting again returns the first
    /// acceptance (`created` is false).
    pub async fn terms_accept(
        &self,
        ctx: &OpContext,
        accept: TermsAccept,
    ) -> AppResult<(TermsAcceptanceView, bool)> {
        ctx.principal.require_scope(Scope::Write)?;
        let txn = crate::db::begin_write(&self.db).await?;
        let current = terms_version::Entity::find()
            .order_by_desc(terms_version::Column::Id)
            .one(&txn)
            .await?
            .ok_or_else(|| AppError::invalid("no terms of service are published"))?;
        if current.version != accept.version {
            return Err(AppError::invalid(format!(
                "only the current version (`{}`) can be accepted",
                current.version
            )));
        }
        let existing = terms_acceptance::Entity::find()
            .filter(terms_acceptance::Column::UserId.eq(ctx.principal.user_id()))
            .filter(terms_acceptance::Column::TermsVersionId.eq(current.id))
            .one(&txn)
            .await?;
        let view = |a: terms_acceptance::Model| TermsAcceptanceView {
            id: a.id,
            terms_version_id: a.terms_version_id,
            version: current.version.clone(),
            accepted_at: a.accepted_at,
        };
        if let Some(existing) = existing {
            return Ok((view(existing), false));
        }
        let accepted = terms_acceptance::ActiveModel {
            id: Set(Uuid::now_v7()),
            user_id: Set(ctx.principal.user_id()),
            terms_version_id: Set(current.id),
            request_id: Set(ctx.request_id.clone()),
            accepted_at: Set(Utc::now()),
        }
        .insert(&txn)
        .await?;
        let entry = AuditEntry {
            action: "terms.accept",
            resource_type: "terms_acceptance",
            resource_id: accepted.id.to_string(),
            project_id: None,
            details: serde_json::json!({ "version": current.version }),
        };
        audit_record(&txn, ctx, entry).await?;
        txn.commit().await?;
        Ok((view(accepted), true))
    }

    /// Every acceptance the caller has made, oldest first.
    pub async fn terms_acceptance_list(
        &self,
        principal: &Principal,
        params: PageParams,
    ) -> AppResult<Page<TermsAcceptanceView>> {
        principal.require_scope(Scope::Read)?;
        let select = terms_acceptance::Entity::find()
            .filter(terms_acceptance::Column::UserId.eq(principal.user_id()));
        let page = paginate(
            &self.db,
            select,
            terms_acceptance::Column::Id,
            |m| m.id,
            &params,
        )
        .await?;
        let ids: Vec<Uuid> = page.items.iter().map(|a| a.terms_version_id).collect();
        let versions: HashMap<Uuid, String> = terms_version::Entity::find()
            .filter(terms_version::Column::Id.is_in(ids))
            .all(&self.db)
            .await?
            .into_iter()
            .map(|v| (v.id, v.version))
            .collect();
        let items = page
            .items
            .into_iter()
            .map(|a| TermsAcceptanceView {
                id: a.id,
                terms_version_id: a.terms_version_id,
                version: versions
                    .get(&a.terms_version_id)
                    .cloned()
                    .unwrap_or_default(),
                accepted_at: a.accepted_at,
            })
            .collect();
        Ok(Page {
            items,
            next_cursor: page.next_cursor,
        })
    }
}
