//! The caps on what one tenant holds ([`crate::app::shared::limits`]), with how much of each is
//! held now: a user's own (`/v1/me/limits`) and a project's (`/v1/projects/{id}/limits`), so
//! that a client can show "12 of 100 services" before a create is refused.

use serde::Serialize;
use utoipa::ToSchema;

use crate::app::App;
use crate::app::shared::limits::{Holder, Limit};
use crate::app::shared::sizes::ServiceSizes;
use crate::authz::{Principal, ProjectRole, Scope};
use crate::error::AppResult;
use crate::ids::ProjectId;

/// Whose rows a cap counts.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LimitHolder {
    User,
    Project,
}

/// One cap, and how much of it is held.
#[derive(Debug, Serialize, ToSchema)]
pub struct LimitView {
    /// Its name, as operators set it (`--limit NAME=N`, `[limits]`).
    #[schema(example = "services_per_project")]
    pub name: String,
    /// What it counts (`projects`, `API tokens`, `services`, ...).
    pub counts: String,
    /// Whose rows it counts.
    pub per: LimitHolder,
    /// The most allowed; a create past it answers 409 `limit_reached`.
    pub max: u64,
    /// How many are held now.
    pub used: u64,
}

/// Caps and their use.
#[derive(Debug, Serialize, ToSchema)]
pub struct LimitsView {
    pub limits: Vec<LimitView>,
    /// The sizes the project's services may have (a project's limits only): a service given
    /// none gets `default`; one that asks for more CPU or memory than `max` is refused (422).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_sizes: Option<ServiceSizes>,
}

impl App {
    /// The per-user caps, with what the caller holds.
    pub async fn me_limits(&self, principal: &Principal) -> AppResult<LimitsView> {
        principal.require_scope(Scope::Read)?;
        let holder = Holder::User(principal.user_id());
        let limits = self.limits_of(holder, |limit| !limit.per_project()).await?;
        Ok(LimitsView {
            limits,
            service_sizes: None,
        })
    }

    /// The per-project caps, with what the project holds (viewers and above).
    pub async fn project_limits(
        &self,
        principal: &Principal,
        project_id: ProjectId,
    ) -> AppResult<LimitsView> {
        self.project_authorize(principal, project_id, ProjectRole::Viewer, Scope::Read)
            .await?;
        let limits = self
            .limits_of(Holder::Project(project_id), Limit::per_project)
            .await?;
        Ok(LimitsView {
            limits,
            service_sizes: Some(self.settings.service_sizes),
        })
    }

    async fn limits_of(
        &self,
        holder: Holder,
        which: impl Fn(Limit) -> bool,
    ) -> AppResult<Vec<LimitView>> {
        let mut limits = Vec::new();
        for limit in Limit::ALL.into_iter().filter(|limit| which(*limit)) {
            limits.push(LimitView {
                name: limit.name().to_owned(),
                counts: limit.counts().to_owned(),
                per: if limit.per_project() {
                    LimitHolder::Project
                } else {
                    LimitHolder::User
                },
                max: self.settings.limits.get(limit),
                used: limit.held(&self.db, holder).await?,
            });
        }
        Ok(limits)
    }
}
