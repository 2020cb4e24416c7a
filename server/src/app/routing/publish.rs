//! Publishing, on the routing leader: the routes of what changed are compared with the routes
//! of the latest revision, and a difference becomes revision + 1 — its changes in its row, the
//! routes it sets or removes in `routes` — announced as soon as it is committed.

use std::sync::Arc;

use sea_orm::sea_query::OnConflict;
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};

use super::build::{SERVICES_READ_AT_MOST, drop_intended, routes_all, routes_of_services};
use super::{Current, RevisionChanges, change_json};
use crate::app::App;
use crate::app::cluster::changes::RoutesScope;
use crate::app::cluster::leases::Work;
use crate::entity::{route, routing_revision};
use crate::error::{AppError, AppResult};
use crate::ids::ServiceId;
use bulkhead_routing::RouteChange;

/// Routes written by one statement at most.
const ROUTES_PER_STATEMENT: usize = 500;

impl App {
    /// Stores and announces a new revision if the routes of `scope` differ from the latest
    /// revision's (the first revision is published even when it has no route); answers
    /// whether it did.
    pub async fn routing_publish(&self, scope: RoutesScope) -> AppResult<bool> {
        let started = std::time::Instant::now();
        let _one_at_a_time = self.routing.publishing.lock().await;
        let base = self.routing_follow_locked().await?;
        let (domains, now) = match scope {
            RoutesScope::Services(services) if services.len() <= SERVICES_READ_AT_MOST => {
                routes_of_services(&self.db, &base.routes, &services).await?
            }
            _ => (base.routes.domains(), routes_all(&self.db).await?),
        };
        let changes = base.routes.changes_to(&domains, now);
        if changes.is_empty() && base.revision > 0 {
            return Ok(false);
        }
        let drop_intended = drop_intended(&self.db, &base.routes, &changes).await?;
        let revision = base.revision + 1;
        // Microseconds, as PostgreSQL keeps them: every replica signs the same bytes.
        let generated_at = chrono::SubsecRound::trunc_subsecs(chrono::Utc::now(), 6);
        let changes = RevisionChanges {
            revision,
            generated_at,
            drop_intended,
            changes,
        };
        if !self.routing_store(&changes).await? {
            return Ok(false);
        }
        let mut routes = base.routes.clone();
        routes.apply(&changes.changes);
        let mut recent = base.recent.clone();
        recent.push_back((revision, change_json(&changes)?));
        while recent.len() > self.routing_recent_keep() {
            recent.pop_front();
        }
        self.routing_announce(Arc::new(Current {
            revision,
            generated_at,
            drop_intended,
            routes,
            recent,
        }));
        // This server follows what it published itself.
        self.changes.routing.notify_others();
        metrics::gauge!("bulkhead_routing_revision").set(revision as f64);
        metrics::histogram!("bulkhead_routing_publish_seconds")
            .record(started.elapsed().as_secs_f64());
        tracing::info!(
            revision,
            changes = changes.changes.len(),
            drop_intended,
            "routing table: published"
        );
        Ok(true)
    }

    /// Writes revision `changes.revision` and the routes it changes, fenced by the routing
    /// lease; false if another replica published that revision first.
    async fn routing_store(&self, changes: &RevisionChanges) -> AppResult<bool> {
        let revision = changes.revision;
        let txn = crate::db::begin_write(&self.db).await?;
        self.lease_fence(&txn, Work::Routing).await?;
        let inserted = routing_revision::ActiveModel {
            revision: Set(revision),
            changes: Set(serde_json::to_string(&changes.changes).map_err(AppError::internal)?),
            drop_intended: Set(changes.drop_intended),
            created_at: Set(changes.generated_at),
        }
        .insert(&txn)
        .await;
        if let Err(err) = inserted {
            // Another replica published this revision first: following it is as current.
            tracing::debug!(revision, error = %err, "routing table: revision taken");
            return Ok(false);
        }
        let mut set = Vec::new();
        let mut removed = Vec::new();
        for change in &changes.changes {
            match change {
                RouteChange::Set { route } => set.push(route::ActiveModel {
                    domain: Set(route.domain.clone()),
                    service_id: Set(ServiceId(route.service_id)),
                    revision: Set(revision),
                    route: Set(serde_json::to_string(route).map_err(AppError::internal)?),
                }),
                RouteChange::Remove { domain } => removed.push(domain.clone()),
            }
        }
        while !set.is_empty() {
            let rest = set.split_off(set.len().saturating_sub(ROUTES_PER_STATEMENT));
            route::Entity::insert_many(rest)
                .on_conflict(
                    OnConflict::column(route::Column::Domain)
                        .update_columns([
                            route::Column::ServiceId,
                            route::Column::Revision,
                            route::Column::Route,
                        ])
                        .to_owned(),
                )
                .exec(&txn)
                .await?;
        }
        for chunk in removed.chunks(ROUTES_PER_STATEMENT) {
            route::Entity::delete_many()
                .filter(route::Column::Domain.is_in(chunk.iter().cloned()))
                .exec(&txn)
                .await?;
        }
        routing_revision::Entity::delete_many()
            .filter(
                routing_revision::Column::Revision.lte(revision - self.settings.routing_history),
            )
            .exec(&txn)
            .await?;
        txn.commit().await?;
        Ok(true)
    }
}
