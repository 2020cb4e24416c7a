//! Invitations: how a user becomes a member of a project. A project administrator invites an
//! email with a role; the user with that email sees the invitation at `/v1/me/invitations` and
//! accepts (becoming a member) or declines it.
//!
//! Inviting answers the same whether or not an account has the email, so that the
//! administrators of one tenant cannot find out which emails have accounts (adding an existing
//! user directly would tell them). Invitations expire after [`INVITATION_TTL_DAYS`] days.

use std::collections::HashMap;

use chrono::{DateTime, Duration, Utc};
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::App;
use crate::app::identity::users::email_validate;
use crate::app::projects::members::{Member, member_load, role_to_manage};
use crate::app::shared::audit::{AuditEntry, audit_record};
use crate::app::shared::limits::{Holder, Limit};
use crate::app::shared::pagination::{Page, PageParams, paginate};
use crate::authz::project_authorize_in;
use crate::authz::{OpContext, Principal, ProjectRole, Scope};
use crate::entity::{project, project_invitation, project_member, user};
use crate::error::{AppError, AppResult, ErrorCode, unique_violation_as};
use crate::ids::ProjectId;

pub const INVITATION_TTL_DAYS: i64 = 7;

/// An invitation to a project.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct InvitationView {
    pub id: Uuid,
    pub project_id: Uuid,
    /// The project's name, so that the invited user knows what they would join.
    pub project_name: String,
    pub email: String,
    /// The role the invited user gets on accepting.
    pub role: ProjectRole,
    pub created_at: DateTime<Utc>,
    /// After this, the invitation can no longer be accepted.
    pub expires_at: DateTime<Utc>,
}

impl App {
    /// The views of invitations, with their projects' names (one query for them all).
    pub async fn invitation_views(
        &self,
        invitations: Vec<project_invitation::Model>,
    ) -> AppResult<Vec<InvitationView>> {
        let ids: Vec<ProjectId> = invitations.iter().map(|m| m.project_id).collect();
        let names: HashMap<ProjectId, String> = project::Entity::find()
            .filter(project::Column::Id.is_in(ids))
            .all(&self.db)
            .await?
            .into_iter()
            .map(|p| (p.id, p.name))
            .collect();
        invitations
            .into_iter()
            .map(|m| {
                Ok(InvitationView {
                    id: m.id,
                    project_id: m.project_id.into(),
                    project_name: names.get(&m.project_id).cloned().unwrap_or_default(),
                    role: ProjectRole::parse(&m.role)?,
                    email: m.email,
                    created_at: m.created_at,
                    expires_at: m.expires_at,
                })
            })
            .collect()
    }
}

/// Invites an email to the project with a role.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InvitationCreate {
    pub email: String,
    pub role: ProjectRole,
}

async fn invitation_find(
    db: &impl ConnectionTrait,
    project_id: ProjectId,
    id: Uuid,
) -> AppResult<project_invitation::Model> {
    project_invitation::Entity::find_by_id(id)
        .filter(project_invitation::Column::ProjectId.eq(project_id))
        .one(db)
        .await?
        .ok_or_else(|| AppError::not_found("invitation"))
}

/// An unexpired invitation addressed to `principal`'s email.
async fn invitation_mine(
    db: &impl ConnectionTrait,
    principal: &Principal,
    id: Uuid,
) -> AppResult<project_invitation::Model> {
    project_invitation::Entity::find_by_id(id)
        .filter(project_invitation::Column::Email.eq(&principal.user.email))
        .filter(project_invitation::Column::ExpiresAt.gt(Utc::now()))
        .one(db)
        .await?
        .ok_or_else(|| AppError::not_found("invitation"))
}

impl App {
    pub async fn invitation_list(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        params: PageParams,
    ) -> AppResult<Page<project_invitation::Model>> {
        self.project_authorize(principal, project_id, ProjectRole::Admin, Scope::Read)
            .await?;
        let select = project_invitation::Entity::find()
            .filter(project_invitation::Column::ProjectId.eq(project_id));
        paginate(
            &self.db,
            select,
            project_invitation::Column::Id,
            |m| m.id,
            &params,
        )
        .await
    }

    /// Invites `create.email`. Refused (409) only for what the caller can already see: an
    /// email of a current member, or one with a pending invitation.
    pub async fn invitation_create(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        create: InvitationCreate,
    ) -> AppResult<project_invitation::Model> {
        let email = email_validate(&create.email)?;
        let write = self
            .project_write(ctx, project_id, role_to_manage(create.role), Scope::Write)
            .await?;
        let account = user::Entity::find()
            .filter(user::Column::Email.eq(&email))
            .one(&write.txn)
            .await?;
        let member = match account {
            Some(account) => project_member::Entity::find()
                .filter(project_member::Column::ProjectId.eq(project_id))
                .filter(project_member::Column::UserId.eq(account.id))
                .one(&write.txn)
                .await?
                .is_some(),
            None => false,
        };
        if member {
            return Err(AppError::new(
                ErrorCode::AlreadyMember,
                "a member of this project has this email",
            ));
        }
        // An expired invitation is replaced.
        project_invitation::Entity::delete_many()
            .filter(project_invitation::Column::ProjectId.eq(project_id))
            .filter(project_invitation::Column::Email.eq(&email))
            .filter(project_invitation::Column::ExpiresAt.lte(Utc::now()))
            .exec(&write.txn)
            .await?;
        write
            .room_check(&self.settings.limits, Limit::MembersPerProject)
            .await?;
        write
            .room_check(&self.settings.limits, Limit::InvitationsPerProject)
            .await?;
        let now = Utc::now();
        let invitation = project_invitation::ActiveModel {
            id: Set(Uuid::now_v7()),
            project_id: Set(project_id),
            email: Set(email),
            role: Set(create.role.as_str().into()),
            invited_by: Set(Some(ctx.principal.user_id())),
            created_at: Set(now),
            expires_at: Set(now + Duration::days(INVITATION_TTL_DAYS)),
        }
        .insert(&write.txn)
        .await
        .map_err(unique_violation_as(
            ErrorCode::AlreadyInvited,
            "this email has a pending invitation to the project",
        ))?;
        write
            .commit(invitation_audit("invitation.create", &invitation))
            .await?;
        Ok(invitation)
    }

    /// Withdraws an invitation (whoever could have made it).
    pub async fn invitation_revoke(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        id: Uuid,
    ) -> AppResult<()> {
        let write = self
            .project_write(ctx, project_id, ProjectRole::Admin, Scope::Write)
            .await?;
        let invitation = invitation_find(&write.txn, project_id, id).await?;
        // Owners withdraw owner invitations.
        let role = ProjectRole::parse(&invitation.role)?;
        project_authorize_in(
            &write.txn,
            &ctx.principal,
            project_id,
            role_to_manage(role),
            Scope::Write,
        )
        .await?;
        project_invitation::Entity::delete_by_id(id)
            .exec(&write.txn)
            .await?;
        write
            .commit(invitation_audit("invitation.revoke", &invitation))
            .await
    }

    /// The unexpired invitations addressed to the caller's email.
    pub async fn me_invitation_list(
        &self,
        principal: &Principal,
        params: PageParams,
    ) -> AppResult<Page<project_invitation::Model>> {
        principal.require_scope(Scope::Read)?;
        let select = project_invitation::Entity::find()
            .filter(project_invitation::Column::Email.eq(&principal.user.email))
            .filter(project_invitation::Column::ExpiresAt.gt(Utc::now()));
        paginate(
            &self.db,
            select,
            project_invitation::Column::Id,
            |m| m.id,
            &params,
        )
        .await
    }

    /// Accepts an invitation: the caller becomes a member with its role.
    pub async fn me_invitation_accept(&self, ctx: &OpContext, id: Uuid) -> AppResult<Member> {
        ctx.principal.require_scope(Scope::Write)?;
        let txn = crate::db::begin_write(&self.db).await?;
        let invitation = invitation_mine(&txn, &ctx.principal, id).await?;
        // The project's row, locked: members join one at a time, within the cap.
        crate::db::row_lock::<project::Entity>(&txn, invitation.project_id).await?;
        self.settings
            .limits
            .room_check_held(
                &txn,
                Limit::MembersPerProject,
                Holder::Project(invitation.project_id),
            )
            .await?;
        let now = Utc::now();
        let membership = project_member::ActiveModel {
            id: Set(Uuid::now_v7()),
            project_id: Set(invitation.project_id),
            user_id: Set(ctx.principal.user_id()),
            role: Set(invitation.role.clone()),
            revision: Set(1),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&txn)
        .await
        .map_err(unique_violation_as(
            ErrorCode::AlreadyMember,
            "you are already a member of this project",
        ))?;
        project_invitation::Entity::delete_by_id(id)
            .exec(&txn)
            .await?;
        audit_record(
            &txn,
            ctx,
            invitation_audit("invitation.accept", &invitation),
        )
        .await?;
        let member = member_load(&txn, membership).await?;
        txn.commit().await?;
        self.auth_changed();
        Ok(member)
    }

    /// Declines an invitation.
    pub async fn me_invitation_decline(&self, ctx: &OpContext, id: Uuid) -> AppResult<()> {
        ctx.principal.require_scope(Scope::Write)?;
        let txn = crate::db::begin_write(&self.db).await?;
        let invitation = invitation_mine(&txn, &ctx.principal, id).await?;
        project_invitation::Entity::delete_by_id(id)
            .exec(&txn)
            .await?;
        audit_record(
            &txn,
            ctx,
            invitation_audit("invitation.decline", &invitation),
        )
        .await?;
        txn.commit().await?;
        Ok(())
    }

    /// Deletes expired invitations; returns how many.
    pub async fn invitations_purge(&self) -> AppResult<u64> {
        Ok(project_invitation::Entity::delete_many()
            .filter(project_invitation::Column::ExpiresAt.lte(Utc::now()))
            .exec(&self.db)
            .await?
            .rows_affected)
    }
}

fn invitation_audit(action: &'static str, invitation: &project_invitation::Model) -> AuditEntry {
    AuditEntry {
        action,
        resource_type: "invitation",
        resource_id: invitation.id.to_string(),
        project_id: Some(invitation.project_id),
        details: serde_json::json!({ "email": invitation.email, "role": invitation.role }),
    }
}
