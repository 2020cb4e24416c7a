//! Health checks made near the workload: providers whose plugin declares the `health-checks`
//! capability (contract 0.4.0; the metal plugin, whose host agents make each service's check
//! where its workloads run) report their instances' health from `list`. Every
//! [`REPORT_EVERY`] the server leading the health checks asks each such provider, all of them
//! at once, and hands the reports to the health loop ([`crate::app::deploys::health`]), which does
//! not check a reported instance itself while reports of it keep coming.
//!
//! A provider that fails to answer (its agents unreachable, its breaker open) stops covering
//! its instances within [`crate::app::deploys::health::schedule::REPORT_COVERS`], and the control plane checks
//! them itself again: a workload's health never rests on a provider's API being up.

use std::time::Duration;

use futures_util::future::join_all;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use tokio::sync::{mpsc, watch};

use crate::app::App;
use crate::app::cluster::leases::Work;
use crate::entity::provider;
use crate::error::AppResult;
use crate::plugins::{InstanceState, WorkloadHealth};

/// The capability of a plugin that checks workloads where they run.
pub const HEALTH_CHECKS_CAPABILITY: &str = "health-checks";
/// How often the providers that check workloads are asked for their instances' health.
pub const REPORT_EVERY: Duration = Duration::from_secs(1);

/// The longest reason of a failed instance kept from a provider's report.
const MAX_FAILED_DETAIL: usize = 2000;

/// One instance as its provider reports it: its health, and why it failed, when it did and the
/// provider says (contract 0.6.0's `instance.detail`: a commit that could not be fetched, a
/// build that failed, a command that could not start).
#[derive(Debug, Clone)]
pub struct Reported {
    pub key: String,
    pub health: WorkloadHealth,
    pub failed: Option<String>,
}

/// What one provider reports: its instances, those with nothing to say (`unchecked`, not
/// failed) left out.
pub type HealthReport = Vec<Reported>;

impl App {
    /// Asks the providers that check workloads for their health every [`REPORT_EVERY`] while
    /// this server leads the health checks, until the server stops.
    pub(crate) async fn health_reports_run(
        &self,
        mut stop: watch::Receiver<bool>,
        reports: mpsc::Sender<HealthReport>,
    ) {
        let mut ticks = tokio::time::interval(REPORT_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.changed() => {
                    if *stop.borrow() {
                        return;
                    }
                }
                _ = ticks.tick() => {}
            }
            if !self.leases.leads(Work::InstanceHealth) {
                continue;
            }
            match self.health_reports_collect().await {
                Ok(collected) => {
                    for report in collected {
                        if reports.send(report).await.is_err() {
                            return;
                        }
                    }
                }
                Err(err) => self
                    .reconciler
                    .error_record(format!("health reports: {err}")),
            }
        }
    }

    /// The reports of every serving provider whose plugin checks workloads, asked together.
    /// A provider that cannot answer reports nothing (its call is recorded against its health
    /// like any other).
    async fn health_reports_collect(&self) -> AppResult<Vec<HealthReport>> {
        let rows = provider::Entity::find()
            .filter(provider::Column::Enabled.eq(true))
            .filter(provider::Column::PluginDigest.is_not_null())
            .all(&self.db)
            .await?;
        let asked = rows.iter().map(async |row| {
            if !self.provider_checks_workloads(row).await {
                return None;
            }
            let listed = self
                .provider_call(&row.name, false, async |host, active| {
                    host.plugin_list(&active.plugin, &active.env).await
                })
                .await;
            match listed {
                Ok((_, instances)) => Some(
                    instances
                        .into_iter()
                        .map(|found| Reported {
                            failed: found
                                .detail
                                .filter(|_| found.state == InstanceState::Failed)
                                .map(|detail| detail.chars().take(MAX_FAILED_DETAIL).collect()),
                            key: found.instance_key,
                            health: found.health,
                        })
                        .filter(|reported| {
                            reported.health != WorkloadHealth::Unchecked
                                || reported.failed.is_some()
                        })
                        .collect(),
                ),
                Err(err) => {
                    tracing::debug!(provider = row.name, "no health report: {err}");
                    None
                }
            }
        });
        Ok(join_all(asked).await.into_iter().flatten().collect())
    }

    /// Whether the plugin serving `row` declares [`HEALTH_CHECKS_CAPABILITY`] (its `info` is
    /// asked once per loaded version and settings).
    async fn provider_checks_workloads(&self, row: &provider::Model) -> bool {
        let Ok(Some(active)) = self.provider_serving(row).await else {
            return false;
        };
        let host = &self.providers.host;
        match active
            .info
            .get_or_try_init(|| host.plugin_info(&active.plugin, &active.env))
            .await
        {
            Ok(info) => info
                .capabilities
                .iter()
                .any(|capability| capability == HEALTH_CHECKS_CAPABILITY),
            Err(_) => false,
        }
    }
}
