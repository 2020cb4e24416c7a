//! Deployments: a service's spec, deployed. Creating one records the spec and queues it; the
//! [reconciler](crate::app::deploys::reconciler) places and rolls it out. A newer deployment supersedes one
//! still rolling out (whose new instances are removed); the last healthy deployment keeps
//! serving until its successor is healthy (make-before-break). Cancel stops a deployment that
//! has not finished and removes what it made; rollback deploys again the last spec that
//! became healthy before a deployment.
//!
//! A `deploy` token may create, cancel and roll back deployments, and read them and their
//! events and instances, in projects where its user is a member; nothing else.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::app::App;
use crate::app::deploys::events::{DeploymentEventKind, event_append};
use crate::app::deploys::instances::{self as states, DeployedInstanceView};
use crate::app::projects::scoped::scoped_find;
use crate::app::projects::services::ServiceSpecView;
use crate::app::projects::services::revision::SourceRevision;
use crate::app::projects::services::spec::ServiceSpec;
use crate::app::shared::audit::AuditEntry;
use crate::app::shared::pagination::{
    OrderedPageParams, Page, PageParams, paginate, paginate_ordered,
};
use crate::authz::{OpContext, Principal, ProjectRole, Scope};
use crate::entity::deployment::DeploymentState;
use crate::entity::instance::InstanceState;
use crate::entity::{deployment, instance, service};
use crate::error::{AppError, AppResult, ErrorCode};
use crate::ids::InstanceId;
use crate::ids::{DeploymentId, ProjectId, ServiceId};

/// What a deployment made from a push records of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeploymentPush {
    /// The delivery (`GET …/git-installations/{id}/deliveries`).
    pub delivery_id: Uuid,
    /// `owner/name`.
    pub repository: String,
    pub branch: String,
    /// The commit pushed.
    pub commit: String,
    /// The first line of its message.
    pub message: String,
    pub pushed_at: DateTime<Utc>,
}

impl DeploymentPush {
    /// The revision it deploys.
    pub fn revision(&self) -> SourceRevision {
        SourceRevision {
            commit: self.commit.clone(),
            branch: Some(self.branch.clone()),
            repository: Some(self.repository.clone()),
        }
    }
}

/// What to deploy: the service's current spec, at one commit (query parameters, so that a
/// deployment without one stays a bodiless `POST`).
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeploymentCreate {
    /// The commit to deploy: a full commit id (40 or 64 lowercase hex digits). Without it,
    /// the latest commit pushed to a branch the service is bound to, if there is one.
    #[param(pattern = "^([0-9a-f]{40}|[0-9a-f]{64})$")]
    pub commit: Option<String>,
}

/// A deployment.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DeploymentView {
    pub id: Uuid,
    pub project_id: Uuid,
    pub service_id: Uuid,
    /// 1, 2, ... per service.
    pub number: i64,
    /// `queued`, `placing`, `rolling_out`, `healthy`, `failed`, `cancelled` or `superseded`.
    pub state: DeploymentState,
    /// Why it is in its state, when that needs saying.
    pub reason: String,
    /// The spec deployed (secret values withheld).
    pub spec: ServiceSpecView,
    /// The commit it deploys, when one is known: its push's, the one given, or the latest
    /// pushed to a bound branch when it was made; a rollback's is the one it goes back to.
    pub revision: Option<SourceRevision>,
    /// The image providers are given (an `artifact` source, its commit filled in).
    pub image: Option<String>,
    /// The deployment whose spec this one deploys again.
    pub rollback_of: Option<Uuid>,
    /// The push it was made from (a git installation's delivery), if one.
    pub push: Option<DeploymentPush>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// When all its instances were first healthy.
    pub healthy_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Its instances (in a list of deployments: absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instances: Option<Vec<DeployedInstanceView>>,
}

impl DeploymentView {
    pub fn new(
        m: deployment::Model,
        instances: Option<Vec<DeployedInstanceView>>,
    ) -> AppResult<Self> {
        let spec: ServiceSpec = serde_json::from_value(m.spec).map_err(AppError::internal)?;
        // Checked when it was made: a spec that no longer resolves shows no image.
        let image = spec.image().ok().flatten();
        Ok(Self {
            revision: spec.revision.clone(),
            image,
            id: m.id.into(),
            project_id: m.project_id.into(),
            service_id: m.service_id.into(),
            number: m.number,
            state: m.state,
            reason: m.reason,
            spec: spec.try_into()?,
            rollback_of: m.rollback_of.map(Into::into),
            push: m
                .push
                .map(serde_json::from_value)
                .transpose()
                .map_err(AppError::internal)?,
            created_at: m.created_at,
            updated_at: m.updated_at,
            healthy_at: m.healthy_at,
            finished_at: m.finished_at,
            instances,
        })
    }
}

/// The scope a read of deployments needs: `read`, or `deploy` for a deploy-only token.
/// The states of an instance still being made or removed: a deployment's event stream goes on
/// while one of its instances is in one.
pub(crate) const STREAM_MOVING_STATES: [InstanceState; 6] = [
    InstanceState::Pending,
    InstanceState::Provisioning,
    InstanceState::Starting,
    InstanceState::Draining,
    InstanceState::Removing,
    InstanceState::Failed,
];

fn read_scope(principal: &Principal) -> Scope {
    if principal.has_scope(Scope::Read) {
        Scope::Read
    } else {
        Scope::Deploy
    }
}

pub(crate) async fn deployment_find(
    db: &impl ConnectionTrait,
    service_id: ServiceId,
    id: DeploymentId,
) -> AppResult<deployment::Model> {
    deployment::Entity::find_by_id(id)
        .filter(deployment::Column::ServiceId.eq(service_id))
        .one(db)
        .await?
        .ok_or_else(|| AppError::not_found("deployment"))
}

/// Instances as shown, with the keys of the instances they replace.
pub(crate) async fn instance_views(
    db: &impl ConnectionTrait,
    rows: Vec<instance::Model>,
) -> AppResult<Vec<DeployedInstanceView>> {
    let replaced: Vec<InstanceId> = rows.iter().filter_map(|row| row.replaces).collect();
    let keys: std::collections::HashMap<InstanceId, String> = if replaced.is_empty() {
        Default::default()
    } else {
        instance::Entity::find()
            .filter(instance::Column::Id.is_in(replaced))
            .all(db)
            .await?
            .into_iter()
            .map(|row| (row.id, row.instance_key))
            .collect()
    };
    Ok(rows
        .into_iter()
        .map(|row| {
            let key = row.replaces.and_then(|id| keys.get(&id).cloned());
            DeployedInstanceView::new(row, key)
        })
        .collect())
}

/// Marks the instances of `deployment_id` that are being made or run for removal (their
/// providers' copies are deleted by the reconciler); returns how many.
pub(crate) async fn deployment_instances_remove(
    db: &impl ConnectionTrait,
    deployment_id: DeploymentId,
) -> AppResult<u64> {
    Ok(instance::Entity::update_many()
        .col_expr(
            instance::Column::State,
            Expr::value(InstanceState::Removing),
        )
        .col_expr(instance::Column::Attempts, Expr::value(0))
        .col_expr(
            instance::Column::NextAttemptAt,
            Expr::value(Option::<DateTime<Utc>>::None),
        )
        .col_expr(instance::Column::UpdatedAt, Expr::value(Utc::now()))
        .filter(instance::Column::DeploymentId.eq(deployment_id))
        .filter(instance::Column::State.is_in(InstanceState::ACTIVE))
        .exec(db)
        .await?
        .rows_affected)
}

/// Sends a rolling-out deployment back to placing (one of its instances must be placed
/// again); a new revision, so that its ETag changes with its state.
pub(crate) async fn deployment_replace_instances(
    db: &impl ConnectionTrait,
    deployment_id: DeploymentId,
) -> AppResult<()> {
    deployment::Entity::update_many()
        .col_expr(
            deployment::Column::State,
            Expr::value(DeploymentState::Placing),
        )
        // Placed at the next pass (a reason would make it wait as for room).
        .col_expr(deployment::Column::Reason, Expr::value(""))
        .col_expr(deployment::Column::UpdatedAt, Expr::value(Utc::now()))
        .col_expr(
            deployment::Column::Revision,
            Expr::col(deployment::Column::Revision).add(1),
        )
        .filter(deployment::Column::Id.eq(deployment_id))
        .filter(deployment::Column::State.eq(DeploymentState::RollingOut))
        .exec(db)
        .await?;
    Ok(())
}

/// What a new deployment deploys.
pub(crate) enum Deploys {
    /// The service's spec as it is now, at a commit if one is known.
    CurrentSpec(Option<SourceRevision>),
    /// The spec of the last deployment before this one that became healthy (a rollback).
    RollbackFrom(DeploymentId),
}

/// The deployment a rollback from deployment `from` of `service_id` goes back to: the last
/// one before it that became healthy.
async fn rollback_target(
    db: &impl ConnectionTrait,
    service_id: ServiceId,
    from: DeploymentId,
) -> AppResult<deployment::Model> {
    let from = deployment_find(db, service_id, from).await?;
    deployment::Entity::find()
        .filter(deployment::Column::ServiceId.eq(service_id))
        .filter(deployment::Column::Number.lt(from.number))
        .filter(deployment::Column::HealthyAt.is_not_null())
        .order_by_desc(deployment::Column::Number)
        .one(db)
        .await?
        .ok_or_else(|| {
            AppError::new(
                ErrorCode::NoHealthyDeployment,
                format!(
                    "no deployment of this service before #{} became healthy: there is nothing to roll back to",
                    from.number
                ),
            )
        })
}

/// Ends a deployment in `state` (`failed`, `cancelled`, `superseded`) with `reason`.
pub(crate) async fn deployment_finish(
    db: &impl ConnectionTrait,
    deployment: &deployment::Model,
    state: DeploymentState,
    reason: String,
) -> AppResult<()> {
    let now = Utc::now();
    deployment::Entity::update_many()
        .col_expr(deployment::Column::State, Expr::value(state))
        .col_expr(deployment::Column::Reason, Expr::value(reason.clone()))
        .col_expr(deployment::Column::FinishedAt, Expr::value(now))
        .col_expr(deployment::Column::UpdatedAt, Expr::value(now))
        .col_expr(
            deployment::Column::Revision,
            Expr::col(deployment::Column::Revision).add(1),
        )
        .filter(deployment::Column::Id.eq(deployment.id))
        .exec(db)
        .await?;
    let kind = match state {
        DeploymentState::Failed => DeploymentEventKind::DeploymentFailed,
        DeploymentState::Cancelled => DeploymentEventKind::DeploymentCancelled,
        DeploymentState::Superseded => DeploymentEventKind::DeploymentSuperseded,
        other => return Err(AppError::internal(format!("a deployment ends {other}"))),
    };
    let removing = deployment_instances_remove(db, deployment.id).await?;
    event_append(
        db,
        deployment.id,
        kind,
        if removing > 0 {
            format!("{reason}; removing {removing} instance(s)")
        } else {
            reason
        },
        serde_json::json!({ "state": state, "instances_removed": removing }),
    )
    .await?;
    Ok(())
}

impl App {
    pub async fn deployment_list(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        service_id: ServiceId,
        params: OrderedPageParams,
    ) -> AppResult<Page<deployment::Model>> {
        self.project_authorize(
            principal,
            project_id,
            ProjectRole::Viewer,
            read_scope(principal),
        )
        .await?;
        scoped_find::<service::Entity>(&self.db, project_id, service_id).await?;
        let select =
            deployment::Entity::find().filter(deployment::Column::ServiceId.eq(service_id));
        let (page, order) = params.split();
        paginate_ordered(
            &self.db,
            select,
            deployment::Column::Id,
            |m| m.id,
            &page,
            order,
        )
        .await
    }

    /// A deployment the caller may see.
    pub async fn deployment_visible(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        service_id: ServiceId,
        id: DeploymentId,
    ) -> AppResult<deployment::Model> {
        self.project_authorize(
            principal,
            project_id,
            ProjectRole::Viewer,
            read_scope(principal),
        )
        .await?;
        scoped_find::<service::Entity>(&self.db, project_id, service_id).await?;
        deployment_find(&self.db, service_id, id).await
    }

    /// Whether `principal` may (still) read `project_id`'s streams: its deployments' events and
    /// its services' logs (checked again while a stream lasts; a deployment or a service never
    /// moves to another project, so the project's access is what can change).
    pub async fn project_stream_allowed(
        &self,
        principal: &Principal,
        project_id: ProjectId,
    ) -> AppResult<()> {
        self.project_authorize(
            principal,
            project_id,
            ProjectRole::Viewer,
            read_scope(principal),
        )
        .await
        .map(|_| ())
    }

    /// Events of a deployment (already authorized) after `after`.
    pub async fn deployment_events(
        &self,
        id: DeploymentId,
        after: Option<i64>,
        limit: u64,
    ) -> AppResult<Vec<crate::entity::deployment_event::Model>> {
        crate::app::deploys::events::events_after(&self.db, id, after, limit).await
    }

    /// Whether a deployment's event stream has nothing more to come: it finished, and its
    /// instances are all made or all removed.
    pub async fn deployment_stream_finished(&self, id: DeploymentId) -> AppResult<bool> {
        use sea_orm::PaginatorTrait;
        let Some(found) = deployment::Entity::find_by_id(id).one(&self.db).await? else {
            return Ok(true);
        };
        if !DeploymentState::FINISHED.contains(&found.state) {
            return Ok(false);
        }
        let moving = instance::Entity::find()
            .filter(instance::Column::DeploymentId.eq(id))
            .filter(instance::Column::State.is_in(STREAM_MOVING_STATES))
            .count(&self.db)
            .await?;
        Ok(moving == 0)
    }

    /// A deployment with its instances.
    pub async fn deployment_view(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        service_id: ServiceId,
        id: DeploymentId,
    ) -> AppResult<DeploymentView> {
        let found = self
            .deployment_visible(principal, project_id, service_id, id)
            .await?;
        let rows = instance::Entity::find()
            .filter(instance::Column::DeploymentId.eq(id))
            .order_by_asc(instance::Column::CreatedAt)
            .order_by_asc(instance::Column::Id)
            .all(&self.db)
            .await?;
        DeploymentView::new(found, Some(instance_views(&self.db, rows).await?))
    }

    /// The instances of a service that exist, or may, at their providers.
    pub async fn service_instance_list(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        service_id: ServiceId,
        params: PageParams,
    ) -> AppResult<Page<DeployedInstanceView>> {
        self.project_authorize(
            principal,
            project_id,
            ProjectRole::Viewer,
            read_scope(principal),
        )
        .await?;
        scoped_find::<service::Entity>(&self.db, project_id, service_id).await?;
        let select = instance::Entity::find()
            .filter(instance::Column::ServiceId.eq(service_id))
            .filter(states::live());
        let page = paginate(&self.db, select, instance::Column::Id, |m| m.id, &params).await?;
        Ok(Page {
            items: instance_views(&self.db, page.items).await?,
            next_cursor: page.next_cursor,
        })
    }

    /// Deploys again the spec of the last deployment before `id` that became healthy.
    pub async fn deployment_rollback(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        service_id: ServiceId,
        id: DeploymentId,
    ) -> AppResult<deployment::Model> {
        self.deployment_make(ctx, project_id, service_id, Deploys::RollbackFrom(id))
            .await
    }

    /// Queues a deployment of `what`, superseding the service's unfinished ones. An image
    /// that names a commit the deployment has not is refused (`no_commit`).
    pub(crate) async fn deployment_make(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        service_id: ServiceId,
        what: Deploys,
    ) -> AppResult<deployment::Model> {
        let write = self
            .project_write(ctx, project_id, ProjectRole::Member, Scope::Deploy)
            .await?;
        let found = scoped_find::<service::Entity>(&write.txn, project_id, service_id).await?;
        let (spec, rollback_of, action) = match what {
            Deploys::CurrentSpec(revision) => {
                let mut spec = ServiceSpec::of(&found)?;
                spec.revision = revision;
                (spec, None, "deployment.create")
            }
            Deploys::RollbackFrom(id) => {
                let target = rollback_target(&write.txn, service_id, id).await?;
                let spec: ServiceSpec =
                    serde_json::from_value(target.spec.clone()).map_err(AppError::internal)?;
                (spec, Some(target), "deployment.rollback")
            }
        };
        let created = deployment_insert(
            &write.txn,
            Some(ctx.principal.user_id()),
            &found,
            spec,
            rollback_of.as_ref(),
            None,
        )
        .await?;
        write.commit(deployment_audit(action, &created)).await?;
        // Unfinished deployments it supersedes lose their instances, routed ones included.
        self.changes.routes_changed([service_id]);
        self.deployments_changed();
        Ok(created)
    }

    /// Stops a deployment that has not finished and removes the instances it made. Cancelling
    /// a cancelled deployment changes nothing; a deployment that finished otherwise cannot be
    /// cancelled (409).
    pub async fn deployment_cancel(
        &self,
        ctx: &OpContext,
        project_id: ProjectId,
        service_id: ServiceId,
        id: DeploymentId,
    ) -> AppResult<deployment::Model> {
        let write = self
            .project_write(ctx, project_id, ProjectRole::Member, Scope::Deploy)
            .await?;
        scoped_find::<service::Entity>(&write.txn, project_id, service_id).await?;
        let found = deployment_find(&write.txn, service_id, id).await?;
        if found.state == DeploymentState::Cancelled {
            drop(write);
            return Ok(found);
        }
        if !DeploymentState::IN_PROGRESS.contains(&found.state) {
            return Err(AppError::new(
                ErrorCode::DeploymentFinished,
                format!(
                    "deployment #{} has finished ({}): there is nothing to cancel",
                    found.number, found.state
                ),
            ));
        }
        deployment_finish(
            &write.txn,
            &found,
            DeploymentState::Cancelled,
            format!("cancelled by {}", ctx.principal.user.email),
        )
        .await?;
        let cancelled = deployment_find(&write.txn, service_id, id).await?;
        write
            .commit(deployment_audit("deployment.cancel", &cancelled))
            .await?;
        self.changes.routes_changed([service_id]);
        self.deployments_changed();
        Ok(cancelled)
    }

    /// Wakes the reconciler and the event streams of this server (after a commit). What
    /// changes routes says so itself ([`crate::app::cluster::changes::Changes::routes_changed`]): most steps
    /// of an instance change nothing routable, and the routing table looks only at what did.
    pub fn deployments_changed(&self) {
        self.changes.deployments.notify();
    }
}

/// Inserts deployment `number + 1` of `found` with `spec`, superseding the deployments of the
/// service that have not finished (their new instances are removed; the last healthy
/// deployment keeps serving until this one is healthy). A spec whose image names a commit it
/// has not is refused (`no_commit`) before anything is written.
pub(crate) async fn deployment_insert(
    db: &impl ConnectionTrait,
    created_by: Option<Uuid>,
    found: &service::Model,
    spec: ServiceSpec,
    rollback_of: Option<&deployment::Model>,
    push: Option<&DeploymentPush>,
) -> AppResult<deployment::Model> {
    spec.artifact()?;
    crate::app::projects::services::token_variable_check(&spec)?;
    let number = deployment::Entity::find()
        .filter(deployment::Column::ServiceId.eq(found.id))
        .select_only()
        .column_as(deployment::Column::Number.max(), "number")
        .into_tuple::<Option<i64>>()
        .one(db)
        .await?
        .flatten()
        .unwrap_or(0)
        + 1;
    let unfinished = deployment::Entity::find()
        .filter(deployment::Column::ServiceId.eq(found.id))
        .filter(deployment::Column::State.is_in(DeploymentState::IN_PROGRESS))
        .all(db)
        .await?;
    for older in &unfinished {
        deployment_finish(
            db,
            older,
            DeploymentState::Superseded,
            format!("superseded by deployment #{number}"),
        )
        .await?;
    }
    let now = Utc::now();
    let replicas = spec.replicas;
    let at_commit = spec
        .revision
        .as_ref()
        .map(|revision| {
            let short = revision.short_commit();
            match &revision.branch {
                Some(branch) => format!(", commit {short} of `{branch}`"),
                None => format!(", commit {short}"),
            }
        })
        .unwrap_or_default();
    let commit = spec.revision.as_ref().map(|r| r.commit.clone());
    let created = deployment::ActiveModel {
        id: Set(DeploymentId::new()),
        project_id: Set(found.project_id),
        service_id: Set(found.id),
        number: Set(number),
        spec: Set(serde_json::to_value(&spec).map_err(AppError::internal)?),
        state: Set(DeploymentState::Queued),
        reason: Set(String::new()),
        rollback_of: Set(rollback_of.map(|d| d.id)),
        cancel_requested: Set(false),
        created_by: Set(created_by),
        event_seq: Set(0),
        revision: Set(1),
        created_at: Set(now),
        updated_at: Set(now),
        finished_at: Set(None),
        healthy_at: Set(None),
        push: Set(push
            .map(serde_json::to_value)
            .transpose()
            .map_err(AppError::internal)?),
        push_delivery_id: Set(push.map(|p| p.delivery_id)),
    }
    .insert(db)
    .await?;
    let message = match rollback_of {
        Some(target) => format!(
            "deployment #{number} of {} queued: {replicas} replica(s), rolling back to the spec of #{}{at_commit}",
            found.name, target.number
        ),
        None => match push {
            Some(push) => format!(
                "deployment #{number} of {} queued: {replicas} replica(s), for the push of {} to `{}` of {}",
                found.name,
                push.commit.chars().take(12).collect::<String>(),
                push.branch,
                push.repository
            ),
            None => format!(
                "deployment #{number} of {} queued: {replicas} replica(s){at_commit}",
                found.name
            ),
        },
    };
    event_append(
        db,
        created.id,
        DeploymentEventKind::DeploymentQueued,
        message,
        serde_json::json!({
            "replicas": replicas,
            "rollback_of": rollback_of.map(|d| d.number),
            "commit": commit,
        }),
    )
    .await?;
    Ok(deployment::Entity::find_by_id(created.id)
        .one(db)
        .await?
        .unwrap_or(created))
}

fn deployment_audit(action: &'static str, deployment: &deployment::Model) -> AuditEntry {
    AuditEntry {
        action,
        resource_type: "deployment",
        resource_id: deployment.id.to_string(),
        project_id: Some(deployment.project_id),
        details: serde_json::json!({
            "service_id": deployment.service_id,
            "number": deployment.number,
            "state": deployment.state,
            "rollback_of": deployment.rollback_of,
        }),
    }
}
