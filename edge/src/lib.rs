//! The edge agent (`bulkhead-edge`, also `bulkhead edge`): the agent next to a proxy (Caddy) on
//! each edge machine, which keeps the proxy routing whatever happens to the control plane. A
//! crate of its own, with no server code in it: what it shares with the control plane is the
//! routing table (`bulkhead-routing`).
//!
//! - At start it loads its last-known-good snapshot from disk ([`store`]) and applies it
//!   before contacting anyone.
//! - It syncs from its sources in order ([`sync`]): control planes (watched), then mirrors and
//!   files (polled); it accepts only a snapshot signed by a trusted key, newer than the one it
//!   has, that does not drop more than `max_drop` of the routes or upstreams unless marked
//!   intended ([`guard`]). Each accepted snapshot is written to disk atomically.
//! - It keeps Caddy serving the accepted table through Caddy's admin API, and applies it again
//!   when Caddy restarts ([`caddy`]): over HTTPS by default, with certificates Caddy obtains on
//!   demand from an ACME CA after asking the agent, which answers from its snapshot alone
//!   ([`certificates`]), so certificates load, renew and issue while no control plane answers.
//! - It never withdraws a route because the control plane is unreachable or the table is old:
//!   staleness is a metric and a warning. It serves `/metrics` and `/healthz` and reports its
//!   revision and certificates to the control plane ([`status`]).

pub mod caddy;
pub mod certificates;
pub mod guard;
pub mod status;
pub mod store;
pub mod sync;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use bulkhead_routing::{RoutingTable, TrustedKeys};

/// The edge agent's flags.
#[derive(Debug, Clone, clap::Args)]
pub struct EdgeArgs {
    /// This edge's id, as the control plane lists it (lowercase letters, digits, '-').
    #[arg(long, env = "BULKHEAD_EDGE_ID")]
    pub id: String,
    /// Control-plane base URLs, in order of preference: the first that answers is watched.
    #[arg(
        long = "control-plane",
        env = "BULKHEAD_EDGE_CONTROL_PLANES",
        value_delimiter = ','
    )]
    pub control_planes: Vec<String>,
    /// URLs of mirrors of the signed snapshot document (any static server), polled after the
    /// control planes.
    #[arg(long = "mirror", env = "BULKHEAD_EDGE_MIRRORS", value_delimiter = ',')]
    pub mirrors: Vec<String>,
    /// Files holding a signed snapshot document, polled last.
    #[arg(long = "file", env = "BULKHEAD_EDGE_FILES", value_delimiter = ',')]
    pub files: Vec<PathBuf>,
    /// A file with an API token with the `routing:read` scope, readable by this user alone
    /// (mode 0600).
    #[arg(long, env = "BULKHEAD_EDGE_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// The keys document to trust (what `GET /v1/routing-table/keys` answers); re-read when a
    /// snapshot names a key it lacks.
    #[arg(long, env = "BULKHEAD_EDGE_TRUSTED_KEYS")]
    pub trusted_keys: PathBuf,
    /// A PEM file of the CA certificates that sign the control planes' and mirrors'
    /// certificates (a private CA), trusted instead of the platform's roots.
    #[arg(long = "ca-file", env = "BULKHEAD_EDGE_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// Where the last-known-good snapshot is kept.
    #[arg(long, env = "BULKHEAD_EDGE_STATE_DIR", default_value = "data/edge")]
    pub state_dir: PathBuf,
    /// Caddy's admin API.
    #[arg(
        long,
        env = "BULKHEAD_EDGE_CADDY_ADMIN",
        default_value = "http://127.0.0.1:2019"
    )]
    pub caddy_admin: String,
    /// Where Caddy serves plain HTTP (`host:port` or `:port`): redirects to HTTPS and ACME's
    /// HTTP-01 challenges, or the routes themselves with `--plain-http`.
    #[arg(long, env = "BULKHEAD_EDGE_CADDY_LISTEN", default_value = ":80")]
    pub caddy_listen: String,
    /// Where Caddy serves HTTPS (`host:port` or `:port`).
    #[arg(long, env = "BULKHEAD_EDGE_CADDY_LISTEN_TLS", default_value = ":443")]
    pub caddy_listen_tls: String,
    /// Serve the routes over plain HTTP alone, with no certificates: for an edge behind a
    /// load balancer that terminates TLS.
    #[arg(long, env = "BULKHEAD_EDGE_PLAIN_HTTP")]
    pub plain_http: bool,
    /// The ACME CA's directory URL that certificates are obtained from.
    #[arg(long, env = "BULKHEAD_EDGE_ACME_CA", default_value = certificates::LETS_ENCRYPT)]
    pub acme_ca: String,
    /// The address the ACME CA writes to about certificates (expiry, revocation).
    #[arg(long, env = "BULKHEAD_EDGE_ACME_EMAIL")]
    pub acme_email: Option<String>,
    /// PEM files of the roots that sign the ACME CA's own HTTPS certificate (a private CA).
    #[arg(
        long = "acme-ca-root",
        env = "BULKHEAD_EDGE_ACME_CA_ROOTS",
        value_delimiter = ','
    )]
    pub acme_ca_roots: Vec<PathBuf>,
    /// The directory Caddy keeps certificates in (default: `certificates` in the state
    /// directory). A directory shared by a fleet's edges (a network file system) makes one
    /// certificate per domain serve them all.
    #[arg(long, env = "BULKHEAD_EDGE_CERTIFICATE_STORAGE")]
    pub certificate_storage: Option<PathBuf>,
    /// Where the agent serves `/metrics`, `/healthz` and `/tls/ask` (the question Caddy asks
    /// before it obtains a certificate; keep it on loopback or a private network).
    #[arg(long, env = "BULKHEAD_EDGE_LISTEN", default_value = "127.0.0.1:9180")]
    pub listen: SocketAddr,
    /// The largest share (0 to 1) of routes or upstreams a snapshot may drop unless it is
    /// marked intended.
    #[arg(long, env = "BULKHEAD_EDGE_MAX_DROP", default_value_t = 0.5)]
    pub max_drop: f64,
    /// Milliseconds between polls of mirrors and files, and between tries of control planes
    /// that did not answer.
    #[arg(long, env = "BULKHEAD_EDGE_POLL_INTERVAL_MS", default_value_t = 5000)]
    pub poll_interval_ms: u64,
    /// Seconds without a source confirming the table before staleness is warned about.
    #[arg(long, env = "BULKHEAD_EDGE_STALE_AFTER_SECS", default_value_t = 300)]
    pub stale_after_secs: u64,
}

/// Resolved settings of an edge agent.
#[derive(Debug, Clone)]
pub struct EdgeSettings {
    pub id: String,
    pub sources: Vec<sync::Source>,
    pub token: Option<String>,
    pub trusted_keys: PathBuf,
    pub ca_file: Option<PathBuf>,
    pub state_dir: PathBuf,
    pub caddy_admin: String,
    pub caddy_listen: String,
    /// HTTPS with certificates on demand; `None` serves plain HTTP alone.
    pub tls: Option<certificates::EdgeTls>,
    pub listen: SocketAddr,
    pub max_drop: f64,
    pub poll_interval: Duration,
    pub stale_after: Duration,
}

impl EdgeSettings {
    pub fn resolve(args: EdgeArgs) -> anyhow::Result<Self> {
        bulkhead_common::names::slug_validate("id", &args.id)
            .map_err(|err| anyhow::anyhow!("--id: {err}"))?;
        anyhow::ensure!(
            (0.0..=1.0).contains(&args.max_drop),
            "--max-drop must be between 0 and 1"
        );
        let token = args
            .token_file
            .as_deref()
            .map(|path| bulkhead_common::secret_file::token_file_read(path, "the edge's token"))
            .transpose()?;
        let sources = sync::Source::list(&args.control_planes, &args.mirrors, &args.files)?;
        let tls = if args.plain_http {
            None
        } else {
            Some(certificates::EdgeTls::resolve(
                args.caddy_listen_tls,
                &args.acme_ca,
                args.acme_email,
                args.acme_ca_roots,
                args.certificate_storage
                    .unwrap_or_else(|| args.state_dir.join("certificates")),
            )?)
        };
        anyhow::ensure!(
            !sources.is_empty(),
            "give at least one source: --control-plane, --mirror or --file"
        );
        anyhow::ensure!(
            token.is_some() || args.control_planes.is_empty(),
            "a control plane needs --token-file (an API token with the `routing:read` scope)"
        );
        Ok(Self {
            id: args.id,
            sources,
            token,
            trusted_keys: args.trusted_keys,
            ca_file: args.ca_file,
            state_dir: args.state_dir,
            caddy_admin: args.caddy_admin.trim_end_matches('/').to_owned(),
            caddy_listen: args.caddy_listen,
            tls,
            listen: args.listen,
            max_drop: args.max_drop,
            poll_interval: Duration::from_millis(args.poll_interval_ms.max(50)),
            stale_after: Duration::from_secs(args.stale_after_secs),
        })
    }
}

/// The snapshot the edge serves.
#[derive(Debug, Clone)]
pub struct Applied {
    pub table: RoutingTable,
    /// The signed document, as written to disk.
    pub document: Arc<Vec<u8>>,
}

/// What the edge knows, shared by its tasks.
#[derive(Debug, Default)]
pub struct EdgeState {
    pub applied: Option<Applied>,
    /// The revision Caddy was last given successfully.
    pub caddy_revision: Option<i64>,
    /// When a source last confirmed the table (sent it, or said it is unchanged).
    pub confirmed_at: Option<Instant>,
    /// Whether a control plane's watch is connected (the table is current while it is).
    pub watching: bool,
    /// The source the table last came from or was confirmed by.
    pub source: Option<String>,
    /// The last snapshot refused: revision and reason.
    pub last_refusal: Option<(i64, String)>,
    /// The certificates of the table's domains, by hostname (with HTTPS).
    pub certificates: std::collections::BTreeMap<String, certificates::CertificateStatus>,
}

impl EdgeState {
    pub fn revision(&self) -> i64 {
        self.applied.as_ref().map_or(0, |a| a.table.revision)
    }

    /// Whether `domain` has a route in the table served (routes are sorted by domain).
    pub fn routes_domain(&self, domain: &str) -> bool {
        self.applied.as_ref().is_some_and(|applied| {
            applied
                .table
                .routes
                .binary_search_by(|route| route.domain.as_str().cmp(domain))
                .is_ok()
        })
    }

    /// The last refusal as reported: `{ "revision", "reason" }`.
    pub fn last_refusal_json(&self) -> Option<serde_json::Value> {
        self.last_refusal.as_ref().map(|(revision, reason)| {
            serde_json::json!({
                "revision": revision,
                "reason": reason.chars().take(500).collect::<String>(),
            })
        })
    }

    /// How long since a source confirmed the table (zero while a watch is connected).
    pub fn staleness(&self) -> Option<Duration> {
        if self.watching {
            return Some(Duration::ZERO);
        }
        self.confirmed_at.map(|at| at.elapsed())
    }
}

/// An edge agent's shared parts.
pub struct Edge {
    pub settings: EdgeSettings,
    pub state: Mutex<EdgeState>,
    pub trusted: Mutex<TrustedKeys>,
    /// Bumped when a table is accepted or refused (Caddy and the control plane are told).
    pub accepted: watch::Sender<u64>,
    pub http: reqwest::Client,
    /// Where `/metrics`, `/healthz` and the certificates' permission endpoint are served.
    pub status_addr: SocketAddr,
}

impl Edge {
    pub fn state(&self) -> std::sync::MutexGuard<'_, EdgeState> {
        self.state.lock().expect("not poisoned")
    }

    /// Wakes the tasks that follow what was accepted or refused.
    pub fn news(&self) {
        self.accepted
            .send_modify(|count| *count = count.wrapping_add(1));
    }
}

/// A running edge agent.
pub struct RunningEdge {
    pub edge: Arc<Edge>,
    /// Where `/metrics` and `/healthz` are served.
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningEdge {
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            task.abort();
            let _ = task.await;
        }
    }
}

/// Starts an edge agent: loads the last-known-good snapshot, then runs its tasks.
pub async fn start(settings: EdgeSettings) -> anyhow::Result<RunningEdge> {
    let trusted =
        TrustedKeys::from_document(&std::fs::read(&settings.trusted_keys).map_err(|err| {
            anyhow::anyhow!(
                "reading the trusted keys {}: {err}",
                settings.trusted_keys.display()
            )
        })?)?;
    anyhow::ensure!(
        !trusted.is_empty(),
        "{} lists no key to trust",
        settings.trusted_keys.display()
    );
    bulkhead_common::files::private_dir_create(&settings.state_dir)?;
    let http = bulkhead_common::tls::http_client_builder(settings.ca_file.as_deref())?
        .connect_timeout(Duration::from_secs(2))
        // A watch sends a heartbeat every 15 s: a silent connection is dead.
        .read_timeout(Duration::from_secs(45))
        .build()?;
    let listener = tokio::net::TcpListener::bind(settings.listen).await?;
    let edge = Arc::new(Edge {
        state: Mutex::default(),
        trusted: Mutex::new(trusted),
        accepted: watch::channel(0).0,
        http,
        status_addr: listener.local_addr()?,
        settings,
    });
    match store::load(
        &edge.settings.state_dir,
        &edge.trusted.lock().expect("not poisoned"),
    ) {
        Ok(Some(applied)) => {
            tracing::info!(
                revision = applied.table.revision,
                routes = applied.table.routes.len(),
                "loaded the last-known-good routing table from disk"
            );
            status::applied_metrics(&applied.table);
            edge.state().applied = Some(applied);
        }
        Ok(None) => tracing::info!("no routing table on disk yet"),
        Err(err) => {
            tracing::error!(error = %err, "the routing table on disk was refused; waiting for a source")
        }
    }
    let (stop, stopped) = watch::channel(false);
    let addr = edge.status_addr;
    let mut tasks = vec![
        tokio::spawn(caddy::keep(edge.clone(), stopped.clone())),
        tokio::spawn(sync::run(edge.clone(), stopped.clone())),
        tokio::spawn(status::report_run(edge.clone(), stopped.clone())),
        tokio::spawn(status::serve(edge.clone(), listener, stopped.clone())),
    ];
    if edge.settings.tls.is_some() {
        tasks.push(tokio::spawn(certificates::follow(edge.clone(), stopped)));
    }
    Ok(RunningEdge {
        edge,
        addr,
        stop,
        tasks,
    })
}

/// Runs an edge agent as a process until SIGINT or SIGTERM: what `bulkhead-edge` and
/// `bulkhead edge` do.
pub async fn run(args: EdgeArgs) -> anyhow::Result<()> {
    bulkhead_common::tls::crypto_provider_install();
    bulkhead_common::process::logging_init(false);
    let settings = EdgeSettings::resolve(args)?;
    let stop = bulkhead_common::process::shutdown_signal()?;
    let edge = start(settings).await?;
    println!(
        "bulkhead edge: /metrics and /healthz on http://{}",
        edge.addr
    );
    stop.await;
    edge.shutdown().await;
    Ok(())
}
