//! Project members and their roles. Users become members by accepting an invitation
//! ([`crate::app::projects::invitations`]). Admins manage members below owner; only owners invite, change or
//! remove owners; a project always keeps at least one owner.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::App;
use crate::app::shared::audit::AuditEntry;
use crate::app::shared::pagination::{Page, PageParams, paginate};
use crate::authz::project_authorize_in;
use crate::authz::{OpContext, Principal, ProjectRole, Scope};
use crate::entity::{project_member, user};
use crate::error::{AppError, AppResult, ErrorCode};
use crate::ids::ProjectId;

/// A user's membership in a project.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MemberView {
    pub user_id: Uuid,
    pub email: String,
    pub name: String,
    pub role: ProjectRole,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A member's new role.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemberUpdate {
    pub role: ProjectRole,
}

/// A membership with the user it belongs to, and its revision (for the ETag).
pub struct Member {
    pub membership: project_member::Model,
    pub view: MemberView,
}

/// Joins memberships with their users (one query for all of them), keeping their order.
async fn members_load(
    db: &impl ConnectionTrait,
    memberships: Vec<project_member::Model>,
) -> AppResult<Vec<Member>> {
    let ids: Vec<Uuid> = memberships.iter().map(|m| m.user_id).collect();
    let users: HashMap<Uuid, user::Model> = user::Entity::find()
        .filter(user::Column::Id.is_in(ids))
        .all(db)
        .await?
        .into_iter()
        .map(|u| (u.id, u))
        .collect();
    memberships
        .into_iter()
        .map(|membership| {
            let user = users
                .get(&membership.user_id)
                .ok_or_else(|| AppError::internal("membership of a missing user"))?;
            let view = MemberView {
                user_id: user.id,
                email: user.email.clone(),
                name: user.name.clone(),
                role: ProjectRole::parse(&membership.role)?,
                created_at: membership.created_at,
                updated_at: membership.updated_at,
            };
            Ok(Member { membership, view })
        })
        .collect()
}

pub(crate) async fn member_load(
    db: &impl ConnectionTrait,
    membership: project_member::Model,
) -> AppResult<Member> {
    members_load(db, vec![membership])
        .await?
        .pop()
        .ok_or_else(|| AppError::internal("membership vanished"))
}

async fn membership_find(
    db: &impl ConnectionTrait,
    project_id: ProjectId,
    user_id: Uuid,
) -> AppResult<project_member::Model> {
    project_member::Entity::find()
        .filter(project_member::Column::ProjectId.eq(project_id))
        .filter(project_member::Column::UserId.eq(user_id))
        .one(db)
        .await?
        .ok_or_else(|| AppError::not_found("member"))
}

/// The caller's power over memberships: the role needed to grant or take away `role`.
pub(crate) fn role_to_manage(role: ProjectRole) -> ProjectRole {
    if role == ProjectRole::Owner {
        ProjectRole::Owner
    } else {
        ProjectRole::Admin
    }
}

async fn owners_count(db: &impl ConnectionTrait, project_id: ProjectId) -> AppResult<u64> {
    Ok(project_member::Entity::find()
        .filter(project_member::Column::ProjectId.eq(project_id))
        .filter(project_member::Column::Role.eq(ProjectRole::Owner.as_str()))
        .count(db)
        .await?)
}

impl App {
    pub async fn member_list(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        params: PageParams,
    ) -> AppResult<Page<MemberView>> {
        self.project_authorize(principal, project_id, ProjectRole::Viewer, Scope::Read)
            .await?;
        let select =
            project_member::Entity::find().filter(project_member::Column::ProjectId.eq(project_id));
        let page = paginate(
            &self.db,
            select,
            project_member::Column::Id,
            |m| m.id,
            &params,
        )
        .await?;
        let items = members_load(&self.db, page.items)
            .await?
            .into_iter()
            .map(|m| m.view)
            .collect();
        Ok(Page {
            items,
            next_cursor: page.next_cursor,
        })
    }

    pub async fn member_view(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        user_id: Uuid,
    ) -> AppResult<Member> {
        self.project_authorize(principal, project_id, ProjectRole::Viewer, Scope::Read)
            .await?;
        member_load(
            &self.db,
            membership_find(&self.db, project_id, user_id).await?,
        )
        .await
    }

    pub async fn member_update(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        user_id: Uuid,
        if_match: Option<&str>,
        update: MemberUpdate,
    ) -> AppResult<Member> {
        let write = self
            .project_write(ctx, project_id, ProjectRole::Admin, Scope::Write)
            .await?;
        let current = write.precondition(
            membership_find(&write.txn, project_id, user_id).await?,
            if_match,
        )?;
        let current_role = ProjectRole::parse(&current.role)?;
        let needed = role_to_manage(current_role).max(role_to_manage(update.role));
        project_authorize_in(&write.txn, &ctx.principal, project_id, needed, Scope::Write).await?;
        if current_role == ProjectRole::Owner
            && update.role != ProjectRole::Owner
            && owners_count(&write.txn, project_id).await? <= 1
        {
            return Err(AppError::new(
                ErrorCode::LastOwner,
                "a project must keep at least one owner",
            ));
        }
        let mut active: project_member::ActiveModel = current.into();
        active.role = Set(update.role.as_str().into());
        let updated = write.save(active).await?;
        let member = member_load(&write.txn, updated.clone()).await?;
        write
            .commit(member_audit("member.update", &updated))
            .await?;
        self.auth_changed();
        Ok(member)
    }

    pub async fn member_remove(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        user_id: Uuid,
        if_match: Option<&str>,
    ) -> AppResult<()> {
        let write = self
            .project_write(ctx, project_id, ProjectRole::Viewer, Scope::Write)
            .await?;
        let current = write.precondition(
            membership_find(&write.txn, project_id, user_id).await?,
            if_match,
        )?;
        let role = ProjectRole::parse(&current.role)?;
        // Anyone may leave; removing someone else needs the power to manage their role.
        if user_id != ctx.principal.user_id() {
            project_authorize_in(
                &write.txn,
                &ctx.principal,
                project_id,
                role_to_manage(role),
                Scope::Write,
            )
            .await?;
        }
        if role == ProjectRole::Owner && owners_count(&write.txn, project_id).await? <= 1 {
            return Err(AppError::new(
                ErrorCode::LastOwner,
                "a project must keep at least one owner",
            ));
        }
        project_member::Entity::delete_by_id(current.id)
            .exec(&write.txn)
            .await?;
        write
            .commit(member_audit("member.remove", &current))
            .await?;
        self.auth_changed();
        Ok(())
    }
}

fn member_audit(action: &'static str, membership: &project_member::Model) -> AuditEntry {
    AuditEntry {
        action,
        resource_type: "member",
        resource_id: membership.user_id.to_string(),
        project_id: Some(membership.project_id),
        details: serde_json::json!({ "role": membership.role }),
    }
}
