//! The drill's phases, in order, each answering the checks of the failure modes it plays:
//! the GCP account suspended, the control plane killed (with the edge agent restarted during
//! it) and brought back with a backlog, GCP restored, and the user records compared.

use std::time::Duration;

use bulkhead_simulators::faults::FaultState;
use serde_json::json;
use tokio::sync::watch;

use super::DrillSettings;
use super::fleet::Fleet;
use super::records::Records;
use super::report::{Check, Timeline};
use super::stack::{ControlPlane, Edge};
use super::traffic::{Traffic, TrafficFigures};
use super::wait::{deployment_healthy, until};
use bulkhead::dev::DevPlatform;

/// The longest a breaker may take to open (twice that to close), or dead instances to leave
/// the routes.
pub const REACTION_LIMIT: Duration = Duration::from_secs(15);
/// How long the drill waits for such a reaction before it gives up: a slow one is measured
/// and fails its check; one that never comes ends the drill.
pub const REACTION_WAIT: Duration = Duration::from_secs(90);
/// How often the providers that stay up are sampled while one is down.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// What the phases share.
pub struct Drill<'a> {
    pub settings: &'a DrillSettings,
    pub timeline: &'a Timeline,
    pub platform: &'a DevPlatform,
    pub fleet: &'a Fleet,
    pub traffic: &'a Traffic,
}

/// Requests through the edge while a phase lasted. Caddy 2.6 answers a few itself while it
/// loads a configuration (one per routing revision): a request the old handler took when it
/// stopped, whose first upstream was dead, gets a 502 without a retry; and it closes
/// connections then (the client resends those once). So at most 1 + 1% of the requests may
/// fail, and as many may be resent; anything more is an outage.
pub fn traffic_check(name: &'static str, during: &str, figures: &TrafficFigures) -> Check {
    let allowed = 1 + figures.requests / 100;
    Check::new(
        name,
        format!("every service answers through the edge {during} (≤ 1 + 1% fail)"),
        figures.requests > 0 && figures.failed <= allowed && figures.retried <= allowed,
        format!(
            "{} of {} requests failed ({} resent after a broken connection)",
            figures.failed, figures.requests, figures.retried
        ),
        json!(figures),
    )
}

impl Drill<'_> {
    /// The GCP account is suspended and its machines stop: its breaker opens, the others
    /// stay healthy, its dead instances leave the routes, new deploys go elsewhere, and
    /// every service keeps answering.
    pub async fn gcp_suspended(&self) -> anyhow::Result<Vec<Check>> {
        // aws and metal are sampled all through the phase, not just at its ends.
        let (done, mut finished) = watch::channel(false);
        let sampling = async {
            let mut samples = Vec::new();
            loop {
                samples.push(self.others_states().await?);
                tokio::select! {
                    _ = tokio::time::sleep(SAMPLE_EVERY) => {}
                    _ = finished.changed() => break,
                }
            }
            anyhow::Ok(samples)
        };
        let steps = async {
            let steps = self.gcp_suspended_steps().await;
            let _ = done.send(true);
            steps
        };
        let (samples, steps) = tokio::join!(sampling, steps);
        let mut checks = steps?;
        let samples = samples?;
        let unhealthy: Vec<String> = samples
            .iter()
            .flatten()
            .filter(|(_, state)| state != "healthy")
            .map(|(name, state)| format!("{name} {state}"))
            .collect();
        checks.insert(
            2,
            Check::new(
                "others_stay_healthy",
                "aws and metal stay healthy while gcp is down",
                samples.len() >= 3 && unhealthy.is_empty(),
                if unhealthy.is_empty() {
                    format!(
                        "healthy in all {} samples, {} ms apart",
                        samples.len(),
                        SAMPLE_EVERY.as_millis()
                    )
                } else {
                    unhealthy.join(", ")
                },
                json!({ "samples": samples.len(), "unhealthy": unhealthy }),
            ),
        );
        Ok(checks)
    }

    async fn gcp_suspended_steps(&self) -> anyhow::Result<Vec<Check>> {
        let started = self.timeline.now();
        self.platform.gcp.faults.set(FaultState {
            suspended: true,
            ..FaultState::default()
        });
        let stopped = self.platform.gcp.terminate_all();
        self.timeline.note(format!(
            "GCP suspends the account; its {stopped} machines stop"
        ));
        let open = self
            .fleet
            .provider_state_wait("gcp", "unavailable", REACTION_WAIT)
            .await?;
        self.timeline.note(format!(
            "gcp breaker open after {:.1} s",
            open.as_secs_f64()
        ));
        let mut checks = vec![Check::new(
            "breaker_opens",
            format!("gcp unavailable within {} s", REACTION_LIMIT.as_secs()),
            open <= REACTION_LIMIT,
            format!("{:.1} s", open.as_secs_f64()),
            json!({ "seconds": open.as_secs_f64() }),
        )];
        let (revision, _) = until("no gcp upstream in the routes", REACTION_WAIT, async || {
            let (revision, providers) = self.fleet.routing_upstreams().await?;
            Ok((!providers.iter().any(|p| p == "gcp")).then_some(revision))
        })
        .await?;
        let routes_clear = self.timeline.now() - started;
        self.timeline.note(format!(
            "gcp's dead instances left the routes after {:.1} s (revision {revision})",
            routes_clear.as_secs_f64()
        ));
        checks.push(Check::new(
            "dead_instances_leave_routes",
            format!(
                "no route to a gcp instance within {} s",
                REACTION_LIMIT.as_secs()
            ),
            routes_clear <= REACTION_LIMIT,
            format!("{:.1} s", routes_clear.as_secs_f64()),
            json!({ "seconds": routes_clear.as_secs_f64(), "revision": revision }),
        ));
        let service = self.fleet.services[0];
        let deployment = self.fleet.deploy(service).await?;
        let took =
            deployment_healthy(&self.fleet.owner, self.fleet.project, service, deployment).await?;
        let providers = self.fleet.deployment_providers(service, deployment).await?;
        self.timeline.note(format!(
            "a new deploy of web-1 is healthy in {:.1} s on {providers:?}",
            took.as_secs_f64()
        ));
        checks.push(Check::new(
            "deploys_fail_over",
            "a new deploy is healthy with no instance on gcp",
            providers.len() == 3 && !providers.iter().any(|p| p == "gcp"),
            format!(
                "healthy in {:.1} s on {}",
                took.as_secs_f64(),
                providers.join(", ")
            ),
            json!({ "seconds": took.as_secs_f64(), "providers": providers }),
        ));
        let figures = self.traffic.window(started, self.timeline.now());
        checks.push(traffic_check(
            "edge_serves_through_gcp_outage",
            "while gcp is down",
            &figures,
        ));
        Ok(checks)
    }

    async fn others_states(&self) -> anyhow::Result<Vec<(String, String)>> {
        let mut states = Vec::new();
        for name in ["aws", "metal"] {
            states.push((name.to_owned(), self.fleet.provider_state(name).await?));
        }
        Ok(states)
    }

    /// Queues a backlog of deploys on aws with the pipeline paused (as an operator does in an
    /// outage) and the drain rate set: the services and their deployments.
    pub async fn backlog_queue(&self) -> anyhow::Result<Vec<(uuid::Uuid, uuid::Uuid)>> {
        let admin = &self.fleet.admin;
        let backlog = self.settings.backlog;
        admin
            .deploy_pipeline_pause()
            .body_map(|b| {
                b.reason(Some(
                    "drill: control plane outage".try_into().expect("short"),
                ))
            })
            .send()
            .await?;
        admin
            .deploy_pipeline_update()
            .body_map(|b| b.drain_rate(self.settings.drain_rate))
            .send()
            .await?;
        let mut queued = Vec::new();
        for i in 1..=backlog {
            let service = self
                .fleet
                .service_create(&format!("batch-{i}"), 1, &["aws"])
                .await?;
            queued.push((service, self.fleet.deploy(service).await?));
        }
        self.timeline.note(format!(
            "{backlog} deploys queued on aws (pipeline paused, drain rate {}/s)",
            self.settings.drain_rate
        ));
        Ok(queued)
    }

    /// A backlog of deploys is queued, the control plane is killed, the edge agent restarts
    /// during the outage, and the control plane comes back and drains the backlog at the set
    /// rate.
    pub async fn control_plane_killed(
        &self,
        control_plane: &mut ControlPlane,
        edge: &mut Edge,
    ) -> anyhow::Result<Vec<Check>> {
        let queued = self.backlog_queue().await?;
        // The edge has the latest table when the outage begins.
        let (revision, _) = self.fleet.routing_upstreams().await?;
        until(
            "the edge has the latest table",
            REACTION_LIMIT,
            async || Ok((edge.revision().await? >= revision).then_some(())),
        )
        .await?;
        let revision = edge.revision().await?;

        let outage_started = self.timeline.now();
        control_plane.kill();
        self.timeline.note("control plane killed (SIGKILL)");
        tokio::time::sleep(self.settings.outage / 2).await;
        let served = edge.agent_restart().await?;
        self.timeline.note(format!(
            "edge agent restarted during the outage: serves revision {served} from disk"
        ));
        tokio::time::sleep(self.settings.outage - self.settings.outage / 2).await;
        let outage_ended = self.timeline.now();
        let figures = self.traffic.window(outage_started, outage_ended);
        control_plane.restart().await?;
        self.timeline.note(format!(
            "control plane back after {:.1} s (ready in {:.1} s)",
            (self.timeline.now() - outage_started).as_secs_f64(),
            (self.timeline.now() - outage_ended).as_secs_f64()
        ));
        let mut checks = vec![
            traffic_check(
                "edge_serves_without_control_plane",
                "while the control plane is down",
                &figures,
            ),
            Check::new(
                "every_domain_https_in_outage",
                "every domain answers over HTTPS while the control plane is down (certificates \
                 from the edge alone)",
                // Every domain of the fleet, not only those the window happened to request.
                figures.domains_answered == self.fleet.domains.len(),
                format!(
                    "{} of {} domains answered over new TLS connections",
                    figures.domains_answered,
                    self.fleet.domains.len()
                ),
                json!({ "domains": self.fleet.domains.len(), "domains_answered": figures.domains_answered,
                        "requests": figures.requests, "failed": figures.failed }),
            ),
            Check::new(
                "edge_restarts_from_disk",
                "an edge agent restarted in the outage serves the table it had",
                served == revision,
                format!("revision {served} (it had {revision})"),
                json!({ "served": served, "latest": revision }),
            ),
        ];
        let resumed = self.backlog_resume().await?;
        checks.push(self.backlog_drained(&queued, resumed).await?);
        Ok(checks)
    }

    /// Resumes the deploy pipeline: when.
    pub async fn backlog_resume(&self) -> anyhow::Result<std::time::Instant> {
        let resumed = std::time::Instant::now();
        self.fleet.admin.deploy_pipeline_resume().send().await?;
        self.timeline.note("deploy pipeline resumed");
        Ok(resumed)
    }

    /// Measures, at the AWS API, the pace of the backlog's provisions since the pipeline was
    /// `resumed`, and waits until each of its deployments is healthy.
    pub async fn backlog_drained(
        &self,
        queued: &[(uuid::Uuid, uuid::Uuid)],
        resumed: std::time::Instant,
    ) -> anyhow::Result<Check> {
        let aws = &self.platform.aws;
        let backlog = queued.len();
        let rate = self.settings.drain_rate;
        let limit = Duration::from_secs_f64(backlog as f64 / rate * 3.0 + 30.0);
        // When each of the backlog's instances was launched at the provider.
        let (appeared, _) = until("the backlog provisioned", limit, async || {
            let launches = aws.launches_since(resumed);
            Ok((launches.len() >= backlog).then_some(launches))
        })
        .await?;
        let appeared: Vec<f64> = appeared.iter().map(Duration::as_secs_f64).collect();
        for (service, deployment) in queued {
            deployment_healthy(&self.fleet.owner, self.fleet.project, *service, *deployment)
                .await?;
        }
        let span = appeared.last().copied().unwrap_or(0.0) - appeared[0];
        let measured_rate = if span > 0.0 {
            (backlog - 1) as f64 / span
        } else {
            f64::INFINITY
        };
        let peak = appeared
            .iter()
            .map(|from| {
                appeared
                    .iter()
                    .filter(|at| **at >= *from && **at < from + 1.0)
                    .count()
            })
            .max()
            .unwrap_or(0);
        self.timeline.note(format!(
            "backlog of {backlog} drained in {span:.1} s ({measured_rate:.1}/s, at most {peak} in a second)"
        ));
        let allowed = rate.ceil() as usize + 1;
        Ok(Check::new(
            "backlog_drains_at_rate",
            format!(
                "{backlog} queued deploys drain at {rate}/s, at most {allowed} provisions in any second"
            ),
            peak <= allowed && measured_rate <= rate * 1.25,
            format!("{measured_rate:.1}/s, at most {peak} in a second"),
            json!({ "deploys": backlog, "seconds": span, "rate": measured_rate, "peak_per_second": peak, "set_rate": rate }),
        ))
    }

    /// GCP lifts the suspension: its breaker closes and new placements use it again.
    pub async fn gcp_restored(&self) -> anyhow::Result<Vec<Check>> {
        let started = self.timeline.now();
        self.platform.gcp.faults.set(FaultState::default());
        self.timeline.note("GCP restores the account");
        let closed = self
            .fleet
            .provider_state_wait("gcp", "healthy", REACTION_WAIT)
            .await?;
        self.timeline.note(format!(
            "gcp breaker closed after {:.1} s",
            closed.as_secs_f64()
        ));
        let service = self.fleet.services[self.fleet.services.len() - 1];
        let deployment = self.fleet.deploy(service).await?;
        deployment_healthy(&self.fleet.owner, self.fleet.project, service, deployment).await?;
        let providers = self.fleet.deployment_providers(service, deployment).await?;
        self.timeline
            .note(format!("a new deploy placed on {providers:?}"));
        let figures = self.traffic.window(started, self.timeline.now());
        Ok(vec![
            Check::new(
                "breaker_closes",
                format!(
                    "gcp healthy within {} s of the restore",
                    (REACTION_LIMIT * 2).as_secs()
                ),
                closed <= REACTION_LIMIT * 2,
                format!("{:.1} s", closed.as_secs_f64()),
                json!({ "seconds": closed.as_secs_f64() }),
            ),
            Check::new(
                "placements_use_gcp_again",
                "a new deploy puts an instance on gcp",
                providers.iter().any(|p| p == "gcp"),
                providers.join(", "),
                json!({ "providers": providers }),
            ),
            traffic_check(
                "edge_serves_through_recovery",
                "while gcp comes back",
                &figures,
            ),
        ])
    }

    /// The user records read before the outage, compared with what the API shows now.
    pub async fn records_intact(&self, before: &Records) -> anyhow::Result<Check> {
        let after = Records::read(&self.fleet.admin, self.fleet.project, &self.fleet.users).await?;
        let differences = before.lost_or_changed(&after);
        self.timeline.note(format!(
            "user records compared: {} lost or changed",
            differences.len()
        ));
        Ok(Check::new(
            "user_records_intact",
            "no account, membership, terms acceptance or audit event lost or changed",
            differences.is_empty(),
            if differences.is_empty() {
                format!("{} compared, none changed", before.counts())
            } else {
                differences.join("; ")
            },
            json!({ "before": before.counts(), "differences": differences }),
        ))
    }
}
