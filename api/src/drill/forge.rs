//! The forge's side of the outage: while the control plane is down, pushes pile up at the
//! forge; when it is back, the forge limits Bulkhead (its secondary limit: 429 with
//! `Retry-After`) for [`FORGE_LIMITED`], sends the whole backlog at once and redelivers each
//! push (GitHub's redelivery after failed attempts), while a crowd of users signs in through it
//! ([`super::sign_in_crowd`]). Checks: every push deployed exactly once, the intake answers
//! fast under the burst, and Bulkhead's calls back to the forge (commit statuses and sign-ins)
//! never exceed its limit nor come while it asked to wait.

use std::time::{Duration, Instant};

use bulkhead_client::types;
use bulkhead_simulators::RunningSimulator;
use bulkhead_simulators::faults::FaultState;
use bulkhead_simulators::forge::{ForgeLimit, ForgeSimulator, push_deliver, push_event};
use serde_json::json;
use uuid::Uuid;

use super::fleet::Fleet;
use super::report::{Check, Timeline};
use super::sign_in_crowd::{self, SignInCrowd};
use super::wait::until;

/// Pushes in the backlog (one branch each, so that none supersedes another).
pub const PUSHES: u32 = 40;
/// The forge's primary limit: calls per window (GitHub's is 5,000 an hour; this one is small
/// enough that the statuses of the backlog meet it).
const FORGE_LIMIT: ForgeLimit = ForgeLimit {
    requests: 15,
    window_secs: 3,
};
const FORGE_TOKEN: &str = "drill-forge-token";
/// How long the forge limits Bulkhead once the control plane is back, and the `Retry-After`
/// of its 429s.
pub const FORGE_LIMITED: Duration = Duration::from_secs(6);
const FORGE_RETRY_AFTER_SECS: u32 = 2;
/// How long the backlog may take to be deployed, and its statuses to reach the forge.
const DRAIN_LIMIT: Duration = Duration::from_secs(90);
/// The intake's answer to a delivery, at the 99th percentile, under the burst.
const INTAKE_P99_LIMIT: Duration = Duration::from_millis(500);

/// The forge: its simulator serves before the control plane starts, whose configuration
/// names it as an identity provider.
pub struct Forge {
    simulator: ForgeSimulator,
    running: RunningSimulator,
}

impl Forge {
    /// Starts the forge, with its primary limit, and an OAuth app whose accounts are the
    /// sign-in crowd's.
    pub async fn start() -> anyhow::Result<Self> {
        let simulator = ForgeSimulator::new(FORGE_TOKEN);
        simulator.limit_set(FORGE_LIMIT);
        simulator.oauth_app_set(
            sign_in_crowd::CLIENT_ID,
            sign_in_crowd::CLIENT_SECRET,
            sign_in_crowd::accounts(),
        );
        let running = RunningSimulator::serve("127.0.0.1:0".parse()?, simulator.router()).await?;
        Ok(Self { simulator, running })
    }

    pub fn url(&self) -> String {
        self.running.url()
    }

    /// The control plane's config file: the forge as an identity provider, and its loopback
    /// address one that a project's commit statuses may reach.
    pub fn control_plane_config(&self) -> String {
        format!(
            "webhook_allowed_networks = [\"127.0.0.0/8\"]\n{}",
            sign_in_crowd::control_plane_config(&self.url())
        )
    }

    /// When the control plane is back: the forge limits Bulkhead for [`FORGE_LIMITED`] while
    /// it sends `backlog` and `crowd` signs in, all at once; answers the checks.
    pub async fn returns(
        &self,
        backlog: &ForgeBacklog,
        crowd: &mut SignInCrowd,
        fleet: &Fleet,
        timeline: &Timeline,
    ) -> anyhow::Result<Vec<Check>> {
        self.simulator.faults.set(FaultState {
            rate_limited_secs: Some(FORGE_RETRY_AFTER_SECS),
            ..Default::default()
        });
        timeline.note(format!(
            "the forge limits Bulkhead for {} s (429, Retry-After: {FORGE_RETRY_AFTER_SECS})",
            FORGE_LIMITED.as_secs()
        ));
        let lifted = async {
            tokio::time::sleep(FORGE_LIMITED).await;
            self.simulator.faults.set(FaultState::default());
            timeline.note("the forge answers again");
            Instant::now()
        };
        let (pushes, sign_ins, _) = tokio::join!(
            backlog.delivered(self, fleet, timeline),
            crowd.signs_in(Instant::now() + FORGE_LIMITED, timeline),
            lifted
        );
        let mut checks = pushes?;
        checks.extend(sign_ins?);
        checks.push(self.limits_honoured(timeline));
        Ok(checks)
    }

    /// Bulkhead's calls never over the forge's primary limit nor while it asked to wait, and
    /// once it has read a limit answer, at most one call (finding out whether the limit is
    /// over) after each wait.
    fn limits_honoured(&self, timeline: &Timeline) -> Check {
        let stats = self.simulator.stats();
        let waits = FORGE_LIMITED.as_secs() / u64::from(FORGE_RETRY_AFTER_SECS);
        // Sign-ins already on their way when the forge first answered 429 are not counted.
        let oauth_after_first = stats.oauth_limited - stats.oauth_limited_first;
        timeline.note(format!(
            "{} commit statuses reached the forge: {} over its limit, {} limited (429), {} while it asked to wait; sign-ins: {} limited ({} of them on their way at its first 429), {} while it asked to wait, at most {} at once",
            stats.statuses.len(),
            stats.over_limit,
            stats.secondary_limited,
            stats.during_hold,
            stats.oauth_limited,
            stats.oauth_limited_first,
            stats.oauth_during_hold,
            stats.oauth_in_flight_max
        ));
        Check::new(
            "forge_limits_honoured",
            format!(
                "calls to the forge never exceed its {} calls per {} s nor come while it asked to wait, and after its first 429 at most one comes after each wait ({} for statuses, {waits} for sign-ins)",
                FORGE_LIMIT.requests,
                FORGE_LIMIT.window_secs,
                waits + 1
            ),
            stats.over_limit == 0
                && stats.during_hold == 0
                && stats.oauth_during_hold == 0
                && stats.secondary_limited <= waits + 1
                && oauth_after_first <= waits,
            format!(
                "statuses: {} sent, {} over the limit, {} limited, {} during a wait; sign-ins: {} limited ({} on their way at the first), {} during a wait",
                stats.statuses.len(),
                stats.over_limit,
                stats.secondary_limited,
                stats.during_hold,
                stats.oauth_limited,
                stats.oauth_limited_first,
                stats.oauth_during_hold
            ),
            json!({
                "statuses": stats.statuses.len(),
                "over_limit": stats.over_limit,
                "during_hold": stats.during_hold,
                "secondary_limited": stats.secondary_limited,
                "oauth_limited": stats.oauth_limited,
                "oauth_limited_first": stats.oauth_limited_first,
                "oauth_during_hold": stats.oauth_during_hold,
                "oauth_in_flight_max": stats.oauth_in_flight_max,
            }),
        )
    }

    pub async fn shutdown(self) {
        let _ = self.running.shutdown().await;
    }
}

/// A repository of the forge whose branches deploy a service of the fleet.
pub struct ForgeBacklog {
    hook_url: String,
    secret: String,
    installation: Uuid,
    service: Uuid,
    /// When the pushes were made (before the outage ended).
    pushed_at: i64,
}

impl ForgeBacklog {
    /// Installs the forge's webhook in the fleet's project: branches `b0`… of `acme/drill`
    /// deploy a service of no replicas (what matters is the deployment record), and commit
    /// statuses go back to the forge.
    pub async fn install(forge: &Forge, fleet: &Fleet, base_url: &str) -> anyhow::Result<Self> {
        let service: types::ServiceCreate = serde_json::from_value(json!({
            "environment_id": fleet.environment,
            "name": "ci",
            "port": 8080,
            "replicas": 0,
            "source": { "type": "command", "command": fleet.workload },
        }))?;
        let service = fleet
            .owner
            .service_create()
            .project_id(fleet.project)
            .body(service)
            .send()
            .await?
            .id;
        let create: types::GitInstallationCreate = serde_json::from_value(json!({
            "bindings": (0..PUSHES)
                .map(|n| json!({ "repository": "acme/drill", "branch": format!("b{n}"), "service_id": service }))
                .collect::<Vec<_>>(),
            "commit_statuses": { "api_url": forge.url(), "token": FORGE_TOKEN },
        }))?;
        let installation = fleet
            .owner
            .git_installation_create()
            .project_id(fleet.project)
            .body(create)
            .send()
            .await?
            .into_inner();
        Ok(Self {
            hook_url: format!("{base_url}{}", installation.hook_path),
            secret: installation.secret,
            installation: installation.id,
            service,
            pushed_at: chrono::Utc::now().timestamp(),
        })
    }

    /// The backlog arrives at once, every push twice; answers the checks of the pushes.
    async fn delivered(
        &self,
        forge: &Forge,
        fleet: &Fleet,
        timeline: &Timeline,
    ) -> anyhow::Result<Vec<Check>> {
        let http = bulkhead_common::tls::http_client_builder(None)?
            .timeout(Duration::from_secs(30))
            .build()?;
        let send = |n: u32| {
            let http = http.clone();
            let body = push_event(
                "acme/drill",
                &format!("b{n}"),
                &format!("{:040x}", 0xd0_0000 + n),
                self.pushed_at,
            );
            let (url, secret) = (self.hook_url.clone(), self.secret.clone());
            async move {
                let sent = Instant::now();
                let status =
                    push_deliver(&http, &url, &secret, &format!("drill-push-{n}"), body).await;
                (status, sent.elapsed())
            }
        };
        let started = Instant::now();
        let first = all_at_once((0..PUSHES).map(send)).await;
        let again = all_at_once((0..PUSHES).map(send)).await;
        let burst = started.elapsed();
        let mut latencies: Vec<Duration> = first.iter().map(|(_, took)| *took).collect();
        latencies.sort();
        let p99 = latencies[(latencies.len() * 99).div_ceil(100).max(1) - 1];
        let accepted = first.iter().filter(|(s, _)| matches!(s, Ok(202))).count();
        let duplicates = again.iter().filter(|(s, _)| matches!(s, Ok(200))).count();
        timeline.note(format!(
            "the forge sent {PUSHES} pushes at once and each again: {accepted} accepted, {duplicates} answered as duplicates, p99 {:.0} ms, {:.1} s in all",
            p99.as_secs_f64() * 1e3,
            burst.as_secs_f64()
        ));

        let (deliveries, drained) = until("the pushes deployed", DRAIN_LIMIT, async || {
            let page = fleet
                .owner
                .git_delivery_list()
                .project_id(fleet.project)
                .installation_id(self.installation)
                .limit(std::num::NonZeroU64::new(200).expect("not zero"))
                .send()
                .await?
                .into_inner();
            let done = page.items.len() == PUSHES as usize
                && page
                    .items
                    .iter()
                    .all(|d| d.state != types::GitDeliveryState::Queued);
            Ok(done.then_some(page.items))
        })
        .await?;
        let deployments = fleet
            .owner
            .deployment_list()
            .project_id(fleet.project)
            .service_id(self.service)
            .limit(std::num::NonZeroU64::new(200).expect("not zero"))
            .send()
            .await?
            .into_inner()
            .items;
        let mut from_pushes: Vec<Uuid> = deployments
            .iter()
            .filter_map(|d| d.push.as_ref().map(|push| push.delivery_id))
            .collect();
        from_pushes.sort();
        from_pushes.dedup();
        let each_once = deliveries
            .iter()
            .all(|d| d.state == types::GitDeliveryState::Deployed && d.deployment_ids.len() == 1);
        timeline.note(format!(
            "{} deliveries deployed in {:.1} s: {} deployments made from pushes",
            deliveries.len(),
            drained.as_secs_f64(),
            from_pushes.len()
        ));

        // The statuses: one for each commit at least, within the forge's limit.
        let (_, statuses_in) = until("the commit statuses sent", DRAIN_LIMIT, async || {
            let stats = forge.simulator.stats();
            let commits: std::collections::HashSet<&str> =
                stats.statuses.iter().map(|s| s.sha.as_str()).collect();
            Ok((commits.len() >= PUSHES as usize).then_some(()))
        })
        .await?;
        timeline.note(format!(
            "the commit statuses of every push reached the forge in {:.1} s",
            statuses_in.as_secs_f64()
        ));
        Ok(vec![
            Check::new(
                "pushes_deploy_exactly_once",
                format!("{PUSHES} pushes sent at once, each twice, deploy once each"),
                accepted == PUSHES as usize
                    && duplicates == PUSHES as usize
                    && each_once
                    && from_pushes.len() == PUSHES as usize,
                format!(
                    "{accepted} accepted, {duplicates} duplicates, {} deployments from pushes",
                    from_pushes.len()
                ),
                json!({ "pushes": PUSHES, "accepted": accepted, "duplicates": duplicates, "deployments": from_pushes.len(), "seconds": drained.as_secs_f64() }),
            ),
            Check::new(
                "intake_answers_fast",
                format!(
                    "the intake answers the burst within {} ms at the 99th percentile",
                    INTAKE_P99_LIMIT.as_millis()
                ),
                p99 <= INTAKE_P99_LIMIT,
                format!("p99 {:.0} ms", p99.as_secs_f64() * 1e3),
                json!({ "p99_ms": p99.as_secs_f64() * 1e3, "deliveries": PUSHES * 2 }),
            ),
        ])
    }
}

/// Runs `sends` at once; their outcomes, in the order they ended.
async fn all_at_once<T: Send + 'static>(
    sends: impl Iterator<Item = impl Future<Output = T> + Send + 'static>,
) -> Vec<T> {
    let mut set = tokio::task::JoinSet::new();
    for send in sends {
        set.spawn(send);
    }
    set.join_all().await
}
