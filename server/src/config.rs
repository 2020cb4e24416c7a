//! Settings of `bulkhead serve`: command-line flags, then `BULKHEAD_*` environment variables,
//! then an optional TOML file, then defaults, in that order of precedence.
//!
//! Clap resolves flags over environment variables; [`FileSettings`] fills whatever neither set.
//! The bootstrap token and the secret key are secrets and come from the environment only (never
//! a flag, which would show in the process list, nor the file); the secret key may also be in a
//! key file of its own.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bulkhead_common::tls::server::ServerTls;

use crate::http::client_addr::ClientAddressHeader;
use crate::plugins::bundled::BundledPlugins;
use ipnet::IpNet;
use secrecy::SecretString;

use crate::app::identity::sign_in::throttle::LoginLimits;
use crate::app::shared::limits::{LimitsTable, TenantLimits};
use crate::app::shared::sizes::{ServiceSize, ServiceSizes};
use bulkhead_common::serve::ConnectionLimits;
use serde::Deserialize;

/// Flags (and their environment variables) of `bulkhead serve`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeArgs {
    /// A TOML file with any of the settings below (keys as the flag names, with `_`).
    #[arg(long, env = "BULKHEAD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address to listen on; port 0 picks a free port. The bound address is printed.
    #[arg(long, env = "BULKHEAD_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Serve HTTPS with this PEM certificate chain (with --tls-key); both files are re-read
    /// when they change, so a renewed certificate needs no restart. Without it, plain HTTP
    /// (behind a proxy that terminates TLS).
    #[arg(long = "tls-cert", env = "BULKHEAD_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long = "tls-key", env = "BULKHEAD_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Proxies (CIDRs or addresses, comma-separated) whose forwarding header names the
    /// client's address, for login limits and logs; from any other peer it is ignored.
    #[arg(
        long = "trusted-proxies",
        env = "BULKHEAD_TRUSTED_PROXIES",
        value_delimiter = ','
    )]
    pub trusted_proxies: Option<Vec<String>>,
    /// Private, loopback or link-local networks (CIDRs or addresses, comma-separated) that a
    /// project's outbound calls (webhooks, commit statuses to its forge) may still reach; by
    /// default none: a URL on such an address, or whose name resolves to one, is refused.
    #[arg(
        long = "webhook-allowed-networks",
        env = "BULKHEAD_WEBHOOK_ALLOWED_NETWORKS",
        value_delimiter = ','
    )]
    pub webhook_allowed_networks: Option<Vec<String>>,
    /// The header the trusted proxies write the client's address in: `x-forwarded-for` (what
    /// nginx, HAProxy, Caddy, Envoy and cloud load balancers write) or `forwarded` (RFC 7239).
    /// The other is ignored: a proxy passes it through as the client wrote it.
    #[arg(long = "client-address-header", env = "BULKHEAD_CLIENT_ADDRESS_HEADER")]
    pub client_address_header: Option<ClientAddressHeader>,
    /// Directory for the SQLite database and other local state (created if missing).
    #[arg(long, env = "BULKHEAD_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// `sqlite://PATH` or `postgres://...`; defaults to SQLite in the data directory.
    #[arg(long, env = "BULKHEAD_DATABASE_URL")]
    pub database_url: Option<String>,
    /// Origins of the dashboard allowed by CORS (comma-separated).
    #[arg(long, env = "BULKHEAD_CORS_ORIGINS", value_delimiter = ',')]
    pub cors_origins: Option<Vec<String>>,
    /// Seconds before a request is abandoned with 408.
    #[arg(long, env = "BULKHEAD_REQUEST_TIMEOUT_SECS")]
    pub request_timeout_secs: Option<u64>,
    /// Largest accepted request body, in bytes.
    #[arg(long, env = "BULKHEAD_BODY_LIMIT_BYTES")]
    pub body_limit_bytes: Option<usize>,
    /// Lifetime of JWT access tokens, in seconds.
    #[arg(long, env = "BULKHEAD_ACCESS_TOKEN_TTL_SECS")]
    pub access_token_ttl_secs: Option<u64>,
    /// Lifetime of refresh tokens, in seconds.
    #[arg(long, env = "BULKHEAD_REFRESH_TOKEN_TTL_SECS")]
    pub refresh_token_ttl_secs: Option<u64>,
    /// Email of the administrator created on an empty database.
    #[arg(long, env = "BULKHEAD_ADMIN_EMAIL")]
    pub admin_email: Option<String>,
    /// Log format: `text` or `json`.
    #[arg(long, env = "BULKHEAD_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Milliseconds between health probes of each provider (an unavailable provider is
    /// probed with backoff, from half of this up to six times it).
    #[arg(long, env = "BULKHEAD_PROVIDER_PROBE_INTERVAL_MS")]
    pub provider_probe_interval_ms: Option<u64>,
    /// A file holding the master key that encrypts secrets at rest (base64 of 32 bytes, mode
    /// 0600). Default: `BULKHEAD_SECRET_KEY` if set, else `<data-dir>/secret.key` (generated).
    #[arg(long, env = "BULKHEAD_SECRET_KEY_FILE")]
    pub secret_key_file: Option<PathBuf>,
    /// Provider operations (provision, deprovision) the deploy pipeline runs at once.
    #[arg(long, env = "BULKHEAD_DEPLOY_CONCURRENCY")]
    pub deploy_concurrency: Option<usize>,
    /// Provider operations the deploy pipeline starts per second on one provider.
    #[arg(long, env = "BULKHEAD_DEPLOY_PROVIDER_RATE")]
    pub deploy_provider_rate: Option<u32>,
    /// Milliseconds between passes of the deploy reconciler when nothing wakes it.
    #[arg(long, env = "BULKHEAD_RECONCILE_INTERVAL_MS")]
    pub reconcile_interval_ms: Option<u64>,
    /// Milliseconds a replaced instance keeps running after leaving the routes, before it is
    /// removed.
    #[arg(long, env = "BULKHEAD_DRAIN_GRACE_MS")]
    pub drain_grace_ms: Option<u64>,
    /// Login attempts a minute from one client address.
    #[arg(long, env = "BULKHEAD_LOGIN_RATE_PER_IP")]
    pub login_rate_per_ip: Option<u32>,
    /// Login attempts a minute for one account from one address, and from the addresses it has
    /// not signed in from lately, together.
    #[arg(long, env = "BULKHEAD_LOGIN_RATE_PER_ACCOUNT")]
    pub login_rate_per_account: Option<u32>,
    /// Password hashes computed at once (each takes ~19 MiB); default: the number of cores.
    #[arg(long, env = "BULKHEAD_PASSWORD_HASH_CONCURRENCY")]
    pub password_hash_concurrency: Option<usize>,
    /// Revisions of the routing table whose changes are kept (`/v1/routing-table/changes`);
    /// a client further behind fetches the whole table.
    #[arg(long, env = "BULKHEAD_ROUTING_HISTORY")]
    pub routing_history: Option<i64>,
    /// The URL other replicas, operators and edges reach this replica at, shown in
    /// `/v1/status` (default: the address it binds, which says little across machines).
    #[arg(long, env = "BULKHEAD_ADVERTISE_URL")]
    pub advertise_url: Option<String>,
    /// The DNS server (`ip:port`) asked for domains' verification records; default: the
    /// system's resolvers (`/etc/resolv.conf`).
    #[arg(long, env = "BULKHEAD_DNS_RESOLVER")]
    pub dns_resolver: Option<SocketAddr>,
    /// A cap on what one tenant creates, as NAME=N (repeat the flag, or separate with commas):
    /// projects_per_user (default 50), tokens_per_user (50), environments_per_project (20),
    /// services_per_project (100), domains_per_project (100), git_installations_per_project
    /// (10), webhook_endpoints_per_project (20), invitations_per_project (50),
    /// members_per_project (100).
    #[arg(long = "limit", env = "BULKHEAD_LIMITS", value_delimiter = ',')]
    pub limits: Option<Vec<String>>,
    /// The size of a service given none, as CPU_MILLIS:MEMORY_MIB (default 500:512: half a
    /// vCPU, 512 MiB).
    #[arg(long, env = "BULKHEAD_SERVICE_SIZE_DEFAULT")]
    pub service_size_default: Option<String>,
    /// The largest size a service may ask for, as CPU_MILLIS:MEMORY_MIB (default 8000:16384).
    #[arg(long, env = "BULKHEAD_SERVICE_SIZE_MAX")]
    pub service_size_max: Option<String>,
    /// Connections open at once; default: the open-file limit (raised to its hard limit) less
    /// 1024 kept for the database, plugins and outbound calls.
    #[arg(long, env = "BULKHEAD_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Connections open at once from one client address (an IPv6 /64); the trusted proxies
    /// count toward --max-connections only.
    #[arg(long, env = "BULKHEAD_MAX_CONNECTIONS_PER_ADDRESS")]
    pub max_connections_per_address: Option<usize>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The TOML file: the same settings as the flags, all optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    listen: Option<SocketAddr>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    trusted_proxies: Option<Vec<String>>,
    webhook_allowed_networks: Option<Vec<String>>,
    client_address_header: Option<ClientAddressHeader>,
    data_dir: Option<PathBuf>,
    database_url: Option<String>,
    cors_origins: Option<Vec<String>>,
    request_timeout_secs: Option<u64>,
    body_limit_bytes: Option<usize>,
    access_token_ttl_secs: Option<u64>,
    refresh_token_ttl_secs: Option<u64>,
    admin_email: Option<String>,
    log_format: Option<LogFormat>,
    provider_probe_interval_ms: Option<u64>,
    secret_key_file: Option<PathBuf>,
    deploy_concurrency: Option<usize>,
    deploy_provider_rate: Option<u32>,
    reconcile_interval_ms: Option<u64>,
    drain_grace_ms: Option<u64>,
    login_rate_per_ip: Option<u32>,
    login_rate_per_account: Option<u32>,
    password_hash_concurrency: Option<usize>,
    routing_history: Option<i64>,
    advertise_url: Option<String>,
    dns_resolver: Option<SocketAddr>,
    sign_in_providers: Option<Vec<SignInProvider>>,
    limits: Option<LimitsTable>,
    service_sizes: Option<ServiceSizesTable>,
    max_connections: Option<usize>,
    max_connections_per_address: Option<usize>,
}

/// `[service_sizes]`: `default = { cpu_millis = 500, memory_mib = 512 }`, `max = { ... }`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServiceSizesTable {
    default: Option<ServiceSize>,
    max: Option<ServiceSize>,
}

/// Resolved settings of a running server.
#[derive(Debug, Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    /// The certificate and key to serve HTTPS with, if not plain HTTP.
    pub tls: Option<ServerTls>,
    /// The proxies whose forwarding header is believed.
    pub trusted_proxies: Vec<IpNet>,
    /// Restricted networks a project's outbound calls (webhooks, commit statuses) may reach
    /// all the same (an operator's choice).
    pub webhook_allowed_networks: Vec<IpNet>,
    /// The header they write the client's address in.
    pub client_address_header: ClientAddressHeader,
    pub data_dir: PathBuf,
    pub database_url: String,
    pub cors_origins: Vec<String>,
    pub request_timeout: Duration,
    pub body_limit_bytes: usize,
    pub access_token_ttl: Duration,
    pub refresh_token_ttl: Duration,
    pub admin_email: String,
    pub log_format: LogFormat,
    /// Time between health probes of each provider.
    pub provider_probe_interval: Duration,
    /// `BULKHEAD_BOOTSTRAP_TOKEN`: the first administrator's API token, if set.
    pub bootstrap_token: Option<SecretString>,
    /// `BULKHEAD_BOOTSTRAP_PASSWORD`: the first administrator's password, if set (to sign in
    /// to the dashboard); without it the administrator has none until one is given.
    pub bootstrap_password: Option<SecretString>,
    /// Login rate limits and the password-hashing cap.
    pub login_limits: LoginLimits,
    /// Caps on what one tenant creates.
    pub limits: TenantLimits,
    /// The sizes services may have.
    pub service_sizes: ServiceSizes,
    /// How many connections are open at once, and how long a slow client is waited for.
    pub connections: ConnectionLimits,
    /// `BULKHEAD_SECRET_KEY`: the master key of secrets at rest (base64), if set.
    pub secret_key: Option<SecretString>,
    /// The key file of the master key, if not the environment's or the data directory's.
    pub secret_key_file: Option<PathBuf>,
    /// The deploy pipeline's limits and pace.
    pub deploy: DeploySettings,
    /// Revisions of the routing table whose changes are kept.
    pub routing_history: i64,
    /// Where this replica is reached (`http(s)://host[:port]`), if not at its bound address.
    pub advertise_url: Option<String>,
    /// The DNS server asked for domains' verification records, if not the system's.
    pub dns_resolver: Option<SocketAddr>,
    /// Outside identity providers users may sign in with (the config file's
    /// `[[sign_in_providers]]`); none by default.
    pub sign_in_providers: Vec<SignInProvider>,
    /// The plugins the binary bundles (none unless the binary sets them).
    pub bundled_plugins: BundledPlugins,
}

/// The deploy pipeline's limits and pace.
#[derive(Debug, Clone)]
pub struct DeploySettings {
    /// Provider operations in flight at once, across providers.
    pub concurrency: usize,
    /// Provider operations started per second on one provider.
    pub provider_rate: u32,
    /// Time between reconciler passes when nothing wakes it.
    pub reconcile_interval: Duration,
    /// How long a replaced instance keeps running after leaving the routes.
    pub drain_grace: Duration,
    /// How long a claim on an instance lasts unless renewed (a runner renews its claims while
    /// their operations run): a runner that dies mid-operation leaves its instance to another
    /// pass after this.
    pub claim_ttl: Duration,
    /// How long a running instance of a healthy deployment stays unhealthy before it gets a
    /// replacement (see `app::deploys::replacement`).
    pub unhealthy_replace_after: Duration,
}

impl Default for DeploySettings {
    fn default() -> Self {
        Self {
            concurrency: 8,
            provider_rate: 20,
            reconcile_interval: Duration::from_secs(1),
            drain_grace: Duration::from_secs(2),
            claim_ttl: Duration::from_secs(6),
            unhealthy_replace_after: Duration::from_secs(30),
        }
    }
}

impl Settings {
    /// Resolves `args` (flags over environment) over the TOML file over defaults.
    pub fn resolve(args: ServeArgs) -> anyhow::Result<Self> {
        let file = match &args.config {
            Some(path) => read_file_settings(path)?,
            None => FileSettings::default(),
        };
        let data_dir = args
            .data_dir
            .or(file.data_dir)
            .unwrap_or_else(|| PathBuf::from("data"));
        let database_url = args
            .database_url
            .or(file.database_url)
            .unwrap_or_else(|| format!("sqlite://{}", data_dir.join("bulkhead.db").display()));
        let bootstrap_token = std::env::var("BULKHEAD_BOOTSTRAP_TOKEN")
            .ok()
            .filter(|token| !token.is_empty())
            .map(SecretString::from);
        let bootstrap_password = std::env::var("BULKHEAD_BOOTSTRAP_PASSWORD")
            .ok()
            .filter(|password| !password.is_empty())
            .map(SecretString::from);
        let tls = ServerTls::from_flags(
            args.tls_cert.or(file.tls_cert),
            args.tls_key.or(file.tls_key),
        )?;
        let trusted_proxies = args
            .trusted_proxies
            .or(file.trusted_proxies)
            .unwrap_or_default()
            .iter()
            .map(|text| network_parse("trusted-proxies", text))
            .collect::<anyhow::Result<_>>()?;
        let webhook_allowed_networks = args
            .webhook_allowed_networks
            .or(file.webhook_allowed_networks)
            .unwrap_or_default()
            .iter()
            .map(|text| network_parse("webhook-allowed-networks", text))
            .collect::<anyhow::Result<_>>()?;
        Ok(Self {
            listen: args
                .listen
                .or(file.listen)
                .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 8080))),
            tls,
            trusted_proxies,
            webhook_allowed_networks,
            client_address_header: args
                .client_address_header
                .or(file.client_address_header)
                .unwrap_or_default(),
            data_dir,
            database_url,
            cors_origins: args.cors_origins.or(file.cors_origins).unwrap_or_default(),
            request_timeout: Duration::from_secs(
                args.request_timeout_secs
                    .or(file.request_timeout_secs)
                    .unwrap_or(30),
            ),
            body_limit_bytes: args
                .body_limit_bytes
                .or(file.body_limit_bytes)
                .unwrap_or(256 * 1024),
            access_token_ttl: Duration::from_secs(
                args.access_token_ttl_secs
                    .or(file.access_token_ttl_secs)
                    .unwrap_or(900),
            ),
            refresh_token_ttl: Duration::from_secs(
                args.refresh_token_ttl_secs
                    .or(file.refresh_token_ttl_secs)
                    .unwrap_or(30 * 24 * 3600),
            ),
            admin_email: args
                .admin_email
                .or(file.admin_email)
                .unwrap_or_else(|| "admin@bulkhead.local".into()),
            log_format: args.log_format.or(file.log_format).unwrap_or_default(),
            provider_probe_interval: Duration::from_millis(
                args.provider_probe_interval_ms
                    .or(file.provider_probe_interval_ms)
                    .unwrap_or(10_000)
                    .max(100),
            ),
            bootstrap_token,
            bootstrap_password,
            secret_key: std::env::var("BULKHEAD_SECRET_KEY")
                .ok()
                .filter(|key| !key.is_empty())
                .map(SecretString::from),
            secret_key_file: args.secret_key_file.or(file.secret_key_file),
            deploy: {
                let default = DeploySettings::default();
                DeploySettings {
                    concurrency: args
                        .deploy_concurrency
                        .or(file.deploy_concurrency)
                        .unwrap_or(default.concurrency)
                        .max(1),
                    provider_rate: args
                        .deploy_provider_rate
                        .or(file.deploy_provider_rate)
                        .unwrap_or(default.provider_rate)
                        .max(1),
                    reconcile_interval: args
                        .reconcile_interval_ms
                        .or(file.reconcile_interval_ms)
                        .map(|ms| Duration::from_millis(ms.max(50)))
                        .unwrap_or(default.reconcile_interval),
                    drain_grace: args
                        .drain_grace_ms
                        .or(file.drain_grace_ms)
                        .map(Duration::from_millis)
                        .unwrap_or(default.drain_grace),
                    claim_ttl: default.claim_ttl,
                    unhealthy_replace_after: default.unhealthy_replace_after,
                }
            },
            bundled_plugins: BundledPlugins::default(),
            routing_history: args
                .routing_history
                .or(file.routing_history)
                .unwrap_or(1000)
                .max(1),
            advertise_url: args
                .advertise_url
                .or(file.advertise_url)
                .map(|url| advertise_url_parse(&url))
                .transpose()?,
            dns_resolver: args.dns_resolver.or(file.dns_resolver),
            sign_in_providers: sign_in_providers_check(file.sign_in_providers.unwrap_or_default())?,
            connections: {
                let mut connections = ConnectionLimits::for_this_process();
                if let Some(max) = args.max_connections.or(file.max_connections) {
                    anyhow::ensure!(max > 0, "--max-connections must be at least 1");
                    connections.max_open = max;
                }
                if let Some(max) = args
                    .max_connections_per_address
                    .or(file.max_connections_per_address)
                {
                    anyhow::ensure!(max > 0, "--max-connections-per-address must be at least 1");
                    connections.max_per_address = max;
                }
                connections
            },
            limits: {
                let mut limits = TenantLimits::default();
                for (name, value) in file.limits.unwrap_or_default() {
                    limits.set(&name, value)?;
                }
                limits.set_all(args.limits.iter().flatten().map(String::as_str))?;
                limits
            },
            service_sizes: {
                let table = file.service_sizes.unwrap_or_default();
                let flag = |text: Option<String>, name: &str| {
                    text.map(|text| {
                        ServiceSizes::parse_size(&text)
                            .map_err(|why| anyhow::anyhow!("{name}: {why}"))
                    })
                    .transpose()
                };
                let defaults = ServiceSizes::default();
                let sizes = ServiceSizes {
                    default: flag(args.service_size_default, "--service-size-default")?
                        .or(table.default)
                        .unwrap_or(defaults.default),
                    max: flag(args.service_size_max, "--service-size-max")?
                        .or(table.max)
                        .unwrap_or(defaults.max),
                };
                sizes.validate().map_err(anyhow::Error::msg)?;
                sizes
            },
            login_limits: {
                let default = LoginLimits::default();
                LoginLimits {
                    per_ip_per_minute: args
                        .login_rate_per_ip
                        .or(file.login_rate_per_ip)
                        .unwrap_or(default.per_ip_per_minute),
                    per_account_per_minute: args
                        .login_rate_per_account
                        .or(file.login_rate_per_account)
                        .unwrap_or(default.per_account_per_minute),
                    concurrent_hashes: args
                        .password_hash_concurrency
                        .or(file.password_hash_concurrency)
                        .unwrap_or(default.concurrent_hashes),
                }
            },
        })
    }
}

/// A trusted proxy: a CIDR (`10.0.0.0/8`) or one address.
/// An advertised URL: `http` or `https`, a host, no credentials, path, query or fragment
/// (trailing `/` dropped).
fn advertise_url_parse(text: &str) -> anyhow::Result<String> {
    let url = reqwest::Url::parse(text)
        .map_err(|err| anyhow::anyhow!("--advertise-url `{text}` is not a URL: {err}"))?;
    anyhow::ensure!(
        matches!(url.scheme(), "http" | "https")
            && url.host().is_some()
            && url.username().is_empty()
            && url.password().is_none()
            && url.path() == "/"
            && url.query().is_none()
            && url.fragment().is_none(),
        "--advertise-url `{text}` must be http(s)://host[:port], nothing more"
    );
    Ok(text.trim_end_matches('/').to_owned())
}

/// What kind of identity provider a sign-in provider is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SignInProviderKind {
    /// GitHub's OAuth apps: the account is `GET {userinfo_url}`'s `id` and `login`.
    Github,
    /// OpenID Connect: discovered from `issuer`; the account is the validated ID token's `sub`
    /// (its email from the userinfo endpoint, whose `sub` must be the same).
    Oidc,
}

/// How the client authenticates at an OpenID Provider's token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenEndpointAuthMethod {
    /// HTTP Basic authentication (OpenID Connect's default).
    ClientSecretBasic,
    /// `client_id` and `client_secret` in the form body.
    ClientSecretPost,
}

/// An outside identity provider (`[[sign_in_providers]]` in the config file). For `github`
/// the URLs default to github.com's; an `oidc` one is found from its `issuer` (discovery).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignInProvider {
    /// `[a-z0-9-]`, 1 to 64: in the API's paths.
    pub name: String,
    pub kind: SignInProviderKind,
    /// An `oidc` provider's issuer: its metadata is at `{issuer}/.well-known/openid-configuration`.
    pub issuer: Option<String>,
    /// An `oidc` provider's client authentication: `client_secret_basic` unless the provider
    /// offers only `client_secret_post`.
    pub token_endpoint_auth_method: Option<TokenEndpointAuthMethod>,
    /// `github` only (`oidc` providers say theirs).
    pub authorize_url: Option<String>,
    pub token_url: Option<String>,
    pub userinfo_url: Option<String>,
    pub client_id: String,
    /// Never logged or shown.
    pub client_secret: String,
    /// Where the provider sends the browser back (the dashboard's page that finishes the
    /// sign-in); registered with the provider.
    pub redirect_uri: String,
    #[serde(default)]
    pub scopes: Vec<String>,
}

impl std::fmt::Debug for SignInProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignInProvider")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

impl SignInProvider {
    pub fn authorize_url(&self) -> &str {
        self.authorize_url
            .as_deref()
            .unwrap_or("https://github.com/login/oauth/authorize")
    }

    pub fn token_url(&self) -> &str {
        self.token_url
            .as_deref()
            .unwrap_or("https://github.com/login/oauth/access_token")
    }

    pub fn userinfo_url(&self) -> &str {
        self.userinfo_url
            .as_deref()
            .unwrap_or("https://api.github.com/user")
    }
}

/// Checks the providers: names well formed and unique, the URLs of an `oidc` one given, every
/// URL `https` (or `http` to loopback).
fn sign_in_providers_check(providers: Vec<SignInProvider>) -> anyhow::Result<Vec<SignInProvider>> {
    let mut names = std::collections::HashSet::new();
    for provider in &providers {
        let name = &provider.name;
        anyhow::ensure!(
            (1..=64).contains(&name.len())
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "sign_in_providers: `{name}` must be 1 to 64 of a-z, 0-9 and -"
        );
        anyhow::ensure!(
            names.insert(name.clone()),
            "sign_in_providers: `{name}` twice"
        );
        let urls = match provider.kind {
            SignInProviderKind::Oidc => {
                anyhow::ensure!(
                    provider.authorize_url.is_none()
                        && provider.token_url.is_none()
                        && provider.userinfo_url.is_none(),
                    "sign_in_providers: `{name}` (oidc) is found from its `issuer`: remove authorize_url, token_url and userinfo_url"
                );
                let issuer = provider.issuer.as_deref().ok_or_else(|| {
                    anyhow::anyhow!("sign_in_providers: `{name}` (oidc) needs `issuer`")
                })?;
                vec![issuer, &provider.redirect_uri]
            }
            SignInProviderKind::Github => {
                anyhow::ensure!(
                    provider.issuer.is_none() && provider.token_endpoint_auth_method.is_none(),
                    "sign_in_providers: `{name}` (github) takes no `issuer` or `token_endpoint_auth_method`"
                );
                vec![
                    provider.authorize_url(),
                    provider.token_url(),
                    provider.userinfo_url(),
                    &provider.redirect_uri,
                ]
            }
        };
        for url in urls {
            let parsed = url::Url::parse(url)
                .map_err(|err| anyhow::anyhow!("sign_in_providers: `{name}`: `{url}`: {err}"))?;
            let loopback = matches!(parsed.host_str(), Some("127.0.0.1" | "localhost" | "[::1]"));
            anyhow::ensure!(
                parsed.scheme() == "https" || (parsed.scheme() == "http" && loopback),
                "sign_in_providers: `{name}`: `{url}` must be https (http only to loopback)"
            );
        }
    }
    Ok(providers)
}

fn network_parse(flag: &str, text: &str) -> anyhow::Result<IpNet> {
    let text = text.trim();
    text.parse::<IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from))
        .map_err(|_| anyhow::anyhow!("--{flag}: `{text}` is not a CIDR or an address"))
}

fn read_file_settings(path: &Path) -> anyhow::Result<FileSettings> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| anyhow::anyhow!("cannot read config file {}: {err}", path.display()))?;
    toml::from_str(&text)
        .map_err(|err| anyhow::anyhow!("invalid config file {}: {err}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_sizes_come_from_flags_over_the_file_over_defaults_and_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bulkhead.toml");
        std::fs::write(
            &file,
            "[service_sizes]\ndefault = { cpu_millis = 250, memory_mib = 256 }\n\
             max = { cpu_millis = 2000, memory_mib = 4096 }\n",
        )
        .unwrap();
        let args = |default: Option<&str>, max: Option<&str>| ServeArgs {
            config: Some(file.clone()),
            data_dir: Some(dir.path().to_owned()),
            service_size_default: default.map(str::to_owned),
            service_size_max: max.map(str::to_owned),
            ..ServeArgs::default()
        };
        let sizes = |cpu_millis, memory_mib| ServiceSize {
            cpu_millis,
            memory_mib,
        };
        let from_file = Settings::resolve(args(None, None)).unwrap().service_sizes;
        assert_eq!(from_file.default, sizes(250, 256));
        assert_eq!(from_file.max, sizes(2000, 4096));
        let flagged = Settings::resolve(args(Some("1000:1024"), None))
            .unwrap()
            .service_sizes;
        assert_eq!(flagged.default, sizes(1000, 1024));
        for (default, max, says) in [
            (Some("3000:1024"), None, "service_sizes.default.cpu_millis"),
            (None, Some("100:64"), "service_sizes.default.cpu_millis"),
            (None, Some("300000:1024"), "service_sizes.max.cpu_millis"),
            (Some("500"), None, "CPU_MILLIS:MEMORY_MIB"),
        ] {
            let err = Settings::resolve(args(default, max)).unwrap_err();
            assert!(format!("{err:#}").contains(says), "{err:#}");
        }
        assert!(from_file.check(sizes(2000, 4096)).is_ok());
        assert!(from_file.check(sizes(2001, 4096)).is_err());
        assert!(from_file.check(sizes(9, 4096)).is_err());
    }

    #[test]
    fn an_advertised_url_is_a_scheme_a_host_and_a_port_only() {
        for good in ["https://cp-1.example.com", "http://10.0.0.7:8080/"] {
            assert!(super::advertise_url_parse(good).is_ok(), "{good}");
        }
        assert_eq!(
            super::advertise_url_parse("https://cp.example.com:8443/").unwrap(),
            "https://cp.example.com:8443"
        );
        for bad in [
            "cp-1.example.com",
            "ftp://cp.example.com",
            "https://user:pass@cp.example.com",
            "https://cp.example.com/v1",
            "https://cp.example.com/?a=1",
        ] {
            assert!(super::advertise_url_parse(bad).is_err(), "{bad}");
        }
    }
}
