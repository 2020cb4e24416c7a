//! The drill's tenants and workloads, made through the API as a platform's users would:
//! the providers pointed at the simulators and the agent, three users who accepted the terms,
//! a project they share, and services spread over the three providers, each with a domain.

use std::num::NonZeroU32;
use std::path::Path;
use std::time::Duration;

use bulkhead::dev::DevPlatform;
use bulkhead_client::{Client, Observer, types};
use uuid::Uuid;

use super::wait::{deployment_healthy, until};

pub const PASSWORD: &str = "drill password, long enough";
pub const TERMS_VERSION: &str = "drill-1";
pub const PROVIDERS: [&str; 3] = ["gcp", "aws", "metal"];

/// What the drill made.
pub struct Fleet {
    pub admin: Client,
    /// The project's owner.
    pub owner: Client,
    /// A session of each user (owner, member, viewer).
    pub users: Vec<Client>,
    pub project: Uuid,
    pub environment: Uuid,
    /// `web-1`, `web-2`, …: three replicas each, spread over the providers.
    pub services: Vec<Uuid>,
    pub domains: Vec<String>,
    /// The command the workloads run.
    pub workload: Vec<String>,
}

/// Points each provider at the local platform, and checks that each answers.
pub async fn providers_configure(admin: &Client, platform: &DevPlatform) -> anyhow::Result<()> {
    for (name, update) in platform.provider_updates() {
        let body: types::ProviderUpdate = serde_json::from_value(serde_json::to_value(&update)?)?;
        admin.provider_update().name(name).body(body).send().await?;
        let probe = admin.provider_probe().name(name).send().await?.into_inner();
        if let Some(error) = probe.error {
            anyhow::bail!("provider {name} does not work against the local platform: {error}");
        }
    }
    Ok(())
}

/// A user with a password, logged in, who accepted the terms: their client.
async fn user_onboard(
    base_url: &str,
    admin: &Client,
    email: &str,
    name: &str,
) -> anyhow::Result<Client> {
    let session = user_signed_up(base_url, admin, email, name).await?;
    Ok(Client::with_token(base_url, &session.access_token)?)
}

/// Makes a user with a password, who logs in and accepts the terms: their session.
pub async fn user_signed_up(
    base_url: &str,
    admin: &Client,
    email: &str,
    name: &str,
) -> anyhow::Result<types::SessionTokens> {
    admin
        .user_create()
        .body_map(|b| {
            b.email(email)
                .name(name)
                .password(Some(PASSWORD.try_into().expect("a valid password")))
        })
        .send()
        .await?;
    let session = Client::new(base_url, Observer::default())
        .session_login()
        .body_map(|b| b.email(email).password(PASSWORD))
        .send()
        .await?
        .into_inner();
    Client::with_token(base_url, &session.access_token)?
        .me_terms_accept()
        .body_map(|b| b.version(TERMS_VERSION))
        .send()
        .await?;
    Ok(session)
}

impl Fleet {
    /// Makes the users, the project and `services` services, and deploys them (until each
    /// is healthy).
    pub async fn create(
        base_url: &str,
        admin: Client,
        platform: &DevPlatform,
        workload_binary: &Path,
        services: u32,
    ) -> anyhow::Result<Self> {
        admin
            .terms_publish()
            .body_map(|b| {
                b.version(TERMS_VERSION)
                    .url("https://example.com/terms/drill-1")
            })
            .send()
            .await?;
        let owner = user_onboard(base_url, &admin, "ana@drill.example", "Ana").await?;
        let member = user_onboard(base_url, &admin, "bo@drill.example", "Bo").await?;
        let viewer = user_onboard(base_url, &admin, "cy@drill.example", "Cy").await?;
        let project = owner
            .project_create()
            .body_map(|b| b.name("drill"))
            .send()
            .await?
            .id;
        let environment = owner
            .environment_create()
            .project_id(project)
            .body_map(|b| b.name("production"))
            .send()
            .await?
            .id;
        for (user, email, role) in [
            (&member, "bo@drill.example", types::ProjectRole::Member),
            (&viewer, "cy@drill.example", types::ProjectRole::Viewer),
        ] {
            owner
                .invitation_create()
                .project_id(project)
                .body_map(|b| b.email(email).role(role))
                .send()
                .await?;
            let invitation = user.me_invitation_list().send().await?.into_inner().items;
            let invitation = invitation
                .first()
                .ok_or_else(|| anyhow::anyhow!("{email} got no invitation"))?;
            user.me_invitation_accept()
                .invitation_id(invitation.id)
                .send()
                .await?;
        }
        let mut fleet = Self {
            admin,
            owner,
            users: Vec::new(),
            project,
            environment,
            services: Vec::new(),
            domains: Vec::new(),
            workload: vec![workload_binary.display().to_string(), "hello".into()],
        };
        fleet.users = vec![fleet.owner.clone(), member, viewer];
        let mut deployments = Vec::new();
        for i in 1..=services {
            let service = fleet
                .service_create(&format!("web-{i}"), 3, &PROVIDERS)
                .await?;
            let domain = format!("web-{i}.drill.test");
            // Claimed, its challenge published in the platform's DNS, and verified: only
            // verified domains route.
            let claimed = fleet
                .owner
                .domain_create()
                .project_id(project)
                .body_map(|b| b.hostname(domain.clone()).service_id(service))
                .send()
                .await?
                .into_inner();
            let challenge = claimed
                .challenge
                .ok_or_else(|| anyhow::anyhow!("{domain}: claimed without a challenge"))?;
            platform.dns.txt_add(&challenge.name, challenge.value);
            fleet
                .owner
                .domain_verify()
                .project_id(project)
                .domain_id(claimed.id)
                .send()
                .await?;
            fleet.services.push(service);
            fleet.domains.push(domain);
            deployments.push((service, fleet.deploy(service).await?));
        }
        for (service, deployment) in deployments {
            deployment_healthy(&fleet.owner, project, service, deployment).await?;
        }
        Ok(fleet)
    }

    /// A service running `bulkhead hello`, with a quick health check.
    pub async fn service_create(
        &self,
        name: &str,
        replicas: i32,
        providers: &[&str],
    ) -> anyhow::Result<Uuid> {
        let placement = types::PlacementPolicy {
            providers: providers
                .iter()
                .map(|provider| types::ProviderPreference {
                    name: (*provider).into(),
                    priority: None,
                    regions: vec![],
                    weight: None,
                })
                .collect(),
            spread: None,
        };
        let health_check = types::HealthCheckSpec {
            path: None,
            interval_ms: Some(500),
            timeout_ms: Some(400),
            healthy_threshold: NonZeroU32::new(1),
            unhealthy_threshold: NonZeroU32::new(2),
            start_timeout_secs: NonZeroU32::new(60),
        };
        let service = self
            .owner
            .service_create()
            .project_id(self.project)
            .body_map(|b| {
                b.environment_id(self.environment)
                    .name(name)
                    .port(NonZeroU32::new(8080).expect("not zero"))
                    .replicas(Some(replicas))
                    .source(types::ServiceSource::Command {
                        command: self.workload.clone(),
                    })
                    .placement(Some(placement))
                    .health_check(Some(health_check))
            })
            .send()
            .await?;
        Ok(service.id)
    }

    /// Starts a deployment of `service`: its id.
    pub async fn deploy(&self, service: Uuid) -> anyhow::Result<Uuid> {
        Ok(self
            .owner
            .deployment_create()
            .project_id(self.project)
            .service_id(service)
            .send()
            .await?
            .id)
    }

    /// The providers of a deployment's running instances.
    pub async fn deployment_providers(
        &self,
        service: Uuid,
        deployment: Uuid,
    ) -> anyhow::Result<Vec<String>> {
        let instances = self
            .owner
            .service_instance_list()
            .project_id(self.project)
            .service_id(service)
            .send()
            .await?
            .into_inner()
            .items;
        Ok(instances
            .into_iter()
            .filter(|i| {
                i.deployment_id == deployment && i.state == types::DeployedInstanceState::Running
            })
            .map(|i| i.provider)
            .collect())
    }

    /// A provider's state (`healthy`, `degraded`, `unavailable`, …).
    pub async fn provider_state(&self, name: &str) -> anyhow::Result<String> {
        Ok(self
            .admin
            .provider_view()
            .name(name)
            .send()
            .await?
            .state
            .to_string())
    }

    /// Waits until a provider is in `state`: how long it took.
    pub async fn provider_state_wait(
        &self,
        name: &str,
        state: &str,
        limit: Duration,
    ) -> anyhow::Result<Duration> {
        let what = format!("provider {name} {state}");
        let ((), took) = until(&what, limit, async || {
            Ok((self.provider_state(name).await? == state).then_some(()))
        })
        .await?;
        Ok(took)
    }

    /// The routing table's revision and the providers of its upstreams (one per upstream).
    pub async fn routing_upstreams(&self) -> anyhow::Result<(i64, Vec<String>)> {
        let doc = self.admin.routing_table_view().send().await?.into_inner();
        let providers = doc
            .table
            .routes
            .iter()
            .flat_map(|route| route.upstreams.iter().map(|u| u.provider.clone()))
            .collect();
        Ok((doc.table.revision.get() as i64, providers))
    }
}
