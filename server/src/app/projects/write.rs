//! The shape every write to a project-scoped resource shares (environments, services, domains,
//! members, deployments): a write transaction in which the caller's role and token scope are
//! checked (and the project row locked, so that concurrent writes to one project queue), the
//! `If-Match` precondition against the resource's revision, the next revision saved, and the
//! audit event committed with the change.
//!
//! A resource module finds its row, decides what changes, and calls these steps in order;
//! it never opens a transaction or writes the audit log itself.

use chrono::Utc;
use sea_orm::{
    ActiveModelBehavior, ActiveModelTrait, DatabaseTransaction, DbErr, EntityTrait,
    IntoActiveModel, Set,
};

use crate::app::App;
use crate::app::shared::audit::{AuditEntry, audit_record};
use crate::app::shared::limits::{Holder, Limit, TenantLimits};
use crate::app::shared::validate::if_match_check;
use crate::authz::project_authorize_in;
use crate::authz::{OpContext, ProjectRole, Scope};
use crate::entity::{domain, environment, project, project_member, service};
use crate::error::AppResult;
use crate::ids::ProjectId;

/// A model with a revision (its strong `ETag` is [`crate::app::shared::validate::etag_for`] of it).
pub trait Revisioned {
    fn revision(&self) -> i64;
}

/// An active model whose save makes the next revision.
pub trait RevisionBump {
    /// Sets the revision to the next one and `updated_at` to now.
    fn revision_bump(&mut self);
}

macro_rules! revisioned {
    ($($table:ident),* $(,)?) => {$(
        impl Revisioned for $table::Model {
            fn revision(&self) -> i64 {
                self.revision
            }
        }

        impl RevisionBump for $table::ActiveModel {
            fn revision_bump(&mut self) {
                let next = *self.revision.as_ref() + 1;
                self.revision = Set(next);
                self.updated_at = Set(Utc::now());
            }
        }
    )*};
}

revisioned!(project, environment, service, domain, project_member);

/// A write in progress in one project, for one caller.
pub struct ProjectWrite<'a> {
    /// The transaction every read and write of the change goes through.
    pub txn: DatabaseTransaction,
    /// The project, locked for the rest of the transaction.
    pub project: project::Model,
    ctx: &'a OpContext,
}

impl App {
    /// Begins a write in `project_id` for a caller who holds at least `role` there and `scope`
    /// on its credential (404 for a non-member, 403 for a narrower role or scope).
    pub async fn project_write<'a>(
        &self,
        ctx: &'a OpContext,
        project_id: ProjectId,
        role: ProjectRole,
        scope: Scope,
    ) -> AppResult<ProjectWrite<'a>> {
        let txn = crate::db::begin_write(&self.db).await?;
        let project = project_authorize_in(&txn, &ctx.principal, project_id, role, scope).await?;
        Ok(ProjectWrite { txn, project, ctx })
    }
}

impl ProjectWrite<'_> {
    /// The resource the write is about, if `If-Match` (when given) names its current revision;
    /// 412 otherwise.
    pub fn precondition<M: Revisioned>(&self, current: M, if_match: Option<&str>) -> AppResult<M> {
        if_match_check(if_match, current.revision())?;
        Ok(current)
    }

    /// Saves `active` as the next revision of its row. The database error is returned as it is,
    /// so that the caller can say which unique value is taken.
    pub async fn save<A>(&self, mut active: A) -> Result<<A::Entity as EntityTrait>::Model, DbErr>
    where
        A: ActiveModelTrait + ActiveModelBehavior + RevisionBump + Send,
        <A::Entity as EntityTrait>::Model: IntoActiveModel<A>,
    {
        active.revision_bump();
        active.update(&self.txn).await
    }

    /// Checks that the project holds fewer of what `limit` counts than it allows (409
    /// `limit_reached`); the project's row is locked, so concurrent creates queue here.
    pub async fn room_check(&self, limits: &TenantLimits, limit: Limit) -> AppResult<()> {
        limits
            .room_check_held(&self.txn, limit, Holder::Project(self.project.id))
            .await
    }

    /// Records `entry` in the audit log and commits the change with it.
    pub async fn commit(self, entry: AuditEntry) -> AppResult<()> {
        audit_record(&self.txn, self.ctx, entry).await?;
        self.txn.commit().await?;
        Ok(())
    }
}
