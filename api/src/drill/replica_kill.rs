//! The control-plane phase with replicas (`--replicas`): while a backlog drains and the
//! platform's users sign in, read and write through the load balancer, the replica leading
//! the deploys is killed. Another replica must take every kind of work it led within the
//! bound, the API must keep answering (only the requests in flight to the killed replica may
//! fail), no deploy in flight may end doubled or orphaned at the provider, no acknowledged
//! write may be lost, and the killed replica must rejoin when started again.

use std::time::{Duration, Instant};

use bulkhead_client::types;
use bulkhead_simulators::faults::FaultState;
use serde_json::json;
use uuid::Uuid;

use super::api_traffic::{ApiTraffic, WORKERS};
use super::phases::{Drill, traffic_check};
use super::report::Check;
use super::stack::ControlPlane;
use super::wait::until;

/// Added to every AWS call during the phase, so that the killed leader has provider
/// operations under way.
const AWS_LATENCY_MS: u64 = 300;
/// The bound on replacing a lost leader (docs/operations/drill.md's, from the lease's 1.5 s
/// lifetime).
const TAKEOVER_LIMIT: Duration = Duration::from_secs(5);
/// The kinds of leased work (`Work` in the API: deploys, instance health, maintenance,
/// routing, provider probes).
const WORK_KINDS: usize = 5;
/// How soon a replica started again must be ready and announced.
const REJOIN_LIMIT: Duration = Duration::from_secs(30);
/// How long the drill waits for it: a slow rejoin is measured and fails its check.
const REJOIN_WAIT: Duration = Duration::from_secs(90);

impl Drill<'_> {
    /// Kills the deploys' leader among `replicas` (behind the load balancer at `api_url`)
    /// while the backlog drains, and starts it again after the outage.
    pub async fn replica_killed(
        &self,
        replicas: &mut [ControlPlane],
        api_url: &str,
    ) -> anyhow::Result<Vec<Check>> {
        let queued = self.backlog_queue().await?;
        let mut api = ApiTraffic::start(self.timeline.clock, api_url, self.fleet, "w");
        let phase_started = self.timeline.now();
        tokio::time::sleep(Duration::from_secs(1)).await;

        // Deploys in flight: every AWS call takes a while, the pipeline drains, and the
        // leader is killed when a quarter of the backlog is launched and calls are under way.
        let aws = &self.platform.aws;
        aws.faults.set(FaultState {
            latency_ms: AWS_LATENCY_MS,
            ..FaultState::default()
        });
        // The leader is found first, so that nothing stands between the moment calls are seen
        // under way and the kill (a status read through the balancer takes long enough for a
        // release build's launches to finish).
        let status = self.cluster_status().await?;
        let leader = leader_of(&status, types::Work::Deploys)
            .ok_or_else(|| anyhow::anyhow!("no replica leads the deploys"))?;
        let led: Vec<String> = status
            .leaders
            .iter()
            .filter(|l| l.current && l.holder == leader.id)
            .map(|l| l.work.to_string())
            .collect();
        let killed = replicas
            .iter()
            .position(|replica| replica.address() == leader.address)
            .ok_or_else(|| anyhow::anyhow!("the leader {} is none of the drill's", leader.id))?;

        let resumed = self.backlog_resume().await?;
        let started = (queued.len() / 4).max(1);
        let launches_under_way = Instant::now() + Duration::from_secs(60);
        while aws.launches_since(resumed).len() < started || aws.faults.calls().in_flight == 0 {
            anyhow::ensure!(
                Instant::now() < launches_under_way,
                "the backlog's first launches: not within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let killed_at = chrono::Utc::now();
        let kill_started = self.timeline.now();
        let calls_in_flight = aws.faults.calls().in_flight;
        replicas[killed].kill();
        self.timeline.note(format!(
            "replica {} ({}), leader of {}, killed (SIGKILL) with {} of {} backlog deploys launched and {calls_in_flight} AWS calls under way",
            killed + 1,
            leader.address,
            led.join(", "),
            aws.launches_since(resumed).len(),
            queued.len()
        ));

        // Another replica takes every kind of work (the status read through the balancer; an
        // answer lost with the killed replica is read again).
        let ((), takeover) = until(
            "another replica leads every kind of work",
            Duration::from_secs(30),
            async || {
                let Ok(status) = self.cluster_status().await else {
                    return Ok(None);
                };
                let taken = status.leaders.len() == WORK_KINDS
                    && status
                        .leaders
                        .iter()
                        .all(|l| l.current && l.holder != leader.id);
                Ok(taken.then_some(()))
            },
        )
        .await?;
        self.timeline.note(format!(
            "every kind of work has another leader {:.2} s after the kill",
            takeover.as_secs_f64()
        ));

        let drained = self.backlog_drained(&queued, resumed).await?;
        aws.faults.set(FaultState::default());
        let instances = self
            .backlog_instances_exact(&queued, calls_in_flight)
            .await?;

        // The rest of the outage, then the killed replica starts again on its data.
        let down_for = self.timeline.now() - kill_started;
        tokio::time::sleep(self.settings.outage.saturating_sub(down_for)).await;
        let restart_started = Instant::now();
        replicas[killed].restart().await?;
        let address = replicas[killed].address();
        let (rejoined, _) = until(
            "the killed replica alive in the status",
            REJOIN_WAIT,
            async || {
                let Ok(status) = self.cluster_status().await else {
                    return Ok(None);
                };
                Ok(status
                    .replicas
                    .into_iter()
                    .find(|r| r.address == address && r.alive && r.started_at > killed_at))
            },
        )
        .await?;
        let rejoin = restart_started.elapsed();
        self.timeline.note(format!(
            "replica {} started again and rejoined as {} in {:.1} s",
            killed + 1,
            rejoined.id,
            rejoin.as_secs_f64()
        ));
        // The balancer's health check (every second) sends it requests again.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let phase_ended = self.timeline.now();
        let api = api.finish(self.fleet, phase_started, phase_ended).await?;
        let edge = self.traffic.window(phase_started, phase_ended);

        self.timeline.note(format!(
            "{} API requests through the balancer, {} failed; {} acknowledged writes, {} lost",
            api.figures.requests,
            api.figures.failed,
            api.written.len(),
            api.lost.len()
        ));
        Ok(vec![
            Check::new(
                "leader_replaced",
                format!(
                    "another replica leads all the killed leader's work within {} s",
                    TAKEOVER_LIMIT.as_secs()
                ),
                takeover <= TAKEOVER_LIMIT,
                format!(
                    "{:.2} s ({} taken over)",
                    takeover.as_secs_f64(),
                    led.join(", ")
                ),
                json!({ "seconds": takeover.as_secs_f64(), "work": led }),
            ),
            Check::new(
                "api_serves_through_replica_kill",
                format!(
                    "sign-ins, reads and writes through the balancer keep working (≤ {WORKERS} fail: those in flight to the killed replica)"
                ),
                api.figures.requests > 0
                    && api.figures.failed <= WORKERS
                    && api.figures.by_operation.len() == 3,
                format!(
                    "{} of {} requests failed ({})",
                    api.figures.failed,
                    api.figures.requests,
                    api.figures
                        .by_operation
                        .iter()
                        .map(|(op, n)| format!("{n} {op}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                json!(api.figures),
            ),
            traffic_check(
                "edge_serves_through_replica_kill",
                "while a replica is killed",
                &edge,
            ),
            drained,
            instances,
            api.writes_kept_check(
                "acknowledged_writes_kept",
                "every write the API acknowledged is there afterwards",
            ),
            Check::new(
                "killed_replica_rejoins",
                format!(
                    "the killed replica, started again, is ready and alive in the status within {} s",
                    REJOIN_LIMIT.as_secs()
                ),
                rejoin <= REJOIN_LIMIT,
                format!("{:.1} s", rejoin.as_secs_f64()),
                json!({ "seconds": rejoin.as_secs_f64(), "replica": rejoined.id }),
            ),
        ])
    }

    /// Each backlog deploy (one instance, on aws) ended with exactly one instance at the
    /// provider, the one the control plane records: none doubled by a retry of the killed
    /// leader's work, none left behind.
    async fn backlog_instances_exact(
        &self,
        queued: &[(Uuid, Uuid)],
        calls_in_flight: u32,
    ) -> anyhow::Result<Check> {
        let live = self.platform.aws.live_instance_keys();
        let mut wrong = Vec::new();
        for (n, (service, _)) in queued.iter().enumerate() {
            let prefix = format!("batch-{}-d", n + 1);
            let at_provider: Vec<&String> =
                live.iter().filter(|k| k.starts_with(&prefix)).collect();
            let recorded: Vec<String> = self
                .fleet
                .owner
                .service_instance_list()
                .project_id(self.fleet.project)
                .service_id(*service)
                .send()
                .await?
                .into_inner()
                .items
                .into_iter()
                .filter(|i| {
                    !matches!(
                        i.state,
                        types::DeployedInstanceState::Removed
                            | types::DeployedInstanceState::Failed
                    )
                })
                .map(|i| i.instance_key)
                .collect();
            if at_provider.len() != 1 || recorded.len() != 1 || *at_provider[0] != recorded[0] {
                wrong.push(format!(
                    "batch-{}: at aws {at_provider:?}, recorded {recorded:?}",
                    n + 1
                ));
            }
        }
        self.timeline.note(format!(
            "instances of the backlog at aws against the records: {} of {} differ",
            wrong.len(),
            queued.len()
        ));
        Ok(Check::new(
            "no_instance_doubled_or_orphaned",
            "each backlog deploy has exactly its one instance at the provider, the one recorded",
            wrong.is_empty(),
            if wrong.is_empty() {
                format!("{} of {} exact", queued.len(), queued.len())
            } else {
                wrong.join("; ")
            },
            json!({
                "deploys": queued.len(),
                "differences": wrong,
                "aws_calls_under_way_at_kill": calls_in_flight,
            }),
        ))
    }

    async fn cluster_status(&self) -> anyhow::Result<types::ClusterStatus> {
        Ok(self.fleet.admin.cluster_status().send().await?.into_inner())
    }
}

/// The replica holding the current lease of `work`.
fn leader_of(status: &types::ClusterStatus, work: types::Work) -> Option<&types::ReplicaView> {
    let holder = status
        .leaders
        .iter()
        .find(|l| l.work == work && l.current)?
        .holder
        .clone();
    status.replicas.iter().find(|r| r.id == holder)
}
