//! The reconciler's dispatch step: provider operations start on the instances at the head of
//! the queue, within the limits of the pipeline, each claimed in the database by this runner
//! while it runs (claims renewed, and released to a new leader).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use chrono::{Duration as ChronoDuration, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};

use crate::app::App;
use crate::app::cluster::leases::Work;
use crate::app::deploys::instances::claim_cleared;
use crate::app::deploys::queue;
use crate::app::shared::backpressure::Wait;
use crate::entity::instance::InstanceState;
use crate::entity::{instance, provider};
use crate::error::{AppError, AppResult};
use crate::ids::InstanceId;

impl App {
    /// Starts provider operations on the instances at the head of the queue, as far as the
    /// limits allow, claimed in one transaction; answers whether the queue may have more for
    /// the free slots (the next pass runs at once), and how soon operations held back by a
    /// rate may go.
    pub(super) async fn operations_dispatch(&self) -> AppResult<(bool, Option<Duration>)> {
        let throttle = &self.reconciler.throttle;
        let free = throttle.limit().saturating_sub(throttle.in_flight());
        if free == 0 {
            return Ok((false, None));
        }
        let now = Utc::now();
        let providers = provider::Entity::find().all(&self.db).await?;
        // A removal waits while its provider is disabled or its breaker open (it would only
        // be refused, and its backoff grow); it goes as soon as the provider is back. A
        // provision goes anyway: its refusal fails it over to another provider.
        let unreachable: HashSet<&str> = providers
            .iter()
            .filter(|row| !row.enabled || self.health.call_check(row).is_err())
            .map(|row| row.name.as_str())
            .collect();
        // Providers that asked to wait are not read at all: their instances would fill the
        // page.
        let mut held_for: Option<Duration> = None;
        let mut waiting: HashSet<String> = HashSet::new();
        for row in &providers {
            if let Some(wait) = throttle.provider_held_for(&row.name) {
                held_for = Some(held_for.map_or(wait, |held| held.min(wait)));
                waiting.insert(row.name.clone());
            }
        }
        let page = (free * 4 + 16) as u64;
        let head = queue::due_head(&self.db, now, &waiting, page).await?;
        let full_page = head.len() as u64 == page;
        let mut admitted = Vec::new();
        for row in head {
            if waiting.contains(&row.provider) {
                continue;
            }
            let removal = [InstanceState::Removing, InstanceState::Failed].contains(&row.state);
            if removal && unreachable.contains(row.provider.as_str()) {
                continue;
            }
            if self
                .reconciler
                .in_flight
                .lock()
                .expect("not poisoned")
                .contains_key(&row.id)
            {
                continue;
            }
            let Some(permit) = throttle.slot() else {
                break;
            };
            let wait = match throttle.admit(&row.provider, row.attempts > 0) {
                Ok(()) => None,
                // This retry waits for first attempts to earn the provider's budget: the
                // provider's first attempts behind it go on (deferring the whole provider
                // would leave nothing to earn it, and the queue stuck), and wake the loop.
                Err(Wait::RetryBudget) => continue,
                Err(Wait::Rate(wait)) => Some(wait),
                Err(Wait::ProviderHold(until)) => {
                    Some(until.saturating_duration_since(Instant::now()))
                }
            };
            if let Some(wait) = wait {
                // This provider waits; others may go on.
                held_for = Some(held_for.map_or(wait, |held| held.min(wait)));
                waiting.insert(row.provider.clone());
                continue;
            }
            admitted.push((row, permit));
        }
        if admitted.is_empty() {
            return Ok((false, held_for));
        }
        let until = now
            + ChronoDuration::from_std(self.reconciler.settings.claim_ttl)
                .map_err(AppError::internal)?;
        let txn = crate::db::begin_write(&self.db).await?;
        self.lease_fence(&txn, Work::Deploys).await?;
        let rows = admitted.iter().map(|(row, _)| row.clone()).collect();
        let claimed: HashSet<InstanceId> =
            queue::claims_take(&txn, rows, &self.reconciler.runner, now, until)
                .await?
                .into_iter()
                .map(|row| row.id)
                .collect();
        txn.commit().await?;
        for (row, permit) in admitted {
            if !claimed.contains(&row.id) || !self.reconciler.op_begin(row.id, &row.provider) {
                continue;
            }
            let app = self.clone();
            tokio::spawn(async move {
                let id = row.id;
                let renewal = tokio::spawn(app.clone().instance_claim_renew(id));
                app.instance_operation(row).await;
                renewal.abort();
                app.reconciler.op_end(id);
                drop(permit);
                app.deployments_changed();
            });
        }
        let more = full_page && throttle.in_flight() < throttle.limit();
        Ok((more, held_for))
    }

    /// Releases the claims of every other runner, on becoming the deploys' leader: the
    /// operations a previous leader claimed are taken up at once, not when their claims
    /// lapse. Its lease ended, so whatever it may still do cannot be written (its writes check
    /// the lease), and provider operations are idempotent on the instance key; its claim
    /// renewals name it, so they no longer match.
    pub(super) async fn claims_of_others_release(&self) -> AppResult<u64> {
        let txn = crate::db::begin_write(&self.db).await?;
        self.lease_fence(&txn, Work::Deploys).await?;
        let released = claim_cleared(instance::Entity::update_many())
            .filter(instance::Column::ClaimedBy.is_not_null())
            .filter(instance::Column::ClaimedBy.ne(self.reconciler.runner.clone()))
            .exec(&txn)
            .await?;
        txn.commit().await?;
        Ok(released.rows_affected)
    }

    /// Keeps this runner's claim on instance `id` alive while its operation runs: a claim
    /// lasts only a few seconds, so that the instances of a runner that died are taken up
    /// again soon, and a live runner renews it well before it lapses.
    async fn instance_claim_renew(self, id: InstanceId) {
        let ttl = self.reconciler.settings.claim_ttl;
        loop {
            tokio::time::sleep(ttl / 3).await;
            // A replica that lost the lead lets its claims lapse to the new leader.
            if !self.leases.leads(Work::Deploys) {
                return;
            }
            let until = Utc::now() + ChronoDuration::from_std(ttl).unwrap_or_default();
            let renewed = instance::Entity::update_many()
                .col_expr(instance::Column::ClaimedUntil, Expr::value(until))
                .filter(instance::Column::Id.eq(id))
                .filter(instance::Column::ClaimedBy.eq(self.reconciler.runner.clone()))
                .exec(&self.db)
                .await;
            if let Err(err) = renewed {
                self.reconciler
                    .error_record(format!("renewing the claim on instance {id}: {err}"));
            }
        }
    }
}
