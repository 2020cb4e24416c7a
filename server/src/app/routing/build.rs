//! Routes as the database says now: every verified domain with the `running` and `healthy`
//! instances of its service (each route's upstreams sorted by instance key), for the whole
//! table or for the services whose routes changed; and whether what a revision drops was
//! dropped on purpose.

use std::collections::{BTreeSet, HashMap};

use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};

use super::RoutesIndex;
use crate::entity::instance::{InstanceHealth, InstanceState};
use crate::entity::{domain, instance};
use crate::error::AppResult;
use crate::ids::ServiceId;
use bulkhead_routing::{Route, RouteChange, Upstream};

/// Past this many services, reading every route costs less than reading theirs.
pub(super) const SERVICES_READ_AT_MOST: usize = 1000;

/// Every route.
pub(super) async fn routes_all(db: &impl ConnectionTrait) -> AppResult<Vec<Route>> {
    let domains = domain::Entity::find()
        .filter(domain::Column::VerifiedAt.is_not_null())
        .all(db)
        .await?;
    let instances = routable(instance::Entity::find()).all(db).await?;
    Ok(routes_assemble(domains, instances))
}

/// The routes of `services` now, and the domains they concern: those routed to the services
/// in `index` and those that are theirs now. A domain that moved from one of them to another
/// service takes that service's instances.
pub(super) async fn routes_of_services(
    db: &impl ConnectionTrait,
    index: &RoutesIndex,
    services: &BTreeSet<ServiceId>,
) -> AppResult<(BTreeSet<String>, Vec<Route>)> {
    let mut looked_at = index.domains_of(services);
    let mut domains = domain::Entity::find()
        .filter(domain::Column::VerifiedAt.is_not_null())
        .filter(domain::Column::ServiceId.is_in(services.iter().copied()))
        .all(db)
        .await?;
    let found: BTreeSet<&str> = domains.iter().map(|d| d.hostname.as_str()).collect();
    let missing: Vec<String> = looked_at
        .iter()
        .filter(|domain| !found.contains(domain.as_str()))
        .cloned()
        .collect();
    if !missing.is_empty() {
        domains.extend(
            domain::Entity::find()
                .filter(domain::Column::VerifiedAt.is_not_null())
                .filter(domain::Column::Hostname.is_in(missing))
                .all(db)
                .await?,
        );
    }
    let mut of_services: BTreeSet<ServiceId> = services.clone();
    of_services.extend(domains.iter().map(|d| d.service_id));
    let instances = routable(instance::Entity::find())
        .filter(instance::Column::ServiceId.is_in(of_services))
        .all(db)
        .await?;
    looked_at.extend(domains.iter().map(|d| d.hostname.clone()));
    Ok((looked_at, routes_assemble(domains, instances)))
}

/// Instances that take traffic: running, healthy by their own checks, with an address.
fn routable(select: sea_orm::Select<instance::Entity>) -> sea_orm::Select<instance::Entity> {
    select
        .filter(instance::Column::State.eq(InstanceState::Running))
        .filter(instance::Column::Health.eq(InstanceHealth::Healthy))
        .filter(instance::Column::Address.is_not_null())
}

fn routes_assemble(domains: Vec<domain::Model>, instances: Vec<instance::Model>) -> Vec<Route> {
    let mut by_service: HashMap<ServiceId, Vec<Upstream>> = HashMap::new();
    for instance in instances {
        by_service
            .entry(instance.service_id)
            .or_default()
            .push(Upstream {
                address: instance.address.unwrap_or_default(),
                provider: instance.provider,
                region: instance.region,
                instance_key: instance.instance_key,
                // The placement policy's weights already decide how many instances each
                // provider runs: each instance takes an equal share.
                weight: 1,
            });
    }
    for upstreams in by_service.values_mut() {
        upstreams.sort_by(|a, b| a.instance_key.cmp(&b.instance_key));
    }
    domains
        .into_iter()
        .map(|domain| Route {
            upstreams: by_service
                .get(&domain.service_id)
                .cloned()
                .unwrap_or_default(),
            domain: domain.hostname,
            project_id: domain.project_id.into(),
            service_id: domain.service_id.into(),
        })
        .collect()
}

/// Whether every upstream that `changes` drop from the routes of `index` was taken away on
/// purpose: its instance being drained or removed (by a rollout, a cancel, an evacuation), or
/// gone with its service or project. A route removed altogether lost its domain, on purpose.
/// An instance that failed its health checks or its provider was not.
pub(super) async fn drop_intended(
    db: &impl ConnectionTrait,
    index: &RoutesIndex,
    changes: &[RouteChange],
) -> AppResult<bool> {
    let mut dropped: BTreeSet<String> = BTreeSet::new();
    for change in changes {
        let RouteChange::Set { route } = change else {
            continue;
        };
        let Some(old) = index.get(&route.domain) else {
            continue;
        };
        let kept: BTreeSet<&str> = route
            .upstreams
            .iter()
            .map(|u| u.instance_key.as_str())
            .collect();
        dropped.extend(
            old.upstreams
                .iter()
                .filter(|u| !kept.contains(u.instance_key.as_str()))
                .map(|u| u.instance_key.clone()),
        );
    }
    if dropped.is_empty() {
        return Ok(true);
    }
    let found = instance::Entity::find()
        .filter(instance::Column::InstanceKey.is_in(dropped.iter().cloned()))
        .all(db)
        .await?;
    let deliberate: BTreeSet<&str> = found
        .iter()
        .filter(|i| {
            [
                InstanceState::Draining,
                InstanceState::Removing,
                InstanceState::Removed,
            ]
            .contains(&i.state)
        })
        .map(|i| i.instance_key.as_str())
        .collect();
    let present: BTreeSet<&str> = found.iter().map(|i| i.instance_key.as_str()).collect();
    Ok(dropped
        .iter()
        .all(|key| deliberate.contains(key.as_str()) || !present.contains(key.as_str())))
}
