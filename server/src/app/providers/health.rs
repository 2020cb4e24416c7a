//! Provider health: one circuit breaker per provider ([`crate::app::providers::breaker`]), fed by the outcome
//! of every plugin call and by periodic `health` probes, and every change of health recorded:
//! the provider row, a `provider_events` row, an audit event, a log line and the
//! `provider_health` gauge.
//!
//! A provider whose API is unavailable is refused new calls (503 with `Retry-After`) until a
//! probe succeeds; nothing is done to its instances: the health of a provider's API is not
//! the health of its workloads.
//!
//! Probes of one provider never overlap: the background probe and `POST …/probe` take the same
//! per-provider gate, so a slow cloud is not probed twice at once and the second probe finds
//! what the first one cached (an access token, say).
//!
//! Each replica keeps its breakers in memory and feeds them its own calls' outcomes; one
//! replica (the `provider_probes` lease's holder) probes. A change of health recorded by any
//! replica is taken by every other's breaker ([`crate::app::providers::sync`]): the stored health is
//! the last one written.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::app::App;
use crate::app::providers::breaker::{Breaker, BreakerConfig, Change, ProviderHealth, Signal};
use crate::app::shared::audit::{AuditEntry, audit_record_system};
use crate::app::shared::pagination::{OrderedPageParams, Page, paginate_ordered};
use crate::authz::Principal;
use crate::entity::provider_event::ProviderEventKind;
use crate::entity::{provider, provider_event};
use crate::error::{AppError, AppResult, ErrorCode};
use crate::plugins::registry::ActivePlugin;
use crate::plugins::{HealthReport, HealthStatus, PluginError, ProviderError};

/// Every provider's breaker, and the gate each provider's probes pass one at a time.
pub struct HealthBoard {
    config: BreakerConfig,
    breakers: Mutex<HashMap<String, Breaker>>,
    /// Each provider's stored `health_changed_at` that its breaker has taken (or written).
    adopted: Mutex<HashMap<String, Option<DateTime<Utc>>>>,
    probe_gates: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl HealthBoard {
    pub fn new(probe_interval: Duration) -> Self {
        Self {
            config: BreakerConfig::for_interval(probe_interval),
            breakers: Mutex::default(),
            adopted: Mutex::default(),
            probe_gates: Mutex::default(),
        }
    }

    /// How often the probe leader looks for probes that are due.
    pub fn probe_tick(&self) -> Duration {
        (self.config.probe_interval / 4).clamp(Duration::from_millis(50), Duration::from_secs(1))
    }

    /// The gate the probes of `provider` pass one at a time.
    pub(crate) fn probe_gate(&self, provider: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.probe_gates
            .lock()
            .expect("not poisoned")
            .entry(provider.to_owned())
            .or_default()
            .clone()
    }

    /// Runs `f` on the breaker of `provider`, made from its stored health on first use.
    fn with<R>(
        &self,
        provider: &str,
        stored: ProviderHealth,
        f: impl FnOnce(&mut Breaker) -> R,
    ) -> R {
        let mut breakers = self.breakers.lock().expect("not poisoned");
        let breaker = breakers
            .entry(provider.to_owned())
            .or_insert_with(|| Breaker::new(self.config.clone(), stored, Instant::now()));
        f(breaker)
    }

    /// Takes the health stored for `provider` if it changed (`changed_at`) since this board
    /// last took or wrote it: a change another replica recorded.
    pub fn adopt(&self, provider: &str, stored: ProviderHealth, changed_at: Option<DateTime<Utc>>) {
        {
            let mut adopted = self.adopted.lock().expect("not poisoned");
            match adopted.get(provider) {
                Some(known) if *known == changed_at => return,
                // The first sight of a provider: its breaker is made from the stored health.
                None => {
                    adopted.insert(provider.to_owned(), changed_at);
                    return;
                }
                Some(_) => adopted.insert(provider.to_owned(), changed_at),
            };
        }
        if let Some(breaker) = self
            .breakers
            .lock()
            .expect("not poisoned")
            .get_mut(provider)
        {
            breaker.adopt(stored, Instant::now());
        }
        health_gauge_set(provider, stored);
    }

    /// Records that `provider`'s stored health, changed at `changed_at`, is this board's own.
    fn written(&self, provider: &str, changed_at: DateTime<Utc>) {
        self.adopted
            .lock()
            .expect("not poisoned")
            .insert(provider.to_owned(), Some(changed_at));
    }

    /// Whether `provider` should be probed now (a provider without a breaker yet: yes).
    fn probe_due(&self, provider: &str) -> bool {
        self.breakers
            .lock()
            .expect("not poisoned")
            .get(provider)
            .is_none_or(|breaker| breaker.probe_due(Instant::now()))
    }

    /// Makes a probe of `provider` due now, if it has a breaker.
    pub fn probe_soon(&self, provider: &str) {
        if let Some(breaker) = self
            .breakers
            .lock()
            .expect("not poisoned")
            .get_mut(provider)
        {
            breaker.probe_now(Instant::now());
        }
    }

    /// Refuses a call while the breaker is open.
    pub fn call_check(&self, row: &provider::Model) -> AppResult<()> {
        let stored = row.health;
        self.with(&row.name, stored, |breaker| {
            if breaker.allows_calls() {
                Ok(())
            } else {
                let wait = breaker.retry_after(Instant::now()).as_secs().max(1);
                Err(AppError::new(ErrorCode::ProviderUnavailable,
                    format!(
                        "provider `{}` is unavailable ({}); calls resume once a health probe succeeds",
                        row.name, row.health_reason
                    ),
                )
                .retry_after(wait))
            }
        })
    }
}

/// What a call's outcome says about the provider's health.
pub fn call_signal<R>(result: &Result<R, PluginError>) -> Signal {
    match result {
        Ok(_) => Signal::Success,
        Err(PluginError::Provider(error)) => match error {
            ProviderError::Unauthorized(m) => Signal::Fatal(format!("unauthorized: {m}")),
            ProviderError::AccountSuspended(m) => Signal::Fatal(format!("account suspended: {m}")),
            ProviderError::Misconfigured(m) => Signal::Fatal(format!("misconfigured: {m}")),
            ProviderError::RateLimited(limit) => {
                Signal::Transient(format!("rate limited: {}", limit.message))
            }
            ProviderError::Unavailable(m) => Signal::Transient(format!("unavailable: {m}")),
            ProviderError::Internal(m) => Signal::Transient(format!("internal error: {m}")),
            // A refusal about one resource says nothing about the provider as a whole.
            ProviderError::NotFound(_)
            | ProviderError::Forbidden(_)
            | ProviderError::InvalidSpec(_)
            | ProviderError::QuotaExceeded(_) => Signal::Neutral,
        },
        Err(other) => Signal::Transient(other.to_string()),
    }
}

pub(crate) fn probe_signal(result: &Result<HealthReport, PluginError>) -> Signal {
    match result {
        Ok(report) => match report.status {
            HealthStatus::Healthy => Signal::Success,
            HealthStatus::Degraded => Signal::Degraded(report.message.clone()),
            HealthStatus::Unavailable => Signal::Transient(format!(
                "the plugin reports unavailable: {}",
                report.message
            )),
        },
        Err(_) => call_signal(result),
    }
}

/// A change of a provider's health, or an activation refused by its health check.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ProviderEventView {
    pub id: Uuid,
    /// With `activation_refused`, `from` and `to` are the unchanged health.
    pub kind: ProviderEventKind,
    pub from: ProviderHealth,
    pub to: ProviderHealth,
    pub reason: String,
    pub created_at: DateTime<Utc>,
}

impl From<provider_event::Model> for ProviderEventView {
    fn from(m: provider_event::Model) -> Self {
        Self {
            id: m.id,
            kind: m.kind,
            from: m.from_health,
            to: m.to_health,
            reason: m.reason,
            created_at: m.created_at,
        }
    }
}

impl App {
    /// Feeds what a call or probe of `row`'s plugin (as `called`) said to its breaker, and
    /// records a change. An outcome of a version or settings replaced meanwhile is dropped:
    /// it says nothing about what runs now.
    pub(crate) async fn provider_health_record(
        &self,
        row: &provider::Model,
        called: &Arc<ActivePlugin>,
        signal: Signal,
        probe: bool,
    ) {
        let current = self.providers.active(&row.name);
        if !current.is_some_and(|current| Arc::ptr_eq(&current, called)) {
            return;
        }
        let stored = row.health;
        let jitter: f64 = rand::random();
        let change = self.health.with(&row.name, stored, |breaker| {
            breaker.record(signal, probe, Instant::now(), jitter)
        });
        if let Some(change) = change
            && let Err(err) = self.provider_health_change_store(&row.name, &change).await
        {
            tracing::error!(provider = %row.name, error = %err, "could not record a provider health change");
        }
    }

    async fn provider_health_change_store(&self, name: &str, change: &Change) -> AppResult<()> {
        // Microseconds, as PostgreSQL keeps them: the other replicas compare it.
        let now = chrono::SubsecRound::trunc_subsecs(Utc::now(), 6);
        let reason: String = change.reason.chars().take(1000).collect();
        let txn = crate::db::begin_write(&self.db).await?;
        provider::Entity::update_many()
            .col_expr(provider::Column::Health, change.to.as_str().into())
            .col_expr(provider::Column::HealthReason, reason.clone().into())
            .col_expr(provider::Column::HealthChangedAt, Some(now).into())
            .filter(provider::Column::Name.eq(name))
            .exec(&txn)
            .await?;
        provider_event::ActiveModel {
            id: Set(Uuid::now_v7()),
            provider: Set(name.to_owned()),
            kind: Set(ProviderEventKind::Health),
            from_health: Set(change.from),
            to_health: Set(change.to),
            reason: Set(reason.clone()),
            created_at: Set(now),
        }
        .insert(&txn)
        .await?;
        audit_record_system(
            &txn,
            AuditEntry {
                action: "provider.health_change",
                resource_type: "provider",
                resource_id: name.to_owned(),
                project_id: None,
                details: serde_json::json!({ "from": change.from, "to": change.to, "reason": reason }),
            },
        )
        .await?;
        txn.commit().await?;
        self.health.written(name, now);
        self.changes.providers.notify();
        health_gauge_set(name, change.to);
        metrics::counter!("provider_health_changes_total", "provider" => name.to_owned(), "to" => change.to.as_str())
            .increment(1);
        tracing::warn!(provider = name, from = change.from.as_str(), to = change.to.as_str(), reason = %reason, "provider health changed");
        Ok(())
    }

    /// The health changes of a provider, oldest first.
    pub async fn provider_event_list(
        &self,
        principal: &Principal,
        name: &str,
        params: OrderedPageParams,
    ) -> AppResult<Page<provider_event::Model>> {
        // Health reasons and versions carry the cloud's error text and settings history:
        // administrators only.
        principal.require_admin()?;
        provider::Entity::find_by_id(name.to_owned())
            .one(&self.db)
            .await?
            .ok_or_else(|| AppError::not_found("provider"))?;
        let select =
            provider_event::Entity::find().filter(provider_event::Column::Provider.eq(name));
        let (page, order) = params.split();
        paginate_ordered(
            &self.db,
            select,
            provider_event::Column::Id,
            |m| m.id,
            &page,
            order,
        )
        .await
    }

    /// Probes every serving provider whose probe is due, each in its own task (a slow
    /// provider never delays another's probe). The probe leader's task runs it every
    /// [`HealthBoard::probe_tick`].
    pub fn provider_probes_start(&self) {
        // Only the providers whose probe is due are read from the database: most ticks
        // touch nothing but memory.
        for (name, active) in self.providers.serving() {
            if !self.health.probe_due(&name) {
                continue;
            }
            // A provider being probed (in the background or on request) is skipped.
            let Ok(passing) = self.health.probe_gate(&name).try_lock_owned() else {
                continue;
            };
            let app = self.clone();
            tokio::spawn(async move {
                app.provider_probe_run(&name, &active).await;
                drop(passing);
            });
        }
    }

    /// One background probe of `name`'s plugin `active`, recorded on its breaker.
    async fn provider_probe_run(&self, name: &str, active: &Arc<ActivePlugin>) {
        let row = match provider::Entity::find_by_id(name.to_owned())
            .one(&self.db)
            .await
        {
            Ok(Some(row)) => row,
            Ok(None) => return,
            Err(err) => {
                tracing::warn!(provider = name, error = %err, "provider health: could not read the provider");
                return;
            }
        };
        let result = self
            .providers
            .host
            .plugin_health(&active.plugin, &active.env)
            .await;
        self.provider_health_record(&row, active, probe_signal(&result), true)
            .await;
    }

    /// Sets the health gauge of every provider from the stored health (at start-up).
    pub(crate) async fn provider_health_gauges_init(&self) -> AppResult<()> {
        for row in provider::Entity::find().all(&self.db).await? {
            health_gauge_set(&row.name, row.health);
        }
        Ok(())
    }
}

/// `provider_health{provider, health}`: 1 for the provider's current health, 0 for the others.
fn health_gauge_set(name: &str, health: ProviderHealth) {
    for candidate in [
        ProviderHealth::Healthy,
        ProviderHealth::Degraded,
        ProviderHealth::Unavailable,
    ] {
        metrics::gauge!("provider_health", "provider" => name.to_owned(), "health" => candidate.as_str())
            .set(if candidate == health { 1.0 } else { 0.0 });
    }
}
