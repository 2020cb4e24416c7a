//! The database's cloud suspended too (`--database-failover`). The drill runs two PostgreSQL
//! servers of its own in synchronous replication and gives the control plane both. While
//! sign-ins, reads and writes go through the API, the primary is killed as a crash would and,
//! [`PROMOTE_AFTER`] later, the standby is promoted as a failover manager (Patroni) would. Every
//! replica must follow the new primary on its own, writes must resume within the bound, the API
//! must answer 503 `not_ready` and nothing worse meanwhile, no acknowledged write may be lost,
//! a token revoked after the failover must be refused by every replica within 1 s, a deploy
//! must go healthy, and the edge must serve throughout.

use std::time::{Duration, Instant};

use bulkhead::dev::postgres::ReplicatedPostgres;
use bulkhead_client::{Client, types};
use serde_json::json;

use super::api_traffic::ApiTraffic;
use super::phases::{Drill, traffic_check};
use super::report::Check;
use super::stack::ControlPlane;
use super::wait::{deployment_healthy, until};

/// How long the failover manager takes to promote the standby once the primary is gone.
pub const PROMOTE_AFTER: Duration = Duration::from_secs(2);
/// How soon after the promotion every replica must follow the new primary, and the first write
/// be acknowledged.
const RESUME_LIMIT: Duration = Duration::from_secs(10);
/// How soon every replica must refuse a token revoked after the failover.
const REVOCATION_LIMIT: Duration = Duration::from_secs(1);
/// The kinds of leased work.
const WORK_KINDS: usize = 5;

impl Drill<'_> {
    /// Kills the primary of `postgres` under API traffic through `api_url` and promotes its
    /// standby; `replicas` are asked directly with `admin_token`.
    pub async fn database_failed_over(
        &self,
        replicas: &[ControlPlane],
        api_url: &str,
        postgres: &ReplicatedPostgres,
        admin_token: &str,
    ) -> anyhow::Result<Vec<Check>> {
        let mut api = ApiTraffic::start(self.timeline.clock, api_url, self.fleet, "db");
        let phase_started = self.timeline.now();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let admins = replicas
            .iter()
            .map(|replica| Client::with_token(&replica.url(), admin_token))
            .collect::<Result<Vec<_>, _>>()?;

        postgres.primary_kill().await?;
        let killed = Instant::now();
        self.timeline.note(format!(
            "the database's primary (127.0.0.1:{}) killed as a crash would",
            postgres.primary.port()
        ));
        tokio::time::sleep(PROMOTE_AFTER).await;
        postgres.standby_promote().await?;
        let promoted_at = self.timeline.now();
        let standby = format!("127.0.0.1:{}", postgres.standby.port());
        self.timeline.note(format!(
            "its synchronous standby ({standby}) promoted {:.1} s later (pg_ctl promote)",
            killed.elapsed().as_secs_f64()
        ));

        let ((), followed) = until(
            "every replica follows the new primary",
            Duration::from_secs(60),
            async || {
                for admin in &admins {
                    let Ok(status) = admin.cluster_status().send().await else {
                        return Ok(None);
                    };
                    let follows = status
                        .database
                        .as_ref()
                        .is_some_and(|db| db.server == standby && db.reachable);
                    if !follows {
                        return Ok(None);
                    }
                }
                Ok(Some(()))
            },
        )
        .await?;
        let (written_at, _) = until(
            "a write acknowledged after the promotion",
            Duration::from_secs(60),
            async || Ok(api.first_write_after(promoted_at)),
        )
        .await?;
        let first_write = written_at - promoted_at;
        self.timeline.note(format!(
            "every replica follows the new primary {:.2} s after the promotion; first write \
             acknowledged after {:.2} s",
            followed.as_secs_f64(),
            first_write.as_secs_f64()
        ));
        let (led, _) = until(
            "every kind of work led again",
            Duration::from_secs(30),
            async || {
                let Ok(status) = self.fleet.admin.cluster_status().send().await else {
                    return Ok(None);
                };
                let current: Vec<(String, String)> = status
                    .into_inner()
                    .leaders
                    .into_iter()
                    .filter(|l| l.current)
                    .map(|l| (l.work.to_string(), l.holder))
                    .collect();
                Ok((current.len() == WORK_KINDS).then_some(current))
            },
        )
        .await?;

        // A token used on every replica, revoked through one: every replica refuses it.
        let token = self
            .fleet
            .admin
            .token_create()
            .body_map(|b| {
                b.name("drill-after-failover")
                    .scopes(vec![types::Scope::Read])
            })
            .send()
            .await?
            .into_inner();
        let readers = replicas
            .iter()
            .map(|replica| Client::with_token(&replica.url(), &token.secret))
            .collect::<Result<Vec<_>, _>>()?;
        for reader in &readers {
            reader.project_list().send().await?;
        }
        self.fleet
            .admin
            .token_revoke()
            .token_id(token.id)
            .send()
            .await?;
        let ((), refused_after) = until(
            "every replica refuses the revoked token",
            Duration::from_secs(30),
            async || {
                for reader in &readers {
                    if reader.project_list().send().await.is_ok() {
                        return Ok(None);
                    }
                }
                Ok(Some(()))
            },
        )
        .await?;

        // A deploy on the new primary.
        let service = self
            .fleet
            .service_create("after-failover", 1, &["aws"])
            .await?;
        let deployment = self.fleet.deploy(service).await?;
        let deployed =
            deployment_healthy(&self.fleet.owner, self.fleet.project, service, deployment).await;

        tokio::time::sleep(Duration::from_secs(1)).await;
        let phase_ended = self.timeline.now();
        let api = api.finish(self.fleet, phase_started, phase_ended).await?;
        let edge = self.traffic.window(phase_started, phase_ended);
        self.timeline.note(format!(
            "{} API requests during the failover, {} failed ({} answered 503); {} acknowledged \
             writes, {} lost; the revoked token refused everywhere after {:.2} s",
            api.figures.requests,
            api.figures.failed,
            api.figures.unavailable,
            api.written.len(),
            api.lost.len(),
            refused_after.as_secs_f64()
        ));
        Ok(vec![
            Check::new(
                "replicas_follow_new_primary",
                format!(
                    "every replica follows the promoted standby within {} s, and the first write \
                     is acknowledged within {} s",
                    RESUME_LIMIT.as_secs(),
                    RESUME_LIMIT.as_secs()
                ),
                followed <= RESUME_LIMIT && first_write <= RESUME_LIMIT,
                format!(
                    "followed after {:.2} s, first write after {:.2} s",
                    followed.as_secs_f64(),
                    first_write.as_secs_f64()
                ),
                json!({
                    "followed_seconds": followed.as_secs_f64(),
                    "first_write_seconds": first_write.as_secs_f64(),
                    "promote_after_seconds": PROMOTE_AFTER.as_secs_f64(),
                    "leaders": led,
                }),
            ),
            Check::new(
                "api_answers_through_failover",
                "sign-ins, reads and writes go on; what fails answers 503 (never a 500)",
                api.figures.requests > 0
                    && api.figures.failed == api.figures.unavailable
                    && api.figures.by_operation.len() == 3,
                format!(
                    "{} of {} requests failed, {} of them 503",
                    api.figures.failed, api.figures.requests, api.figures.unavailable
                ),
                json!(api.figures),
            ),
            api.writes_kept_check(
                "no_acknowledged_write_lost",
                "every write acknowledged before, during and after the failover is on the new \
                 primary (synchronous replication)",
            ),
            Check::new(
                "revocation_after_failover",
                format!(
                    "a token revoked after the failover is refused by every replica within {} s",
                    REVOCATION_LIMIT.as_secs()
                ),
                refused_after <= REVOCATION_LIMIT,
                format!(
                    "{:.2} s ({} replicas)",
                    refused_after.as_secs_f64(),
                    replicas.len()
                ),
                json!({ "seconds": refused_after.as_secs_f64(), "replicas": replicas.len() }),
            ),
            Check::new(
                "deploys_after_failover",
                "a deploy made on the new primary goes healthy",
                deployed.is_ok(),
                match &deployed {
                    Ok(took) => format!("healthy in {:.1} s", took.as_secs_f64()),
                    Err(err) => format!("{err:#}"),
                },
                json!({ "seconds": deployed.as_ref().ok().map(Duration::as_secs_f64) }),
            ),
            traffic_check(
                "edge_serves_through_database_failover",
                "while the database fails over",
                &edge,
            ),
        ])
    }
}
