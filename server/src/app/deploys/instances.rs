//! The life of a deployed instance, as the reconciler drives it and the API shows it:
//!
//! ```text
//! pending ─► provisioning ─► starting ─► running ─► draining ─► removing ─► removed
//!    │             │             │                                 ▲
//!    └─────────────┴─────────────┴──► failed (refused or never healthy) ┘
//! ```
//!
//! A `failed` instance is also removed at its provider (its key may exist there). Routes go to
//! `running` instances whose `health` is `healthy`; `draining` instances have left the routes
//! and are removed after a grace period.

use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, Condition};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::entity::instance;
use crate::entity::instance::{InstanceHealth, InstanceState};
use std::collections::BTreeMap;

use sea_orm::sea_query::Expr;
use sea_orm::{ActiveModelTrait, ConnectionTrait, EntityTrait, QueryFilter, Set};

use crate::app::deploys::events::{DeploymentEventKind, event_append};
use crate::app::deploys::placement::{Candidate, Slot, place};
use crate::app::deploys::queue;
use crate::app::projects::services::spec::ServiceSpec;
use crate::entity::{deployment, service};
use crate::error::{AppError, AppResult};
use crate::ids::InstanceId;

/// Instances that still exist, or may, at their provider.
pub fn live() -> Condition {
    Condition::all().add(instance::Column::State.is_in(InstanceState::LIVE))
}

/// An instance of a deployment.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeployedInstanceView {
    pub instance_key: String,
    pub deployment_id: Uuid,
    pub provider: String,
    pub region: String,
    /// `host:port` where the workload answers, once known.
    pub address: Option<String>,
    /// `pending`, `provisioning`, `starting`, `running`, `draining`, `removing`, `removed` or
    /// `failed`.
    pub state: InstanceState,
    /// `unknown`, `healthy` or `unhealthy`, from the control plane's checks of the workload.
    pub health: InstanceHealth,
    pub health_checked_at: Option<DateTime<Utc>>,
    /// The key of the instance this one took over from (failover, evacuation).
    pub replaces: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl DeployedInstanceView {
    /// `replaces_key` is the key of the instance `m.replaces` names.
    pub fn new(m: instance::Model, replaces_key: Option<String>) -> Self {
        Self {
            instance_key: m.instance_key,
            deployment_id: m.deployment_id.into(),
            provider: m.provider,
            region: m.region,
            address: m.address,
            state: m.state,
            health: m.health,
            health_checked_at: m.health_checked_at,
            replaces: replaces_key,
            created_at: m.created_at,
            updated_at: m.updated_at,
        }
    }
}

/// A new instance key for deployment `number` of `service_name`: short, readable, random
/// enough to be unique (a collision is refused by the database and retried).
pub fn instance_key_new(service_name: &str, number: i64) -> String {
    use rand::Rng;
    let prefix: String = service_name.chars().take(40).collect();
    let prefix = prefix.trim_end_matches('-');
    let suffix: String = (0..8)
        .map(|_| {
            let n = rand::rng().random_range(0..36u8);
            char::from(if n < 10 { b'0' + n } else { b'a' + n - 10 })
        })
        .collect();
    format!("{prefix}-d{number}-{suffix}")
}

/// Why an instance takes over from another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Takeover {
    /// The other's provider refused it.
    Failover,
    /// The other's provider is being evacuated.
    Evacuation,
    /// The other has been unhealthy for a while.
    Unhealthy,
}

/// Inserts a pending instance of `found` at `slot` (its key chosen now, before any provider
/// hears of it), taking over from `replaces` if given; records the placement.
pub(crate) async fn instance_insert(
    db: &impl ConnectionTrait,
    found: &deployment::Model,
    service_name: &str,
    slot: &Slot,
    takeover: Option<(&instance::Model, Takeover)>,
) -> AppResult<instance::Model> {
    let replaces = takeover.map(|(old, _)| old);
    let now = Utc::now();
    let row = instance::ActiveModel {
        id: Set(InstanceId::new()),
        deployment_id: Set(found.id),
        service_id: Set(found.service_id),
        project_id: Set(found.project_id),
        instance_key: Set(instance_key_new(service_name, found.number)),
        provider: Set(slot.provider.clone()),
        region: Set(slot.region.clone()),
        address: Set(None),
        provider_id: Set(None),
        state: Set(InstanceState::Pending),
        health: Set(InstanceHealth::Unknown),
        health_checked_at: Set(None),
        health_streak: Set(0),
        attempts: Set(0),
        next_attempt_at: Set(None),
        last_error: Set(String::new()),
        replaces: Set(replaces.map(|r| r.id)),
        claimed_by: Set(None),
        claimed_until: Set(None),
        dispatch_order: Set(queue::dispatch_order_next(db, found.project_id).await?),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(db)
    .await?;
    let (kind, message) = match takeover {
        Some((old, Takeover::Failover)) => (
            DeploymentEventKind::InstanceFailover,
            format!(
                "{} failed over from {} ({}) to {} in {}",
                row.instance_key, old.provider, old.last_error, slot.provider, slot.region
            ),
        ),
        Some((old, Takeover::Unhealthy)) => (
            DeploymentEventKind::InstanceReplacement,
            format!(
                "{} replaces {} on {} (unhealthy since {}) on {} in {}",
                row.instance_key,
                old.instance_key,
                old.provider,
                old.health_checked_at
                    .map_or_else(|| "a while".to_owned(), |at| at.to_rfc3339()),
                slot.provider,
                slot.region
            ),
        ),
        Some((old, Takeover::Evacuation)) => (
            DeploymentEventKind::InstanceReplacement,
            format!(
                "{} replaces {} (evacuating {}) on {} in {}",
                row.instance_key, old.instance_key, old.provider, slot.provider, slot.region
            ),
        ),
        None => (
            DeploymentEventKind::InstancePlaced,
            format!(
                "{} placed on {} in {}",
                row.instance_key, slot.provider, slot.region
            ),
        ),
    };
    event_append(
        db,
        found.id,
        kind,
        message,
        serde_json::json!({
            "instance_key": row.instance_key,
            "provider": slot.provider,
            "region": slot.region,
            "from_provider": replaces.map(|r| r.provider.clone()),
            "replaces": replaces.map(|r| r.instance_key.clone()),
        }),
    )
    .await?;
    Ok(row)
}

/// Places one instance of `owner` to take over from the instance of `takeover` (among
/// `candidates`, with `placed` instances of the deployment on each provider already), or, when
/// none can take it now, records why in an `instance.waiting` event that starts with `waiting`.
pub(crate) async fn replacement_place(
    db: &impl ConnectionTrait,
    owner: &deployment::Model,
    takeover: (&instance::Model, Takeover),
    candidates: &[Candidate],
    placed: &BTreeMap<String, u32>,
    waiting: &str,
) -> AppResult<()> {
    let spec: ServiceSpec =
        serde_json::from_value(owner.spec.clone()).map_err(AppError::internal)?;
    let service_name = service::Entity::find_by_id(owner.service_id)
        .one(db)
        .await?
        .map(|s| s.name)
        .unwrap_or_else(|| "service".into());
    match place(
        &spec.placement,
        &spec.regions,
        spec.builds_code(),
        candidates,
        placed,
        1,
    ) {
        Ok(slots) => {
            instance_insert(db, owner, &service_name, &slots[0], Some(takeover)).await?;
        }
        Err(why) => {
            let old = takeover.0;
            event_append(
                db,
                owner.id,
                DeploymentEventKind::InstanceWaiting,
                format!("{waiting}: {why}"),
                serde_json::json!({ "instance_key": old.instance_key, "provider": old.provider }),
            )
            .await?;
        }
    }
    Ok(())
}

/// `update` with the instances' claims cleared (no runner, no expiry).
pub(crate) fn claim_cleared(
    update: sea_orm::UpdateMany<instance::Entity>,
) -> sea_orm::UpdateMany<instance::Entity> {
    update
        .col_expr(
            instance::Column::ClaimedBy,
            Expr::value(Option::<String>::None),
        )
        .col_expr(
            instance::Column::ClaimedUntil,
            Expr::value(Option::<DateTime<Utc>>::None),
        )
}

/// Moves `row` from state `from` to `to` (changing more with `change`), if it is still in
/// `from`; false if it moved on meanwhile (a cancel, another runner). Clears its claim.
pub(crate) async fn instance_transition(
    db: &impl ConnectionTrait,
    row: &instance::Model,
    from: InstanceState,
    to: InstanceState,
    change: impl FnOnce(sea_orm::UpdateMany<instance::Entity>) -> sea_orm::UpdateMany<instance::Entity>,
) -> AppResult<bool> {
    let update = claim_cleared(instance::Entity::update_many())
        .col_expr(instance::Column::State, Expr::value(to))
        .col_expr(instance::Column::UpdatedAt, Expr::value(Utc::now()));
    let moved = change(update)
        .filter(instance::Column::Id.eq(row.id))
        .filter(instance::Column::State.eq(from))
        .exec(db)
        .await?;
    Ok(moved.rows_affected == 1)
}
#[cfg(test)]
mod tests {
    #[test]
    fn keys_are_valid_and_distinct() {
        let long = "a".repeat(63);
        let a = super::instance_key_new(&long, 123_456);
        let b = super::instance_key_new("web", 3);
        assert!(a.len() <= 63 && a.starts_with('a'), "{a}");
        assert!(b.starts_with("web-d3-"), "{b}");
        assert_ne!(b, super::instance_key_new("web", 3));
        assert!(crate::app::shared::validate::slug_validate("k", &a).is_ok());
    }
}
