//! Which commit a deployment made by hand deploys: the one given, or else the latest commit
//! pushed to a branch the service is bound to (a push deploys its own: see
//! [`intake_worker`](crate::app::git::intake_worker)). A service bound to no branch, deployed
//! without a commit, deploys no particular one.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait, Func};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder};
use uuid::Uuid;

use crate::app::App;
use crate::app::deploys::deployments::{DeploymentCreate, DeploymentPush, Deploys};
use crate::app::git::installations::PushBinding;
use crate::app::projects::scoped::scoped_find;
use crate::app::projects::services::revision::SourceRevision;
use crate::authz::{OpContext, ProjectRole, Scope};
use crate::entity::{deployment, git_delivery, git_installation, service};
use crate::error::{AppError, AppResult};
use crate::ids::{ProjectId, ServiceId};

impl App {
    /// Queues a deployment of the service's current spec at the commit asked for, or at the
    /// latest commit pushed to a branch it is bound to.
    pub async fn deployment_create(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        service_id: ServiceId,
        request: DeploymentCreate,
    ) -> AppResult<deployment::Model> {
        // Nothing of the project is read for a caller who may not deploy in it.
        self.project_authorize(
            &ctx.principal,
            project_id,
            ProjectRole::Member,
            Scope::Deploy,
        )
        .await?;
        let found = scoped_find::<service::Entity>(&self.db, project_id, service_id).await?;
        let revision = revision_to_deploy(&self.db, &found, request.commit).await?;
        self.deployment_make(ctx, project_id, service_id, Deploys::CurrentSpec(revision))
            .await
    }
}

/// The branches `service` is bound to, with their installations.
async fn service_bindings(
    db: &impl ConnectionTrait,
    service: &service::Model,
) -> AppResult<Vec<(Uuid, PushBinding)>> {
    let installations = git_installation::Entity::find()
        .filter(git_installation::Column::ProjectId.eq(service.project_id))
        .all(db)
        .await?;
    let mut bound = Vec::new();
    for installation in installations {
        let bindings: Vec<PushBinding> =
            serde_json::from_value(installation.bindings).map_err(AppError::internal)?;
        bound.extend(
            bindings
                .into_iter()
                .filter(|binding| binding.service_id == Uuid::from(service.id))
                .map(|binding| (installation.id, binding)),
        );
    }
    Ok(bound)
}

/// The revision a deployment of `service` made by hand deploys.
async fn revision_to_deploy(
    db: &impl ConnectionTrait,
    service: &service::Model,
    commit: Option<String>,
) -> AppResult<Option<SourceRevision>> {
    let bindings = service_bindings(db, service).await?;
    let Some(commit) = commit else {
        return latest_push(db, service, &bindings).await;
    };
    SourceRevision::commit_validate(&commit)?;
    // The branch it was pushed to, when a delivery says so; else the service's one branch.
    for (installation, binding) in &bindings {
        let pushed = deliveries_of(*installation, binding)
            .filter(git_delivery::Column::CommitSha.eq(&commit))
            .one(db)
            .await?;
        if let Some(pushed) = pushed {
            return Ok(Some(delivery_revision(pushed)));
        }
    }
    let only = match bindings.as_slice() {
        [(_, binding)] => Some(binding),
        _ => None,
    };
    Ok(Some(SourceRevision {
        commit,
        branch: only.map(|b| b.branch.clone()),
        repository: only.map(|b| b.repository.clone()),
    }))
}

/// The revision a delivery pushed.
fn delivery_revision(pushed: git_delivery::Model) -> SourceRevision {
    SourceRevision {
        commit: pushed.commit_sha,
        branch: Some(pushed.branch),
        repository: Some(pushed.repository),
    }
}

/// The deliveries of `binding`'s repository and branch to `installation`.
fn deliveries_of(
    installation: Uuid,
    binding: &PushBinding,
) -> sea_orm::Select<git_delivery::Entity> {
    git_delivery::Entity::find()
        .filter(git_delivery::Column::InstallationId.eq(installation))
        .filter(git_delivery::Column::Branch.eq(&binding.branch))
        .filter(
            Expr::expr(Func::lower(Expr::col(git_delivery::Column::Repository)))
                .eq(binding.repository.to_lowercase()),
        )
}

/// The latest commit pushed to a branch `service` is bound to: from the delivery log (kept a
/// week) and from the deployments pushes made (kept with the service).
async fn latest_push(
    db: &impl ConnectionTrait,
    service: &service::Model,
    bindings: &[(Uuid, PushBinding)],
) -> AppResult<Option<SourceRevision>> {
    let mut latest: Option<(DateTime<Utc>, SourceRevision)> = None;
    let mut consider = |pushed_at: DateTime<Utc>, revision: SourceRevision| {
        if latest.as_ref().is_none_or(|(at, _)| pushed_at > *at) {
            latest = Some((pushed_at, revision));
        }
    };
    for (installation, binding) in bindings {
        let pushed = deliveries_of(*installation, binding)
            .order_by_desc(git_delivery::Column::PushedAt)
            .one(db)
            .await?;
        if let Some(pushed) = pushed {
            consider(pushed.pushed_at, delivery_revision(pushed));
        }
    }
    if !bindings.is_empty() {
        let deployed = deployment::Entity::find()
            .filter(deployment::Column::ServiceId.eq(service.id))
            .filter(deployment::Column::PushDeliveryId.is_not_null())
            .order_by_desc(deployment::Column::Number)
            .one(db)
            .await?;
        if let Some(push) = deployed.and_then(|d| d.push) {
            let push: DeploymentPush = serde_json::from_value(push).map_err(AppError::internal)?;
            // Only a branch still bound: a binding removed takes its pushes with it.
            if bindings.iter().any(|(_, b)| {
                b.branch == push.branch && b.repository.eq_ignore_ascii_case(&push.repository)
            }) {
                consider(push.pushed_at, push.revision());
            }
        }
    }
    Ok(latest.map(|(_, revision)| revision))
}
