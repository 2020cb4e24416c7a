//! A complete local platform in one process, for `bulkhead dev` and the end-to-end tests:
//! the GCP and AWS simulators, a host agent, a DNS server for domain verification (the control
//! plane's `dns_resolver`), and the settings that point the bundled `gcp`,
//! `aws` and `metal` providers at them (endpoints, credentials, allowlists).
//!
//! As root, the agent runs each workload as a user of its own in a network namespace of its
//! own, as on the fleet (in the host's network where iproute2 or nftables is missing). On a
//! developer's machine (not root) it runs them as the developer's own user
//! (`--insecure-same-user`), and `bulkhead dev` says so. [`caddy`] runs a real Caddy for an
//! edge in front of it (the drill, the edge tests), [`acme`] a real ACME CA (Pebble) for the
//! edge's certificates.

pub mod acme;
pub mod caddy;
pub mod postgres;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;

use bulkhead_agent::{AgentSettings, Isolation, RunningAgent, WorkloadSize};
use bulkhead_simulators::aws::{AwsCredentials, AwsSimulator};
use bulkhead_simulators::dns::DnsSimulator;
use bulkhead_simulators::gcp::{GcpSimulator, service_account_generate};
use rand::Rng;
use rand::distr::Alphanumeric;

use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};

use crate::app::App;
use crate::app::providers::ProviderUpdate;
use crate::authz::{Credential, OpContext, Principal, Scope};
use crate::entity::user;

pub const GCP_PROJECT: &str = "bulkhead-dev";
pub const GCP_ZONE: &str = "us-central1-a";
pub const AWS_REGION: &str = "us-east-1";

/// The simulators and the agent of a local platform.
pub struct DevPlatform {
    pub gcp: GcpSimulator,
    pub aws: AwsSimulator,
    pub agent: RunningAgent,
    /// Answers domains' verification records: point `Settings::dns_resolver` at its
    /// `dns_addr`, publish with `txt_set` (or its HTTP API).
    pub dns: DnsSimulator,
    gcp_client_email: String,
    gcp_private_key: String,
    aws_credentials: (String, String),
    agent_token: String,
}

/// A random alphanumeric secret of `len` characters.
pub fn secret_random(len: usize) -> String {
    rand::rng()
        .sample_iter(Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

impl DevPlatform {
    /// Starts the simulators and an agent (its state in `data_dir/agent`) on loopback ports,
    /// with fresh credentials.
    pub async fn start(data_dir: &Path) -> anyhow::Result<Self> {
        let any_port = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let gcp_client_email = format!("bulkhead@{GCP_PROJECT}.iam.gserviceaccount.com");
        let (account, gcp_private_key) =
            tokio::task::spawn_blocking(move || service_account_generate(&gcp_client_email))
                .await?;
        let gcp_client_email = account.client_email.clone();
        let gcp = GcpSimulator::start(any_port, GCP_PROJECT, account).await?;
        let aws_credentials = (
            format!("AKID{}", secret_random(16).to_uppercase()),
            secret_random(40),
        );
        let aws = AwsSimulator::start(
            any_port,
            AWS_REGION,
            AwsCredentials {
                access_key_id: aws_credentials.0.clone(),
                secret_access_key: aws_credentials.1.clone(),
            },
        )
        .await?;
        let agent_token = secret_random(32);
        let mut agent_settings =
            AgentSettings::new(any_port, data_dir.join("agent"), agent_token.clone());
        // Used only where the agent cannot switch users (not root: a developer's machine);
        // as root, it gives each workload a user of its own all the same.
        agent_settings.insecure_same_user = true;
        // And, as root on a machine without iproute2 and nftables, in the host's network;
        // where it cannot make cgroups, without holding workloads to their sizes.
        agent_settings.insecure_shared_network = true;
        agent_settings.insecure_no_limits = true;
        // Its slots, as `bulkhead-agent` takes them (16 by default; benchmarks want more).
        if let Some(slots) = std::env::var("BULKHEAD_AGENT_SLOTS")
            .ok()
            .and_then(|slots| slots.parse().ok())
        {
            agent_settings.slots = slots;
        }
        // Its room: this machine's, and at least its slots' worth at the default size. A
        // developer's machine runs every service of a trial at once, so `dev` overcommits it
        // on purpose (a fleet's `bulkhead-agent` offers what its machine has unless told).
        let env = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|value| value.parse().ok())
        };
        let machine = bulkhead_agent::Allocatable::this_machine()?;
        let slots = agent_settings.slots;
        agent_settings.cpu_millis = Some(
            env("BULKHEAD_AGENT_CPU_MILLIS").unwrap_or(
                machine
                    .cpu_millis
                    .max(slots.saturating_mul(WorkloadSize::DEFAULT.cpu_millis)),
            ),
        );
        agent_settings.memory_mib = Some(
            env("BULKHEAD_AGENT_MEMORY_MIB").unwrap_or(
                machine
                    .memory_mib
                    .max(slots.saturating_mul(WorkloadSize::DEFAULT.memory_mib)),
            ),
        );
        // Several local platforms may run on one machine (the tests do): each agent takes
        // uids that no other holds.
        let agent = bulkhead_agent::start_in_free_uids(agent_settings).await?;
        let dns = DnsSimulator::start().await?;
        Ok(Self {
            gcp,
            aws,
            agent,
            dns,
            gcp_client_email,
            gcp_private_key,
            aws_credentials,
            agent_token,
        })
    }

    /// Who the agent's workloads run as, for people: `bulkhead dev` prints it.
    pub fn agent_isolation_note(&self) -> String {
        match self.agent.isolation {
            Isolation::UserPerWorkload(_) => {
                format!(
                    "{}; {}; {}; their sizes may add up to {}",
                    self.agent.isolation,
                    self.agent.network,
                    self.agent.limits,
                    self.agent.allocatable
                )
            }
            Isolation::SameUser => "INSECURE: not run as root, so its workloads run as your own \
                user and can read the agent's token, its state and each other's logs (run as \
                root to give each workload a user of its own)"
                .into(),
        }
    }

    /// The simulated GCP service account: its email and private key (PKCS#8 PEM).
    pub fn gcp_service_account(&self) -> (&str, &str) {
        (&self.gcp_client_email, &self.gcp_private_key)
    }

    /// The changes that point each bundled provider at this platform.
    pub fn provider_updates(&self) -> Vec<(&'static str, ProviderUpdate)> {
        let map = |pairs: &[(&str, String)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(key, value)| ((*key).to_owned(), value.clone()))
                .collect()
        };
        let secrets = |pairs: &[(&str, String)]| {
            pairs
                .iter()
                .map(|(key, value)| ((*key).to_owned(), Some(value.clone())))
                .collect()
        };
        // The platform's endpoints are listed, as an operator would list them: they are
        // loopback addresses, which a pattern opens only when listed (the configuration's
        // endpoints are names to reach, `Allowlist::with_endpoints`).
        let update = |config: BTreeMap<String, String>, secrets| ProviderUpdate {
            allowlist: Some(crate::plugins::endpoint_patterns(&config)),
            config: Some(config),
            secrets: Some(secrets),
            limits: None,
            enabled: Some(true),
            drained: Some(false),
        };
        vec![
            (
                "gcp",
                update(
                    map(&[
                        ("project", GCP_PROJECT.into()),
                        ("regions", GCP_ZONE.into()),
                        ("compute_endpoint", self.gcp.url()),
                        ("logging_endpoint", self.gcp.url()),
                        ("token_uri", self.gcp.token_url()),
                    ]),
                    secrets(&[
                        ("client_email", self.gcp_client_email.clone()),
                        ("private_key", self.gcp_private_key.clone()),
                    ]),
                ),
            ),
            (
                "aws",
                update(
                    map(&[
                        ("endpoint", self.aws.url()),
                        ("logs_endpoint", self.aws.url()),
                        ("regions", AWS_REGION.into()),
                    ]),
                    secrets(&[
                        ("access_key_id", self.aws_credentials.0.clone()),
                        ("secret_access_key", self.aws_credentials.1.clone()),
                    ]),
                ),
            ),
            (
                "metal",
                update(
                    map(&[("agents", self.agent.url()), ("regions", "local".into())]),
                    secrets(&[("agent_token", self.agent_token.clone())]),
                ),
            ),
        ]
    }

    /// Stops the agent's workloads and the simulators.
    pub async fn shutdown(self) {
        self.agent.shutdown_and_stop_workloads().await;
        let _ = self.gcp.server.shutdown().await;
        let _ = self.aws.server.shutdown().await;
        let _ = self.dns.shutdown().await;
    }
}

impl DevPlatform {
    /// Points the bundled providers of `app` at this platform (as its administrator) and
    /// checks that each works.
    pub async fn providers_configure(&self, app: &App) -> anyhow::Result<()> {
        let admin = user::Entity::find()
            .filter(user::Column::Email.eq(&app.settings.admin_email))
            .one(&app.db)
            .await?
            .ok_or_else(|| anyhow::anyhow!("no administrator {}", app.settings.admin_email))?;
        let ctx = OpContext {
            principal: Principal {
                user: admin,
                credential: Credential::Session(uuid::Uuid::nil()),
                scopes: [Scope::Admin].into(),
            },
            request_id: "bulkhead-dev".into(),
        };
        for (name, update) in self.provider_updates() {
            app.provider_update(&ctx, name, None, update)
                .await
                .map_err(|err| anyhow::anyhow!("configuring provider {name}: {err}"))?;
            // Probed with its credentials now, so that a breaker opened at start-up (when it
            // had none) lets calls through at once instead of at its next scheduled probe.
            let probe = app
                .provider_probe(&ctx.principal, name)
                .await
                .map_err(|err| anyhow::anyhow!("probing provider {name}: {err}"))?;
            if let Some(error) = probe.error {
                anyhow::bail!("provider {name} does not work against the local platform: {error}");
            }
        }
        Ok(())
    }
}

/// The demo workload (`bulkhead hello`): answers every request on `port` with
/// `{"instance": name, "port": port}`, until the process is stopped, and prints what it does
/// like an app would: a line when it starts, and one per request (`GET /path 200`) on stdout;
/// a request under `/fail` answers 500 and is printed on stderr.
pub async fn hello_serve(port: u16, name: String) -> anyhow::Result<()> {
    let body = serde_json::json!({ "instance": name, "port": port }).to_string() + "\n";
    let router = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let body = body.clone();
        async move {
            let path = request.uri().path();
            if path.starts_with("/fail") {
                eprintln!("{} {path} 500", request.method());
                return (
                    http::StatusCode::INTERNAL_SERVER_ERROR,
                    [(http::header::CONTENT_TYPE, "application/json")],
                    body,
                );
            }
            println!("{} {path} 200", request.method());
            (
                http::StatusCode::OK,
                [(http::header::CONTENT_TYPE, "application/json")],
                body,
            )
        }
    });
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).await?;
    println!("hello {name} listening on port {port}");
    axum::serve(listener, router).await?;
    Ok(())
}
