//! Projects, and the authorization rule every project-scoped resource goes through
//! ([`App::project_authorize`]).

pub mod domain_verification;
pub mod domains;
pub mod environments;
pub mod invitations;
pub mod limits;
pub mod members;
pub mod scoped;
pub mod services;
pub mod write;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Query;
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::App;
use crate::app::shared::audit::{AuditEntry, audit_record};
use crate::app::shared::limits::{Holder, Limit};
use crate::app::shared::pagination::{Page, PageParams, paginate};
use crate::app::shared::validate::if_match_check;
use crate::app::shared::validate::text_validate;
use crate::authz::{
    AuthzCheck, OpContext, Principal, ProjectRole, Scope, access_decide, project_authorize_in,
};
use crate::entity::{project, project_member};
use crate::error::{AppError, AppResult};
use crate::ids::ProjectId;

/// A project: the unit of ownership of environments, services and domains.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ProjectView {
    pub id: Uuid,
    pub name: String,
    pub description: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<project::Model> for ProjectView {
    fn from(m: project::Model) -> Self {
        Self {
            id: m.id.into(),
            name: m.name,
            description: m.description,
            created_at: m.created_at,
            updated_at: m.updated_at,
        }
    }
}

/// A new project; its creator becomes its owner.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProjectCreate {
    /// 1 to 100 characters.
    #[schema(min_length = 1, max_length = 100)]
    pub name: String,
    #[serde(default)]
    pub description: String,
}

/// Changes to a project; absent fields are unchanged.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProjectUpdate {
    #[schema(min_length = 1, max_length = 100)]
    pub name: Option<String>,
    pub description: Option<String>,
}

fn description_validate(description: &str) -> AppResult<String> {
    if description.chars().count() > 2000 {
        return Err(AppError::invalid(
            "`description` must be at most 2000 characters",
        ));
    }
    Ok(description.trim().to_owned())
}

impl App {
    /// Finds a project and checks that `principal` holds at least `role` in it and `scope` on
    /// its credential. Non-members get 404 (they may not learn that the project exists);
    /// members below `role` get 403. Administrators act as owners.
    ///
    /// This is the path of reads, through the [`crate::app::identity::auth_cache`]: the project and the
    /// caller's membership are read from the database at most once per cache lifetime. Writes
    /// authorize inside their transaction ([`App::project_write`]).
    pub async fn project_authorize(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        role: ProjectRole,
        scope: Scope,
    ) -> AppResult<project::Model> {
        AuthzCheck::Project {
            project_id,
            role,
            scope,
        }
        .record();
        let user_id = principal.user_id();
        if let Some(access) = self.auth_cache.access(user_id, project_id) {
            return access_decide(principal, access.project.clone(), access.role, role, scope);
        }
        let generation = self.auth_cache.generation();
        let project = project::Entity::find_by_id(project_id)
            .one(&self.db)
            .await?;
        let member_role = match &project {
            None => None,
            Some(_) => project_member::Entity::find()
                .filter(project_member::Column::ProjectId.eq(project_id))
                .filter(project_member::Column::UserId.eq(user_id))
                .one(&self.db)
                .await?
                .map(|membership| ProjectRole::parse(&membership.role))
                .transpose()?,
        };
        self.auth_cache.access_insert(
            user_id,
            project_id,
            generation,
            project.clone(),
            member_role,
        );
        access_decide(principal, project, member_role, role, scope)
    }

    pub async fn project_list(
        &self,
        principal: &Principal,
        params: PageParams,
    ) -> AppResult<Page<project::Model>> {
        principal.require_scope(Scope::Read)?;
        let mut select = project::Entity::find();
        if !principal.is_admin() {
            let member_of = Query::select()
                .column(project_member::Column::ProjectId)
                .from(project_member::Entity)
                .and_where(project_member::Column::UserId.eq(principal.user_id()))
                .to_owned();
            select = select.filter(project::Column::Id.in_subquery(member_of));
        }
        paginate(&self.db, select, project::Column::Id, |m| m.id, &params).await
    }

    pub async fn project_view(
        &self,
        principal: &Principal,
        id: ProjectId,
    ) -> AppResult<project::Model> {
        self.project_authorize(principal, id, ProjectRole::Viewer, Scope::Read)
            .await
    }

    pub async fn project_create(
        &self,
        ctx: &OpContext,
        create: ProjectCreate,
    ) -> AppResult<project::Model> {
        ctx.principal.require_scope(Scope::Write)?;
        let name = text_validate("name", &create.name, 100)?;
        let description = description_validate(&create.description)?;
        let now = Utc::now();
        let txn = crate::db::begin_write(&self.db).await?;
        let owner = ctx.principal.user_id();
        // The user's row, locked: one user's creates queue here, within the cap.
        crate::db::row_lock::<crate::entity::user::Entity>(&txn, owner).await?;
        self.settings
            .limits
            .room_check_held(&txn, Limit::ProjectsPerUser, Holder::User(owner))
            .await?;
        let created = project::ActiveModel {
            id: Set(ProjectId::new()),
            name: Set(name),
            description: Set(description),
            revision: Set(1),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&txn)
        .await?;
        project_member::ActiveModel {
            id: Set(Uuid::now_v7()),
            project_id: Set(created.id),
            user_id: Set(ctx.principal.user_id()),
            role: Set(ProjectRole::Owner.as_str().into()),
            revision: Set(1),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&txn)
        .await?;
        audit_record(&txn, ctx, project_audit("project.create", &created)).await?;
        txn.commit().await?;
        self.auth_changed();
        Ok(created)
    }

    pub async fn project_update(
        &self,
        ctx: &OpContext,
        id: ProjectId,
        if_match: Option<&str>,
        update: ProjectUpdate,
    ) -> AppResult<project::Model> {
        let txn = crate::db::begin_write(&self.db).await?;
        let current =
            project_authorize_in(&txn, &ctx.principal, id, ProjectRole::Admin, Scope::Write)
                .await?;
        if_match_check(if_match, current.revision)?;
        let mut active: project::ActiveModel = current.clone().into();
        if let Some(name) = update.name {
            active.name = Set(text_validate("name", &name, 100)?);
        }
        if let Some(description) = update.description {
            active.description = Set(description_validate(&description)?);
        }
        active.revision = Set(current.revision + 1);
        active.updated_at = Set(Utc::now());
        let updated = active.update(&txn).await?;
        audit_record(&txn, ctx, project_audit("project.update", &updated)).await?;
        txn.commit().await?;
        self.auth_changed();
        Ok(updated)
    }

    /// Deletes a project with everything in it (owners only).
    pub async fn project_delete(
        &self,
        ctx: &OpContext,
        id: ProjectId,
        if_match: Option<&str>,
    ) -> AppResult<()> {
        let txn = crate::db::begin_write(&self.db).await?;
        let current =
            project_authorize_in(&txn, &ctx.principal, id, ProjectRole::Owner, Scope::Write)
                .await?;
        if_match_check(if_match, current.revision)?;
        crate::app::projects::services::instances_none_live(
            &txn,
            crate::entity::instance::Column::ProjectId.eq(id),
        )
        .await?;
        project::Entity::delete_by_id(id).exec(&txn).await?;
        audit_record(&txn, ctx, project_audit("project.delete", &current)).await?;
        txn.commit().await?;
        self.auth_changed();
        // Its domains went with it.
        self.changes.routes_all_changed();
        Ok(())
    }
}

fn project_audit(action: &'static str, project: &project::Model) -> AuditEntry {
    AuditEntry {
        action,
        resource_type: "project",
        resource_id: project.id.to_string(),
        project_id: Some(project.id),
        details: serde_json::json!({ "name": project.name }),
    }
}
