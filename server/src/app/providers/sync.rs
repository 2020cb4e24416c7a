//! Every replica serves what the database says each provider runs, and refuses calls to a
//! provider that another replica found unavailable.
//!
//! An activation, rollback or change of settings is made, committed and served by the replica
//! that handled it; the others are told by the change feed (`providers`) and
//! [`App::providers_sync`] loads again each provider whose row's `revision` is ahead of what
//! their slot serves. A call does not wait for that: [`App::provider_serving`] loads a newer
//! revision first, so that a provider configured through one replica is called with that
//! configuration through any other at once. A change of health recorded by any replica (`health_changed_at` moved) is
//! taken by every other replica's breaker ([`crate::app::providers::breaker::Breaker::adopt`]), so a replica
//! that never called a provider knows it is down. Without hints (SQLite, a lost notification)
//! the same sync runs every [`SYNC_EVERY`].

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sea_orm::EntityTrait;

use crate::app::App;
use crate::entity::provider;
use crate::error::AppResult;
use crate::plugins::registry::ActivePlugin;

/// How often every replica syncs its providers even though no hint came.
pub const SYNC_EVERY: Duration = Duration::from_secs(10);

impl App {
    /// Loads each provider whose stored revision is ahead of what this replica serves, and
    /// takes each health change recorded elsewhere (every replica's task runs it when told of
    /// a change, and every [`SYNC_EVERY`]).
    pub async fn providers_sync(&self) -> AppResult<()> {
        for row in provider::Entity::find().all(&self.db).await? {
            self.health
                .adopt(&row.name, row.health, row.health_changed_at);
            if row.revision > self.providers.slot(&row.name).revision() {
                self.provider_catch_up(&row.name).await?;
            }
        }
        Ok(())
    }

    /// The plugin this replica serves for `row`'s provider, first loading what `row` says it
    /// runs when that is newer than what this replica loaded (a change made through another
    /// replica whose hint has not been acted on yet). A revision that failed to load here is
    /// left to the periodic sync: what was served stays.
    pub(crate) async fn provider_serving(
        &self,
        row: &provider::Model,
    ) -> AppResult<Option<Arc<ActivePlugin>>> {
        let slot = self.providers.slot(&row.name);
        if row.revision > slot.revision()
            && row.revision != slot.failed_revision.load(Ordering::Acquire)
        {
            self.provider_catch_up(&row.name).await?;
        }
        Ok(slot.active())
    }

    /// Loads provider `name` as its row now says, if that is ahead of what this replica
    /// serves, under the provider's change gate.
    async fn provider_catch_up(&self, name: &str) -> AppResult<()> {
        let slot = self.providers.slot(name);
        let _changing = slot.changing.lock().await;
        // Read again under the gate: a change made here meanwhile is already served.
        let Some(row) = provider::Entity::find_by_id(name.to_owned())
            .one(&self.db)
            .await?
        else {
            return Ok(());
        };
        if row.revision <= slot.revision() {
            return Ok(());
        }
        match self.provider_prepare(&self.db, &row).await {
            Ok(Some((plugin, env))) => slot.activate(plugin, env, row.revision),
            Ok(None) => slot.deactivate(row.revision),
            Err(err) => {
                // What it served stays: the revision that cannot load is tried again at the
                // next sync.
                slot.failed_revision.store(row.revision, Ordering::Release);
                tracing::error!(provider = %row.name, revision = row.revision, error = %err, "provider plugin not loaded from another replica's change");
                return Ok(());
            }
        }
        self.health.probe_soon(&row.name);
        tracing::info!(provider = %row.name, revision = row.revision, digest = ?row.plugin_digest, "provider loaded as changed by another replica");
        Ok(())
    }
}
