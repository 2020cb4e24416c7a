//! One provider operation on one claimed instance, and what its outcome does:
//!
//! - **provision** (idempotent on the stored key): success → `starting` at the address the
//!   provider gave; a refusal (unauthorized, forbidden, misconfigured, account suspended, quota,
//!   unavailable, timeout, disabled, drained, no plugin) → `failed`, removed at the provider in case it exists there, and a
//!   replacement placed elsewhere by the next pass (a failover, recorded as an event);
//!   a provider with no room for the instance's size (`quota-exceeded`) when no other provider
//!   the service may use could take it → the instance **waits for room** where it is: it
//!   stays `provisioning`, its deployment says why, and it is tried again every
//!   [`ROOM_RETRY`] and as soon as an instance of that provider is removed (never placed
//!   anywhere it does not fit);
//!   `rate-limited` → nothing goes to that provider before its retry-after; an invalid spec
//!   fails the deployment; other errors are retried with backoff, then treated as a refusal.
//! - **deprovision** (idempotent): success or "not found" → `removed`; otherwise retried with
//!   capped backoff for as long as it takes (an evacuation records the keys it could not
//!   remove yet).
//!
//! The operation's error text from the cloud goes to the provider's events and the logs, for
//! administrators; the deployment's events carry the error kind only.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rand::Rng;
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};

use crate::app::App;
use crate::app::cluster::leases::Work;
use crate::app::deploys::deployments::{self, deployment_finish};
use crate::app::deploys::events::{DeploymentEventKind, event_append};
use crate::app::deploys::instances::{claim_cleared, instance_transition};
use crate::app::deploys::placement::{Candidate, GIT_SOURCE_CAPABILITY, place};
use crate::app::deploys::queue;
use crate::app::projects::services::spec::ServiceSpec;
use crate::app::shared::backpressure::{BACKOFF_BASE, BACKOFF_CAP, backoff_delay};
use crate::app::shared::sizes::ServiceSize;
use crate::entity::deployment::DeploymentState;
use crate::entity::instance::{InstanceHealth, InstanceState};
use crate::entity::{deployment, evacuation, instance};
use crate::error::{AppError, AppResult, ErrorCode};
use crate::plugins::{InstanceSpec, PluginError, ProviderError};

/// Transient errors of one provision before it counts as a refusal.
const PROVISION_ATTEMPTS: i32 = 5;

/// How often an instance waiting for room asks its provider again (sooner when an instance of
/// that provider is removed).
pub const ROOM_RETRY: Duration = Duration::from_secs(30);

/// How the `last_error` of an instance waiting for room begins.
const WAITING_FOR_ROOM: &str = "waiting for room";

/// Error codes of a provider that will not take this instance now: fail over.
const REFUSALS: [ErrorCode; 10] = [
    ErrorCode::ProviderUnauthorized,
    ErrorCode::ProviderForbidden,
    ErrorCode::ProviderMisconfigured,
    ErrorCode::ProviderAccountSuspended,
    ErrorCode::ProviderQuotaExceeded,
    ErrorCode::ProviderUnavailable,
    ErrorCode::ProviderTimeout,
    ErrorCode::ProviderDisabled,
    ErrorCode::ProviderDrained,
    ErrorCode::ProviderNotServing,
];

fn next_attempt(attempts: i32) -> DateTime<Utc> {
    let delay = backoff_delay(
        attempts.max(0) as u32,
        BACKOFF_BASE,
        BACKOFF_CAP,
        &mut rand::rng(),
    );
    Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default()
}

impl App {
    /// Runs the operation `row` (claimed by this runner) needs.
    pub(crate) async fn instance_operation(&self, row: instance::Model) {
        let outcome = match row.state {
            InstanceState::Pending | InstanceState::Provisioning => {
                self.instance_provision(row.clone()).await
            }
            InstanceState::Removing | InstanceState::Failed => {
                self.instance_deprovision(row.clone()).await
            }
            _ => Ok(()),
        };
        if let Err(err) = outcome {
            self.reconciler.error_record(format!(
                "instance {} on {}: {}",
                row.instance_key, row.provider, err.code
            ));
            // Leave it to a later pass.
            let _ = instance::Entity::update_many()
                .col_expr(
                    instance::Column::ClaimedUntil,
                    Expr::value(Option::<DateTime<Utc>>::None),
                )
                .col_expr(
                    instance::Column::NextAttemptAt,
                    Expr::value(next_attempt(row.attempts)),
                )
                .filter(instance::Column::Id.eq(row.id))
                .exec(&self.db)
                .await;
        }
    }

    async fn instance_provision(&self, row: instance::Model) -> AppResult<()> {
        let started = Instant::now();
        let found = deployment::Entity::find_by_id(row.deployment_id)
            .one(&self.db)
            .await?
            .ok_or_else(|| AppError::internal("instance of a missing deployment"))?;
        let spec: ServiceSpec =
            serde_json::from_value(found.spec.clone()).map_err(AppError::internal)?;
        let mut env = self.variables_open(found.service_id, &spec.variables)?;
        // The commit it runs, for the workload to report (a variable of the service wins).
        if let Some(revision) = &spec.revision {
            env.entry("BULKHEAD_GIT_COMMIT".into())
                .or_insert_with(|| revision.commit.clone());
            if let Some(branch) = &revision.branch {
                env.entry("BULKHEAD_GIT_BRANCH".into())
                    .or_insert_with(|| branch.clone());
            }
        }
        let source = spec.git_source(&mut env)?;
        let instance_spec = InstanceSpec {
            instance_key: row.instance_key.clone(),
            region: row.region.clone(),
            artifact: spec.artifact()?,
            port: spec.port,
            env: env.into_iter().collect(),
            labels: vec![
                ("bulkhead-service".into(), found.service_id.to_string()),
                ("bulkhead-deployment".into(), found.number.to_string()),
            ],
            health_check: Some(spec.health_check.to_contract()),
            source,
            size: spec
                .size
                .unwrap_or(self.settings.service_sizes.default)
                .to_contract(),
        };
        let outcome = self
            .provider_call(&row.provider, true, async move |host, active| {
                // Placement gives code from a repository only to plugins that build it; one
                // whose plugin changed since is refused here rather than given a spec it
                // would run without the code.
                if instance_spec.source.is_some() {
                    let info = active
                        .info
                        .get_or_try_init(|| host.plugin_info(&active.plugin, &active.env))
                        .await?;
                    if !info
                        .capabilities
                        .iter()
                        .any(|capability| capability == GIT_SOURCE_CAPABILITY)
                    {
                        return Err(PluginError::Provider(ProviderError::InvalidSpec(
                            "this provider's plugin does not build code from a repository".into(),
                        )));
                    }
                }
                host.plugin_provision(&active.plugin, &active.env, instance_spec)
                    .await
            })
            .await;
        // No room at this provider: fail over if another could take it, or wait here.
        let waits_for_room = match &outcome {
            Err(err) if err.code == ErrorCode::ProviderQuotaExceeded => {
                !self.placeable_elsewhere(&row, &found, &spec).await?
            }
            _ => false,
        };
        let txn = crate::db::begin_write(&self.db).await?;
        self.lease_fence(&txn, Work::Deploys).await?;
        match outcome {
            Ok((_, made)) if made.address.is_some() => {
                operation_record(&row.provider, "provision", "ok", started);
                let address = made.address.clone();
                let moved = instance_transition(
                    &txn,
                    &row,
                    InstanceState::Provisioning,
                    InstanceState::Starting,
                    |u| {
                        u.col_expr(instance::Column::Address, Expr::value(address.clone()))
                            .col_expr(
                                instance::Column::ProviderId,
                                Expr::value(Some(made.provider_id.clone())),
                            )
                            .col_expr(instance::Column::Attempts, Expr::value(0))
                            .col_expr(instance::Column::LastError, Expr::value(""))
                            .col_expr(instance::Column::HealthStreak, Expr::value(0))
                            .col_expr(
                                instance::Column::NextAttemptAt,
                                Expr::value(Option::<DateTime<Utc>>::None),
                            )
                    },
                )
                .await?;
                if moved && row.last_error.starts_with(WAITING_FOR_ROOM) {
                    rolling_out_reason_set(&txn, &found, "").await?;
                }
                if moved {
                    // The machine type a cloud chose for the instance's size, when it has one.
                    let machine_type = made.machine_type.as_deref();
                    event_append(
                        &txn,
                        row.deployment_id,
                        DeploymentEventKind::InstanceStarted,
                        format!(
                            "{} started on {} at {}{}",
                            row.instance_key,
                            row.provider,
                            address.as_deref().unwrap_or_default(),
                            machine_type
                                .map(|name| format!(" ({name})"))
                                .unwrap_or_default()
                        ),
                        serde_json::json!({
                            "instance_key": row.instance_key,
                            "provider": row.provider,
                            "address": address,
                            "machine_type": machine_type,
                        }),
                    )
                    .await?;
                } else {
                    // Cancelled or superseded meanwhile: it is being removed; let go.
                    claim_release(&txn, &row, None).await?;
                }
            }
            Ok(_) => {
                // Made, but without an address yet: provisioning the key again returns it.
                operation_record(&row.provider, "provision", "no_address", started);
                self.instance_retry(
                    &txn,
                    &row,
                    InstanceState::Provisioning,
                    "no address yet",
                    None,
                )
                .await?;
            }
            Err(err) if waits_for_room => {
                operation_record(&row.provider, "provision", err.code.as_str(), started);
                let size = spec.size.unwrap_or(self.settings.service_sizes.default);
                instance_wait_for_room(&txn, &row, &found, size, &err).await?;
            }
            Err(err) => {
                operation_record(&row.provider, "provision", err.code.as_str(), started);
                self.instance_provision_failed(&txn, &row, &found, err)
                    .await?;
                txn.commit().await?;
                // A spec no provider can run fails its rollout, whose instances are removed.
                self.changes.routes_changed([row.service_id]);
                return Ok(());
            }
        }
        txn.commit().await?;
        Ok(())
    }

    async fn instance_provision_failed(
        &self,
        txn: &sea_orm::DatabaseTransaction,
        row: &instance::Model,
        found: &deployment::Model,
        err: AppError,
    ) -> AppResult<()> {
        tracing::info!(instance = %row.instance_key, provider = %row.provider, code = err.code.as_str(), "provision failed");
        if err.code == "provider_rate_limited" {
            let wait = Duration::from_secs(err.retry_after_secs.unwrap_or(5).max(1));
            self.reconciler.throttle.provider_hold(&row.provider, wait);
            let not_before = Utc::now() + chrono::Duration::from_std(wait).unwrap_or_default();
            return self
                .instance_retry(
                    txn,
                    row,
                    InstanceState::Provisioning,
                    err.code.as_str(),
                    Some(not_before),
                )
                .await;
        }
        if err.code == "invalid_spec" {
            if DeploymentState::IN_PROGRESS.contains(&found.state) {
                deployment_finish(
                    txn,
                    found,
                    DeploymentState::Failed,
                    format!("provider {} cannot run this spec (invalid spec); the previous version keeps serving", row.provider),
                )
                .await?;
            }
            return claim_release(txn, row, None).await;
        }
        let refused = REFUSALS.contains(&err.code) || row.attempts + 1 >= PROVISION_ATTEMPTS;
        if !refused {
            return self
                .instance_retry(
                    txn,
                    row,
                    InstanceState::Provisioning,
                    err.code.as_str(),
                    None,
                )
                .await;
        }
        let reason = format!("refused: {}", err.code);
        let moved = instance_transition(
            txn,
            row,
            InstanceState::Provisioning,
            InstanceState::Failed,
            |u| {
                u.col_expr(instance::Column::LastError, Expr::value(reason.clone()))
                    .col_expr(instance::Column::Attempts, Expr::value(0))
                    .col_expr(
                        instance::Column::NextAttemptAt,
                        Expr::value(Option::<DateTime<Utc>>::None),
                    )
            },
        )
        .await?;
        if moved {
            event_append(
                txn,
                row.deployment_id,
                DeploymentEventKind::InstanceFailed,
                format!(
                    "{} refused {} ({}): placing it elsewhere",
                    row.provider, row.instance_key, err.code
                ),
                serde_json::json!({ "instance_key": row.instance_key, "provider": row.provider, "error": err.code }),
            )
            .await?;
            // The next pass places its replacement; a deployment that had finished placing
            // goes back to placing for it.
            deployments::deployment_replace_instances(txn, found.id).await?;
        } else {
            claim_release(txn, row, None).await?;
        }
        Ok(())
    }

    /// Leaves `row` in `state` for another attempt: at `not_before`, or after a backoff.
    async fn instance_retry(
        &self,
        txn: &sea_orm::DatabaseTransaction,
        row: &instance::Model,
        state: InstanceState,
        error: &str,
        not_before: Option<DateTime<Utc>>,
    ) -> AppResult<()> {
        let attempts = row.attempts + 1;
        let at = not_before.unwrap_or_else(|| next_attempt(attempts));
        let moved = instance_transition(txn, row, state, state, |u| {
            u.col_expr(instance::Column::Attempts, Expr::value(attempts))
                .col_expr(instance::Column::NextAttemptAt, Expr::value(Some(at)))
                .col_expr(instance::Column::LastError, Expr::value(error.to_owned()))
        })
        .await?;
        if moved && attempts == 1 {
            event_append(
                txn,
                row.deployment_id,
                DeploymentEventKind::InstanceWaiting,
                format!(
                    "{} on {}: {error}; trying again in {} s",
                    row.instance_key,
                    row.provider,
                    (at - Utc::now()).num_seconds().max(0)
                ),
                serde_json::json!({ "instance_key": row.instance_key, "provider": row.provider, "error": error, "not_before": at }),
            )
            .await?;
        } else if !moved {
            claim_release(txn, row, None).await?;
        }
        Ok(())
    }

    async fn instance_deprovision(&self, row: instance::Model) -> AppResult<()> {
        let started = Instant::now();
        let key = row.instance_key.clone();
        let outcome = self
            .provider_call(&row.provider, false, async move |host, active| {
                host.plugin_deprovision(&active.plugin, &active.env, key)
                    .await
            })
            .await;
        let txn = crate::db::begin_write(&self.db).await?;
        self.lease_fence(&txn, Work::Deploys).await?;
        match outcome {
            Ok(_) => self.instance_removed(&txn, &row, started).await?,
            Err(err) if err.code == "instance_not_found" => {
                self.instance_removed(&txn, &row, started).await?
            }
            Err(err) => {
                operation_record(&row.provider, "deprovision", err.code.as_str(), started);
                if err.code == "provider_rate_limited" {
                    let wait = Duration::from_secs(err.retry_after_secs.unwrap_or(5).max(1));
                    self.reconciler.throttle.provider_hold(&row.provider, wait);
                }
                evacuation_unremoved_note(&txn, &row, true).await?;
                self.instance_retry(&txn, &row, row.state, err.code.as_str(), None)
                    .await?;
            }
        }
        txn.commit().await?;
        Ok(())
    }

    async fn instance_removed(
        &self,
        txn: &sea_orm::DatabaseTransaction,
        row: &instance::Model,
        started: Instant,
    ) -> AppResult<()> {
        operation_record(&row.provider, "deprovision", "ok", started);
        let moved = instance_transition(txn, row, row.state, InstanceState::Removed, |u| {
            u.col_expr(
                instance::Column::Health,
                Expr::value(InstanceHealth::Unknown),
            )
            .col_expr(
                instance::Column::NextAttemptAt,
                Expr::value(Option::<DateTime<Utc>>::None),
            )
        })
        .await?;
        if moved {
            evacuation_unremoved_note(txn, row, false).await?;
            // Room freed: the instances waiting for it there are tried again at once.
            queue::room_waiters_wake(txn, &row.provider, WAITING_FOR_ROOM).await?;
            event_append(
                txn,
                row.deployment_id,
                DeploymentEventKind::InstanceRemoved,
                format!("{} removed from {}", row.instance_key, row.provider),
                serde_json::json!({ "instance_key": row.instance_key, "provider": row.provider }),
            )
            .await?;
        }
        Ok(())
    }
}

impl App {
    /// Whether a provider other than `row`'s (and than those that refused an instance of
    /// `found` already) may take `row`'s instance now, by `spec`'s placement policy.
    async fn placeable_elsewhere(
        &self,
        row: &instance::Model,
        found: &deployment::Model,
        spec: &ServiceSpec,
    ) -> AppResult<bool> {
        let refused: HashSet<String> = instance::Entity::find()
            .filter(instance::Column::DeploymentId.eq(found.id))
            .filter(instance::Column::LastError.starts_with("refused"))
            .all(&self.db)
            .await?
            .into_iter()
            .map(|i| i.provider)
            .collect();
        let others: Vec<Candidate> = self
            .placement_candidates()
            .await?
            .into_iter()
            .filter(|c| c.name != row.provider && !refused.contains(&c.name))
            .collect();
        Ok(place(
            &spec.placement,
            &spec.regions,
            spec.builds_code(),
            &others,
            &BTreeMap::new(),
            1,
        )
        .is_ok())
    }
}

/// Leaves `row` provisioning, to be tried again after [`ROOM_RETRY`] (or once room frees at
/// its provider), and says why: in an `instance.waiting` event and the deployment's reason the
/// first time, for its owners (the size and the provider; the provider's own words, which may
/// describe the platform's machines, go to the log).
async fn instance_wait_for_room(
    txn: &sea_orm::DatabaseTransaction,
    row: &instance::Model,
    found: &deployment::Model,
    size: ServiceSize,
    err: &AppError,
) -> AppResult<()> {
    tracing::info!(instance = %row.instance_key, provider = %row.provider, detail = %err.detail, "waiting for room");
    let first = !row.last_error.starts_with(WAITING_FOR_ROOM);
    let jitter = rand::rng().random_range(0..=ROOM_RETRY.as_millis() as i64 / 5);
    let at = Utc::now()
        + chrono::Duration::from_std(ROOM_RETRY).unwrap_or_default()
        + chrono::Duration::milliseconds(jitter);
    let last_error = format!("{WAITING_FOR_ROOM}: {}", err.code);
    let moved = instance_transition(
        txn,
        row,
        InstanceState::Provisioning,
        InstanceState::Provisioning,
        |u| {
            u.col_expr(instance::Column::LastError, Expr::value(last_error))
                .col_expr(instance::Column::Attempts, Expr::value(0))
                .col_expr(instance::Column::NextAttemptAt, Expr::value(Some(at)))
        },
    )
    .await?;
    if !moved {
        return claim_release(txn, row, None).await;
    }
    if first {
        let reason = format!(
            "{WAITING_FOR_ROOM} on {}: no machine has {size} free now; placed as soon as one has",
            row.provider,
        );
        event_append(
            txn,
            row.deployment_id,
            DeploymentEventKind::InstanceWaiting,
            format!("{} is {reason}", row.instance_key),
            serde_json::json!({
                "instance_key": row.instance_key,
                "provider": row.provider,
                "error": err.code,
                "size": size,
            }),
        )
        .await?;
        rolling_out_reason_set(txn, found, &reason).await?;
    }
    Ok(())
}

/// Sets the reason of `found` while it rolls out: why an instance of it waits for room, or
/// nothing (`""`) once an instance that waited is made.
async fn rolling_out_reason_set(
    txn: &sea_orm::DatabaseTransaction,
    found: &deployment::Model,
    reason: &str,
) -> AppResult<()> {
    use sea_orm::sea_query::ExprTrait;
    let mut update = deployment::Entity::update_many()
        .col_expr(deployment::Column::Reason, Expr::value(reason))
        .col_expr(deployment::Column::UpdatedAt, Expr::value(Utc::now()))
        .col_expr(
            deployment::Column::Revision,
            Expr::col(deployment::Column::Revision).add(1),
        )
        .filter(deployment::Column::Id.eq(found.id))
        .filter(deployment::Column::State.eq(DeploymentState::RollingOut));
    if reason.is_empty() {
        update = update.filter(deployment::Column::Reason.starts_with(WAITING_FOR_ROOM));
    }
    update.exec(txn).await?;
    Ok(())
}

/// Lets go of `row` without changing its state.
async fn claim_release(
    txn: &sea_orm::DatabaseTransaction,
    row: &instance::Model,
    next_attempt_at: Option<DateTime<Utc>>,
) -> AppResult<()> {
    claim_cleared(instance::Entity::update_many())
        .col_expr(
            instance::Column::NextAttemptAt,
            Expr::value(next_attempt_at),
        )
        .filter(instance::Column::Id.eq(row.id))
        .exec(txn)
        .await?;
    Ok(())
}

/// Keeps the list of keys an evacuation of `row`'s provider could not remove (yet): a failed
/// removal adds the key, a successful one takes it out.
async fn evacuation_unremoved_note(
    txn: &sea_orm::DatabaseTransaction,
    row: &instance::Model,
    unremoved: bool,
) -> AppResult<()> {
    let Some(found) = evacuation::Entity::find()
        .filter(evacuation::Column::Provider.eq(&row.provider))
        .filter(evacuation::Column::State.ne("cancelled"))
        .order_by_desc(evacuation::Column::CreatedAt)
        .one(txn)
        .await?
    else {
        return Ok(());
    };
    let mut keys: Vec<String> = serde_json::from_value(found.unremoved.clone()).unwrap_or_default();
    let listed = keys.contains(&row.instance_key);
    match (unremoved, listed) {
        (true, false) => keys.push(row.instance_key.clone()),
        (false, true) => keys.retain(|key| *key != row.instance_key),
        _ => return Ok(()),
    }
    evacuation::Entity::update_many()
        .col_expr(
            evacuation::Column::Unremoved,
            Expr::value(serde_json::json!(keys)),
        )
        .col_expr(evacuation::Column::UpdatedAt, Expr::value(Utc::now()))
        .filter(evacuation::Column::Id.eq(found.id))
        .exec(txn)
        .await?;
    Ok(())
}

/// How long operations of one kind took, for `/metrics`.
pub(crate) fn operation_record(
    provider: &str,
    operation: &'static str,
    outcome: &'static str,
    started: Instant,
) {
    metrics::counter!("deploy_operations_total", "provider" => provider.to_owned(), "operation" => operation, "outcome" => outcome).increment(1);
    metrics::histogram!("deploy_operation_duration_seconds", "provider" => provider.to_owned(), "operation" => operation)
        .record(started.elapsed().as_secs_f64());
}
