//! Environments of a project (e.g. `production`, `staging`): named groups of services.

use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::App;
use crate::app::projects::scoped::scoped_find;
use crate::app::shared::audit::AuditEntry;
use crate::app::shared::limits::Limit;
use crate::app::shared::pagination::{PageParams, ViewPage};
use crate::app::shared::validate::slug_validate;
use crate::authz::{OpContext, Principal, ProjectRole, Scope};
use crate::entity::{environment, service};
use crate::error::{AppError, AppResult, ErrorCode, unique_violation_as};
use crate::ids::{EnvironmentId, ProjectId};

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EnvironmentView {
    pub id: Uuid,
    pub project_id: Uuid,
    /// Unique in the project: lowercase letters, digits and `-`.
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<environment::Model> for EnvironmentView {
    fn from(m: environment::Model) -> Self {
        Self {
            id: m.id.into(),
            project_id: m.project_id.into(),
            name: m.name,
            created_at: m.created_at,
            updated_at: m.updated_at,
        }
    }
}

/// A new environment, or an environment's new name.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentWrite {
    #[schema(
        min_length = 1,
        max_length = 63,
        pattern = "^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$"
    )]
    pub name: String,
}

impl App {
    pub async fn environment_list(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        params: PageParams,
    ) -> AppResult<ViewPage> {
        self.scoped_list_views::<environment::Entity, EnvironmentView>(
            principal, project_id, params,
        )
        .await
    }

    pub async fn environment_view(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        id: EnvironmentId,
    ) -> AppResult<environment::Model> {
        self.scoped_view::<environment::Entity>(principal, project_id, id)
            .await
    }

    pub async fn environment_create(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        create: EnvironmentWrite,
    ) -> AppResult<environment::Model> {
        let name = slug_validate("name", &create.name)?;
        let write = self
            .project_write(ctx, project_id, ProjectRole::Member, Scope::Write)
            .await?;
        write
            .room_check(&self.settings.limits, Limit::EnvironmentsPerProject)
            .await?;
        let now = Utc::now();
        let created = environment::ActiveModel {
            id: Set(EnvironmentId::new()),
            project_id: Set(project_id),
            name: Set(name),
            revision: Set(1),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&write.txn)
        .await
        .map_err(name_taken)?;
        write
            .commit(environment_audit("environment.create", &created))
            .await?;
        Ok(created)
    }

    pub async fn environment_update(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        id: EnvironmentId,
        if_match: Option<&str>,
        update: EnvironmentWrite,
    ) -> AppResult<environment::Model> {
        let name = slug_validate("name", &update.name)?;
        let write = self
            .project_write(ctx, project_id, ProjectRole::Member, Scope::Write)
            .await?;
        let current = write.precondition(
            scoped_find::<environment::Entity>(&write.txn, project_id, id).await?,
            if_match,
        )?;
        let mut active: environment::ActiveModel = current.into();
        active.name = Set(name);
        let updated = write.save(active).await.map_err(name_taken)?;
        write
            .commit(environment_audit("environment.update", &updated))
            .await?;
        Ok(updated)
    }

    /// Deletes an empty environment; one that still has services is refused with 409.
    pub async fn environment_delete(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        id: EnvironmentId,
        if_match: Option<&str>,
    ) -> AppResult<()> {
        let write = self
            .project_write(ctx, project_id, ProjectRole::Admin, Scope::Write)
            .await?;
        let current = write.precondition(
            scoped_find::<environment::Entity>(&write.txn, project_id, id).await?,
            if_match,
        )?;
        let services = service::Entity::find()
            .filter(service::Column::EnvironmentId.eq(id))
            .count(&write.txn)
            .await?;
        if services > 0 {
            return Err(AppError::new(
                ErrorCode::EnvironmentNotEmpty,
                format!("the environment still has {services} service(s)"),
            ));
        }
        environment::Entity::delete_by_id(id)
            .exec(&write.txn)
            .await?;
        write
            .commit(environment_audit("environment.delete", &current))
            .await?;
        Ok(())
    }
}

fn name_taken(err: sea_orm::DbErr) -> AppError {
    unique_violation_as(
        ErrorCode::NameTaken,
        "the project has an environment with this name",
    )(err)
}

fn environment_audit(action: &'static str, environment: &environment::Model) -> AuditEntry {
    AuditEntry {
        action,
        resource_type: "environment",
        resource_id: environment.id.to_string(),
        project_id: Some(environment.project_id),
        details: serde_json::json!({ "name": environment.name }),
    }
}
